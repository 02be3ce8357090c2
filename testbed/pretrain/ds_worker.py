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
(``RUN/deepspeed/<tag>/``) and, when one stops on a user error, its one-line message
(``RUN/worker/user-error.rank<N>``, see `report_user_error`; the driver raises it with
`raise_reported_user_error`). A rank whose driver has died stops at its next step.

Checkpoints are read back only through torch's weights-only unpickler (`WEIGHTS_ONLY_ENGINE`
replaces DeepSpeed's checkpoint engine, whose loads unpickle anything): a DeepSpeed file in the run
folder that holds more than tensors and plain values, such as a pickle that runs a command, is
refused with a `UserError` naming it and never executed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import torch
import torch.distributed as dist

from testbed.errors import UserError
from testbed.loading import validate_raw
from testbed.pretrain.batches import TrainingData
from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.evaluation import all_reduce_sum, fact_recall
from testbed.pretrain.families import build_model, open_training_data, quality_metrics
from testbed.pretrain.model import IGNORE_INDEX, parameter_groups, summed_loss
from testbed.pretrain.outlier_eval import histogram_arrays, outlier_metrics, quantized_metrics
from testbed.pretrain.tokenizer import load_tokenizer
from testbed.run import RunFolder
from testbed.seeding import SeedTree, stream

MODEL_INIT = stream("pretrain.model", "the model's initial weights")

if TYPE_CHECKING:
    from testbed.pretrain.vit import DigitsData

DRIVER_PID = "TESTBED_DRIVER_PID"
DRIVER_HOST = "TESTBED_DRIVER_HOST"
USER_ERROR_PREFIX = "user-error.rank"  # RUN/worker/user-error.rank<N>: the one-line message of a rank's UserError


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


def deepspeed_safe_globals() -> list[type]:
    """The DeepSpeed classes inside DeepSpeed's own checkpoints of this testbed's runs, allowed to
    torch's weights-only unpickler while it loads them (and only then).

    With ZeRO stages 1-3 (fp32 or bf16) the optimizer-state files hold a `LossScaler` (a static
    loss scale: plain attributes), the `ZeroStageEnum` (an int enum) and `fragment_address`
    (a dataclass of two ints). The unpickler rebuilds them from numbers without calling anything
    else; every other global stays refused. The model-state files need none of them.
    """
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address]


class UnsafeCheckpointError(UserError):
    """A DeepSpeed checkpoint file that torch's weights-only unpickler refuses."""


def _refusal(err: BaseException) -> str:
    """The specific line of a weights-only refusal (which global or opcode), without torch's advice."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(err).splitlines()]
    lines = [line for line in lines if line]
    detail = next((line for line in lines[1:] if "GLOBAL" in line or "Unsupported" in line),
                  lines[0] if lines else type(err).__name__)
    detail = detail.removeprefix("WeightsUnpickler error:").strip().split(". Please use", 1)[0]
    return detail[:200]


def load_checkpoint_file(path: str, map_location=None) -> Any:
    """One file of a DeepSpeed checkpoint, with torch's weights-only unpickler (DeepSpeed's own
    classes of `deepspeed_safe_globals` allowed); an `UnsafeCheckpointError` naming it otherwise."""
    try:
        # torch types the parameter as a list (invariant) of callables: a list of classes is one
        with torch.serialization.safe_globals(deepspeed_safe_globals()):  # type: ignore[arg-type]
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnsafeCheckpointError(
            f"{path}: not a checkpoint this testbed can load safely, so it was not loaded: the run folder's "
            f"DeepSpeed checkpoint was changed or is not this testbed's (refused: {_refusal(err)})") from None


def weights_only_checkpoint_engine(engine) -> None:
    """Make every checkpoint load of a DeepSpeed ``engine`` go through `load_checkpoint_file`.

    DeepSpeed reads every file of a checkpoint (model states, ZeRO optimizer states) through
    ``engine.checkpoint_engine.load``, whose default (`TorchCheckpointEngine`) is
    ``torch.load(weights_only=False)``. The engine gets a subclass that changes only ``load``
    (saving is DeepSpeed's, byte for byte). Another checkpoint engine (a DeepSpeed config asking
    for the fast, decoupled or DataStates writer) is refused rather than left unpickling.
    """
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
        def load(self, path: str, map_location=None):
            return load_checkpoint_file(path, map_location)

    if type(engine.checkpoint_engine) is not TorchCheckpointEngine:
        raise RuntimeError(f"DeepSpeed chose the checkpoint engine {type(engine.checkpoint_engine).__name__}, "
                           "whose loads are not weights-only; the testbed only runs with TorchCheckpointEngine")
    if engine.load_universal_checkpoint():
        raise RuntimeError("DeepSpeed universal checkpoints load with torch.load(weights_only=False)")
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine(engine._config)


def report_user_error(run_dir: Path, err: UserError) -> None:
    """Leave this rank's `UserError` for the driver, one line in ``RUN/worker/user-error.rank<N>``."""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", 0))
    message = " ".join(str(err).split()) or type(err).__name__
    path = run_dir / "worker" / f"{USER_ERROR_PREFIX}{rank}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(message + "\n")
    except OSError:
        pass  # the message is still on this rank's stderr (the launcher log)


