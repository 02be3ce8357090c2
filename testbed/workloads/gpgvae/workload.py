"""GPGVAE as a scenario workload (Yu, Li, Leng, Liao, ICML 2024): ``variant: gpgvae | ungated | random``.

Stage 1 pretrains the interaction-type classifier on games over random BA/ER/WS graphs; stage 2
trains the graph VAE on the observed actions of ``graphs_per_sign`` complement and as many
substitute games (unsupervised: the true graphs are used only to score the edge posterior). The
variants differ only in the prior of the KL term: ``gpgvae`` gates ``(1 +- corr) / 2`` by the
classifier's reading of each graph, ``ungated`` always uses the complement prior ``(1 + corr) / 2``,
``random`` uses 0.5. ``estimator: relaxed | score`` picks the Monte Carlo gradient estimator.
The games are synthetic, so ``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/gpgvae.yaml --no-sweep --set workload.estimator=score``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.gpgvae import games, model
from testbed.workloads.gpgvae.config import GPGVAEConfig, check
from testbed.workloads.gpgvae.report import SECTIONS
from testbed.workloads.training import optimizer_step

GATES = {"ungated": "complement", "random": "random"}  # fixed gates of the baselines


def mean_auc(scores: np.ndarray, adjacency: np.ndarray) -> float:
    """ROC-AUC of pair scores against the true edges (pairs i < j), averaged over graphs."""
    upper = np.triu_indices(adjacency.shape[-1], 1)
    return float(np.mean([roc_auc_score(a[upper], s[upper]) for s, a in zip(scores, adjacency)]))


class GPGVAEWorkload(Workload):
    """Graph VAE over the edges of network games, with the data-dependent gated prior."""

    name = "gpgvae"
    Config = GPGVAEConfig
    config: GPGVAEConfig
    check = staticmethod(check)
    checkpointed = ("encoder", "slope", "log_scale", "optimizer", "baseline", "train_rng", "steps_done")
    headline_metric = ("test_auc_substitute", "max")
    report_sections = SECTIONS

    def __init__(self, config: GPGVAEConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self._build_data(config, seeds)
        self.classifier = self._pretrain_classifier(config, seeds)
        self.features = torch.from_numpy(np.array([games.spectrum_features(x) for x in self.games.actions]))
        self.predicted_complement = model.predict_complement(self.classifier, self.features).numpy()
        gate = GATES.get(config.variant) or np.where(self.predicted_complement, "complement", "substitute")
        self.prior = torch.from_numpy(games.gated_prior(self.corr, gate)).float()
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.encoder = self.build_model()
        count = len(self.actions)
        self.slope = torch.zeros(count, requires_grad=True)  # per-graph best-response slope of the decoder
        self.log_scale = torch.full((count,), float(np.log(self.actions.std())), requires_grad=True)
        # The per-graph decoder scalars learn ten times faster than the shared encoder.
        groups: list[dict[str, Any]] = [{"params": self.encoder.parameters()},
                                        {"params": [self.slope, self.log_scale], "lr": 10 * config.lr}]
        self.optimizer = torch.optim.Adam(groups, lr=config.lr)
        # Moving average of each graph's NLL, started at its value under the initial decoder (slope 0,
        # where the NLL does not depend on A).
        with torch.no_grad():
            self.baseline = model.best_response_nll(self.actions, torch.zeros_like(self.prior), self.slope,
                                                    self.log_scale)
        self.train_rng = seeds.torch("train")
        self.steps_done = 0

    def _build_data(self, config: GPGVAEConfig, seeds: SeedTree) -> None:
        signs = [config.beta, -config.beta] * config.graphs_per_sign
        self.games = games.game_set(signs, config.nodes, config.games, config.alpha, config.snr, config.graph,
                                    seeds.numpy("data.games"))
        self.actions = torch.from_numpy(self.games.actions)
        self.corr = games.correlation(self.games.actions)

    def _pretrain_classifier(self, config: GPGVAEConfig, seeds: SeedTree) -> model.TypeClassifier:
        features, labels = games.pretraining_set(config.pretrain_graphs, config.games, config.alpha, config.snr,
                                                 seeds.numpy("data.pretrain"))
        with torch.random.fork_rng():
            return model.train_type_classifier(torch.from_numpy(features), torch.from_numpy(labels),
                                               config.pretrain_steps, seeds.integer("classifier.init"))

    def build_model(self) -> torch.nn.Module:
        return model.EdgeEncoder(self.config.games, self.config.width)

    def _loss(self, index: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.encoder(self.actions[index])
        loss, nll = model.elbo_loss(logits, self.actions[index], self.prior[index], self.slope[index],
                                    self.log_scale[index], self.config.estimator, self.config.kl_weight,
                                    self.config.tau, self.baseline[index], generator)
        return loss, nll

    def train(self, steps: int) -> dict[str, float]:
        self.encoder.train()
        total, count = 0.0, len(self.actions)
        for _ in range(steps):
            index = torch.randperm(count, generator=self.train_rng)[: self.config.batch_size]
            loss, nll = self._loss(index, self.train_rng)
            total += optimizer_step(self.optimizer, loss)
            decay = self.config.baseline_decay
            self.baseline[index] = decay * self.baseline[index] + (1 - decay) * nll
            self.steps_done += 1
        return {"train_loss": total / steps}

    def edge_probabilities(self) -> np.ndarray:
        """q(A_ij = 1 | X) of every graph."""
        self.encoder.eval()
        with torch.no_grad():
            return torch.sigmoid(self.encoder(self.actions)).numpy()

    def gradient_spread(self) -> float:
        """Std over samples of the estimator's gradient w.r.t. the edge logits (its Monte Carlo noise)."""
        index = torch.arange(min(self.config.batch_size, len(self.actions)))
        logits = self.encoder(self.actions[index]).detach().requires_grad_(True)
        baseline = self.baseline[index]
        generator, grads = self.seeds.torch("eval.gradients"), []
        for _ in range(self.config.grad_samples):
            loss, _ = model.elbo_loss(logits, self.actions[index], self.prior[index], self.slope[index].detach(),
                                      self.log_scale[index].detach(), self.config.estimator, self.config.kl_weight,
                                      self.config.tau, baseline, generator)
            grads.append(torch.autograd.grad(loss, logits)[0][:, model.upper_mask(logits.shape[-1])])
        return float(torch.stack(grads).std(0).mean())

    def evaluate(self) -> dict[str, float]:
        probabilities, truth = self.edge_probabilities(), self.games.adjacency
        complement = self.games.beta > 0
        metrics = {}
        for label, mask in (("complement", complement), ("substitute", ~complement)):
            metrics[f"test_auc_{label}"] = mean_auc(probabilities[mask], truth[mask])
            metrics[f"test_prior_auc_{label}"] = mean_auc(self.prior.numpy()[mask], truth[mask])
            metrics[f"test_corr_auc_{label}"] = mean_auc(np.abs(self.corr[mask]), truth[mask])
        metrics["test_auc"] = (metrics["test_auc_complement"] + metrics["test_auc_substitute"]) / 2
        metrics["test_type_accuracy"] = float(np.mean(self.predicted_complement == complement))
        metrics["test_grad_std"] = self.gradient_spread()
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        return {"probabilities": self.edge_probabilities(), "prior": self.prior.numpy(),
                "adjacency": self.games.adjacency, "corr": self.corr.astype(np.float32), "beta": self.games.beta,
                "slope": self.slope.detach().numpy()}
