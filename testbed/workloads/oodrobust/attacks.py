"""Adversaries of OODRobustBench's miniature: the seen threat and the unseen ones.

All attacks work on images in [0, 1] and return, per sample, whether the model is still correct
under *every* attempt (a sample counts as robust only if no attack and no iterate fooled it, the
worst case the paper's MM5 / AutoAttack evaluations estimate):

* `pgd` — projected gradient ascent in an L-inf or L2 ball (Madry et al. 2018) on cross-entropy
  or on a margin loss, with random starts; every iterate is checked, not only the last.
* `ensemble_robust` — the strong ID attack: PGD-CE with restarts plus the minimum-margin attack
  MM-k (targeted margin loss z_t - z_y against each of the k most likely wrong classes; the
  paper's MM5 with k = 5), per-sample worst case.
* `rotation_robust` — a spatial threat (worst case over a grid of rotation angles).
* `patch_robust` — an adversarial patch: a p x p square of arbitrary pixel values, at the worst
  position, its values found by sign-gradient ascent.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

Norm = Literal["linf", "l2"]


def margin_loss(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample margin z_t - z_y (targeted) or max_{j != y} z_j - z_y (Carlini-Wagner, untargeted)."""
    true = logits.gather(1, labels[:, None])[:, 0]
    if targets is not None:
        return logits.gather(1, targets[:, None])[:, 0] - true
    others = logits.masked_fill(F.one_hot(labels, logits.shape[1]).bool(), float("-inf"))
    return others.max(dim=1).values - true


def project(delta: torch.Tensor, x: torch.Tensor, norm: Norm, epsilon: float) -> torch.Tensor:
    """Bring ``delta`` back into the epsilon-ball of ``norm`` and keep ``x + delta`` inside [0, 1].

    For L2 the ball projection comes first and the box clip second; clipping only moves coordinates
    towards x, so it never increases the norm and the result stays in both sets.
    """
    if norm == "linf":
        delta = delta.clamp(-epsilon, epsilon)
    else:
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
        delta = delta * (epsilon / norms).clamp(max=1.0).view(-1, *[1] * (delta.dim() - 1))
    return (x + delta).clamp(0, 1) - x


def _random_start(x: torch.Tensor, norm: Norm, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    noise = torch.rand(x.shape, generator=generator) * 2 - 1
    if norm == "l2":  # a uniform direction at a uniform fraction of the radius
        noise = noise / noise.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (x.dim() - 1))
        noise = noise * torch.rand(len(x), generator=generator).view(-1, *[1] * (x.dim() - 1))
    return project(noise * epsilon, x, norm, epsilon)


def _ascent_step(grad: torch.Tensor, norm: Norm, step_size: float) -> torch.Tensor:
    if norm == "linf":
        return step_size * grad.sign()
    return step_size * grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (grad.dim() - 1))


def pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: Norm, epsilon: float, steps: int,
        generator: torch.Generator, loss: Literal["ce", "margin"] = "ce", targets: torch.Tensor | None = None,
        random_start: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Projected gradient ascent; returns (adversarial inputs, mask of samples fooled at any iterate).

    The step size 2.5 * epsilon / steps lets the iterate cross the ball in 40% of the steps
    (Madry et al.). The returned input of a fooled sample is the first iterate that fooled it, of
    the others the last iterate.
    """
    delta = _random_start(x, norm, epsilon, generator) if random_start else torch.zeros_like(x)
    step_size = 2.5 * epsilon / steps
    best = x + delta
    fooled = torch.zeros(len(x), dtype=torch.bool)
    for iterate in range(steps + 1):
        delta.requires_grad_(True)
        logits = model(x + delta)
        wrong = logits.argmax(dim=1) != y
        best = torch.where((wrong & ~fooled).view(-1, *[1] * (x.dim() - 1)), (x + delta).detach(), best)
        fooled |= wrong
        if fooled.all() or iterate == steps:
            break
        objective = (F.cross_entropy(logits, y, reduction="sum") if loss == "ce"
                     else margin_loss(logits, y, targets).sum())
        grad, = torch.autograd.grad(objective, delta)
        delta = project(delta.detach() + _ascent_step(grad, norm, step_size), x, norm, epsilon)
    # Samples never fooled return the last iterate.
    best = torch.where(fooled.view(-1, *[1] * (x.dim() - 1)), best, (x + delta).detach())
    return best.detach(), fooled


def pgd_training_examples(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epsilon: float, steps: int,
                          generator: torch.Generator) -> torch.Tensor:
    """The inner maximiser of PGD adversarial training: the last L-inf PGD-CE iterate (Madry et al.)."""
    delta = _random_start(x, "linf", epsilon, generator)
    step_size = 2.5 * epsilon / steps
    for _ in range(steps):
        delta.requires_grad_(True)
        grad, = torch.autograd.grad(F.cross_entropy(model(x + delta), y), delta)
        delta = project(delta.detach() + _ascent_step(grad, "linf", step_size), x, "linf", epsilon)
    return (x + delta).detach()


def correct_mask(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Which samples the model classifies correctly."""
    with torch.no_grad():
        return model(x).argmax(dim=1) == y


