"""Cluster helpers: Ray cluster configs, Slurm template, DeepSpeed hostfiles and MPI launch."""
