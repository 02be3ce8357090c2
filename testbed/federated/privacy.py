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
    audit: {canaries: 1000, kind: client, significance: 0.05}  # one-run canary audit (testbed.federated.audit)
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
The run steps its accountant (`RoundAccountant`) once per round, each round adding the same RDP
as opacus' ``RDPAccountant`` composes equal steps (the same floats), and finds the last round a
target allows by bisection: no cost grows with the rounds already run.

With ``audit`` the run also audits its mechanism, in the same run: canary clients through Flower's
wrapper, scored by an adversary that sees only the released models, the one-run lower bound on
epsilon beside this accountant's, with its power and a verdict (`testbed.federated.audit`).

A caveat of Flower 1.42's adaptive clipping, used here as it is: its wrappers and
``adaptiveclipping_mod`` count the *clipped* updates (``norm_bit``) where Andrew et al.'s b counts
the unclipped ones, so ``C <- C exp(-lr (clipped share - target_quantile))`` moves the norm away from
the target quantile (all updates clipped: the norm shrinks, 0.1 -> 0.091 in one round). The
privacy accounting does not depend on it (the noise multiplier is the same at any norm).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

from testbed.federated.config import FederatedConfig, PrivacyConfig

if TYPE_CHECKING:
    from testbed.federated.audit import CanaryAudit


def mean_rules() -> list[str]:
    """The strategies whose aggregate is the mean of the (clipped) updates, perhaps followed by a
    server optimiser (they declare ``streamed``): the ones central DP's noise (calibrated to the
    mean's sensitivity C/m) protects."""
    from testbed.federated.strategies import registered_strategies

    return sorted(name for name, declared in registered_strategies().items() if declared.streamed)


def sampling_rate(federated: FederatedConfig, num_clients: int) -> float:
    """The share of clients a round samples: ``federated.sampling``'s rate, 1 without it."""
    sampling = getattr(federated, "sampling", None)
    return 1.0 if sampling is None else float(sampling.rate(num_clients))


def clients_per_round(federated: FederatedConfig, num_clients: int) -> int:
    """The clients a round samples (the m of DP-FedAvg's noise std z * C / m)."""
    sampling = getattr(federated, "sampling", None)
    return num_clients if sampling is None else int(sampling.per_round(num_clients))


# opacus' default RDP orders, ``RDPAccountant.DEFAULT_ALPHAS`` (tests/core/test_validate_imports.py holds them equal).
RDP_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


@cache
def _rdp():
    """opacus' RDP analysis (the accountant's own functions, `opacus.accountants.analysis.rdp`), or the
    extra to install. The module needs only numpy and scipy, but importing it through its package runs
    ``opacus/__init__``, which imports torch: it is loaded from its file, so validating a DP scenario
    imports no torch (the numbers are the same functions')."""
    import importlib.util
    from pathlib import Path

    package = importlib.util.find_spec("opacus")
    if package is None or not package.submodule_search_locations:
        raise ImportError("federated.privacy needs opacus: pip install 'testbed[privacy]'")
    path = Path(next(iter(package.submodule_search_locations))) / "accountants" / "analysis" / "rdp.py"
    spec = importlib.util.spec_from_file_location("testbed.federated._opacus_rdp", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"federated.privacy: opacus has no RDP analysis at {path}; reinstall 'testbed[privacy]'")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return RDP_ORDERS, module


@contextmanager
def _warnings_logged() -> Iterator[None]:
    """opacus warns when the best order is at an end of its range (a very large or small noise
    multiplier): advice for its users, not a failure. Send it to the "opacus" logger at INFO, which
    a run appends to its log.txt (`testbed.console`) and `testbed validate` keeps off the console."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        logging.getLogger("opacus").info("%s", warning.message)


def _one_round_rdp(q: float, noise_multiplier: float) -> Any:
    """One round's RDP at opacus' default orders (read-only), its warnings logged as each call's."""
    one, messages = _computed_rdp(q, noise_multiplier)
    for message in messages:
        logging.getLogger("opacus").info("%s", message)
    return one


@cache
def _computed_rdp(q: float, noise_multiplier: float) -> tuple[Any, tuple[str, ...]]:
    """Computed once per process for each (q, z): the check, the baseline's check and the run ask for
    the same one (0.2-0.5 s each at q < 1)."""
    orders, analysis = _rdp()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one = analysis.compute_rdp(q=q, noise_multiplier=noise_multiplier, steps=1, orders=orders)
    one.setflags(write=False)
    return one, tuple(str(warning.message) for warning in caught)


