"""`testbed resume` of a pretraining run folder whose DeepSpeed checkpoint was replaced by a pickle
that runs a command: the training processes load DeepSpeed checkpoints only with torch's
weights-only unpickler, so the payload never runs and the run is refused in one line naming the file.

The scenario trains with ZeRO stage 1, so a checkpoint has both kinds of DeepSpeed files (model
states, ZeRO optimizer states); the resume of an untouched folder checks that the weights-only
loader (with DeepSpeed's own classes allowed) still gives the uninterrupted run's numbers.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from tests.pretrain.test_pretrain_run import DETERMINISTIC, TINY_PRETRAIN
from tests.processes import cli_process

REPO = Path(__file__).resolve().parents[2]
# Checkpoints at steps 2 and 4; the tests roll a finished run back to step 2 and resume it.
SCENARIO = {**TINY_PRETRAIN, "pretrain": {**TINY_PRETRAIN["pretrain"], "steps": 4, "eval_every": 2,
                                          "checkpoint_every": 2, "zero_stage": 1}}
TAG = "step000000002"
MODEL_STATES = "mp_rank_00_model_states.pt"
OPTIMIZER_STATES = "zero_pp_rank_0_mp_rank_00_optim_states.pt"


class Payload:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("zero1")
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    result = cli_process("run", path, "--run-dir", folder / "run", "--quiet")
    assert result.returncode == 0, result.stderr
    assert {MODEL_STATES, OPTIMIZER_STATES} <= {p.name for p in (folder / "run" / "deepspeed" / TAG).iterdir()}
    return folder / "run"


@pytest.fixture
def rolled_back(finished_run: Path, tmp_path: Path) -> Path:
    """A copy of the finished run as if it had stopped after step 2's checkpoint: `resume` loads
    DeepSpeed tag step 2."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "summary.json").unlink()
    (run_dir / "checkpoints" / "ckpt-000000004.pt").unlink()
    shutil.rmtree(run_dir / "deepspeed" / "step000000004")
    return run_dir.resolve()


def _forge(run_dir: Path, name: str, marker: Path) -> Path:
    forged = run_dir / "deepspeed" / TAG / name
    torch.save({"module": Payload(marker), "optimizer_state_dict": Payload(marker)}, forged)
    return forged


def _refusal(forged: Path) -> str:
    return f"{forged}: not a checkpoint this testbed can load safely"


@pytest.mark.integration
def test_resuming_an_untouched_zero_checkpoint_gives_the_uninterrupted_numbers(cli, rolled_back, finished_run):
    code, _, err = cli("resume", rolled_back, "--quiet")

    assert code == 0, err
    resumed, reference = _records(rolled_back), _records(finished_run)
    assert [r["step"] for r in resumed] == [2, 4]
    for ours, theirs in zip(resumed, reference, strict=True):
        keys = [k for k in DETERMINISTIC if k in theirs]
        assert keys and {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}


@pytest.mark.integration
@pytest.mark.parametrize("name", [MODEL_STATES, OPTIMIZER_STATES], ids=["model-states", "optimizer-states"])
def test_a_forged_deepspeed_checkpoint_is_refused_by_the_workers_and_never_unpickled(cli, rolled_back, tmp_path,
                                                                                     name):
    marker = tmp_path / "pwned"
    forged = _forge(rolled_back, name, marker)

    code, _, _ = cli("resume", rolled_back, "--quiet")

    assert code != 0 and not marker.exists()
    reported = (rolled_back / "worker" / "user-error.rank0").read_text()
    assert reported.startswith(_refusal(forged)) and reported.count("\n") == 1
    log = (rolled_back / "worker" / "launcher.log").read_text(errors="replace")
    assert f"error: {_refusal(forged)}" in log and "posix.system" in log
    torch.load(forged, weights_only=False)  # the payload is real: an unrestricted load runs it
    assert marker.exists()


@pytest.mark.integration
def test_resuming_a_forged_deepspeed_checkpoint_is_one_line_exit_code_2(cli, rolled_back, tmp_path):
    marker = tmp_path / "pwned"
    forged = _forge(rolled_back, MODEL_STATES, marker)

    code, _, err = cli("resume", rolled_back, "--quiet")

    assert code == 2 and not marker.exists()
    assert err.startswith(f"error: {_refusal(forged)}") and err.count("\n") == 1 and "Traceback" not in err
