"""Flower's DP mechanisms in a federated run (see `testbed.federated.privacy` for the block and the
accountant): the central-DP strategy wrapper the scenario asks for, and the client-side mods.

Flower's wrappers and mods draw their noise from numpy's global generator; here it is seeded from
the root seed around each round's aggregation (and each client's local-DP release) and restored
afterwards, so a rerun, or a resumed run, adds the same noise. With ``privacy.audit`` the canary
clients' replies join each round's before Flower's wrapper (the mechanism that then runs, and why
it is the one the accountant counts: `testbed.federated.audit`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.clientapp import mod
from flwr.serverapp import Grid
from flwr.serverapp import strategy as flower
from flwr.serverapp.strategy import Strategy

from testbed.determinism import numpy_seeded
from testbed.federated.audit import CanaryAudit, SampleCanaryAudit, flat, unflat
from testbed.federated.config import PrivacyConfig
from testbed.federated.privacy import clients_per_round, sampling_rate
from testbed.federated.setup import federation_seeds
from testbed.scenario import Scenario
from testbed.seeding import SeedTree, stream

CENTRAL_NOISE = stream("privacy/round.{}", "the central-DP noise Flower's wrapper adds in a round's aggregation")
LOCAL_NOISE = stream("privacy.local/client.{}.round.{}", "a client's local-DP noise in a round")


def private_strategy(inner: Strategy, scenario: Scenario) -> Strategy:
    """``inner`` wrapped in Flower's central-DP wrapper the scenario asks for (unchanged without
    central DP), its noise seeded per round."""
    federated = scenario.federated
    assert federated is not None  # a federated scenario
    config = federated.privacy
    if config is None:
        return inner
    if config.mode == "local":
        if config.audit is None:
            return inner
        canaries = SampleCanaryAudit(config.audit, config, 1.0, federation_seeds(scenario).child("privacy.audit"),
                                     clip_on_server=True)  # OVERSHOOT: LocalDpMod clips it to exactly C
        return LocallyAudited(inner, canaries, local_dp_mod(config), getattr(inner, "weighted_by_key", "num-examples"))
    m = clients_per_round(federated, scenario.data.num_clients)
    wrapped: Strategy
    if config.clipping == "fixed":
        cls = (flower.DifferentialPrivacyServerSideFixedClipping if config.clip_on == "server"
               else flower.DifferentialPrivacyClientSideFixedClipping)
        wrapped = cls(inner, config.noise_multiplier, config.clipping_norm, m)
    else:
        cls_a = (flower.DifferentialPrivacyServerSideAdaptiveClipping if config.clip_on == "server"
                 else flower.DifferentialPrivacyClientSideAdaptiveClipping)
        wrapped = cls_a(inner, config.noise_multiplier, m, initial_clipping_norm=config.clipping_norm,
                        target_clipped_quantile=config.target_quantile, clip_norm_lr=config.clip_norm_lr,
                        clipped_count_stddev=config.clipped_count_stddev)
    audit = None
    if config.audit is not None:  # drawn only with the block: a run without it keeps every number
        q = sampling_rate(federated, scenario.data.num_clients)
        audit = CanaryAudit(config.audit, config, q, federation_seeds(scenario).child("privacy.audit"),
                            clip_on_server=config.clip_on == "server")
    return SeededPrivacy(wrapped, federation_seeds(scenario).child("privacy"),
                         getattr(inner, "weighted_by_key", "num-examples"), audit)


class SeededPrivacy(Strategy):
    """Delegates to a Flower DP wrapper: weighs the clients equally (its noise is calibrated to the
    uniform mean of the clipped updates) and seeds numpy's global generator per round around its
    aggregation. With an ``audit``, its canary clients' replies join each round's before the
    wrapper (`testbed.federated.audit`). `state` / `restore`: adaptive clipping's current norm and
    the audit's scores, for checkpoints."""

    def __init__(self, dp: Strategy, seeds: SeedTree, weight_key: str, audit: CanaryAudit | None = None) -> None:
        self.dp, self.seeds, self.weight_key, self.audit = dp, seeds, weight_key, audit
        self.current = ArrayRecord()  # the round's global model, which the canaries' updates start from

    def state(self) -> dict[str, Any]:
        kept = {"clipping_norm": float(self.dp.clipping_norm)}  # type: ignore[attr-defined]  # every DP wrapper
        return kept if self.audit is None else kept | self.audit.state()

    def restore(self, state: dict[str, Any]) -> None:
        if "clipping_norm" in state:
            self.dp.clipping_norm = float(state["clipping_norm"])  # type: ignore[attr-defined]
        if self.audit is not None:
            self.audit.restore(state)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self.current = arrays
        return self.dp.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        for reply in replies:
            for record in reply.content.metric_records.values():
                if self.weight_key in record:
                    record[self.weight_key] = 1
        if self.audit is not None:
            return self._audited(server_round, replies)
        with numpy_seeded(self.seeds.integer(f"round.{server_round}")):
            return self.dp.aggregate_train(server_round, replies)

    def _audited(self, server_round: int, replies: list[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The round with its sampled canaries' replies through the wrapper, told the round's reply
        count so that its noise is z C on the sum; the release rescaled to (sum + noise) / m, m the
        clients a round samples (the mechanism the accountant counts: `testbed.federated.audit`)."""
        assert self.audit is not None  # only with an audit
        wrapper: Any = self.dp  # every DP wrapper has num_sampled_clients
        per_round = wrapper.num_sampled_clients
        everyone = replies + self.audit.replies(server_round, self.current, replies, self.weight_key)
        wrapper.num_sampled_clients = len(everyone)
        try:
            with numpy_seeded(self.seeds.integer(f"round.{server_round}")):
                released, metrics = self.dp.aggregate_train(server_round, everyone)
        finally:
            wrapper.num_sampled_clients = per_round
        if released is None:
            return None, metrics
        start = flat(self.current)
        released = unflat(start + (flat(released) - start) * (len(everyone) / per_round), released)
        self.audit.observe(self.current, released)
        return released, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.dp.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.dp.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.dp.summary()


class LocallyAudited(Strategy):
    """Local DP's audit (``privacy.audit.kind: sample``): each round, every sample canary's release,
    made by the run's own ``LocalDpMod`` (`testbed.federated.audit.SampleCanaryAudit`), joins the real
    clients' releases before ``inner`` aggregates them. `state` / `restore`: the audit's scores."""

    def __init__(self, inner: Strategy, audit: SampleCanaryAudit, local_dp: Any, weight_key: str) -> None:
        self.inner, self.audit, self.local_dp, self.weight_key = inner, audit, local_dp, weight_key
        self.current = ArrayRecord()

    def state(self) -> dict[str, Any]:
        return self.audit.state()

    def restore(self, state: dict[str, Any]) -> None:
        self.audit.restore(state)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self.current = arrays
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        canaries = self.audit.releases(server_round, self.current, replies, self.weight_key, self.local_dp)
        return self.inner.aggregate_train(server_round, replies + canaries)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.inner.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.inner.summary()


def dp_checkpoint(strategy: Strategy) -> dict[str, Any]:
    """What a checkpoint keeps of the DP wrapper (adaptive clipping's current norm, an audit's scores);
    empty without one."""
    return {"dp_state": strategy.state()} if isinstance(strategy, SeededPrivacy | LocallyAudited) else {}


def restore_dp(strategy: Strategy, checkpoint: dict[str, Any] | None) -> None:
    """Put a checkpoint's DP state (`dp_checkpoint`) back into the wrapper, so a resumed run clips as
    the uninterrupted one would."""
    if isinstance(strategy, SeededPrivacy | LocallyAudited) and checkpoint is not None and "dp_state" in checkpoint:
        strategy.restore(checkpoint["dp_state"])


def local_dp_mod(config: PrivacyConfig) -> Any:
    """Flower's ``LocalDpMod`` for the privacy block: clipping norm C, and the epsilon for which the
    mod's std = sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon comes out as z * C."""
    epsilon = math.sqrt(2 * math.log(1.25 / config.delta)) / config.noise_multiplier
    return mod.LocalDpMod(config.clipping_norm, config.clipping_norm, epsilon, config.delta)


def client_mods(scenario: Scenario) -> list[Callable[..., Any]]:
    """The client-side DP mods the scenario asks for: Flower's clipping mod (central DP clipped on the
    clients) or its LocalDpMod (local DP), the latter's noise seeded per client and round."""
    federated = scenario.federated
    config = federated.privacy if federated else None
    if config is None:
        return []
    if config.mode == "central":
        if config.clip_on == "server":
            return []
        return [mod.fixedclipping_mod if config.clipping == "fixed" else mod.adaptiveclipping_mod]
    local = local_dp_mod(config)
    seeds = federation_seeds(scenario).child("privacy.local")

    def seeded_local_dp(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        pid = int(context.node_config["partition-id"])
        server_round = int(msg.content["config"]["server-round"])  # type: ignore[arg-type]  # flwr: any record
        with numpy_seeded(seeds.integer(f"client.{pid}.round.{server_round}")):
            return local(msg, context, call_next)

    return [seeded_local_dp]
