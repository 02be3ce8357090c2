"""Validate is bounded in time and memory, and refuses what a run cannot do (issue 37, item 2).

Each case is a scenario that `testbed validate` used to accept (and the run then crash on, or never
finish), or that made validate itself allocate gigabytes or recurse until it failed. Each must now
be one line on stderr naming the file and the field, exit 2, for ``validate`` and ``run`` alike,
with no run folder left. The same cases, and some bundled scenarios, then run through
``testbed validate`` in a process of its own under a 4 GiB address-space limit and a 60 s timeout.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.sweep_names import axis_labels
from tests.core.test_bad_input_corpus import Case, Replace, _assert_one_line_naming, _prepare, assert_refused_cleanly
from tests.pretrain.test_pretrain_run import TINY_PRETRAIN

W, F, D, P = "workload", "federated", "decentralized", "pretrain"
REPOSITORY = Path(__file__).resolve().parents[2]

STATEMENT = {"id": "fast-wins", "quote": "a larger step learns faster", "source": "Table 1",
             "predicate": "fast.test_accuracy > slow.test_accuracy"}
CLAIMS_SWEEP: dict[str, Any] = {
    "sweep": {"variants": [{"workload.lr": 0.3}, {"workload.lr": 0.001}], "grid": {"seed": [0, 1]}},
    "claims": {"paper": "bisam", "seeds": 2, "fewer_seeds_because": "a test",
               "arms": {"fast": {"workload.lr": 0.3}, "slow": {"workload.lr": 0.001}}, "statements": [STATEMENT]},
}


def _predicate(text: str) -> dict[str, Any]:
    """The claims sweep with ``text`` as its one predicate."""
    return {**CLAIMS_SWEEP, "claims": {**CLAIMS_SWEEP["claims"], "statements": [{**STATEMENT, "predicate": text}]}}


# Six axes of 20 values: 64 million grid points, which validate used to list (6.6 GB in 65 s).
GRID_20_6 = {key: list(range(20)) for key in ("seed", "training.steps", "training.eval_every",
                                              "training.checkpoint_every", "training.batch_size", "workload.hidden")}

CASES: list[Case] = [
    # --- decentralized: the accountant's size, known before it allocates ------------------------------
    Case("decentralized-steps-1e9", D, {"decentralized": {"steps": 10**9}},
         ("decentralized.steps", "1000000000", "GiB")),
    Case("decentralized-walk-steps-1e9-hitting-time", D,
         {"decentralized": {"random_walk": {"steps": 10**9, "accounting": "hitting_time"}}},
         ("decentralized.random_walk.steps", "GiB")),
    Case("decentralized-gossip-steps-too-long", D, {"decentralized": {"steps": 2_000_000}},
         ("decentralized.steps", "gossip", " s ")),
    Case("decentralized-replicate-ignored", D, {"data": {"replicate": 3}}, ("data.replicate", "decentralized")),
    # --- sweeps --------------------------------------------------------------------------------------
    Case("sweep-grid-20-to-the-6", W, {"sweep": {"grid": GRID_20_6}}, ("sweep", "64000000 variants", "10000")),
    Case("sweep-variants-times-grid-over-cap", W,
         {"sweep": {"grid": {"seed": list(range(5001))}, "variants": [{"workload.lr": 0.1}, {"workload.lr": 0.2}]}},
         ("sweep", "10002 variants")),
    Case("sweep-empty-axis", W, {"sweep": {"grid": {"seed": [], "workload.lr": [0.1, 0.2]}}},
         ("sweep.grid.seed", "empty")),
    Case("sweep-grid-key-under-sweep", W, {"sweep": {"grid": {"sweep.grid.seed": [[1, 2]]}}},
         ("sweep.grid", "sweep.grid.seed")),
    Case("sweep-variant-key-under-sweep", W, {"sweep": {"variants": [{"sweep.parallel": 2}]}},
         ("sweep.variants.0", "sweep.parallel")),
    # --- claims: predicates checked whole in validate -----------------------------------------------
    Case("claims-predicate-long-sum", W,
         _predicate("fast.test_accuracy > " + " + ".join(["slow.test_accuracy"] * 3000)),
         ("claims.statements.0.predicate", "characters")),
    Case("claims-predicate-5000-unary-minus", W, _predicate("fast.test_accuracy > " + "-" * 5000 + "1"),
         ("claims.statements.0.predicate", "at most 1000")),
    Case("claims-predicate-deep-brackets", W, _predicate("fast.test_accuracy > " + "(" * 150 + "1" + ")" * 150),
         ("claims.statements.0.predicate", "levels")),
    Case("claims-predicate-divides-by-zero", W, _predicate("fast.test_accuracy / 0 > slow.test_accuracy"),
         ("claims.statements.0.predicate", "divides by zero")),
    Case("claims-predicate-divides-by-constant-zero", W, _predicate("fast.test_accuracy / (2 - 2) > 0.5"),
         ("claims.statements.0.predicate", "divides by zero")),
    Case("claims-predicate-max-of-one", W, _predicate("max(fast.test_accuracy) > slow.test_accuracy"),
         ("claims.statements.0.predicate", "max() takes at least 2")),
    Case("claims-predicate-abs-of-two", W, _predicate("abs(fast.test_accuracy, slow.test_accuracy) > 0"),
         ("claims.statements.0.predicate", "abs() takes 1 argument")),
    Case("claims-predicate-400-digits", W, _predicate("fast.test_accuracy > " + "9" * 400),
         ("claims.statements.0.predicate", "400 digits", "out of range")),
    Case("claims-predicate-infinite-constant", W, _predicate("fast.test_accuracy > 1e999"),
         ("claims.statements.0.predicate", "inf", "finite")),
    Case("claims-predicate-overflowing-product", W, _predicate("fast.test_accuracy > " + "*".join(["1e15"] * 25)),
         ("claims.statements.0.predicate", "no finite number")),
    # --- backdoors ------------------------------------------------------------------------------------
    Case("attack-backdoor-value-1e308", F,
         {"federated": {"attack": Replace({"name": "badnets", "fraction": 0.25, "value": 1e308})}},
         ("federated.attack.value", "1000")),
    Case("attack-backdoor-value-nan", F,
         {"federated": {"attack": Replace({"name": "model_replacement", "fraction": 0.25, "value": math.nan})}},
         ("federated.attack.value",)),
    Case("attack-backdoor-target-2-pow-70", F,
         {"federated": {"attack": Replace({"name": "badnets", "fraction": 0.25, "target": 2**70})}},
         ("federated.attack.target", str(2**70))),
    # --- data -----------------------------------------------------------------------------------------
    Case("data-size-skew-exponential-800-clients", F,
         {"data": {"num_clients": 800, "partition": Replace({"type": "size", "sizes": "exponential"})},
          "federated": {"attack": None}},
         ("data.partition.sizes", "800 clients")),
    # --- pretraining: a batch the corpus cannot fill ---------------------------------------------------
    Case("pretrain-batch-over-the-attention-sink-task", P,
         {"pretrain": {"corpus": Replace({"source": "bigram_backcopy", "bigram_backcopy": {"documents": 40}}),
                       "batch_size": 100000}},
         ("pretrain.batch_size", "100000", "at most 40")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_unbounded_or_impossible_scenario_is_one_line_exit_2(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def test_a_pretraining_batch_larger_than_the_packed_corpus_is_refused_at_run_start(cli, tmp_path):
    """The packed corpus's size is known only once it is prepared: validate accepts the batch, the
    run refuses it before anything trains, in one line, and leaves no folder."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({**TINY_PRETRAIN, "pretrain": {**TINY_PRETRAIN["pretrain"], "batch_size": 100000}}))
    assert cli("validate", path)[0] == 0
    run_dir = tmp_path / "run"
    code, _, err = cli("run", path, "--run-dir", run_dir, "--quiet")
    assert code == 2, err[-2000:]
    line = _assert_one_line_naming(err, path, [], ("pretrain.batch_size", "100000", "the packed corpus has"))
    sequences = int(line.split("the packed corpus has ")[1].split()[0])
    assert 0 < sequences < 100000
    assert not run_dir.exists()


