"""``kind: pretrain``: pretrain a small GPT on packed documents through DeepSpeed.

(Or, by ``pretrain.model.family``, a BERT-style masked LM on the same corpus or a ViT-style
classifier of the bundled digits, which needs no corpus folder; with ``pretrain.outliers`` the
workers also measure outliers and the W8A8 quality, and send the final activation histograms
as an ``artifacts`` event, merged into the run's report arrays.)

The driver (this process) prepares the corpus folder in the run folder (tokenizer, memory-mapped
token stores, the packing), starts the training processes through the engine's ``launch``
primitive (`testbed.pretrain.launch`: the deepspeed launcher, one local process, or Ray Train,
whichever the engine is), and streams
their events into the run folder: each metrics record goes to metrics.jsonl, each finished
DeepSpeed checkpoint becomes a ``ckpt-<step>.pt`` that names its DeepSpeed tag. ``testbed resume``
starts the processes again from the newest such checkpoint. The final metrics are the last record's
scalars plus the training packing's ``packing.truncated_share``, ``packing.padding_share`` and
``packing.excess_sequence_share`` (`testbed.pretrain.prepare.packing_final_metrics`; not for a ViT).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import time
from pathlib import Path
from typing import Any

from testbed.errors import ScenarioError, UserError
from testbed.pretrain.config import PretrainConfig, check_batch_size, most_training_sequences
from testbed.runner import RunContext, Runner
from testbed.scenario import Scenario


def pretrain_config(scenario: Scenario) -> PretrainConfig:
    """The scenario's ``pretrain:`` block, or the defaults when it has none."""
    return scenario.pretrain or PretrainConfig()


def world_size(scenario: Scenario) -> int:
    """How many training processes the scenario's engine runs (``ray_workers`` where the engine
    has no count of its own)."""
    return scenario.engine.ranks(pretrain_config(scenario).ray_workers)


def deepspeed_tag(step: int) -> str:
    """The DeepSpeed checkpoint tag the training processes use for ``step``."""
    return f"step{step:09d}"


class PretrainRunner(Runner):
    """DeepSpeed pretraining with Best-fit Packing or a baseline packing."""

    kind = "pretrain"
    needs_one_of = frozenset({"torch_distributed"})

    def check(self, scenario: Scenario, source: str) -> None:
        from testbed.pretrain.corpus import check_corpus, check_training_documents

        if importlib.util.find_spec("deepspeed") is None or importlib.util.find_spec("tokenizers") is None:
            raise ScenarioError(f"{source}: kind: 'pretrain' trains through DeepSpeed, which is not installed: "
                                "pip install 'testbed[deepspeed]'")
        config = pretrain_config(scenario)
        check_corpus(config.corpus, source)
        if config.model.family != "vit":  # a ViT trains on the digits images, not the corpus
            check_training_documents(config.corpus, source, scenario.seed)
        world = world_size(scenario)
        if config.batch_size % world:
            raise ScenarioError(f"{source}: pretrain.batch_size: {config.batch_size} sequences do not split "
                                f"evenly over {world} training processes")
        _check_family_options(scenario, config, source)
        most = most_training_sequences(config)
        if most is not None:
            check_batch_size(config, most, source, "the corpus packs at most")
        scenario.engine.check(world, "training processes", source)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        from testbed.pretrain.launch import run_training, training_program
        from testbed.pretrain.outlier_eval import as_report_arrays
        from testbed.pretrain.prepare import prepare_corpus

        config = pretrain_config(ctx.scenario)
        started = time.perf_counter()
        try:
            artifacts = None if config.model.family == "vit" else \
                prepare_corpus(ctx.run.path / "corpus", config, ctx.scenario.seed)
        except ScenarioError as err:  # a malformed corpus file past what validation reads: name the scenario too
            raise ScenarioError(f"{ctx.source}: {err}" if ctx.source else str(err)) from None
        if config.model.family != "vit":  # known only now: how many sequences the packing made
            from testbed.pretrain.prepare import CorpusManifest

            sequences = CorpusManifest.load(ctx.run.path / "corpus").n_sequences
            check_batch_size(config, sequences, ctx.source or str(ctx.run.config_path), "the packed corpus has")
        ctx.timings["prepare_corpus_s"] = round(time.perf_counter() - started, 3)
        if artifacts is not None:
            ctx.run.write_artifacts(artifacts)
        checkpoint = ctx.run.latest_checkpoint()
        step = checkpoint["step"] if checkpoint else 0
        if step < config.steps:
            with ctx.progress.task("pretraining", total=config.steps, completed=step) as advance:
                def on_event(event: dict[str, Any]) -> None:
                    nonlocal step
                    if event["event"] == "metrics":
                        check_finite_losses(ctx, event["record"])  # stops the workers before a NaN checkpoint
                        ctx.log_metrics(event["record"])
                        advance(event["record"]["step"] - step, event["record"])
                        step = event["record"]["step"]
                    elif event["event"] == "checkpoint":
                        ctx.run.save_checkpoint(event["step"], {"deepspeed_tag": event["tag"]})
                        _prune_deepspeed_tags(ctx.run.path, event["step"])
                    elif event["event"] == "artifacts":
                        ctx.run.write_artifacts({**ctx.run.read_artifacts(), **as_report_arrays(event["arrays"])})
                    elif event["event"] == "started":  # start-up of the training processes, see ds_worker
                        ctx.timings.update({"launch_to_training_s": round(time.perf_counter() - launched, 3),
                                            "worker_process_s": event["process_s"],
                                            "engine_init_s": event["engine_init_s"]})

                program = training_program(ctx.run.path, checkpoint["deepspeed_tag"] if checkpoint else None,
                                            world_size(ctx.scenario))
                launched = time.perf_counter()
                run_training(ctx.engine, program, on_event)
        records = ctx.run.read_metrics()
        if not records or records[-1]["step"] != config.steps:
            raise RuntimeError("training processes ended without their final metrics record")
        # Per-module outlier statistics stay in metrics.jsonl; the summary keeps the scalars, and
        # throughput among its timings (a resumed run's final metrics equal an uninterrupted run's).
        from testbed.pretrain.ds_worker import MetricWindow

        last = records[-1]
        ctx.timings.update({key: last[key] for key in MetricWindow.TIMINGS if key in last})
        final = {key: value for key, value in last.items()
                 if key != "step" and key not in MetricWindow.TIMINGS and not isinstance(value, dict)}
        if config.model.family != "vit":
            # The packing statistics of the training set, read back from the stored packing (so a
            # resumed run, which does not rebuild its corpus folder, reports them too).
            from testbed.pretrain.prepare import packing_final_metrics

            final.update(packing_final_metrics(ctx.run.path / "corpus"))
        return final


