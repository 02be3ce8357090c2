"""A corpus of malformed scenarios over every block of every kind, plus file-level problems.

Each case is run through ``validate`` and ``run`` (in-process CLI). The promise of the README: exit
code 2, one line on stderr naming the file (or the ``--set``) and the field, no traceback, and no run
folder left behind, neither the ``--run-dir`` nor one under ``runs/``. The tests after the table
cover what only a run, a resume or a failing system can produce (a diverging loss, a full disk, an
unreadable file, a damaged run folder, an internal error).
"""

from __future__ import annotations

import copy
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import TINY_SCENARIO
from tests.decentralized.conftest import TINY as DECENTRALIZED
from tests.federated.test_federated_runs import FEDERATED
from tests.pretrain.test_pretrain_run import TINY_PRETRAIN

BASES: dict[str, dict[str, Any]] = {
    "workload": TINY_SCENARIO, "federated": FEDERATED, "decentralized": DECENTRALIZED, "pretrain": TINY_PRETRAIN,
}


class Replace(dict):
    """A block that replaces the base's block instead of being merged into it."""


DELETE = object()  # a key to drop from the base


@dataclass(frozen=True)
class Case:
    """One malformed scenario: a base kind and a change, and the words its error line must hold.

    ``change`` is a mapping merged into the base (written to the file), a list of ``--set``
    overrides, or the file's whole text (str or bytes). ``files`` are written beside it first;
    ``{tmp}`` in any string is the test's temporary folder.
    """

    id: str
    base: str
    change: dict | list | str | bytes
    words: tuple[str, ...]
    files: dict[str, str | bytes] = field(default_factory=dict)
    default_run_dir: bool = False  # run without --run-dir (the default folder, under runs/)


def _sets(*overrides: str) -> list[str]:
    return list(overrides)


W, F, D, P = "workload", "federated", "decentralized", "pretrain"
DEEP = "name: deep\nkind: workload\ndescription: " + "[" * 20000 + "]" * 20000 + "\n"
NESTED = "name: nested\nkind: workload\nworkload: {name: classifier, extra: " + "[" * 40 + "]" * 40 + "}\n"
LAUGHS = "name: laughs\nkind: workload\nworkload:\n  name: classifier\n  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + \
    "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 7))

CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]

