"""``testbed reproduce --check``: which result files rest on code HEAD no longer runs, and do they still hold.

A record is out of date when its code fingerprint (`testbed.provenance`) differs from what the same
modules are at HEAD, with this environment's versions and this machine's BLAS: a module edited
since, a dependency upgraded, another kernel. A result file with such a record is **stale**.

With ``--sample N`` each stale file is checked the cheap way instead of re-run whole: a seeded sample
of its variants runs again at HEAD (in ``<runs-dir>/rerun/<size>/testbed-<tree>/<scenario>/``,
resumable like any sweep, across commits that left the code alone). The sample takes whole seeds,
every arm and every ``for_each`` group at each, so the sampled variants stay paired: at least
`MIN_SEEDS` seeds, then more while the sample stays within N.
The file **holds** when

- every verdict, called on the file's records with the sampled ones replaced by the re-runs, is the
  one the file gives (statement and group verdicts alike), and
- every number of every row (each side's mean and the mean margin, of the predicate and of the
  precondition), computed over the sampled seeds alone, moves by at most `TOLERANCE` of the row's
  scale (the larger of the two sides' old means), before against after.

The tolerance is relative to the row, not to each number, so a margin near zero is held to 1% of
what it compares, not to 1% of itself. Re-running gridcoarsen and vsdm at a later commit (issue 40)
gave rows equal to four significant figures, so 1% leaves room for rounding drift and still shows a
change of method; a file whose drift is larger is re-run whole, which is the safe side. The largest
relative difference of any single metric of any re-run variant is reported too, but does not
decide: there one per-seed metric drifted 11% while the rows held to four figures.

For trained models a sample meets the 1% only on a machine like the one that produced the file:
torch computes with its own MKL and oneDNN kernels, chosen by the CPU, which the fingerprint does
not see (its BLAS entry is numpy's OpenBLAS). The same code re-run on another CPU (bisam, strwae,
floodgnn and oodrobust, produced on an Intel Xeon and sampled on an AMD EPYC with the same OpenBLAS
kernel, 28 variants) gave other numbers in 26 variants, moved 19 rows by more than 1% (up to 1.2
standard deviations of the row over seeds) and changed no verdict. So a file whose sample does not
hold on another machine may rest on unchanged code; it is re-run whole all the same. Each row that
moves beyond the tolerance is reported with its move in standard deviations of the same number over
the file's seeds, the reader's measure of whether it is a seed's worth of noise or more.

A file that holds is recorded as verified at HEAD's commit (every record gets ``verified: <commit>``
and the fingerprint of the re-runs; the numbers stay those published), only from a clean tree unless
``--allow-dirty``. One that does not hold is to be re-run whole.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Mapping
from typing import Any

from testbed.claims.evaluate import GroupVerdict, Side, Verdict, evaluate, selects
from testbed.provenance import fingerprint_at_head, fingerprint_changes, fingerprint_digest

TOLERANCE = 0.01  # of a row's scale: see the module docstring
MIN_SEEDS = 2  # seeds of every arm a sample re-runs, at the least
SAMPLE_SEED = 0  # the sample is drawn from this seed and the scenario's path: the same sample every time


def stale_records(records: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """``{slug: changes}`` for the records whose fingerprint differs from HEAD's (compared once per
    distinct fingerprint: a file's records mostly share one)."""
    found: dict[str, list[str]] = {}
    seen: dict[str, list[str]] = {}
    for slug, record in records.items():
        fingerprint = record.get("fingerprint")
        if not fingerprint:
            found[slug] = ["no fingerprint recorded"]
            continue
        digest = fingerprint_digest(fingerprint)
        if digest not in seen:
            now = fingerprint_at_head(fingerprint)
            seen[digest] = ["not in a git checkout"] if now is None else fingerprint_changes(fingerprint, now)
        if seen[digest]:
            found[slug] = seen[digest]
    return found


def summarise(stale: Mapping[str, list[str]], shown: int = 3) -> str:
    """The commonest changes among the stale records, with how many records each concerns."""
    counts = Counter(change for changes in stale.values() for change in changes)
    top = [f"{change}: {n}" for change, n in counts.most_common(shown)]
    more = len(counts) - shown
    return "; ".join(top) + (f"; {more} more changes" if more > 0 else "")


def draw_sample(records: Mapping[str, Mapping[str, Any]], variants: Mapping[str, Mapping[str, Any]],
                arms: Mapping[str, Mapping[str, Any]], size: int, key: str) -> list[str]:
    """The slugs to re-run: every recorded variant some arm selects at `MIN_SEEDS` seeds drawn at
    random (seeded by ``key``), then at further seeds while the sample stays within ``size``."""
    by_seed: dict[int, list[str]] = {}
    for slug in sorted(records):
        if slug in variants and any(selects(arm, variants[slug]) for arm in arms.values()):
            by_seed.setdefault(int(records[slug]["seed"]), []).append(slug)
    order = sorted(by_seed)
    random.Random(f"{key}:{SAMPLE_SEED}").shuffle(order)
    sample: list[str] = []
    for count, seed in enumerate(order):
        if count >= MIN_SEEDS and len(sample) + len(by_seed[seed]) > size:
            break
        sample += by_seed[seed]
    return sorted(sample)


