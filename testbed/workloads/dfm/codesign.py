"""Mini-Multiflow: co-design of a 2-D chain "structure" and its residue "sequence" with one flow.

A protein stand-in: a sequence of ``residues`` tokens in {straight, left, right}; the structure
is the chain those turns fold into (unit bonds, each residue turning the heading by 0 or
``+-turn``), plus coordinate noise. The folding rule plays ESMFold: a generated pair is
*consistent* when the refolded sequence aligns to the generated structure with RMSD below a
threshold after Kabsch superposition (the analogue of Multiflow's scRMSD < 2 A designability).

The structure flows from Gaussian noise along the linear interpolant ``x_t = (1 - t) x_0 + t x_1``
with velocity ``(x1_hat - x_t) / (1 - t)`` (FrameFlow's translations); the sequence flows along the
masking DFM. Training draws one time per modality, and sets one of them to 1 with probability
``fold_prop`` each, so the network also learns folding and inverse folding.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from testbed.workloads.dfm.ctmc import corrupt, dfm_loss, masking_step
from testbed.workloads.dfm.models import JointNet

TURNS = torch.tensor([0.0, 1.0, -1.0])  # straight, left, right (in units of the turn angle)


def fold(seq: torch.Tensor, turn: float) -> torch.Tensor:
    """The folding rule: centred chain coordinates ``[n, residues + 1, 2]`` of sequences ``[n, residues]``."""
    heading = torch.cumsum(TURNS[seq] * turn, dim=1)
    bonds = torch.stack([torch.cos(heading), torch.sin(heading)], dim=-1)
    points = torch.cat([torch.zeros(len(seq), 1, 2), torch.cumsum(bonds, dim=1)], dim=1)
    return points - points.mean(1, keepdim=True)


def sample_sequences(count: int, residues: int, stay: float, generator: torch.Generator) -> torch.Tensor:
    """Sticky Markov-chain sequences: each residue repeats the previous type with probability ``stay``."""
    seq = torch.empty(count, residues, dtype=torch.long)
    seq[:, 0] = torch.randint(0, 3, (count,), generator=generator)
    for i in range(1, residues):
        fresh = torch.randint(0, 3, (count,), generator=generator)
        keep = torch.rand(count, generator=generator) < stay
        seq[:, i] = torch.where(keep, seq[:, i - 1], fresh)
    return seq


def kabsch_rmsd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """RMSD between point sets ``[n, P, 2]`` after the best rotation of ``a`` onto ``b`` (both centred)."""
    a = a - a.mean(1, keepdim=True)
    b = b - b.mean(1, keepdim=True)
    u, _, vh = torch.linalg.svd(a.transpose(1, 2) @ b)
    sign = torch.sign(torch.linalg.det(u @ vh))
    correction = torch.diag_embed(torch.stack([torch.ones_like(sign), sign], dim=1))  # no reflections
    rotation = u @ correction @ vh
    return ((a @ rotation - b) ** 2).sum(-1).mean(1).sqrt()


def joint_loss(net: JointNet, coords: torch.Tensor, seq: torch.Tensor, fold_prop: float,
               generator: torch.Generator) -> torch.Tensor:
    """Flow-matching loss on the structure (predict x_1) plus the DFM cross-entropy on the sequence."""
    n = len(seq)
    t_struct, t_seq = torch.rand(n, generator=generator), torch.rand(n, generator=generator)
    task = torch.rand(n, generator=generator)
    t_seq = torch.where(task < fold_prop, torch.ones_like(t_seq), t_seq)  # folding: sequence given
    t_struct = torch.where((task >= fold_prop) & (task < 2 * fold_prop), torch.ones_like(t_struct), t_struct)
    noise = torch.randn(coords.shape, generator=generator)
    noisy = (1 - t_struct)[:, None, None] * noise + t_struct[:, None, None] * coords
    seq_t = corrupt(seq, t_seq, net.vocab, generator)
    clean, logits = net(noisy, seq_t, t_struct, t_seq)
    structure = F.mse_loss(clean, coords, reduction="none").sum((1, 2))
    moving = t_struct < 1  # a given structure carries no structure loss
    structure_loss = (structure * moving).sum() / moving.sum().clamp(min=1)
    return structure_loss + dfm_loss(logits, seq, seq_t, net.vocab)


@torch.no_grad()
def joint_sample(net: JointNet, count: int, steps: int, eta: float, generator: torch.Generator,
                 given_seq: torch.Tensor | None = None,
                 given_coords: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Co-design (nothing given), folding (``given_seq``) or inverse folding (``given_coords``).

    Both modalities advance on one time grid: an Euler step of the structure ODE and an Euler
    step of the sequence CTMC with stochasticity ``eta``; a given modality stays at t = 1.
    """
    mask_id = net.vocab
    coords = given_coords if given_coords is not None else torch.randn(count, net.points, 2, generator=generator)
    seq = given_seq if given_seq is not None else torch.full((count, net.residues), mask_id, dtype=torch.long)
    ones, dt = torch.ones(count), 1.0 / steps
    for step in range(steps):
        t = step * dt
        t_struct = ones if given_coords is not None else torch.full((count,), t)
        t_seq = ones if given_seq is not None else torch.full((count,), t)
        clean, logits = net(coords, seq, t_struct, t_seq)
        if given_coords is None:
            coords = coords + dt * (clean - coords) / (1 - t)
        if given_seq is None:
            seq = masking_step(seq, logits.softmax(-1), t, dt, eta, step == steps - 1, mask_id, generator)
    return coords, seq

