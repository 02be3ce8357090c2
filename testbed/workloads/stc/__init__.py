"""STC: spiking neurons with autaptic spatio-temporal circuits (Wang & Yu, ICML 2024) as a miniature.

``config`` holds the typed config `STCConfig` and its check (torch-free), ``workload`` the
`STCWorkload` (also a federated client workload), ``neurons`` the LIF / PLIF / STC-LIF layers,
``network`` the spiking predictor, ``data`` the delayed-recall task, ``metrics`` MSE, MAE, SSIM and
PSNR of frames, and ``report`` the report sections. The sequences are the ``moving_digits``
dataset of `testbed.data` (`testbed.data.moving_digits`).
"""
