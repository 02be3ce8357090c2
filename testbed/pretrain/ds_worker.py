"""The training process: one rank of a DeepSpeed data-parallel run over a prepared corpus folder.

Started by the driver (`testbed.pretrain.launch`), never by hand::

    deepspeed --num_gpus 2 --module testbed.pretrain.ds_worker --run-dir RUN [--resume-tag TAG]
    python -m testbed.pretrain.ds_worker --run-dir RUN                 # engine local: one process
    ray.train.torch.TorchTrainer(train_loop_per_worker=ray_train_loop)  # engine ray

Each rank trains ``batch_size / world`` sequences per step with ``deepspeed.initialize`` (ZeRO stage
from the config; gloo and fp32 on CPUs, NCCL and bf16 on GPUs). The loss of a rank is its summed
token loss divided by the token count of the *global* batch, times the world size: after
DeepSpeed averages gradients over ranks this is the gradient of the global per-token mean, the
same for any number of processes.

Rank 0 appends events to ``RUN/worker/events.jsonl`` (metrics records, finished checkpoints); the
driver streams them into the run folder. Ranks write nothing else but DeepSpeed checkpoints
(``RUN/deepspeed/<tag>/``). A rank whose driver has died stops at its next step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from testbed.loading import validate_raw
from testbed.pretrain.batches import TrainingData
from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.evaluation import all_reduce_sum, fact_recall
from testbed.pretrain.families import build_model, open_training_data, quality_metrics
from testbed.pretrain.model import IGNORE_INDEX, parameter_groups, summed_loss
from testbed.pretrain.outlier_eval import histogram_arrays, outlier_metrics, quantized_metrics
from testbed.pretrain.tokenizer import load_tokenizer
from testbed.run import RunFolder
from testbed.seeding import SeedTree

DRIVER_PID = "TESTBED_DRIVER_PID"
DRIVER_HOST = "TESTBED_DRIVER_HOST"


def deepspeed_config(batch_size: int, world: int, grad_clip: float, zero_stage: int, bf16: bool) -> dict[str, Any]:
    """The DeepSpeed config of one run: no gradient accumulation, ``batch_size`` sequences per step."""
    return {
        "train_batch_size": batch_size,
        "train_micro_batch_size_per_gpu": batch_size // world,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": grad_clip,
        "zero_optimization": {"stage": zero_stage},
        "zero_allow_untested_optimizer": True,  # torch's AdamW, so no DeepSpeed op has to be compiled
        "bf16": {"enabled": bf16},
        "steps_per_print": 2**31 - 1,
    }


def warmup_cosine(warmup_steps: int, total_steps: int):
    """LR multiplier: linear warm-up, then cosine decay to 10% at the last step."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return factor


class EventWriter:
    """Rank 0's line-per-event channel to the driver (a no-op on other ranks)."""

    def __init__(self, path: Path | None):
        self.handle = open(path, "a") if path is not None else None

    def emit(self, event: dict[str, Any]) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps(event, sort_keys=True) + "\n")
            self.handle.flush()


def driver_alive() -> bool:
    """False once the driver that started this run has died (checked only on the driver's host)."""
    pid, host = os.environ.get(DRIVER_PID), os.environ.get(DRIVER_HOST)
    if not pid or host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class MetricWindow:
    """Training statistics since the last metrics record, summed over steps.

    At a checkpoint the sums of all ranks are gathered on rank 0 (`consolidate`), whose copy is the
    one DeepSpeed saves, so a resumed run's records equal an uninterrupted run's (timings excepted).
    """

    FIELDS = ("loss_sum", "labels", "tokens", "document_tokens", "seconds")

    def __init__(self, state: dict[str, float] | None = None):
        self.state = dict(state) if state else dict.fromkeys(self.FIELDS, 0.0)

    def add(self, *values: float) -> None:
        """Add one step's loss sum, label count, tokens, document tokens and seconds."""
        for key, value in zip(self.FIELDS, values):
            self.state[key] += value

    def _global(self, device: torch.device) -> dict[str, float]:
        return dict(zip(self.FIELDS, all_reduce_sum([self.state[k] for k in self.FIELDS], device)))

    def consolidate(self, device: torch.device) -> None:
        """Move every rank's sums to rank 0 (collective)."""
        totals = self._global(device)
        self.state = totals if dist.get_rank() == 0 else dict.fromkeys(self.FIELDS, 0.0)

    def record(self, device: torch.device) -> dict[str, float]:
        """Global train loss and throughput per process (tokens / process-seconds); resets the window."""
        totals = self._global(device)
        self.state = dict.fromkeys(self.FIELDS, 0.0)
        seconds = max(totals["seconds"], 1e-9)
        return {"train_loss": totals["loss_sum"] / max(totals["labels"], 1.0),
                "tokens_per_s_per_process": totals["tokens"] / seconds,
                "document_tokens_per_s_per_process": totals["document_tokens"] / seconds}


@dataclass(frozen=True)
class Process:
    """This rank's place in the run."""

    rank: int
    world: int
    device: torch.device


def init_process(threads: int) -> Process:
    """Join the process group (or wrap the one Ray Train made): gloo on CPUs, NCCL on GPUs."""
    import deepspeed

    cuda = torch.cuda.is_available()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(threads)
    return Process(dist.get_rank(), dist.get_world_size(), device)