CASES: list[Case] = [
    # --- the file itself -------------------------------------------------------------------------
    Case("file-yaml-syntax", "", "name: x\nkind: [workload\n", ("invalid YAML", "line")),
    Case("file-tab-indent", "", "name: x\n\tkind: workload\n", ("invalid YAML",)),
    Case("file-python-tag", "", "name: !!python/object/apply:os.system ['true']\nkind: workload\n", ("invalid YAML",)),
    Case("file-not-a-mapping", "", "- a\n- list\n", ("must be a mapping",)),
    Case("file-empty", "", "", ("must be a mapping",)),
    Case("file-not-utf8", "", b"name: caf\xe9\nkind: workload\n", ("not a text file",)),
    Case("file-nested-20000-deep", "", DEEP, ("nested too deeply",)),
    Case("file-nested-40-deep", "", NESTED, ("nested too deeply",)),
    Case("file-alias-expansion", "", LAUGHS, ("more than", "values")),
    Case("file-over-1mb", "", "name: big\nkind: workload\ndescription: '" + "x" * (1 << 20) + "'\n",
         ("at most", "MiB")),
    Case("top-description-not-text", W, {"description": ["not", "text"]}, ("description",)),
    # --- top level -------------------------------------------------------------------------------
    Case("top-unknown-key", W, {"sed": 3}, ("sed", "did you mean 'seed'")),
    Case("top-missing-name", W, {"name": DELETE}, ("name", "required")),
    Case("top-name-too-long", W, {"name": "n" * 300}, ("name", "at most 128"), default_run_dir=True),
    Case("top-name-1mb-is-cut", W, _sets("name=" + "y" * 1_000_000), ("name", "...")),
    Case("top-seed-inf", W, _sets("seed=.inf"), ("seed",)),
    Case("top-seed-200kb-value", W, _sets("seed=" + "9z" * 100_000), ("seed", "...")),
    Case("top-unknown-kind", W, {"kind": "centralised"}, ("kind", "'workload'")),
    Case("top-override-no-equals", W, _sets("training.steps"), ("KEY.PATH=VALUE",)),
    Case("top-override-through-value", W, _sets("seed.x=1"), ("'seed' is a value",)),
    Case("top-override-bad-yaml", W, _sets("training.steps=[1"), ("value is not valid YAML",)),
    # --- kind against the blocks present --------------------------------------------------------
    Case("kind-pretrain-on-workload-file", W, _sets("kind=pretrain"), ("training", "does not read")),
    Case("kind-federated-with-training", F, {"training": {"steps": 3}}, ("training", "does not read")),
    Case("kind-workload-with-federated", W, {"federated": {"rounds": 2}}, ("federated", "does not read")),
    Case("kind-decentralized-with-workload", D, {"workload": {"name": "classifier"}}, ("workload", "does not read")),
    Case("kind-pretrain-without-pretrain", P, {"pretrain": DELETE}, ("pretrain", "required")),
    Case("kind-decentralized-without-block", D, {"decentralized": DELETE}, ("decentralized", "required")),
    Case("kind-workload-without-workload", W, {"workload": DELETE}, ("workload", "required")),
    # --- engine ----------------------------------------------------------------------------------
    Case("engine-unknown-type", W, {"engine": {"type": "slurm"}}, ("engine.type", "'slurm'")),
    Case("engine-num-cpus-zero", W, _sets("engine.num_cpus=0"), ("engine.num_cpus", "greater than 0")),
    Case("engine-use-ray-unknown", W, {"engine": {"use_ray": "sometimes"}}, ("engine.use_ray",)),
    Case("engine-dashboard-host-empty", W, {"engine": {"dashboard_host": ""}}, ("engine.dashboard_host",)),
    Case("engine-ray-address-malformed", W, _sets("engine.type=ray", "engine.address=nowhere"), ("engine.address",)),
    Case("engine-ray-cpus-per-task-inf", W, _sets("engine.type=ray", "engine.num_cpus_per_task=.inf"),
         ("engine.num_cpus_per_task", "finite")),
    Case("engine-mpi-for-workload", W, {"engine": Replace({"type": "mpi"})}, ("engine.type", "mpi")),
    Case("engine-mpi-bad-host", D, {"engine": Replace({"type": "mpi", "hosts": ["a b;rm"]})}, ("engine.hosts",)),
    Case("engine-mpi-too-many-ranks", D, {"engine": Replace({"type": "mpi", "num_procs": 64})}, ("engine.num_procs",)),
    Case("engine-deepspeed-missing-hostfile", P, {"engine": Replace({"type": "deepspeed", "hostfile": "{tmp}/nope"})},
         ("engine.hostfile",)),
    # --- data ------------------------------------------------------------------------------------
    Case("data-unknown-dataset", W, {"data": {"dataset": "mnist"}}, ("data.dataset", "'mnist'")),
    Case("data-file-dataset-without-path", W, {"data": {"dataset": "cifar10"}}, ("data.path",)),
    Case("data-path-too-long", W, {"data": {"dataset": "cifar10", "path": "p" * 5000}},
         ("data.path", "does not exist", "...")),
    Case("data-file-dataset-files-missing", W, {"data": {"dataset": "cifar10", "path": "{tmp}/cifar"},
                                                "workload": {"arch": "mlp"}},
         ("data.path", "files not found"), files={"cifar/readme.txt": "no batches here"}),
    Case("data-file-dataset-not-a-batch", F, {"data": {"dataset": "cifar10", "path": "{tmp}/cifar"}},
         ("data.path", "not a CIFAR-10 python batch"),
         files={f"cifar/{name}": b"not a pickle" for name in CIFAR_BATCHES}),
    Case("data-test-fraction-inf", W, _sets("data.test_fraction=.inf"), ("data.test_fraction", "finite")),
    Case("data-test-fraction-tiny", W, _sets("data.test_fraction=0.0001"), ("data.test_fraction", "1 for testing")),
    Case("data-test-fraction-huge", W, {"data": {"test_fraction": 0.999}}, ("data.test_fraction", "for training")),
    Case("data-test-fraction-iris", W, {"data": {"dataset": "iris", "test_fraction": 0.01},
                                        "workload": {"arch": "mlp"}}, ("data.test_fraction",)),
    Case("data-num-clients-zero", F, {"data": {"num_clients": 0}}, ("data.num_clients",)),
    Case("data-replicate-huge", F, _sets("data.replicate=10000000"), ("data.replicate", "less than or equal")),
    Case("data-partition-unknown", F, {"data": {"partition": Replace({"type": "zipf"})}}, ("data.partition.type",)),
    Case("data-partition-beta-inf", F, _sets("data.partition.beta=.inf"), ("data.partition.beta", "finite")),
    Case("data-partition-min-size", F, {"data": {"partition": {"min_size": 1000}}}, ("data.partition.min_size",)),
    Case("data-partition-shards", F, {"data": {"partition": Replace({"type": "shards", "classes_per_client": 11})}},
         ("data.partition.classes_per_client",)),
    Case("data-not-a-mapping", W, {"data": [1, 2]}, ("data",)),
    # --- workload --------------------------------------------------------------------------------
    Case("workload-unknown", W, {"workload": Replace({"name": "resnet9000"})}, ("workload.name", "'resnet9000'")),
    Case("workload-name-200kb-is-cut", W, _sets("workload.name=" + "r" * 200_000), ("workload.name", "...")),
    Case("workload-lr-inf", W, _sets("workload.lr=.inf"), ("workload.lr", "finite")),
    Case("workload-lr-nan", W, {"workload": {"lr": math.nan}}, ("workload.lr", "finite")),
    Case("workload-lr-negative", W, {"workload": {"lr": -0.1}}, ("workload.lr", "greater than 0")),
    Case("workload-hidden-type", W, {"workload": {"hidden": "big"}}, ("workload.hidden", "integer")),
    Case("workload-unknown-arch", W, {"workload": {"arch": "resnet"}}, ("workload.arch",)),
    Case("workload-momentum-one", W, {"workload": {"momentum": 1.0}}, ("workload.momentum", "less than 1")),
    Case("workload-cnn-on-tabular", W, {"data": {"dataset": "wine"}}, ("workload.arch", "tabular")),
    Case("workload-key-typo", W, {"workload": {"hiden": 3}}, ("workload.hiden", "did you mean 'hidden'")),
    Case("workload-batch-too-large", W, {"workload": Replace({"name": "robodreamer", "batch_size": 100000})},
         ("workload.batch_size", "less than or equal")),
    # --- training --------------------------------------------------------------------------------
    Case("training-steps-zero", W, {"training": {"steps": 0}}, ("training.steps", "greater than 0")),
    Case("training-steps-text", W, _sets("training.steps=many"), ("training.steps", "integer")),
    Case("training-steps-inf", W, _sets("training.steps=.inf"), ("training.steps",)),
    Case("training-eval-every", W, {"training": {"eval_every": -1}}, ("training.eval_every",)),
    Case("training-checkpoint-every", W, _sets("training.checkpoint_every=0"), ("training.checkpoint_every",)),
    Case("training-not-a-mapping", W, {"training": 5}, ("training",)),
    # --- federated -------------------------------------------------------------------------------
    Case("federated-rounds-zero", F, {"federated": {"rounds": 0}}, ("federated.rounds",)),
    Case("federated-local-epochs", F, _sets("federated.local_epochs=-1"), ("federated.local_epochs",)),
    Case("federated-proximal-mu-inf", F, _sets("federated.proximal_mu=.inf"), ("federated.proximal_mu", "finite")),
    Case("federated-proximal-mu-negative", F, {"federated": {"proximal_mu": -1}}, ("federated.proximal_mu",)),
    Case("federated-checkpoint-every", F, {"federated": {"checkpoint_every": 0}}, ("federated.checkpoint_every",)),
    Case("federated-round-timeout", F, {"federated": {"round_timeout_s": -5}}, ("federated.round_timeout_s",)),
    Case("federated-client-cpus", F, {"federated": {"client_resources": {"num_cpus": 0}}},
         ("federated.client_resources.num_cpus",)),
    Case("federated-faults-fraction", F, {"federated": {"faults": {"fraction": 0}}}, ("federated.faults.fraction",)),
    Case("federated-sampling-fraction-zero", F, {"federated": {"sampling": {"fraction": 0}}},
         ("federated.sampling.fraction", "greater than 0")),
    Case("federated-sampling-fraction-over-one", F, _sets("federated.sampling={fraction: 1.5}"),
         ("federated.sampling.fraction", "less than or equal to 1")),
    Case("federated-sampling-fraction-and-count", F, {"federated": {"sampling": {"fraction": 0.5, "count": 2}}},
         ("federated.sampling", "exactly one")),
    Case("federated-sampling-count-over-clients", F, {"federated": {"sampling": {"count": 9}}},
         ("federated.sampling.count", "has 4")),
    Case("federated-sampling-key-typo", F, {"federated": {"sampling": {"fractoin": 0.5}}},
         ("federated.sampling.fractoin", "did you mean 'fraction'")),
    Case("federated-sampling-too-few-for-the-rule", F,
         {"federated": {"sampling": {"count": 2}, "strategy": Replace({"name": "dnc", "num_malicious": 2})}},
         ("federated.sampling", "dnc", "per round")),
    Case("federated-non-federated-workload", F, {"workload": Replace({"name": "aco"})}, ("workload.name",)),
    Case("federated-workload-lr-inf", F, _sets("workload.lr=.inf"), ("workload.lr", "finite")),
    Case("strategy-unknown", F, {"federated": {"strategy": Replace({"name": "sdae"})}},
         ("federated.strategy.name", "did you mean 'sdea'")),
    Case("strategy-param-range", F, {"federated": {"strategy": Replace({"name": "fedtrimmedavg", "beta": 0.7})}},
         ("federated.strategy.beta",)),
    Case("strategy-param-nan", F, _sets("federated.strategy.name=sdea", "federated.strategy.lr=.nan"),
         ("federated.strategy.lr", "finite")),
    Case("strategy-public-size", F, {"federated": {"strategy": Replace({"name": "sdea", "public": {"size": 0}})}},
         ("federated.strategy.public.size",)),
    Case("strategy-krum-too-few", F, {"federated": {"strategy": Replace({"name": "krum", "num_malicious": 1})}},
         ("data.num_clients", "krum")),
    Case("strategy-fedprox-two-mus", F, {"federated": {"proximal_mu": 0.01,
                                                       "strategy": Replace({"name": "fedprox", "proximal_mu": 0.1})}},
         ("federated.strategy.proximal_mu", "federated.proximal_mu")),
    Case("strategy-fedprox-no-mu", F, {"federated": {"strategy": Replace({"name": "fedprox"})}},
         ("federated.strategy.proximal_mu", "mu > 0")),
    Case("strategy-fedadam-beta", F, {"federated": {"strategy": Replace({"name": "fedadam", "beta_1": 1})}},
         ("federated.strategy.beta_1",)),
    Case("strategy-qfedavg-lr-zero", F, _sets("federated.strategy={name: qfedavg, client_learning_rate: 0}"),
         ("federated.strategy.client_learning_rate",)),
    Case("attack-unknown", F, {"federated": {"attack": Replace({"name": "lei"})}}, ("federated.attack.name",)),
    Case("attack-fraction-over-one", F, {"federated": {"attack": {"fraction": 1.5}}}, ("federated.attack.fraction",)),
    Case("attack-all-byzantine", F, {"federated": {"attack": {"fraction": 0.9}}},
         ("federated.attack.fraction", "0 benign")),
    Case("attack-lie-needs-two-benign", F, {"federated": {"attack": Replace({"name": "lie", "fraction": 0.7})}},
         ("federated.attack.fraction", "2 benign")),
    Case("attack-gaussian-sigma-negative", F, {"federated": {"attack": Replace({"name": "gaussian", "sigma": -1})}},
         ("federated.attack.sigma", "> 0")),
    Case("attack-lie-z-text", F, {"federated": {"attack": Replace({"name": "lie", "z": "big"})}},
         ("federated.attack.z", "number")),
    Case("attack-lie-z-inf", F, _sets("federated.attack={name: lie, z: .inf}"), ("federated.attack.z", "finite")),
    Case("attack-min-max-direction", F, {"federated": {"attack": Replace({"name": "min_max", "direction": "up"})}},
         ("federated.attack.direction",)),
    Case("attack-min-sum-tol-zero", F, {"federated": {"attack": Replace({"name": "min_sum", "tol": 0})}},
         ("federated.attack.gamma_init",)),
    Case("attack-flip-rate", F, {"federated": {"attack": Replace({"name": "pair_flip", "rate": 2})}},
         ("federated.attack.rate",)),
    Case("attack-scale-text", F, {"federated": {"attack": Replace({"name": "sign_flip", "scale": "1.5"})}},
         ("federated.attack.scale", "number")),
    Case("attack-param-typo", F, {"federated": {"attack": Replace({"name": "sign_flip", "scal": 2})}},
         ("federated.attack.scal", "did you mean 'scale'")),
    Case("attack-badnets-fraction", F, {"federated": {"attack": Replace({"name": "badnets", "poison_fraction": 0})}},
         ("federated.attack.poison_fraction",)),
    Case("attack-badnets-target-no-class", F, {"federated": {"attack": Replace({"name": "badnets", "target": 12})}},
         ("federated.attack.target", "[0, 10)")),
    Case("privacy-noise-zero", F, {"federated": {"privacy": {"noise_multiplier": 0}}},
         ("federated.privacy.noise_multiplier", "greater than 0")),
    Case("privacy-noise-negative", F, _sets("federated.privacy.noise_multiplier=-1"),
         ("federated.privacy.noise_multiplier",)),
    Case("privacy-target-first-round", F, {"federated": {"privacy": {"target_epsilon": 0.01}}},
         ("federated.privacy.target_epsilon", "first round")),
    Case("privacy-key-typo", F, {"federated": {"privacy": {"noise_multiplyer": 1}}},
         ("federated.privacy.noise_multiplyer",)),
    Case("privacy-central-median", F, {"federated": {"strategy": Replace({"name": "fedmedian"}),
                                                     "privacy": {"noise_multiplier": 1}}},
         ("federated.privacy.mode", "fedmedian")),
    # --- decentralized ---------------------------------------------------------------------------
    Case("topology-unknown", D, {"decentralized": {"topology": Replace({"name": "star"})}},
         ("decentralized.topology", "unknown graph")),
    Case("topology-ring-3m-nodes", D, _sets("decentralized.topology={name: ring, n: 3000000}"),
         ("decentralized.topology", "at most")),
    Case("topology-complete-too-dense", D, {"decentralized": {"topology": Replace({"name": "complete", "n": 2000})}},
         ("decentralized.topology", "edges")),
    Case("topology-bad-parameter", D, {"decentralized": {"topology": Replace({"name": "ring", "k": 3})}},
         ("decentralized.topology",)),
    Case("topology-radius-inf", D, _sets("decentralized.topology={name: random_geometric, n: 8, radius: .inf}"),
         ("decentralized.topology.radius", "finite")),
    Case("topology-edge-list-path-int", D, {"decentralized": {"topology": Replace({"name": "edge_list", "path": 5})}},
         ("decentralized.topology", "path")),
    Case("topology-edge-list-missing", D,
         {"decentralized": {"topology": Replace({"name": "edge_list", "path": "{tmp}/none.txt"})}},
         ("decentralized.topology", "does not exist")),
    Case("topology-edge-list-not-utf8", D,
         {"decentralized": {"topology": Replace({"name": "edge_list", "path": "{tmp}/edges.txt"})}},
         ("decentralized.topology", "UTF-8"), files={"edges.txt": b"0 1\n1 \xff\xfe\n"}),
    Case("topology-edge-list-path-too-long", D,
         {"decentralized": {"topology": Replace({"name": "edge_list", "path": "e" * 5000})}},
         ("decentralized.topology", "does not exist")),
    Case("topology-edge-list-path-surrogate", D,
         'name: s\nkind: decentralized\ndecentralized: {topology: {name: edge_list, path: "\\udcff"}, sigma: 1}\n',
         ("decentralized.topology.path", "not valid Unicode")),
    Case("topology-node-count-mismatch", D, {"data": {"num_clients": 5}}, ("data.num_clients", "8 nodes")),
    Case("decentralized-algorithm-unknown", D, {"decentralized": {"algorithm": "sgd"}},
         ("decentralized.algorithm",)),
    Case("decentralized-algorithm-empty", D, {"decentralized": {"algorithm": []}}, ("decentralized.algorithm",)),
    Case("decentralized-lr-inf", D, _sets("decentralized.lr=.inf"), ("decentralized.lr", "finite")),
    Case("decentralized-clip-zero", D, {"decentralized": {"clip": 0}}, ("decentralized.clip",)),
    Case("decentralized-sigma-tiny", D, {"decentralized": {"sigma": 1e-300}}, ("decentralized.sigma",)),
    Case("decentralized-no-noise", D, {"decentralized": {"sigma": None}}, ("decentralized", "sigma")),
    Case("decentralized-gossip-rounds", D, {"decentralized": {"gossip": {"rounds": 0}}},
         ("decentralized.gossip.rounds",)),
    Case("decentralized-cap-factor", D, {"decentralized": {"random_walk": {"cap_factor": -1}}},
         ("decentralized.random_walk.cap_factor",)),
    Case("decentralized-comparison-alpha", D, {"decentralized": {"comparison": {"alpha": 0.5}}},
         ("decentralized.comparison.alpha",)),
    Case("model-unknown-arch", D, {"decentralized": {"model": {"arch": "cnn"}}}, ("decentralized.model.arch",)),
    Case("model-hidden-zero", D, {"decentralized": {"model": {"hidden": 0}}}, ("decentralized.model.hidden",)),
    Case("privacy-delta-zero", D, {"decentralized": {"privacy": {"delta": 0}}}, ("decentralized.privacy.delta",)),
    Case("privacy-target-negative", D, {"decentralized": {"privacy": {"target_epsilon": -1}}},
         ("decentralized.privacy.target_epsilon",)),
    Case("privacy-target-unreachable", D, {"decentralized": {"sigma": None, "privacy": {"target_epsilon": 1e-6}}},
         ("decentralized.privacy.target_epsilon", "out of reach")),
    Case("privacy-neighbouring-unknown", D, {"decentralized": {"privacy": {"neighbouring": "swap"}}},
         ("decentralized.privacy.neighbouring",)),
    Case("audit-source-outside", D, {"decentralized": {"audit": {"source": 99}}}, ("decentralized.audit.source",)),
    Case("audit-canaries-negative", D, {"decentralized": {"audit": {"canaries": -1}}},
         ("decentralized.audit.canaries",)),
    Case("audit-significance", D, {"decentralized": {"audit": {"significance": 1.5}}},
         ("decentralized.audit.significance",)),
    # --- pretrain --------------------------------------------------------------------------------
    Case("corpus-unknown-source", P, {"pretrain": {"corpus": {"source": "wikipedia"}}}, ("pretrain.corpus.source",)),
    Case("corpus-folder-without-path", P, _sets("pretrain.corpus.source=folder"), ("pretrain.corpus.path",)),
    Case("corpus-folder-missing", P, {"pretrain": {"corpus": Replace({"source": "folder", "path": "{tmp}/nope"})}},
         ("pretrain.corpus.path", "not a folder")),
    Case("corpus-folder-path-too-long", P, {"pretrain": {"corpus": Replace({"source": "folder", "path": "c" * 5000})}},
         ("pretrain.corpus.path", "not a folder", "...")),
    Case("corpus-folder-of-empty-files", P,
         {"pretrain": {"corpus": Replace({"source": "folder", "path": "{tmp}/corpus"})}},
         ("pretrain.corpus.path", "no documents"),
         files={"corpus/a.txt": "", "corpus/b.txt": "  \n", "corpus/c.jsonl": ""}),
    Case("corpus-jsonl-malformed", P, {"pretrain": {"corpus": Replace({"source": "folder", "path": "{tmp}/corpus"})}},
         ("pretrain.corpus.text_field",), files={"corpus/a.jsonl": '{"text": "fine"}\nnot json\n'}),
    Case("corpus-all-held-out", P, {"pretrain": {"corpus": {"heldout_fraction": 0.99999, "max_documents": 3}}},
         ("pretrain.corpus.heldout_fraction", "held out")),
    Case("corpus-heldout-one", P, {"pretrain": {"corpus": {"heldout_fraction": 1.0}}},
         ("pretrain.corpus.heldout_fraction",)),
    Case("corpus-factrecall-filler", P, {"pretrain": {"corpus": {"factrecall": {"min_filler": 5, "max_filler": 4}}}},
         ("pretrain.corpus.factrecall",)),
    Case("tokenizer-vocab-small", P, {"pretrain": {"tokenizer": {"vocab_size": 100}}},
         ("pretrain.tokenizer.vocab_size",)),
    Case("tokenizer-documents-zero", P, _sets("pretrain.tokenizer.train_documents=0"),
         ("pretrain.tokenizer.train_documents",)),
    Case("packing-unknown-method", P, {"pretrain": {"packing": {"method": "zip"}}}, ("pretrain.packing.method",)),
    Case("packing-buffer-zero", P, {"pretrain": {"packing": {"buffer_size": 0}}}, ("pretrain.packing.buffer_size",)),
    Case("pretrain-context-length", P, {"pretrain": {"context_length": 4}}, ("pretrain.context_length",)),
    Case("pretrain-lr-inf", P, _sets("pretrain.lr=.inf"), ("pretrain.lr", "finite")),
    Case("pretrain-batch-split", P, _sets("engine.type=deepspeed", "engine.num_procs=2", "pretrain.batch_size=5"),
         ("pretrain.batch_size", "evenly")),
    Case("pretrain-masked-causal", P, {"pretrain": {"model": {"family": "masked_lm"}, "attention_mask": "causal"}},
         ("pretrain.attention_mask",)),
    Case("pretrain-vit-on-wine", P, {"data": {"dataset": "wine"}, "pretrain": {"model": {"family": "vit"}}},
         ("data.dataset", "vit")),
    Case("model-heads-do-not-divide", P, {"pretrain": {"model": {"heads": 3}}}, ("pretrain.model",)),
    Case("model-unknown-family", P, {"pretrain": {"model": {"family": "rnn"}}}, ("pretrain.model.family",)),
    Case("model-unknown-attention", P, {"pretrain": {"model": {"attention": "relu"}}}, ("pretrain.model.attention",)),
    Case("model-clip-gamma-inf", P, _sets("pretrain.model.clip_gamma=-.inf"), ("pretrain.model.clip_gamma", "finite")),
    Case("outliers-bits", P, {"pretrain": {"outliers": {"weight_bits": 1}}}, ("pretrain.outliers.weight_bits",)),
    Case("outliers-zero-stage-3", P, {"pretrain": {"outliers": {"quantize": True}, "zero_stage": 3}},
         ("pretrain.outliers.quantize",)),
    # --- report ----------------------------------------------------------------------------------
    Case("report-unknown-kind", W, {"report": {"kind": "fancy"}}, ("report.kind",)),
    Case("report-unknown-tracker", W, {"report": {"trackers": ["neptune"]}}, ("report.trackers",)),
    Case("report-key-typo", W, {"report": {"knd": "training"}}, ("report.knd", "did you mean 'kind'")),
    Case("report-ood-outside-federated", W, {"report": {"ood": {}}}, ("report", "ood")),
    Case("report-not-a-mapping", W, {"report": "html"}, ("report",)),
    # --- sweep -----------------------------------------------------------------------------------
    Case("sweep-bad-grid-value", W, {"sweep": {"grid": {"training.steps": [8, -1]}}},
         ("sweep variant", "training.steps")),
    Case("sweep-grid-not-a-list", W, {"sweep": {"grid": {"seed": 3}}}, ("sweep.grid.seed",)),
    Case("sweep-parallel-zero", W, {"sweep": {"grid": {"seed": [1, 2]}, "parallel": 0}}, ("sweep.parallel",)),
    Case("sweep-key-typo", W, {"sweep": {"grd": {"seed": [1]}}}, ("sweep.grd", "did you mean 'grid'")),
    Case("sweep-variant-typo", W, {"sweep": {"variants": [{"training.stpes": 3}]}}, ("training.stpes",)),
    Case("sweep-through-a-value", W, {"sweep": {"grid": {"seed.x": [1]}}}, ("sweep", "seed.x", "is a value")),
    Case("sweep-grid-inf", W, {"sweep": {"grid": {"workload.lr": [0.1, math.inf]}}}, ("workload.lr", "finite")),
]


