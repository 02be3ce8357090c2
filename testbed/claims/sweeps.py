"""The claims of a plain ``testbed run`` sweep: verdicts from its variant folders, in ``claims.json``.

``testbed reproduce`` keeps results in the repository; a sweep run by hand gets the same verdicts
in its own folder (and its report), called on the variants it completed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.claims.config import ClaimsConfig
from testbed.claims.evaluate import Side, Verdict, evaluate
from testbed.claims.results import record_of
from testbed.claims.statistics import Interval
from testbed.run import RunFolder, atomic_write

CLAIMS_FILE = "claims.json"


def verdicts_json(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """The verdicts as plain data: each statement (its type; its quote and source, None for a
    researcher's own claim), its verdict and every group's numbers and secondary values."""
    def interval(i: Interval | None) -> dict[str, Any] | None:
        return None if i is None else {"mean": i.mean, "low": i.low, "high": i.high, "n": i.n, "method": i.method}

    def side(s: Side | None) -> dict[str, Any] | None:
        return None if s is None else {"text": s.text, "left": s.left, "right": s.right,
                                       "interval": interval(s.interval)}

    return [{"id": v.statement.id, "type": v.statement.type, "quote": v.statement.quote,
             "source": v.statement.source, "condition": v.statement.condition, "verdict": v.verdict,
             "groups": [{"group": g.group, "verdict": g.verdict, "seeds": g.seeds, "predicate": side(g.predicate),
                         "precondition": side(g.precondition), "precondition_holds": g.precondition_holds,
                         "secondary": [{"text": d.text, "interval": interval(d.interval)} for d in g.secondary]}
                        for g in v.groups]} for v in verdicts]


def write_sweep_claims(sweep: RunFolder, claims: ClaimsConfig, variants: Mapping[str, Mapping[str, Any]],
                       source: str) -> list[Verdict]:
    metrics = {}
    for slug, raw in variants.items():
        record = record_of(sweep.path / "variants" / slug, raw)
        if record is not None:
            metrics[slug] = record["final_metrics"]
    verdicts = evaluate(claims, variants, metrics, source)
    atomic_write(sweep.path / CLAIMS_FILE, (json.dumps(verdicts_json(verdicts), indent=1) + "\n").encode())
    return verdicts


def read_sweep_claims(folder: Path) -> list[dict[str, Any]]:
    path = folder / CLAIMS_FILE
    return json.loads(path.read_text()) if path.is_file() else []
