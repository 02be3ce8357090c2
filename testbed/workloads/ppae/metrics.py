"""The PPAE miniature's metrics: mask localisation, preservation outside the event, edit success inside it.

- IoU of the attention mask with the edited event's true frames;
- LSD outside the event: log-spectral distance (dB) between the edited and the source clip on the
  frames the event does not occupy (what "precise" editing must leave unchanged);
- edit success: probability, from an event classifier trained on real segments, that the edited
  segment (the true event's frames) holds the target event.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from testbed.workloads.ppae.data import BANDS, EVENTS, EventSet
from testbed.workloads.training import optimizer_step


def iou(mask: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Per-clip intersection over union of two 0/1 frame masks ``[B, frames]``."""
    inter = (mask * truth).sum(1)
    union = ((mask + truth) > 0).float().sum(1)
    return inter / union.clamp_min(1)


def lsd_db(edited: torch.Tensor, source: torch.Tensor, frames: torch.Tensor, log_scale: float) -> torch.Tensor:
    """Per-clip LSD in dB over the frames where ``frames`` is 1; ``log_scale`` turns features into ln power."""
    db = 10 / math.log(10) * log_scale * (edited - source)
    per_frame = db.pow(2).mean(-1).sqrt()
    return (per_frame * frames).sum(1) / frames.sum(1).clamp_min(1)


def segment_features(x: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """Mean and max of the spectral columns over a segment's frames: ``[B, 2 * bands]``."""
    weight = frames[..., None]
    mean = (x * weight).sum(1) / weight.sum(1).clamp_min(1)
    peak = torch.where(weight > 0, x, torch.full_like(x, -1e4)).amax(1)
    return torch.cat([mean, peak], -1)


class EventClassifier(nn.Module):
    """Segment -> background or one of the four event classes (token ids 0..4)."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * BANDS, hidden), nn.ReLU(), nn.Linear(hidden, len(EVENTS) + 1))

    def forward(self, x: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return self.net(segment_features(x, frames))


def real_segments(clips: EventSet) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every event of every clip as (clip features, frame mask, token id), plus each clip's background frames."""
    xs, masks, labels = [], [], []
    for kind in range(len(EVENTS)):
        present = (clips.frames == kind).any(1)
        xs.append(clips.features[present])
        masks.append((clips.frames[present] == kind).float())
        labels.append(torch.full((int(present.sum()),), kind + 1))
    quiet = (clips.frames < 0).float()
    xs.append(clips.features)
    masks.append(quiet)
    labels.append(torch.zeros(len(quiet), dtype=torch.long))
    return torch.cat(xs), torch.cat(masks), torch.cat(labels)


def train_classifier(clips: EventSet, seed: int, steps: int = 300) -> EventClassifier:
    """Fit the event classifier on real segments of the training clips."""
    x, frames, labels = real_segments(clips)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = EventClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        index = torch.randint(0, len(labels), (128,), generator=generator)
        loss = nn.functional.cross_entropy(model(x[index], frames[index]), labels[index])
        optimizer_step(optimizer, loss)
    model.eval()
    return model


@torch.no_grad()
def edit_success(classifier: EventClassifier, edited: torch.Tensor, frames: torch.Tensor,
                 target_token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per clip: the classifier's probability of the target event on the segment, and whether it is the argmax."""
    probs = torch.softmax(classifier(edited, frames), -1)
    chosen = probs.gather(1, target_token[:, None])[:, 0]
    return chosen, (probs.argmax(-1) == target_token).float()
