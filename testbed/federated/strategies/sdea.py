"""``sdea``: SDEA, self-driven entropy aggregation (Huang et al., ICML 2024), on a public image set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

import testbed.strategies as robust
from testbed.config import StrictModel
from testbed.data.config import PublicDataConfig
from testbed.federated.strategies.base import StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class SDEA(StrategyPlugin):
    """SDEA: client weights learned on a public set by minimising the virtual model's entropy."""

    name = "sdea"
    summary = "SDEA: self-driven entropy aggregation (Huang et al., ICML 2024)"
    # Per Adam step one mix of the n states and one mixed model's passes over two views of a batch
    # (not one pass per client); benchmarks/bench_sdea.py measures it.
    cost = ("O(epochs ceil(m / batch_size) (n d + forward and backward passes of one model on 2 batch_size "
            "public images)) time, O(n d) memory")

    class Config(StrictModel):
        """SDEA's weight learning: its passes over the public set, its rule and its optimizer."""

        epochs: int = Field(20, gt=0, description="passes over the public set per round (paper: 20)")
        rule: Literal["code", "two_group"] = Field(
            "code", description="code: the authors' code (flagged keep their learned weight), which produced the "
                                "paper's tables; two_group: the paper text's two groups, the flagged one zeroed "
                                "(ablation)")

        @field_validator("rule", mode="before")
        @classmethod
        def _renamed(cls, value: object) -> object:
            if value == "paper":
                raise ValueError("'paper' is now 'two_group' (the paper text's two groups, the flagged one zeroed); "
                                 "the default, 'code', is the rule of the authors' code")
            return value

        bn_mode: Literal["train", "eval"] = Field(
            "train", description="batch norm of the virtual model: train (the authors' code) or eval (running "
                                 "statistics)")
        batch_size: int = Field(64, gt=0)
        lr: float = Field(0.005, gt=0)
        weight_decay: float = Field(1e-5, ge=0)
        public: PublicDataConfig = Field(default_factory=PublicDataConfig)

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        import torch

        from testbed.data.public import augment_views, public_images

        shape = setup.train.image_shape
        if shape is None:
            raise ValueError("SDEA needs image data for its public set")
        public = torch.from_numpy(public_images(config.public, shape, setup.seeds.numpy("sdea.public")))
        return robust.SDEA(model_fn=setup.build_model, public_x=public, augment=augment_views, epochs=config.epochs,
                           rule=config.rule, bn_mode=config.bn_mode, seed=setup.seeds.integer("sdea"),
                           batch_size=config.batch_size, lr=config.lr, weight_decay=config.weight_decay,
                           **flower_round_settings(setup))
