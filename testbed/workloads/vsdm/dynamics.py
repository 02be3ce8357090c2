"""The VSDM forward process and its closed-form Gaussian kernels (Deng et al. 2024, section 3).

The Schrödinger-bridge forward SDE ``dx = [-1/2 beta_t x + beta_t grad log psi_t(x)] dt + sqrt(beta_t) dw``
with the forward score linearised to ``grad log psi_t(x) ~ A x`` (the *variational score*) is a
multivariate Ornstein-Uhlenbeck process ``dx = -1/2 beta_t D x dt + sqrt(beta_t) dw`` with
``D = I - 2A``. Its transition ``x_t | x_0 ~ N(M_t x_0, Sigma_t)`` is known in closed form:

* ``M_t = expm(-1/2 B_t D)`` with ``B_t = int_0^t beta_s ds``;
* ``Sigma_t = C_t H_t^{-1}`` from the matrix-fraction decomposition
  ``[C_t; H_t] = expm(B_t [[-1/2 D, I], [0, 1/2 D^T]]) [0; I]``.

A is time-invariant here (the authors' ``static_module`` variant), so every ``D_t`` commutes and
the exponentials above are exact. The schedule is ``beta_t = beta_min + t^r (beta_max - beta_min)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Schedule:
    """The noise schedule ``beta_t = beta_min + t^r (beta_max - beta_min)`` on ``t in [0, 1]``."""

    beta_min: float
    beta_max: float
    power: float

    def beta(self, t: torch.Tensor) -> torch.Tensor:
        """The diffusion rate beta_t."""
        return self.beta_min + t**self.power * (self.beta_max - self.beta_min)

    def integral(self, t: torch.Tensor) -> torch.Tensor:
        """``B_t = int_0^t beta_s ds``, in closed form."""
        return self.beta_min * t + t ** (self.power + 1) * (self.beta_max - self.beta_min) / (self.power + 1)


def drift_matrix(a: torch.Tensor) -> torch.Tensor:
    """``D = I - 2A``: the forward drift is ``-1/2 beta_t D x``."""
    return torch.eye(a.shape[-1], dtype=a.dtype) - 2.0 * a


def mean_factor(schedule: Schedule, a: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``M_t = expm(-1/2 B_t D)`` for each time in ``t`` (shape ``[T, d, d]``)."""
    b = schedule.integral(t)[:, None, None]
    return torch.linalg.matrix_exp(-0.5 * b * drift_matrix(a))


def conditional_covariance(schedule: Schedule, a: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``Sigma_t`` of ``x_t | x_0`` by matrix-fraction decomposition (shape ``[T, d, d]``).

    ``Sigma`` solves ``dSigma/dt = -1/2 beta_t (D Sigma + Sigma D^T) + beta_t I`` with ``Sigma_0 = 0``;
    writing ``Sigma = C H^{-1}`` turns that Riccati-type equation into the linear one whose
    propagator is the 2d x 2d matrix exponential below.
    """
    d = a.shape[-1]
    drift = drift_matrix(a).to(torch.float64)
    block = torch.zeros(2 * d, 2 * d, dtype=torch.float64)
    block[:d, :d] = -0.5 * drift
    block[:d, d:] = torch.eye(d, dtype=torch.float64)
    block[d:, d:] = 0.5 * drift.T
    b = schedule.integral(t.to(torch.float64))[:, None, None]
    propagated = torch.linalg.matrix_exp(b * block)[:, :, d:]  # times [0; I]
    c, h = propagated[:, :d], propagated[:, d:]
    sigma = torch.linalg.solve(h.transpose(1, 2), c.transpose(1, 2)).transpose(1, 2)  # C H^{-1}
    return (0.5 * (sigma + sigma.transpose(1, 2))).to(a.dtype)


@dataclass
class Kernels:
    """``M_t``, ``Sigma_t`` and ``L_t = chol(Sigma_t)`` on a time grid, cached once per stage."""

    times: torch.Tensor
    mean: torch.Tensor
    covariance: torch.Tensor
    cholesky: torch.Tensor

    @classmethod
    def build(cls, schedule: Schedule, a: torch.Tensor, times: torch.Tensor) -> Kernels:
        sigma = conditional_covariance(schedule, a, times)
        return cls(times, mean_factor(schedule, a, times), sigma, torch.linalg.cholesky(sigma))


def forward_sample(kernels: Kernels, index: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``x_t = M_t x_0 + L_t eps``: a draw of the forward marginal without simulating the SDE."""
    return (kernels.mean[index] @ x0[:, :, None] + kernels.cholesky[index] @ noise[:, :, None])[:, :, 0]


def simulate_forward(schedule: Schedule, a: torch.Tensor, x0: torch.Tensor, steps: int,
                     generator: torch.Generator) -> torch.Tensor:
    """Euler-Maruyama paths of the forward SDE from ``x0`` on ``[0, 1]``: shape ``[steps + 1, n, d]``.

    Only used to check the closed-form kernels; training never simulates the forward SDE.
    """
    dt = 1.0 / steps
    drift = drift_matrix(a)
    path = [x0]
    x = x0
    for k in range(steps):
        beta = schedule.beta(torch.tensor(k * dt))
        noise = torch.randn(x.shape, generator=generator)
        x = x - 0.5 * beta * dt * x @ drift.T + (beta * dt).sqrt() * noise
        path.append(x)
    return torch.stack(path)
