"""The small result files that keep a sweep's per-seed final metrics in the repository.

One JSON file per scenario (``docs/reproduction/results/<kind>/<name>.json``): for each variant,
its seed, the hash of its scenario (engine block left out: the same scenario gives the same
numbers on any engine), its final metrics (timings left out), its wall time, the commit that
ran it (``+dirty``: with uncommitted changes) and its code fingerprint (`testbed.provenance`: the
git ids of the testbed modules it imported, the versions of the distributions, the BLAS kernel;
each distinct fingerprint is kept once, in the file's ``fingerprints`` table, and a record names
it by its digest). A record whose hash no longer matches the scenario is stale: it is not used, and
the variant runs again. A record whose fingerprint differs from what HEAD would run is out of date
(`testbed reproduce --check`); a check that re-runs a sample of the file's variants and finds the
same verdicts and numbers within its tolerance marks every record ``verified`` at its commit and
moves its fingerprint to the one it was checked against. Newer records also name the CPU model of
the machine that ran them (torch picks its kernels by CPU, so the same code can give other numbers
elsewhere: docs/architecture.md), read when the record is kept, on the machine whose sweep folder
holds the run. It is beside the fingerprint, not in it: a change there makes every published file
stale at once. The file is written with sorted keys, so unchanged results give unchanged bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed.provenance import fingerprint_digest
from testbed.run import RunFolder, atomic_write

FORMAT = 2  # 2: code fingerprints (format 1 files read as records without one)


def variant_hash(raw: Mapping[str, Any]) -> str:
    """What identifies a variant's numbers: its scenario without the engine block (nor the name)."""
    kept = {k: v for k, v in raw.items() if k not in ("engine", "name", "description")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_timing(key: str) -> bool:
    """Keys that measure the machine, not the method (they differ between identical runs)."""
    return key.endswith("_s") or "throughput" in key or "per_s" in key or "seconds" in key


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """``{slug: record}`` from a result file (empty where there is none), each record with its
    whole fingerprint (not the digest the file names it by)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    table = data.get("fingerprints", {})
    records = {slug: dict(record) for slug, record in data.get("variants", {}).items()}
    for record in records.values():
        if "fingerprint" in record:
            record["fingerprint"] = table.get(record["fingerprint"])
    return records


def write_results(path: Path, scenario: str, records: Mapping[str, Mapping[str, Any]]) -> None:
    """Write a result file: each record naming its fingerprint by digest, the table of them once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table: dict[str, Any] = {}
    variants: dict[str, Any] = {}
    for slug in sorted(records):
        record = dict(records[slug])
        if record.get("fingerprint"):
            digest = fingerprint_digest(record["fingerprint"])
            table[digest] = record["fingerprint"]
            record["fingerprint"] = digest
        else:
            record.pop("fingerprint", None)
        variants[slug] = record
    data = {"format": FORMAT, "scenario": scenario, "fingerprints": table, "variants": variants}
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
            "commit": (summary.get("versions") or {}).get("testbed_commit", "unknown"),
            "fingerprint": summary.get("fingerprint"), "cpu": cpu_model()}


@functools.cache
def cpu_model() -> str:
    """This machine's CPU model as the kernel names it (``AMD EPYC``, ``Intel(R) Xeon(R) ...``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "unknown"


def provenance_line(records: Iterable[Mapping[str, Any]]) -> str:
    """Which clean commit produced or verified these rows (a paper's records): ``produced at commit
    C``, ``verified at commit V`` (a re-run sample at V agreed: `testbed.claims.check`), ``produced or
    verified at commit C``; or, where no one clean commit stands behind every record, the commits
    they come from and how to fix it; then, where the records name them, the CPUs they ran on
    (`cpu_line`). The line each paper's page shows under its table."""
    listed = list(records)
    if not listed:
        return "no rows recorded yet"
    cpus = cpu_line(listed)
    return _commit_line(listed) + (f"; {cpus}" if cpus else "")


def _commit_line(listed: list[Mapping[str, Any]]) -> str:
    by_commit: dict[str, list[Mapping[str, Any]]] = {}
    for record in listed:
        by_commit.setdefault(str(record.get("verified") or record.get("commit", "unknown")), []).append(record)
    if all(not commit.endswith("+dirty") and commit != "unknown" for commit in by_commit):
        if len(by_commit) == 1:
            ((commit, rows),) = by_commit.items()
            return f"every row {_how(rows)} at commit {commit}"
        # A paper whose scenarios were re-run or verified at different clean commits: each names its rows.
        return "every row produced or verified at a clean commit: " + ", ".join(
            f"{len(rows)} {_how(rows)} at commit {commit}" for commit, rows in sorted(by_commit.items()))
    produced = sorted({str(r.get("commit", "unknown")) for r in listed})
    return (f"not produced or verified at one clean commit (runs from {', '.join(produced)}): "
            "`testbed reproduce --check` lists what is out of date")


def cpu_line(records: Iterable[Mapping[str, Any]]) -> str:
    """On which CPUs these records ran: ``run on AMD EPYC``, or ``run on AMD EPYC (12 rows) and Intel
    Xeon (3 rows)``, rows kept before CPUs were recorded counted as such; empty where none says."""
    by_cpu = Counter(str(record.get("cpu") or "") for record in records)
    if not set(by_cpu) - {""}:
        return ""
    if len(by_cpu) == 1:
        return f"run on {next(iter(by_cpu))}"
    parts = [f"{cpu or 'a CPU not recorded'} ({n} {'row' if n == 1 else 'rows'})"
             for cpu, n in sorted(by_cpu.items(), key=lambda item: (not item[0], item[0]))]
    return "run on " + ", ".join(parts[:-1]) + " and " + parts[-1]


def _how(records: list[Mapping[str, Any]]) -> str:
    """Whether these records were produced, verified, or some of each, at their commit."""
    verified = sum(1 for r in records if r.get("verified"))
    return "produced" if not verified else "verified" if verified == len(records) else "produced or verified"


def current(records: Mapping[str, Mapping[str, Any]], variants: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The records that still belong to the scenario's variants (same slug, same hash)."""
    return {slug: dict(records[slug]) for slug, raw in variants.items()
            if slug in records and records[slug].get("config") == variant_hash(raw)}
