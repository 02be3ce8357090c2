"""Synthetic labelled sound events for the PPAE miniature, rendered with numpy, features by STFT with scipy.

A clip is 1.024 s at 8 kHz with one or two non-overlapping events from four classes (a 440 Hz
tone, an up-chirp 300 -> 1500 Hz, a 2-3 kHz noise burst, a 110 Hz hum with harmonics) on light
background noise. Features: log power of a 128-point STFT (hop 64), pooled to 32 frames x 32
frequency bands (the miniature's mel-spectrogram "latent"), standardised. The caption is the token
sequence [background, event, event or pad]; the event order is random, so a token's position says
nothing about when its event sounds. Each clip keeps its events' frame spans (the ground truth of
the attention-mask test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from scipy.signal import stft

SAMPLE_RATE, CLIP_SAMPLES = 8000, 8192
N_FFT, HOP, POOL_TIME, POOL_FREQ = 128, 64, 4, 2
FRAMES, BANDS = 32, 32
FRAME_SAMPLES = HOP * POOL_TIME
EVENTS = ("tone", "chirp", "noise", "hum")
BACKGROUND, PAD = 0, len(EVENTS) + 1  # token ids; event class k has token k + 1
VOCAB = len(EVENTS) + 2
CAPTION = 3
POWER_FLOOR = 1e-3  # background noise sits near this level, so quiet frames map to a flat floor


def render_event(kind: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``length`` samples of event class ``kind`` with 5 ms fades."""
    time = np.arange(length) / SAMPLE_RATE
    if EVENTS[kind] == "tone":
        wave = np.sin(2 * np.pi * 440 * time)
    elif EVENTS[kind] == "chirp":
        freq = 300 + (1500 - 300) * time / time[-1]
        wave = np.sin(2 * np.pi * np.cumsum(freq) / SAMPLE_RATE)
    elif EVENTS[kind] == "noise":
        spectrum = np.fft.rfft(rng.standard_normal(length))
        freqs = np.fft.rfftfreq(length, 1 / SAMPLE_RATE)
        spectrum[(freqs < 2000) | (freqs > 3000)] = 0
        wave = np.fft.irfft(spectrum, length)
        wave /= np.abs(wave).max()
    else:
        wave = cast(np.ndarray, sum(np.sin(2 * np.pi * 110 * k * time) / k for k in range(1, 6))) / 1.5  # of arrays
    fade = np.minimum(1, np.minimum(np.arange(length), np.arange(length)[::-1]) / (0.005 * SAMPLE_RATE))
    return rng.uniform(0.5, 1.0) * fade * wave


def make_clip(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One clip: waveform, caption tokens ``[3]``, and per-frame event class ``[32]`` (-1 = none)."""
    count = int(rng.integers(1, 3))
    kinds = rng.choice(len(EVENTS), count, replace=False)
    lengths = rng.integers(6, 13, count)
    free = FRAMES - int(lengths.sum()) - 2 * (count - 1)  # frames not taken by events or the 2-frame gap
    cuts = np.sort(rng.integers(0, free + 1, count))
    wave = 0.003 * rng.standard_normal(CLIP_SAMPLES)
    frames = np.full(FRAMES, -1)
    start = 0
    for i, (kind, length) in enumerate(zip(kinds, lengths)):
        begin = start + int(cuts[i]) - (int(cuts[i - 1]) if i else 0)
        frames[begin : begin + length] = kind
        samples = slice(begin * FRAME_SAMPLES, (begin + length) * FRAME_SAMPLES)
        wave[samples] += render_event(kind, length * FRAME_SAMPLES, rng)
        start = begin + length + 2
    caption = [BACKGROUND, *(int(k) + 1 for k in rng.permutation(kinds)), PAD][:CAPTION]
    return wave, np.array(caption), frames


def log_power(waves: np.ndarray) -> np.ndarray:
    """``[N, samples]`` to ``[N, 32 frames, 32 bands]`` pooled log power (scipy STFT)."""
    _, _, spec = stft(waves, fs=SAMPLE_RATE, nperseg=N_FFT, noverlap=N_FFT - HOP)
    power = np.abs(spec[:, 1 : 1 + BANDS * POOL_FREQ, : FRAMES * POOL_TIME]) ** 2  # drop DC; [N, bins, stft frames]
    pooled = power.reshape(len(waves), BANDS, POOL_FREQ, FRAMES, POOL_TIME).mean((2, 4))
    return np.log(pooled + POWER_FLOOR).transpose(0, 2, 1)


@dataclass
class EventSet:
    """Clips as tensors: features ``[N, 32, 32]`` (standardised), captions ``[N, 3]``, frame labels ``[N, 32]``."""

    features: torch.Tensor
    captions: torch.Tensor
    frames: torch.Tensor


def make_events(count: int, rng: np.random.Generator) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """``count`` clips: (log power, captions, frame labels)."""
    clips = [make_clip(rng) for _ in range(count)]
    waves, captions, frames = (np.stack(parts) for parts in zip(*clips))
    return log_power(waves.astype(np.float32)), torch.from_numpy(captions), torch.from_numpy(frames)


def standardise(log_pow: np.ndarray, mean: float, std: float) -> torch.Tensor:
    """Log power to the standardised features the diffusion model sees."""
    return torch.from_numpy((log_pow - mean) / std).float()