def _best_seconds(values: list[Any]) -> float:
    """The shorter of two timings of naming ``values``' folders."""
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        axis_labels(values)
        timings.append(time.perf_counter() - started)
    return min(timings)


@pytest.mark.parametrize("make", [lambda n: list(range(n)), lambda n: [{"name": "sdea", "lr": i} for i in range(n)]],
                         ids=["seeds", "values-sharing-a-name"])
def test_a_long_grid_axis_is_named_in_linear_time(make):
    """50,000 seeds took 126 s to validate: each value's folder name was compared with every other
    value's. Four times the values must now take about four times as long, not sixteen."""
    assert axis_labels(make(3)) in (["0", "1", "2"], ["sdea+lr=0", "sdea+lr=1", "sdea+lr=2"])
    small, large = _best_seconds(make(4_000)), _best_seconds(make(16_000))
    assert large < 8 * small + 0.05, (small, large)


# --- the acceptance check: a process of its own under a 4 GiB address-space limit ---------------------

ADDRESS_SPACE = 4 << 30  # `ulimit -v 4194304`
TIMEOUT_S = 60
BUNDLED = ("scenarios/quickstart.yaml", "scenarios/decentralized/fig2_utility.yaml",
           "scenarios/federated/backdoor-badnets.yaml", "scenarios/pretrain/factrecall.yaml")


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _validate_limited(path: Path | str, overrides: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(path), *overrides], cwd=cwd,
                          preexec_fn=_limited, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_case_is_refused_within_a_minute_in_4_gib_of_address_space(tmp_path, case: Case):
    path, overrides = _prepare(case, tmp_path)
    done = _validate_limited(path, overrides, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    _assert_one_line_naming(done.stderr, path, overrides, case.words)


@pytest.mark.integration
@pytest.mark.parametrize("scenario", BUNDLED)
def test_bundled_scenarios_validate_within_a_minute_in_4_gib_of_address_space(scenario: str):
    done = _validate_limited(REPOSITORY / scenario, [], REPOSITORY)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""


CORPUS_CHILD = """
import contextlib, io, json, os, sys, time
from testbed.cli import main
results = []
for case in json.load(open(sys.argv[1])):
    os.chdir(case["cwd"])
    err = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["validate", case["path"], *case["overrides"]])
    results.append({"id": case["id"], "code": code, "seconds": time.perf_counter() - started, "err": err.getvalue()})
json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.mark.integration
def test_the_whole_bad_input_corpus_is_refused_in_4_gib_of_address_space(tmp_path):
    """Every case of tests/core/test_bad_input_corpus.py through ``testbed validate`` in one process
    under the limit (one process, so the corpus costs seconds, not a start-up per case): exit 2, one
    line naming the field, each within the minute."""
    from tests.core.test_bad_input_corpus import CASES as CORPUS

    manifest = []
    for case in CORPUS:
        folder = tmp_path / case.id
        folder.mkdir()
        path, overrides = _prepare(case, folder)
        manifest.append({"id": case.id, "cwd": str(folder), "path": str(path), "overrides": overrides})
    (tmp_path / "cases.json").write_text(json.dumps(manifest))
    command = [sys.executable, "-c", CORPUS_CHILD, str(tmp_path / "cases.json"), str(tmp_path / "out.json")]
    done = subprocess.run(command, preexec_fn=_limited, capture_output=True, text=True, timeout=20 * TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["id"]: r for r in json.loads((tmp_path / "out.json").read_text())}
    assert len(results) == len(CORPUS) >= 80
    for case, entry in zip(CORPUS, manifest):
        result = results[case.id]
        assert result["code"] == 2 and result["seconds"] < TIMEOUT_S, (case.id, result)
        _assert_one_line_naming(result["err"], Path(entry["path"]), entry["overrides"], case.words)
