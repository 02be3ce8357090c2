"""GPGVAE as a scenario workload (Yu, Li, Leng, Liao, ICML 2024): ``variant: gpgvae | ungated | random``.

Stage 1 pretrains the interaction-type classifier on games over random BA/ER/WS graphs; stage 2
trains the graph VAE on the observed actions of ``graphs_per_sign`` complement and as many
substitute games (unsupervised: the true graphs are used only to score the edge posterior). The
variants differ only in the prior of the KL term: ``gpgvae`` gates ``(1 +- corr) / 2`` by the
classifier's reading of each graph, ``ungated`` always uses the complement prior ``(1 + corr) / 2``,
``random`` uses 0.5. ``estimator: relaxed | score`` picks the Monte Carlo gradient estimator.
The decoder is the paper's GCN over the sampled graph on latent node embeddings Z ~ q(Z | X);
``decoder: best_response`` is an ablation whose likelihood reads the observed actions through the
generator's best-response map. The games are synthetic, so ``data.dataset`` is ignored.

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
    checkpointed = ("encoder", "node_encoder", "decoder", "slope", "log_scale", "optimizer", "baseline", "train_rng",
                    "steps_done")
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
            self.node_encoder = model.NodeEncoder(config.games, config.width)
            self.decoder = model.GCNDecoder(config.games, config.width, config.decoder_layers)
        count = len(self.actions)
        self.slope = torch.zeros(count, requires_grad=True)  # per-graph slope of the best-response ablation
        self.log_scale = torch.full((count,), float(np.log(self.actions.std())), requires_grad=True)
        networks = [*self.encoder.parameters(), *self.node_encoder.parameters(), *self.decoder.parameters()]
        # The per-graph decoder scalars learn ten times faster than the shared networks.
        groups: list[dict[str, Any]] = [{"params": networks},
                                        {"params": [self.slope, self.log_scale], "lr": 10 * config.lr}]
        self.optimizer = torch.optim.Adam(groups, lr=config.lr)
        # Moving average of each graph's NLL, started at its value under the initial decoder on the empty graph.
        with torch.no_grad():
            nll_of, _ = self._decoder_nll(torch.arange(count), seeds.torch("baseline.init"))
            self.baseline = nll_of(torch.zeros_like(self.prior))
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
        return model.EdgeEncoder(self.config.games, self.config.width, pair_correlation=self.config.pair_correlation)

    def _decoder_nll(self, index: torch.Tensor, generator: torch.Generator,
                     detach: bool = False) -> tuple[model.NLLOfGraph, torch.Tensor]:
        """The decoder's NLL of graphs ``index`` as a function of a sample of A, and KL_Z per graph.

        GCN decoder: Z ~ q(Z | X) is drawn once here (unit variance, reparametrised), so only Z, not
        the observed actions, reaches the decoder; the actions are only what it must reconstruct.
        """
        actions, log_scale, slope = self.actions[index], self.log_scale[index], self.slope[index]
        if detach:
            log_scale, slope = log_scale.detach(), slope.detach()
        if self.config.decoder == "best_response":
            return (lambda graph: model.best_response_nll(actions, graph, slope, log_scale)), torch.zeros(len(index))
        mu = self.node_encoder(actions)
        latent = mu + torch.randn(mu.shape, generator=generator)
        return (lambda graph: model.gaussian_nll(actions, self.decoder(latent, graph), log_scale)), model.latent_kl(mu)

    def _loss(self, index: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.encoder(self.actions[index])
        nll_of, latent_kl = self._decoder_nll(index, generator)
        loss, nll = model.elbo_loss(logits, nll_of, self.prior[index], self.config.estimator, self.config.kl_weight,
                                    self.config.tau, self.baseline[index], generator)
        return loss + self.config.latent_kl_weight * latent_kl.mean(), nll

    def train(self, steps: int) -> dict[str, float]:
        for network in (self.encoder, self.node_encoder, self.decoder):
            network.train()
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
            with torch.no_grad():  # the decoder is held fixed: only the spread w.r.t. the logits is measured
                nll_of, _ = self._decoder_nll(index, generator, detach=True)
            loss, _ = model.elbo_loss(logits, nll_of, self.prior[index], self.config.estimator, self.config.kl_weight,
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