def _filled(value: Any, tmp: Path) -> Any:
    """``value`` with ``{tmp}`` replaced in every string."""
    if isinstance(value, str):
        return value.replace("{tmp}", str(tmp))
    if isinstance(value, Replace):
        return Replace({k: _filled(v, tmp) for k, v in value.items()})
    if isinstance(value, dict):
        return {k: _filled(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, tmp) for v in value]
    return value


def _merged(base: dict, change: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in change.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and not isinstance(value, Replace) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = dict(value) if isinstance(value, Replace) else copy.deepcopy(value)
    return out


def _prepare(case: Case, tmp: Path) -> tuple[Path, list[str]]:
    """Write the case's files and scenario; returns the scenario's path and the ``--set`` arguments."""
    for name, content in case.files.items():
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
    path = tmp / "scenario.yaml"
    overrides: list[str] = []
    if isinstance(case.change, bytes):
        path.write_bytes(case.change)
    elif isinstance(case.change, str):
        path.write_text(case.change)
    elif isinstance(case.change, list):
        path.write_text(yaml.safe_dump(BASES[case.base], sort_keys=False))
        overrides = [_filled(o, tmp) for o in case.change]
    else:
        path.write_text(yaml.safe_dump(_merged(BASES[case.base], _filled(case.change, tmp)), sort_keys=False))
    return path, [a for o in overrides for a in ("--set", o)]


def _assert_one_line_naming(err: str, path: Path, overrides: list[str], words: tuple[str, ...]) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    line = lines[0]
    assert line.startswith("error: "), line
    assert str(path) in line or (overrides and "--set " in line), line
    assert len(line) < 1200, f"{len(line)} characters: {line[:300]}..."
    for word in words:
        assert word in line, line
    return line


def test_the_corpus_is_large_and_covers_every_kind_and_block():
    assert len(CASES) >= 80 and len({c.id for c in CASES}) == len(CASES)
    assert {c.base for c in CASES} >= {"", W, F, D, P}
    prefixes = {c.id.split("-")[0] for c in CASES}
    assert prefixes >= {"file", "top", "kind", "engine", "data", "workload", "training", "federated", "strategy",
                        "attack", "topology", "decentralized", "privacy", "audit", "model", "corpus", "tokenizer",
                        "packing", "pretrain", "outliers", "report", "sweep"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_scenario_is_one_line_exit_2_and_leaves_no_run_folder(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def assert_refused_cleanly(cli, tmp_path: Path, monkeypatch, case: Case) -> None:
    """The corpus's promise for one case, through ``validate`` and ``run``: exit 2, one line naming
    the file (or the ``--set``) and the field, no run folder (neither ``--run-dir`` nor under
    ``runs/``). The other bad-input files (bounds, user data, own claims, overflow) use it too."""
    monkeypatch.chdir(tmp_path)  # the default run folder, runs/<name>-<time>, would land here
    path, overrides = _prepare(case, tmp_path)
    run_dir = tmp_path / "run"
    for command in ("validate", "run"):
        args: list[Any] = [command, path, *overrides]
        if command == "run":
            args += ["--quiet"] if case.default_run_dir else ["--run-dir", run_dir, "--quiet"]
        code, _, err = cli(*args)
        assert code == 2, f"{command}: exit {code}: {err[-2000:]}"
        _assert_one_line_naming(err, path, overrides, case.words)
        assert not run_dir.exists(), command
        assert not any((tmp_path / "runs").glob("*")), command


# --- what the table cannot express: the file system, a run under way, a run folder -----------------


def _tiny_file(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(_merged(TINY_SCENARIO, changes), sort_keys=False))
    return path


def test_a_directory_given_as_the_scenario_is_named_a_directory(cli, tmp_path):
    code, _, err = cli("validate", tmp_path)
    assert code == 2 and "is a directory" in _assert_one_line_naming(err, tmp_path, [], ())


def test_an_unreadable_scenario_file_is_a_user_error(cli, tmp_path, monkeypatch):
    path = _tiny_file(tmp_path)

    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)  # the tests run as root, whom chmod does not stop
    for command in ("validate", "run"):
        code, _, err = cli(command, path, *(["--run-dir", tmp_path / "run"] if command == "run" else []))
        assert code == 2 and "Permission denied" in _assert_one_line_naming(err, path, [], ("cannot read",))
    assert not (tmp_path / "run").exists()


def test_a_run_dir_that_is_a_file_is_refused_and_left_alone(cli, tmp_path):
    target = tmp_path / "taken"
    target.write_text("precious")
    code, _, err = cli("run", _tiny_file(tmp_path), "--run-dir", target, "--quiet")
    assert code == 2 and "not a folder" in _assert_one_line_naming(err, target, [], ("--run-dir",))
    assert target.read_text() == "precious"


def test_a_diverging_loss_stops_the_run_in_one_line_naming_the_step(cli, tmp_path):
    # lr 1e30 is valid for the schema: only training can show that it diverges (in the first chunk,
    # before any checkpoint, so nothing is left behind).
    path = _tiny_file(tmp_path, workload={"lr": 1e30})
    code, _, _ = cli("validate", path)
    assert code == 0
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, path, [], ("workload.lr", "diverged at step", "lower the learning rate"))
    assert code == 2 and "checkpoints" not in line
    assert not (tmp_path / "run").exists()


def test_a_divergence_after_a_checkpoint_keeps_the_folder_and_says_so(cli, tmp_path, monkeypatch):
    from testbed.workloads.classifier.workload import ClassifierWorkload

    honest = ClassifierWorkload.train

    def diverging(self, steps: int) -> dict[str, float]:
        result = honest(self, steps)
        return {"train_loss": math.nan} if self.steps_done > 8 else result

    monkeypatch.setattr(ClassifierWorkload, "train", diverging)
    path = _tiny_file(tmp_path, training={"steps": 12, "eval_every": 2, "checkpoint_every": 4})
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, path, [], ("diverged at step 10", "train_loss = nan", "up to step 8"))
    assert code == 2 and str(tmp_path / "run") in line
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.pt")) == \
        ["ckpt-000000004.pt", "ckpt-000000008.pt"]


