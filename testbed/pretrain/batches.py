"""Training and evaluation batches read from a prepared corpus folder (`testbed.pretrain.prepare`).

The order of training sequences is a fresh permutation per epoch, drawn from the run's seed by
name, so the batch of any step follows from the step number alone: resuming needs no data-loader
state, and every process can compute the whole global batch's shape. Process ``rank`` of
``world`` takes rows ``[rank * b, (rank + 1) * b)`` of each global batch of ``world * b`` sequences.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from testbed.pretrain.model import next_token_labels
from testbed.pretrain.packing import materialize_tokens, position_document_ids
from testbed.pretrain.prepare import CorpusManifest, PackedSequences
from testbed.pretrain.token_store import TokenStore
from testbed.seeding import SeedTree, stream

# One purpose for both families that draw it (`testbed.pretrain.vit.DigitsData` too); a run opens one.
ORDER = stream("pretrain.order/epoch.{}", "the order in which an epoch's training examples are served")


@dataclass
class Batch:
    """Token ids, per-position document ids (-1 on padding) and next-token labels, each (B, T)."""

    tokens: torch.Tensor
    document_ids: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device) -> Batch:
        return Batch(self.tokens.to(device), self.document_ids.to(device), self.labels.to(device))

    @property
    def document_tokens(self) -> int:
        """Tokens that belong to a document (not padding)."""
        return int((self.document_ids >= 0).sum())


def make_batch(sequences: list, store: TokenStore, length: int, pad_id: int) -> Batch:
    """Materialize packed sequences (lists of segments, or (n, 3) arrays of (doc_id, start, end) rows) into a batch."""
    tokens = np.stack([materialize_tokens(seq, store, length, pad_id) for seq in sequences])
    doc_ids = np.stack([position_document_ids(seq, length) for seq in sequences])
    tokens_t, doc_ids_t = torch.from_numpy(tokens), torch.from_numpy(doc_ids)
    return Batch(tokens_t, doc_ids_t, next_token_labels(tokens_t, doc_ids_t))


class TrainingData:
    """The prepared corpus, opened read-only by every training process."""

    def __init__(self, folder: Path, seed: int):
        self.folder = folder
        # The run's tree, rebuilt from its root seed: a DeepSpeed rank gets the run folder, not the context.
        self.seeds = SeedTree(seed, strict=True)
        self.manifest = CorpusManifest.load(folder)
        self.train = TokenStore(folder / "train", self.manifest.vocab_size)
        self.heldout = TokenStore(folder / "heldout", self.manifest.vocab_size)
        self.packed = PackedSequences.load(folder / "train")
        self.eval_packed = PackedSequences.load(folder / "heldout")
        self._seeds = self.seeds.child("pretrain.order")
        self._orders: dict[int, np.ndarray] = {}

    @property
    def length(self) -> int:
        return self.manifest.context_length

    def global_batch(self, step: int, batch_size: int) -> np.ndarray:
        """Indices of the ``batch_size`` training sequences of optimizer step ``step``."""
        positions = np.arange(step * batch_size, (step + 1) * batch_size)
        epochs, offsets = np.divmod(positions, len(self.packed))
        return np.asarray([self._order(int(e))[int(o)] for e, o in zip(epochs, offsets)])

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {epoch: self._seeds.numpy(f"epoch.{epoch}").permutation(len(self.packed))}
        return self._orders[epoch]

    def label_count(self, indices: np.ndarray) -> int:
        """Next-token targets in these sequences: one per segment token but the segment's last."""
        total = 0
        for index in indices.tolist():
            rows = self.packed.segments[int(self.packed.offsets[index]): int(self.packed.offsets[index + 1])]
            total += int((rows[:, 2] - rows[:, 1] - 1).clip(min=0).sum())
        return total

    def batch(self, indices: np.ndarray) -> Batch:
        """The training batch of these sequence indices."""
        return make_batch([self.packed.rows(int(i)) for i in indices], self.train, self.length, self.manifest.pad_id)

    def eval_batches(self, rank: int, world: int, batch_size: int) -> list[Batch | None]:
        """This process's share of the held-out sequences; every process gets the same number of
        entries (None where it has run out), because ZeRO-3 forward passes are collective."""
        mine = list(range(rank, len(self.eval_packed), world))
        rounds = -(-len(self.eval_packed) // (world * batch_size))
        batches: list[Batch | None] = []
        for r in range(rounds):
            chunk = mine[r * batch_size: (r + 1) * batch_size]
            batches.append(make_batch([self.eval_packed.rows(i) for i in chunk], self.heldout, self.length,
                                      self.manifest.pad_id) if chunk else None)
        return batches

    def factrecall_questions(self) -> list[dict] | None:
        """The held-out fact-recall questions, for a ``factrecall`` corpus."""
        path = self.folder / "factrecall_eval.json"
        return json.loads(path.read_text()) if path.is_file() else None
