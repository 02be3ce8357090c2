"""Workload ``strwae``: invariant representations of lit digits with few labels (StrWAE vs baselines).

``variant: strwae`` trains the structured WAE of `objectives.strwae_loss`; ``wae`` a plain WAE-MMD;
``vae_hsic`` a light-conditioned VAE with an ad hoc HSIC penalty. The data are always the lit
digits of `testbed.workloads.strwae.data` (``data.dataset`` must be ``digits``). Metrics: see
`testbed.workloads.strwae.metrics`; the headline is the light's predictability from the
representation (``nuisance_accuracy_lr``, lower is better, chance 0.25).
"""

from __future__ import annotations

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.classifier.model import BatchStream
from testbed.workloads.strwae.config import StrWAEConfig, check
from testbed.workloads.strwae.data import NUM_LIGHTS, lit_digits
from testbed.workloads.strwae.metrics import Judge, probe_accuracies
from testbed.workloads.strwae.models import NUM_DIGITS, HsicVAE, PlainWAE, StrWAE, one_hot
from testbed.workloads.strwae.objectives import Batch, PenaltyWeights, strwae_loss, vae_loss, wae_loss
from testbed.workloads.strwae.report import GenerationSection, RepresentationSection
from testbed.workloads.training import optimizer_step

EMBEDDING_POINTS = 800
RELIT_EXAMPLES = 6


