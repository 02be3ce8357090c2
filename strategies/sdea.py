"""SDEA: Self-Driven Entropy Aggregation (Huang et al., ICML 2024), as pure functions.

Each round the server learns aggregation weights on an unlabelled public set:

1. Logits ``M`` (one per client) start at ``1/K`` and are re-created every
   round; ``w = softmax(M)``.
2. A *virtual global model* ``theta(w) = sum_k w_k theta_k`` mixes the client
   parameters **and** floating-point buffers (BatchNorm running statistics)
   and is evaluated with ``torch.func.functional_call``. ``bn_mode="train"``
   (default, as the authors' code, whose virtual model runs in training mode)
   normalises each public batch by its own statistics; ``bn_mode="eval"``
   uses the mixed running statistics, as the aggregated model would be
   deployed. PyTorch's batch norm is not differentiable in its running
   statistics, so buffers are mixed with ``w`` detached: gradients reach
   ``M`` through the parameters only. (The authors' default backbone has no
   BatchNorm, where the two modes agree; the classifier's ``norm: none`` is
   that network.)
3. Loss (the paper's instance sharpness minus class diversity, no trade-off
   weight): ``EH(p) = mean_i H(p_i)`` and ``HE(p) = H(mean_i p_i)`` with
   ``H(q) = -sum_c q_c log(q_c + 1e-5)``; ``loss = mean over two augmented
   views of EH - HE``. Adam (lr 0.005, weight decay 1e-5) for ``epochs``
   passes over the public set in shuffled batches of 64.
4. Cooperative clustering: the 1-D learned weights are clustered with FINCH
   (:mod:`strategies.finch`); the lowest-centre cluster is flagged malicious.

Authors' code vs the paper's text (step 4), selected with ``rule``:

* ``rule="code"`` (default; it produced the paper's tables): the authors' code
  (github.com/WenkeHuang/SDEA, ``models/utils/federated_model.py::
  aggregate_nets``) takes FINCH's **finest** partition, flags the
  minimum-centre cluster, lets flagged clients **keep their small learned
  weight**, and gives each other client ``(1 - sum w_flagged) / n_benign``.
* ``rule="two_group"`` (an ablation: our reading of the paper's text, which
  splits the weights into **two groups** and divides the weight equally among
  the benign, higher-centre group): FINCH's coarsest partition with at least
  two clusters, the closest cluster means merged until two remain; flagged
  clients get weight **0**, each benign client ``1/n_benign``. On digits it
  zeroed 6-10 of 16 honest clients (docs/reproduction/sdea.md).

Both fall back to uniform ``1/K`` with nobody flagged when FINCH finds a
single cluster (the code's behaviour when FINCH raises).

Cost per round: ``epochs * ceil(m / batch_size)`` Adam steps over ``m``
public images, each one mix of the ``K`` states (``O(K d)``, forward and
backward) and the forward and backward passes of the *one* mixed model on the
two views of a batch; there is no forward pass per client. Unless ``K d`` is
large, that is the model's own training cost on ``2 * epochs * m`` images,
which keeps the step tens to thousands of times FedAvg's single weighted sum
(benchmarks/bench_sdea.py; docs/performance.md). Run it with one intra-op
thread on a busy CPU, as the federated server does: its many small kernels
leave two threads waiting on each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict, Unpack, cast

import numpy as np
import torch
from torch.func import functional_call

from .finch import cluster_means, finch, merge_to

StateDict = Mapping[str, torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
RULES = ("code", "two_group")
BN_MODES = ("train", "eval")
_EPS = 1e-5  # inside the log, as in the paper's entropy terms


class OptimSettings(TypedDict, total=False):
    """The optimiser settings ``sdea_weights`` passes on to ``learn_weights``."""

    batch_size: int
    lr: float
    weight_decay: float


def entropy_objective(logits: torch.Tensor) -> torch.Tensor:
    """Instance sharpness minus class diversity: ``mean_i H(p_i) - H(mean_i p_i)``."""
    p = torch.softmax(logits, dim=1)
    sharpness = -(p * torch.log(p + _EPS)).sum(dim=1).mean()
    p_bar = p.mean(dim=0)
    diversity = -(p_bar * torch.log(p_bar + _EPS)).sum()
    return sharpness - diversity


def _stack_states(states: Sequence[StateDict], device: torch.device) -> dict[str, torch.Tensor]:
    """Per key, the ``[K, ...]`` stack of client tensors (floating point only)."""
    keys = states[0].keys()
    return {
        k: torch.stack([torch.as_tensor(s[k]).detach().to(device) for s in states])
        for k in keys
        if torch.as_tensor(states[0][k]).is_floating_point()
    }


def mix_states(
    stacks: Mapping[str, torch.Tensor],
    weights: torch.Tensor,
    fixed: Mapping[str, torch.Tensor] | None = None,
    no_grad_keys: frozenset[str] = frozenset(),
) -> dict[str, torch.Tensor]:
    """The virtual global state ``sum_k w_k theta_k`` for every stacked key, plus ``fixed`` entries.

    Keys in ``no_grad_keys`` (float buffers) are mixed with detached weights;
    integer buffers (``num_batches_tracked``) are copied from ``fixed``.
    """
    mixed = {}
    for key, stack in stacks.items():
        w = weights.detach() if key in no_grad_keys else weights
        mixed[key] = torch.tensordot(w.to(stack.dtype), stack, dims=1)
    # Copies: batch norm in training mode counts its batches in place (num_batches_tracked).
    mixed.update({key: value.clone() for key, value in (fixed or {}).items()})
    return mixed


def _logits(model: torch.nn.Module, state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    out = functional_call(model, state, (x,))
    if isinstance(out, Mapping):  # SDEA's backbones return {"logits": ...}
        return out["logits"]
    return out[0] if isinstance(out, (tuple, list)) else out


def learn_weights(
    model_fn: Callable[[], torch.nn.Module],
    client_state_dicts: Sequence[Mapping[str, torch.Tensor]],
    public_x: torch.Tensor,
    augment: Augment | None,
    epochs: int = 20,
    generator: torch.Generator | None = None,
    *,
    batch_size: int = 64,
    lr: float = 0.005,
    weight_decay: float = 1e-5,
    bn_mode: str = "train",
) -> torch.Tensor:
    """Steps 1-3: the learned ``softmax(M)`` weights, shape ``[K]``, on CPU.

    Runs on ``public_x.device``. ``generator`` (a CPU ``torch.Generator``,
    default seeded 0) drives the batch order and is handed to ``augment``,
    which should draw its randomness from it on the CPU so runs repeat.
    """
    if len(client_state_dicts) < 1:
        raise ValueError("client_state_dicts: need at least one client")
    if epochs < 0 or batch_size < 1 or public_x.shape[0] < 1:
        raise ValueError("epochs/batch_size/public_x: need epochs>=0, batch_size>=1, non-empty public_x")
    if bn_mode not in BN_MODES:
        raise ValueError(f"bn_mode: unknown {bn_mode!r}; valid: {list(BN_MODES)}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    augment = augment or (lambda x, g: x)
    device = public_x.device
    model = model_fn().to(device).eval()  # dropout and the like stay off: the views are the only noise
    if bn_mode == "train":
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.train()
    stacks = _stack_states(client_state_dicts, device)
    buffer_keys = frozenset(name for name, _ in model.named_buffers())
    fixed = {k: torch.as_tensor(v).to(device) for k, v in client_state_dicts[0].items() if k not in stacks}
    k = len(client_state_dicts)
    logits_m = torch.full((k,), 1.0 / k, device=device, requires_grad=True)
    opt = torch.optim.Adam([logits_m], lr=lr, weight_decay=weight_decay)
    n = public_x.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen).to(device)
        for start in range(0, n, batch_size):
            xb = public_x[order[start : start + batch_size]]
            # Rebuilt every step: in training mode batch norm updates the running statistics it is
            # given in place, and those must not leak from one step into the next.
            state = mix_states(stacks, torch.softmax(logits_m, dim=0), fixed, buffer_keys)
            views = (augment(xb, gen), augment(xb, gen))
            # cast: sum() of tensors is typed as possibly the int 0 (no runtime effect).
            loss = cast(torch.Tensor, sum(entropy_objective(_logits(model, state, v)) for v in views) / 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return torch.softmax(logits_m.detach(), dim=0).cpu()


def _lowest_cluster(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return labels == int(np.argmin(cluster_means(values, labels)[:, 0]))


def cooperative_weights(learned: torch.Tensor, rule: str = "code") -> tuple[torch.Tensor, torch.Tensor]:
    """Step 4: final weights and malicious mask from the learned weights (see module doc)."""
    if rule not in RULES:
        raise ValueError(f"rule: unknown {rule!r}; valid: {list(RULES)}")
    w = learned.detach().to(torch.float64).cpu()
    k = w.numel()
    values = w.numpy()
    partitions = finch(values)
    if not partitions:
        return torch.full((k,), 1.0 / k), torch.zeros(k, dtype=torch.bool)
    if rule == "two_group":
        labels = merge_to(values, partitions[-1], 2)
    else:
        labels = partitions[0]
    mask = torch.from_numpy(_lowest_cluster(values, labels))
    n_benign = int((~mask).sum())
    if rule == "two_group":
        final = torch.where(mask, 0.0, 1.0 / n_benign)
    else:
        final = torch.where(mask, w, (1.0 - float(w[mask].sum())) / n_benign)
    return final.to(torch.float32), mask


def sdea_weights(
    model_fn: Callable[[], torch.nn.Module],
    client_state_dicts: Sequence[Mapping[str, torch.Tensor]],
    public_x: torch.Tensor,
    augment: Augment | None,
    epochs: int = 20,
    generator: torch.Generator | None = None,
    rule: str = "code",
    bn_mode: str = "train",
    **optim: Unpack[OptimSettings],
) -> tuple[torch.Tensor, torch.Tensor]:
    """SDEA's per-round aggregation weights ``[K]`` and malicious mask ``[K]``.

    ``model_fn()`` builds the architecture (its own weights are ignored);
    ``augment(x, generator)`` returns one augmented view of a batch;
    ``optim`` may override ``batch_size``, ``lr`` and ``weight_decay``.
    """
    if rule not in RULES:
        raise ValueError(f"rule: unknown {rule!r}; valid: {list(RULES)}")
    learned = learn_weights(model_fn, client_state_dicts, public_x, augment, epochs, generator,
                            bn_mode=bn_mode, **optim)
    return cooperative_weights(learned, rule)
