"""Typed configs of OODRobustBench and the workload's check, free of torch so that the scenario schema
and the registry can import them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

Corruption = Literal["gaussian_noise", "shot_noise", "impulse_noise", "gaussian_blur", "contrast",
                     "brightness", "translate", "elastic"]
Threat = Literal["linf_large", "l2", "rotation", "patch"]

# The audit the workload offers other kinds' runs (its benchmark of one model), by ``report:`` key:
# read by the registry without importing the audit (`testbed.workloads.registry`).
AUDITS = {"ood": "testbed.workloads.oodrobust.audit:OodAudit"}


# Named factories: mypy infers a lambda's list as list[str].
def _all_corruptions() -> list[Corruption]:
    return ["gaussian_noise", "shot_noise", "impulse_noise", "gaussian_blur", "contrast", "brightness", "translate",
            "elastic"]


def _all_threats() -> list[Threat]:
    return ["linf_large", "l2", "rotation", "patch"]


class OodConfig(StrictModel):
    """OODRobustBench's evaluation of a final model (``testbed.workloads.oodrobust.benchmark.evaluate_ood``).

    Robust accuracy in distribution under the seen threat (an L-inf PGD + MM-k ensemble), under
    dataset shifts (corruptions at severities, typeset digits) and under unseen threats. The
    scenario's ``report.ood`` block of a federated run is one.
    """

    epsilon: float = Field(0.1, gt=0, le=1, description="seen threat: L-inf budget on [0, 1] pixels")
    attack_steps: int = Field(20, gt=0)
    restarts: int = Field(2, gt=0, description="PGD-CE starts (the first from the clean input)")
    margin_classes: int = Field(3, ge=0, description="MM-k: targeted margin attacks on the top-k wrong classes")
    id_attack: Literal["ensemble", "pgd"] = Field("ensemble", description="pgd: one PGD-CE run (weaker)")
    corruptions: list[Corruption] = Field(default_factory=_all_corruptions)
    severities: list[Annotated[int, Field(ge=1, le=5)]] = Field(default_factory=lambda: [2, 4], min_length=1)
    natural: bool = Field(True, description="the typeset-digits shift (8x8 digits only)")
    threats: list[Threat] = Field(default_factory=_all_threats)
    linf_large_scale: float = Field(1.5, gt=1, description="linf_large budget = scale * epsilon")
    l2_epsilon: float = Field(0.5, gt=0)
    rotation_degrees: float = Field(20.0, gt=0, le=180, description="rotation threat: worst angle in ±degrees")
    patch_size: int = Field(1, gt=0, description="side of the adversarial square patch, pixels")
    eval_size: int = Field(300, gt=0, description="test samples evaluated (the first ones of the split)")


Budget = Annotated[float, Field(gt=0, le=1)]
Width = Annotated[int, Field(gt=0)]


class OODRobustConfig(StrictModel):
    """The population and the evaluation protocol of the ``oodrobust`` workload."""

    variant: Literal["ood", "id_only"] = Field("ood", description="id_only: RobustBench's ID-only evaluation")
    population: int = Field(20, ge=3, description="models in the zoo (at least 3 for a fit)")
    epsilons: list[Budget] = Field(default_factory=lambda: [0.05, 0.1, 0.15, 0.2], min_length=1,
                                   description="L-inf budgets of the adversarially trained members")
    widths: list[Width] = Field(default_factory=lambda: [32, 64, 128], min_length=1)
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(128, gt=0)
    at_steps: int = Field(3, gt=0, description="PGD steps of adversarial training's inner maximisation")
    evaluation: OodConfig = Field(default_factory=OodConfig)


def check(config: OODRobustConfig, data: DataConfig) -> None:
    """The zoo is sized for the 8x8 digits; the OOD variant needs a dataset shift and a threat shift."""
    if data.dataset != "digits":
        raise ScenarioError(f"workload.name: oodrobust is sized for the 8x8 digits; data.dataset "
                            f"'{data.dataset}' is not supported (use digits)")
    evaluation = config.evaluation
    if config.variant == "ood" and not evaluation.corruptions and not evaluation.natural:
        raise ScenarioError("workload.evaluation.corruptions: no dataset shift is left to evaluate "
                            "(empty corruptions and natural: false)")
    if config.variant == "ood" and not evaluation.threats:
        raise ScenarioError("workload.evaluation.threats: at least one threat shift is needed for the OOD_t trend")
