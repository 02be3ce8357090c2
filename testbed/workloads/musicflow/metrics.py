"""The MusicFlow miniature's evaluation: FAD and CLAP analogues, infilling error, conditioning adherence.

- Frechet distance (the paper's FAD) between Gaussian fits of the penultimate features of a small
  attribute classifier trained on real clips (the frozen "VGGish"/"PaSST" of the miniature);
- text adherence (its CLAP/KL analogue): that classifier's accuracy on the described attributes;
- infilling: the Frechet distance of the infilled segments (with the frames around them, so that
  the seams count) against the same segments of real training clips, the headline, because an
  error against the one true continuation is won by the mean (copying the nearest known frame
  beats any sampler on it); the mean squared error on the generated frames of one draw and the
  best of k draws are kept as secondary numbers, with the copy baseline beside them;
- stage-2 adherence: share of frames whose chroma argmax of the generated acoustic features
  equals the argmax of the semantic features it was conditioned on.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import linalg
from torch import nn

from testbed.workloads.musicflow.data import BANDS, MusicSet, Normaliser, attribute_bits, chroma_of
from testbed.workloads.training import optimizer_step


class AttributeClassifier(nn.Module):
    """Temporal convolutions, mean over time, then a 32-dim embedding and three binary attribute logits."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(BANDS, width, 3, padding=1), nn.ReLU(),
                                  nn.Conv1d(width, width, 3, padding=1), nn.ReLU())
        self.embed = nn.Sequential(nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, 3)

    def features(self, acoustic: torch.Tensor) -> torch.Tensor:
        """Penultimate features of ``[N, frames, bands]`` clips."""
        return self.embed(self.conv(acoustic.transpose(1, 2)).mean(-1))

    def forward(self, acoustic: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(acoustic))


def train_classifier(clips: MusicSet, seed: int, steps: int = 200) -> AttributeClassifier:
    """Fit the evaluation classifier on real training clips (binary cross-entropy per attribute)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AttributeClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    targets = attribute_bits(clips.labels).float()
    for _ in range(steps):
        index = torch.randint(0, len(targets), (64,), generator=generator)
        loss = nn.functional.binary_cross_entropy_with_logits(model(clips.acoustic[index]), targets[index])
        optimizer_step(optimizer, loss)
    model.eval()
    return model


def frechet_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """||mu_a - mu_b||^2 + tr(C_a + C_b - 2 (C_a C_b)^(1/2)) of two feature sets."""
    a64, b64 = a.double().numpy(), b.double().numpy()
    mean_a, mean_b = a64.mean(0), b64.mean(0)
    ridge = 1e-6 * np.eye(a64.shape[1])  # dead ReLU units make the covariances singular
    cov_a, cov_b = np.cov(a64, rowvar=False) + ridge, np.cov(b64, rowvar=False) + ridge
    root = linalg.sqrtm(cov_a @ cov_b)
    return float(((mean_a - mean_b) ** 2).sum() + np.trace(cov_a + cov_b - 2 * np.real(root)))


@torch.no_grad()
def quality(classifier: AttributeClassifier, generated: torch.Tensor, labels: torch.Tensor,
            real: torch.Tensor) -> dict[str, float]:
    """FD to ``real`` clips and attribute accuracy of ``generated`` clips described by ``labels``."""
    logits = classifier(generated)
    accuracy = ((logits > 0).long() == attribute_bits(labels)).float().mean()
    return {"fd": frechet_distance(classifier.features(generated), classifier.features(real)),
            "text_adherence": float(accuracy)}


def chroma_agreement(acoustic: torch.Tensor, semantic: torch.Tensor, norm: Normaliser,
                     mask: torch.Tensor | None = None) -> float:
    """Share of frames (where ``mask`` is 1) whose strongest pitch class in the audio is that of ``semantic``."""
    same = (chroma_of(acoustic, norm).argmax(-1) == semantic.argmax(-1)).float()
    return float(same.mean() if mask is None else (same * mask).sum() / mask.sum())


def infill_mask(batch: int, frames: int, fraction: float) -> torch.Tensor:
    """The evaluation mask: the middle ``fraction`` of the frames to generate, context on both sides."""
    length = round(fraction * frames)
    start = (frames - length) // 2
    mask = torch.zeros(batch, frames)
    mask[:, start : start + length] = 1.0
    return mask


def masked_mse(generated: torch.Tensor, truth: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean squared error over the generated frames only."""
    weight = mask[..., None].expand_as(truth)
    return float(((generated - truth) ** 2 * weight).sum() / weight.sum())


SEAM = 2  # frames kept around an infilled segment: the receptive field of the classifier's two 3-wide convolutions


def segment(clips: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The frames of ``clips`` ``[N, T, bands]`` under the (shared) infill ``mask``, with `SEAM` frames each side."""
    inside = torch.nonzero(mask[0]).flatten()
    start, stop = max(int(inside[0]) - SEAM, 0), min(int(inside[-1]) + 1 + SEAM, clips.shape[1])
    return clips[:, start:stop]


@torch.no_grad()
def segment_fd(classifier: AttributeClassifier, clips: torch.Tensor, real: torch.Tensor, mask: torch.Tensor) -> float:
    """Frechet distance between the classifier features of the infilled segments of ``clips`` and of ``real``."""
    return frechet_distance(classifier.features(segment(clips, mask)), classifier.features(segment(real, mask)))


def clip_mse(generated: torch.Tensor, truth: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N]``: each clip's mean squared error over its generated frames."""
    weight = mask[..., None].expand_as(truth)
    return ((generated - truth) ** 2 * weight).sum((1, 2)) / weight.sum((1, 2))


def best_of_mse(draws: list[torch.Tensor], truth: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over clips of the lowest per-clip error among ``draws``: a sampler is scored on its best guess."""
    return float(torch.stack([clip_mse(d, truth, mask) for d in draws]).min(0).values.mean())


def copy_nearest(known: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The reference infiller: every masked frame copies the nearest known frame (the earlier one on a tie)."""
    frames = torch.arange(mask.shape[1])
    distance = (frames[:, None] - frames[None]).abs().float()  # [to, from]
    distance = distance[None] + mask[:, None, :] * 4 * mask.shape[1]  # masked frames are never a source
    source = distance.argmin(-1)  # [N, T]; argmin takes the first, the earlier frame, on a tie
    return known.gather(1, source[..., None].expand_as(known))
