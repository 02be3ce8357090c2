"""The small result files that keep a sweep's per-seed final metrics in the repository.

One JSON file per scenario (``docs/reproduction/results/<kind>/<name>.json``): for each variant,
its seed, the hash of its scenario (engine block left out: the same scenario gives the same
numbers on any engine), its final metrics (timings left out), its wall time and the commit that
ran it. A record whose hash no longer matches the scenario is stale: it is not used, and the
variant runs again. The file is written with sorted keys, so unchanged results give unchanged bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed.run import RunFolder, atomic_write

FORMAT = 1


def variant_hash(raw: Mapping[str, Any]) -> str:
    """What identifies a variant's numbers: its scenario without the engine block (nor the name)."""
    kept = {k: v for k, v in raw.items() if k not in ("engine", "name", "description")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_timing(key: str) -> bool:
    """Keys that measure the machine, not the method (they differ between identical runs)."""
    return key.endswith("_s") or "throughput" in key or "per_s" in key or "seconds" in key


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """``{slug: record}`` from a result file (empty where there is none)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return dict(data.get("variants", {}))


def write_results(path: Path, scenario: str, records: Mapping[str, Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, "scenario": scenario, "variants": {k: records[k] for k in sorted(records)}}
    atomic_write(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def record_of(folder: Path, raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record of a completed variant run folder, or None where it did not complete or ran
    another configuration than ``raw`` (a sweep folder left from before the scenario changed: its
    ``variants/<slug>.yaml`` says what the folder ran)."""
    run = RunFolder(folder)
    if not run.completed:
        return None
    spec = folder.parent / f"{folder.name}.yaml"
    if spec.is_file() and variant_hash(yaml.safe_load(spec.read_text()) or {}) != variant_hash(raw):
        return None
    summary = run.read_summary() or {}
    metrics = {k: v for k, v in (summary.get("final_metrics") or {}).items()
               if isinstance(v, int | float) and not isinstance(v, bool) and not is_timing(k)}
    return {"seed": int(raw.get("seed", 0)), "config": variant_hash(raw), "final_metrics": metrics,
            "wall_s": round(float((summary.get("timings") or {}).get("wall_s", 0.0)), 1),
            "commit": (summary.get("versions") or {}).get("testbed_commit", "unknown")}


def current(records: Mapping[str, Mapping[str, Any]], variants: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The records that still belong to the scenario's variants (same slug, same hash)."""
    return {slug: dict(records[slug]) for slug, raw in variants.items()
            if slug in records and records[slug].get("config") == variant_hash(raw)}
