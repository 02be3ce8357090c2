"""SDEA's server step per round beside FedAvg's aggregation, over the number of clients and public images.

SDEA (strategies/sdea.py) learns its aggregation weights by Adam on a virtual global model
``sum_k w_k theta_k``: every step mixes the n client states once (O(n d)), runs the *one* mixed
model forward and backward on two augmented views of a public batch, and takes one Adam step on
the n logits. A round is ``epochs * ceil(m / batch_size)`` such steps (m public images), so its
cost is about ``steps * (model forward+backward on 2 * batch_size images + 2 n d)``, against
FedAvg's single ``n d`` weighted sum. This benchmark measures, at the paper's settings (the
defaults of the ``sdea`` strategy's config: epochs, lr, weight decay, batch and public size) and
in the same run:

- FedAvg's aggregation (stack the n states, one weighted sum), the yardstick;
- SDEA's whole server step (``sdea_weights``: the learned weights and FINCH, then the same sum);
- the floor: the same steps' forward and backward passes of the model alone, on the same views,
  with no mixing and no weight learning, which any implementation of SDEA's math must run;
- the floor's floating-point work (torch's FLOP counter) at this core's measured matrix-multiply
  rate, so the ratio to FedAvg that no CPU implementation can beat on this machine is printed too.

Everything runs with one intra-op thread, as the federated server runs every aggregation
(``testbed.determinism.single_threaded``). ``--default-threads`` adds one SDEA round with torch's
default thread count, the setting of the older ``bench_federated.py`` section 2 (107.7 s a round at
10 clients on a loaded 2-core machine: two threads spin against each other on a busy core).

    python benchmarks/bench_sdea.py [--clients 10 50 100] [--public 256 512 1024 2048]
        [--dataset glyphs --arch simple_cnn] [--default-threads]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from testbed.determinism import single_threaded

Model = Callable[[], torch.nn.Module]


def paper_settings() -> Any:
    """The ``sdea`` strategy's config with every default: the paper's epochs, lr, batch and public set."""
    from testbed.federated.strategies.sdea import SDEA

    return SDEA.Config()


def model_and_shape(dataset: str, arch: str) -> tuple[Model, tuple[int, ...]]:
    from testbed.data import load_dataset
    from testbed.workloads.classifier.config import ClassifierConfig
    from testbed.workloads.classifier.model import build_classifier

    data = load_dataset(dataset)
    assert data.image_shape is not None, f"{dataset} is not an image dataset"
    return (lambda: build_classifier(ClassifierConfig(arch=arch), data)), tuple(data.image_shape)


def public_set(config: Any, size: int, shape: tuple[int, ...]) -> torch.Tensor:
    from testbed.data import public_images
    from testbed.seeding import SeedTree

    spec = config.public.model_copy(update={"size": size})
    return torch.from_numpy(public_images(spec, shape, SeedTree(0).numpy("bench.public")))


def client_states(model_fn: Model, n: int) -> list[dict[str, torch.Tensor]]:
    """n perturbed copies of one model, as clients a round after the same global model would be."""
    gen = torch.Generator().manual_seed(1)
    base = model_fn().state_dict()
    return [{k: v + 0.01 * torch.randn(v.shape, generator=gen).to(v.dtype) if v.is_floating_point() else v
             for k, v in base.items()} for _ in range(n)]


def fedavg_s(states: Sequence[dict[str, torch.Tensor]], repeats: int = 5) -> float:
    """FedAvg's aggregation, median of ``repeats``: stack the states, one weighted sum."""
    from testbed.strategies.vectors import stack_states

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        stacked = stack_states(states)
        _ = torch.full((len(states),), 1.0 / len(states)) @ stacked
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def sdea_s(model_fn: Model, states: Sequence[dict[str, torch.Tensor]], public: torch.Tensor, config: Any) -> float:
    """SDEA's server step: the learned weights, FINCH's flagging, then the same weighted sum."""
    from testbed.data import augment_views
    from testbed.strategies.sdea import sdea_weights
    from testbed.strategies.vectors import stack_states

    started = time.perf_counter()
    weights, _ = sdea_weights(model_fn, states, public, augment_views, epochs=config.epochs,
                              generator=torch.Generator().manual_seed(0), rule=config.rule, bn_mode=config.bn_mode,
                              batch_size=config.batch_size, lr=config.lr, weight_decay=config.weight_decay)
    _ = weights @ stack_states(states)
    return time.perf_counter() - started


