"""`testbed resume` of a pretraining run goes on only with the corpus bytes the run started with:
a run folder's corpus file altered after the run wrote it is refused in one line, before any step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.pretrain.test_pretrain_run import TINY_PRETRAIN
from tests.processes import cli_process


@pytest.mark.integration
def test_resume_refuses_a_run_whose_own_corpus_file_was_altered_in_one_line(cli, tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(TINY_PRETRAIN, sort_keys=False))
    run = tmp_path / "run"
    # Killed (SIGKILL) right after its second record: a checkpoint at step 3, no summary.
    killed = cli_process("run", scenario, "--run-dir", run, "--quiet",
                         env_extra={"TESTBED_KILL_AFTER_RECORDS": "2"})
    assert killed.returncode != 0 and not (run / "summary.json").exists()
    checkpoints = sorted(path.name for path in (run / "checkpoints").iterdir())
    assert checkpoints
    tokens = run / "corpus" / "train.tokens.bin"
    tokens.write_bytes(bytes(tokens.stat().st_size))  # every token zeroed, the size kept
    before = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    code, _, err = cli("resume", run, "--quiet")

    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{tokens}: the corpus file is not the one the run wrote" in err
    # Nothing ran: no record past those of the killed run, no new checkpoint, no summary.
    after = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert after == before[: len(after)]
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == checkpoints
    assert not (run / "summary.json").exists()
