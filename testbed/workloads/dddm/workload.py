"""DDDM as a scenario workload (Zhang, Wang, Luo, ICML 2024): ``variant: dddm`` against ``variant: ddim``.

``dddm`` trains the direct denoiser conditioned on its own earlier estimate of each training
sample (a per-sample buffer refreshed with every visit) and samples by feeding its estimate back
at t = T; ``ddim`` is an x_0-predicting diffusion model with the same network size, sampled with
DDIM. Both are measured after 1, 2, ... ``sample_steps`` function evaluations. The data
(``dataset``) are synthetic or the bundled digits, so ``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/dddm.yaml --no-sweep --set workload.variant=ddim``.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from testbed.errors import ScenarioError
from testbed.scenario import DataConfig, StrictModel
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload, register
from testbed.workloads.dddm import diffusion, quality
from testbed.workloads.dddm.report import SECTIONS

_FEATURES: dict[int, quality.DigitFeatures] = {}  # the frozen digits classifier, per seed, built once a process


class DddmConfig(StrictModel):
    """Data, network, metric and samplers of the DDDM workload."""

    variant: Literal["dddm", "ddim"] = "dddm"
    dataset: Literal["gaussians", "digits"] = Field(
        "gaussians", description="eight 2-D Gaussians, or the bundled digits on the workload's own 75/25 split")
    train_size: int = Field(2000, gt=0, description="gaussians: training points (= buffer slots)")
    diffusion_steps: int = Field(1000, ge=2, description="T of the discrete VP diffusion")
    hidden: int = Field(256, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(256, gt=0)
    loss: Literal["pseudo_huber", "pseudo_lpips"] = "pseudo_huber"
    metric_c: float = Field(0.03, gt=0, description="c of the Pseudo-Huber / Pseudo-LPIPS metric")
    sample_steps: list[int] = Field(default_factory=lambda: [1, 2, 4, 16, 64],
                                    description="function evaluations at which samples are measured")
    eval_samples: int = Field(1000, ge=10)


@register
class Dddm(Workload):
    """Directly denoising diffusion (self-conditioned, iterated at t = T) against few-step DDIM."""

    name = "dddm"
    Config = DddmConfig
    checkpointed = ("model", "optimizer", "train_rng", "estimates", "steps_done")
    summary = "directly denoising diffusion (per-sample estimate buffer, iterative sampler) vs DDIM at equal NFE"
    headline_metric = ("test_distance_1", "min")
    report_sections = SECTIONS

    @classmethod
    def check(cls, config: DddmConfig, data: DataConfig) -> None:
        if not {1, 2} <= set(config.sample_steps) or min(config.sample_steps) < 1:
            raise ScenarioError(f"workload.sample_steps: {config.sample_steps} must be positive and include 1 and 2")
        if config.loss == "pseudo_lpips" and config.dataset != "digits":
            raise ScenarioError("workload.loss: pseudo_lpips needs image features; use dataset: digits")
        if config.dataset == "gaussians" and config.batch_size > config.train_size:
            raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_size {config.train_size}")

    def __init__(self, config: DddmConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.features: quality.DigitFeatures | None = None
        if config.dataset == "gaussians":
            self.train_x = quality.eight_gaussians(config.train_size, seeds.torch("data.train"))
            self.eval_x = quality.eight_gaussians(config.eval_samples, seeds.torch("data.eval"))
        else:
            self.train_x, self.eval_x, labels = quality.digits(0.25, seeds.integer("data.split"))
            seed = seeds.integer("features")
            if seed not in _FEATURES:
                _FEATURES[seed] = quality.train_features(self.train_x, labels, seed)
            self.features = _FEATURES[seed]
        self.dim = self.train_x.shape[1]
        self.clip = 1.0 if config.dataset == "digits" else None  # the data range of images
        self.abar = diffusion.alpha_bars(config.diffusion_steps)
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.train_rng = seeds.torch("train")
        # One estimate per training sample, initialised from N(0, I) (Algorithm 1).
        self.estimates = torch.randn(self.train_x.shape, generator=seeds.torch("buffer.init"))
        self.steps_done = 0

    def build_model(self) -> torch.nn.Module:
        return diffusion.Denoiser(self.dim, self.config.hidden, self.config.diffusion_steps,
                                  conditioned=self.config.variant == "dddm")

    def metric(self):
        """The training distance d: Pseudo-Huber on the data, or Pseudo-LPIPS on digit features."""
        if self.config.loss == "pseudo_lpips":
            return quality.pseudo_lpips(self.features, self.config.metric_c)
        return partial(diffusion.pseudo_huber, c=self.config.metric_c)

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        metric, total = self.metric(), 0.0
        batch_size = min(self.config.batch_size, len(self.train_x))
        for _ in range(steps):
            index = torch.randint(0, len(self.train_x), (batch_size,), generator=self.train_rng)
            if self.config.variant == "dddm":
                loss, fresh = diffusion.dddm_step(self.model, self.train_x[index], self.estimates[index], self.abar,
                                                  metric, self.train_rng, self.clip)
                self.estimates[index] = fresh  # the buffer is refreshed with the model's own estimate
            else:
                loss = diffusion.baseline_step(self.model, self.train_x[index], self.abar, metric, self.train_rng)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            self.steps_done += 1
        return {"train_loss": total / steps}

    def sample(self, steps: int, generator: torch.Generator) -> torch.Tensor:
        """``eval_samples`` samples after ``steps`` function evaluations of the run's sampler."""
        self.model.eval()
        count = self.config.eval_samples
        if self.config.variant == "dddm":
            return diffusion.dddm_sample(self.model, count, self.dim, steps, generator, self.clip)
        return diffusion.ddim_sample(self.model, self.abar, count, self.dim, steps, generator)

    def _measure(self, samples: torch.Tensor) -> dict[str, float]:
        if self.features is None:
            return {"distance": quality.mmd(samples, self.eval_x), "mode_frac": quality.mode_fraction(samples)}
        with torch.no_grad():
            distance = quality.frechet_distance(self.features.features(samples.clamp(-1, 1)),
                                                self.features.features(self.eval_x))
        return {"distance": distance}

    def evaluate(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for steps in sorted(self.config.sample_steps):
            generator = self.seeds.torch(f"eval.{steps}")  # the same draws at every evaluation
            for key, value in self._measure(self.sample(steps, generator)).items():
                metrics[f"test_{key}_{steps}"] = value
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        steps = sorted(self.config.sample_steps)
        samples = [self.sample(n, self.seeds.torch(f"eval.{n}")) for n in steps]
        shown = len(self.eval_x) if self.features is None else 32
        arrays = {"steps": np.array(steps), "data": self.eval_x[:shown].numpy(),
                  "samples": torch.stack([s[:shown] for s in samples]).numpy(),
                  "distance": np.array([self._measure(s)["distance"] for s in samples])}
        if self.config.variant == "dddm":
            arrays["estimates"] = self.estimates[:shown].numpy()
        return arrays
