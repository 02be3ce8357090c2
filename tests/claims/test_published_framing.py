"""The published claims count each fact once: no two claims of a paper's scenario are the same
numbers twice, and every secondary value reads metrics the committed result files hold."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from testbed.claims import results
from testbed.claims.evaluate import Verdict, evaluate
from testbed.claims.papers import PAPERS
from testbed.claims.reproduce import load, result_path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [path for paper in PAPERS.values() for path in paper.scenarios]


def _verdicts(path: str) -> list[Verdict]:
    item = load(ROOT, path, "full")
    records = results.current(results.read_results(result_path(ROOT, path, "full", ROOT / "runs")), item.variants)
    return evaluate(item.claims, item.variants, {slug: r["final_metrics"] for slug, r in records.items()}, path)


def _margins(verdict: Verdict) -> np.ndarray:
    """Every group's per-seed margins, in one row."""
    return np.array([m for group in verdict.groups for m in (group.predicate.margins if group.predicate else ())])


def _varies(margins: np.ndarray) -> bool:
    return len(margins) > 1 and bool(margins.max() > margins.min())


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS)
def test_claims_are_distinct_facts_and_secondary_values_are_measured(path):
    verdicts = _verdicts(path)
    # Best-fit Packing's invented-answer rows had recall's margins exactly (invented = 1 - recall):
    # such a row is the recall claim's secondary value, not a second claim. (Margins equal on every
    # seed are a ceiling or an exact value, where two facts may well meet.)
    varying = [v for v in verdicts if v.statement.type == "claim" and _varies(_margins(v))]
    for first, second in itertools.combinations(varying, 2):
        a, b = _margins(first), _margins(second)
        assert a.shape != b.shape or not np.allclose(a, b, rtol=1e-9, atol=1e-12), \
            f"{path}: {first.statement.id} and {second.statement.id} have the same per-seed margins"
    shown = [d for v in verdicts for g in v.groups for d in g.secondary]
    assert all(d.interval is not None and d.interval.n >= 2 for d in shown), path
    assert len(shown) >= sum(len(v.statement.secondary) for v in verdicts)
