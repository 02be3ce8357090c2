"""Sweep variants forked from a warm server: one process each, without a fresh interpreter's imports.

The first tests drive `testbed.engines.warm` with two tiny modules written here (a marker that logs
each import of it, and a main that reports what its process sees), so they take a second; the
sweep tests run real sweeps and watch their process trees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from testbed.engines.warm import (
    WarmServerError,
    close_warm_servers,
    release_warm_servers,
    servers_kept,
    warm_server,
)
from testbed.kinds import RUNNERS, launches_ranks, warm_modules
from tests.conftest import TINY_SCENARIO

MARKER = """
import os
with open(os.environ["MARKER_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
"""
MAIN = """
import json, os, sys, time
already = "warm_marker" in sys.modules
import warm_marker
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "marker_was_loaded": already,
                  "argv": sys.argv[1:], "setting": os.environ.get("SETTING"), "name": __name__}))
print("last line of stderr", file=sys.stderr)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""
# A variant that launches its rank through its zygote, as `single_rank_job` does, and reports both.
LAUNCHER = """
import json, os, sys, tempfile
from testbed.engines.warm import zygote
server = zygote()
with tempfile.TemporaryFile() as output:
    rank = server.start("warm_main", ["0"], env={**os.environ, "SETTING": "from-request"}, session=True,
                        output=output)
    running = rank.poll()
    code = rank.wait(30)
    output.seek(0)
    report = json.loads(output.read().decode().splitlines()[0])
print(json.dumps({"pid": os.getpid(), "zygote": server.pid, "running": running, "code": code, "rank": report}))
"""
STOPS_WITHIN_S = 10.0


@pytest.fixture
def probe_env(tmp_path):
    """The environment of a server that can import the two probe modules, and its marker log."""
    (tmp_path / "warm_marker.py").write_text(MARKER)
    (tmp_path / "warm_main.py").write_text(MAIN.replace('"name": __name__', '"name": __name__, "sid": os.getsid(0)'))
    (tmp_path / "warm_launcher.py").write_text(LAUNCHER)
    log = tmp_path / "imports.log"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MARKER_LOG": str(log), "SETTING": "from-env"}
    yield env, log
    close_warm_servers()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + STOPS_WITHIN_S
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if not _gone(pid)]


@pytest.mark.integration
def test_children_fork_from_one_server_that_imported_their_modules_once(probe_env):
    env, log = probe_env
    server = warm_server(["warm_marker"], env)
    reports = []
    for code in (0, 3):
        with server.start("warm_main", [str(code)]) as child:
            out, err = child.communicate()
        assert child.returncode == code
        reports.append(json.loads(out))
        assert err.splitlines()[-1] == "last line of stderr"
    assert warm_server(["warm_marker"], env) is server  # kept for later calls

    assert {r["ppid"] for r in reports} == {server.process.pid} and len({r["pid"] for r in reports}) == 2
    assert all(r["marker_was_loaded"] and r["name"] == "__main__" and r["setting"] == "from-env" for r in reports)
    assert log.read_text().split() == [str(server.process.pid)]  # imported once, by the server alone
    assert reports[1]["argv"] == ["3"]

    close_warm_servers()
    assert _wait_gone([server.process.pid]) == []


def _signal_state(pid: int) -> str:
    """A process's state, its pending, blocked, ignored and caught signals and where it waits (/proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as err:
        return f"no /proc entry ({err})"
    fields = [line for line in status if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))]
    return "; ".join([*fields, f"wchan {wchan}"])


@pytest.fixture
def terminal_sigint():
    """SIGINT as a terminal gives it to the warm server this test starts, even where the suite runs
    with it ignored (``make test &``; see test_signals): a caught signal is reset to its default in an
    exec'd child, an ignored one stays ignored, and the server rightly gives its children SIGINT as it
    found it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.integration
