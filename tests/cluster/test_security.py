"""Secure defaults: loopback-only Ray services, no pickles from scenario-named paths, no code from scenarios.

Each attack below is real (the payload runs a shell command when handled naively); the tests check
that the testbed refuses it with a one-line user error and that the command never ran.
"""

from __future__ import annotations

import ast
import os
import pickle
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from testbed.errors import UserError
from testbed.loading import load_scenario
from testbed.plugins import load_entry_points
from testbed.run import RunFolder
from testbed.workloads.base import Workload
from testbed.workloads.registry import BUILTIN
from tests.cluster.conftest import command_line, listening_sockets, process_tree

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "strategies", "topologies", "cluster")
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


class Payload:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


# --- Ray services bound to loopback ---------------------------------------------------------------


def _service_sockets(processes) -> list[tuple[str, int, str]]:
    """Listening sockets of the dashboard and the Ray client server among ``processes``."""
    services = ("dashboard/dashboard.py", "ray.util.client.server")
    return [s for s in listening_sockets(processes) if any(name in s[2] for name in services)]


def test_emulated_cluster_starts_no_dashboard_or_client_server_beyond_loopback(emulated_cluster):
    processes = process_tree(emulated_cluster["keeper_pid"])
    assert any("/raylet/raylet " in command_line(p) for p in processes)  # the right tree: the cluster's own processes

    assert not any("ray.util.client.server" in command_line(p) for p in processes)
    assert all(address in LOOPBACK for address, _, _ in _service_sockets(processes))


def test_local_engine_starts_its_own_ray_with_nothing_beyond_loopback(emulated_cluster):
    """Also while a cluster is up on this machine: `local` must not join it. Every socket its Ray
    listens on (GCS, raylet, object manager, runtime-env agent, task workers and the driver's own
    core worker) is on loopback."""
    import psutil
    import ray

    from testbed.engines.config import LocalEngineConfig
    from testbed.engines.ray_engine import LocalRayEngine

    with LocalRayEngine(LocalEngineConfig(num_cpus=1), quiet=True) as engine:
        [worker_pid] = engine.map(lambda: os.getpid(), [()])  # a task worker is up and listening
        node = ray._private.worker._global_node
        processes = [p for info in node.all_processes.values() for i in info for p in process_tree(i.process.pid)]
        processes.append(psutil.Process())  # the driver: its core worker serves gRPC too
        described, address = engine.describe(), ray.get_runtime_context().gcs_address
        sockets = listening_sockets(processes)
    assert described["nodes"] == 1 and address != emulated_cluster["address"]
    assert "ray_client_server" not in node.all_processes
    listeners = {(command.split() or [""])[0].rsplit("/", 1)[-1] for _, _, command in sockets}
    assert {"gcs_server", "raylet"} <= listeners and worker_pid in {p.pid for p in processes}
    assert [s for s in sockets if s[0] not in LOOPBACK] == []


@pytest.mark.parametrize(("engine", "expected"), [
    ({"type": "local"}, {"include_dashboard": False}),
    ({"type": "local", "dashboard": True}, {"include_dashboard": True, "dashboard_host": "127.0.0.1"}),
    ({"type": "local", "dashboard": True, "dashboard_host": "0.0.0.0"},
     {"include_dashboard": True, "dashboard_host": "0.0.0.0"}),
], ids=["default-off", "asked-loopback", "asked-all-interfaces"])
def test_the_local_dashboard_is_off_or_on_loopback_unless_the_scenario_asks(engine, expected):
    from testbed.engines.registry import make_engine
    from testbed.loading import validate_raw

    scenario = validate_raw({"name": "d", "kind": "workload", "workload": {"name": "classifier"},
                             "engine": {**engine, "use_ray": "always"}}, "d.yaml")
    args = make_engine(scenario.engine, {"tasks"}, parallel_tasks=2)._init_args()
    assert {k: args[k] for k in expected} == expected and ("dashboard_host" in args) == ("dashboard_host" in expected)


def test_cluster_recipes_keep_the_dashboard_on_loopback():
    recipes = [REPO / "cluster" / "ray-onprem.yaml", REPO / "cluster" / "ray-aws.yaml"]
    for recipe in recipes:
        head = " ".join(yaml.safe_load(recipe.read_text())["head_start_ray_commands"])
        assert "--dashboard-host=127.0.0.1" in head, recipe
    sbatch = (REPO / "cluster" / "slurm" / "testbed.sbatch").read_text()
    assert "--dashboard-host=127.0.0.1" in sbatch and "--include-dashboard=false" in sbatch
    assert "0.0.0.0" not in sbatch + "".join(r.read_text() for r in recipes)


