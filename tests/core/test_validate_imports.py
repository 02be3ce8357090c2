"""`testbed validate` imports no torch, Flower, Ray or DeepSpeed (issue 39, item 1).

Every bundled scenario is validated in a child process that then names the heavy modules it
loaded; so are malformed scenarios whose checks used to build the data, the strategy or the attack
(refused with the same one line, now without torch). The torch-free checks are held to what they
stand for: an attack's declared checks refuse what playing the attack refuses, with its words; the
cached labels are the split's; a workload's declared kinds are its class's; the RDP analysis loaded
from its file is opacus'.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.core.test_bad_input_corpus import Case, Replace, _assert_one_line_naming, _prepare

if TYPE_CHECKING:  # as the built-in attacks do: at run time the names do not exist here
    from torch import Generator, Tensor

HEAVY = ("torch", "flwr", "ray", "deepspeed")
ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted(path.relative_to(ROOT) for path in (ROOT / "scenarios").rglob("*.yaml"))

# Runs the CLI in this process, then prints the heavy modules it loaded as the last line of stdout.
CHILD = f"""
import json, sys
from testbed.cli import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}),
                  "sklearn": "sklearn" in sys.modules}}))
"""


def _validate_in_child(*args: Any) -> tuple[int, str, list[str]]:
    """``testbed validate ARGS`` in a fresh interpreter: (exit code, stderr, heavy modules loaded)."""
    code, err, result = _child(*args)
    return code, err, result["heavy"]


def _child(*args: Any) -> tuple[int, str, dict]:
    done = subprocess.run([sys.executable, "-c", CHILD, "validate", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.strip(), done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["code"], done.stderr, result


# Validates each file named in turn in this process, printing after each the exit code and the heavy
# modules loaded so far: modules only accumulate, so the first file after which one appears loaded it.
CHILD_EACH = f"""
import json, sys
from testbed.cli import main
for path in sys.argv[1:]:
    code = main(["validate", path])
    print(json.dumps({{"path": path, "code": code,
                      "heavy": sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})}}), flush=True)
