"""Synthetic music for the MusicFlow miniature: melodies rendered with numpy, features by STFT with scipy.

A clip is 1.024 s at 8 kHz: a random walk on the scale degrees of a random key, each note a sine
with two harmonics under an ADSR envelope. Three attributes make its "text" description: mode
(major or harmonic minor), tempo (slow: 6-frame notes, fast: 3-frame notes) and register (octave 4
or 5). The key and the melody are not described: they are what the generator must invent.

Features (the paper's two representations, in miniature):
- acoustic ``a``: log power in 36 semitone bands (C4..B6) per 32 ms frame, standardised; this
  plays the codec latent (stage 2's target);
- semantic ``s``: the 12-dim chroma of those bands (octave and timbre folded away), standardised;
  it plays the HuBERT units (stage 1's target, stage 2's condition). `chroma_of` computes it from
  any acoustic features, generated ones included, so stage 2's adherence to ``s`` can be measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.signal import stft

from testbed.workloads.musicflow.config import FRAMES

SAMPLE_RATE = 8000
CLIP_SAMPLES = 8192
N_FFT, HOP = 1024, 256
LOW_MIDI, BANDS = 60, 36  # C4 .. B6
SCALES = {"major": [0, 2, 4, 5, 7, 9, 11], "minor": [0, 2, 3, 5, 7, 8, 11]}  # minor: harmonic minor
NOTE_FRAMES = {"slow": 6, "fast": 3}
POWER_FLOOR = 1.0  # about 45 dB below a note's peak: the background noise maps to a flat floor
ATTRIBUTES = (("major", "minor"), ("slow", "fast"), ("low", "high"))
NUM_CLASSES = 8  # every combination of the three binary attributes


def describe(label: int) -> str:
    """The text description of attribute class ``label`` (bit 0 mode, bit 1 tempo, bit 2 register)."""
    mode, tempo, register = (ATTRIBUTES[i][(label >> i) & 1] for i in range(3))
    return f"a {tempo} melody in {mode}, {register} register"


def attribute_bits(labels: torch.Tensor) -> torch.Tensor:
    """``[N]`` class ids to ``[N, 3]`` binary attributes (mode, tempo, register)."""
    return torch.stack([(labels >> i) & 1 for i in range(3)], dim=1)


def note_track(label: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample frequency, envelope and note amplitude of one clip of attribute class ``label``."""
    mode, tempo, register = (ATTRIBUTES[i][(label >> i) & 1] for i in range(3))
    scale = SCALES[mode]
    base = LOW_MIDI + (12 if register == "high" else 0) + int(rng.integers(0, 12))
    note_len = NOTE_FRAMES[tempo] * HOP
    count = CLIP_SAMPLES // note_len + 2
    steps = rng.choice([-1, 1], count)  # stepwise motion: the middle of a clip depends on both sides
    degrees = [int(rng.integers(0, 8))]
    for step in steps[1:]:
        degrees.append(int(np.clip(degrees[-1] + step, 0, 7)))  # the random walk on scale degrees
    midi = np.array([base + 12 * (g // 7) + scale[g % 7] for g in degrees])
    offset = int(rng.integers(0, note_len))  # the first note may have begun before the clip
    window = slice(offset, offset + CLIP_SAMPLES)
    freq = np.repeat(440.0 * 2 ** ((midi - 69) / 12), note_len)[window]
    envelope = np.tile(_adsr(note_len), count)[window]
    amplitude = np.repeat(rng.uniform(0.6, 1.0, count), note_len)[window]
    return freq, envelope, amplitude


def render(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Waveforms ``[N, samples]``: each note a sine with harmonics 2 and 3 (weights 1, 1/2, 1/4) under ADSR."""
    tracks = [note_track(int(label), rng) for label in labels]
    freq, envelope, amplitude = (np.stack(parts) for parts in zip(*tracks))
    phase = 2 * np.pi * np.cumsum(freq, axis=1) / SAMPLE_RATE + rng.uniform(0, 2 * np.pi, (len(labels), 1))
    tone = np.sin(phase) + 0.5 * np.sin(2 * phase) + 0.25 * np.sin(3 * phase)
    noise = 0.01 * rng.standard_normal(freq.shape)
    return (amplitude * envelope * tone + noise).astype(np.float32)


def _adsr(length: int) -> np.ndarray:
    """Attack 10 ms, decay to 0.7 over 30 ms, sustain, release over the last 20 %."""
    attack, decay, release = int(0.01 * SAMPLE_RATE), int(0.03 * SAMPLE_RATE), length // 5
    env = np.full(length, 0.7)
    env[:attack] = np.linspace(0, 1, attack)
    env[attack : attack + decay] = np.linspace(1, 0.7, decay)
    env[length - release :] = np.linspace(0.7, 0.05, release)
    return env


def _band_matrix() -> np.ndarray:
    """``[bins, 36]``: each STFT bin summed into the semitone band nearest its frequency."""
    freqs = np.fft.rfftfreq(N_FFT, 1 / SAMPLE_RATE)
    with np.errstate(divide="ignore"):
        midi = np.round(69 + 12 * np.log2(freqs / 440.0))
    band = midi - LOW_MIDI
    matrix = np.zeros((len(freqs), BANDS))
    inside = (band >= 0) & (band < BANDS)
    matrix[np.flatnonzero(inside), band[inside].astype(int)] = 1.0
    return matrix


def band_power(waves: np.ndarray) -> np.ndarray:
    """``[N, samples]`` waveforms to ``[N, 32 frames, 36 bands]`` semitone-band power (scipy STFT)."""
    _, _, spec = stft(waves, fs=SAMPLE_RATE, nperseg=N_FFT, noverlap=N_FFT - HOP)
    power = np.abs(spec[..., :FRAMES]) ** 2  # [N, bins, frames]
    return np.swapaxes(power, 1, 2) @ _band_matrix().astype(power.dtype)


@dataclass
class Normaliser:
    """The feature standardisation, fitted on the training clips (the "codec" and "HuBERT" scalings)."""

    a_mean: float
    a_std: float
    s_mean: float
    s_std: float

    def acoustic(self, power: torch.Tensor) -> torch.Tensor:
        return (torch.log(power + POWER_FLOOR) - self.a_mean) / self.a_std

    def power(self, acoustic: torch.Tensor) -> torch.Tensor:
        """Inverse of `acoustic`: band power of standardised acoustic features."""
        return (torch.exp(acoustic * self.a_std + self.a_mean) - POWER_FLOOR).clamp_min(0.0)

    def semantic(self, power: torch.Tensor) -> torch.Tensor:
        return (_chroma(power) - self.s_mean) / self.s_std


def _chroma(power: torch.Tensor) -> torch.Tensor:
    """Band power ``[..., 36]`` folded onto the 12 pitch classes, as per-frame shares."""
    folded = power.reshape(*power.shape[:-1], BANDS // 12, 12).sum(-2)
    return folded / folded.sum(-1, keepdim=True).clamp_min(1e-9)


def chroma_of(acoustic: torch.Tensor, norm: Normaliser) -> torch.Tensor:
    """Per-frame pitch-class shares of standardised acoustic features (the "semantic encoder")."""
    return _chroma(norm.power(acoustic))


@dataclass
class MusicSet:
    """Clips as tensors: attribute class ids ``[N]``, acoustic ``[N, 32, 36]``, semantic ``[N, 32, 12]``."""

    labels: torch.Tensor
    acoustic: torch.Tensor
    semantic: torch.Tensor


def make_clips(count: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` clips with uniformly drawn attribute classes: (labels, band power)."""
    labels = rng.integers(0, NUM_CLASSES, count)
    waves = render(labels, rng)
    return torch.from_numpy(labels), torch.from_numpy(band_power(waves)).float()


def fit_normaliser(power: torch.Tensor) -> Normaliser:
    """Global mean and std of log band power and of chroma on the training clips."""
    log_power, chroma = torch.log(power + POWER_FLOOR), _chroma(power)
    return Normaliser(float(log_power.mean()), float(log_power.std()), float(chroma.mean()), float(chroma.std()))


def to_set(labels: torch.Tensor, power: torch.Tensor, norm: Normaliser) -> MusicSet:
    """Standardised features of clips."""
    return MusicSet(labels, norm.acoustic(power), norm.semantic(power))
