"""VSDM's two halves: simulation-free training of the backward score and the update of A.

* Backward score (Deng et al. 2024, eq. for the DSM loss): with ``x_t = M_t x_0 + L_t eps`` the
  conditional score is ``grad log p(x_t | x_0) = -L_t^{-T} eps``. The network predicts ``eps``
  (``n_theta``), so the score is ``-L_t^{-T} n_theta`` and the backward policy is
  ``z_b = sqrt(beta_t) (score - A x_t)`` (= ``sqrt(beta_t) grad log phi_t``). Predicting the noise is
  the DSM loss weighted by ``Sigma_t``, which keeps the small-t targets bounded.
* Forward variational score (the stochastic-approximation step): simulate backward SDE paths from
  the prior ``N(0, Sigma_T)`` with ``z_b`` frozen and take gradient steps on the SB-FBSDE loss
  ``E[sum_t (1/2 |z_f|^2 + z_f . z_b + zeta div(sqrt(beta_t) z_f)) dt]`` with ``z_f = sqrt(beta_t) A x``;
  the divergence of a linear field is exactly ``beta_t tr(A)``.
* Samplers: the backward SDE ``dx = [-1/2 beta x - sqrt(beta) z_b] dt + sqrt(beta) dw`` (run from 1 to
  0) and the probability-flow ODE ``dx/dt = -1/2 beta D x - 1/2 beta score``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from testbed.workloads.training import optimizer_step
from testbed.workloads.vsdm.dynamics import Kernels, Schedule, forward_sample


class ScoreNet(nn.Module):
    """MLP ``n_theta(x, t)`` predicting the forward noise ``eps``.

    Its inputs are the standardised position, Fourier features of it (which let a small MLP
    resolve the thin arms of the shapes within a short CPU budget) and a sinusoidal embedding of t.
    """

    FREQUENCIES = (1.0, 2.0, 4.0, 8.0)

    def __init__(self, hidden: int, embed: int = 16):
        super().__init__()
        self.embed = embed
        width = 2 + 4 * len(self.FREQUENCIES) + embed
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 2))

    def forward(self, x_scaled: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        freqs = torch.exp(torch.arange(self.embed // 2) * (-math.log(1000.0) / (self.embed // 2 - 1)))
        angles = 1000.0 * t[:, None] * freqs[None]
        features = [x_scaled, torch.sin(angles), torch.cos(angles)]
        for frequency in self.FREQUENCIES:
            features += [torch.sin(frequency * x_scaled), torch.cos(frequency * x_scaled)]
        return self.net(torch.cat(features, dim=1))


class Bridge:
    """The forward matrix A, the cached kernels for it and the score network on one time grid."""

    def __init__(self, schedule: Schedule, times: torch.Tensor, data_mean: torch.Tensor, data_cov: torch.Tensor,
                 net: ScoreNet, a: torch.Tensor):
        self.schedule, self.times, self.net = schedule, times, net
        self.data_mean, self.data_cov = data_mean, data_cov
        self.a = a
        self.refresh()

    def refresh(self) -> None:
        """Recompute the kernels (and the input scaling) after A changed: once per stage."""
        a = self.a.detach()
        self.kernels = Kernels.build(self.schedule, a, self.times)
        marginal = self.kernels.mean @ self.data_cov @ self.kernels.mean.transpose(1, 2) + self.kernels.covariance
        self.input_scale = marginal.diagonal(dim1=1, dim2=2).rsqrt()  # [T, d]: standardises the net's input

    def prior_covariance(self) -> torch.Tensor:
        """``Sigma_T``: the covariance of the adaptive prior N(0, Sigma_T) the samplers start from."""
        return self.kernels.covariance[-1]

    def score(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """``grad log p_t(x) ~ -L_t^{-T} n_theta(x, t)`` at grid time ``index``."""
        t = self.times[index].expand(x.shape[0])
        noise = self.net(x * self.input_scale[index], t)
        cholesky = self.kernels.cholesky[index]
        return -torch.linalg.solve_triangular(cholesky.T, noise.T, upper=True).T

    def dsm_loss(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Simulation-free DSM loss on a batch: draw t on the grid and ``x_t`` from the closed-form kernel."""
        index = torch.randint(0, len(self.times), (x0.shape[0],), generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        x_t = forward_sample(self.kernels, index, x0, noise)
        predicted = self.net(x_t * self.input_scale[index], self.times[index])
        return ((predicted - noise) ** 2).sum(1).mean()

    def backward_policy(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """``z_b = sqrt(beta_t) (grad log p_t - A x)``: the backward half of the Schrödinger bridge."""
        beta = self.schedule.beta(self.times[index])
        return beta.sqrt() * (self.score(x, index) - x @ self.a.detach().T)

    def prior_sample(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """Draws of the prior ``N(0, Sigma_T)``."""
        noise = torch.randn(count, 2, generator=generator)
        return noise @ self.kernels.cholesky[-1].T

    @torch.no_grad()
    def sample_sde(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Euler-Maruyama on the backward SDE from the prior; returns (samples, path ``[K+1, n, 2]``)."""
        x = self.prior_sample(count, generator)
        path = [x]
        for index in range(len(self.times) - 1, 0, -1):
            dt = self.times[index] - self.times[index - 1]
            beta = self.schedule.beta(self.times[index])
            drift = 0.5 * beta * x + beta.sqrt() * self.backward_policy(x, index)
            x = x + drift * dt + (beta * dt).sqrt() * torch.randn(x.shape, generator=generator)
            path.append(x)
        return x, torch.stack(path)

    @torch.no_grad()
    def sample_ode(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Euler steps of the probability-flow ODE from the prior; returns (samples, path)."""
        x = self.prior_sample(count, generator)
        path = [x]
        drift_matrix = torch.eye(2) - 2 * self.a.detach()
        for index in range(len(self.times) - 1, 0, -1):
            dt = self.times[index] - self.times[index - 1]
            beta = self.schedule.beta(self.times[index])
            velocity = -0.5 * beta * x @ drift_matrix.T - 0.5 * beta * self.score(x, index)
            x = x - velocity * dt
            path.append(x)
        return x, torch.stack(path)

    def forward_policy_loss(self, path: torch.Tensor, policies: torch.Tensor, zeta: float) -> torch.Tensor:
        """The SB-FBSDE loss of A on backward paths ``[K+1, n, 2]`` (from t=1 down) and their ``z_b``."""
        index = torch.arange(len(self.times) - 1, -1, -1)  # path[k] sits at grid time len - 1 - k
        beta = self.schedule.beta(self.times[index])[:, None]
        dt = torch.diff(self.times, prepend=self.times[:1] * 0)[index][:, None]
        forward_score = path @ self.a.T  # A x
        z_f = beta.sqrt()[..., None] * forward_score
        per_point = 0.5 * (z_f**2).sum(-1) + (z_f * policies).sum(-1) + zeta * beta * torch.trace(self.a)
        return (per_point * dt).sum(0).mean()

    def update_a(self, optimizer: torch.optim.Optimizer, paths: int, steps: int, zeta: float,
                 generator: torch.Generator) -> float:
        """One stage of the stochastic-approximation update of A from simulated backward paths."""
        with torch.no_grad():
            _, path = self.sample_sde(paths, generator)
            index = torch.arange(len(self.times) - 1, -1, -1)
            policies = torch.stack([self.backward_policy(path[k], int(i)) for k, i in enumerate(index)])
        total = 0.0
        for _ in range(steps):
            total += optimizer_step(optimizer, self.forward_policy_loss(path, policies, zeta))
        self.refresh()
        return total / steps
