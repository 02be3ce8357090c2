"""MusicFlow as a scenario workload (Prajwal et al., ICML 2024): cascaded, masked flow matching.

``variant: musicflow`` trains stage 1 (text -> semantic features) and stage 2 (semantic + text ->
acoustic features) with the masked-prediction objective; ``nomask`` is the same cascade trained
on full masks only (it infills by context replacement); ``single`` is one masked flow from text
straight to acoustic features, with as many layers as both stages together. The clips are the
workload's own synthetic melodies (`musicflow.data`), so ``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/musicflow.yaml --set workload.variant=nomask``.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.musicflow import data, flow, metrics
from testbed.workloads.musicflow.config import MusicFlowConfig, check
from testbed.workloads.musicflow.report import SECTIONS
from testbed.workloads.training import optimizer_step

_CACHE: dict[tuple, tuple] = {}  # data, normaliser and evaluation classifier per (seed, sizes), built once a process


class MusicFlowWorkload(Workload):
    """Cascaded text -> semantic -> acoustic flow matching with masked prediction, and its baselines."""

    name = "musicflow"
    Config = MusicFlowConfig
    config: MusicFlowConfig
    check = staticmethod(check)
    checkpointed = ("stages", "optimizer", "train_rng", "steps_done")
    headline_metric = ("test_infill_fd", "min")
    report_sections = SECTIONS

    def __init__(self, config: MusicFlowConfig, data_config: DataConfig, seeds: SeedTree):
        super().__init__(config, data_config, seeds)
        self.train_set, self.test_set, self.norm, self.classifier = self._shared_parts()
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.stages = self.build_model()
        self.optimizer = torch.optim.Adam(self.stages.parameters(), lr=config.lr)
        self.train_rng = seeds.torch("train")
        self.steps_done = 0

    def _shared_parts(self) -> tuple:
        """The clips, their normaliser and the evaluation classifier: identical for every variant of a seed."""
        key = (self.seeds.integer("data"), self.config.train_clips, self.config.test_clips)
        if key not in _CACHE:
            rng = self.seeds.numpy("data")
            train_labels, train_power = data.make_clips(self.config.train_clips, rng)
            test_labels, test_power = data.make_clips(self.config.test_clips, rng)
            norm = data.fit_normaliser(train_power)
            train_set = data.to_set(train_labels, train_power, norm)
            test_set = data.to_set(test_labels, test_power, norm)
            _CACHE[key] = (train_set, test_set, norm, metrics.train_classifier(train_set, key[0]))
        return _CACHE[key]

    def build_model(self) -> torch.nn.ModuleDict:
        cfg = self.config

        def net(dim: int, cond_dim: int, layers: int) -> flow.FlowNet:
            return flow.FlowNet(dim, cond_dim, data.NUM_CLASSES, data.FRAMES, cfg.hidden, layers, cfg.heads)

        if cfg.variant == "single":
            return torch.nn.ModuleDict({"acoustic": net(data.BANDS, 0, 2 * cfg.layers)})
        return torch.nn.ModuleDict({"semantic": net(12, 0, cfg.layers), "acoustic": net(data.BANDS, 12, cfg.layers)})

    @property
    def cascade(self) -> bool:
        return "semantic" in self.stages

    def _stage_loss(self, name: str, index: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        cfg, clips = self.config, self.train_set
        target = clips.semantic[index] if name == "semantic" else clips.acoustic[index]
        cond = clips.semantic[index] if name == "acoustic" and self.cascade else None
        full_prob = 1.0 if cfg.variant == "nomask" else cfg.full_mask_prob
        mask = flow.training_mask(len(index), data.FRAMES, full_prob, cfg.span_min, self.train_rng)
        stage = cast(flow.FlowNet, self.stages[name])  # build_model fills the dict with FlowNets
        return flow.masked_fm_loss(stage, target, text, mask, cond, cfg.sigma_min, self.train_rng)

    def train(self, steps: int) -> dict[str, float]:
        self.stages.train()
        totals: dict[str, float] = {}
        for _ in range(steps):
            index = torch.randint(0, len(self.train_set.labels), (self.config.batch_size,), generator=self.train_rng)
            dropped = torch.rand(len(index), generator=self.train_rng) < self.config.text_dropout
            text = torch.where(dropped, flow.NULL_TEXT, self.train_set.labels[index])
            losses = {name: self._stage_loss(name, index, text) for name in self.stages}
            optimizer_step(self.optimizer, cast(torch.Tensor, sum(losses.values())))  # a sum of tensors
            for name, loss in losses.items():
                totals[f"train_loss_{name}"] = totals.get(f"train_loss_{name}", 0.0) + loss.item()
            self.steps_done += 1
        return {key: value / steps for key, value in totals.items()}

    def _sample(self, name: str, text: torch.Tensor, steps: int, generator: torch.Generator, **kwargs) -> torch.Tensor:
        stage = cast(flow.FlowNet, self.stages[name])  # build_model fills the dict with FlowNets
        return flow.euler_sample(stage, text, steps, generator, guidance=self.config.guidance,
                                 sigma_min=self.config.sigma_min, **kwargs)

    def generate(self, labels: torch.Tensor, steps: int, generator: torch.Generator) -> torch.Tensor:
        """Text-to-music: acoustic features for attribute classes ``labels`` (cascade: through stage 1)."""
        self.stages.eval()
        cond = self._sample("semantic", labels, steps, generator) if self.cascade else None
        return self._sample("acoustic", labels, steps, generator, cond=cond)

    def infill(self, clips: data.MusicSet, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-shot infilling of the middle frames of ``clips``: (acoustic features, mask)."""
        self.stages.eval()
        mask = metrics.infill_mask(len(clips.labels), data.FRAMES, self.config.infill_fraction)
        steps, replace = self.config.sample_steps, self.config.variant == "nomask"
        cond = None
        if self.cascade:
            cond = self._sample("semantic", clips.labels, steps, generator, mask=mask, known=clips.semantic,
                                replace=replace)
        acoustic = self._sample("acoustic", clips.labels, steps, generator, mask=mask, known=clips.acoustic,
                                cond=cond, replace=replace)
        return acoustic, mask

    def follow(self, clips: data.MusicSet, generator: torch.Generator) -> dict[str, float]:
        """Stage 2 conditioned on held-out semantic features: chroma agreement with them, and with another clip's."""
        self.stages.eval()
        acoustic = self._sample("acoustic", clips.labels, self.config.sample_steps, generator, cond=clips.semantic)
        return {"follow_acc": metrics.chroma_agreement(acoustic, clips.semantic, self.norm),
                "follow_chance": metrics.chroma_agreement(acoustic, clips.semantic.roll(1, 0), self.norm)}

    def evaluate(self) -> dict[str, float]:
        test, result = self.test_set, {}
        for steps in sorted(set(self.config.fd_steps) | {self.config.sample_steps}):
            generated = self.generate(test.labels, steps, self.seeds.torch(f"eval.generate.{steps}"))
            scores = metrics.quality(self.classifier, generated, test.labels, test.acoustic)
            result[f"test_fd_{steps}"] = scores["fd"]
            if steps == self.config.sample_steps:
                result.update(test_fd=scores["fd"], test_text_adherence=scores["text_adherence"])
        result.update(self.infill_scores())
        if self.cascade:
            result.update({f"test_{k}": v for k, v in self.follow(test, self.seeds.torch("eval.follow")).items()})
        return result

    def infill_scores(self) -> dict[str, float]:
        """Infilling of the held-out clips by distribution (FD of the segments against real training clips,
        mean over draws) and against their own truth (one draw's MSE and pitch, the best draw's MSE),
        with the copy-the-nearest-frame baseline and the real held-out clips as references."""
        test, reference, generator = self.test_set, self.train_set.acoustic, self.seeds.torch("eval.infill")
        # the draws share one generator, so draw 0 is the single draw the MSE was always measured on
        draws = [self.infill(test, generator)[0] for _ in range(self.config.infill_draws)]
        mask = metrics.infill_mask(len(test.labels), data.FRAMES, self.config.infill_fraction)
        copied = metrics.copy_nearest(test.acoustic, mask)

        def fd(clips: torch.Tensor) -> float:
            return metrics.segment_fd(self.classifier, clips, reference, mask)

        return {"test_infill_fd": sum(map(fd, draws)) / len(draws),
                "test_infill_mse": metrics.masked_mse(draws[0], test.acoustic, mask),
                "test_infill_mse_best": metrics.best_of_mse(draws, test.acoustic, mask),
                "test_infill_pitch_acc": metrics.chroma_agreement(draws[0], test.semantic, self.norm, mask),
                "test_infill_fd_copy": fd(copied), "test_infill_fd_real": fd(test.acoustic),
                "test_infill_mse_copy": metrics.masked_mse(copied, test.acoustic, mask),
                "test_infill_pitch_copy": metrics.chroma_agreement(copied, test.semantic, self.norm, mask)}

    def artifacts(self) -> dict[str, np.ndarray]:
        test, shown = self.test_set, 4
        steps = sorted(self.config.fd_steps)
        fds = [metrics.quality(self.classifier, self.generate(test.labels, n, self.seeds.torch(f"eval.generate.{n}")),
                               test.labels, test.acoustic)["fd"] for n in steps]
        subset = data.MusicSet(test.labels[:shown], test.acoustic[:shown], test.semantic[:shown])
        infilled, mask = self.infill(subset, self.seeds.torch("eval.infill"))
        arrays = {"fd_steps": np.array(steps), "fd": np.array(fds), "labels": test.labels[:shown].numpy(),
                  "real": test.acoustic[:shown].numpy(), "infilled": infilled.numpy(), "infill_mask": mask[0].numpy(),
                  "generated": self.generate(test.labels[:shown], self.config.sample_steps,
                                             self.seeds.torch("eval.artifacts")).numpy()}
        if self.cascade:
            followed = self._sample("acoustic", subset.labels, self.config.sample_steps,
                                    self.seeds.torch("eval.follow"), cond=subset.semantic)
            arrays["follow_target"] = subset.semantic.argmax(-1).numpy()
            arrays["follow_generated"] = data.chroma_of(followed, self.norm).argmax(-1).numpy()
        return arrays
