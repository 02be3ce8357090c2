"""The per-client record of a federated run: each round, the weight and flag every client got.

Round aggregates (``malicious_weight``, detection precision and recall) say how much a rule let
the attackers in; they do not say which honest clients it dropped. For every rule that weighs or
flags clients (`testbed.federated.server.client_weights`) the round loop appends one line per
round to ``clients.jsonl`` in the run folder, right after that round's metrics record, one column
per field over the clients that replied that round, in the round loop's order::

    {"round": 3, "ids": [0, 1, ...], "byzantine": [false, true, ...], "weight": [0.125, 0.0, ...],
     "flagged": [false, true, ...], "learned": [0.11, 0.02, ...]}

``flagged`` is there only for rules that flag clients, ``learned`` only for SDEA (the softmax of its
logits, before FINCH's filtering). A rule without per-client weights (FedMedian, trimmed mean,
Bulyan) writes no file. In memory a round is a `ClientsRound` of numpy arrays: columns rather than
a mapping per client, because a round of 10^6 clients held as 10^6 dicts took about 290 MB more
than the round itself (docs/performance.md, "A million clients"). Run folders written before the
columns (one ``"clients"`` mapping per line, partition id -> its entry) are read as well.

Like metrics.jsonl, the file is appended and fsynced, and a resumed run first drops the lines of
rounds after its checkpoint (`rewind`), which it computes again: one line per round, never two.

Two metrics come from the same round and go into metrics.jsonl: ``attacker_auroc`` (how well the
negated weight ranks Byzantine clients above honest ones; SDEA's learned weight, so a rule that
zeroes every flagged client still gets a graded score) and ``honest_zeroed`` (honest clients given
no weight, or flagged).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import UserError
from testbed.run import RunFolder

CLIENTS_FILE = "clients.jsonl"
# A weight at or below ZERO_WEIGHT counts as dropping the client, or at or below ZERO_SHARE of an
# equal share where that is smaller: a federation of 10^6 clients gives each an equal 1e-6.
ZERO_WEIGHT, ZERO_SHARE = 1e-6, 1e-2
MAX_PARTITION_ID = 999_999_999  # nine digits, as the record of the previous format allowed


@dataclass(frozen=True, eq=False)
class ClientsRound:
    """One round of the record: for each client that replied (``ids``, partition ids in the round
    loop's order), whether it is Byzantine, its weight, and the optional columns."""

    round: int
    ids: np.ndarray  # int64
    byzantine: np.ndarray  # bool
    weight: np.ndarray  # float64
    flagged: np.ndarray | None = None  # bool, for rules that flag clients
    learned: np.ndarray | None = None  # float64, SDEA's learned softmax weights

    def line(self) -> dict[str, Any]:
        """The round as clients.jsonl writes it (plain JSON lists)."""
        line: dict[str, Any] = {"round": self.round, "ids": self.ids.tolist(),
                                "byzantine": self.byzantine.tolist(), "weight": self.weight.tolist()}
        if self.flagged is not None:
            line["flagged"] = self.flagged.tolist()
        if self.learned is not None:
            line["learned"] = self.learned.tolist()
        return line

    def dropped(self) -> np.ndarray:
        """Per client: whether the rule gave it (near) zero weight or flagged it."""
        low = self.weight <= min(ZERO_WEIGHT, ZERO_SHARE / max(len(self.ids), 1))
        return low | self.flagged if self.flagged is not None else low

    def honest_dropped(self) -> np.ndarray:
        """The partition ids of the honest clients the rule zeroed or flagged this round."""
        return self.ids[self.dropped() & ~self.byzantine]


def clients_round(server_round: int, ids: Sequence[int], weights: Sequence[float], flagged: Sequence[bool] | None,
                  learned: Sequence[float] | None, malicious: Collection[int]) -> ClientsRound:
    """The round's record of the clients ``ids`` (partition ids, the round loop's order)."""
    numbers = np.asarray(ids, dtype=np.int64)
    attackers = np.fromiter(malicious, dtype=np.int64, count=len(malicious))
    return ClientsRound(server_round, numbers, np.isin(numbers, attackers), np.asarray(weights, dtype=np.float64),
                        None if flagged is None else np.asarray(flagged, dtype=bool),
                        None if learned is None else np.asarray(learned, dtype=np.float64))


def learned_weights(history: Sequence[dict[str, Any]], ids: Sequence[int]) -> list[float] | None:
    """SDEA's learned softmax weights of the last round (``history[-1]["learned"]``) in ``ids`` order."""
    if not history or "learned" not in history[-1]:
        return None
    last = history[-1]
    by_id = dict(zip(last["client_ids"], last["learned"]))
    return [float(by_id[i]) for i in ids]


def attacker_auroc(weights: Sequence[float] | np.ndarray, byzantine: Sequence[bool] | np.ndarray) -> float | None:
    """AUROC of telling Byzantine from honest clients by their negated weight, ties counting half
    (1.0: every attacker weighs less than every honest client; 0.5: chance; 0.0: inverted).
    None without both kinds of client."""
    labels = np.asarray(byzantine, dtype=bool)
    if labels.all() or not labels.any():
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, -np.asarray(weights, dtype=np.float64)))


