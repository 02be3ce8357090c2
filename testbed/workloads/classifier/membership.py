"""`MembershipAudit`: membership inference on a federated run's final global model, the model-level
privacy audit the ``classifier`` workload offers (``report: {kind: privacy, membership: {...}}``),
shown beside the DP accountant's epsilon.

The candidates are ``candidates`` members, drawn at random from the federation's training set (the
union of the clients' data, which the final model was trained on), and as many non-members from the
test set, which it never saw. Two attacks score every candidate, a higher score meaning "member":

- **Loss threshold** (Yeom et al., CSF 2018): the score is minus the final model's cross-entropy on
  the example.
- **Offline LiRA** (Carlini et al., S&P 2022, "Membership Inference Attacks From First Principles",
  the offline variant): ``shadow_models`` shadow models, all OUT for every candidate, give per
  candidate the distribution of the logit-scaled confidence ``phi = log(p / (1 - p))`` of the true
  class (computed stably as the true logit minus the log-sum-exp of the others) on models that did
  not train on it, a Gaussian N(mu_out, sigma_out^2). The one-sided test of the target model's phi
  against it, Lambda = Phi((phi - mu_out) / sigma_out), is the score; it is ranked by its argument,
  the same order, which a float Phi would flatten to 1.0 for a memorised example.

Choices, and why:

- **Shadow training**: "trained by the same scenario at small size". Each shadow is the workload's
  own model (`FederatedWorkload.model_for`) trained by the workload's own client training
  (`FederatedWorkload.fit_client`, the local epochs a client runs, so the same optimiser, learning
  rate and batch size) centrally, on a random half of the shadow pool, for ``shadow_epochs`` epochs:
  by default ``rounds x local_epochs``, the passes the federation made over its data. Neither the
  scenario's DP noise nor its attack is applied: the shadows model how a trained network treats an
  example it has not seen, which is what the offline test needs.
- **Shadow pool**: every training and test example that is not a candidate, with copies of a
  candidate removed (a replicated training split holds each example many times), so that every
  shadow is OUT for every candidate, as the offline variant requires.
- **Variance**: global by default (one sigma_out pooled over the candidates' per-example variances),
  as the paper advises for few shadows: 8 values estimate a per-example variance poorly.
  ``variance: per_example`` fits each candidate's own.
- **Sizes**: 500 candidates a side by default, capped by the data (the digits' test split holds 450
  at the default test fraction) and by a third of the examples, so that the shadows' pool keeps as
  many as there are candidates.
  With n non-members the smallest false-positive rate above 0 is 1/n: at n = 500, "TPR at 0.1% FPR"
  is the TPR at zero false positives, and the page says so.
- **Epsilon lower bound**: DP bounds every test of membership by TPR <= e^eps FPR + delta, so
  eps >= ln((TPR - delta) / FPR). At each of the fixed FPR targets `FPR_TARGETS` the threshold is a
  non-member's score (the k-th highest, k - 1 = floor(target x n) false positives above it), then
  TPR is bounded below and FPR above by one-sided Clopper-Pearson intervals, each at
  significance / (2 x targets) (Bonferroni over both bounds at every target); the largest bound
  holds with confidence 1 - significance. The FPR bound is exact for a threshold at an order
  statistic (the true FPR above the k-th highest of n scores is Beta(k, n - k + 1) distributed,
  whose upper quantile is Clopper-Pearson's for k - 1 successes); the members' count above the
  threshold is binomial given it, since the threshold comes from the non-members alone. delta is
  the run's ``federated.privacy.delta``, or 0 for a run without DP.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from testbed.config import StrictModel
from testbed.data import Dataset
from testbed.seeding import stream
from testbed.workloads.audits import Audit
from testbed.workloads.classifier.membership_report import MembershipSection

if TYPE_CHECKING:  # torch is imported where a model is scored or trained: validating a scenario needs none
    import torch

    from testbed.data.config import DataConfig
    from testbed.scenario import Scenario
    from testbed.seeding import SeedTree

# The candidates' draw, then per shadow its half of the pool and its initialisation and batch seeds.
MEMBERSHIP_SEED = stream("report.membership", "the membership audit's candidates and its shadow models' data and seeds")
# The false-positive rates at which TPR is reported and the epsilon bound is tried (Bonferroni over them).
FPR_TARGETS = (0.001, 0.01, 0.05, 0.1)


class MembershipConfig(StrictModel):
    """Membership inference on the final global model (`MembershipAudit`): the scenario's
    ``report.membership`` block."""

    candidates: int = Field(500, gt=0, description="members, and as many non-members, drawn at random (capped by "
                                                   "the data)")
    shadow_models: int = Field(8, ge=2, description="offline LiRA's OUT shadow models (2 at least, for a variance)")
    shadow_epochs: int | None = Field(None, gt=0, description="each shadow's training epochs; default: federated "
                                                              "rounds x local_epochs")
    variance: Literal["global", "per_example"] = Field("global", description="LiRA's sigma_out: pooled over the "
                                                                             "candidates, or each candidate's own")
    significance: float = Field(0.05, gt=0, lt=1, description="1 - the confidence of the epsilon lower bound")


# --- statistics -----------------------------------------------------------------------------------


def clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided lower Clopper-Pearson bound on a binomial rate, holding with probability 1 - alpha."""
    from scipy.stats import beta

    return 0.0 if successes == 0 else float(beta.ppf(alpha, successes, trials - successes + 1))


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided upper Clopper-Pearson bound on a binomial rate, holding with probability 1 - alpha."""
    from scipy.stats import beta

    return 1.0 if successes == trials else float(beta.ppf(1 - alpha, successes + 1, trials - successes))


def epsilon_from_counts(true_positives: int, members: int, false_positives: int, non_members: int,
                        delta: float, alpha: float) -> float:
    """The epsilon that one threshold's counts prove, ln((TPR_low - delta) / FPR_high), with each rate
    bounded at ``alpha``; 0 where they prove nothing."""
    tpr_low = clopper_pearson_lower(true_positives, members, alpha)
    fpr_high = clopper_pearson_upper(false_positives, non_members, alpha)
    return max(0.0, math.log((tpr_low - delta) / fpr_high)) if tpr_low > delta else 0.0


def counts_at_fpr(member_scores: np.ndarray, non_member_scores: np.ndarray, target: float) -> tuple[int, int]:
    """(true positives, false positives) of the threshold at the k-th highest non-member score,
    k - 1 = floor(target x n): the most members caught with at most that share of non-members
    above the threshold."""
    ranked = np.sort(non_member_scores)[::-1]
    allowed = min(int(math.floor(target * len(ranked) + 1e-9)), len(ranked) - 1)
    threshold = ranked[allowed]
    return int((member_scores > threshold).sum()), allowed


def tpr_at_fpr(member_scores: np.ndarray, non_member_scores: np.ndarray, target: float) -> float:
    """The share of members scored above the threshold that lets at most ``target`` of the
    non-members through (at zero false positives where target x n < 1)."""
    return counts_at_fpr(member_scores, non_member_scores, target)[0] / len(member_scores)


def epsilon_lower_bound(member_scores: np.ndarray, non_member_scores: np.ndarray, delta: float,
                        significance: float) -> float:
    """The largest epsilon the attack proves at confidence 1 - ``significance`` over `FPR_TARGETS`
    (Bonferroni: a TPR and an FPR bound at each target)."""
    alpha = significance / (2 * len(FPR_TARGETS))
    bounds = []
    for target in FPR_TARGETS:
        caught, passed = counts_at_fpr(member_scores, non_member_scores, target)
        bounds.append(epsilon_from_counts(caught, len(member_scores), passed, len(non_member_scores), delta, alpha))
    return max(bounds)


def epsilon_ceiling(members: int, non_members: int, delta: float, significance: float) -> float:
    """The most `epsilon_lower_bound` can show with these sizes: a perfect attack's bound."""
    alpha = significance / (2 * len(FPR_TARGETS))
    return max(epsilon_from_counts(members, members, min(int(math.floor(t * non_members + 1e-9)), non_members - 1),
                                   non_members, delta, alpha) for t in FPR_TARGETS)


