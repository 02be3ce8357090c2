"""PPAE as a scenario workload (Xu et al., ICML 2024): prompt-guided precise audio editing, in miniature.

Training fits a small text-conditioned audio diffusion model on synthetic clips of labelled events
(the same for every variant: PPAE is training-free). Evaluation edits held-out clips, swapping one
event's word in the caption for an event that is not in the clip, with ``variant: ppae`` (attention
injection, attention mask, local then global denoising), ``regenerate`` (the edited caption from the
same inverted noise) or ``sdedit`` (partial noising). The data are the workload's own synthetic
clips (`ppae.data`), so ``data.dataset`` is ignored. Ablations of PPAE's local blend:
``blend: false`` (attention injection only) and ``mask: oracle`` (the blend with the edited event's
true frames instead of the attention mask).

Example: ``testbed run scenarios/workloads/ppae.yaml --set workload.variant=sdedit``;
``testbed run scenarios/workloads/ppae.yaml --no-sweep --set workload.blend=false``.
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.ppae import data, editing, metrics
from testbed.workloads.ppae.config import PPAEConfig, check
from testbed.workloads.ppae.model import Denoiser, alpha_bars, diffusion_loss
from testbed.workloads.ppae.report import SECTIONS
from testbed.workloads.training import optimizer_step

_CACHE: dict[tuple, tuple] = {}  # clips, scaling and event classifier per (seed, sizes), built once a process


class PPAEWorkload(Workload):
    """Cross-attention-localised, injected and blended editing of audio against regeneration and SDEdit."""

    name = "ppae"
    Config = PPAEConfig
    config: PPAEConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "train_rng", "steps_done")
    headline_metric = ("test_lsd_outside", "min")
    report_sections = SECTIONS

    def __init__(self, config: PPAEConfig, data_config: DataConfig, seeds: SeedTree):
        super().__init__(config, data_config, seeds)
        self.train_set, self.test_set, self.log_scale, self.classifier = self._shared_parts()
        self.abar = alpha_bars(config.diffusion_steps)
        self.timesteps = editing.ddim_timesteps(config.diffusion_steps, config.sample_steps)
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.train_rng = seeds.torch("train")
        self.edits = self._edits()
        self.steps_done = 0

    def _shared_parts(self) -> tuple:
        """Clips, feature scaling and the event classifier: identical for every variant of a seed."""
        key = (self.seeds.integer("data"), self.config.train_clips, self.config.test_clips)
        if key not in _CACHE:
            rng = self.seeds.numpy("data")
            train_pow, train_cap, train_frames = data.make_events(self.config.train_clips, rng)
            test_pow, test_cap, test_frames = data.make_events(self.config.test_clips, rng)
            # Features (ln power - mean) / (2 std): events peak near 4 against unit noise.
            mean, scale = float(train_pow.mean()), 2 * float(train_pow.std())
            train = data.EventSet(data.standardise(train_pow, mean, scale), train_cap, train_frames)
            test = data.EventSet(data.standardise(test_pow, mean, scale), test_cap, test_frames)
            _CACHE[key] = (train, test, scale, metrics.train_classifier(train, key[0]))
        return _CACHE[key]

    def _edits(self) -> dict[str, torch.Tensor]:
        """One fixed edit per held-out clip: caption position 1's event swapped for an absent one."""
        captions = self.test_set.captions
        rng = self.seeds.numpy("edits")
        source_token = captions[:, 1]
        target_token = torch.tensor([int(rng.choice([k for k in range(1, len(data.EVENTS) + 1) if k not in row]))
                                     for row in captions.tolist()])
        target = captions.clone()
        target[:, 1] = target_token if self.config.operation == "replace" else source_token
        truth = (self.test_set.frames == (source_token - 1)[:, None]).float()
        return {"target": target, "target_token": target[:, 1], "truth": truth,
                "position": torch.ones_like(source_token)}

    def build_model(self) -> Denoiser:
        cfg = self.config
        return Denoiser(cfg.hidden, cfg.heads, cfg.layers, cfg.diffusion_steps)

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        total = 0.0
        for _ in range(steps):
            index = torch.randint(0, len(self.train_set.captions), (self.config.batch_size,), generator=self.train_rng)
            loss = diffusion_loss(self.model, self.train_set.features[index], self.train_set.captions[index],
                                  self.abar, self.train_rng)
            total += optimizer_step(self.optimizer, loss)
            self.steps_done += 1
        return {"train_loss": total / steps}

    def invert(self) -> tuple[dict, dict]:
        """DDIM inversion of every held-out clip under its own caption: latents and cross-attention maps."""
        self.model.eval()
        return editing.invert(self.model, self.test_set.features, self.test_set.captions, self.abar, self.timesteps)

    def edit(self, variant: str, inverted: tuple[dict, dict]) -> tuple[torch.Tensor, torch.Tensor]:
        """Every held-out clip edited by ``variant``: (edited features, the mask of the edit: the attention
        mask, or with ``mask: oracle`` the edited event's true frames)."""
        cfg, x0, source, edits = self.config, self.test_set.features, self.test_set.captions, self.edits
        latents, maps = inverted
        mask, _ = editing.attention_mask(maps, edits["position"], cfg.threshold)
        if variant == "regenerate":
            return editing.denoise(self.model, latents[self.timesteps[0]], edits["target"], self.abar,
                                   self.timesteps), mask
        if variant == "sdedit":
            return editing.sdedit(self.model, x0, edits["target"], self.abar, self.timesteps, cfg.sdedit_strength,
                                  self.seeds.torch("eval.sdedit")), mask
        scale = cfg.reweight_scale if cfg.operation == "reweight" else 1.0
        return editing.ppae_edit(self.model, x0, source, edits["target"], edits["position"], self.abar,
                                 self.timesteps, inject_frac=cfg.inject_frac, global_frac=cfg.global_frac,
                                 threshold=cfg.threshold, scale=scale, inverted=inverted, blend=cfg.blend,
                                 mask=edits["truth"] if cfg.mask == "oracle" else None)

    def localisation(self, maps: dict) -> dict[str, float]:
        """IoU of the attention mask with the edited event, and of the other caption token's mask (ablation)."""
        truth, position = self.edits["truth"], self.edits["position"]
        own, _ = editing.attention_mask(maps, position, self.config.threshold)
        other, _ = editing.attention_mask(maps, position + 1, self.config.threshold)
        return {"mask_iou": float(metrics.iou(own, truth).mean()),
                "mask_iou_other_token": float(metrics.iou(other, truth).mean())}

    def evaluate(self) -> dict[str, float]:
        inverted = self.invert()
        edited, _ = self.edit(self.config.variant, inverted)
        x0, truth = self.test_set.features, self.edits["truth"]
        result = {f"test_{k}": v for k, v in self.localisation(inverted[1]).items()}
        result["test_lsd_outside"] = float(metrics.lsd_db(edited, x0, 1 - truth, self.log_scale).mean())
        result["test_lsd_inside"] = float(metrics.lsd_db(edited, x0, truth, self.log_scale).mean())
        prob, hit = metrics.edit_success(self.classifier, edited, truth, self.edits["target_token"])
        result.update(test_edit_success=float(prob.mean()), test_edit_accuracy=float(hit.mean()))
        return result

    def artifacts(self) -> dict[str, np.ndarray]:
        inverted = self.invert()
        edited, mask = self.edit(self.config.variant, inverted)
        _, relative = editing.attention_mask(inverted[1], self.edits["position"], self.config.threshold)
        shown = slice(0, 4)
        return {"source": self.test_set.features[shown].numpy(), "edited": edited[shown].numpy(),
                "mask": mask[shown].numpy(), "attention": relative[shown].numpy(),
                "truth": self.edits["truth"][shown].numpy(), "source_caption": self.test_set.captions[shown].numpy(),
                "target_caption": self.edits["target"][shown].numpy(),
                "iou": metrics.iou(mask, self.edits["truth"]).numpy()}
