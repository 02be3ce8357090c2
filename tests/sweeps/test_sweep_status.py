"""The sweep's status display: variant folders made by hand, classified and shown (no real runs)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

from testbed.sweep_status import SweepMonitor, display_mode, failure_marker, last_record, read_status


def _variants(root: Path) -> Path:
    """Four variant folders, one per state: queued (no folder), running (config and two
    records, the last torn), done (a summary), failed (the sweep's marker)."""
    variants = root / "variants"
    (variants / "running").mkdir(parents=True)
    (variants / "running" / "config.yaml").write_text("name: x\n")
    (variants / "running" / "metrics.jsonl").write_text(
        json.dumps({"round": 1, "test_accuracy": 0.5}) + "\n" + json.dumps({"round": 2, "test_accuracy": 0.75})
        + "\n" + '{"round": 3, "test_acc')
    (variants / "done").mkdir()
    (variants / "done" / "config.yaml").write_text("name: x\n")
    (variants / "done" / "summary.json").write_text(json.dumps(
        {"final_metrics": {"test_accuracy": 0.912, "malicious_weight": 0.1}, "timings": {"wall_s": 41.0}}))
    (variants / "failed").mkdir()
    (variants / "failed" / "config.yaml").write_text("name: x\n")
    failure_marker(variants / "failed").write_text(json.dumps({"status": "failed", "error": "boom"}))
    return variants


def test_the_poller_classifies_variant_folders(tmp_path):
    variants = _variants(tmp_path)
    states = {slug: read_status(variants / slug) for slug in ("queued", "running", "done", "failed")}
    assert {slug: s.state for slug, s in states.items()} == {
        "queued": "queued", "running": "running", "done": "done", "failed": "failed"}
    assert states["running"].progress == "round 2" and states["running"].metric_text() == "test_accuracy 0.75"
    assert states["done"].metric_text() == "test_accuracy 0.912" and states["failed"].error == "boom"
    # The sweep's own first metric is the headline where the runs report it.
    assert read_status(variants / "done", ("malicious_weight",)).metric == "malicious_weight"


def test_an_unfinished_folder_of_an_earlier_sweep_is_queued_until_its_process_takes_the_lock(tmp_path):
    variants = _variants(tmp_path)
    (variants / "running" / ".lock").write_text("1\n")
    stale = (variants / "running" / ".lock").stat().st_mtime
    assert read_status(variants / "running", stale_lock=stale).state == "queued"
    assert read_status(variants / "running", stale_lock=stale - 5).state == "running"


def test_the_last_record_is_read_from_the_tail_of_a_long_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "pad": "x" * 100}) + "\n" for i in range(500)))
    assert last_record(path)["step"] == 499
    path.write_text(json.dumps({"step": 1, "pad": "x" * 40_000}) + "\n")  # one record longer than the window
    assert last_record(path)["step"] == 1
    assert last_record(tmp_path / "absent.jsonl") is None


def test_plain_lines_say_each_finished_variant_once_and_quiet_says_nothing(tmp_path):
    variants = _variants(tmp_path)
    slugs = ["queued", "running", "done", "failed"]
    out = io.StringIO()
    with SweepMonitor(variants, slugs, "lines", stream=out, interval=3600) as monitor:
        monitor.poll()  # a second pass prints nothing new
        monitor.close({"queued": {"status": "failed", "error": "interrupted before it started"}})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].split() == ["[1/4]", "done", "done", "test_accuracy", "0.912", "(41", "s)"]
    assert lines[1].startswith("[2/4]  failed  failed  boom")
    assert lines[2].startswith("[3/4]  failed  queued  interrupted before it started")
    assert not any(t.name == "sweep-status" for t in threading.enumerate())

    quiet = io.StringIO()
    with SweepMonitor(variants, slugs, display_mode(quiet=True), stream=quiet) as monitor:
        monitor.close({})
    assert display_mode(quiet=True) == "off" and quiet.getvalue() == ""


def test_the_live_table_shows_every_variant_and_its_state(tmp_path):
    variants = _variants(tmp_path)
    out = io.StringIO()
    with SweepMonitor(variants, ["queued", "running", "done", "failed"], "live", stream=out, interval=3600):
        pass
    text = out.getvalue()
    assert "4 variants, 1 running, 1 failed, 1 done, 1 queued" in text
    assert "round 2" in text and "test_accuracy 0.912" in text and "boom" in text
