"""A one-run canary audit of a federated run's DP (``federated.privacy.audit``), in the run itself
(Steinke, Nasr, Jagielski, NeurIPS 2023; the statistics are `testbed.privacy.one_run`): canary
clients for central DP (``kind: client``, below) and sample canaries for local DP (``kind: sample``,
`SampleCanaryAudit`).

```yaml
federated:
  privacy: {mode: central, noise_multiplier: 3.0, clipping_norm: 1.0, delta: 1.0e-5,
            audit: {canaries: 1000, kind: client, significance: 0.05}}
```

Canaries: ``canaries`` canary clients, each in the population independently with probability 1/2
(stream ``privacy.audit/included``). Canary i's update is a fixed direction: a random unit vector
u_i in parameter space (``privacy.audit/directions``) times 2 C, which Flower's server-side wrapper
clips to exactly C (client-side clipping: times C, what ``fixedclipping_mod`` would send). Each
round, each included canary is sampled with the accountant's probability q, independently (Poisson,
``privacy.audit/round.R``), and its reply (the global model + 2 C u_i, weight 1) joins the real
clients' replies *before* Flower's DP wrapper, which clips and noises them as it does the real ones
(`testbed.federated.dp.SeededPrivacy`). Nothing of the audit is drawn without the block.

The mechanism that runs is the one the accountant counts. Flower adds noise of std z C / n to the
mean of the replies, n the ``num_sampled_clients`` fixed at construction (m, the real clients per
round). With canaries the round has m + k replies, so the wrapper is told n = m + k for that
round: noise z C on the *sum* of the clipped updates, the sampled Gaussian mechanism of multiplier
z. Flower's mean divides that sum by m + k, which would tell the server how many canaries came; the
release is therefore rescaled to the global model + (sum + noise) / m, DP-FedAvg's fixed
denominator (a public constant: post-processing). Each canary, in or out of a round with
probability q, its contribution exactly C, is then protected by exactly the accountant's epsilon,
which is what the one-run theorem tests. The audit runs only with plain FedAvg (the rescaling
assumes the release is the noised mean; a server optimiser would make it another function of it)
and fixed clipping (adaptive clipping's norm would follow the canaries).

Adversary: the central-DP threat model's, which sees only the released global models. It scores
canary i by the matched filter sum_t <global_{t+1} - global_t, u_i> and guesses "included" for its
best-scored; `epsilon_lower_bound` turns its right guesses into an empirical lower bound on
epsilon at confidence 1 - significance, `audit_power` says the most any attacker could show, and
`verdict` compares both with the accountant's epsilon after the same rounds. Every round's record
carries the audit so far (``privacy.audit.*``); the last one goes into summary.json.

Strength: the matched filter's cross-talk between canaries is about sqrt(included canaries /
parameters) of one canary's signal, so the adversary finds a leaking mechanism only on a model with
many more parameters than canaries (1000 canaries: a 128-wide MLP on digits, 9,610 parameters, finds
noise left out; `audit_power` bounds any attacker, this one included). Cost: the directions are
kept as one float32 matrix, 4 x canaries x parameters bytes (38 MB for the scenario above).

Resume: inclusions, directions and samples are drawn from the root seed; the scores (the only
state) are checkpointed with the DP wrapper's (`state`, `restore`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from testbed.determinism import numpy_seeded
from testbed.federated.config import AuditConfig, PrivacyConfig
from testbed.privacy.one_run import audit_power, canaries_needed, epsilon_lower_bound, verdict
from testbed.seeding import SeedTree, stream

DIRECTIONS = stream("privacy.audit/directions", "the canary clients' update directions (random unit vectors)")
INCLUDED = stream("privacy.audit/included", "which canary clients are in the population (probability 1/2 each)")
CANARY_ROUND = stream("privacy.audit/round.{}", "which included canary clients a round samples (probability q)")
CANARY_NOISE = stream("privacy.audit/canary.{}.round.{}", "a sample canary client's local-DP noise in a round")

# The crafted update's norm in units of C on server-side clipping: above C, so that Flower's wrapper
# itself clips it, to exactly C.
OVERSHOOT = 2.0
ABSENT = 1e-3  # a sample canary's update without its sample, relative to the crafted one
PREFIX = "privacy.audit."


def flat(record: ArrayRecord) -> np.ndarray:
    """The record's arrays as one float64 vector (in the record's key order)."""
    return np.concatenate([a.astype(np.float64).ravel() for a in record.to_numpy_ndarrays()])


def unflat(vector: np.ndarray, like: ArrayRecord) -> ArrayRecord:
    """``vector`` cut into arrays of ``like``'s keys, shapes and dtypes."""
    arrays, start = {}, 0
    for key, template in zip(like.keys(), like.to_numpy_ndarrays(), strict=True):
        part = vector[start:start + template.size].reshape(template.shape).astype(template.dtype)
        arrays[key], start = Array(np.ascontiguousarray(part)), start + template.size
    return ArrayRecord(arrays)