def test_a_full_disk_during_a_checkpoint_is_one_line_and_leaves_nothing(cli, tmp_path, monkeypatch):
    import torch

    def full_disk(*args: Any, **kwargs: Any) -> None:  # what torch raises when the write hits ENOSPC
        raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0\n"
                           "PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full_disk)
    path = _tiny_file(tmp_path)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, tmp_path / "run", [], ("cannot write checkpoints/ckpt-", "write failed"))
    assert code == 2 and "no checkpoint had been written yet" in line
    assert not (tmp_path / "run").exists()


def test_an_internal_error_before_any_checkpoint_leaves_no_folder(cli, tmp_path, monkeypatch, capsys):
    from testbed.workloads.classifier.workload import ClassifierWorkload

    def broken(self, steps: int) -> dict[str, float]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(ClassifierWorkload, "train", broken)
    code, _, err = cli("run", _tiny_file(tmp_path), "--run-dir", tmp_path / "run", "--quiet")
    assert code == 1 and "ZeroDivisionError" in err
    assert not (tmp_path / "run").exists()


def test_an_internal_error_after_a_checkpoint_keeps_the_folder_for_resume(cli, tmp_path, monkeypatch):
    from testbed.workloads.classifier.workload import ClassifierWorkload

    honest = ClassifierWorkload.train

    def broken_later(self, steps: int) -> dict[str, float]:
        if self.steps_done >= 4:
            raise ZeroDivisionError("a bug")
        return honest(self, steps)

    monkeypatch.setattr(ClassifierWorkload, "train", broken_later)
    path = _tiny_file(tmp_path, training={"steps": 12, "eval_every": 2, "checkpoint_every": 4})
    code, _, _ = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 1 and (tmp_path / "run" / "checkpoints" / "ckpt-000000004.pt").is_file()


