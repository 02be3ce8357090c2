"""A pretrain run's final metrics carry the packing statistics of its own training packing.

The expected numbers are computed here from the documents themselves: the corpus split again from
the scenario, each training document tokenized with the run's tokenizer (plus <|endoftext|>), and
concatenation's sequences and cuts worked out by hand. The run packs by concatenation (not the
default best-fit) and the test checks that best-fit's numbers and the held-out split's numbers
differ, so a metric read from the wrong method or the wrong split fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.corpus import iter_split
from testbed.pretrain.packing import PackingStats, iter_packed_sequences
from testbed.pretrain.tokenizer import END_OF_TEXT, load_tokenizer, special_id

from .test_pretrain_run import TINY_PRETRAIN

NAMES = ("truncated_share", "padding_share", "excess_sequence_share")


def concat_stats(lengths: np.ndarray, capacity: int) -> dict[str, float]:
    """Concatenate, split every `capacity` tokens: a document is truncated where a split falls inside it."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    n_tokens = int(ends[-1])
    n_sequences = -(-n_tokens // capacity)
    truncated = np.count_nonzero(starts // capacity != (ends - 1) // capacity)
    return {"truncated_share": truncated / len(lengths),
            "padding_share": 1 - n_tokens / (n_sequences * capacity),
            "excess_sequence_share": 0.0}  # concatenation attains ceil(tokens / L)


def library_stats(lengths: np.ndarray, capacity: int, method: str) -> dict[str, float]:
    stats = PackingStats.from_sequences(list(iter_packed_sequences(lengths.tolist(), capacity, method)),
                                        lengths, capacity).as_dict()
    return {name: stats[name] for name in NAMES}


@pytest.mark.integration
def test_final_metrics_are_the_packing_statistics_of_the_runs_own_method_on_its_training_set(tmp_path: Path):
    block = {**TINY_PRETRAIN["pretrain"], "packing": {"method": "concat"}, "attention_mask": "causal",
             "steps": 2, "eval_every": 2, "checkpoint_every": 2}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({**TINY_PRETRAIN, "pretrain": block}, sort_keys=False))
    result = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(tmp_path / "run"),
                             "--quiet"], env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]

    config = PretrainConfig(**block)
    tokenizer = load_tokenizer(tmp_path / "run" / "corpus" / "tokenizer.json")
    eos_id = special_id(tokenizer, END_OF_TEXT)
    lengths: dict[bool, list[int]] = {False: [], True: []}
    for is_heldout, text in iter_split(config.corpus, TINY_PRETRAIN["seed"]):
        lengths[is_heldout].append(len(tokenizer.encode(text).ids + [eos_id]))
    train, heldout = np.asarray(lengths[False]), np.asarray(lengths[True])
    capacity = config.context_length
    expected = concat_stats(train, capacity)

    assert {name: final[f"packing.{name}"] for name in NAMES} == pytest.approx(expected, abs=1e-12)
    # The hand computation is concatenation's, and the tiny corpus tells the alternatives apart.
    assert library_stats(train, capacity, "concat") == pytest.approx(expected, abs=1e-12)
    assert expected["truncated_share"] > 0
    assert library_stats(train, capacity, "best_fit") != pytest.approx(expected, abs=1e-6)
    assert concat_stats(heldout, capacity) != pytest.approx(expected, abs=1e-6)
    # The same numbers as this method's row of the packing_stats artifact, which stays as it was.
    with np.load(tmp_path / "run" / "artifacts.npz") as artifacts:
        row = list(artifacts["packing_methods"]).index("concat")
        names = list(artifacts["packing_stat_names"])
        assert {name: artifacts["packing_stats"][row][names.index(name)] for name in NAMES} == \
            pytest.approx(expected, abs=1e-12)
        assert artifacts["packing_stats"].shape == (4, 12)
