"""STC spiking neurons as a scenario workload (Wang & Yu, ICML 2024): ``variant: stc | lif | plif | if``.

``task: predict`` trains the spiking network to predict moving digits (``data.dataset:
moving_digits``, `testbed.data.moving_digits`): ``frames_in`` true frames, then the
rest of the 10-frame sequence in closed loop, scored by MSE, MAE, SSIM and PSNR of the future
frames. ``task: recall`` is the delayed-recall probe of the temporal pathway: reproduce the first
frame when a cue arrives ``delay`` steps later. As a `FederatedWorkload` the same predictor trains
on federated clients (FedAvg over clients that each hold different digits, ``task: predict``).

Example: ``testbed run scenarios/workloads/stc.yaml --no-sweep --set workload.variant=lif``.
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.config import StrictModel
from testbed.data.config import DataConfig
from testbed.data.datasets import Dataset, train_test_split
from testbed.data.select import load_selected
from testbed.seeding import SeedTree
from testbed.workloads.base import FederatedWorkload
from testbed.workloads.classifier.model import BatchStream
from testbed.workloads.stc.config import STCConfig, check
from testbed.workloads.stc.data import recall_batch
from testbed.workloads.stc.metrics import frame_metrics
from testbed.workloads.stc.network import SpikingPredictor
from testbed.workloads.stc.report import SECTIONS
from testbed.workloads.training import model_device, optimizer_step

SHOWN = 4  # test sequences kept for the report


def build_predictor(config: STCConfig) -> SpikingPredictor:
    """The network; parameters are drawn from torch's global RNG (seed it first)."""
    return SpikingPredictor(config.variant, config.channels, config.layers, config.frames_in, config.groups,
                            config.gate_groups)


def prediction_loss(model: SpikingPredictor, frames: torch.Tensor) -> torch.Tensor:
    """MSE of every next-frame prediction of a batch of sequences (the paper's training loss)."""
    return torch.nn.functional.mse_loss(model.predict(frames, model.frames_in), frames[:, 1:])


def future_metrics(model: SpikingPredictor, frames: torch.Tensor) -> dict[str, float]:
    """MSE, MAE, SSIM, PSNR of the closed-loop future frames (after ``frames_in``)."""
    model.eval()
    with torch.no_grad():
        predicted = model.predict(frames, model.frames_in)[:, model.frames_in - 1 :]
    return frame_metrics(predicted, frames[:, model.frames_in :])


class STCWorkload(FederatedWorkload):
    """Convolutional spiking predictor with STC-LIF, LIF, PLIF or non-leaky IF neurons."""

    name = "stc"
    Config = STCConfig
    config: STCConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "stream", "steps_done")
    headline_metric = ("test_mse", "min")
    report_sections = SECTIONS
    supports_cuda = True  # the frames follow the model (`to_device`, `model_device`)

    def __init__(self, config: STCConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.train_set, self.test_set = train_test_split(load_selected(data), data.test_fraction,
                                                         seeds.integer("data.split"))
        self.train_x = torch.from_numpy(self.train_set.x)
        self.test_x = torch.from_numpy(self.test_set.x[: config.eval_size])
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.stream = BatchStream(len(self.train_x), min(config.batch_size, len(self.train_x)),
                                  seeds.torch("data.batches"))
        self.steps_done = 0

    def build_model(self) -> SpikingPredictor:
        return build_predictor(self.config)

    def to_device(self, device: torch.device) -> None:
        super().to_device(device)
        self.train_x, self.test_x = self.train_x.to(device), self.test_x.to(device)

    def _loss(self, frames: torch.Tensor) -> torch.Tensor:
        if self.config.task == "recall":
            inputs = recall_batch(frames[:, 0], self.config.delay)
            return torch.nn.functional.mse_loss(self.model.recall(inputs), frames[:, 0])
        return prediction_loss(self.model, frames)

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        total = 0.0
        for _ in range(steps):
            total += optimizer_step(self.optimizer, self._loss(self.train_x[self.stream.next()]))
            self.steps_done += 1
        return {"train_loss": total / steps}

    def recalled(self) -> torch.Tensor:
        """The network's outputs at the cue for the test sequences' first frames."""
        self.model.eval()
        with torch.no_grad():
            return self.model.recall(recall_batch(self.test_x[:, 0], self.config.delay))

    def evaluate(self) -> dict[str, float]:
        if self.config.task == "recall":
            metrics = frame_metrics(self.recalled(), self.test_x[:, 0])
            # Chance level: the mean first frame of the training set, whatever the input.
            mean_frame = self.train_x[:, 0].mean(0).expand_as(self.test_x[:, 0])
            metrics["mse_mean_frame"] = frame_metrics(mean_frame, self.test_x[:, 0])["mse"]
        else:
            metrics = future_metrics(self.model, self.test_x)
        # The capacity of the comparison: trainable parameters of the network.
        return {"parameters": float(self.model.parameter_count())} | {f"test_{k}": v for k, v in metrics.items()}

    @classmethod
    def model_for(cls, config: StrictModel, data: Dataset) -> torch.nn.Module:
        assert isinstance(config, STCConfig)  # the federated setup validates the workload's own Config
        return build_predictor(config)

    @classmethod
    def fit_client(cls, model: torch.nn.Module, data: Dataset, config: StrictModel, epochs: int,
                   generator: torch.Generator, proximal_mu: float = 0.0) -> float:
        """Local epochs of Adam on next-frame prediction over the client's sequences."""
        assert isinstance(config, STCConfig) and isinstance(model, SpikingPredictor)  # built by model_for
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        frames = torch.from_numpy(data.x).to(model_device(model))
        anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else None
        model.train()
        total, batches = 0.0, 0
        for _ in range(epochs):
            order = torch.randperm(len(frames), generator=generator)
            for start in range(0, len(frames), config.batch_size):
                loss = prediction_loss(model, frames[order[start : start + config.batch_size]])
                if anchor is not None:  # FedProx's proximal term
                    drift = sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
                    loss = loss + proximal_mu / 2 * drift
                total, batches = total + optimizer_step(optimizer, loss), batches + 1
        return total / max(batches, 1)

    @classmethod
    def evaluate_model(cls, model: torch.nn.Module, data: Dataset) -> dict[str, float]:
        assert isinstance(model, SpikingPredictor)  # built by model_for
        metrics = future_metrics(model, torch.from_numpy(data.x).to(model_device(model)))
        return {f"test_{key}": value for key, value in metrics.items()}

    def artifacts(self) -> dict[str, np.ndarray]:
        frames = self.test_x[:SHOWN]
        if self.config.task == "recall":
            return {"recall_targets": frames[:, 0].cpu().numpy(),
                    "recall_outputs": self.recalled()[:SHOWN].cpu().numpy()}
        self.model.eval()
        with torch.no_grad():
            predicted = self.model.predict(self.test_x, self.config.frames_in)[:, self.config.frames_in - 1 :]
        horizon_mse = ((predicted.clamp(0, 1) - self.test_x[:, self.config.frames_in :]) ** 2).mean((0, 2, 3))
        return {"targets": frames.cpu().numpy(), "predictions": predicted[:SHOWN].cpu().numpy(),
                "frames_in": np.array(self.config.frames_in), "horizon_mse": horizon_mse.cpu().numpy()}