def duration(records: Mapping[str, Mapping[str, Any]], slugs: list[str]) -> str:
    """The wall time the given variants took when recorded (what re-running them one at a time costs
    on the machine that ran them): ``12.5 min``, ``40 s``."""
    seconds = sum(float(records[slug].get("wall_s", 0.0)) for slug in slugs)
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def compare(claims: Any, variants: Mapping[str, Mapping[str, Any]], records: Mapping[str, Mapping[str, Any]],
            rerun: Mapping[str, Mapping[str, Any]], source: str) -> tuple[list[str], float, str]:
    """Whether the re-run sample confirms the file: the problems found (empty when it holds), the
    largest relative difference of a single metric, and where it is (``metric of slug``)."""
    old = {slug: r["final_metrics"] for slug, r in records.items()}
    new = {**old, **{slug: r["final_metrics"] for slug, r in rerun.items()}}
    published = evaluate(claims, variants, old, source)
    problems = [f"{statement}: {before} -> {after}"
                for statement, before, after in _verdict_changes(published, evaluate(claims, variants, new, source))]
    sampled = {slug: variants[slug] for slug in rerun}
    before_rows = evaluate(claims, sampled, old, source, required_seeds=1)
    after_rows = evaluate(claims, sampled, new, source, required_seeds=1)
    spread = {(verdict.statement.id, group.group): group for verdict in published for group in verdict.groups}
    problems += _row_changes(before_rows, after_rows, spread)
    largest, where = 0.0, "the same numbers to the last bit"
    for slug, record in rerun.items():
        for metric, value in record["final_metrics"].items():
            if metric in old[slug]:
                difference = _relative(old[slug][metric], value)
                if difference > largest:
                    largest, where = difference, f"{metric} of {slug}"
    return problems, largest, where


def _verdict_changes(before: list[Verdict], after: list[Verdict]) -> list[tuple[str, str, str]]:
    changes = []
    for old, new in zip(before, after, strict=True):
        if old.verdict != new.verdict:
            changes.append((old.statement.id, old.verdict, new.verdict))
        for old_group, new_group in zip(old.groups, new.groups, strict=True):
            if old_group.verdict != new_group.verdict and old_group.group is not None:
                changes.append((f"{old.statement.id} ({old_group.group})", old_group.verdict, new_group.verdict))
    return changes


def _row_changes(before: list[Verdict], after: list[Verdict], spread: Mapping[tuple[str, str | None], GroupVerdict],
                 ) -> list[str]:
    """A line per row of the sampled seeds that moved beyond the tolerance; ``spread`` holds the rows
    over every seed of the file, to say how far that is in the row's own seed-to-seed spread."""
    problems = []
    for old, new in zip(before, after, strict=True):
        for old_group, new_group in zip(old.groups, new.groups, strict=True):
            label = old.statement.id + (f" ({old_group.group})" if old_group.group is not None else "")
            whole = spread.get((old.statement.id, old_group.group))
            for name in ("predicate", "precondition"):
                moved = _side_moved(getattr(old_group, name), getattr(new_group, name),
                                    getattr(whole, name) if whole is not None else None)
                if moved is not None:
                    problems.append(f"{label}: {name} {moved}")
    return problems


def _side_moved(old: Side | None, new: Side | None, whole: Side | None) -> str | None:
    """How a row's numbers moved beyond `TOLERANCE` of its scale (None when they did not), and how
    far that is in standard deviations of the same number over the file's seeds (``whole``): the
    reader's measure of whether the move is a seed's worth of noise, such as another CPU gives, or
    more (the tolerance decides; see the module docstring)."""
    if old is None or new is None:
        return None
    scale = max(abs(old.left), abs(old.right)) or 1.0
    pairs = [("left", old.left, new.left), ("right", old.right, new.right)]
    if old.interval is not None and new.interval is not None:
        pairs.append(("margin", old.interval.mean, new.interval.mean))
    worst = max(pairs, key=lambda pair: abs(pair[2] - pair[1]))
    if abs(worst[2] - worst[1]) <= TOLERANCE * scale:
        return None
    deviation = _seed_deviation(whole, worst[0])
    spread = (f"; {abs(worst[2] - worst[1]) / deviation:.2g} of its standard deviation over seeds"
              if deviation is not None and deviation > 1e-9 * scale else "")  # not a margin equal on every seed
    return f"{worst[0]} {worst[1]:.4g} -> {worst[2]:.4g} (more than {TOLERANCE:.0%} of {scale:.4g}{spread})"


def _seed_deviation(side: Side | None, part: str) -> float | None:
    """The sample standard deviation over seeds of a row's ``left``, ``right`` or ``margin`` (None
    below two seeds)."""
    if side is None:
        return None
    values = list(side.margins) if part == "margin" else [pair[part == "right"] for pair in side.sides]
    return statistics.stdev(values) if len(values) > 1 else None


def _relative(old: float, new: float) -> float:
    if old == new:
        return 0.0
    return abs(new - old) / max(abs(old), abs(new))


def mark_verified(records: Mapping[str, Mapping[str, Any]], rerun: Mapping[str, Mapping[str, Any]],
                  variants: Mapping[str, Mapping[str, Any]], commit: str) -> dict[str, dict[str, Any]]:
    """The records, each marked verified at ``commit`` with the fingerprint of the re-run of its own
    variant at another seed (variants of one arm import the same modules; another arm may import
    others), their numbers unchanged: the check found them within the tolerance."""
    by_setting = {_setting(variants[slug]): record["fingerprint"] for slug, record in rerun.items()
                  if record.get("fingerprint")}
    return {slug: {**record, "verified": commit,
                   "fingerprint": by_setting.get(_setting(variants[slug])) or record.get("fingerprint")}
            for slug, record in records.items()}


def _setting(raw: Mapping[str, Any]) -> str:
    """A variant's scenario without its seed and its name (a sweep names each variant after its slug,
    seed included): what its runs at every seed share."""
    return fingerprint_digest({key: value for key, value in raw.items() if key not in ("seed", "name")})
