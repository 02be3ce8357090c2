"""A small ViT-style classifier of the bundled 8x8 digits, and its data for the pretraining runner.

The image is its own "token sequence": scikit-learn's digits are 8x8 integer intensities 0..16,
so image i is the 64 ids ``tokens[i]`` and a batch has the same shape as a language-model
batch. That lets `testbed.pretrain.ds_worker` train the ViT unchanged (one DeepSpeed loop,
global batches drawn by step, the summed-loss normalisation): `DigitsData` answers the same
calls as `testbed.pretrain.batches.TrainingData`, and `DigitsViT` returns logits (B, 1, classes)
with labels (B, 1), so the language models' `summed_loss` applies.

The model cuts the image into ``patch_size`` x ``patch_size`` patches (16 tokens of 4 pixels at
the default 2), embeds them linearly, runs the same pre-norm blocks as the language models
(bidirectional attention of the configured variant, rotary positions over the patch index), and
classifies a `HopfieldPooling` of the patch tokens (the pooling uses Softmax_1 when the attention
variant does).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from testbed.data.datasets import load_dataset, train_test_split
from testbed.pretrain.batches import Batch
from testbed.pretrain.config import ModelConfig
from testbed.pretrain.hopfield import HopfieldPooling
from testbed.pretrain.model import ATTENTION_KINDS, Block, init_transformer_weights, rotary_tables
from testbed.seeding import SeedTree

IMAGE_SIDE = 8
INTENSITIES = 17  # digits pixels are integers 0..16


class DigitsViT(nn.Module):
    """Pixel ids (B, 64) -> class logits (B, 1, classes)."""

    def __init__(self, config: ModelConfig, num_classes: int):
        super().__init__()
        if IMAGE_SIDE % config.patch_size:
            raise ValueError(f"patch_size {config.patch_size} does not divide the image side {IMAGE_SIDE}")
        self.patch = config.patch_size
        self.head_dim = config.d_model // config.heads
        self.patch_embedding = nn.Linear(self.patch * self.patch, config.d_model)
        self.blocks = nn.ModuleList(Block(config.d_model, config.heads, config.mlp_ratio, config, causal=False)
                                    for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        init_transformer_weights(self, config.layers)
        # The head keeps PyTorch's default (fan-in scaled) initialisation: four chained projections
        # at GPT's std 0.02 would start with vanishing logits and gradients.
        normalizer = ATTENTION_KINDS[config.attention][0]
        self.pool = HopfieldPooling(config.d_model, config.heads,
                                    normalizer="softmax_1" if normalizer.endswith("softmax_1") else "softmax")
        self.classifier = nn.Linear(config.d_model, num_classes)

    def patches(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, 64) intensities -> (B, patches, patch * patch) pixels in [0, 1]."""
        images = tokens.float().view(-1, IMAGE_SIDE, IMAGE_SIDE) / (INTENSITIES - 1)
        side = IMAGE_SIDE // self.patch
        grid = images.view(-1, side, self.patch, side, self.patch).transpose(2, 3)
        return grid.reshape(-1, side * side, self.patch * self.patch)

    def forward(self, tokens: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``document_ids`` is accepted for the runner's call signature; every patch sees every patch."""
        x = self.patch_embedding(self.patches(tokens))
        rotary = rotary_tables(x.shape[1], self.head_dim, tokens.device)
        for block in self.blocks:
            x = block(x, rotary, None)
        return self.classifier(self.pool(self.final_norm(x)))


class DigitsData:
    """The digits split into train and test by the run's seed, served like `TrainingData`."""

    def __init__(self, test_fraction: float, seed: int, patch_size: int):
        train, test = train_test_split(load_dataset("digits"), test_fraction, seed)
        self.train_tokens, self.train_labels = _as_tokens(train.x), torch.from_numpy(train.y)
        self.test_tokens, self.test_labels = _as_tokens(test.x), torch.from_numpy(test.y)
        self.num_classes = 10
        self.patches = (IMAGE_SIDE // patch_size) ** 2
        self.manifest = SimpleNamespace(vocab_size=INTENSITIES, pad_id=0)
        # The run's tree, rebuilt from its root seed: a DeepSpeed rank gets the run folder, not the context.
        self.seeds = SeedTree(seed, strict=True)
        self._seeds = self.seeds.child("pretrain.order")  # `testbed.pretrain.batches.ORDER`, as `TrainingData`
        self._orders: dict[int, np.ndarray] = {}

    @property
    def length(self) -> int:
        return IMAGE_SIDE * IMAGE_SIDE

    def global_batch(self, step: int, batch_size: int) -> np.ndarray:
        """Indices of the training images of optimizer step ``step`` (a fresh permutation per epoch)."""
        positions = np.arange(step * batch_size, (step + 1) * batch_size)
        epochs, offsets = np.divmod(positions, len(self.train_labels))
        return np.asarray([self._order(int(e))[int(o)] for e, o in zip(epochs, offsets)])

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {epoch: self._seeds.numpy(f"epoch.{epoch}").permutation(len(self.train_labels))}
        return self._orders[epoch]

    def label_count(self, indices: np.ndarray) -> int:
        return len(indices)

    def batch(self, indices: np.ndarray) -> Batch:
        index = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        return self._batch(self.train_tokens[index], self.train_labels[index])

    def _batch(self, tokens: torch.Tensor, labels: torch.Tensor) -> Batch:
        # Every patch token is "document" 0: there is no padding, and outlier metrics count all patches.
        patch_ids = torch.zeros(len(labels), self.patches, dtype=torch.long)
        return Batch(tokens, patch_ids, labels[:, None])

    def eval_batches(self, rank: int, world: int, batch_size: int) -> list[Batch | None]:
        """This process's share of the test images, the same number of entries on every process."""
        mine = torch.arange(rank, len(self.test_labels), world)
        rounds = -(-len(self.test_labels) // (world * batch_size))
        chunks = [mine[r * batch_size: (r + 1) * batch_size] for r in range(rounds)]
        return [self._batch(self.test_tokens[c], self.test_labels[c]) if len(c) else None for c in chunks]

    def placeholder(self) -> Batch:
        return self._batch(torch.zeros(1, self.length, dtype=torch.long), torch.zeros(1, dtype=torch.long))

    def factrecall_questions(self) -> None:
        return None


def _as_tokens(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.rint(images.reshape(len(images), -1) * (INTENSITIES - 1)).astype(np.int64))
