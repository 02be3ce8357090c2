"""A byte-level BPE tokenizer trained offline with Hugging Face ``tokenizers`` and saved as JSON.

Byte-level BPE (GPT-2's scheme) starts from the 256 byte values, so every text encodes without
unknown tokens; merges are learned from the run's training documents. Two special tokens are
added: ``<|endoftext|>`` ends every document, ``<|pad|>`` fills the unused tail of a packed
sequence (always loss-masked). With ``bos=True`` a third, ``<|bos|>``, starts every document (the
corpus option ``pretrain.corpus.bos``); without it the ids are those of earlier runs. The trained
tokenizer is saved in the run folder, so a resumed run and the evaluation use exactly the same ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

END_OF_TEXT = "<|endoftext|>"
PAD = "<|pad|>"
BOS = "<|bos|>"
SPECIAL_TOKENS = (END_OF_TEXT, PAD)


def train_tokenizer(texts: Iterable[str], vocab_size: int, bos: bool = False) -> Tokenizer:
    """Learn a byte-level BPE vocabulary of at most ``vocab_size`` ids from ``texts`` (with a
    ``<|bos|>`` special token when ``bos``)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS) + ([BOS] if bos else []),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    """Write the tokenizer as one JSON file."""
    tokenizer.save(str(path))


def load_tokenizer(path: Path) -> Tokenizer:
    """Read a tokenizer saved by `save_tokenizer`."""
    return Tokenizer.from_file(str(path))


def special_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a special token (present in every tokenizer this module trains)."""
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"tokenizer has no {token!r} token")
    return token_id