def build_engine(config: PretrainConfig, data, seed: int, process: Process):
    """The model, AdamW with its warm-up/cosine schedule, wrapped by ``deepspeed.initialize``."""
    import deepspeed

    torch.manual_seed(SeedTree(seed).integer("pretrain.model"))
    model = build_model(config, data)
    optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(config.warmup_steps, config.steps))
    bf16 = config.precision == "bf16" or (config.precision == "auto" and process.device.type == "cuda")
    ds_config = deepspeed_config(config.batch_size, process.world, config.grad_clip, config.zero_stage, bf16)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    return engine


def train_step(engine, data: TrainingData, config: PretrainConfig, step: int, process: Process) -> tuple[float, ...]:
    """One optimizer step on this rank's rows of the global batch: (loss sum, labels, tokens, document tokens)."""
    local = config.batch_size // process.world
    indices = data.global_batch(step, config.batch_size)
    batch = data.batch(indices[process.rank * local: (process.rank + 1) * local]).to(process.device)
    engine.train()
    logits = engine(batch.tokens, batch.document_ids if config.attention_mask == "document" else None)
    loss_sum = summed_loss(logits, batch.labels)
    # Divided by the global batch's label count and multiplied by the world size, because
    # DeepSpeed averages the ranks' gradients: the result is the global per-token mean's gradient.
    engine.backward(loss_sum * (process.world / max(data.label_count(indices), 1)))
    engine.step()
    labels = int((batch.labels != IGNORE_INDEX).sum())
    return float(loss_sum.detach()), labels, batch.tokens.numel(), batch.document_tokens


def train(run_dir: Path, resume_tag: str | None = None) -> None:
    """Train (or continue training) the run in ``run_dir``; every rank calls this."""
    scenario = validate_raw(RunFolder.open(run_dir).read_config(), source=str(run_dir / "config.yaml"))
    config = scenario.pretrain or PretrainConfig()
    process = init_process(config.threads_per_process)
    data = open_training_data(run_dir, scenario)
    engine = build_engine(config, data, scenario.seed, process)
    checkpoints = run_dir / "deepspeed"
    step, window = 0, MetricWindow()
    if resume_tag is not None:
        _, client_state = engine.load_checkpoint(str(checkpoints), tag=resume_tag)
        step, window = int(client_state["step"]), MetricWindow(client_state["window"] if process.rank == 0 else None)
    events = EventWriter(run_dir / "worker" / "events.jsonl" if process.rank == 0 else None)
    while step < config.steps:
        if not driver_alive():
            os._exit(3)  # nothing to save: the run continues from its last checkpoint on resume
        started = time.perf_counter()
        window.add(*train_step(engine, data, config, step, process), time.perf_counter() - started)
        step += 1
        if step % config.eval_every == 0 or step == config.steps:
            events.emit({"event": "metrics", "record": evaluate(engine, data, window, step, config, process, events)})
        if step % config.checkpoint_every == 0 or step == config.steps:
            tag = f"step{step:09d}"
            window.consolidate(process.device)
            engine.save_checkpoint(str(checkpoints), tag=tag, client_state={"step": step, "window": window.state})
            dist.barrier()
            events.emit({"event": "checkpoint", "step": step, "tag": tag})
    events.emit({"event": "done"})
    dist.barrier()


def evaluate(engine, data: TrainingData, window: MetricWindow, step: int, config: PretrainConfig,
             process: Process, events: EventWriter) -> dict[str, float]:
    """The metrics record of ``step``: training window, held-out quality, fact recall at the end,
    and with ``pretrain.outliers`` the outlier metrics (W8A8 quality and histograms at the end)."""
    record = {"step": step, **window.record(process.device), "lr": engine.get_lr()[0]}
    engine.eval()
    forward = lambda tokens, doc_ids: engine(tokens, doc_ids)  # noqa: E731
    where = (process.rank, process.world, process.device)
    record.update(quality_metrics(forward, data, *where))
    if step == config.steps and data.factrecall_questions() is not None:
        tokenizer = load_tokenizer(data.folder / "tokenizer.json")
        record.update(fact_recall(forward, data, tokenizer, *where))
    if config.outliers is not None:
        metrics, meter = outlier_metrics(engine.module, data, *where)
        record.update(metrics)
        if step == config.steps:
            events.emit({"event": "artifacts", "arrays": histogram_arrays(meter)})
            if config.outliers.quantize:
                record.update(quantized_metrics(engine.module, config, data, record, *where))
    return record


def ray_train_loop(loop_config: dict[str, Any]) -> None:
    """Entry point of each Ray Train worker (TorchTrainer has initialized torch.distributed)."""
    os.environ.update(loop_config.get("env", {}))
    train(Path(loop_config["run_dir"]), loop_config.get("resume_tag"))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of one rank (under the deepspeed launcher or alone)."""
    parser = argparse.ArgumentParser(prog="testbed.pretrain.ds_worker")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--resume-tag")
    parser.add_argument("--local_rank", type=int, default=None, help="passed by the deepspeed launcher")
    args = parser.parse_args(argv)
    train(args.run_dir, args.resume_tag)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: DeepSpeed and gloo take several seconds to unwind, and every
    # result is on disk by now.
    os._exit(code)