def roc(member_scores: np.ndarray, non_member_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(FPR, TPR, AUC) of the scores over all thresholds (scikit-learn's ROC)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    labels = np.r_[np.ones(len(member_scores)), np.zeros(len(non_member_scores))]
    scores = np.r_[member_scores, non_member_scores]
    fpr, tpr, _ = roc_curve(labels, scores)
    return fpr, tpr, float(roc_auc_score(labels, scores))


# --- what the attacks measure on a model ----------------------------------------------------------


def _logits(model: torch.nn.Module, data: Dataset, batch_size: int = 512) -> torch.Tensor:
    import torch

    model.eval()
    x = torch.from_numpy(data.x)
    with torch.no_grad():
        return torch.cat([model(x[start : start + batch_size]) for start in range(0, len(x), batch_size)]).double()


def loss_scores(model: torch.nn.Module, data: Dataset) -> np.ndarray:
    """Minus each example's cross-entropy under ``model`` (Yeom et al.'s score)."""
    import torch

    return -torch.nn.functional.cross_entropy(_logits(model, data), torch.from_numpy(data.y),
                                              reduction="none").numpy()


def logit_confidence(model: torch.nn.Module, data: Dataset) -> np.ndarray:
    """phi = log(p / (1 - p)) of each example's true class: its logit minus the log-sum-exp of the others."""
    import torch

    logits = _logits(model, data)
    labels = torch.from_numpy(data.y)[:, None]
    others = logits.scatter(1, labels, float("-inf"))
    return (logits.gather(1, labels).squeeze(1) - torch.logsumexp(others, dim=1)).numpy()


def lira_scores(target_phi: np.ndarray, shadow_phi: np.ndarray, variance: str) -> np.ndarray:
    """The offline test's statistic (phi - mu_out) / sigma_out per candidate, from the OUT shadows'
    phi (shadows x candidates)."""
    mean = shadow_phi.mean(axis=0)
    per_example = shadow_phi.var(axis=0, ddof=1)
    spread = np.sqrt(per_example) if variance == "per_example" else np.full_like(mean, np.sqrt(per_example.mean()))
    return (target_phi - mean) / np.maximum(spread, 1e-12)  # a constant phi across shadows: no spread


# --- candidates and shadows -----------------------------------------------------------------------


def _keys(data: Dataset) -> np.ndarray:
    """One key per example, its features and label as bytes, to find copies across sets."""
    flat = np.ascontiguousarray(data.x.reshape(len(data.y), -1))
    return np.array([row.tobytes() + int(label).to_bytes(8, "little") for row, label in zip(flat, data.y)],
                    dtype=object)


def draw_candidates(members: Dataset, non_members: Dataset, size: int,
                    rng: np.random.Generator) -> tuple[Dataset, Dataset, Dataset]:
    """(member candidates, non-member candidates, shadow pool): equal numbers of distinct members and
    of non-members that are no member's copy (``size``, capped by the data), and every other example
    that is no candidate's copy."""
    member_keys, other_keys = _keys(members), _keys(non_members)
    _, distinct = np.unique(member_keys, return_index=True)  # a replicated split holds each example many times
    unseen = np.flatnonzero(~np.isin(other_keys, member_keys))
    # At most a third of the examples a side: the shadows' pool keeps at least as many as the candidates.
    count = min(size, len(distinct), len(unseen), (len(distinct) + len(unseen)) // 3)
    inside = np.sort(rng.choice(distinct, size=count, replace=False))
    outside = np.sort(rng.choice(unseen, size=count, replace=False))
    taken = np.r_[member_keys[inside], other_keys[outside]]
    rest = [data.subset(~np.isin(keys, taken)) for data, keys in ((members, member_keys), (non_members, other_keys))]
    pool = Dataset(members.name, np.concatenate([d.x for d in rest]), np.concatenate([d.y for d in rest]),
                   members.num_classes, members.image_shape)
    return members.subset(inside), non_members.subset(outside), pool


def train_shadows(scenario: Scenario, pool: Dataset, count: int, epochs: int,
                  rng: np.random.Generator) -> list[torch.nn.Module]:
    """``count`` models of the scenario's workload, each trained by the workload's client training on a
    random half of ``pool`` for ``epochs`` epochs."""
    import torch

    from testbed.workloads.base import FederatedWorkload
    from testbed.workloads.registry import workload_class

    assert scenario.workload is not None  # a federated scenario has a workload
    workload = workload_class(scenario.workload.name)
    assert issubclass(workload, FederatedWorkload)  # the federated checks require one
    params = workload.Config.model_validate(scenario.workload.params)
    shadows = []
    for _ in range(count):
        half = pool.subset(np.sort(rng.choice(len(pool.y), size=max(1, len(pool.y) // 2), replace=False)))
        init, batches = (int(seed) for seed in rng.integers(0, 2**31 - 1, size=2))
        with torch.random.fork_rng(devices=[]):  # leave the run's global torch RNG where it was
            torch.manual_seed(init)
            model = workload.model_for(params, pool)
        workload.fit_client(model, half, params, epochs, torch.Generator().manual_seed(batches))
        shadows.append(model)
    return shadows


def _shadow_epochs(scenario: Scenario, config: MembershipConfig) -> int:
    from testbed.federated.config import FederatedConfig

    federated = scenario.federated or FederatedConfig()
    return config.shadow_epochs or federated.rounds * federated.local_epochs


def _delta(scenario: Scenario) -> float:
    """The run's DP delta, or 0 for a run without DP (the bound then tests pure epsilon-DP)."""
    privacy = scenario.federated.privacy if scenario.federated is not None else None
    return float(privacy.delta) if privacy is not None else 0.0


# --- the audit ------------------------------------------------------------------------------------


def attack_metrics(name: str, member_scores: np.ndarray, non_member_scores: np.ndarray, delta: float,
                   significance: float) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """One attack's final metrics ``membership_<name>_*`` and its ROC arrays."""
    fpr, tpr, auc = roc(member_scores, non_member_scores)
    metrics = {f"membership_{name}_tpr_at_0_1pct": tpr_at_fpr(member_scores, non_member_scores, 0.001),
               f"membership_{name}_tpr_at_1pct": tpr_at_fpr(member_scores, non_member_scores, 0.01),
               f"membership_{name}_auc": auc,
               f"membership_{name}_epsilon_lower_bound": epsilon_lower_bound(member_scores, non_member_scores, delta,
                                                                             significance)}
    return metrics, {f"membership_{name}_fpr": fpr, f"membership_{name}_tpr": tpr}


class MembershipAudit(Audit):
    """Loss-threshold and offline LiRA membership inference on a final model, with the epsilon they prove."""

    name = "membership"
    Config = MembershipConfig
    kinds = ("federated",)  # the runs whose runner audits its final model
    report_kind = "privacy"
    section = MembershipSection()
    needs_members = True

    @classmethod
    def check(cls, config: MembershipConfig, data: DataConfig, *, scenario: Scenario | None = None) -> None:
        """Refuse a workload that does not offer this audit: the attacks score a classifier's class
        probabilities, and the shadows are trained the workload's way."""
        from testbed.workloads.registry import audits

        name = scenario.workload.name if scenario is not None and scenario.workload is not None else None
        if name is not None and cls not in audits(name).values():
            raise ValueError(f"membership inference scores a classifier's class probabilities; workload "
                             f"'{name}' is no classifier that offers it")

    @classmethod
    def run(cls, model: torch.nn.Module, test_set: Dataset, config: MembershipConfig, seeds: SeedTree, *,
            members: Dataset | None = None, scenario: Scenario | None = None,
            ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """(final metrics ``membership_*``, ROC arrays) of ``model``, trained on ``members``."""
        from testbed.determinism import single_threaded

        assert members is not None and scenario is not None  # `run_audits` gives both (needs_members)
        rng = seeds.numpy(MEMBERSHIP_SEED.path)
        inside, outside, pool = draw_candidates(members, test_set, config.candidates, rng)
        delta = _delta(scenario)
        candidates = Dataset(inside.name, np.concatenate([inside.x, outside.x]), np.r_[inside.y, outside.y],
                             inside.num_classes, inside.image_shape)
        with single_threaded():
            shadows = train_shadows(scenario, pool, config.shadow_models, _shadow_epochs(scenario, config), rng)
            # One fit over both sides: a global sigma_out pools every candidate's variance.
            lira = lira_scores(logit_confidence(model, candidates),
                               np.stack([logit_confidence(shadow, candidates) for shadow in shadows]), config.variance)
            loss = loss_scores(model, candidates)
        count = len(inside.y)
        scores = {"loss": (loss[:count], loss[count:]), "lira": (lira[:count], lira[count:])}
        metrics: dict[str, float] = {"membership_candidates": float(len(inside.y)), "membership_delta": delta,
                                     "membership_epsilon_ceiling": epsilon_ceiling(len(inside.y), len(outside.y),
                                                                                   delta, config.significance)}
        arrays: dict[str, Any] = {}
        for name, (member_scores, non_member_scores) in scores.items():
            found, curve = attack_metrics(name, member_scores, non_member_scores, delta, config.significance)
            metrics.update(found)
            arrays.update(curve)
        return metrics, arrays
