"""BERT-style masked-token training data over a prepared corpus folder.

The packed sequences of `testbed.pretrain.batches.TrainingData` become masked-LM batches
(Devlin et al. 2019): in each sequence, round(15%) of the document positions (at least one) are
chosen; each chosen token is replaced by the mask id (80%), a random token (10%) or kept (10%),
and only chosen positions carry a label (the original token). The mask id is one past the
tokenizer's vocabulary, so the tokenizer, and with it every causal-LM scenario, is unchanged; a
``masked_lm`` model has ``vocab_size + 1`` embeddings.

The choice is drawn per sequence from a generator seeded by the run's seed, the sequence index
and the step, so masks are fresh at every step (dynamic masking), identical on every engine and
for any number of processes, and redrawn identically after a resume. Held-out sequences use
fixed masks (step -1), so every evaluation scores the same positions.

With ``pretrain.corpus.bos`` every document reads ``<|bos|> text <|endoftext|>``, BERT's
``[CLS] text [SEP]``: as in BERT, these two are never chosen (without it, nothing is excluded and
the masks are those of earlier runs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from testbed.pretrain.batches import Batch, TrainingData
from testbed.pretrain.model import IGNORE_INDEX
from testbed.seeding import stream

MASKING = stream("pretrain.masking", "which positions of a sequence are masked, with its index and the step")

MASK_RATE = 0.15
EVAL_STEP = -1


def masked_count(document_tokens: int) -> int:
    """Positions chosen in a sequence with this many document tokens."""
    return max(1, round(MASK_RATE * document_tokens)) if document_tokens else 0


def mask_tokens(batch: Batch, generators: list[torch.Generator], mask_id: int, vocab_size: int,
                special_ids: tuple[int, ...] = ()) -> Batch:
    """Masked inputs and labels for each row of ``batch`` (its next-token labels are dropped);
    tokens in ``special_ids`` ([CLS], [SEP]) are never chosen."""
    tokens, labels = batch.tokens.clone(), torch.full_like(batch.tokens, IGNORE_INDEX)
    special = torch.isin(batch.tokens, torch.tensor(special_ids, dtype=batch.tokens.dtype))
    for row, generator in enumerate(generators):
        positions = torch.nonzero((batch.document_ids[row] >= 0) & ~special[row]).flatten()
        chosen = positions[torch.randperm(len(positions), generator=generator)[: masked_count(len(positions))]]
        labels[row, chosen] = batch.tokens[row, chosen]
        action = torch.rand(len(chosen), generator=generator)
        random_ids = torch.randint(0, vocab_size, (len(chosen),), generator=generator)
        replaced = torch.where(action < 0.8, mask_id, torch.where(action < 0.9, random_ids, tokens[row, chosen]))
        tokens[row, chosen] = replaced
    return Batch(tokens, batch.document_ids, labels)


class MaskedLMData(TrainingData):
    """`TrainingData` whose batches are masked-LM batches (same sequences, same order)."""

    def __init__(self, folder: Path, seed: int):
        super().__init__(folder, seed)
        self.mask_id = self.manifest.vocab_size
        self._base_seed = self.seeds.integer(MASKING.path)
        self._step = 0
        bos = self.manifest.bos_id
        self.special_ids = () if bos is None else (bos, self.manifest.eos_id)

    @property
    def model_vocab_size(self) -> int:
        return self.manifest.vocab_size + 1

    def global_batch(self, step: int, batch_size: int) -> np.ndarray:
        # The runner asks for a step's indices right before its batch: remember the step so that
        # the masks of that batch are drawn for it.
        self._step = step
        return super().global_batch(step, batch_size)

    def _generators(self, indices, step: int) -> list[torch.Generator]:
        return [torch.Generator().manual_seed(hash((self._base_seed, int(i), step)) & (2**63 - 1)) for i in indices]

    def label_count(self, indices: np.ndarray) -> int:
        total = 0
        lengths = self.train.lengths
        for index in indices.tolist():
            rows = self.packed.segments[int(self.packed.offsets[index]): int(self.packed.offsets[index + 1])]
            tokens = int((rows[:, 2] - rows[:, 1]).sum())
            if self.special_ids:  # each whole document start holds [CLS], each document end [SEP]
                tokens -= int((rows[:, 1] == 0).sum() + (rows[:, 2] == lengths[rows[:, 0]]).sum())
            total += masked_count(tokens)
        return total

    def batch(self, indices: np.ndarray) -> Batch:
        return mask_tokens(super().batch(indices), self._generators(indices, self._step), self.mask_id,
                           self.manifest.vocab_size, self.special_ids)

    def eval_batches(self, rank: int, world: int, batch_size: int) -> list[Batch | None]:
        mine = list(range(rank, len(self.eval_packed), world))
        batches = super().eval_batches(rank, world, batch_size)
        masked = []
        for r, batch in enumerate(batches):
            chunk = mine[r * batch_size: (r + 1) * batch_size]
            masked.append(None if batch is None else mask_tokens(batch, self._generators(chunk, EVAL_STEP),
                                                                 self.mask_id, self.manifest.vocab_size,
                                                                 self.special_ids))
        return masked