def test_a_child_is_signalled_and_killed_like_a_process_and_stopped_with_its_server(probe_env, terminal_sigint):
    env, _ = probe_env
    server = warm_server(["warm_marker"], env)
    with server.start("warm_main", ["sleep"]) as child:
        # At once: a SIGINT that comes while the forked child is still becoming a process of its own
        # (the server ignores SIGINT) must not be lost (it once was, under load, and the wait timed out).
        child.send_signal(signal.SIGINT)
        # Should it time out, the child's signal state says whether the SIGINT is pending, blocked or
        # ignored (it was ignored when the suite ran in the background without `terminal_sigint`).
        try:
            code = child.wait(STOPS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGINT not acted on within {STOPS_WITHIN_S} s: {_signal_state(child.pid)}")
        assert code == -signal.SIGINT  # an uncaught KeyboardInterrupt, as CPython exits
        assert "KeyboardInterrupt" in child.communicate()[1]
    with server.start("warm_main", ["sleep"]) as child:
        child.kill()
        assert child.wait(STOPS_WITHIN_S) == -signal.SIGKILL
    with server.start("warm_main", ["sleep"]) as orphan:
        with pytest.raises(subprocess.TimeoutExpired):
            orphan.wait(0.2)
        os.kill(server.process.pid, signal.SIGKILL)  # as when Ray stops the worker that started the server
        assert _wait_gone([orphan.pid]) == []  # its parent-death signal (SIGINT) stopped it
        assert orphan.wait(STOPS_WITHIN_S) == 1 and "exited before it" in orphan.communicate()[1]


@pytest.mark.integration
def test_a_child_with_a_zygote_forks_its_launch_from_it_with_the_environment_and_session_it_asks(probe_env):
    """A sweep's pretrain variant launches its training rank so (`single_rank_job`): forked from the
    zygote its warm server forked with it, not started afresh; the zygote stops with the variant."""
    env, log = probe_env
    server = warm_server(["warm_marker"], env)
    with server.start("warm_launcher", [], zygote=True) as variant:
        out, err = variant.communicate()
    assert variant.returncode == 0, err
    report = json.loads(out)
    rank = report["rank"]

    assert rank["ppid"] == report["zygote"] and report["zygote"] != report["pid"]
    assert rank["marker_was_loaded"] and log.read_text().split() == [str(server.process.pid)]  # imported once
    assert rank["name"] == "__main__" and rank["argv"] == ["0"] and report["code"] == 0
    assert rank["setting"] == "from-request" and rank["sid"] == rank["pid"]  # its environment, its own session
    assert report["running"] is None or report["running"] == 0  # polling a running child answers None
    assert _wait_gone([report["zygote"]]) == []  # closed as the variant exited


@pytest.mark.integration
def test_a_server_whose_imports_started_a_thread_refuses_to_fork(probe_env, tmp_path):
    env, _ = probe_env
    (tmp_path / "warm_thread.py").write_text("import threading, time\n"
                                             "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    with pytest.raises(WarmServerError, match="exited with code 0"):
        warm_server(["warm_thread"], env).start("warm_main", ["0"])


@pytest.mark.integration
def test_every_kind_warm_modules_import_without_starting_a_thread():
    modules = sorted({name for kind in RUNNERS for name in warm_modules(kind)})
    code = ("import importlib, sys, threading\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print(threading.active_count())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]


@pytest.mark.integration
def test_the_rank_modules_import_a_ranks_code_and_deepspeed_on_a_cpu_build_without_a_thread():
    """What a pretrain variant's zygote holds for its rank (`testbed.pretrain.rank_modules`)."""
    assert launches_ranks("pretrain") and "testbed.pretrain.rank_modules" in warm_modules("pretrain")
    assert not launches_ranks("federated")
    code = ("import os, sys, threading, torch\n"
            "env = {k: v for k, v in os.environ.items() if k != 'DS_ACCELERATOR'}\n"
            "os.environ.clear(); os.environ.update(env)\n"
            "import testbed.pretrain.rank_modules\n"
            "print(threading.active_count(), 'testbed.pretrain.ds_worker' in sys.modules, 'deepspeed' in sys.modules,"
            " torch.version.cuda is None, os.environ.get('DS_ACCELERATOR'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    threads, worker, deepspeed, cpu_build, accelerator = done.stdout.split()
    assert threads == "1" and worker == "True"
    assert deepspeed == cpu_build and accelerator == ("cpu" if cpu_build == "True" else "None")


SWEEP = {
    **TINY_SCENARIO,
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
    "training": {"steps": 8, "eval_every": 4, "checkpoint_every": 4},
    "sweep": {"grid": {"seed": [1, 2]}, "parallel": 1},
}


def _watched_sweep(*args: object) -> tuple[subprocess.CompletedProcess, dict[int, tuple[int, str]]]:
    """``testbed run ARGS`` to its end, with every process seen in its tree: pid -> (parent, command)
    (the sweep's own command is "sweep"); then checks that none of them outlives it."""
    child = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", *map(str, args), "--quiet"],
                             env={**os.environ, "CI": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, tuple[int, str]] = {child.pid: (os.getpid(), "sweep")}
    root = psutil.Process(child.pid)
    while child.poll() is None:
        try:
            for process in root.children(recursive=True):
                # The latest command line: one caught between fork and exec shows its parent's first.
                seen[process.pid] = process.ppid(), " ".join(process.cmdline()) or seen.get(process.pid, (0, ""))[1]
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = child.communicate()
    assert _wait_gone(list(seen)) == [], f"still running after the sweep: {seen}"
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), seen


def _final_metrics(sweep_dir: Path) -> dict[str, dict]:
    return {slug: r["final_metrics"] for slug, r in json.loads((sweep_dir / "summary.json").read_text())[
        "variants"].items()}


@pytest.mark.integration
def test_variants_fork_from_one_warm_server_and_compute_what_fresh_processes_do(write_scenario, tmp_path):
    path = write_scenario(SWEEP)

    warm, seen = _watched_sweep(path, "--run-dir", tmp_path / "warm")
    fresh, seen_fresh = _watched_sweep(path, "--run-dir", tmp_path / "fresh", "--set", "sweep.processes=fresh",
                                       "--set", "sweep.grid.seed=[2]")  # one fresh variant is enough to compare

    assert warm.returncode == 0 and fresh.returncode == 0, warm.stderr + fresh.stderr
    # The server is the sweep's child; the variants, forked from it, share its command line.
    sweep = next(pid for pid, (_, command) in seen.items() if command == "sweep")
    servers = [pid for pid, (parent, command) in seen.items() if parent == sweep and "warm_server" in command]
    assert len(servers) == 1
    # No fresh interpreter: a variant's would run `testbed.cli run <variant>.yaml`. A child caught between
    # fork and exec (the warm server's, git's) still shows the sweep's own command line: not a variant.
    own = " ".join(map(str, warm.args))
    assert not [command for _, command in seen.values() if "testbed.cli" in command and command != own]
    assert [pid for pid, (parent, _) in seen.items() if parent == servers[0]]  # the variants, caught running
    assert len([command for _, command in seen_fresh.values() if "testbed.cli run" in command]) == 1
    warm_metrics, fresh_metrics = _final_metrics(tmp_path / "warm"), _final_metrics(tmp_path / "fresh")
    assert len(warm_metrics) == 2 and list(fresh_metrics) == ["seed=2"]
    assert warm_metrics["seed=2"] == fresh_metrics["seed=2"]  # bit for bit


@pytest.mark.integration
def test_a_pretrain_variants_rank_forks_from_its_zygote_and_computes_what_a_fresh_rank_does(write_scenario,
                                                                                          tmp_path):
    from tests.pretrain.test_pretrain_run import DETERMINISTIC, TINY_PRETRAIN

    path = write_scenario({**TINY_PRETRAIN, "pretrain": {**TINY_PRETRAIN["pretrain"], "steps": 4},
                           "sweep": {"grid": {"seed": [2]}, "parallel": 1}})

    warm, seen = _watched_sweep(path, "--run-dir", tmp_path / "warm")
    fresh, seen_fresh = _watched_sweep(path, "--run-dir", tmp_path / "fresh", "--set", "sweep.processes=fresh")

    assert warm.returncode == 0 and fresh.returncode == 0, warm.stderr + fresh.stderr
    ranks = "-m testbed.pretrain.ds_worker"
    assert not [command for _, command in seen.values() if ranks in command]  # forked, not a fresh interpreter
    assert [command for _, command in seen_fresh.values() if ranks in command]  # (and a child it forks)
    warm_metrics, fresh_metrics = _final_metrics(tmp_path / "warm"), _final_metrics(tmp_path / "fresh")
    assert all(warm_metrics["seed=2"][name] == fresh_metrics["seed=2"][name] for name in DETERMINISTIC)


def _default_sigint() -> None:
    """SIGINT as a terminal gives it, even where the suite runs with it ignored (see test_signals)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.integration
def test_ctrl_c_on_a_sweep_stops_its_variants_and_its_warm_server(write_scenario, tmp_path):
    long = {**SWEEP, "training": {"steps": 5000, "eval_every": 50, "checkpoint_every": 100},
            "sweep": {"grid": {"seed": [1, 2]}, "parallel": 2}}
    sweep_dir = tmp_path / "sweep"
    child = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(write_scenario(long)), "--run-dir",
                              str(sweep_dir), "--quiet"], env={**os.environ, "CI": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 300
        while len(list(sweep_dir.glob("variants/*/metrics.jsonl"))) < 2:
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()[1][-2000:]
            time.sleep(0.1)
        tree = psutil.Process(child.pid).children(recursive=True)
        servers = [p for p in tree if p.ppid() == child.pid and "testbed.engines.warm_server" in " ".join(p.cmdline())]
        assert len(servers) == 1 and len([p for p in tree if p.ppid() == servers[0].pid]) == 2  # the variants
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err[-2000:]
    assert f"testbed resume {sweep_dir}" in err
    assert _wait_gone([p.pid for p in tree]) == []
    assert not list(sweep_dir.glob("variants/*/summary.json"))  # stopped mid-run: resumable, not completed


def test_a_sweep_folder_continues_with_fresh_processes_but_not_with_other_variants():
    from testbed.sweep import _what_runs

    warm = {**SWEEP, "sweep": {**SWEEP["sweep"], "processes": "warm"}}
    assert _what_runs({**SWEEP, "sweep": {**SWEEP["sweep"], "processes": "fresh"}}) == _what_runs(warm)
    assert _what_runs({**SWEEP, "sweep": {**SWEEP["sweep"], "grid": {"seed": [3]}}}) != _what_runs(warm)


def test_a_sweep_folder_continues_after_its_description_or_parallelism_changes():
    from testbed.sweep import _what_runs

    reworded = {**SWEEP, "description": "now says 5 seeds", "sweep": {**SWEEP["sweep"], "parallel": 2}}
    assert _what_runs(reworded) == _what_runs(SWEEP)
    assert _what_runs({**SWEEP, "training": {**SWEEP["training"], "steps": 9}}) != _what_runs(SWEEP)


@pytest.mark.integration
def test_a_kept_server_outlives_the_sweeps_inside_the_block_and_stops_with_it(probe_env):
    """`testbed reproduce` keeps one server for the sweeps of all its scenarios; without a block a
    sweep's end stops its server, as before."""
    env, log = probe_env
    with servers_kept():
        server = warm_server(["warm_marker"], env)
        with servers_kept():  # nested: the inner block's end stops nothing
            release_warm_servers()  # a sweep ends
        assert server.alive() and warm_server(["warm_marker"], env) is server
        release_warm_servers()
        assert warm_server(["warm_marker"], env) is server
    assert _wait_gone([server.process.pid]) == []
    assert log.read_text().split() == [str(server.process.pid)]  # imported once for every sweep

    unkept = warm_server(["warm_marker"], env)
    release_warm_servers()
    assert _wait_gone([unkept.process.pid]) == []
