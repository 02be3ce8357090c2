"""The per-client record of a federated run: each round, the weight and flag every client got.

Round aggregates (``malicious_weight``, detection precision and recall) say how much a rule let
the attackers in; they do not say which honest clients it dropped. For every rule that weighs or
flags clients (`testbed.federated.server.client_weights`) the round loop appends one line per
round to ``clients.jsonl`` in the run folder, right after that round's metrics record::

    {"round": 3, "clients": {"0": {"byzantine": false, "weight": 0.125, "flagged": false, "learned": 0.11},
                             "1": {"byzantine": true, "weight": 0.0, "flagged": true, "learned": 0.02}, ...}}

keyed by partition id, over the clients that replied that round. ``flagged`` is there only for
rules that flag clients, ``learned`` only for SDEA (the softmax of its logits, before FINCH's
filtering). A rule without per-client weights (FedMedian, trimmed mean, Bulyan) writes no file.

Like metrics.jsonl, the file is appended and fsynced, and a resumed run first drops the lines of
rounds after its checkpoint (`rewind`), which it computes again: one line per round, never two.

Two metrics come from the same line and go into metrics.jsonl: ``attacker_auroc`` (how well the
negated weight ranks Byzantine clients above honest ones; SDEA's learned weight, so a rule that
zeroes every flagged client still gets a graded score) and ``honest_zeroed`` (honest clients given
no weight, or flagged).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from testbed.run import RunFolder

CLIENTS_FILE = "clients.jsonl"
# A weight at or below ZERO_WEIGHT counts as dropping the client, or at or below ZERO_SHARE of an
# equal share where that is smaller: a federation of 10^6 clients gives each an equal 1e-6.
ZERO_WEIGHT, ZERO_SHARE = 1e-6, 1e-2


def learned_weights(history: Sequence[dict[str, Any]], ids: Sequence[int]) -> list[float] | None:
    """SDEA's learned softmax weights of the last round (``history[-1]["learned"]``) in ``ids`` order."""
    if not history or "learned" not in history[-1]:
        return None
    last = history[-1]
    by_id = dict(zip(last["client_ids"], last["learned"]))
    return [float(by_id[i]) for i in ids]


def clients_line(ids: Sequence[int], weights: Sequence[float], flagged: Sequence[bool] | None,
                 learned: Sequence[float] | None, malicious: Collection[int]) -> dict[str, Any]:
    """The round's record of every client (without its round number), keyed by partition id."""
    clients: dict[str, dict[str, Any]] = {}
    for row, client in enumerate(ids):
        entry: dict[str, Any] = {"byzantine": client in malicious, "weight": float(weights[row])}
        if flagged is not None:
            entry["flagged"] = bool(flagged[row])
        if learned is not None:
            entry["learned"] = float(learned[row])
        clients[str(client)] = entry
    return {"clients": clients}


def attacker_auroc(weights: Sequence[float], byzantine: Sequence[bool]) -> float | None:
    """AUROC of telling Byzantine from honest clients by their negated weight, ties counting half
    (1.0: every attacker weighs less than every honest client; 0.5: chance; 0.0: inverted).
    None without both kinds of client."""
    if all(byzantine) or not any(byzantine):
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score([bool(b) for b in byzantine], [-float(w) for w in weights]))


def dropped(entry: dict[str, Any], clients: int) -> bool:
    """Whether the rule gave the client (near) zero weight or flagged it, in a round of ``clients``."""
    return bool(entry.get("flagged")) or entry["weight"] <= min(ZERO_WEIGHT, ZERO_SHARE / clients)


def round_metrics(line: dict[str, Any]) -> dict[str, Any]:
    """``attacker_auroc`` (where there are attackers and honest clients) and ``honest_zeroed`` of a line."""
    entries = list(line["clients"].values())
    byzantine = [e["byzantine"] for e in entries]
    scores = [e.get("learned", e["weight"]) for e in entries]
    metrics: dict[str, Any] = {"honest_zeroed": sum(dropped(e, len(entries)) for e in entries if not e["byzantine"])}
    auroc = attacker_auroc(scores, byzantine)
    if auroc is not None:
        metrics["attacker_auroc"] = auroc
    return metrics


def read_rounds(run_dir: Path) -> list[dict[str, Any]]:
    """The complete lines of a run folder's clients.jsonl ([] without one)."""
    return RunFolder(run_dir).read_records(CLIENTS_FILE)


def append_round(run: RunFolder, server_round: int, line: dict[str, Any]) -> None:
    """Append the round's line (clients in partition-id order) and force it to disk."""
    run.append_record(CLIENTS_FILE, {"round": server_round, **line})


def rewind(run: RunFolder, last_round: int) -> None:
    """Keep the lines of rounds up to ``last_round`` (the checkpoint a run resumes from), which
    also drops a torn last line; the resumed run appends the later rounds again."""
    run.keep_records(CLIENTS_FILE, lambda line: line["round"] <= last_round)
