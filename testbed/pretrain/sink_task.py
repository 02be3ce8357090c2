"""The Bigram-Backcopy task (Guo et al. 2024, "Active-Dormant Attention Heads"): a fast attention sink.

Every sequence starts with a fixed BOS token and continues with symbols of a small alphabet.
The next symbol follows a bigram (Markov) chain, except after one of a few *trigger* symbols,
where it copies the symbol before the trigger::

    x_0 = BOS,  x_1 ~ uniform(non-triggers),
    x_{t+1} = x_{t-1}                  if x_t is a trigger,
    x_{t+1} ~ P(. | x_t)               otherwise.

Predicting after a non-trigger needs only the current token, so an attention head that copies on
triggers has nothing to do elsewhere: with softmax it parks its weight on BOS (the attention sink,
an "active-dormant" head), which is where the massive activations of Bondarenko et al. (2023)
and OutEffHop come from. Softmax_1 can put the weight nowhere instead.

The transition rows are drawn from a symmetric Dirichlet (``concentration``: smaller is more
predictable), the triggers uniformly; both from the run's seed. Token ids: symbols
``0 .. symbols - 1``, then BOS, end-of-text and padding. A document is ``length`` tokens, BOS
included, with no end-of-text token (it fills one sequence of the context length exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.pretrain.config import BigramBackcopyConfig


@dataclass(frozen=True)
class BigramBackcopy:
    """One draw of the task: transition matrix (symbols x symbols) and trigger symbols."""

    transitions: np.ndarray
    triggers: np.ndarray

    @property
    def symbols(self) -> int:
        return len(self.transitions)

    @property
    def bos_id(self) -> int:
        return self.symbols

    @property
    def eos_id(self) -> int:
        return self.symbols + 1

    @property
    def pad_id(self) -> int:
        return self.symbols + 2

    @property
    def vocab_size(self) -> int:
        return self.symbols + 3

    @classmethod
    def draw(cls, config: BigramBackcopyConfig, rng: np.random.Generator) -> BigramBackcopy:
        transitions = rng.dirichlet(np.full(config.symbols, config.concentration), size=config.symbols)
        return cls(transitions, np.sort(rng.choice(config.symbols, size=config.triggers, replace=False)))

    def documents(self, count: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` documents of ``length`` tokens (BOS first), as an int64 array (count, length)."""
        is_trigger = np.zeros(self.symbols, dtype=bool)
        is_trigger[self.triggers] = True
        cumulative = np.cumsum(self.transitions, axis=1)
        cumulative[:, -1] = 1.0
        out = np.empty((count, length), dtype=np.int64)
        out[:, 0] = self.bos_id
        if length > 1:
            plain = np.flatnonzero(~is_trigger)
            out[:, 1] = plain[rng.integers(len(plain), size=count)]
        for t in range(2, length):
            current, before = out[:, t - 1], out[:, t - 2]
            sampled = (rng.random(count)[:, None] > cumulative[current]).sum(axis=1)
            out[:, t] = np.where(is_trigger[current], before, np.minimum(sampled, self.symbols - 1))
        return out


def task_documents(config: BigramBackcopyConfig, length: int, seed_tree) -> tuple[BigramBackcopy, np.ndarray]:
    """The run's task and its ``config.documents`` documents (train and held-out together)."""
    task = BigramBackcopy.draw(config, seed_tree.numpy("corpus.bigram_backcopy.task"))
    return task, task.documents(config.documents, length, seed_tree.numpy("corpus.bigram_backcopy.documents"))