def ensemble_robust(model: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: Norm, epsilon: float,
                    steps: int, restarts: int, margin_classes: int, generator: torch.Generator) -> torch.Tensor:
    """Robust-accuracy mask under the strong ensemble: PGD-CE with ``restarts`` starts, then MM-k.

    Only samples that survived so far are attacked again (the per-sample worst case is the same,
    and it keeps the ensemble cheap).
    """
    robust = correct_mask(model, x, y)
    for restart in range(restarts):
        alive = robust.nonzero()[:, 0]
        if len(alive):
            _, fooled = pgd(model, x[alive], y[alive], norm, epsilon, steps, generator, "ce", random_start=restart > 0)
            robust[alive[fooled]] = False
    if margin_classes > 0:
        with torch.no_grad():
            logits = model(x)
        # MM-k's targets: the k most likely wrong classes of the clean input.
        ranked = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf")).argsort(dim=1, descending=True)
        for rank in range(min(margin_classes, ranked.shape[1] - 1)):
            alive = robust.nonzero()[:, 0]
            if len(alive):
                _, fooled = pgd(model, x[alive], y[alive], norm, epsilon, steps, generator, "margin",
                                targets=ranked[alive, rank])
                robust[alive[fooled]] = False
    return robust


def pgd_robust(model: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: Norm, epsilon: float, steps: int,
               generator: torch.Generator) -> torch.Tensor:
    """Robust-accuracy mask under a single PGD-CE run (the weak baseline of the ensemble)."""
    robust = correct_mask(model, x, y)
    alive = robust.nonzero()[:, 0]
    if len(alive):
        _, fooled = pgd(model, x[alive], y[alive], norm, epsilon, steps, generator, "ce")
        robust[alive[fooled]] = False
    return robust


def rotate(x: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
    """Rotate each image about its centre by its angle (bilinear, zero = background fill)."""
    radians = degrees * torch.pi / 180
    cos, sin = torch.cos(radians), torch.sin(radians)
    zeros = torch.zeros_like(cos)
    theta = torch.stack([torch.stack([cos, -sin, zeros], 1), torch.stack([sin, cos, zeros], 1)], 1)
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def rotation_robust(model: nn.Module, x: torch.Tensor, y: torch.Tensor, max_degrees: float,
                    angles: int = 13) -> torch.Tensor:
    """Correct under every rotation of a uniform grid of ``angles`` angles in [-max, max] (exhaustive)."""
    robust = correct_mask(model, x, y)
    for angle in torch.linspace(-max_degrees, max_degrees, angles):
        robust &= correct_mask(model, rotate(x, angle.expand(len(x))), y)
    return robust


def patch_masks(shape: tuple[int, int], size: int) -> torch.Tensor:
    """One 0/1 mask per position of a ``size`` x ``size`` square inside an image of ``shape``: (P, 1, H, W)."""
    height, width = shape
    masks = torch.zeros(height - size + 1, width - size + 1, height, width)
    for row in range(height - size + 1):
        for col in range(width - size + 1):
            masks[row, col, row : row + size, col : col + size] = 1.0
    return masks.flatten(0, 1)[:, None]


def patch_robust(model: nn.Module, x: torch.Tensor, y: torch.Tensor, size: int, steps: int,
                 generator: torch.Generator, positions: int = 8) -> torch.Tensor:
    """Correct under an adversarial ``size`` x ``size`` patch (arbitrary values in [0, 1]).

    Trying every position with a full attack is costly, so each sample's ``positions`` most salient
    squares (largest input-gradient mass of the loss at the clean input) are attacked, all at once:
    sign-gradient ascent on the patch values from a random start, every iterate checked.
    """
    robust = correct_mask(model, x, y)
    alive = robust.nonzero()[:, 0]
    if not len(alive):
        return robust
    xs, ys = x[alive], y[alive]
    masks = patch_masks((x.shape[-2], x.shape[-1]), size)
    clean = xs.clone().requires_grad_(True)
    saliency, = torch.autograd.grad(F.cross_entropy(model(clean), ys, reduction="sum"), clean)
    mass = torch.einsum("nchw,pchw->np", saliency.abs(), masks)
    chosen = mass.topk(min(positions, len(masks)), dim=1).indices  # (n, positions)
    mask = masks[chosen].flatten(0, 1)  # (n * positions, 1, H, W), sample-major
    base, labels = xs.repeat_interleave(chosen.shape[1], 0), ys.repeat_interleave(chosen.shape[1], 0)
    values = torch.rand(base.shape, generator=generator)
    fooled = torch.zeros(len(base), dtype=torch.bool)
    for iterate in range(steps + 1):
        values.requires_grad_(True)
        logits = model(base * (1 - mask) + values * mask)
        fooled |= logits.argmax(dim=1) != labels
        if iterate == steps:
            break
        grad, = torch.autograd.grad(F.cross_entropy(logits, labels, reduction="sum"), values)
        values = (values.detach() + 0.25 * grad.sign()).clamp(0, 1)
    robust[alive[fooled.view(len(alive), -1).any(dim=1)]] = False
    return robust