# --- no pickles from scenario-named paths ---------------------------------------------------------


def test_a_forged_checkpoint_is_refused_and_never_unpickled(cli, write_scenario, tmp_path):
    marker = tmp_path / "pwned"
    run = RunFolder.create(tmp_path / "run", load_scenario(write_scenario()).model_dump(mode="json"))
    forged = run.checkpoint_dir / "ckpt-000000010.pt"
    torch.save({"step": 10, "metrics_count": 0, "state": Payload(marker)}, forged)

    code, _, err = cli("resume", run.path, "--quiet")

    assert code == 2 and not marker.exists()
    assert err.startswith(f"error: {forged}: not a checkpoint this testbed can load safely") and err.count("\n") == 1
    torch.load(forged, weights_only=False)  # the payload is real: an unrestricted load runs it
    assert marker.exists()


def test_a_scenario_naming_a_pickled_dataset_runs_no_code(cli, write_scenario, tmp_path):
    marker = tmp_path / "pwned"
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(pickle.dumps({b"data": Payload(marker), b"labels": [0]}))
    path = write_scenario({"data": {"dataset": "cifar10", "path": str(folder)},
                           "workload": {"name": "classifier", "arch": "mlp", "hidden": 8}})

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 2 and not marker.exists()
    assert "not a CIFAR-10 python batch" in err and "is not allowed in a data file" in err


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


def _keyword(call: ast.Call, name: str):
    return next((ast.unparse(k.value) for k in call.keywords if k.arg == name), None)


# Modules that may unpickle, and why: the MPI engine's authenticated socket between the driver and
# its own ranks (never a file), and the CIFAR-10 reader's allow-list unpickler.
UNPICKLING_ALLOWED = {"testbed/engines/mpi_engine.py", "testbed/engines/mpi_worker.py", "testbed/data/files.py"}
UNSAFE_LOADERS = ("pickle.load", "pickle.loads", "pickle.Unpickler", "cloudpickle.load", "cloudpickle.loads",
                  "dill.load", "dill.loads", "joblib.load", "marshal.load", "marshal.loads", "shelve.open")


def test_no_module_unpickles_what_a_scenario_can_name():
    problems = []
    for package in PACKAGES:
        for file in sorted((REPO / package).rglob("*.py")):
            where = str(file.relative_to(REPO))
            for call, name in _calls(ast.parse(file.read_text(), where)):
                line = f"{where}:{call.lineno}: {ast.unparse(call)[:80]}"
                if name.endswith("torch.load") and _keyword(call, "weights_only") != "True":
                    problems.append(f"{line} (torch.load without weights_only=True)")
                if name.endswith(("np.load", "numpy.load")) and _keyword(call, "allow_pickle") not in (None, "False"):
                    problems.append(f"{line} (numpy.load with pickles)")
                if name in UNSAFE_LOADERS and where not in UNPICKLING_ALLOWED:
                    problems.append(f"{line} (unpickles)")
                if name in ("yaml.load", "yaml.unsafe_load", "yaml.full_load", "yaml.load_all", "eval", "exec"):
                    problems.append(f"{line} (can run code from text)")
    assert problems == []


# --- scenario files cannot run code ---------------------------------------------------------------


@pytest.mark.parametrize("override", [
    "workload.hidden=!!python/object/apply:os.system ['touch {marker}']",
    "data={{dataset: !!python/object/new:os.system ['touch {marker}']}}",
], ids=["tag-in-value", "tag-in-mapping"])
def test_python_tags_in_overrides_are_never_executed(cli, write_scenario, tmp_path, override):
    marker = tmp_path / "pwned"

    code, _, err = cli("run", write_scenario(), "--run-dir", tmp_path / "run", "--set", override.format(marker=marker))

    assert code == 2 and not marker.exists() and "value is not valid YAML" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("changes", "refused"), [
    ({"workload": {"name": "os:system"}}, "unknown workload 'os:system'"),
    ({"workload": {"name": "testbed.workloads.classifier.Classifier"}}, "unknown workload"),
    ({"kind": "federated", "data": {"dataset": "digits", "num_clients": 4},
      "federated": {"strategy": {"name": "builtins:exec"}}}, "federated.strategy.name: unknown 'builtins:exec'"),
    ({"kind": "federated", "data": {"dataset": "digits", "num_clients": 4},
      "federated": {"attack": {"name": "subprocess.run"}}}, "'subprocess.run'"),
], ids=["workload-callable", "workload-class-path", "strategy-callable", "attack-callable"])
def test_scenarios_name_registered_entries_never_code(cli, write_scenario, changes, refused):
    code, _, err = cli("validate", write_scenario(changes))

    assert code == 2 and refused in err and err.count("\n") == 1


