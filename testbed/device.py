"""Where a run's tensors live: the scenario's top-level ``device:`` setting and its resolution.

```yaml
device: auto      # default: CUDA when this machine has it and the run can use it, else the CPU
device: cpu       # the CPU, even on a machine with a GPU
device: cuda      # the current CUDA device; refused by validate where there is none
device: cuda:1    # one GPU of several (workload and federated kinds)
```

What can run on CUDA is declared by the code that runs: a workload says so with its class's
``supports_cuda`` (`testbed.workloads.base.Workload`); the pretraining kind places rank i on GPU i
(so it takes ``cuda``, not ``cuda:N``); the decentralized kind runs on the CPU. ``auto`` on a machine
with CUDA and a workload that does not support it runs on the CPU and says so in the run's log.

The schema (`testbed.scenario`) accepts only these four forms; `preflight_device` refuses, in one
line naming the file and ``device``, one that the machine or the scenario cannot honour (with
``auto`` or ``cpu`` it imports nothing: validation stays torch-free).
`run_device` resolves the setting in the process that trains (the driver records it in the run's
summary.json as ``device``); on the CPU every number is the one a run without the setting gives.
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING

from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.scenario import Scenario

# The kinds whose training code moves models and batches to the run's device; the decentralized
# kind's nodes train on the CPU.
CUDA_KINDS = ("workload", "federated", "pretrain")


class DeviceNote(UserWarning):
    """A run with ``device: auto`` that runs on the CPU although CUDA is present (lands in log.txt)."""


def resolve(setting: str, supported: bool, cuda_available: bool) -> str:
    """The device a run with ``setting`` trains on: ``auto`` is CUDA where this process sees a CUDA
    device (``cuda_available``) and the run's code can train on it (``supported``), else the CPU; an
    explicit ``cpu`` or ``cuda[:N]`` is kept (the preflight refused one that cannot run)."""
    if setting != "auto":
        return setting
    return "cuda" if cuda_available and supported else "cpu"


def cuda_refusal(kind: str, workload: str | None) -> str | None:
    """Why a scenario of ``kind`` training ``workload`` cannot run on CUDA (None: it can). Imports
    the workload's class (torch)."""
    if kind not in CUDA_KINDS:
        return f"kind '{kind}' runs on the CPU only"
    if kind == "pretrain" or workload is None:
        return None
    from testbed.workloads.registry import is_registered, workload_class

    if is_registered(workload) and not workload_class(workload).supports_cuda:
        return f"workload '{workload}' runs on the CPU only (its class does not declare supports_cuda)"
    return None


@functools.cache
def device_for(setting: str, kind: str, workload: str | None) -> str:
    """`resolve` for a scenario of ``kind`` training ``workload``, in this process (cached: a federated
    client asks once per message)."""
    if setting == "cpu" or kind not in CUDA_KINDS:
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    return resolve(setting, available and cuda_refusal(kind, workload) is None, available)


def run_device(scenario: Scenario, note: bool = False) -> str:
    """The device this process trains ``scenario`` on; ``cpu`` and the decentralized kind import no torch.

    ``note``: when ``auto`` leaves a CUDA device unused, say why in a `DeviceNote` warning (the
    run's log.txt receives warnings)."""
    workload = scenario.workload.name if scenario.workload is not None else None
    device = device_for(scenario.device, scenario.kind, workload)
    if note and device == "cpu" and scenario.device == "auto" and scenario.kind in CUDA_KINDS:
        import torch

        why_not = cuda_refusal(scenario.kind, workload) if torch.cuda.is_available() else None
        if why_not is not None:
            warnings.warn(f"device: auto runs on the CPU although CUDA is present: {why_not}", DeviceNote,
                          stacklevel=2)
    return device


def preflight_device(scenario: Scenario, source: str) -> None:
    """Refuse ``device: cuda[:N]`` where the scenario's code or this machine cannot honour it."""
    setting = scenario.device
    if not setting.startswith("cuda"):
        return  # auto and cpu always run: nothing to import
    if scenario.kind == "pretrain" and setting != "cuda":
        raise ScenarioError(f"{source}: device: {setting!r}: pretraining places rank i on GPU i; use cuda")
    why_not = cuda_refusal(scenario.kind, scenario.workload.name if scenario.workload is not None else None)
    if why_not is not None:
        raise ScenarioError(f"{source}: device: {setting!r}, but {why_not}; use auto or cpu")
    import torch

    if not torch.cuda.is_available():
        raise ScenarioError(f"{source}: device: {setting!r}, but this machine has no CUDA device "
                            "(torch.cuda.is_available() is False); use auto or cpu")
    index = int(setting.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ScenarioError(f"{source}: device: {setting!r}, but this machine has "
                            f"{torch.cuda.device_count()} CUDA device(s); use cuda:0 to cuda:"
                            f"{torch.cuda.device_count() - 1}")
