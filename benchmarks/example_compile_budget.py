"""One small example of memplan.compile_under_budget (issue 28, first slice): a 4-block GPT-style stack
(width 128, 4 heads, sequence 128, batch 8) on CPU, one torch thread, every default fraction with each
of the partitioner's solvers (PyTorch's dp_knapsack, memplan's exact knapsack, memplan's peak-aware
MILP; compiled candidates only), then the default call (memplan's chain plans compete too). Prints
eager autograd's peak and each candidate's measured peak, median step time (5 steps, no spread
reported) and compile or solve time. Not the benchmark of issue 28 item 4 (benchmarks/bench_budget.py).

    python benchmarks/example_compile_budget.py [BUDGET]      # default 40MiB
"""
from __future__ import annotations

import sys
import time

import torch

import memplan
from memplan.models.memory import profiler_peak
from memplan.models.networks.gpt2 import SDPABlock as Block


def main(budget: str = "40MiB") -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(4)])
    x, y = torch.randn(8, 128, 128), torch.randn(8, 128, 128)
    loss = torch.nn.functional.mse_loss
    loss(model(x), y).backward()                       # gradients exist before the window, as below
    _, eager_peak, _ = profiler_peak(lambda: loss(model(x), y).backward())
    print(f"eager autograd peak {eager_peak / 2**20:.1f} MiB")
    for p in model.parameters():
        p.grad = None
    for solver, chain in (("pytorch", False), ("memplan", False), ("memplan-peak", False), ("pytorch", True)):
        t0 = time.perf_counter()
        try:
            step = memplan.compile_under_budget(model, (x,), budget, loss_fn=loss, example_targets=(y,),
                                                solver=solver, repeats=5, chain=chain)
            print(step.report())
        except memplan.InfeasibleError as e:
            print(f"solver {solver}{', chain plans too' if chain else ''}: refused: {e}")
        print(f"search {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main(*sys.argv[1:2])