@pytest.mark.parametrize("config", ["name: [unclosed\n", "- a list\n", b"\xff\xfe\x00"], ids=["yaml", "list", "bytes"])
def test_resuming_a_damaged_config_names_it_in_one_line(cli, tmp_path, config):
    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    target = folder / "config.yaml"
    target.write_bytes(config) if isinstance(config, bytes) else target.write_text(config)
    code, _, err = cli("resume", folder, "--quiet")
    assert code == 2
    _assert_one_line_naming(err, target, [], ())


def test_a_refused_write_whose_folder_vanished_is_still_one_line(tmp_path, monkeypatch):
    from testbed.errors import UserError
    from testbed.run import RunFolder

    run = RunFolder.create(tmp_path / "run", {"name": "x"})

    def vanished(self: RunFolder) -> list[Path]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(RunFolder, "_checkpoints", vanished)
    with pytest.raises(UserError, match="cannot write metrics.jsonl: No space left") as raised:
        with run._writing("metrics.jsonl"):
            raise OSError(28, "No space left on device")
    assert raised.value.__context__ is None or not isinstance(raised.value.__context__, PermissionError)


def test_the_bundled_dataset_sizes_used_by_validation_match_the_data():
    from testbed.data.datasets import BUNDLED_SIZES, DATASETS

    for name, (samples, classes) in BUNDLED_SIZES.items():
        data = DATASETS[name]()
        assert (len(data.y), data.num_classes) == (samples, classes), name


@pytest.mark.integration
def test_a_crash_in_native_code_names_its_python_line():
    # A segfault (here a read of address 0 standing in for torch's or gloo's) prints the Python stack.
    crash = ("import ctypes, sys; from testbed import cli; "
             "cli.COMMANDS['list'] = lambda args: ctypes.string_at(0); sys.exit(cli.main(['list']))")
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"})
    assert done.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in done.stderr and "<string>\", line 1" in done.stderr
