"""``scripts/device_check.sh``: a tiny run of each kind on the machine's device, checked from its run folder.

Here on the CPU (CI has no GPU); on a CUDA machine the same test runs each kind with ``device: cuda``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_check.sh"


def _check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(Path.home())})


@pytest.mark.slow
@pytest.mark.integration
def test_the_device_check_passes_on_this_machine_for_every_kind():
    done = _check(timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    if not torch.cuda.is_available():
        assert "GPU: not present, CUDA part unverified" in lines[0]
    for kind in ("workload", "federated", "pretrain"):
        assert any(line.split()[:2] == [kind, "ok"] and line.endswith(" s)") for line in lines), done.stdout
    assert lines[-1] == "device check: passed"


@pytest.mark.integration
@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA where there is none")
def test_the_device_check_fails_when_a_kind_cannot_run_on_the_device():
    # cuda on a machine without it: every run is refused, and the check says so instead of passing.
    done = _check("cuda", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("FAILED: exit code 2 error:") == 3, done.stdout
    assert "no CUDA device" in done.stdout
    assert done.stdout.splitlines()[-1] == "device check: 3 kind(s) failed"
