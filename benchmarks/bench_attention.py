"""Benchmark: forward + backward time of an attention layer with Softmax_1 against vanilla softmax.

One run times the same `testbed.pretrain.model.SelfAttention` layer (causal, rotary, d_model 128,
4 heads, batch 4) at several sequence lengths in four configurations:
  softmax    / SDPA     vanilla softmax through PyTorch's fused scaled_dot_product_attention
                        (how the models run vanilla attention; the peer)
  softmax_1  / SDPA     Softmax_1 through the same fused kernel, as attention over one extra
                        zero "no-op" key (how the models run OutEffHop attention)
  softmax    / explicit q k^T, masked, torch.softmax, times v (the weights materialised)
  softmax_1  / explicit the same with `testbed.pretrain.attention.softmax_1` (custom autograd backward)
and prints them side by side with the ratios Softmax_1 / softmax (target <= 1.10) and explicit /
fused. Configurations are timed in interleaved rounds, in a rotating order (median of --rounds),
so drift in the load of a shared machine hits all alike. Not a test. Usage:
    python benchmarks/bench_attention.py [--lengths 64 128 256 512 1024] [--rounds 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from testbed.pretrain.config import ModelConfig
from testbed.pretrain.model import SelfAttention, rotary_tables

D_MODEL, HEADS, BATCH = 128, 4, 4
CONFIGURATIONS = {  # name: (attention variant, fused)
    "softmax/SDPA": ("softmax", True),
    "softmax_1/SDPA": ("softmax_1", True),
    "softmax/explicit": ("softmax", False),
    "softmax_1/explicit": ("softmax_1", False),
}


def make_layer(variant: str, fused: bool) -> SelfAttention:
    torch.manual_seed(0)
    layer = SelfAttention(D_MODEL, HEADS, ModelConfig(d_model=D_MODEL, heads=HEADS, attention=variant))
    layer.fused = fused
    return layer


def step_seconds(layer: SelfAttention, x: torch.Tensor, rotary) -> float:
    """One forward + backward pass of the layer (gradients of its parameters and of x)."""
    started = time.perf_counter()
    layer(x, rotary, None).square().mean().backward()
    return time.perf_counter() - started


def time_length(length: int, rounds: int) -> dict[str, float]:
    """Median seconds per forward + backward of each configuration at this sequence length."""
    layers = {name: make_layer(*spec) for name, spec in CONFIGURATIONS.items()}
    x = torch.randn(BATCH, length, D_MODEL, generator=torch.Generator().manual_seed(1), requires_grad=True)
    rotary = rotary_tables(length, D_MODEL // HEADS)
    for _ in range(3):  # warm-up: allocator and kernel selection
        for layer in layers.values():
            step_seconds(layer, x, rotary)
    times: dict[str, list[float]] = {name: [] for name in layers}
    names = list(layers)
    for round_index in range(rounds):
        # Rotate the order every round, so no configuration always runs first (or last).
        for name in names[round_index % len(names):] + names[: round_index % len(names)]:
            times[name].append(step_seconds(layers[name], x, rotary))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"SelfAttention fwd+bwd, causal, batch {BATCH}, d_model {D_MODEL}, {HEADS} heads, "
          f"{args.threads} thread(s), median of {args.rounds} interleaved rounds (ms)")
    header = (f"{'T':>5} | {'softmax/SDPA':>12} {'softmax_1/SDPA':>14} {'ratio':>6} | {'softmax/expl':>12} "
              f"{'softmax_1/expl':>14} {'ratio':>6} | {'expl/SDPA (softmax_1)':>21}")
    print(header)
    print("-" * len(header))
    for length in args.lengths:
        ms = {name: 1e3 * seconds for name, seconds in time_length(length, args.rounds).items()}
        fused_ratio = ms["softmax_1/SDPA"] / ms["softmax/SDPA"]
        explicit_ratio = ms["softmax_1/explicit"] / ms["softmax/explicit"]
        print(f"{length:>5} | {ms['softmax/SDPA']:>12.2f} {ms['softmax_1/SDPA']:>14.2f} {fused_ratio:>6.2f} | "
              f"{ms['softmax/explicit']:>12.2f} {ms['softmax_1/explicit']:>14.2f} {explicit_ratio:>6.2f} | "
              f"{ms['softmax_1/explicit'] / ms['softmax_1/SDPA']:>21.2f}")
    print("ratio: Softmax_1 / softmax in the same implementation (target <= 1.10).")


if __name__ == "__main__":
    main()
