"""Flower strategies (SDEA and robust baselines) and Byzantine attacks."""
