"""What a training rank imports before it computes anything (`testbed.pretrain.ds_worker`): a
sweep's warm server imports this module for pretrain variants, so that a rank forked from a
variant's zygote (`testbed.engines.warm.zygote`) starts with them imported (2-3 s of a fresh
``python -m`` at test size).

DeepSpeed is imported here only from a torch built without CUDA or ROCm: importing it picks the
accelerator, which on a GPU build queries the driver, and a process that has done so cannot give
its forked children CUDA. On a CPU build that choice is ``cpu`` either way: ``DS_ACCELERATOR=cpu``
is what `testbed.engines.processes.accelerator_environment` gives every rank there, and it keeps
DeepSpeed from warning that it guessed.
"""

from __future__ import annotations

import importlib
import os

import torch

RANK_MODULES = ("testbed.pretrain.ds_worker",)

for _name in RANK_MODULES:
    importlib.import_module(_name)
if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    importlib.import_module("deepspeed")
