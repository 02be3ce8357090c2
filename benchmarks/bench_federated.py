"""Federated benchmarks, side by side in one run (not tests; numbers depend on the machine).

1. The same FedAvg scenario through `testbed run` and written directly against Flower's
   `run_simulation` (same model, data and partitions): wall-time ratio, target <= 1.1.
2. Server aggregation time of SDEA against FedAvg at 10, 50 and 100 clients (the aggregation math
   alone, on perturbed copies of the digits CNN), with one torch thread as the federated server runs
   every aggregation; `benchmarks/bench_sdea.py` grows it over clients and public images and
   measures its floor.
3. With ``--scale N [N ...]``: one round of FedAvg with N clients through the testbed (``--scale-setting``:
   the digits CNN, or an MLP on a generated table for a million clients), reporting the
   clients that actually trained, wall time (start-up included) and peak memory of the process
   tree (driver, Ray, actors); then the peak at the largest N over the peak at the smallest
   (target <= 2 from 10,000 to 1,000,000). With ``--raw-scale N [...]`` the same round written directly against Flower's
   `run_simulation` (``min_available_nodes = N``, or it trains only the nodes that registered
   first) at those N, and the time per client of the testbed over raw Flower's where both ran
   (target <= 0.7 at 10,000), and of the testbed's largest N over raw Flower's largest (target <= 0.2,
   10^6 against 10^4).

    python benchmarks/bench_federated.py [--rounds 3] [--clients 10] [--scale 1000 10000 100000]
        [--raw-scale 10000] [--skip-comparison] [--keep docs/performance] [--scale-setting table-mlp] [--runs-dir DIR]

   A million clients (issue 39): ``--skip-comparison --scale-setting table-mlp --scale 10000 1000000
   --raw-scale 10000 --runs-dir runs/bench-million --keep docs/performance``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

SCENARIO: dict[str, Any] = {
    "name": "bench-fedavg", "kind": "federated", "seed": 0,
    "engine": {"type": "local", "num_cpus": 2},
    "data": {"dataset": "digits", "num_clients": 10, "partition": {"type": "iid"}},
    "workload": {"name": "classifier", "arch": "cnn", "hidden": 32},
    "federated": {"rounds": 3, "local_epochs": 1, "proximal_mu": 0.0, "strategy": {"name": "fedavg"}},
}

RAW_FLOWER = '''
import collections, json, sys, torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
from testbed.loading import validate_raw
from testbed.federated.setup import federation_setup
from testbed.workloads.classifier.config import ClassifierConfig
from testbed.workloads.classifier.model import build_classifier, evaluate_model, make_optimizer, train_epochs

scenario = validate_raw(json.loads(sys.argv[1]), "bench")
rounds, n = scenario.federated.rounds, scenario.data.num_clients
config = ClassifierConfig.model_validate(scenario.workload.params)  # the testbed run's model
client = ClientApp()

@client.train()
def train(msg: Message, context: Context) -> Message:
    setup = federation_setup(scenario)
    data = setup.client_data(int(context.node_config["partition-id"]))
    model = build_classifier(config, data)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    train_epochs(model, make_optimizer(model, config), data, 1, 32,
                 torch.Generator().manual_seed(0))
    metrics = MetricRecord({"num-examples": len(data.y)})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)

server = ServerApp()

@server.main()
def main(grid: Grid, context: Context) -> None:
    setup = federation_setup(scenario)
    model = build_classifier(config, setup.train)
    def evaluate(server_round, arrays):
        model.load_state_dict(arrays.to_torch_state_dict())
        return MetricRecord(evaluate_model(model, setup.test))
    class Counting(FedAvg):
        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            trained.append(sum(not r.has_error() for r in replies))
            errors.update((r.error.reason.strip().splitlines() or [f"code {r.error.code}"])[-1][:200]
                          for r in replies if r.has_error())
            return super().aggregate_train(server_round, replies)
    trained, errors = [], collections.Counter()
    Counting(fraction_evaluate=0.0, min_available_nodes=n).start(
        grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=rounds, evaluate_fn=evaluate)
    print(json.dumps({"clients_trained": trained[-1], "errors": errors}))

run_simulation(server, client, num_supernodes=n,
               backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"address": "local", "num_cpus": 2}})
'''


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def testbed_vs_flower(rounds: int, clients: int) -> None:
    scenario = {**SCENARIO, "data": {**SCENARIO["data"], "num_clients": clients},
                "federated": {**SCENARIO["federated"], "rounds": rounds}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump(scenario))
        ours = timed([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", f"{tmp}/run", "--quiet"])
        raw = timed([sys.executable, "-c", RAW_FLOWER, json.dumps(scenario)])
    print(f"1. FedAvg, {clients} clients x {rounds} rounds: testbed {ours:.1f} s, raw Flower {raw:.1f} s, "
          f"ratio {ours / raw:.2f} (target <= 1.1)")


def aggregation_times() -> None:
    from testbed.data import PublicDataConfig, augment_views, load_dataset, public_images
    from testbed.determinism import single_threaded
    from testbed.seeding import SeedTree
    from testbed.strategies.sdea import sdea_weights
    from testbed.strategies.vectors import stack_states
    from testbed.workloads.classifier.config import ClassifierConfig
    from testbed.workloads.classifier.model import build_classifier

    data = load_dataset("digits")
    model_fn = lambda: build_classifier(ClassifierConfig(arch="cnn", hidden=32), data)
    base = model_fn().state_dict()
    public = torch.from_numpy(public_images(PublicDataConfig(size=512), (1, 8, 8), SeedTree(0).numpy("p")))
    print("2. server aggregation time per round (s)")
    print(f"   {'clients':>7} {'FedAvg':>10} {'SDEA':>10} {'ratio':>8}")
    for n in (10, 50, 100):
        states = [{k: v + 0.01 * torch.randn_like(v.float()).to(v.dtype) if v.is_floating_point() else v
                   for k, v in base.items()} for _ in range(n)]
        # One thread, as the server aggregates: with torch's default two, a loaded machine made SDEA's
        # 160 small steps spin (107.7 s a round at 10 clients, against 1-4 s on one thread).
        with single_threaded():
            started = time.perf_counter()
            stacked = stack_states(states)
            weights = torch.full((n,), 1.0 / n)
            _ = weights @ stacked
            fedavg = time.perf_counter() - started
            started = time.perf_counter()
            sdea_weights(model_fn, states, public, augment_views, epochs=20,
                         generator=torch.Generator().manual_seed(0))
            sdea = time.perf_counter() - started
        print(f"   {n:>7} {fedavg:>10.4f} {sdea:>10.2f} {sdea / fedavg:>8.0f}")


# Section 3's settings. digits-cnn: the digits CNN (83 KB an upload), the digits replicated so that
# each client holds a sample or two. table-mlp, the million-client round: a small MLP (1.3 KB an
# upload) on a generated table of 8 features with 4/3 sample a client. At 10^6 clients the digits
# would be replicated 1,000 times in the driver and in every actor (0.5 GB each, twice over with
# the train/test split) and the CNN's staged uploads would need 83 GB of disk.
SCALE_SETTINGS = ("digits-cnn", "table-mlp")
TABLE_FEATURES, TABLE_CLASSES = 8, 10


def scale_scenario(n: int, setting: str = "digits-cnn", data_dir: Path | None = None) -> dict[str, Any]:
    """One FedAvg round of ``n`` clients in ``setting`` (table-mlp writes its table into ``data_dir``)."""
    federated = {**SCENARIO["federated"], "rounds": 1, "round_timeout_s": 600 + 0.1 * n}
    if setting == "digits-cnn":
        data = {**SCENARIO["data"], "num_clients": n, "replicate": -(-n // 1000)}
        return {**SCENARIO, "data": data, "federated": federated}
    assert data_dir is not None  # the generated table's folder
    path = data_dir / f"table-{n}.npz"
    if not path.exists():
        write_table(path, samples=-(-4 * n // 3) + TABLE_CLASSES)  # 3/4 train: at least one sample a client
    data = {"dataset": "npz", "path": str(path), "num_clients": n, "partition": {"type": "iid"}}
    return {**SCENARIO, "data": data, "workload": {"name": "classifier", "arch": "mlp", "hidden": 16},
            "federated": federated}


def write_table(path: Path, samples: int) -> None:
    """Gaussian classes around random centres, float32 features (seeded: the same table every run)."""
    import numpy as np

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(TABLE_CLASSES, TABLE_FEATURES)).astype(np.float32)
    y = rng.integers(0, TABLE_CLASSES, samples)
    x = centres[y] + rng.normal(size=(samples, TABLE_FEATURES)).astype(np.float32)
    np.savez(path, x=x, y=y)


def scale(clients: list[int], raw_clients: list[int], keep: Path | None = None, setting: str = "digits-cnn",
          runs_dir: Path | None = None) -> None:
    print(f"3. one FedAvg round with N clients ({setting}), wall time with start-up, peak memory "
          "of the process tree (driver, Ray, actors)")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = runs_dir or Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        ours = {n: _testbed_round(scale_scenario(n, setting, data_dir), setting, keep, runs_dir) for n in clients}
        raw: dict[int, float] = {}
        for n in raw_clients:
            command = [sys.executable, "-c", RAW_FLOWER, json.dumps(scale_scenario(n, setting, data_dir))]
            seconds, peak_mb, out = timed_with_peak_memory(command)
            raw[n] = seconds
            reply = json.loads(out.strip().splitlines()[-1])
            print(f"   raw Flower N={n:>7}: trained {reply['clients_trained']}/{n}, {seconds:.0f} s "
                  f"({1000 * seconds / n:.1f} ms per client), peak {peak_mb:.0f} MB")
            for reason, count in reply["errors"].items():  # Flower's error replies, by the reason's last line
                print(f"      {count} error replies: {reason}")
            if n in ours:
                print(f"   time per client at N={n}: testbed / raw Flower = {ours[n][0] / seconds:.2f}")
    if ours and raw and max(ours) > max(raw):
        large, yardstick = max(ours), max(raw)
        ratio = (ours[large][0] / large) / (raw[yardstick] / yardstick)
        print(f"   time per client, testbed at N={large} / raw Flower at N={yardstick}: {ratio:.2f} (target <= 0.2)")
    if len(ours) > 1:
        small, large = min(ours), max(ours)
        print(f"   peak memory N={large} / N={small}: {ours[large][1] / ours[small][1]:.2f} "
              "(target <= 2 from 10,000 to 1,000,000)")


def _testbed_round(scenario: dict[str, Any], setting: str, keep: Path | None,
                   runs_dir: Path | None) -> tuple[float, float]:
    """Wall time and peak memory of `testbed run` for one round of the scenario's clients. Its run
    folder is ``runs_dir``/fedavg-N-clients where given (kept: a killed run continues with `testbed
    resume`, redoing its round), else a temporary one."""
    n = scenario["data"]["num_clients"]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = (runs_dir or Path(tmp)) / f"fedavg-{n}-clients"
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump(scenario))
        seconds, peak_mb, _ = timed_with_peak_memory(
            [sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(run_dir), "--quiet"])
        record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        if keep is not None:  # the run's own summary, with what only the benchmark sees
            summary = json.loads((run_dir / "summary.json").read_text())
            summary["benchmark"] = {"command_wall_s": round(seconds, 1), "peak_process_tree_mb": round(peak_mb),
                                    "uploads_on_disk": record.get("uploads_on_disk", 0), "setting": setting}
            keep.mkdir(parents=True, exist_ok=True)
            suffix = "" if setting == "digits-cnn" else f"-{setting}"
            (keep / f"fedavg-{n}-clients{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"   testbed    N={n:>7}: trained {record['clients_trained']}/{record['clients_requested']}, "
          f"{seconds:.0f} s ({1000 * seconds / n:.1f} ms per client), peak {peak_mb:.0f} MB, "
          f"uploads staged on disk {record.get('uploads_on_disk', 0)}")
    return seconds, peak_mb


def timed_with_peak_memory(command: list[str]) -> tuple[float, float, str]:
    """Wall time of ``command``, the peak summed RSS of its process tree (sampled every 0.5 s; Ray's
    own servers are children of the driver, started in-process), and its stdout."""
    import psutil

    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        root, peak = psutil.Process(process.pid), 0
        while process.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass  # a process ended between listing and reading: the next sample counts again
            time.sleep(0.5)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(command[:3])} failed: {err.read()[-2000:]}")
        return seconds, peak / 2**20, out.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--scale", type=int, nargs="*", default=[])
    parser.add_argument("--raw-scale", type=int, nargs="*", default=[])
    parser.add_argument("--skip-comparison", action="store_true", help="only section 3")
    parser.add_argument("--keep", type=Path, help="section 3: keep each testbed run's summary.json here")
    parser.add_argument("--scale-setting", choices=SCALE_SETTINGS, default="digits-cnn",
                        help="section 3's data and model (table-mlp: the million-client round)")
    parser.add_argument("--runs-dir", type=Path, help="section 3: keep each testbed run's folder here")
    args = parser.parse_args()
    if not args.skip_comparison:
        testbed_vs_flower(args.rounds, args.clients)
        aggregation_times()
    if args.scale or args.raw_scale:
        scale(args.scale, args.raw_scale, args.keep, args.scale_setting, args.runs_dir)


if __name__ == "__main__":
    main()
