"""ComGNN (Kazadi, Doss-Gollin, Silva, ICML 2024): hydraulics-informed message passing for pluvial flood
emulation on real DEM regions, its baselines, and the ``floodgnn`` workload.

``config`` holds the typed config `FloodGNNConfig` and its check (torch-free), ``workload`` the
`FloodGNNWorkload`, ``models`` ComGNN, the message-passing baseline and Rain-Incr, ``terrain`` the
DEM regions and their D8 graphs, ``hydraulics`` the shallow-water solver that simulates the storms,
``data`` the (region, storm) combinations and their split, ``metrics`` the rollout, the loss and
the metrics, and ``report`` the report sections.
"""