def round_metrics(record: ClientsRound) -> dict[str, Any]:
    """``attacker_auroc`` (where there are attackers and honest clients) and ``honest_zeroed`` of a round."""
    metrics: dict[str, Any] = {"honest_zeroed": int(len(record.honest_dropped()))}
    auroc = attacker_auroc(record.learned if record.learned is not None else record.weight, record.byzantine)
    if auroc is not None:
        metrics["attacker_auroc"] = auroc
    return metrics


def read_rounds(run_dir: Path) -> list[ClientsRound]:
    """The complete rounds of a run folder's clients.jsonl ([] without one); a line of another
    shape (an edited or damaged file) is a `UserError` naming the file and line."""
    path = run_dir / CLIENTS_FILE
    return [parsed_round(line, path, number) for number, line in
            enumerate(RunFolder(run_dir).read_records(CLIENTS_FILE), 1)]


def parsed_round(line: dict[str, Any], path: Path, number: int) -> ClientsRound:
    """One line of clients.jsonl, in either format, as a `ClientsRound`."""
    record = _columns(line) if "clients" not in line else _mapping(line)
    if record is None:
        raise UserError(f"{path}, line {number}: not a round of the per-client record (a 'round' number and "
                        "'ids', 'byzantine' and 'weight' columns, optionally 'flagged' and 'learned', of one "
                        "value per client); the run folder was altered")
    return record


def _columns(line: dict[str, Any]) -> ClientsRound | None:
    """A line of the column format, or None where a column is missing, mistyped or of another length."""
    ids = line.get("ids")
    if type(line.get("round")) is not int or not isinstance(ids, list) \
            or not all(type(i) is int and 0 <= i <= MAX_PARTITION_ID for i in ids):
        return None
    def column(key: str, valid: Callable[[list[Any]], bool]) -> bool:
        value = line.get(key)
        return isinstance(value, list) and len(value) == len(ids) and valid(value)

    if not (column("byzantine", _bools) and column("weight", _numbers)
            and ("flagged" not in line or column("flagged", _bools))
            and ("learned" not in line or column("learned", _numbers))):
        return None
    return ClientsRound(line["round"], np.asarray(ids, dtype=np.int64), np.asarray(line["byzantine"], dtype=bool),
                        np.asarray(line["weight"], dtype=np.float64),
                        np.asarray(line["flagged"], dtype=bool) if "flagged" in line else None,
                        np.asarray(line["learned"], dtype=np.float64) if "learned" in line else None)


def _mapping(line: dict[str, Any]) -> ClientsRound | None:
    """A line of the format before the columns: ``"clients"`` maps each partition id to its entry."""
    clients = line.get("clients")
    if type(line.get("round")) is not int or not isinstance(clients, dict) \
            or not all(_client_entry(client, entry) for client, entry in clients.items()):
        return None
    ids = list(clients)  # in the round loop's order, as written
    entries = list(clients.values())
    has = {key: any(key in entry for entry in entries) for key in ("flagged", "learned")}
    return ClientsRound(
        line["round"], np.array([int(client) for client in ids], dtype=np.int64),
        np.array([entry["byzantine"] for entry in entries], dtype=bool),
        np.array([entry["weight"] for entry in entries], dtype=np.float64),
        np.array([entry.get("flagged", False) for entry in entries], dtype=bool) if has["flagged"] else None,
        np.array([entry.get("learned", np.nan) for entry in entries], dtype=np.float64) if has["learned"] else None)


def _client_entry(client: str, entry: Any) -> bool:
    """Whether one client's entry of a line of the previous format has the shape it was written in."""
    return client.isascii() and client.isdigit() and len(client) <= 9 and isinstance(entry, dict) \
        and type(entry.get("byzantine")) is bool and _number(entry.get("weight")) \
        and type(entry.get("flagged", False)) is bool and _number(entry.get("learned", 0.0))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers(values: list[Any]) -> bool:
    return all(map(_number, values))


def _bools(values: list[Any]) -> bool:
    return all(type(value) is bool for value in values)


def append_round(run: RunFolder, record: ClientsRound) -> None:
    """Append the round's line and force it to disk."""
    run.append_record(CLIENTS_FILE, record.line())


def rewind(run: RunFolder, last_round: int) -> None:
    """Keep the lines of rounds up to ``last_round`` (the checkpoint a run resumes from), which
    also drops a torn last line; the resumed run appends the later rounds again."""
    # A line without a round number (an altered file) stays, for the report to name it.
    run.keep_records(CLIENTS_FILE, lambda line: type(line.get("round")) is not int or line["round"] <= last_round)
