"""The ``pretrain:`` block of a scenario: corpus, tokenizer, packing, model and the DeepSpeed loop.

Example (every key optional; the values shown are the defaults)::

    pretrain:
      corpus: {source: stdlib_code, path: null, max_documents: 2000, heldout_fraction: 0.05,
               bos: false}                       # bos: a <|bos|> token starts every document
      tokenizer: {vocab_size: 2048, train_documents: 2000}
      context_length: 256
      packing: {method: best_fit, buffer_size: null}   # best_fit | first_fit | concat | pad
      attention_mask: document                          # document (block-diagonal) | causal
      model: {layers: 2, d_model: 128, heads: 4, mlp_ratio: 4,
              family: causal_lm, attention: softmax,   # causal_lm | masked_lm | vit; see ModelConfig
              norm: pre}                               # pre | post (BERT's post-LN blocks)
      steps: 100
      batch_size: 16          # sequences per optimizer step, summed over all processes
      lr: 0.003
      warmup_steps: 10
      weight_decay: 0.1
      grad_clip: 1.0
      zero_stage: 0           # DeepSpeed ZeRO stage 0-3
      precision: auto         # auto: bf16 on GPUs, fp32 on CPUs
      eval_every: 20
      eval_documents: 64
      checkpoint_every: 50
      threads_per_process: 1
      ray_workers: 2          # training processes under engine `ray`
      outliers: null          # {quantize: true, ...}: kurtosis / max-norm / sink tracking and W8A8 (OutlierConfig)

This module may import only `testbed.config`, `testbed.errors` and pydantic (it is imported by the
scenario schema).

A step's batch must fit the packed training corpus (`check_batch_size`): where the number of packed
sequences follows from the config (the attention-sink task packs one document a sequence)
`testbed validate` checks it; otherwise the run checks it once the corpus is prepared, before
anything trains.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from testbed.config import StrictModel
from testbed.errors import ScenarioError

CORPUS_SOURCES = ("stdlib_code", "stdlib_docs", "folder", "factrecall", "bigram_backcopy")


class FactRecallCorpusConfig(StrictModel):
    """The synthetic closed-domain corpus (`testbed.pretrain.factrecall`): facts early, recalls late."""

    documents: int = Field(6000, gt=0, description="documents to generate (train and held-out together)")
    people_per_document: int = Field(1, ge=1, le=4, description="people whose facts (3 each) a document states")
    recalls_per_document: int = Field(2, ge=1, le=12, description="facts recalled at the end of a document")
    min_filler: int = Field(2, ge=0, description="fewest filler sentences between the facts and the recalls")
    max_filler: int = Field(14, ge=0, description="most filler sentences between the facts and the recalls")
    eval_documents: int = Field(300, gt=0, description="held-out documents whose recalls are scored at the end")

    @model_validator(mode="after")
    def _filler_range(self) -> FactRecallCorpusConfig:
        if self.max_filler < self.min_filler:
            raise ValueError("max_filler must be >= min_filler")
        return self


class BigramBackcopyConfig(StrictModel):
    """The synthetic attention-sink task (`testbed.pretrain.sink_task`): BOS, then a bigram chain
    whose trigger symbols make the next token copy the one before the trigger. A document fills
    one sequence of ``pretrain.context_length`` tokens; no tokenizer is trained."""

    symbols: int = Field(64, ge=4, le=65_000, description="alphabet size (BOS, end-of-text and padding come on top)")
    triggers: int = Field(3, ge=1, description="trigger symbols: after one, the next token copies the one before it")
    concentration: float = Field(0.1, gt=0, description="Dirichlet concentration of each bigram row (small: peaked)")
    documents: int = Field(20_000, ge=2, description="documents to generate (train and held-out together)")

    @model_validator(mode="after")
    def _some_plain_symbols(self) -> BigramBackcopyConfig:
        if self.triggers >= self.symbols:
            raise ValueError("triggers must be fewer than symbols")
        return self


class CorpusConfig(StrictModel):
    """Where the documents come from, and how many are held out for perplexity.

    ``bos: true`` starts every document with a ``<|bos|>`` token (a delimiter that attention heads
    can use as a sink, as OPT's ``</s>`` and BERT's [CLS]); the ``bigram_backcopy`` task always has one.
    """

    source: Literal["stdlib_code", "stdlib_docs", "folder", "factrecall", "bigram_backcopy"] = "stdlib_code"
    path: str | None = Field(None,
                             description="folder of .txt files (one document each) and .jsonl files (one per line)")
    text_field: str = Field("text", min_length=1, description="the field of a .jsonl line that holds the text")
    max_documents: int | None = Field(2000, gt=0, description="read at most this many documents (null: all)")
    heldout_fraction: float = Field(0.05, gt=0, lt=1, description="share of documents kept out of training")
    factrecall: FactRecallCorpusConfig = Field(default_factory=FactRecallCorpusConfig)
    bigram_backcopy: BigramBackcopyConfig = Field(default_factory=BigramBackcopyConfig)
    bos: bool = Field(False, description="start every document with a <|bos|> token")


class TokenizerConfig(StrictModel):
    """The byte-level BPE tokenizer trained on the training documents (saved in the run folder)."""

    vocab_size: int = Field(2048, ge=300, le=65_536)
    train_documents: int = Field(2000, gt=0, description="training documents the BPE merges are learned from")


class PackingConfig(StrictModel):
    """How documents become training sequences (`testbed.pretrain.packing`)."""

    method: Literal["best_fit", "first_fit", "concat", "pad"] = "best_fit"
    buffer_size: int | None = Field(None, gt=0, description="pack each run of this many documents on its own")


ATTENTION_VARIANTS = ("softmax", "softmax_1", "clipped_softmax", "gated", "clipped_softmax_1", "gated_softmax_1")


class ModelConfig(StrictModel):
    """The transformer: pre-norm (or post-norm) blocks, rotary positions; its family and attention variant.

    family: causal_lm (GPT/OPT-style decoder, tied embeddings), masked_lm (BERT-style encoder,
    bidirectional attention, masked-token objective) or vit (ViT-style classifier of the
    ``data.dataset: digits`` images, patches as tokens). attention: vanilla softmax, Softmax_1
    (OutEffHop), clipped softmax or gated attention (Bondarenko et al. 2023), or OutEffHop's
    clipped/gated combinations with Softmax_1 (`testbed.pretrain.attention`). norm: ``pre``
    (x + attention(LN(x)), a final LayerNorm before the output) or ``post``, BERT's placement
    (LN(x + attention(x)), LN(x + FFN(x)), a LayerNorm on the embeddings and none at the end);
    the language models only.
    """

    layers: int = Field(2, gt=0)
    d_model: int = Field(128, gt=0)
    heads: int = Field(4, gt=0)
    mlp_ratio: int = Field(4, gt=0)
    family: Literal["causal_lm", "masked_lm", "vit"] = "causal_lm"
    attention: Literal[ATTENTION_VARIANTS] = "softmax"  # type: ignore[valid-type]
    clip_gamma: float = Field(-0.025, le=0, description="clipped softmax: lower stretch gamma <= 0")
    clip_zeta: float = Field(1.0, ge=1, description="clipped softmax: upper stretch zeta >= 1")
    gate_init: float = Field(0.25, gt=0, lt=1, description="gated attention: initial gate opening pi_init")
    patch_size: int = Field(2, gt=0, description="vit: side of the square image patches")
    norm: Literal["pre", "post"] = Field(
        "pre", description="LayerNorm placement: pre (GPT/OPT, ViT) or post (BERT: after each residual sum)")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            raise ValueError("d_model must be a multiple of heads, with an even head width (rotary embeddings)")
        if self.norm == "post" and self.family == "vit":
            raise ValueError("norm 'post' is for the language models (causal_lm, masked_lm); "
                             "the vit family is pre-norm")
        return self


class OutlierConfig(StrictModel):
    """Outlier metrics during training and post-training W8A8 quantization (OutEffHop, section 5).

    At every evaluation the held-out batches are measured (average kurtosis and maximum
    infinity norm of the hooked layer outputs, `testbed.pretrain.outliers`); after the last step
    the model is fake-quantized to ``weight_bits``/``activation_bits`` (per-tensor; activation
    ranges from ``calibration_batches`` training batches) and evaluated again.
    """

    quantize: bool = Field(True, description="evaluate the W8A8-quantized model after the last step")
    weight_bits: int = Field(8, ge=2, le=16)
    activation_bits: int = Field(8, ge=2, le=16)
    calibration_batches: int = Field(4, gt=0, description="training batches that set the activation ranges")
    weight_range: Literal["minmax", "mse"] = Field(
        "minmax", description="minmax: max |w| (Qualcomm's current_minmax); mse: the clipping range of least "
                              "squared rounding error (validate_clm.py's OPT setup)")
    activation_range: Literal["running_minmax", "percentile"] = Field(
        "running_minmax", description="running_minmax: min/max per batch; percentile: the percentiles "
                                      "(100 - p, p) per batch (validate_clm.py's --percentile); both averaged with "
                                      "momentum 0.9 over the calibration batches")
    percentile: float = Field(99.999, gt=50, lt=100, description="p of activation_range: percentile")


class PretrainConfig(StrictModel):
    """Everything a ``kind: pretrain`` run needs beyond the engine and the seed."""

    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    context_length: int = Field(256, ge=8, le=65_536)
    packing: PackingConfig = Field(default_factory=PackingConfig)
    attention_mask: Literal["document", "causal"] = Field(
        "document", description="document: no attention across documents of a packed sequence; causal: plain causal")
    model: ModelConfig = Field(default_factory=ModelConfig)
    steps: int = Field(100, gt=0)
    batch_size: int = Field(16, gt=0, description="sequences per optimizer step, over all processes")
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(10, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: int = Field(0, ge=0, le=3)
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="auto: bf16 on GPUs, fp32 on CPUs")
    eval_every: int = Field(20, gt=0)
    eval_documents: int = Field(64, gt=0, description="held-out documents in the perplexity evaluation")
    checkpoint_every: int = Field(50, gt=0)
    threads_per_process: int = Field(1, gt=0, description="torch threads in each training process")
    ray_workers: int = Field(2, gt=0, description="training processes under engine `ray` (Ray Train workers)")
    outliers: OutlierConfig | None = Field(None, description="outlier metrics and W8A8 quantization (null: off)")


def most_training_sequences(config: PretrainConfig) -> int | None:
    """The most packed training sequences the corpus can give, where the config alone says (None
    where only the prepared corpus does): each ``bigram_backcopy`` document fills one sequence."""
    if config.model.family != "vit" and config.corpus.source == "bigram_backcopy":
        return config.corpus.bigram_backcopy.documents
    return None


def check_batch_size(config: PretrainConfig, sequences: int, source: str, what: str) -> None:
    """Refuse a batch larger than the ``sequences`` packed training sequences (``what`` says where
    that number comes from): every step would go round the corpus many times over."""
    if config.batch_size > sequences:
        raise ScenarioError(f"{source}: pretrain.batch_size: {config.batch_size} sequences a step, but {what} "
                            f"{sequences} training sequences; use a batch of at most {sequences}")
