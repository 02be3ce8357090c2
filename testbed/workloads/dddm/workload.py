"""DDDM as a scenario workload (Zhang, Wang, Luo, ICML 2024): ``variant: dddm`` against ``variant: ddim``.

``dddm`` trains the direct denoiser conditioned on its own earlier estimate (``conditioning:
self``: computed from the same x_t; ``buffer``: a per-sample buffer refreshed with every visit,
which leaks the target) and samples by feeding its estimate back at t = T; ``ddim`` is an
x_0-predicting diffusion model with the same network size, sampled with DDIM. Both are measured
after 1, 2, ... ``sample_steps`` function evaluations. The data
(``dataset``) are synthetic or the bundled digits, so ``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/dddm.yaml --no-sweep --set workload.variant=ddim``.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.dddm import diffusion, metrics
from testbed.workloads.dddm.config import DDDMConfig, check
from testbed.workloads.dddm.report import SECTIONS
from testbed.workloads.training import optimizer_step

_FEATURES: dict[int, metrics.DigitFeatures] = {}  # the frozen digits classifier, per seed, built once a process


class DDDMWorkload(Workload):
    """Directly denoising diffusion (self-conditioned, iterated at t = T) against few-step DDIM."""

    name = "dddm"
    Config = DDDMConfig
    config: DDDMConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "train_rng", "estimates", "steps_done")
    headline_metric = ("test_distance_1", "min")
    report_sections = SECTIONS

    def __init__(self, config: DDDMConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.features: metrics.DigitFeatures | None = None
        if config.dataset == "gaussians":
            self.train_x = metrics.eight_gaussians(config.train_size, seeds.torch("data.train"))
            self.eval_x = metrics.eight_gaussians(config.eval_samples, seeds.torch("data.eval"))
        else:
            self.train_x, self.eval_x, labels = metrics.digits(0.25, seeds.integer("data.split"))
            seed = seeds.integer("features")
            if seed not in _FEATURES:
                _FEATURES[seed] = metrics.train_features(self.train_x, labels, seed)
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

    def build_model(self) -> diffusion.Denoiser:
        return diffusion.Denoiser(self.dim, self.config.hidden, self.config.diffusion_steps,
                                  conditioned=self.config.variant == "dddm")

    def metric(self):
        """The training distance d: Pseudo-Huber on the data, or Pseudo-LPIPS on digit features."""
        if self.config.loss == "pseudo_lpips":
            return metrics.pseudo_lpips(self.features, self.config.metric_c)
        return partial(diffusion.pseudo_huber, c=self.config.metric_c)

    def guide_weight(self) -> float:
        """``w`` of the loss at the current step (the code's ``1 / (epoch + 1)``, epochs of the training set)."""
        if self.config.guide_weight != "inverse_epoch":
            return float(self.config.guide_weight)
        batch_size = min(self.config.batch_size, len(self.train_x))
        return 1.0 / (self.steps_done * batch_size // len(self.train_x) + 1)

    def _loss(self, index: torch.Tensor, metric: diffusion.Metric) -> torch.Tensor:
        x0 = self.train_x[index]
        if self.config.variant == "ddim":
            return diffusion.baseline_step(self.model, x0, self.abar, metric, self.train_rng)
        if self.config.conditioning == "self":
            return diffusion.self_conditioned_step(self.model, x0, self.abar, metric, self.train_rng, self.clip,
                                                   self.guide_weight())
        loss, fresh = diffusion.dddm_step(self.model, x0, self.estimates[index], self.abar, metric,
                                          self.train_rng, self.clip, self.guide_weight())
        self.estimates[index] = fresh  # the buffer is refreshed with the model's own estimate
        return loss

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        metric, total = self.metric(), 0.0
        batch_size = min(self.config.batch_size, len(self.train_x))
        for _ in range(steps):
            index = torch.randint(0, len(self.train_x), (batch_size,), generator=self.train_rng)
            total += optimizer_step(self.optimizer, self._loss(index, metric))
            self.steps_done += 1
        return {"train_loss": total / steps}

    def leak_ratios(self) -> dict[str, float]:
        """The leak probe: error with another sample's condition over error with its own, at t = T/100 and T/10.

        About 1 when the condition carries only what x_t does; far above 1 when it holds the target.
        """
        count = min(len(self.train_x), 500)
        conditions = self.estimates[:count] if self.config.conditioning == "buffer" else None
        ratios = {}
        for t in (self.config.diffusion_steps // 100, self.config.diffusion_steps // 10):
            own, swapped = diffusion.leak_errors(self.model, self.train_x[:count], t, self.abar,
                                                 self.seeds.torch(f"eval.leak.{t}"), conditions, self.clip)
            ratios[f"train_leak_ratio_t{t}"] = swapped / own
        return ratios

    def sample(self, steps: int, generator: torch.Generator) -> torch.Tensor:
        """``eval_samples`` samples after ``steps`` function evaluations of the run's sampler."""
        self.model.eval()
        count = self.config.eval_samples
        if self.config.variant == "dddm":
            return diffusion.dddm_sample(self.model, count, self.dim, steps, generator, self.clip)
        return diffusion.ddim_sample(self.model, self.abar, count, self.dim, steps, generator)

    def _measure(self, samples: torch.Tensor) -> dict[str, float]:
        if self.features is None:
            return {"distance": metrics.mmd(samples, self.eval_x), "mode_frac": metrics.mode_fraction(samples)}
        with torch.no_grad():
            distance = metrics.frechet_distance(self.features.features(samples.clamp(-1, 1)),
                                                self.features.features(self.eval_x))
        return {"distance": distance}

    def evaluate(self) -> dict[str, float]:
        scores: dict[str, float] = {}
        for steps in sorted(self.config.sample_steps):
            generator = self.seeds.torch(f"eval.{steps}")  # the same draws at every evaluation
            for key, value in self._measure(self.sample(steps, generator)).items():
                scores[f"test_{key}_{steps}"] = value
        if self.config.variant == "dddm":
            scores.update(self.leak_ratios())
        return scores

    def artifacts(self) -> dict[str, np.ndarray]:
        steps = sorted(self.config.sample_steps)
        samples = [self.sample(n, self.seeds.torch(f"eval.{n}")) for n in steps]
        shown = len(self.eval_x) if self.features is None else 32
        arrays = {"steps": np.array(steps), "data": self.eval_x[:shown].numpy(),
                  "samples": torch.stack([s[:shown] for s in samples]).numpy(),
                  "distance": np.array([self._measure(s)["distance"] for s in samples])}
        if self.config.variant == "dddm" and self.config.conditioning == "buffer":
            arrays["estimates"] = self.estimates[:shown].numpy()
        return arrays