class RoundAccountant:
    """Epsilon of a federated run, composed one round at a time: each round is one sampled Gaussian
    mechanism whose RDP (at opacus' default orders) is computed once and added per round, as opacus'
    ``RDPAccountant.step`` merges equal steps (``compute_rdp(steps=r)`` is the one-step RDP times r),
    so a round costs one conversion, not the whole history."""

    def __init__(self, config: PrivacyConfig, q: float, rounds: int = 0):
        self.orders, self._analysis = _rdp()
        self.delta, self.rounds = config.delta, rounds
        self.one = _one_round_rdp(1.0 if config.mode == "local" else q, config.noise_multiplier)

    def epsilon(self, rounds: int | None = None) -> float:
        """Epsilon at ``delta`` after ``rounds`` (default: the rounds stepped so far)."""
        total = self.one * (self.rounds if rounds is None else rounds)
        with _warnings_logged():
            return float(self._analysis.get_privacy_spent(orders=self.orders, rdp=total, delta=self.delta)[0])

    def step(self) -> float:
        """Account one more round; its epsilon."""
        self.rounds += 1
        return self.epsilon()


def epsilon_curve(config: PrivacyConfig, q: float, rounds: int) -> list[float]:
    """Epsilon at ``config.delta`` after rounds 1..``rounds``: RDP of the sampled Gaussian mechanism
    (opacus), composed over rounds, converted at opacus' default orders."""
    accountant = RoundAccountant(config, q)
    return [accountant.step() for _ in range(rounds)]


def last_round(federated: FederatedConfig, num_clients: int) -> int:
    """The last round the privacy budget allows (every round without a target).

    Epsilon never decreases with the rounds, so the rounds within the target are a prefix: found by
    bisection, O(log rounds) conversions whatever ``federated.rounds`` is."""
    config = federated.privacy
    if config is None or config.target_epsilon is None:
        return federated.rounds
    accountant = RoundAccountant(config, sampling_rate(federated, num_clients))
    within, beyond = 0, federated.rounds + 1  # epsilon(within) <= target < epsilon(beyond)
    while beyond - within > 1:
        middle = (within + beyond) // 2
        if accountant.epsilon(middle) <= config.target_epsilon:
            within = middle
        else:
            beyond = middle
    return within


def check_privacy(federated: FederatedConfig, strategy: str, num_clients: int) -> None:
    """Refuse a privacy block that cannot run; raises ValueError 'field: why' (path under federated)."""
    config = federated.privacy
    if config is None:
        return
    if config.mode == "central" and strategy not in mean_rules():
        raise ValueError(f"privacy.mode: central DP's noise is calibrated to the mean of the clipped updates; "
                         f"strategy '{strategy}' is not a mean (use one of {', '.join(mean_rules())}, "
                         "or mode: local, whose noise any rule keeps)")
    _check_audit(config, strategy)
    m = clients_per_round(federated, num_clients)
    if config.mode == "central" and config.clipping == "adaptive":
        stddev = config.clipped_count_stddev or m / 20
        if config.noise_multiplier >= 2 * stddev:
            raise ValueError(f"privacy.clipped_count_stddev: {stddev:g} is too small for noise_multiplier "
                             f"{config.noise_multiplier:g} (adaptive clipping needs z < 2 * clipped_count_stddev)")
    if config.target_epsilon is not None:
        first = RoundAccountant(config, sampling_rate(federated, num_clients)).epsilon(1)
        if first > config.target_epsilon:
            raise ValueError(f"privacy.target_epsilon: {config.target_epsilon:g} is exceeded by the first round "
                             f"already (epsilon {first:.4g} at delta {config.delta:g}); raise it, or the noise")


def _check_audit(config: PrivacyConfig, strategy: str) -> None:
    """The canary audit runs on DP-FedAvg as `testbed.federated.audit` builds it, nowhere else yet."""
    audit = config.audit
    if audit is None:
        return
    if audit.kind == "sample" and config.mode != "local":
        raise ValueError("privacy.audit.kind: sample canaries audit local DP (LocalDpMod), but privacy.mode is "
                         "central; use kind: client")
    if audit.kind == "client" and config.mode != "central":
        raise ValueError("privacy.audit.kind: client canaries audit central DP, but privacy.mode is local; "
                         "use kind: sample")
    if config.clipping != "fixed":
        raise ValueError("privacy.audit: the canary audit needs clipping: fixed (adaptive clipping's norm would "
                         "follow the canaries' updates)")
    if strategy != "fedavg":
        raise ValueError(f"privacy.audit: the canary audit audits DP-FedAvg, the noised mean itself; strategy "
                         f"'{strategy}' changes the release (use strategy fedavg, or drop the audit)")


def round_accountant(federated: FederatedConfig, num_clients: int, rounds: int) -> RoundAccountant | None:
    """The accountant of a run with ``federated.privacy`` (None without), ``rounds`` already accounted
    (the rounds a resumed run's checkpoint holds)."""
    config = federated.privacy
    return None if config is None else RoundAccountant(config, sampling_rate(federated, num_clients), rounds)


def privacy_metrics(accountant: RoundAccountant | None, audit: CanaryAudit | None = None) -> dict[str, Any]:
    """The next round's record entries: epsilon spent after it (at ``privacy.delta``), the round
    accounted, and the canary audit of the rounds so far against it (``privacy.audit.*``)."""
    if accountant is None:
        return {}
    epsilon = accountant.step()
    return {"epsilon": epsilon} | ({} if audit is None else audit.metrics(epsilon))