# --- plugins come only from installed packages' entry points --------------------------------------

PLUGIN_MODULE = '''
from testbed.workloads.classifier.workload import ClassifierWorkload as Classifier

class TinyPlugin(Classifier):
    """A classifier installed as a plugin."""
    name = "tiny_plugin"

class Misnamed(Classifier):
    name = "something_else"

NOT_A_WORKLOAD = object()
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """A package 'tinyplug' installed on sys.path with entry points in several groups."""
    (tmp_path / "tinyplug.py").write_text(textwrap.dedent(PLUGIN_MODULE))
    info = tmp_path / "tinyplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [testbed.workloads]
        tiny_plugin = tinyplug:TinyPlugin
        [test.clash]
        classifier = tinyplug:TinyPlugin
        [test.wrong_type]
        not_a_workload = tinyplug:NOT_A_WORKLOAD
        [test.misnamed]
        misnamed = tinyplug:Misnamed
        [test.broken]
        broken = tinyplug_missing_module:Thing
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tinyplug", raising=False)
    return tmp_path


def test_an_installed_plugin_joins_the_registry(installed_plugin):
    registry: dict = dict.fromkeys(BUILTIN)

    assert load_entry_points("testbed.workloads", registry, Workload, as_class=True) == ["tiny_plugin"]
    assert registry["tiny_plugin"].__module__ == "tinyplug" and "tiny_plugin" not in BUILTIN


@pytest.mark.parametrize(("group", "refused"), [
    ("test.clash", "'classifier' is already registered"),
    ("test.wrong_type", "tinyplug:NOT_A_WORKLOAD is not a subclass of Workload"),
    ("test.misnamed", "calls itself 'something_else'"),
    ("test.broken", "cannot be loaded (ModuleNotFoundError"),
])
def test_a_bad_plugin_is_refused_by_name(installed_plugin, group, refused):
    registry: dict = dict.fromkeys(BUILTIN)
    with pytest.raises(UserError, match="from tinyplug") as caught:
        load_entry_points(group, registry, Workload, as_class=True)
    assert refused in str(caught.value) and registry == dict.fromkeys(BUILTIN)


def test_a_scenario_runs_a_plugin_workload_end_to_end(installed_plugin, write_scenario, tmp_path):
    path = write_scenario({"workload": {"name": "tiny_plugin", "arch": "mlp", "hidden": 8},
                           "training": {"steps": 4, "eval_every": 2, "checkpoint_every": 4}})
    env = {**os.environ, "CI": "1", "PYTHONPATH": f"{installed_plugin}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(tmp_path / "run"),
                           "--quiet"], env=env, capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "summary.json").is_file()


# --- hosts from hostfiles are host names, never ssh options ----------------------------------------

EVIL_SSH_CONFIG = "Host *\n    ProxyCommand touch {marker}\n"


def _hostfile_payloads(marker: Path) -> dict[str, str]:
    """Hostfile lines whose "host" ssh (or a shell) would act on, and the host each one names."""
    return {
        "-Fevil.cfg slots=2": "-Fevil.cfg",                            # ssh reads ./evil.cfg, runs its ProxyCommand
        "-Fevil.cfg:2": "-Fevil.cfg",
        f"-oProxyCommand=touch {marker} slots=2": "-oProxyCommand=touch",
        f"node1;touch {marker} slots=1": "node1;touch",
        ".node1 slots=2": ".node1",
    }


def _start_deepspeed_engine(hostfile: str) -> None:
    """Start the deepspeed engine on ``hostfile``: its start hook probes every host. An import error or a start
    that no longer probes fails the test below (it used to skip when the probe could not be found)."""
    from testbed.engines.config import DeepSpeedEngineConfig
    from testbed.engines.deepspeed_engine import DeepSpeedEngine

    DeepSpeedEngine(DeepSpeedEngineConfig(type="deepspeed", hostfile=hostfile)).start()


@pytest.mark.parametrize("index", range(5), ids=["F-option", "F-option-colon", "o-ProxyCommand", "semicolon",
                                                 "leading-dot"])
def test_a_hostfile_host_that_is_an_ssh_option_is_refused_and_no_ssh_starts(tmp_path, monkeypatch, index):
    from testbed.cluster.hostfiles import hosts_from_file

    marker = tmp_path / "pwned"
    line, host = list(_hostfile_payloads(marker).items())[index]
    (tmp_path / "evil.cfg").write_text(EVIL_SSH_CONFIG.format(marker=shlex.quote(str(marker))))
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"node0 slots=2\n{line}\n")
    monkeypatch.chdir(tmp_path)
    started = []
    real_run = subprocess.run

    def recording_run(command, *args, **kwargs):
        started.append(list(command))
        if list(command)[:1] == ["ssh"]:  # never reach out from a test: node0 is "unreachable"
            return subprocess.CompletedProcess(command, 255, b"", b"")
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", recording_run)

    with pytest.raises(UserError) as refused:
        hosts_from_file(hostfile)
    with pytest.raises(UserError) as probed:
        _start_deepspeed_engine(str(hostfile))

    for err in (refused, probed):
        assert str(err.value).startswith(f"{hostfile}:2: host {host!r} is not a valid host name or IP address")
        assert "\n" not in str(err.value)
    assert not any(command[:1] == ["ssh"] for command in started) and not marker.exists()


def test_the_hostfile_payload_is_real_when_ssh_gets_it_as_an_option(tmp_path, monkeypatch):
    """What the old probe ran (``ssh -o BatchMode=yes -o ConnectTimeout=5 HOST true``): ssh reads the
    config the "host" names and runs its ProxyCommand, without connecting anywhere."""
    import shutil

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client installed")
    marker = tmp_path / "pwned"
    (tmp_path / "evil.cfg").write_text(EVIL_SSH_CONFIG.format(marker=shlex.quote(str(marker))))
    monkeypatch.chdir(tmp_path)

    subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-Fevil.cfg", "true"],
                   capture_output=True, timeout=30, stdin=subprocess.DEVNULL)

    assert marker.exists()


def test_the_ssh_probe_ends_ssh_options_before_the_host():
    from testbed.cluster.hostfiles import ssh_probe_command

    command = ssh_probe_command("node1")

    assert command == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "--", "node1", "true"]
    assert command[command.index("node1") - 1] == "--"
    with pytest.raises(UserError, match=r"host '-Fevil.cfg' is not a valid host name"):
        ssh_probe_command("-Fevil.cfg")


@pytest.mark.parametrize("name", ["node-1", "10.0.0.2", "::1", "gpu01.cluster.local", "fe80::1", "n1"])
def test_host_names_and_addresses_pass(tmp_path, name):
    from testbed.cluster.hostfiles import hosts_from_file, ssh_probe_command, validate_host, validate_host_entry

    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{name} slots=2\n")

    assert validate_host(name) == name and ssh_probe_command(name)[-2:] == [name, "true"]
    assert [(h.name, h.slots) for h in hosts_from_file(hostfile)] == [(name, 2)]
    assert validate_host_entry(name) == name
    if ":" not in name:
        assert validate_host_entry(f"{name}:4") == f"{name}:4"


@pytest.mark.parametrize("name", ["-Fevil.cfg", "-oProxyCommand=touch", "node1;touch", ".node1", "node1.", "-",
                                  "node-", "a_b", "node 1", "", "a" * 64, ".".join(["a"] * 128), "fe80::1%eth0",
                                  "$(touch x)", "node1,node2"])
def test_anything_else_is_refused_in_one_line_naming_the_host(name):
    from testbed.cluster.hostfiles import Host, hosts_from_nodes, validate_host, validate_host_entry

    for check in (validate_host, validate_host_entry, lambda n: Host(n, 1),
                  lambda n: hosts_from_nodes([{"Alive": True, "NodeManagerAddress": n, "Resources": {"CPU": 1}}])):
        with pytest.raises(UserError) as refused:
            check(name)
        message = str(refused.value)
        assert message.startswith("host ") and repr(name[:80]) in message and "\n" not in message


def test_mpi_host_entries_are_validated():
    from testbed.cluster.hostfiles import validate_host_entry

    assert validate_host_entry("node1:4") == "node1:4" and validate_host_entry("10.0.0.2:8") == "10.0.0.2:8"
    for entry, host in [("-Fevil.cfg:4", "-Fevil.cfg"), ("node1;x:2", "node1;x"), ("node1:x", "node1:x")]:
        with pytest.raises(UserError, match=f"host {re.escape(repr(host))} is not a valid host name"):
            validate_host_entry(entry)