class StrWAEWorkload(Workload):
    """Structured WAE (StrWAE) against a plain WAE and an HSIC-penalised VAE on lit digits."""

    name = "strwae"
    Config = StrWAEConfig
    config: StrWAEConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "stream", "noise")
    headline_metric = ("nuisance_accuracy_lr", "min")
    report_sections = [RepresentationSection(), GenerationSection()]

    def __init__(self, config: StrWAEConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.train_set, self.test_set = lit_digits(data.test_fraction, config.labels_per_class,
                                                   seeds.numpy("data.split"))
        self.labelled_rows = torch.from_numpy(np.flatnonzero(self.train_set.labelled))
        torch.manual_seed(seeds.integer("model.init"))
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.stream = BatchStream(len(self.train_set.y), config.batch_size, seeds.torch("data.batches"))
        self.noise = seeds.torch("train.noise")  # labelled batches, prior samples, VAE noise
        self.weights = PenaltyWeights(config.prior_weight, config.label_marginal_weight,
                                      config.cross_entropy_weight, config.independence_weight,
                                      config.invariance_weight)
        self.tensors = {name: torch.from_numpy(getattr(self.train_set, name)) for name in ("x", "y", "s")}
        self._judge: Judge | None = None

    def build_model(self) -> StrWAE | PlainWAE | HsicVAE:
        config = self.config
        if config.variant == "strwae":
            return StrWAE(config.style_dim, config.representation_dim, config.hidden)
        dim = config.representation_dim
        return PlainWAE(dim, config.hidden) if config.variant == "wae" else HsicVAE(dim, config.hidden)

    @property
    def prior_dim(self) -> int:
        """Dimension of the latent drawn from N(0, I): StrWAE's style Z, the others' whole z."""
        return self.config.style_dim if self.config.variant == "strwae" else self.config.representation_dim

    def _batch(self, rows: torch.Tensor) -> Batch:
        return Batch(self.tensors["x"][rows], self.tensors["y"][rows], self.tensors["s"][rows])

    def _loss(self) -> tuple[torch.Tensor, dict[str, float]]:
        config, batch = self.config, self._batch(self.stream.next())
        if config.variant == "strwae":
            assert isinstance(self.model, StrWAE)  # build_model's model for the variant
            picks = torch.randint(len(self.labelled_rows), (config.labelled_batch_size,), generator=self.noise)
            labelled = self._batch(self.labelled_rows[picks])
            prior = torch.randn(len(batch.x) + len(labelled.x), self.prior_dim, generator=self.noise)
            return strwae_loss(self.model, batch, labelled, prior, self.weights)
        noise = torch.randn(len(batch.x), self.prior_dim, generator=self.noise)
        if config.variant == "wae":
            assert isinstance(self.model, PlainWAE)  # build_model's model for the variant
            return wae_loss(self.model, batch, noise, self.weights)
        assert isinstance(self.model, HsicVAE)  # build_model's model for the variant
        return vae_loss(self.model, batch, noise, self.weights)

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        sums: dict[str, float] = {}
        for _ in range(steps):
            loss, parts = self._loss()
            for key, value in {"train_loss": optimizer_step(self.optimizer, loss), **parts}.items():
                sums[key] = sums.get(key, 0.0) + value
        return {key: value / steps for key, value in sums.items()}

    @torch.no_grad()
    def decode(self, x: torch.Tensor, light: torch.Tensor) -> torch.Tensor:
        """Images rebuilt from their representation under ``light`` (the plain WAE ignores the light)."""
        if isinstance(self.model, StrWAE):
            return self.model.decode(self.model.represent(x), light)
        if isinstance(self.model, HsicVAE):
            return self.model.decode(self.model.posterior(x)[0], light)
        return self.model.decoder(self.model.encoder(x))

    @torch.no_grad()
    def sample(self, digits: torch.Tensor, lights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Decode prior samples with the requested digit and light (as far as the variant can)."""
        z = torch.randn(len(digits), self.prior_dim, generator=generator)
        if isinstance(self.model, StrWAE):
            return self.model.decode(self.model.identity_code(z, one_hot(digits, NUM_DIGITS)), lights)
        return self.model.decode(z, lights) if isinstance(self.model, HsicVAE) else self.model.decoder(z)

    @property
    def judge(self) -> Judge:
        """The generation judge, fitted on first use (deterministic, so never saved in the state)."""
        if self._judge is None:
            self._judge = Judge(self.train_set)
        return self._judge

    def evaluate(self) -> dict[str, float]:
        # One BLAS thread for the scikit-learn probes: several threads on a busy machine are
        # up to ten times slower, and one thread keeps the floats independent of the machine.
        with threadpool_limits(limits=1), torch.no_grad():
            return self._evaluate()

    def _evaluate(self) -> dict[str, float]:
        self.model.eval()
        train_x, test_x = self.tensors["x"], torch.from_numpy(self.test_set.x)
        test_s = torch.from_numpy(self.test_set.s)
        train_features, test_features = (self.model.represent(x).numpy() for x in (train_x, test_x))
        metrics = probe_accuracies(train_features, test_features, self.train_set, self.test_set,
                                   self.seeds.integer("eval.forest"))
        metrics["test_recon_mse"] = float((self.decode(test_x, test_s) - test_x).pow(2).mean())
        if isinstance(self.model, StrWAE):
            logits = self.model.encode(test_x)[1]
            metrics["classifier_accuracy"] = float((logits.argmax(1).numpy() == self.test_set.y).mean())
        if not isinstance(self.model, PlainWAE):
            metrics.update(self._generation_metrics(test_x))
        return metrics

    def _generation_metrics(self, test_x: torch.Tensor) -> dict[str, float]:
        count = self.config.generated_samples
        digits, lights = torch.arange(count) % NUM_DIGITS, (torch.arange(count) // NUM_DIGITS) % NUM_LIGHTS
        images = self.sample(digits, lights, self.seeds.torch("eval.generate")).numpy()
        new_light = (torch.from_numpy(self.test_set.s) + 1 + torch.arange(len(test_x)) % 3) % NUM_LIGHTS
        relit = self.decode(test_x, new_light).numpy()
        metrics = {"gen_light_accuracy": self.judge.light_accuracy(images, lights.numpy()),
                   "relight_light_accuracy": self.judge.light_accuracy(relit, new_light.numpy()),
                   "relight_digit_accuracy": self.judge.digit_accuracy(relit, self.test_set.y)}
        if isinstance(self.model, StrWAE):
            metrics["gen_digit_accuracy"] = self.judge.digit_accuracy(images, digits.numpy())
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        with threadpool_limits(limits=1), torch.no_grad():
            return self._artifacts()

    def _artifacts(self) -> dict[str, np.ndarray]:
        self.model.eval()
        generator = self.seeds.torch("eval.artifacts")
        grid_digits = torch.arange(NUM_DIGITS).repeat_interleave(NUM_LIGHTS)
        grid_lights = torch.arange(NUM_LIGHTS).repeat(NUM_DIGITS)
        kind = {"strwae": "digit and light", "vae_hsic": "light only", "wae": "unconditional"}[self.config.variant]
        generated = self.sample(grid_digits, grid_lights, generator).view(NUM_DIGITS, NUM_LIGHTS, 8, 8)
        test_x = torch.from_numpy(self.test_set.x[np.arange(RELIT_EXAMPLES) * NUM_LIGHTS])  # distinct digits
        columns = [test_x] + ([self.decode(test_x, torch.full((len(test_x),), light)) for light in range(NUM_LIGHTS)]
                              if kind != "unconditional"
                              else [self.decode(test_x, torch.zeros(len(test_x), dtype=torch.long))])
        features = self.model.represent(torch.from_numpy(self.test_set.x[:EMBEDDING_POINTS])).numpy()
        centred = features - features.mean(axis=0)
        projection = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
        return {"generated": generated.numpy(), "generated_kind": np.array(kind),
                "relit": torch.stack(columns, dim=1).view(len(test_x), len(columns), 8, 8).numpy(),
                "embedding": projection, "embedding_s": self.test_set.s[:EMBEDDING_POINTS],
                "embedding_y": self.test_set.y[:EMBEDDING_POINTS]}
