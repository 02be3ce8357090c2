"""Table of malformed scenarios and overrides: each is exit code 2, one line, no run folder."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import TINY_SCENARIO


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _with(section: str, **values) -> dict:
    return {section: {**TINY_SCENARIO[section], **values}}


# (case id, scenario file text or a dict of changes to the tiny scenario, overrides, words the message must contain)
CASES = [
    ("yaml-syntax", "name: x\nkind: [workload\n", [], ["invalid YAML", "line"]),
    ("yaml-tab-indent", "name: x\n\tkind: workload\n", [], ["invalid YAML"]),
    ("yaml-python-tag", "name: !!python/object/apply:os.system ['true']\nkind: workload\n", [], ["invalid YAML"]),
    ("not-a-mapping", "- just\n- a list\n", [], ["must be a mapping"]),
    ("empty-file", "", [], ["must be a mapping"]),
    ("unknown-top-key", {"sed": 3}, [], ["sed", "unknown key", "did you mean 'seed'"]),
    ("unknown-engine-key", _with("engine", num_cpu=2), [], ["engine.num_cpu", "did you mean 'num_cpus'"]),
    ("unknown-data-key", _with("data", datset="digits"), [], ["data.datset", "did you mean 'dataset'"]),
    ("unknown-workload-key", _with("workload", hiden=3), [], ["workload.hiden", "did you mean 'hidden'"]),
    ("unknown-training-key", _with("training", stpes=3), [], ["training.stpes", "did you mean 'steps'"]),
    ("unknown-report-key", {"report": {"knd": "training"}}, [], ["report.knd", "did you mean 'kind'"]),
    ("missing-kind", {"kind": None}, [], ["kind"]),
    ("missing-workload-name", {"workload": {"arch": "cnn"}}, [], ["workload.name", "required"]),
    ("wrong-type-seed", {"seed": "seven"}, [], ["seed", "integer"]),
    ("wrong-type-steps", _with("training", steps="many"), [], ["training.steps", "integer"]),
    ("wrong-type-section", {"training": 5}, [], ["training"]),
    ("negative-steps", _with("training", steps=-5), [], ["training.steps", "greater than 0"]),
    ("negative-seed", {"seed": -1}, [], ["seed", "greater than or equal to 0"]),
    ("zero-batch", _with("workload", batch_size=0), [], ["workload.batch_size", "greater than 0"]),
    ("negative-cpus", _with("engine", num_cpus=-2), [], ["engine.num_cpus"]),
    ("bad-fraction", _with("data", test_fraction=1.0), [], ["data.test_fraction", "less than 1"]),
    ("unknown-kind", {"kind": "centralised"}, [], ["kind", "workload"]),
    ("unknown-workload", _with("workload", name="resnet9000"), [], ["unknown workload 'resnet9000'", "classifier"]),
    ("unknown-dataset", _with("data", dataset="mnist"), [], ["unknown dataset 'mnist'", "digits"]),
    ("unknown-engine-type", {"engine": {"type": "slurm"}}, [], ["engine.type", "'slurm'", "'ray'"]),
    ("cnn-on-tabular", _with("data", dataset="wine"), [], ["workload.arch", "tabular"]),
    ("bad-name", {"name": "my run"}, [], ["name", "pattern"]),
    ("unknown-tracker", {"report": {"trackers": ["neptune"]}}, [], ["report.trackers", "neptune"]),
    ("engine-not-answering", None, ["engine.type=ray", f"engine.address=127.0.0.1:{_closed_port()}"],
     ["engine.address", "no Ray cluster answers"]),
    ("engine-address-malformed", None, ["engine.type=ray", "engine.address=nowhere"], ["engine.address", "host:port"]),
    ("override-unknown-key", None, ["training.stesp=3"], ["--set training.stesp=3", "did you mean 'steps'"]),
    ("override-wrong-type", None, ["training.steps=abc"], ["--set training.steps=abc", "integer"]),
    ("override-no-equals", None, ["training.steps"], ["KEY.PATH=VALUE"]),
    ("override-through-value", None, ["seed.x=1"], ["'seed' is a value"]),
    ("override-negative", None, ["training.eval_every=-1"], ["training.eval_every", "greater than 0"]),
    ("deepspeed-engine-for-workload", {"engine": {"type": "deepspeed"}}, [], ["engine.type", "deepspeed"]),
]


def _scenario_file(write_scenario, spec) -> Path:
    if isinstance(spec, str):
        return write_scenario(text=spec)
    changes = {k: v for k, v in (spec or {}).items()}
    path = write_scenario({k: v for k, v in changes.items() if v is not None})
    if any(v is None for v in changes.values()):  # drop keys set to None
        import yaml

        data = yaml.safe_load(path.read_text())
        for key in [k for k, v in changes.items() if v is None]:
            data.pop(key)
        path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("spec,overrides,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_input_is_one_line_exit_2_and_leaves_no_run_folder(cli, write_scenario, tmp_path, command,
                                                                 spec, overrides, words):
    path = _scenario_file(write_scenario, spec)
    run_dir = tmp_path / "run"
    args = [command, path, *[a for o in overrides for a in ("--set", o)]]
    if command == "run":
        args += ["--run-dir", run_dir, "--quiet"]

    code, out, err = cli(*args)

    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]
    assert not run_dir.exists()


def test_missing_file_is_a_user_error(cli, tmp_path):
    code, _, err = cli("validate", tmp_path / "nope.yaml")
    assert code == 2 and "no such scenario file" in err and len(err.strip().splitlines()) == 1


def test_existing_run_folder_is_refused_and_untouched(cli, write_scenario, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "keep.txt").write_text("precious")

    code, _, err = cli("run", write_scenario(), "--run-dir", run_dir, "--quiet")

    assert code == 2 and "already exists" in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["keep.txt"]


def test_resume_of_a_non_run_folder_is_a_user_error(cli, tmp_path):
    code, _, err = cli("resume", tmp_path)
    assert code == 2 and "not a run folder" in err


def test_python_tags_are_never_executed(cli, write_scenario, tmp_path):
    marker = tmp_path / "pwned"
    path = write_scenario(text=f"name: !!python/object/apply:os.system ['touch {marker}']\nkind: workload\n")
    code, _, _ = cli("validate", path)
    assert code == 2 and not marker.exists()


def test_the_table_has_at_least_25_cases():
    assert len(CASES) >= 25