def _model_steps(model_fn: Model, public: torch.Tensor, config: Any, steps: int | None = None) -> None:
    """SDEA's batches and views through the model alone, forward and backward (``steps``: stop early)."""
    from testbed.data import augment_views
    from testbed.strategies.sdea import entropy_objective

    model = model_fn().eval()
    for module in model.modules():  # batch norm as SDEA's virtual model runs it
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and config.bn_mode == "train":
            module.train()
    gen, done, m = torch.Generator().manual_seed(0), 0, public.shape[0]
    for _ in range(config.epochs):
        order = torch.randperm(m, generator=gen)
        for start in range(0, m, config.batch_size):
            xb = public[order[start:start + config.batch_size]]
            loss = sum(entropy_objective(model(augment_views(xb, gen))) for _ in range(2)) / 2
            model.zero_grad()
            loss.backward()
            done += 1
            if steps is not None and done == steps:
                return


def floor_s(model_fn: Model, public: torch.Tensor, config: Any) -> float:
    started = time.perf_counter()
    _model_steps(model_fn, public, config)
    return time.perf_counter() - started


def flops_per_step(model_fn: Model, public: torch.Tensor, config: Any) -> int:
    """Floating-point operations of one step's model forward and backward (torch's FLOP counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        _model_steps(model_fn, public, config, steps=1)
    return int(counter.get_total_flops())


def matmul_gflops(size: int = 512, repeats: int = 20) -> float:
    """This core's float32 matrix-multiply rate, the best of ``repeats`` (a generous peak)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def row(label: str, n: int, m: int, model_fn: Model, shape: tuple[int, ...], config: Any) -> float:
    """One table row; returns FedAvg's time (the yardstick of the arithmetic floor's line)."""
    states, public = client_states(model_fn, n), public_set(config, m, shape)
    steps = config.epochs * -(-m // config.batch_size)
    fedavg, sdea, floor = fedavg_s(states), sdea_s(model_fn, states, public, config), floor_s(model_fn, public, config)
    print(f"   {label:<8} {n:>7} {m:>6} {steps:>5} {fedavg:>9.4f} {sdea:>8.2f} {sdea / fedavg:>7.0f} "
          f"{1e3 * sdea / steps:>9.2f} {floor:>8.2f} {sdea / floor:>9.2f}")
    return fedavg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--public", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--dataset", default="glyphs", help="the clients' images (default: 28x28 glyphs)")
    parser.add_argument("--arch", default="simple_cnn", help="the classifier (default: the authors' SimpleCNN)")
    parser.add_argument("--default-threads", action="store_true",
                        help="also one round with torch's default thread count (slow on a loaded machine)")
    args = parser.parse_args()
    config = paper_settings()
    model_fn, shape = model_and_shape(args.dataset, args.arch)
    n0, m0 = args.clients[0], config.public.size
    print(f"SDEA at the paper's settings: epochs {config.epochs}, batch {config.batch_size}, lr {config.lr}, "
          f"weight decay {config.weight_decay}, public {config.public.source} ({m0} images); {args.arch} on "
          f"{args.dataset} {shape}, d = {sum(v.numel() for v in model_fn().state_dict().values())}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"   {'growth':<8} {'clients':>7} {'public':>6} {'steps':>5} {'FedAvg s':>9} {'SDEA s':>8} {'ratio':>7} "
          f"{'ms/step':>9} {'floor s':>8} {'SDEA/floor':>9}")
    with single_threaded():
        # Warm-up: the kernels' first calls, and Adam's first construction imports torch._dynamo (about 1 s).
        _model_steps(model_fn, public_set(config, m0, shape), config, steps=2)
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        fedavg_s(client_states(model_fn, n0))
        yardstick = [row("clients", n, m0, model_fn, shape, config) for n in args.clients][0]
        for m in args.public:
            row("public", n0, m, model_fn, shape, config)
        public = public_set(config, m0, shape)
        flops = flops_per_step(model_fn, public, config) * config.epochs * -(-m0 // config.batch_size)
        rate = matmul_gflops()
    compute_floor = flops / (rate * 1e9)
    print(f"   floor by arithmetic at {n0} clients, {m0} images: the model's forward+backward is {flops / 1e9:.1f} "
          f"GFLOP a round; at this core's float32 matmul rate ({rate:.0f} GFLOP/s, one thread) that alone takes "
          f"{compute_floor:.2f} s = {compute_floor / yardstick:.0f}x FedAvg's aggregation (target 10x)")
    if args.default_threads:
        states = client_states(model_fn, n0)
        print(f"   torch's default threads ({torch.get_num_threads()}), {n0} clients, {m0} images: SDEA "
              f"{sdea_s(model_fn, states, public, config):.2f} s (load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
