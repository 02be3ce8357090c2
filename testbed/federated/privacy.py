"""Differential privacy of a federated run: Flower's DP wrappers and mods, and an RDP accountant.

```yaml
federated:
  privacy:
    mode: central          # central: the server adds the noise (DP-FedAvg); local: each client (LocalDpMod)
    clipping: fixed        # fixed | adaptive (Andrew et al. 2021, geometric update of the norm; central only)
    clip_on: server        # server | client (Flower's fixedclipping_mod / adaptiveclipping_mod)
    noise_multiplier: 1.0  # z: noise std = z * C on the sum of clipped updates (on each update: local)
    clipping_norm: 1.0     # C (adaptive: the initial norm)
    delta: 1.0e-5
    target_epsilon: 8      # stop before the round whose epsilon would exceed it
```

The mechanisms are Flower's own (``flwr.serverapp.strategy.DifferentialPrivacy{Server,Client}Side
{Fixed,Adaptive}Clipping``, ``flwr.clientapp.mod.{fixedclipping_mod, adaptiveclipping_mod,
LocalDpMod}``), used as they are (`testbed.federated.dp` builds them, their noise seeded). This
module holds the accountant and the checks (the block, `PrivacyConfig`, is in `testbed.federated.config`).

Accounting (Flower 1.42's own ``flwr.supercore.privacy_accounting`` refuses client sampling as an
amplification and any rule but FedAvg's, so opacus' RDP accountant does it): a round is one
sampled Gaussian mechanism on the clients, add/remove-one-client neighbours. Central DP: sampling
rate q = the share of clients sampled per round (1 without ``federated.sampling``; a fixed-size
sample is accounted as Poisson sampling at q = m/N, as DP-FedAvg's authors do), noise multiplier z
(adaptive clipping: z is the effective multiplier of Andrew et al.'s Theorem 1, which Flower splits
between the update and the clipped count). The noise is calibrated to the uniform mean of the clipped
updates, so the clients are weighted equally (not by example counts), and only mean-based rules keep
the guarantee. Local DP: every client's release is a Gaussian mechanism of multiplier z, seen by the
server with its sender, so q = 1 (no amplification) over every round; any rule is post-processing.

A caveat of Flower 1.42's adaptive clipping, used here as it is: its wrappers and
``adaptiveclipping_mod`` count the *clipped* updates (``norm_bit``) where Andrew et al.'s b counts
the unclipped ones, so ``C <- C exp(-lr (clipped share - target_quantile))`` moves the norm away from
the target quantile (all updates clipped: the norm shrinks, 0.1 -> 0.091 in one round). The
privacy accounting does not depend on it (the noise multiplier is the same at any norm).
"""

from __future__ import annotations

from testbed.federated.config import FederatedConfig, PrivacyConfig

# Rules whose aggregate is the mean of the (clipped) updates, perhaps followed by a server optimiser:
# the ones central DP's noise (calibrated to the mean's sensitivity C/m) protects.
MEAN_RULES = frozenset({"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "fedprox"})


def sampling_rate(federated: FederatedConfig, num_clients: int) -> float:
    """The share of clients a round samples: ``federated.sampling``'s rate, 1 without it."""
    sampling = getattr(federated, "sampling", None)
    return 1.0 if sampling is None else float(sampling.rate(num_clients))


def clients_per_round(federated: FederatedConfig, num_clients: int) -> int:
    """The clients a round samples (the m of DP-FedAvg's noise std z * C / m)."""
    sampling = getattr(federated, "sampling", None)
    return num_clients if sampling is None else int(sampling.per_round(num_clients))


def epsilon_curve(config: PrivacyConfig, q: float, rounds: int) -> list[float]:
    """Epsilon at ``config.delta`` after rounds 1..``rounds``: RDP of the sampled Gaussian mechanism
    (opacus), composed over rounds, converted at opacus' default orders."""
    try:
        from opacus.accountants import RDPAccountant
        from opacus.accountants.analysis import rdp
    except ImportError:
        raise ImportError("federated.privacy needs opacus: pip install 'testbed[privacy]'") from None
    orders = RDPAccountant.DEFAULT_ALPHAS
    q = 1.0 if config.mode == "local" else q
    one = rdp.compute_rdp(q=q, noise_multiplier=config.noise_multiplier, steps=1, orders=orders)
    return [float(rdp.get_privacy_spent(orders=orders, rdp=one * r, delta=config.delta)[0])
            for r in range(1, rounds + 1)]


def last_round(federated: FederatedConfig, num_clients: int) -> int:
    """The last round the privacy budget allows (every round without a target)."""
    config = federated.privacy
    if config is None or config.target_epsilon is None:
        return federated.rounds
    curve = epsilon_curve(config, sampling_rate(federated, num_clients), federated.rounds)
    allowed = [r for r, eps in enumerate(curve, start=1) if eps <= config.target_epsilon]
    return allowed[-1] if allowed else 0


def check_privacy(federated: FederatedConfig, strategy: str, num_clients: int) -> None:
    """Refuse a privacy block that cannot run; raises ValueError 'field: why' (path under federated)."""
    config = federated.privacy
    if config is None:
        return
    if config.mode == "central" and strategy not in MEAN_RULES:
        raise ValueError(f"privacy.mode: central DP's noise is calibrated to the mean of the clipped updates; "
                         f"strategy '{strategy}' is not a mean (use one of {', '.join(sorted(MEAN_RULES))}, "
                         "or mode: local, whose noise any rule keeps)")
    m = clients_per_round(federated, num_clients)
    if config.mode == "central" and config.clipping == "adaptive":
        stddev = config.clipped_count_stddev or m / 20
        if config.noise_multiplier >= 2 * stddev:
            raise ValueError(f"privacy.clipped_count_stddev: {stddev:g} is too small for noise_multiplier "
                             f"{config.noise_multiplier:g} (adaptive clipping needs z < 2 * clipped_count_stddev)")
    if config.target_epsilon is not None:
        first = epsilon_curve(config, sampling_rate(federated, num_clients), 1)[0]
        if first > config.target_epsilon:
            raise ValueError(f"privacy.target_epsilon: {config.target_epsilon:g} is exceeded by the first round "
                             f"already (epsilon {first:.4g} at delta {config.delta:g}); raise it, or the noise")


def privacy_metrics(federated: FederatedConfig, num_clients: int, server_round: int) -> dict[str, float]:
    """The round's record entries: epsilon spent after it (at ``privacy.delta``)."""
    config = federated.privacy
    if config is None:
        return {}
    return {"epsilon": epsilon_curve(config, sampling_rate(federated, num_clients), server_round)[-1]}
