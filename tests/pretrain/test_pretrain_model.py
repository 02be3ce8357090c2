"""Tests for the GPT decoder: rotary positions, the document mask, labels, greedy decoding, fact recall scoring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from testbed.pretrain.config import FactRecallCorpusConfig, ModelConfig
from testbed.pretrain.evaluation import greedy_continuations
from testbed.pretrain.factrecall import (
    ATTRIBUTES,
    Question,
    answer_from_text,
    classify_answer,
    generate_document,
    generate_documents,
)
from testbed.pretrain.model import GPT, IGNORE_INDEX, apply_rotary, next_token_labels, rotary_tables


def tiny_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(layers=2, d_model=32, heads=4), vocab_size=50, context_length=32).eval()


def test_rotary_scores_depend_only_on_the_distance_between_positions() -> None:
    cos, sin = rotary_tables(40, 8)
    q, k = torch.randn(8), torch.randn(8)
    def score(m: int, n: int) -> float:
        return float(apply_rotary(q, cos[m], sin[m]) @ apply_rotary(k, cos[n], sin[n]))
    assert score(7, 3) == pytest.approx(score(30, 26), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 5), abs=1e-3)
    assert torch.linalg.norm(apply_rotary(q, cos[9], sin[9])) == pytest.approx(float(torch.linalg.norm(q)), rel=1e-6)


def test_document_mask_makes_a_packed_document_compute_as_if_alone() -> None:
    model = tiny_model()
    first, second = torch.randint(0, 50, (1, 11)), torch.randint(0, 50, (1, 9))
    packed = torch.cat([first, second, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    doc_ids = torch.tensor([[0] * 11 + [1] * 9 + [-1] * 4])
    with torch.no_grad():
        alone = model(second, torch.zeros_like(second))
        masked = model(packed, doc_ids)[:, 11:20]
        causal = model(packed)[:, 11:20]
    assert torch.allclose(masked, alone, atol=1e-5)  # RoPE is relative: the offset of 11 does not matter
    assert not torch.allclose(causal, alone, atol=1e-3)  # plain causal attention sees the first document


def test_labels_are_next_tokens_of_the_same_document_only() -> None:
    tokens = torch.tensor([[5, 6, 7, 8, 9, 0]])
    doc_ids = torch.tensor([[0, 0, 0, 1, 1, -1]])
    assert next_token_labels(tokens, doc_ids).tolist() == [[6, 7, IGNORE_INDEX, 9, IGNORE_INDEX, IGNORE_INDEX]]


def test_greedy_continuations_extend_each_right_padded_prompt_from_its_own_end() -> None:
    # A fake model that predicts "previous token + 1" wherever the position belongs to a document.
    def forward(tokens: torch.Tensor, doc_ids: torch.Tensor) -> torch.Tensor:
        assert ((doc_ids == 0) | (doc_ids == -1)).all()
        return torch.nn.functional.one_hot((tokens + 1) % 20, 20).float()

    prompts = [[1, 2, 3], [10], [4, 5, 6, 7, 8]]
    out = greedy_continuations(forward, prompts, new_tokens=3, context_length=32, pad_id=0, device=torch.device("cpu"))
    assert out == [[4, 5, 6], [11, 12, 13], [9, 10, 11]]
    clipped = greedy_continuations(forward, [[1] * 40], new_tokens=2, context_length=8, pad_id=0,
                                   device=torch.device("cpu"))
    assert clipped == [[2, 3]]


def test_fact_recall_documents_state_facts_before_questions_and_answer_from_them() -> None:
    config = FactRecallCorpusConfig(people_per_document=2, min_filler=3, max_filler=3)
    document = generate_document(config, np.random.default_rng(5))
    assert len(document.questions) == 2
    first_question = document.text.index("Recall:")
    for question in document.questions:
        assert document.text[question.prompt_end:].startswith(f" {question.answer}.")
        assert question.answer in question.stated_values
        assert f" {question.answer}." in document.text[:first_question]  # stated before any recall
    stated = document.questions[0].stated_values
    for column in range(len(ATTRIBUTES)):  # no two people share a value of the same attribute
        values = stated[column::len(ATTRIBUTES)]
        assert len(set(values)) == len(values)
    again = list(generate_documents(FactRecallCorpusConfig(documents=3), np.random.default_rng(5)))
    assert [d.text for d in again] == [d.text for d in generate_documents(FactRecallCorpusConfig(documents=3),
                                                                             np.random.default_rng(5))]


@pytest.mark.parametrize("generated, outcome", [
    (" Ostwick. Question: where", "correct"),
    (" Dunmere.", "mixup"),
    (" Zennor.", "invented"),
    (" Ostwickshire.", "invented"),
    ("", "invented"),
])
def test_answers_are_classed_as_recalled_mixed_up_or_invented(generated: str, outcome: str) -> None:
    question = Question(0, "Ostwick", ("Ostwick", "tanner", "heron", "Dunmere", "baker", "goat"))
    assert classify_answer(answer_from_text(generated), question) == outcome
