"""GPGVAE: gated-prior graph VAEs for the latent structure of network games (Yu et al., ICML 2024).

``config`` holds the typed config `GPGVAEConfig` and its check (torch-free), ``workload`` the
`GPGVAEWorkload`, ``games`` the network games and their graphs, ``model`` the interaction-type
classifier, the edge encoder and the ELBO, and ``report`` the report sections.
"""
