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
from testbed.claims.evaluate import Verdict, evaluate
from testbed.claims.results import record_of
from testbed.run import RunFolder, atomic_write

CLAIMS_FILE = "claims.json"


def verdicts_json(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """The verdicts as plain data: each statement, its verdict and every group's numbers."""
    def side(s: Any) -> dict[str, Any] | None:
        if s is None:
            return None
        interval = s.interval and {"mean": s.interval.mean, "low": s.interval.low, "high": s.interval.high,
                                   "n": s.interval.n, "method": s.interval.method}
        return {"text": s.text, "left": s.left, "right": s.right, "interval": interval}

    return [{"id": v.statement.id, "quote": v.statement.quote, "source": v.statement.source, "verdict": v.verdict,
             "groups": [{"group": g.group, "verdict": g.verdict, "seeds": g.seeds, "predicate": side(g.predicate),
                         "precondition": side(g.precondition), "precondition_holds": g.precondition_holds}
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