def check_finite_losses(ctx: RunContext, record: dict[str, Any]) -> None:
    """Stop a run whose loss became infinite or NaN: every later step would be wasted on NaNs. The
    workers' metrics record of a step comes before its checkpoint, so the checkpoints the folder
    keeps are all from before the divergence, and `testbed resume` can start from them."""
    bad = next(((key, value) for key, value in record.items()
                if "loss" in key and isinstance(value, float) and not math.isfinite(value)), None)
    if bad is None:
        return
    run = ctx.run
    kept = (f"; the checkpoints up to step {run.latest_step} in {run.path} are from before it"
            if run.has_checkpoint else "")
    raise UserError(f"{ctx.source or run.config_path}: pretrain.lr: training diverged at step {record.get('step')} "
                    f"({bad[0]} = {bad[1]}); lower it{kept}")


def _check_family_options(scenario: Scenario, config: PretrainConfig, source: str) -> None:
    if config.model.family == "vit" and scenario.data.dataset != "digits":
        raise ScenarioError(f"{source}: data.dataset: model.family 'vit' trains on the bundled 'digits' images, "
                            f"not '{scenario.data.dataset}'")
    if config.model.family == "masked_lm" and config.attention_mask == "causal":
        raise ScenarioError(f"{source}: pretrain.attention_mask: 'causal' does not fit model.family 'masked_lm' "
                            "(a bidirectional encoder); use 'document'")
    if config.outliers is not None and config.outliers.quantize and config.zero_stage == 3:
        raise ScenarioError(f"{source}: pretrain.outliers.quantize: W8A8 evaluation needs the whole model in "
                            "every process; use zero_stage 0-2")


def _prune_deepspeed_tags(run_dir: Path, up_to_step: int) -> None:
    # Keep the DeepSpeed tags of the ckpt-*.pt files the run folder kept; drop older ones. Tags newer
    # than the event being handled stay: the workers may already have written them while the driver
    # is still catching up on its event stream.
    kept = {deepspeed_tag(int(path.stem.split("-")[1])) for path in (run_dir / "checkpoints").glob("ckpt-*.pt")}
    for folder in (run_dir / "deepspeed").glob("step*"):
        if folder.is_dir() and folder.name not in kept and folder.name < deepspeed_tag(up_to_step):
            shutil.rmtree(folder, ignore_errors=True)
