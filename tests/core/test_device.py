"""The ``device:`` setting (`testbed.device`): its refusals, its resolution, the workloads' declarations,
the pretraining ranks' choice of backend, and where the run records it.

No GPU is needed: a CUDA machine is played by patching ``torch.cuda.is_available``, and the moving of
models and tensors is checked on torch's ``meta`` device (a device other than the CPU that every build has).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from testbed.data import Dataset
from testbed.device import DeviceNote, cuda_refusal, device_for, resolve, run_device
from testbed.scenario import Scenario
from testbed.workloads.base import FederatedWorkload, on_cpu, restored
from testbed.workloads.registry import BUILTIN, workload_class
from tests.conftest import TINY_SCENARIO
from tests.core.test_bad_input_corpus import BASES, Case, Replace, _merged, assert_refused_cleanly

W, D, P = "workload", "decentralized", "pretrain"
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "workloads"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")

CASES: list[Case] = [
    Case("device-unknown-name", W, {"device": "gpu"}, ("device", "not a device", "cuda:N")),
    Case("device-unknown-name-set", W, ["device=GPU0"], ("--set device=GPU0", "not a device")),
    Case("device-workload-without-cuda", W, {"device": "cuda", "workload": Replace({"name": "vsdm"})},
         ("device: 'cuda'", "workload 'vsdm' runs on the CPU only", "use auto or cpu")),
    Case("device-decentralized-cuda", D, {"device": "cuda"}, ("device: 'cuda'", "kind 'decentralized'")),
    Case("device-pretrain-cuda-index", P, {"device": "cuda:1"}, ("device: 'cuda:1'", "rank i on GPU i")),
]
NO_CUDA_CASES: list[Case] = [
    Case("device-cuda-without-cuda", W, {"device": "cuda"}, ("device: 'cuda'", "no CUDA device")),
    Case("device-cuda-index-without-cuda", W, ["device=cuda:3"], ("device: 'cuda:3'", "no CUDA device")),
    Case("device-federated-cuda-without-cuda", "federated", {"device": "cuda"}, ("device: 'cuda'", "no CUDA device")),
]


@pytest.fixture(autouse=True)
def _fresh_resolution():
    """`device_for` caches per process; a test that patches CUDA's presence must not see another's answer."""
    device_for.cache_clear()
    yield
    device_for.cache_clear()


@pytest.fixture
def cuda_present(monkeypatch):
    """This process believes it has one CUDA device (nothing is placed on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_device_the_scenario_cannot_use_is_refused_in_one_line(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


@NO_CUDA
@pytest.mark.parametrize("case", NO_CUDA_CASES, ids=[c.id for c in NO_CUDA_CASES])
def test_cuda_on_a_machine_without_it_is_refused_in_one_line(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def test_a_cuda_index_past_the_machine_s_devices_is_refused(cli, tmp_path, monkeypatch, cuda_present):
    case = Case("device-index-past-devices", W, {"device": "cuda:1"}, ("device: 'cuda:1'", "1 CUDA device(s)"))
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def test_cuda_is_accepted_by_validate_where_present_and_supported(cli, tmp_path, cuda_present):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(_merged(BASES[W], {"device": "cuda"})))
    code, out, err = cli("validate", path)
    assert code == 0, err


@pytest.mark.parametrize(("setting", "supported", "available", "expected"), [
    ("auto", True, True, "cuda"),
    ("auto", False, True, "cpu"),   # a workload without CUDA support runs on the CPU
    ("auto", True, False, "cpu"),
    ("cpu", True, True, "cpu"),     # cpu keeps a present GPU unused
    ("cuda", True, True, "cuda"),
    ("cuda:1", True, True, "cuda:1"),
])
def test_auto_is_cuda_only_where_present_and_supported(setting, supported, available, expected):
    assert resolve(setting, supported, available) == expected


def test_every_workload_declares_whether_it_supports_cuda_on_its_class():
    declared = {name: workload_class(name).supports_cuda for name in BUILTIN}
    assert all(isinstance(value, bool) for value in declared.values())
    assert declared["classifier"] and declared["bisam"]  # the classifier's model functions move batches
    assert not declared["vsdm"]
    assert cuda_refusal("workload", "vsdm") is not None and cuda_refusal("federated", "classifier") is None
    assert cuda_refusal("decentralized", None) is not None and cuda_refusal("pretrain", None) is None


def test_auto_with_a_cpu_only_workload_runs_on_the_cpu_and_says_why(cuda_present):
    cpu_only = Scenario.model_validate(_merged(TINY_SCENARIO, {"workload": Replace({"name": "vsdm"})}))
    with pytest.warns(DeviceNote, match="workload 'vsdm' runs on the CPU only"):
        assert run_device(cpu_only, note=True) == "cpu"
    classifier = Scenario.model_validate(TINY_SCENARIO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note where CUDA is used
        assert run_device(classifier, note=True) == "cuda"
    assert run_device(classifier.model_copy(update={"device": "cpu"})) == "cpu"


def test_auto_and_cpu_resolve_without_importing_torch_where_nothing_trains_on_it(monkeypatch):
    # cpu and the decentralized kind never ask torch: validating them stays torch-free.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("asked torch for CUDA"))
    assert device_for("cpu", "workload", "classifier") == "cpu"
    assert device_for("auto", "decentralized", None) == "cpu"


def test_a_workload_moved_to_a_device_trains_its_model_and_batches_there():
    from testbed.workloads.classifier.model import on_device_of
    from testbed.workloads.runner import build_workload

    workload = build_workload(Scenario.model_validate(TINY_SCENARIO))
    assert workload.device == torch.device("cpu")
    meta = torch.device("meta")
    workload.to_device(meta)  # any device other than the CPU: every checkpointed module follows
    assert workload.device == meta
    assert {p.device for p in workload.model.parameters()} == {meta}
    assert {b.device for b in workload.model.buffers()} == {meta}  # batch norm's running statistics
    x, y = on_device_of(workload.model, workload.train_set)
    assert x.device == meta and y.device == meta
    assert workload.model(x[:2]).device == meta


def _scenario_at_test_size(name: str) -> dict:
    """The bundled scenario file of ``name`` (scenarios/workloads/NAME.yaml, else the tiny classifier
    with that workload), without its sweep, at its claims' test size."""
    path = SCENARIOS / f"{name}.yaml"
    if not path.is_file():
        return _merged(TINY_SCENARIO, {"workload": Replace({"name": name})})
    raw = yaml.safe_load(path.read_text())
    test_size = (raw.pop("claims", None) or {}).get("test_size", {}).get("set", {})
    raw.pop("sweep", None)
    for key, value in test_size.items():
        block, field = key.split(".", 1)
        raw.setdefault(block, {})[field] = value
    return raw


def _only_reading_a_value_fails(call) -> None:
    """``call`` on a workload moved to the meta device computes on it (forward, backward, optimiser
    step) and fails only where a number is read off it: a tensor left on the CPU would instead be
    refused by the first operation that mixes the two devices ("... is not on the expected device")."""
    with pytest.raises((RuntimeError, NotImplementedError)) as caught:
        call()
    assert "meta tensor" in str(caught.value) and "expected device" not in str(caught.value), caught.value


CUDA_WORKLOADS = [name for name in BUILTIN if workload_class(name).supports_cuda]


@pytest.mark.parametrize("name", [*CUDA_WORKLOADS, "stc_recall"])
def test_a_workload_that_declares_cuda_trains_and_evaluates_wholly_on_its_device(name):
    from testbed.workloads.runner import build_workload

    workload = build_workload(Scenario.model_validate(_scenario_at_test_size(name)))
    if not workload.supports_cuda:
        pytest.skip(f"{name} runs on the CPU only")
    workload.to_device(torch.device("meta"))  # a device other than the CPU that every build has
    _only_reading_a_value_fails(lambda: workload.train(1))
    _only_reading_a_value_fails(workload.evaluate)


@pytest.mark.parametrize("name", [n for n in CUDA_WORKLOADS if issubclass(workload_class(n), FederatedWorkload)])
def test_a_federated_client_of_a_cuda_workload_trains_where_its_model_is(name):
    from testbed.workloads.runner import build_workload

    workload = build_workload(Scenario.model_validate(_scenario_at_test_size(name)))
    assert isinstance(workload, FederatedWorkload)
    model = workload.build_model().to("meta")
    data = workload.train_set  # the federated workloads keep their training split
    generator = torch.Generator().manual_seed(0)
    _only_reading_a_value_fails(lambda: workload.fit_client(model, data, workload.config, 1, generator, 0.01))
    _only_reading_a_value_fails(lambda: workload.evaluate_model(model, data))


def test_checkpointed_state_comes_back_to_the_cpu_and_goes_back_to_the_device():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    state = model.state_dict()
    kept = on_cpu(state)
    assert all(kept[k] is state[k] for k in state)  # a CPU run's checkpoint holds the same tensors
    assert kept._metadata == state._metadata  # the module's versions, which load_state_dict reads
    nested = on_cpu({"a": [torch.ones(1), (torch.zeros(1), 3)], "b": "text"})
    assert nested["b"] == "text" and nested["a"][1][1] == 3
    # A plain tensor of a workload on a device is restored on that device.
    back = restored(torch.zeros(2, device="meta"), torch.ones(2))
    assert back.device == torch.device("meta")


@pytest.mark.integration  # imports DeepSpeed, which starts a process
def test_pretraining_honours_cpu_where_cuda_is_present(monkeypatch, cuda_present):
    deepspeed = pytest.importorskip("deepspeed")
    from testbed.pretrain import ds_worker

    backends: list[str] = []
    monkeypatch.setattr(deepspeed, "init_distributed", lambda dist_backend: backends.append(dist_backend))
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 0)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 1)
    placed: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", placed.append)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    monkeypatch.setenv("LOCAL_RANK", "0")

    assert ds_worker.init_process(1, "cpu").device == torch.device("cpu")
    assert backends == ["gloo"] and not placed
    import os

    assert os.environ["DS_ACCELERATOR"] == "cpu"  # DeepSpeed's accelerator too, not only the tensors
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert ds_worker.init_process(1, "auto").device == torch.device("cuda", 0)
    assert backends == ["gloo", "nccl"] and placed == [torch.device("cuda", 0)]


@pytest.mark.integration
def test_a_run_records_its_device_and_cpu_changes_no_number(cli, tmp_path):
    summaries = []
    for setting in ("auto", "cpu"):
        path = tmp_path / f"{setting}.yaml"
        path.write_text(yaml.safe_dump(_merged(TINY_SCENARIO, {"device": setting, "training": {"steps": 8}})))
        code, _, err = cli("run", path, "--run-dir", tmp_path / setting, "--quiet")
        assert code == 0, err
        summaries.append(json.loads((tmp_path / setting / "summary.json").read_text()))
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert [s["device"] for s in summaries] == [expected, "cpu"]
    if expected == "cpu":
        assert summaries[0]["final_metrics"] == summaries[1]["final_metrics"]
    assert all(np.isfinite(v) for v in summaries[1]["final_metrics"].values())


def test_classifier_data_on_the_cpu_shares_the_arrays_memory():
    from testbed.workloads.classifier.model import on_device_of

    data = Dataset("d", np.zeros((3, 2), dtype=np.float32), np.zeros(3, dtype=np.int64), 2, None)
    x, _ = on_device_of(torch.nn.Linear(2, 2), data)
    x[0, 0] = 5.0
    assert data.x[0, 0] == 5.0  # no copy per call on the CPU: the numbers and the cost are the old ones