def canary_reply(like: Message, arrays: ArrayRecord, weight_key: str, reply_to: Message) -> Message:
    """A canary's reply: ``arrays`` under the record names of a real reply ``like``, whose metrics it
    copies (Flower requires the same keys in every reply; the round loop reads no aggregated training
    metric) with weight 1."""
    arrays_name = next(iter(like.content.array_records))
    metrics_name, metrics = next(iter(like.content.metric_records.items()))
    return Message(RecordDict({arrays_name: arrays, metrics_name: MetricRecord({**metrics, weight_key: 1})}),
                   reply_to=reply_to)


class CanaryAudit:
    """The canary clients of one run: their replies to a round, the adversary's scores, the verdict."""

    def __init__(self, config: AuditConfig, privacy: PrivacyConfig, q: float, seeds: SeedTree, *,
                 clip_on_server: bool) -> None:
        self.config, self.delta, self.q, self.seeds = config, privacy.delta, q, seeds
        self.norm = privacy.clipping_norm * (OVERSHOOT if clip_on_server else 1.0)
        self.included = seeds.numpy("included").random(config.canaries) < 0.5
        self.scores = np.zeros(config.canaries)
        self._directions: np.ndarray | None = None  # drawn once the model's size is known
        self._needed: dict[float, int | None] = {}  # `_canaries_needed`'s answers
        self._hopeless: float | None = None  # an epsilon no number of canaries can test
        self._power: float | None = None

    def directions(self, dimension: int) -> np.ndarray:
        """u_i, one unit vector per canary (rows; float32 to halve their memory)."""
        if self._directions is None:
            u = self.seeds.numpy("directions").standard_normal((self.config.canaries, dimension))
            self._directions = (u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float32)
        return self._directions

    def sampled(self, server_round: int) -> np.ndarray:
        """The included canaries in ``server_round``: each with probability q, independently."""
        drawn = self.seeds.numpy(f"round.{server_round}").random(self.config.canaries) < self.q
        return np.flatnonzero(self.included & drawn)

    def replies(self, server_round: int, current: ArrayRecord, real: Sequence[Message],
                weight_key: str) -> list[Message]:
        """The sampled canaries' replies to ``server_round``: the global model ``current`` plus the
        crafted update (`canary_reply`)."""
        if not real:
            return []
        start = flat(current)
        u = self.directions(start.size)
        return [canary_reply(real[0], unflat(start + self.norm * u[i].astype(np.float64), current), weight_key,
                             real[0]) for i in self.sampled(server_round)]

    def observe(self, current: ArrayRecord, released: ArrayRecord) -> None:
        """The adversary sees the round's released model: add <release - previous, u_i> to each score."""
        step = flat(released) - flat(current)
        self.scores += self.directions(step.size) @ step.astype(np.float32)

    def metrics(self, accountant_epsilon: float) -> dict[str, Any]:
        """The audit of the rounds so far against the accountant's epsilon after them."""
        significance = self.config.significance
        lower = epsilon_lower_bound(self.scores, self.included, self.delta, significance)
        if self._power is None:  # fixed for the run: the canaries and how many of them are in
            self._power = audit_power(self.config.canaries, self.delta, significance, included=int(self.included.sum()))
        power = self._power
        said = verdict(lower, power, accountant_epsilon)
        record: dict[str, Any] = {
            f"{PREFIX}epsilon_lower_bound": lower, f"{PREFIX}power": power, f"{PREFIX}verdict": said,
            f"{PREFIX}canaries": self.config.canaries, f"{PREFIX}canaries_included": int(self.included.sum()),
            f"{PREFIX}accountant_epsilon": accountant_epsilon, f"{PREFIX}significance": significance}
        if said == "too weak":
            needed = self._canaries_needed(accountant_epsilon)
            if needed is not None:  # absent: no number of canaries can at this delta
                record[f"{PREFIX}canaries_needed"] = needed
        return record

    def _canaries_needed(self, epsilon: float) -> int | None:
        """About how many canaries would test ``epsilon``: the count for it rounded up to 0.1 (which
        tests it too). The search takes up to seconds and epsilon grows every round: once per 0.1,
        and never again above an epsilon no count can test (the power has a peak)."""
        if self._hopeless is not None and epsilon >= self._hopeless:
            return None
        rounded = math.ceil(epsilon * 10) / 10
        if rounded not in self._needed:
            self._needed[rounded] = canaries_needed(rounded, self.delta, self.config.significance)
            if self._needed[rounded] is None:
                self._hopeless = rounded
        return self._needed[rounded]

    def state(self) -> dict[str, list[float]]:
        """The scores so far (what a checkpoint keeps; the rest is drawn from the root seed)."""
        return {"audit_scores": [float(s) for s in self.scores]}

    def restore(self, state: dict[str, Any]) -> None:
        if "audit_scores" in state:
            self.scores = np.asarray(state["audit_scores"], dtype=np.float64)


