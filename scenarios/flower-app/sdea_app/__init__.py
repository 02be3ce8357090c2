"""SDEA against Byzantine clients as a plain Flower App (`flwr run`), built on testbed.strategies."""
