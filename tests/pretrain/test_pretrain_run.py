"""End-to-end pretrain runs through the CLI: validation, a local run, and a 2-process DeepSpeed run
killed mid-way and resumed from its DeepSpeed checkpoint.

The DeepSpeed test is the suite's only multi-process run (DeepSpeed compiles its CPU communication
op on the first run on a machine, about a minute, cached afterwards)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.faults import KILL_AFTER_RECORDS
from tests.browser import assert_readable
from tests.conftest import requires_chromium
from tests.processes import cli_process

TINY_PRETRAIN: dict[str, Any] = {
    "name": "tiny-pretrain",
    "kind": "pretrain",
    "seed": 2,
    "engine": {"type": "local"},
    "pretrain": {
        "corpus": {"source": "factrecall", "max_documents": None, "heldout_fraction": 0.1,
                   "factrecall": {"documents": 240, "max_filler": 4, "eval_documents": 6}},
        "tokenizer": {"vocab_size": 320, "train_documents": 200},
        "context_length": 96,
        "model": {"layers": 1, "d_model": 32, "heads": 2},
        "steps": 6, "batch_size": 4, "eval_every": 2, "checkpoint_every": 3, "eval_documents": 8,
    },
    "report": {"kind": "pretraining"},
}
DETERMINISTIC = ("train_loss", "heldout_loss", "fact_recall", "fact_invented_rate", "fact_mixup_rate")


@pytest.fixture
def pretrain_scenario(tmp_path: Path):
    def write(pretrain: dict | None = None, **engine) -> Path:
        data = {**TINY_PRETRAIN, "engine": engine or {"type": "local"},
                "pretrain": {**TINY_PRETRAIN["pretrain"], **(pretrain or {})}}
        path = tmp_path / f"pretrain-{engine.get('type', 'local')}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path
    return write


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("override, message", [
    ("pretrain.batch_size=5", "pretrain.batch_size: 5 sequences do not split evenly over 2 training processes"),
    ("pretrain.packing.methd=concat", "pretrain.packing.methd: unknown key (did you mean 'method'?)"),
    ("pretrain.corpus.source=folder", "pretrain.corpus.path: source 'folder' reads a local folder"),
    ("pretrain.model.heads=3", "pretrain.model"),
])
def test_invalid_pretrain_scenarios_fail_in_one_line_before_anything_starts(cli, pretrain_scenario, tmp_path,
                                                                            override, message):
    path = pretrain_scenario(type="deepspeed", num_procs=2)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--set", override, "--quiet")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_mpi_engine_is_refused_for_pretraining(cli, pretrain_scenario):
    code, _, err = cli("validate", pretrain_scenario(type="mpi"))
    assert code == 2 and "engine.type: 'mpi' does not run kind 'pretrain'" in err


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """The tiny scenario trained by one process without a launcher (the reference numbers)."""
    folder = tmp_path_factory.mktemp("local")
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(TINY_PRETRAIN, sort_keys=False))
    result = cli_process("run", path, "--run-dir", folder / "run", "--quiet")
    assert result.returncode == 0, result.stderr
    return folder / "run"


@pytest.mark.integration
def test_local_run_leaves_corpus_metrics_checkpoints_and_a_pretraining_report(local_run: Path):
    records = _records(local_run)
    assert [r["step"] for r in records] == [2, 4, 6]
    assert all(r["tokens_per_s_per_process"] > 0 and r["heldout_ppl"] > 1 for r in records)
    final = records[-1]
    rates = final["fact_recall"] + final["fact_invented_rate"] + final["fact_mixup_rate"]
    assert final["fact_questions"] > 0 and rates == pytest.approx(1.0)
    assert {"tokenizer.json", "train.tokens.bin", "manifest.json", "factrecall_eval.json"} <= \
        {p.name for p in (local_run / "corpus").iterdir()}
    assert sorted(p.name for p in (local_run / "deepspeed").glob("step*")) == ["step000000003", "step000000006"]
    page = (local_run / "report" / "index.html").read_text()
    for section in ("Packing, side by side", "Length histograms", "Loss curves", "Fact recall", "best_fit (this run)"):
        assert section in page
    assert {"document-lengths.png", "sequence-fill.png", "pretrain-loss.png"} <= \
        {p.name for p in (local_run / "report").iterdir()}


@pytest.mark.integration
@requires_chromium
def test_pretraining_report_leads_with_the_losses_and_leaves_out_what_was_not_measured(local_run: Path):
    page = assert_readable(local_run / "report", first_screen="pretrain-loss.png", name="pretraining")
    assert page.sections[:2] == ["Loss curves", "Fact recall"]
    assert "Outliers and W8A8 quantization" not in page.sections  # pretrain.outliers unset: no empty section
    html = (local_run / "report" / "index.html").read_text()
    assert "curve-heldout_loss.png" not in html and "curve-loss.png" not in html  # charted once, in Loss curves


@pytest.mark.integration
def test_two_process_zero2_deepspeed_run_resumes_from_its_checkpoint_with_the_reference_numbers(
        pretrain_scenario, tmp_path, local_run):
    # ZeRO stage 2 (optimizer states and gradients partitioned over the two ranks); the interrupt
    # test of tests/core/test_signals.py runs the two-process launcher at stage 0.
    path = pretrain_scenario({"zero_stage": 2}, type="deepspeed", num_procs=2)
    run_dir = tmp_path / "run"
    # Records come at steps 2, 4, 6 and DeepSpeed checkpoints at 3 and 6: killed after step 4's record.
    killed = cli_process("run", path, "--run-dir", run_dir, "--quiet", env_extra={KILL_AFTER_RECORDS: "2"})
    assert killed.returncode == -9
    before_kill = _records(run_dir)
    assert [r["step"] for r in before_kill] == [2, 4]
    # The driver recorded only the checkpoint at step 3 (ranks may have saved step 6 before they noticed
    # their driver had died; the resumed run replaces that folder).
    assert [p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt")] == ["ckpt-000000003.pt"]

    resumed = cli_process("resume", run_dir, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    records = _records(run_dir)
    assert [r["step"] for r in records] == [2, 4, 6]
    # Step 4 was computed again from the checkpoint at step 3: the same numbers as before the kill.
    assert {k: records[1][k] for k in DETERMINISTIC if k in records[1]} == \
        {k: before_kill[1][k] for k in DETERMINISTIC if k in before_kill[1]}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["engine"] == {"type": "deepspeed", "num_procs": 2}
    # Two processes and one give the same numbers up to float summation order.
    for ours, reference in zip(records, _records(local_run)):
        for key in DETERMINISTIC:
            if key in reference:
                assert ours[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key
    assert sorted(p.name for p in (run_dir / "deepspeed").glob("step*")) == ["step000000003", "step000000006"]
    # Each rank saved its own partition of the optimizer states: ZeRO was on (stage 0 keeps them whole).
    partitions = {p.name for p in (run_dir / "deepspeed" / "step000000006").glob("zero_pp_rank_*_optim_states.pt")}
    assert partitions == {"zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"}
    # The resumed run ends with the final metrics of an uninterrupted one (to float summation order):
    # no throughput among them, which a resumed run measures anew; that is in the timings.
    reference = json.loads((local_run / "summary.json").read_text())
    assert summary["final_metrics"].keys() == reference["final_metrics"].keys()
    assert summary["final_metrics"] == pytest.approx(reference["final_metrics"], rel=1e-4, abs=1e-6)
    assert "tokens_per_s_per_process" not in summary["final_metrics"]
    assert summary["timings"]["tokens_per_s_per_process"] > 0 and summary["timings"]["wall_s"] > 0
    # Where the resumed run's start-up went: corpus (kept from the first run), launcher, process, DeepSpeed.
    timings = summary["timings"]
    assert 0 < timings["engine_init_s"] < timings["worker_process_s"] < timings["launch_to_training_s"] < \
        timings["wall_s"] and 0 <= timings["prepare_corpus_s"] < timings["wall_s"]


@pytest.mark.integration
def test_a_hostfile_host_without_passwordless_ssh_is_one_line_and_leaves_no_folder(cli, pretrain_scenario, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("no-such-host.invalid slots=2\n")
    path = pretrain_scenario(type="deepspeed", num_procs=2, hostfile=str(hostfile))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "engine.hostfile: host 'no-such-host.invalid' is not reachable by passwordless SSH" in err
    assert not (tmp_path / "run").exists()


def test_deepspeed_shared_memory_buffers_of_a_finished_run_are_released(tmp_path):
    from testbed.engines.processes import release_shared_memory

    ours = [tmp_path / f"deepspeed_allreduce_buffer_0_127.0.0.1_29611_{rank}" for rank in (0, 1)]
    others = [tmp_path / "deepspeed_allreduce_buffer_0_127.0.0.1_29612_0", tmp_path / "mpich_shm_29611"]
    for path in ours + others:
        path.write_bytes(b"x")
    release_shared_memory(29611, folder=tmp_path)
    assert not any(p.exists() for p in ours) and all(p.exists() for p in others)


def _orphan_sleeper() -> int:
    """The pid of a process that is not ours to reap (as a rank left by a killed driver)."""
    done = subprocess.run(["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    pid = int(done.stdout)
    # sh prints the pid as it forks: under load the child may not have called setsid() yet, and a
    # killpg of its pid would find no group. Once it runs sleep, it is the leader of its own session.
    deadline = time.monotonic() + 10.0
    while Path(f"/proc/{pid}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
        time.sleep(0.01)
    return pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.integration
def test_a_resumed_launch_stops_the_rank_its_pid_file_names_and_no_process_that_reused_its_pid(tmp_path):
    """A rank forked from a zygote shows its warm server's command line, not the run folder's: the
    pid file identifies it by pid and start time."""
    from testbed.engines.processes import stop_previous_launch
    from testbed.engines.proctree import start_time

    work_dir = tmp_path / "run" / "worker"
    work_dir.mkdir(parents=True)
    leftover, stranger = _orphan_sleeper(), _orphan_sleeper()
    try:
        (work_dir / "launcher.pid").write_text(f"{stranger} {start_time(stranger) + 1}")  # its pid, reused
        stop_previous_launch(work_dir)
        assert _alive(stranger) and not (work_dir / "launcher.pid").exists()

        (work_dir / "launcher.pid").write_text(f"{leftover} {start_time(leftover)}")
        stop_previous_launch(work_dir)
        assert not _alive(leftover)
    finally:
        for pid in (leftover, stranger):
            if _alive(pid):
                os.kill(pid, 9)
