"""Unit tests of the foundation's pieces: seeds, run folders, loading, the classifier workload."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from testbed.errors import ScenarioError, UserError
from testbed.loading import apply_override, load_scenario, validate_raw
from testbed.run import RunFolder
from testbed.seeding import SeedTree
from testbed.workloads.runner import build_workload
from tests.conftest import TINY_SCENARIO


def test_seed_streams_are_reproducible_and_independent_by_name():
    seeds = SeedTree(7)
    assert np.array_equal(seeds.numpy("a").random(5), SeedTree(7).numpy("a").random(5))
    assert not np.array_equal(seeds.numpy("a").random(5), seeds.numpy("b").random(5))
    assert not np.array_equal(seeds.numpy("a").random(5), SeedTree(8).numpy("a").random(5))
    assert seeds.child("x").integer("n") != seeds.child("y").integer("n")
    assert torch.equal(torch.rand(4, generator=seeds.torch("t")), torch.rand(4, generator=SeedTree(7).torch("t")))


def test_overrides_are_parsed_as_yaml_and_type_checked():
    raw = {"training": {"steps": 5}}
    apply_override(raw, "training.steps=12")
    apply_override(raw, "report.trackers=[tensorboard]")
    apply_override(raw, "description=hello world")
    assert raw == {"training": {"steps": 12}, "report": {"trackers": ["tensorboard"]}, "description": "hello world"}


def test_loaded_scenario_is_frozen_and_applies_defaults(write_scenario):
    scenario = load_scenario(write_scenario(), ["seed=11"])
    assert scenario.seed == 11 and scenario.engine.type == "local" and scenario.report.kind == "training"
    with pytest.raises(ValidationError):
        scenario.seed = 3


def test_engine_type_defaults_to_local():
    scenario = validate_raw({**TINY_SCENARIO, "engine": {"num_cpus": 2}}, "s.yaml")
    assert scenario.engine.type == "local" and scenario.engine.num_cpus == 2


def test_error_names_the_source_file():
    with pytest.raises(ScenarioError, match=r"^my\.yaml: training\.steps: "):
        validate_raw({**TINY_SCENARIO, "training": {"steps": 0}}, "my.yaml")


def test_run_folder_checkpoints_are_atomic_and_pruned(tmp_path):
    run = RunFolder.create(tmp_path / "run", {"name": "x"})
    for step in (1, 2, 3):
        run.append_metrics({"step": step})
        run.save_checkpoint(step, {"state": {"w": torch.tensor([float(step)])}})
    checkpoint = run.latest_checkpoint()
    assert checkpoint["step"] == 3 and checkpoint["metrics_count"] == 3
    assert torch.equal(checkpoint["state"]["w"], torch.tensor([3.0]))
    assert len(list(run.checkpoint_dir.glob("ckpt-*.pt"))) == 2
    assert not list(run.checkpoint_dir.glob(".*"))  # no temporary files left behind


def test_rewind_drops_records_after_the_checkpoint_and_a_torn_line(tmp_path):
    run = RunFolder.create(tmp_path / "run", {"name": "x"})
    run.append_metrics({"step": 1})
    run.save_checkpoint(1, {})
    run.append_metrics({"step": 2})
    with open(run.metrics_path, "a") as handle:
        handle.write('{"step": 3, "acc')  # a write torn by a crash

    assert [r["step"] for r in RunFolder.open(run.path).read_metrics()] == [1, 2]
    run.rewind_to_checkpoint()
    assert [r["step"] for r in run.read_metrics()] == [1]


def test_existing_run_folder_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("")
    with pytest.raises(UserError, match="already exists"):
        RunFolder.create(tmp_path / "run", {})


def test_classifier_learns_digits_and_resumes_bit_exactly():
    scenario = validate_raw({**TINY_SCENARIO, "workload": {"name": "classifier", "arch": "mlp"}}, "s.yaml")
    straight = build_workload(scenario)
    straight.train(60)
    split = build_workload(scenario)
    split.train(25)
    restored = build_workload(scenario)
    restored.load_state_dict(split.state_dict())
    restored.train(35)

    accuracy = straight.evaluate()["test_accuracy"]
    assert accuracy > 0.85  # well above the 10% of chance after 60 steps
    assert restored.evaluate() == straight.evaluate()


def test_cnn_on_tabular_data_is_refused():
    with pytest.raises(ScenarioError, match="tabular"):
        validate_raw({**TINY_SCENARIO, "data": {"dataset": "iris"}}, "s.yaml")


def test_switching_a_block_type_by_override_starts_that_block_afresh():
    from testbed.loading import apply_override

    raw = {"name": "s", "kind": "workload", "engine": {"type": "local", "num_cpus": 2, "use_ray": "never"}}
    apply_override(raw, "engine.type=ray")
    assert raw["engine"] == {"type": "ray"}
    apply_override(raw, "engine.address=auto")
    apply_override(raw, "engine.type=ray")  # the same type: the block is kept
    assert raw["engine"] == {"type": "ray", "address": "auto"}


def test_checkpointed_attributes_round_trip_in_place():
    from testbed.workloads.base import restored, snapshot

    generator, rng = torch.Generator().manual_seed(1), np.random.default_rng(2)
    trained = torch.zeros(3, requires_grad=True)  # an optimizer holds this very tensor
    module, buffer = torch.nn.Linear(2, 2), torch.arange(3.0)
    saved = copy.deepcopy({"g": snapshot(generator), "r": snapshot(rng), "t": snapshot(trained),  # as torch.save would
                           "m": snapshot(module), "b": snapshot(buffer), "n": snapshot(7), "none": snapshot(None)})
    expected = (torch.rand(2, generator=generator), rng.random(), module.weight.detach().clone())
    with torch.no_grad():
        trained.add_(1.0)
        module.weight.add_(1.0)
    buffer += 5

    assert restored(generator, saved["g"]) is generator and torch.equal(torch.rand(2, generator=generator), expected[0])
    assert restored(rng, saved["r"]) is rng and rng.random() == expected[1]
    assert restored(trained, saved["t"]) is trained and torch.equal(trained.detach(), torch.zeros(3))
    assert restored(module, saved["m"]) is module and torch.equal(module.weight.detach(), expected[2])
    assert torch.equal(restored(buffer, saved["b"]), torch.arange(3.0))
    assert restored(0, saved["n"]) == 7 and restored(None, saved["none"]) is None