"""


@pytest.mark.integration
def test_validating_a_bundled_scenario_imports_no_torch_flower_ray_or_deepspeed():
    """Every bundled scenario (dp-audit's membership audit too), one interpreter for all (a child each cost ~1 s)."""
    light = [str(path) for path in BUNDLED]
    assert "scenarios/federated/dp-audit.yaml" in light
    done = subprocess.run([sys.executable, "-c", CHILD_EACH, *light], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"path"')]
    assert [r["path"] for r in results] == light, done.stderr[-3000:]
    assert [r["path"] for r in results if r["code"] != 0] == [], done.stderr[-3000:]
    first = next((r for r in results if r["heavy"]), None)
    assert first is None, f"{first['path']} imported {len(first['heavy'])} heavy modules, e.g. {first['heavy'][:5]}"


F = "federated"
CASES = [
    Case("attack-badnets-patch-larger-than-digits", F,
         {"federated": {"attack": Replace({"name": "badnets", "patch_size": 9})}},
         ("federated.attack.patch_size", "larger than the images ((8, 8))")),
    Case("attack-badnets-target-no-class", F, {"federated": {"attack": Replace({"name": "badnets", "target": 10})}},
         ("federated.attack.target", "[0, 10)")),
    Case("attack-replacement-boost-zero", F,
         {"federated": {"attack": Replace({"name": "model_replacement", "boost": 0.0})}},
         ("federated.attack.boost", "(0, 1e+06]")),
    Case("attack-min-max-direction", F, {"federated": {"attack": Replace({"name": "min_max", "direction": "diag"})}},
         ("federated.attack.direction", "unknown 'diag'")),
    Case("attack-min-sum-gamma", F, {"federated": {"attack": Replace({"name": "min_sum", "gamma_init": -1.0})}},
         ("federated.attack.gamma_init/tol", "must be > 0")),
    Case("attack-pair-flip-rate", F, {"federated": {"attack": Replace({"name": "pair_flip", "rate": 1.5})}},
         ("federated.attack.rate", "[0, 1]")),
    Case("attack-gaussian-sigma", F, {"federated": {"attack": Replace({"name": "gaussian", "sigma": 0.0})}},
         ("federated.attack.sigma", "> 0")),
    Case("partition-shards-per-client", F, {"data": {"num_clients": 4, "partition": Replace(
        {"type": "pathological", "classes_per_client": 11})}}, ("data.partition.classes_per_client", "10 classes")),
    Case("fltrust-root-and-clients", F, {"data": {"num_clients": 1000}, "federated": {"strategy": Replace(
        {"name": "fltrust", "root_size": 1000})}}, ("data.num_clients", "only 674 training samples")),
]


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_a_check_that_built_data_or_attacks_refuses_in_one_line_without_torch(tmp_path: Path, case: Case):
    path, overrides = _prepare(case, tmp_path)
    code, err, heavy = _validate_in_child(path, *overrides)
    assert code == 2, err[-3000:]
    _assert_one_line_naming(err, path, overrides, case.words)
    assert heavy == [], heavy[:5]


@pytest.mark.integration
def test_the_aco_tabular_check_reads_the_sources_metadata_not_its_data(tmp_path: Path):
    case = Case("aco-tabular-on-images", "workload", {"workload": Replace({"name": "aco", "source": "tabular"})},
                ("workload.source", "got image data 'digits'"))
    path, overrides = _prepare(case, tmp_path)
    code, err, result = _child(path, *overrides)
    assert code == 2, err[-3000:]
    _assert_one_line_naming(err, path, overrides, case.words)
    assert result["heavy"] == [] and not result["sklearn"]  # scikit-learn alone is ~150 MB


def _played(entry, params: dict, **data: Any) -> str | None:
    """The attack's own refusal of ``params``, played on a tiny input (the check before issue 39)."""
    import torch

    from testbed.federated.attacks import _play_attack

    try:
        if entry.kind == "backdoor" and data:
            x, y = torch.zeros(4, *data["shape"]), torch.tensor([0, 1, 0, 1])
            entry.fn(x, y, data["num_classes"], torch.Generator().manual_seed(0), **params)
        else:
            _play_attack(entry, params)
    except (ValueError, OverflowError) as err:
        return str(err)
    return None


def _declared(name: str, params: dict, **data: Any) -> str | None:
    from testbed.federated.attacks import check_attack_values, check_backdoor_data

    try:
        if data:
            check_backdoor_data(name, params, data["num_classes"], data["shape"])
        else:
            check_attack_values(name, params)
    except ValueError as err:
        return str(err)
    return None


# Values of each type an attack parameter may take: in range for some, out of range for others.
PROBES: dict[type, tuple] = {float: (-1.0, 0.0, 0.5, 1.0, 1.5, 1e3, 1e9), int: (-1, 0, 1, 9, 12, 2**31),
                             str: ("unit", "sign", "nope")}


def _probes(entry) -> list[dict]:
    """One parameter at a time set to each probe of its type (defaults elsewhere)."""
    from testbed.federated.attacks import attack_config

    config = attack_config(entry.name)
    cases: list[dict] = [{}]
    for key, field in config.model_fields.items():
        kinds = [kind for kind in PROBES if kind in (field.annotation, *getattr(field.annotation, "__args__", ()))]
        cases += [{key: value} for kind in kinds for value in PROBES[kind]]
    return cases


def test_every_declared_attack_check_refuses_what_playing_the_attack_refuses_in_its_words():
    from testbed.federated.attacks import registered_attacks

    compared = 0
    for entry in registered_attacks().values():
        assert entry.check is not None, f"{entry.name} declares no check: validating it would import torch"
        for params in _probes(entry):
            assert _declared(entry.name, params) == _played(entry, params), (entry.name, params)
            if entry.kind == "backdoor":
                for shape in ((64,), (1, 8, 8), (3, 4, 4)):
                    data = {"num_classes": 10, "shape": shape}
                    assert _declared(entry.name, params, **data) == _played(entry, params, **data), (params, shape)
            compared += 1
    assert compared > 80


def test_an_attack_that_declares_no_check_is_still_played_on_a_tiny_input(monkeypatch):
    from testbed.federated import attacks

    undeclared = dataclasses.replace(attacks.registered_attacks()["sign_flip"], check=None)
    monkeypatch.setitem(attacks.registered_attacks(), "sign_flip", undeclared)
    with pytest.raises(ValueError, match="scale: must be > 0"):
        attacks.check_attack_values("sign_flip", {"scale": -2.0})


def _tensor_only_for_type_checkers(malicious: Tensor, benign: Tensor, generator: Generator | None = None, *,
                                   scale: float = 1.0) -> Tensor:
    """An attack written as the built-in ones are: its tensor types imported for type checkers only."""
    return malicious


def test_an_attack_parameter_is_typed_though_its_tensor_annotations_do_not_resolve(monkeypatch):
    from pydantic import ValidationError

    from testbed.federated import attacks
    from testbed.strategies.attack_base import Attack

    monkeypatch.setitem(attacks.registered_attacks(), "typed", Attack("typed", "model", _tensor_only_for_type_checkers))
    attacks.attack_config.cache_clear()
    try:
        config = attacks.attack_config("typed")
        assert config.model_fields["scale"].annotation is float
        with pytest.raises(ValidationError):
            config.model_validate({"scale": "large"})
    finally:
        attacks.attack_config.cache_clear()
    assert attacks.attack_config("badnets").model_fields["target"].annotation is int


def _scenario(**changes: Any):
    from testbed.scenario import Scenario
    from tests.federated.test_federated_runs import FEDERATED

    raw = json.loads(json.dumps(FEDERATED))
    for block, value in changes.items():
        raw[block] = {**raw.get(block, {}), **value}
    return Scenario.model_validate(raw)


def test_the_cached_labels_are_the_training_split_and_a_second_check_loads_no_data(monkeypatch):
    from testbed.data import datasets, select
    from testbed.data.metadata import split_metadata

    scenario = _scenario()
    train, _ = datasets.train_test_split(select.load_selected(scenario.data), scenario.data.test_fraction, 11)
    first = split_metadata(scenario.data, scenario.data.test_fraction, 11)
    monkeypatch.setattr(select, "load_selected", lambda data: pytest.fail("the cached labels were loaded again"))
    second = split_metadata(scenario.data, scenario.data.test_fraction, 11)
    for found in (first, second):
        assert np.array_equal(found.y, train.y) and found.num_classes == train.num_classes == 10
        assert found.sample_shape == (1, 8, 8) == found.image_shape and found.sample_bytes == 256
        assert found.x_max == float(train.x.max())


def test_a_damaged_label_entry_is_rebuilt(monkeypatch, tmp_path):
    from testbed.data import metadata

    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    scenario = _scenario()
    good = metadata.split_metadata(scenario.data, 0.2, 3)
    [entry] = (tmp_path / "labels").glob("*.npz")
    entry.write_bytes(b"not an npz")
    again = metadata.split_metadata(scenario.data, 0.2, 3)
    assert np.array_equal(again.y, good.y) and entry.read_bytes()[:2] == b"PK"


@pytest.mark.parametrize("strategy,replicate", [("fedavg", 1), ("fltrust", 1), ("fltrust", 3)])
def test_the_label_check_partitions_the_clients_rows_of_the_federation(strategy: str, replicate: int):
    from testbed.federated.setup import _training_rows, check_federation_data, federation_seeds, federation_setup

    scenario = _scenario(data={"replicate": replicate}, federated={"strategy": {"name": strategy}})
    setup = federation_setup(scenario)
    root = 100 if strategy == "fltrust" else 0
    split = check_federation_data(scenario, root)
    seeds = federation_seeds(scenario)
    clients, server = _training_rows(scenario, len(split.y), split.sample_bytes * len(split.y), root, seeds)
    assert np.array_equal(split.y[clients] if clients is not None else split.y, setup.train.y)
    assert (server is None) == (setup.root is None)
    if server is not None:
        assert setup.root is not None and np.array_equal(split.y[server], setup.root.y)


def test_each_builtin_workload_declares_the_kinds_its_class_runs_under(monkeypatch):
    from testbed.workloads import registry
    from testbed.workloads.base import FederatedWorkload

    by_class = {name: ("workload", "federated") if issubclass(registry.workload_class(name), FederatedWorkload)
                else ("workload",) for name in registry.BUILTIN}
    assert {name for name, kinds in by_class.items() if "federated" in kinds} >= {"classifier", "stc"}
    # read from the torch-free config module: the class (the model code) is not needed to say it
    monkeypatch.setattr(registry, "workload_class", lambda name: pytest.fail(f"{name}'s model code was imported"))
    assert {name: registry.kinds(name) for name in registry.BUILTIN} == by_class


def test_the_rdp_analysis_loaded_from_its_file_is_opacus():
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp

    from testbed.federated.privacy import RDP_ORDERS, _rdp

    orders, analysis = _rdp()
    assert orders == RDP_ORDERS == RDPAccountant.DEFAULT_ALPHAS
    for q, sigma, steps in ((1.0, 1.1, 3), (0.1, 0.7, 40)):
        ours = analysis.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
        theirs = rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
        assert np.array_equal(ours, theirs)
        assert analysis.get_privacy_spent(orders=orders, rdp=ours, delta=1e-5) == \
            rdp.get_privacy_spent(orders=orders, rdp=theirs, delta=1e-5)
