"""PPAE: prompt-guided precise audio editing with diffusion models (Xu et al., ICML 2024), in miniature.

``config`` holds the typed config `PPAEConfig` and its check (torch-free), ``workload`` the
`PPAEWorkload`, ``data`` the synthetic clips of labelled events and their captions, ``model`` the
text-conditioned denoiser with its cross-attention control, ``editing`` DDIM inversion and the
editing pipelines (PPAE, regeneration, SDEdit), ``metrics`` the event classifier, LSD and mask IoU,
and ``report`` the report sections.
"""