def clear_reported_user_errors(work_dir: Path) -> None:
    """Driver side, before a launch: forget the user errors ranks of an earlier launch left."""
    for path in Path(work_dir).glob(f"{USER_ERROR_PREFIX}*"):
        path.unlink(missing_ok=True)


def raise_reported_user_error(work_dir: Path) -> None:
    """Driver side, after the training processes failed: raise the `UserError` a rank reported
    (the lowest rank's), so the CLI prints its one line; return if none did (another failure)."""
    def rank(path: Path) -> int:
        suffix = path.name[len(USER_ERROR_PREFIX):]
        return int(suffix) if suffix.isdigit() else 1 << 30

    for path in sorted(Path(work_dir).glob(f"{USER_ERROR_PREFIX}*"), key=rank):
        message = path.read_text(errors="replace").strip()
        if message:
            raise UserError(message.splitlines()[0])


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
    # The keys of `record` that measure time: a resumed run's differ, so they are timings, not metrics.
    TIMINGS = ("tokens_per_s_per_process", "document_tokens_per_s_per_process")

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


def init_process(threads: int, setting: str = "auto") -> Process:
    """Join the process group (or wrap the one Ray Train made): gloo on CPUs, NCCL on GPUs.

    ``setting`` is the scenario's ``device`` (`testbed.device`): ``cpu`` keeps a present GPU unused.
    """
    from testbed.device import device_for

    cuda = device_for(setting, "pretrain", None) != "cpu"
    if not cuda and torch.cuda.is_available():
        os.environ["DS_ACCELERATOR"] = "cpu"  # DeepSpeed picks CUDA's accelerator whenever one is present
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(threads)
    return Process(dist.get_rank(), dist.get_world_size(), device)


def build_engine(config: PretrainConfig, data, seeds: SeedTree, process: Process):
    """The model, AdamW with its warm-up/cosine schedule, wrapped by ``deepspeed.initialize``."""
    import deepspeed

    torch.manual_seed(seeds.integer(MODEL_INIT.path))
    model = build_model(config, data)
    optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(config.warmup_steps, config.steps))
    bf16 = config.precision == "bf16" or (config.precision == "auto" and process.device.type == "cuda")
    ds_config = deepspeed_config(config.batch_size, process.world, config.grad_clip, config.zero_stage, bf16)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    weights_only_checkpoint_engine(engine)
    return engine


def train_step(engine, data: TrainingData | DigitsData, config: PretrainConfig, step: int,
               process: Process) -> tuple[float, ...]:
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
    """Train (or continue training) the run in ``run_dir``; every rank calls this. A `UserError`
    (such as a checkpoint that cannot be loaded safely) is also left for the driver."""
    try:
        _train(run_dir, resume_tag)
    except UserError as err:
        report_user_error(run_dir, err)
        raise


def _train(run_dir: Path, resume_tag: str | None) -> None:
    scenario = validate_raw(RunFolder.open(run_dir).read_config(), source=str(run_dir / "config.yaml"))
    config = scenario.pretrain or PretrainConfig()
    process = init_process(config.threads_per_process, scenario.device)
    data = open_training_data(run_dir, scenario)
    engine_started = time.perf_counter()
    engine = build_engine(config, data, data.seeds, process)  # the run's tree, as this rank rebuilt it
    engine_init_s = time.perf_counter() - engine_started
    checkpoints = run_dir / "deepspeed"
    step, window = 0, MetricWindow()
    if resume_tag is not None:
        _, client_state = engine.load_checkpoint(str(checkpoints), tag=resume_tag)
        step, window = int(client_state["step"]), MetricWindow(client_state["window"] if process.rank == 0 else None)
    events = EventWriter(run_dir / "worker" / "events.jsonl" if process.rank == 0 else None)
    # Where start-up goes (the driver keeps these among the run's timings): this process's life so
    # far (interpreter, imports, data, DeepSpeed) and DeepSpeed's initialize alone (its op builds).
    events.emit({"event": "started", "process_s": round(time.time() - psutil.Process().create_time(), 3),
                 "engine_init_s": round(engine_init_s, 3)})
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


def evaluate(engine, data: TrainingData | DigitsData, window: MetricWindow, step: int, config: PretrainConfig,
             process: Process, events: EventWriter) -> dict[str, float]:
    """The metrics record of ``step``: training window, held-out quality, fact recall at the end,
    and with ``pretrain.outliers`` the outlier metrics (W8A8 quality and histograms at the end)."""
    record = {"step": step, **window.record(process.device), "lr": engine.get_lr()[0]}
    engine.eval()
    forward = lambda tokens, doc_ids: engine(tokens, doc_ids)
    where = (process.rank, process.world, process.device)
    record.update(quality_metrics(forward, data, *where))
    if step == config.steps and data.factrecall_questions() is not None:
        assert isinstance(data, TrainingData)  # only a prepared corpus has fact-recall questions
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


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of one rank (under the deepspeed launcher or alone)."""
    parser = argparse.ArgumentParser(prog="testbed.pretrain.ds_worker")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--resume-tag")
    parser.add_argument("--local_rank", type=int, default=None, help="passed by the deepspeed launcher")
    args = parser.parse_args(argv)
    try:
        train(args.run_dir, args.resume_tag)
    except UserError as err:  # one line, as the CLI prints it; the driver raises it again
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: DeepSpeed and gloo take several seconds to unwind, and every
    # result is on disk by now.
    os._exit(code)
