"""Backdoor (targeted) attacks: a BadNets pixel-pattern trigger, and model replacement.

Both are ``kind="backdoor"`` attacks of the registry (:mod:`strategies.attacks`):
``fn(x, y, num_classes, generator, **params) -> (x, y)`` poisons a malicious client's training
data once, before local training.

* ``badnets`` (Gu, Dolan-Gavitt, Garg 2017, as FL attacks play it): a ``poison_fraction`` share of
  the client's samples gets the trigger, a ``patch_size`` x ``patch_size`` square of value ``value``
  in the bottom-right corner of every channel (the last ``patch_size**2`` features of flat data),
  and the label ``target``. A model that learned the backdoor sends triggered inputs to ``target``.
* ``model_replacement`` (Bagdasaryan et al., AISTATS 2020, "How to backdoor federated learning"):
  the same poisoned training, then the attacker uploads ``global + boost * (local - global)``
  (:func:`scale_update`), so that averaging with the benign updates leaves (nearly) its own
  backdoored model. ``boost`` defaults to ``n / eta`` per attacker as the paper's gamma, with the
  server rate eta = 1 and n split among the m attackers: ``n / m``.

:func:`attack_success_rate` inputs: every test sample not already of the target class, triggered,
with the target as its label; the share a model classifies as ``target`` is the attack success rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .attack_base import attack

if TYPE_CHECKING:  # the declarations import no torch (validation reads them); the functions do
    from torch import Generator, Tensor

# The largest trigger value in size. Images are scaled to [0, 1] and tables standardised (z-scores
# of a few units), so a trigger of a few units is already conspicuous; 1000 leaves wide room and
# keeps the poisoned inputs (and the first layer's outputs) far from float32's overflow (3.4e38).
MAX_TRIGGER_VALUE = 1e3
MAX_CLASSES = 2**31


def _check(target: int, poison_fraction: float, patch_size: int, num_classes: int, value: float = 1.0) -> None:
    if not abs(value) <= MAX_TRIGGER_VALUE:  # NaN fails this too
        raise ValueError(f"value: the trigger's input value must be within [-{MAX_TRIGGER_VALUE:g}, "
                         f"{MAX_TRIGGER_VALUE:g}] (images are in [0, 1], tables standardised), got {value}")
    if not 0.0 < poison_fraction <= 1.0:
        raise ValueError(f"poison_fraction: must be in (0, 1], got {poison_fraction}")
    if patch_size < 1:
        raise ValueError(f"patch_size: must be >= 1, got {patch_size}")
    if target >= MAX_CLASSES:  # before any tensor holds it: past int64 it is an OverflowError of torch
        raise ValueError(f"target: {target} is no class of any dataset (labels are below 2**31)")
    if not 0 <= target < num_classes:
        raise ValueError(f"target: must be a class in [0, {num_classes}), got {target}")


def _check_patch(patch_size: int, shape: tuple[int, ...]) -> None:
    """A trigger fits the samples of ``shape``: an image's (``[c, h, w]``) height and width; flat data any."""
    if len(shape) >= 2 and patch_size > min(shape[-2:]):
        raise ValueError(f"patch_size: {patch_size} is larger than the images ({tuple(int(s) for s in shape[-2:])})")


def _check_badnets(target: int, poison_fraction: float, patch_size: int, value: float, num_classes: int,
                   shape: tuple[int, ...]) -> None:
    """BadNets' values against data of ``num_classes`` classes and samples of ``shape``, in its run's order."""
    _check(target, poison_fraction, patch_size, num_classes, value)
    _check_patch(patch_size, shape)


def stamp_trigger(x: Tensor, *, patch_size: int = 2, value: float = 1.0) -> Tensor:
    """``x`` with the trigger stamped on every sample: images ``[n, c, h, w]`` get a square in the
    bottom-right corner of every channel, flat ``[n, d]`` data its last ``patch_size**2`` features."""
    out = x.clone()
    if out.dim() >= 3:
        _check_patch(patch_size, tuple(out.shape[1:]))
        out[..., -patch_size:, -patch_size:] = value
    else:
        out[:, -min(patch_size * patch_size, out.shape[1]):] = value
    return out


@attack("backdoor", check=_check_badnets)
def badnets(x: Tensor, y: Tensor, num_classes: int, generator: Generator, *, target: int = 0,
            poison_fraction: float = 0.5, patch_size: int = 2, value: float = 1.0) -> tuple[Tensor, Tensor]:
    """BadNets (Gu et al. 2017): a ``poison_fraction`` share of the samples triggered and relabelled ``target``.

    The share is drawn from ``generator``."""
    import torch

    _check(target, poison_fraction, patch_size, num_classes, value)
    chosen = torch.rand(len(y), generator=generator) < poison_fraction
    x, y = x.clone(), y.clone()
    x[chosen] = stamp_trigger(x[chosen], patch_size=patch_size, value=value)
    y[chosen] = target
    return x, y


# Model replacement's boost is about N / m (clients per attacker); far above any federation's size it
# only overflows the uploads to inf and the global model to NaN.
MAX_BOOST = 1e6


def _check_boost(boost: float | None) -> None:
    if boost is not None and not 0 < boost <= MAX_BOOST:
        raise ValueError(f"boost: must be in (0, {MAX_BOOST:g}], got {boost}")


def _check_replacement(target: int, poison_fraction: float, patch_size: int, value: float, boost: float | None,
                       num_classes: int, shape: tuple[int, ...]) -> None:
    _check_boost(boost)
    _check_badnets(target, poison_fraction, patch_size, value, num_classes, shape)


@attack("backdoor", boosted=True, check=_check_replacement)
def model_replacement(x: Tensor, y: Tensor, num_classes: int, generator: Generator, *, target: int = 0,
                      poison_fraction: float = 0.5, patch_size: int = 2, value: float = 1.0,
                      boost: float | None = None) -> tuple[Tensor, Tensor]:
    """Model replacement (Bagdasaryan et al. 2020): BadNets' poisoning, then ``global + boost (local - global)`` sent.

    This function poisons the data; the boost is applied to the upload (:func:`scale_update`)."""
    _check_boost(boost)
    return badnets(x, y, num_classes, generator, target=target, poison_fraction=poison_fraction,
                   patch_size=patch_size, value=value)


def scale_update(global_state: dict[str, Tensor], local_state: dict[str, Tensor],
                 boost: float) -> dict[str, Tensor]:
    """``global + boost * (local - global)`` on floating-point entries (integer buffers, such as batch
    norm's step count, are the local ones)."""
    return {k: (g + boost * (local_state[k] - g)) if g.is_floating_point() else local_state[k].clone()
            for k, g in global_state.items()}


def triggered_test_set(x: Tensor, y: Tensor, *, target: int = 0, patch_size: int = 2,
                       value: float = 1.0) -> tuple[Tensor, Tensor]:
    """The inputs of the attack success rate: test samples not of class ``target``, triggered,
    labelled ``target``."""
    import torch

    keep = y != target
    return stamp_trigger(x[keep], patch_size=patch_size, value=value), torch.full_like(y[keep], target)


def attack_success_rate(predictions: Tensor, target: int) -> float:
    """Share of triggered inputs classified as ``target`` (predicted labels of `triggered_test_set`)."""
    return float((predictions == target).float().mean()) if predictions.numel() else float("nan")
