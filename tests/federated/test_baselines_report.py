"""The report's Baselines section (`testbed.federated.baselines_report`) on hand-made run folders."""

from __future__ import annotations

from pathlib import Path

from testbed.federated.baselines_report import BaselinesSection, arm_label
from testbed.report.render import RunData
from testbed.run import RunFolder

CONFIG = {"federated": {"strategy": {"name": "sdea"}, "attack": {"name": "lie", "fraction": 0.4},
                        "baselines": ["fedavg", "no_attack"]}}


def _curve(accuracies: list[float]) -> list[dict]:
    return [{"round": r, "test_accuracy": a} for r, a in enumerate(accuracies, start=1)]


def _baseline(run_dir: Path, name: str, accuracies: list[float]) -> None:
    folder = RunFolder.create(run_dir / "baselines" / name, {"name": name})
    for record in _curve(accuracies):
        folder.append_metrics(record)
    folder.unlock()


def test_arms_are_named_by_what_they_change():
    assert arm_label(CONFIG) == "sdea under lie (this run)"
    assert arm_label(CONFIG, "fedavg") == "fedavg under lie"
    assert arm_label(CONFIG, "no_attack") == "sdea, no attack"


def test_the_table_gives_each_arm_minus_this_run_and_names_arms_not_run_yet(tmp_path):
    _baseline(tmp_path, "fedavg", [0.2, 0.5])  # no_attack has not run (an interrupted run)
    data = RunData(tmp_path, CONFIG, _curve([0.3, 0.7]), None, {})

    html = BaselinesSection().render(data, tmp_path)

    assert "<td>fedavg under lie</td><td>0.5</td><td>-0.2</td>" in html
    assert "Not run yet: no_attack" in html
    assert (tmp_path / "baselines-accuracy.png").stat().st_size > 0


def test_a_run_without_baselines_has_no_section(tmp_path):
    data = RunData(tmp_path, {"federated": {"strategy": {"name": "fedavg"}}}, _curve([0.5]), None, {})
    assert BaselinesSection().render(data, tmp_path) == ""
