"""Benchmark: pretraining throughput with Best-fit Packing against concatenation and padding.

Trains the same small GPT on the same documents (the Python standard library's docstrings and
reference topics by default, a mix of short and long documents) with each packing, through the real
pipeline (`testbed run`: deepspeed launcher, 2 processes by default), and prints tokens per second per process:
  tokens/s       every position of every sequence, padding included (the compute rate)
  doc tokens/s   positions that hold document tokens (the useful rate; padding wastes the rest)
and the ratios of doc tokens/s against concat. The paper's claim is "the same training
efficiency as concatenation": target best_fit / concat >= 0.97. Best-fit runs with its document
mask (as in the paper), concat with plain causal attention; "concat+mask" and "best_fit+causal"
separate the cost of the mask from the cost of padding.

Two measurements:
  end-to-end   each configuration is a whole `testbed run` (--repeats times, alternating order; the
               median is reported); the rate excludes start-up, evaluation and checkpoints (mean
               over the timed training steps after the first record);
  interleaved  one process, one thread: the same model and AdamW take one training step of each
               configuration in turn (--interleaved-steps rounds; median step time), so drift in
               the load of a shared machine hits every configuration alike.
Not a test. Usage:
    python benchmarks/bench_pretrain.py [--engine deepspeed|local] [--corpus stdlib_docs|stdlib_code]
                                        [--steps 60] [--repeats 1] [--configurations best_fit concat ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from testbed.execute import start_run
from testbed.loading import validate_raw
from testbed.pretrain.batches import TrainingData
from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.model import GPT, parameter_groups, summed_loss
from testbed.pretrain.prepare import prepare_corpus

CONFIGURATIONS = {  # name: (packing method, attention mask)
    "best_fit": ("best_fit", "document"),
    "concat": ("concat", "causal"),
    "pad": ("pad", "document"),
    "concat+mask": ("concat", "document"),
    "best_fit+causal": ("best_fit", "causal"),
}


def scenario(name: str, method: str, mask: str, engine: str, steps: int, corpus: str) -> dict:
    """The benchmark scenario for one configuration."""
    return {
        "name": f"bench-pretrain-{name.replace('+', '-')}",
        "kind": "pretrain",
        "seed": 0,
        "engine": {"type": "deepspeed", "num_procs": 2} if engine == "deepspeed" else {"type": "local"},
        "pretrain": {
            "corpus": {"source": corpus, "max_documents": 400},
            "tokenizer": {"vocab_size": 2048, "train_documents": 200},
            "context_length": 256,
            "packing": {"method": method},
            "attention_mask": mask,
            "model": {"layers": 2, "d_model": 128, "heads": 4},
            "steps": steps, "batch_size": 16, "eval_every": max(steps // 3, 1), "checkpoint_every": steps,
            "eval_documents": 8,
        },
        "report": {"kind": "pretraining"},
    }


def measure(name: str, engine: str, steps: int, corpus: str, workdir: Path) -> tuple[float, float]:
    """(tokens/s, document tokens/s) per process of one run, over its records after the first."""
    method, mask = CONFIGURATIONS[name]
    raw = scenario(name, method, mask, engine, steps, corpus)
    run_dir = workdir / f"{name}-{len(list(workdir.iterdir()))}"
    start_run(validate_raw(raw, "bench_pretrain"), "bench_pretrain", run_dir, quiet=True)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = records[1:] or records
    return (statistics.mean(r["tokens_per_s_per_process"] for r in timed),
            statistics.mean(r["document_tokens_per_s_per_process"] for r in timed))


def interleaved(names: list[str], corpus: str, rounds: int, workdir: Path) -> dict[str, tuple[float, float]]:
    """Median (tokens/s, document tokens/s) of single training steps taken in turn by each configuration."""
    torch.set_num_threads(1)
    setups = {}
    for name in names:
        method, mask = CONFIGURATIONS[name]
        config = PretrainConfig.model_validate(scenario(name, method, mask, "local", 1, corpus)["pretrain"])
        prepare_corpus(workdir / name, config, seed=0)
        data = TrainingData(workdir / name, seed=0)
        torch.manual_seed(0)
        model = GPT(config.model, data.manifest.vocab_size, config.context_length)
        optimizer = torch.optim.AdamW(parameter_groups(model, 0.1), lr=1e-3)
        setups[name] = (config, data, model, optimizer, mask == "document")
    seconds: dict[str, list[float]] = {name: [] for name in names}
    fill: dict[str, float] = {}
    for step in range(rounds):
        for name, (config, data, model, optimizer, masked) in setups.items():
            started = time.perf_counter()
            batch = data.batch(data.global_batch(step, config.batch_size))
            loss = summed_loss(model(batch.tokens, batch.document_ids if masked else None), batch.labels)
            optimizer.zero_grad()
            (loss / max(int((batch.labels >= 0).sum()), 1)).backward()
            optimizer.step()
            seconds[name].append(time.perf_counter() - started)
            fill[name] = fill.get(name, 0.0) + batch.document_tokens / batch.tokens.numel() / rounds
    rates = {}
    for name, times in seconds.items():
        config = setups[name][0]
        tokens_per_step = config.batch_size * config.context_length
        rates[name] = (tokens_per_step / statistics.median(times[1:]),
                       fill[name] * tokens_per_step / statistics.median(times[1:]))
    return rates


def print_table(title: str, medians: dict[str, tuple[float, float]]) -> None:
    """One table of rates and ratios against concat."""
    print(title)
    header = f"{'configuration':<16} {'tokens/s':>10} {'doc tokens/s':>13} {'doc tok/s vs concat':>20}"
    print(header)
    print("-" * len(header))
    reference = medians.get("concat", (0.0, 0.0))[1]
    for name, (tokens, documents) in medians.items():
        ratio = f"{documents / reference:.3f}" if reference else "n/a"
        print(f"{name:<16} {tokens:>10,.0f} {documents:>13,.0f} {ratio:>20}")
    if reference and "best_fit" in medians:
        best_fit_ratio = medians["best_fit"][1] / reference
        print(f"best_fit / concat = {best_fit_ratio:.3f} "
              f"(target >= 0.97: {'met' if best_fit_ratio >= 0.97 else 'NOT met'})")
    print()


def main() -> None:
    """Run every configuration and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("deepspeed", "local"), default="deepspeed")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--corpus", choices=("stdlib_docs", "stdlib_code"), default="stdlib_docs")
    parser.add_argument("--repeats", type=int, default=1, help="end-to-end runs per configuration (0: none)")
    parser.add_argument("--interleaved-steps", type=int, default=40)
    parser.add_argument("--configurations", nargs="+", default=list(CONFIGURATIONS), choices=list(CONFIGURATIONS))
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in args.configurations}
    with tempfile.TemporaryDirectory(prefix="bench-pretrain-") as tmp:
        for repeat in range(args.repeats):
            # Alternate the order, so that drift in the machine's load does not favour one configuration.
            order = args.configurations if repeat % 2 == 0 else args.configurations[::-1]
            for name in order:
                results[name].append(measure(name, args.engine, args.steps, args.corpus, Path(tmp)))
                tokens, documents = results[name][-1]
                print(f"  run {repeat + 1}: {name:<16} {tokens:>10,.0f} tokens/s {documents:>10,.0f} doc tokens/s",
                      flush=True)
    processes = 2 if args.engine == "deepspeed" else 1
    if args.repeats:
        medians = {name: (statistics.median(t for t, _ in runs), statistics.median(d for _, d in runs))
                   for name, runs in results.items()}
        print_table(f"end-to-end: engine {args.engine} ({processes} process(es)), {args.corpus} corpus, L = 256, "
                    f"2x128 GPT, batch 16, {args.steps} steps, median of {args.repeats}", medians)
    with tempfile.TemporaryDirectory(prefix="bench-pretrain-") as tmp:
        steps = interleaved(args.configurations, args.corpus, args.interleaved_steps, Path(tmp))
    print_table(f"interleaved: one process, one thread, {args.interleaved_steps} rounds, median step", steps)


if __name__ == "__main__":
    main()
