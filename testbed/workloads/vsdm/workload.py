"""VSDM as a scenario workload: ``variant: vsdm`` learns A; ``variant: dsm`` is the same diffusion with A = 0.

Training alternates stages: ``stage_steps`` simulation-free DSM iterations of the backward score,
then (for ``vsdm`` only) one stochastic-approximation update of A from ``a_paths`` simulated backward
paths, after which the closed-form kernels are rebuilt. The data are synthetic (``shape``), so
``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/vsdm.yaml --no-sweep --set workload.variant=dsm``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.training import optimizer_step
from testbed.workloads.vsdm.bridge import Bridge, ScoreNet
from testbed.workloads.vsdm.config import VSDMConfig, check
from testbed.workloads.vsdm.dynamics import Schedule, conditional_covariance, mean_factor, simulate_forward
from testbed.workloads.vsdm.report import SECTIONS
from testbed.workloads.vsdm.shapes import gaussian_kl, make_shape, pmf_rmse, sliced_wasserstein, straightness

COVARIANCE_STEPS = 1000  # Euler steps of the simulated forward paths the closed form is checked against


class VSDMWorkload(Workload):
    """Variational Schrödinger diffusion on an anisotropic 2-D shape, against plain DSM (A = 0)."""

    name = "vsdm"
    Config = VSDMConfig
    config: VSDMConfig
    check = staticmethod(check)
    headline_metric = ("test_sw_sde", "min")
    report_sections = SECTIONS

    def __init__(self, config: VSDMConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.train_x = torch.from_numpy(make_shape(config.shape, config.stretch, config.train_size,
                                                   seeds.numpy("data.train")))
        self.eval_x = torch.from_numpy(make_shape(config.shape, config.stretch, config.eval_size,
                                                  seeds.numpy("data.eval")))
        self.scale = self.train_x.std(0)  # metrics compare shapes in standardised coordinates
        schedule = Schedule(config.beta_min, config.beta_max, config.beta_power)
        times = torch.linspace(config.t_min, 1.0, config.time_steps + 1)
        centred = self.train_x - self.train_x.mean(0)
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            net = self.build_model()
        self.a = torch.nn.Parameter(torch.zeros(2, 2))  # A = 0 at stage 0: VSDM starts as DSM
        self.bridge = Bridge(schedule, times, self.train_x.mean(0), centred.T @ centred / len(centred), net, self.a)
        self.optimizer = torch.optim.Adam(net.parameters(), lr=config.lr)
        self.a_optimizer = torch.optim.Adam([self.a], lr=config.a_lr)
        self.train_rng = seeds.torch("train.batches")
        self.bridge_rng = seeds.torch("train.bridge")
        self.steps_done = 0

    def build_model(self) -> ScoreNet:
        return ScoreNet(self.config.hidden)

    def train(self, steps: int) -> dict[str, float]:
        total = 0.0
        self.bridge.net.train()
        for _ in range(steps):
            # A is updated at the start of a stage, so the score network always ends trained on the current A.
            if self.config.variant == "vsdm" and self.steps_done > 0 and self.steps_done % self.config.stage_steps == 0:
                self.bridge.update_a(self.a_optimizer, self.config.a_paths, self.config.a_steps, self.config.zeta,
                                     self.bridge_rng)
            batch = torch.randint(0, len(self.train_x), (self.config.batch_size,), generator=self.train_rng)
            total += optimizer_step(self.optimizer, self.bridge.dsm_loss(self.train_x[batch], self.train_rng))
            self.steps_done += 1
        return {"train_loss": total / steps}

    def _samples(self) -> dict[str, torch.Tensor]:
        generator = self.seeds.torch("eval")  # the same draws at every evaluation, independent of training
        self.bridge.net.eval()
        sde, sde_path = self.bridge.sample_sde(len(self.eval_x), generator)
        ode, ode_path = self.bridge.sample_ode(len(self.eval_x), generator)
        return {"sde": sde, "ode": ode, "sde_path": sde_path, "ode_path": ode_path}

    def evaluate(self) -> dict[str, float]:
        samples = self._samples()
        reference = self.eval_x / self.scale
        metrics = {f"sw_{kind}": sliced_wasserstein(samples[kind] / self.scale, reference) for kind in ("sde", "ode")}
        metrics["pmf_rmse_sde"] = pmf_rmse((samples["sde"] / self.scale).numpy(), reference.numpy())
        metrics["straightness_ode"] = straightness(samples["ode_path"])
        metrics["straightness_ode_std"] = straightness(samples["ode_path"] / self.scale)  # both axes weighted equally
        metrics["prior_kl"] = self.prior_kl()
        metrics.update({f"a_{i}{j}": float(self.a.detach()[i, j]) for i in range(2) for j in range(2)})
        return {f"test_{key}": value for key, value in metrics.items()}  # the runner's final metrics are test_*

    def prior_kl(self) -> float:
        """KL between the Gaussian moment-match of the forward marginal at T and the prior N(0, Sigma_T)."""
        kernels, bridge = self.bridge.kernels, self.bridge
        mean = kernels.mean[-1] @ bridge.data_mean
        cov = kernels.mean[-1] @ bridge.data_cov @ kernels.mean[-1].T + kernels.covariance[-1]
        return gaussian_kl(mean, cov, bridge.prior_covariance())

    def covariance_check(self) -> dict[str, np.ndarray]:
        """Closed-form marginal covariance ``M_t C_0 M_t^T + Sigma_t`` against Euler-simulated forward paths."""
        generator = self.seeds.torch("eval.covariance")
        schedule, a = self.bridge.schedule, self.a.detach()
        paths = simulate_forward(schedule, a, self.train_x - self.bridge.data_mean, COVARIANCE_STEPS, generator)
        stride = COVARIANCE_STEPS // 20
        times = torch.arange(0, COVARIANCE_STEPS + 1, stride) / COVARIANCE_STEPS
        simulated = torch.stack([torch.cov(paths[k].T) for k in range(0, COVARIANCE_STEPS + 1, stride)])
        m = mean_factor(schedule, a, times)
        closed = m @ self.bridge.data_cov @ m.transpose(1, 2) + conditional_covariance(schedule, a, times)
        return {"cov_times": times.numpy(), "cov_closed": closed.numpy(), "cov_simulated": simulated.numpy()}

    def artifacts(self) -> dict[str, np.ndarray]:
        samples = self._samples()
        picked = torch.arange(0, len(self.eval_x), max(1, len(self.eval_x) // 48))[:48]
        return {"data": self.eval_x.numpy(), "samples_sde": samples["sde"].numpy(),
                "samples_ode": samples["ode"].numpy(), "ode_paths": samples["ode_path"][:, picked].numpy(),
                "a_matrix": self.a.detach().numpy(), **self.covariance_check()}

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.bridge.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "a": self.a.detach().clone(), "a_optimizer": self.a_optimizer.state_dict(),
                "train_rng": self.train_rng.get_state(), "bridge_rng": self.bridge_rng.get_state(),
                "steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bridge.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        with torch.no_grad():
            self.a.copy_(state["a"])
        self.a_optimizer.load_state_dict(state["a_optimizer"])
        self.train_rng.set_state(state["train_rng"])
        self.bridge_rng.set_state(state["bridge_rng"])
        self.steps_done = state["steps_done"]
        self.bridge.refresh()

