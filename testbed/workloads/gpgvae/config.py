"""The typed config of the GPGVAE workload and its check, free of torch so that validating a scenario
does not import the model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class GPGVAEConfig(StrictModel):
    """Games, prior, networks and gradient estimator of the GPGVAE workload."""

    variant: Literal["gpgvae", "ungated", "random"] = "gpgvae"
    estimator: Literal["relaxed", "score"] = "relaxed"
    decoder: Literal["gcn", "best_response"] = Field("gcn", description=(
        "gcn: the paper's GCN over the sampled A on latent node embeddings Z; best_response: an ablation "
        "that passes the observed actions through the generator's own best-response map"))
    pair_correlation: bool = Field(False, description="ablation: also feed each pair's action correlation to "
                                                      "the edge encoder (the paper's encoder does not get it)")
    graph: Literal["ba", "er", "ws"] = "ba"
    nodes: int = Field(20, ge=4)
    games: int = Field(100, ge=2)
    graphs_per_sign: int = Field(20, gt=0, description="complement graphs, and as many substitute graphs")
    beta: float = Field(0.8, gt=0, lt=1, description="|beta| of the games: +beta complements, -beta substitutes")
    alpha: float = Field(0.5, ge=0, lt=1, description="smoothness of the marginal benefits")
    snr: float = Field(10.0, gt=0)
    pretrain_graphs: int = Field(400, ge=10)
    pretrain_steps: int = Field(300, gt=0)
    kl_weight: float = Field(10.0, ge=0, description="beta_1 of the KL to the prior")
    latent_kl_weight: float = Field(1.0, ge=0, description="beta_2 of KL(q(Z|X) || N(0, I))")
    decoder_layers: int = Field(2, gt=0, description="GCN layers of the decoder")
    tau: float = Field(0.5, gt=0, description="temperature of the binary-concrete relaxation")
    baseline_decay: float = Field(0.99, ge=0, lt=1, description="eta of the score function's moving-average baseline")
    width: int = Field(64, gt=0)
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(4, gt=0, description="graphs per step")
    grad_samples: int = Field(16, ge=2, description="samples used to measure the estimator's gradient spread")


def check(config: GPGVAEConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    if config.batch_size > 2 * config.graphs_per_sign:
        raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds the "
                            f"{2 * config.graphs_per_sign} graphs (2 x graphs_per_sign)")
