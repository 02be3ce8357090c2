"""Evaluations run by every training process together: held-out perplexity and fact recall.

Both split their work over the processes and sum the counts with an all-reduce. Each process
makes the same number of forward passes, even when it has run out of work (it then passes a
placeholder), because under ZeRO stage 3 a forward pass gathers parameters collectively.

Held-out documents are evaluated whole (a document longer than the context in context-sized
pieces) under the document mask, whatever mask the model trained with: packing them best-fit with
the mask computes exactly what feeding them one at a time would, since RoPE is relative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from testbed.pretrain.batches import Batch, TrainingData
from testbed.pretrain.factrecall import Question, answer_from_text, classify_answer
from testbed.pretrain.model import IGNORE_INDEX, summed_loss

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
EVAL_BATCH = 16
ANSWER_TOKENS = 8


def all_reduce_sum(values: Sequence[float], device: torch.device) -> list[float]:
    """Sum each value over all processes (float64)."""
    tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor)
    return tensor.tolist()


@torch.no_grad()
def heldout_perplexity(forward: Forward, data: TrainingData, rank: int, world: int,
                       device: torch.device) -> dict[str, float]:
    """Mean next-token loss and perplexity over the held-out documents' tokens."""
    nll, count = 0.0, 0
    placeholder = _placeholder(data.length, data.manifest.pad_id)
    for batch in data.eval_batches(rank, world, EVAL_BATCH):
        used = (batch or placeholder).to(device)
        logits = forward(used.tokens, used.document_ids)
        if batch is not None:
            nll += float(summed_loss(logits, used.labels))
            count += int((used.labels != IGNORE_INDEX).sum())
    total_nll, total_count = all_reduce_sum([nll, count], device)
    loss = total_nll / max(total_count, 1.0)
    return {"heldout_loss": loss, "heldout_ppl": math.exp(min(loss, 50.0))}


def _placeholder(length: int, pad_id: int) -> Batch:
    tokens = torch.full((1, length), pad_id, dtype=torch.long)
    doc_ids = torch.full((1, length), -1, dtype=torch.long)
    return Batch(tokens, doc_ids, torch.full_like(tokens, IGNORE_INDEX))


@torch.no_grad()
def greedy_continuations(forward: Forward, prompts: list[list[int]], new_tokens: int, context_length: int,
                         pad_id: int, device: torch.device) -> list[list[int]]:
    """Greedy decoding of ``new_tokens`` tokens after each prompt, all prompts in one right-padded batch.

    Row i holds its prompt, then the tokens generated so far, then padding; at each step the
    logits at the row's last real position choose its next token. Prompts longer than
    ``context_length - new_tokens`` keep their last tokens.
    """
    keep = context_length - new_tokens
    prompts = [prompt[-keep:] for prompt in prompts] or [[pad_id]]
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    width = int(lengths.max()) + new_tokens
    tokens = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        tokens[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    rows = torch.arange(len(prompts), device=device)
    for _ in range(new_tokens):
        positions = torch.arange(width, device=device)[None, :]
        document_ids = torch.where(positions < lengths[:, None], 0, -1)
        logits = forward(tokens, document_ids)
        tokens[rows, lengths] = logits[rows, lengths - 1].argmax(dim=-1)
        lengths = lengths + 1
    start = lengths - new_tokens
    return [tokens[row, int(start[row]): int(lengths[row])].tolist() for row in range(len(prompts))]


def fact_recall(forward: Forward, data: TrainingData, tokenizer, rank: int, world: int,
                device: torch.device) -> dict[str, float]:
    """Recall, invented-answer and mix-up rates over the held-out fact-recall questions."""
    items = data.factrecall_questions() or []
    mine = items[rank::world]
    rounds = -(-len(items) // (world * EVAL_BATCH))
    counts = [0.0, 0.0, 0.0, 0.0]  # correct, invented, mixup, total
    for r in range(rounds):
        chunk = mine[r * EVAL_BATCH: (r + 1) * EVAL_BATCH]
        prompts = [tokenizer.encode(item["prompt"]).ids for item in chunk]
        generated = greedy_continuations(forward, prompts, ANSWER_TOKENS, data.length, data.manifest.pad_id, device)
        answers = [answer_from_text(tokenizer.decode(ids)) for ids in generated[: len(chunk)]]
        outcomes = [classify_answer(answer, Question(0, item["answer"], tuple(item["stated_values"])))
                    for answer, item in zip(answers, chunk)]
        for slot, outcome in enumerate(("correct", "invented", "mixup")):
            counts[slot] += outcomes.count(outcome)
        counts[3] += len(chunk)
    correct, invented, mixup, total = all_reduce_sum(counts, device)
    total = max(total, 1.0)
    return {"fact_recall": correct / total, "fact_invented_rate": invented / total, "fact_mixup_rate": mixup / total,
            "fact_questions": total}
