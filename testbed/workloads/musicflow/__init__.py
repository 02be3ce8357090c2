"""MusicFlow: cascaded flow matching for text-guided music generation (Prajwal et al., ICML 2024), in miniature.

``config`` holds the typed config `MusicFlowConfig` and its check (torch-free), ``workload`` the
`MusicFlowWorkload`, ``data`` the synthetic melodies and their acoustic and semantic features,
``flow`` the flow networks, the masked objective and the samplers, ``metrics`` the evaluation
classifier, Frechet distance, infilling error and chroma agreement, and ``report`` the report
sections.
"""