class SampleCanaryAudit(CanaryAudit):
    """``kind: sample``, the audit of local DP (Flower's ``LocalDpMod``): ``canaries`` canary clients
    that take part in every round, each holding one canary sample with probability 1/2. With its
    sample a canary's update is the crafted 2 C u_i, which the mod clips to exactly C; without it,
    none: the mod's input differs by exactly its sensitivity C, and a canary replies in every round
    either way (under local DP the server sees who replies, so a canary's presence may not tell). The
    accountant of local DP composes every round at q = 1, what each canary goes through. Every
    release passes through the run's own ``LocalDpMod``, its noise seeded per canary and round.

    Adversary: local DP's, the server itself, which sees each client's release: it scores canary i
    by sum_t <release_{i,t} - global_t, u_i>. Its releases join the round's replies with weight 1,
    as any client's would."""

    def releases(self, server_round: int, current: ArrayRecord, real: Sequence[Message], weight_key: str,
                 local_dp: Any) -> list[Message]:
        """Every canary's release in ``server_round``, through ``local_dp`` (a ``LocalDpMod``), its
        scores updated with what the server sees."""
        from flwr.app import Context

        if not real:
            return []
        start = flat(current)
        u = self.directions(start.size)
        arrays_name = next(iter(real[0].content.array_records))
        asked = Message(RecordDict({arrays_name: current}), dst_node_id=0, message_type="train")
        context = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={})
        out = []
        for i in range(self.config.canaries):
            # Without its sample a canary has no update; Flower's clipping divides by the update's norm,
            # so "none" is sent as a thousandth of the crafted one (what survives float32 parameters):
            # the two inputs differ by 0.998 C, within the sensitivity C the accountant counts.
            update = (self.norm if self.included[i] else self.norm * ABSENT) * u[i].astype(np.float64)
            reply = canary_reply(real[0], unflat(start + update, current), weight_key, asked)
            with numpy_seeded(self.seeds.integer(f"canary.{i}.round.{server_round}")):
                released = local_dp(asked, context, lambda _msg, _ctx, answer=reply: answer)
            out.append(released)
            seen = flat(next(iter(released.content.array_records.values()))) - start
            self.scores[i] += float(u[i] @ seen.astype(np.float32))
        return out
