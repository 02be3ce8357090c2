"""Pretraining: packing, small language models, OutEffHop attention, DeepSpeed runner."""
