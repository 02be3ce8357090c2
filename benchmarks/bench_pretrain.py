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
With ``--startup``, instead: the start-up of a short run on scenarios/pretrain/outeffhop-opt.yaml's
corpus (stdlib_docs, a 1,024-token BPE, best-fit packing at L = 128):
  corpus       preparing it at several sizes (--sizes documents): without the cache of prepared
               corpora (TESTBED_CORPUS_CACHE=off, the yardstick), filling an empty cache, and from
               the cache; the ratio cached / uncached;
  10-step run  the scenario with 10 steps, run twice as a whole `testbed run` command with an empty
               cache of its own (the first prepares and fills, the second reads the cache), each
               split into its training steps (from its metrics records) and the rest; target: the
               second run spends <= 30 s outside training. The CPU seconds of each command (all
               its processes) tell the work apart from waiting on a loaded machine.
Not a test. Usage:
    python benchmarks/bench_pretrain.py [--engine deepspeed|local] [--corpus stdlib_docs|stdlib_code]
                                        [--steps 60] [--repeats 1] [--configurations best_fit concat ...]
    python benchmarks/bench_pretrain.py --startup [--engine deepspeed|local] [--sizes 300 600 1200 2400]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from testbed.execute import start_run
from testbed.loading import validate_raw
from testbed.pretrain.batches import TrainingData
from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.corpus import stdlib_files
from testbed.pretrain.model import GPT, parameter_groups, summed_loss
from testbed.pretrain.prepare import CorpusManifest, prepare_corpus

OUTEFFHOP = Path(__file__).resolve().parents[1] / "scenarios" / "pretrain" / "outeffhop-opt.yaml"
SHORT_RUN_TARGET_S = 30.0

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
    parser.add_argument("--startup", action="store_true", help="measure start-up instead (corpus cache, 10-step run)")
    parser.add_argument("--sizes", nargs="+", type=int, default=[300, 600, 1200, 2400],
                        help="--startup: corpus sizes in documents (stdlib_docs has about 2,500)")
    args = parser.parse_args()
    if args.startup:
        startup(args.sizes, args.engine)
        return
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


def corpus_preparation(sizes: list[int], workdir: Path) -> None:
    """Print the seconds of preparing the scenario's corpus at each size: uncached, filling, cached."""
    base = yaml.safe_load(OUTEFFHOP.read_text())["pretrain"]
    stdlib_files(False)  # stdlib_docs's files, listed once per process (by validation in a real run)
    saved = {name: os.environ.get(name) for name in ("TESTBED_CACHE_DIR", "TESTBED_CORPUS_CACHE")}
    os.environ["TESTBED_CACHE_DIR"] = str(workdir / "cache")
    header = (f"{'documents':>9} {'train tokens':>12} {'uncached s':>10} {'(CPU s)':>8} {'filling s':>9} "
              f"{'cached s':>9} {'cached / uncached':>17}")
    print("corpus preparation (outeffhop-opt.yaml's pretrain block, max_documents varied; in-process)")
    print(header)
    print("-" * len(header))
    try:
        for size in sizes:
            config = PretrainConfig.model_validate({**base, "corpus": {**base["corpus"], "max_documents": size}})
            seconds, cpu = {}, {}
            for mode in ("uncached", "filling", "cached"):
                os.environ["TESTBED_CORPUS_CACHE"] = "off" if mode == "uncached" else "on"
                started, cpu_started = time.perf_counter(), time.process_time()
                prepare_corpus(workdir / f"{size}-{mode}" / "corpus", config, seed=0)
                seconds[mode], cpu[mode] = time.perf_counter() - started, time.process_time() - cpu_started
            tokens = CorpusManifest.load(workdir / f"{size}-cached" / "corpus").n_train_tokens
            print(f"{size:>9,} {tokens:>12,} {seconds['uncached']:>10.2f} {cpu['uncached']:>8.2f} "
                  f"{seconds['filling']:>9.2f} {seconds['cached']:>9.3f} "
                  f"{seconds['cached'] / seconds['uncached']:>17.4f}", flush=True)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    print()


def training_seconds(run_dir: Path, batch_size: int, context_length: int, world: int) -> float:
    """Seconds the run spent in training steps, from its records' throughput (tokens per process-second)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    tokens_per_step = batch_size * context_length / world
    seconds, previous = 0.0, 0
    for record in records:
        if "tokens_per_s_per_process" in record:
            seconds += (record["step"] - previous) * tokens_per_step / record["tokens_per_s_per_process"]
            previous = record["step"]
    return seconds


def short_runs(engine: str, workdir: Path) -> None:
    """Run the scenario with 10 steps twice as whole commands; print where each run's time went."""
    raw = yaml.safe_load(OUTEFFHOP.read_text())
    for block in ("sweep", "claims"):
        raw.pop(block, None)
    raw["pretrain"]["steps"] = 10
    world = 2 if engine == "deepspeed" else 1
    raw["engine"] = {"type": "deepspeed", "num_procs": 2} if engine == "deepspeed" else {"type": "local"}
    path = workdir / "short.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    environment = {**os.environ, "TESTBED_CACHE_DIR": str(workdir / "run-cache")}
    environment.pop("TESTBED_CORPUS_CACHE", None)
    header = (f"{'run':<28} {'command s':>9} {'CPU s':>6} {'training s':>10} {'outside s':>9} {'corpus s':>8} "
              f"{'launch to training s':>20}")
    print(f"10-step run of outeffhop-opt.yaml (engine {engine}, {world} process(es)), whole `testbed run` command")
    print(header)
    print("-" * len(header))
    outside: list[float] = []
    for label in ("first (fills the cache)", "second (cached corpus)"):
        run_dir = workdir / f"run-{len(outside)}"
        cpu_before = _children_cpu_s()
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(run_dir),
                               "--quiet"], env=environment, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"testbed run exited with {done.returncode}:\n{done.stderr[-3000:]}")
        command = time.perf_counter() - started
        cpu = _children_cpu_s() - cpu_before
        timings = json.loads((run_dir / "summary.json").read_text())["timings"]
        training = training_seconds(run_dir, raw["pretrain"]["batch_size"], raw["pretrain"]["context_length"], world)
        outside.append(command - training)
        print(f"{label:<28} {command:>9.1f} {cpu:>6.1f} {training:>10.1f} {outside[-1]:>9.1f} "
              f"{timings['prepare_corpus_s']:>8.2f} {timings.get('launch_to_training_s', float('nan')):>20.1f}",
              flush=True)
    print(f"second / first outside training = {outside[1] / outside[0]:.3f}; second run outside training "
          f"{outside[1]:.1f} s (target <= {SHORT_RUN_TARGET_S:.0f} s: "
          f"{'met' if outside[1] <= SHORT_RUN_TARGET_S else 'NOT met'})")


def _children_cpu_s() -> float:
    """CPU seconds (user and system) of this process's finished child processes and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def startup(sizes: list[int], engine: str) -> None:
    """The ``--startup`` measurements."""
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="bench-pretrain-startup-") as tmp:
        corpus_preparation(sizes, Path(tmp))
        short_runs(engine, Path(tmp))
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
