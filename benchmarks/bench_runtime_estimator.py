"""Measured recompute costs against PyTorch's FLOP estimate in the partitioner's knapsack (issue 28).

PyTorch's ``activation_memory_budget`` partitioner weighs each recompute candidate by a runtime
estimate; by default a FLOP count, in which every pointwise operation and reduction gets the same floor
value. ``runtime_estimator="measured"`` (:mod:`memplan.models.op_timing`) times each candidate
operation instead. This script compiles a training step at PyTorch's budget fractions with both
estimators and both knapsacks (PyTorch's ``dp_knapsack``, memplan's peak-aware MILP), measures every
step's peak (``profiler_peak``), times all the steps side by side in rotating rounds on the CPU clock
(one torch thread; median and 95% interval, :func:`memplan.models.measure.interleaved`), and prints
per fraction the peak and time of each, then for every budget equal to one of the measured peaks the
fastest step within it among the FLOP-estimated candidates and among the measured ones.

    nice -n 19 python benchmarks/bench_runtime_estimator.py            # GPT-style stack and Llama-style stack
    python benchmarks/bench_runtime_estimator.py --quick              # 2 blocks, 3 fractions

Output: printed; the repository's run is in ``benchmarks/results/runtime_estimator_cpu.txt``.
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import time


def networks(quick: bool):
    import torch

    from memplan.models.networks import get_model
    from memplan.models.networks.gpt2 import SDPABlock

    torch.manual_seed(0)
    n = 2 if quick else 4
    gpt = torch.nn.Sequential(*[SDPABlock(128, 4) for _ in range(n)])
    x, y = torch.randn(8, 128, 128), torch.randn(8, 128, 128)
    yield "gpt-style stack (SDPA blocks, width 128, seq 128, batch 8)", gpt, x, y, torch.nn.functional.mse_loss
    if quick:
        return
    torch.manual_seed(0)
    llama = get_model("llama", vocab=512, n_ctx=128, n_layer=2, d_model=128, n_head=4)
    tokens = torch.randint(0, 512, (4, 128))
    targets = torch.randint(0, 512, (4, 128))

    def token_loss(logits, t):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))

    yield "llama-style stack (2 layers, width 128, seq 128, batch 4)", llama, tokens, targets, token_loss


def main(argv=None) -> int:
    import torch
    import torch._functorch.config as fconfig

    from memplan._compile_budget import BudgetSearch
    from memplan.models.measure import clock, interleaved

    p = OneLineParser(name='bench_runtime_estimator', description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--backend", default="aot_eager_decomp_partition", choices=["aot_eager_decomp_partition", "inductor"])
    p.add_argument("--max-rounds", type=int, default=40)
    p.add_argument("--timing-budget", type=float, default=90.0)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    fractions = (0.5, 0.2, 0.05) if a.quick else (0.7, 0.5, 0.3, 0.2, 0.1, 0.05)
    cpu = clock("cpu", 1)
    print(f"backend {a.backend}, torch {torch.__version__}, one thread, CPU clock; fractions {fractions}")
    for title, model, x, y, loss in networks(a.quick):
        print(f"\n== {title}")
        steps = {}          # (estimator, solver, fraction) -> (peak, step, cfg)
        for est in ("flops", "measured"):
            t0 = time.perf_counter()
            search = BudgetSearch(model, (x,), loss_fn=loss, example_targets=(y,), backend=a.backend,
                                  solver="all", fractions=fractions, repeats=1, chain=False,
                                  runtime_estimator=est)
            for c, step, cfg in search.compiled:
                if c.solver == "memplan":       # the exact knapsack: the same model as dp_knapsack's
                    continue
                steps[(est, c.solver, c.fraction)] = (c.peak, step, cfg)
            extra = (f"; {search.estimator.timed} signatures timed for {search.estimator.calls} nodes, "
                     f"{search.estimator.fallbacks} fallbacks") if search.estimator is not None else ""
            print(f"{est}: {len(search.compiled)} compiles in {time.perf_counter() - t0:.1f} s{extra}")

        def timed(step, cfg):
            def once():
                with fconfig.patch(**cfg):
                    t = cpu()
                    step(x, y)
                    return cpu() - t
            return once

        res = interleaved({k: timed(s, c) for k, (_, s, c) in steps.items()}, target=0.02, min_rounds=8,
                          max_rounds=a.max_rounds, budget=a.timing_budget)
        for p_ in model.parameters():
            p_.grad = None
        print(f"{'fraction':>8} {'solver':>13} | {'flops: peak MiB':>15} {'ms [95%]':>22} | "
              f"{'measured: peak MiB':>18} {'ms [95%]':>22}")
        for solver in ("pytorch", "memplan-peak"):
            for f in fractions:
                cells = []
                for est in ("flops", "measured"):
                    k = (est, solver, f)
                    if k not in steps:
                        cells.append(f"{'-':>15} {'-':>22}")
                        continue
                    t = res[k]
                    cells.append(f"{steps[k][0] / 2**20:15.2f} {t.median * 1e3:8.1f} [{t.low * 1e3:.1f}, "
                                 f"{t.high * 1e3:.1f}]{'*' if t.noisy else ' '}")
                print(f"{f:8g} {solver:>13} | {cells[0]} | {cells[1]}")
        # Pareto: at each measured peak, the fastest step within it, per estimator
        budgets = sorted({v[0] for v in steps.values()})
        wins = ties = losses = 0
        for b in budgets:
            best = {}
            for est in ("flops", "measured"):
                fit = [(res[k].median, k) for k, v in steps.items() if k[0] == est and v[0] <= b]
                best[est] = min(fit) if fit else None
            if best["flops"] is None or best["measured"] is None:
                continue
            (tf, kf), (tm, km) = best["flops"], best["measured"]
            apart = res[km].high < res[kf].low or res[kf].high < res[km].low
            if not apart:
                ties += 1
            elif tm < tf:
                wins += 1
            else:
                losses += 1
            print(f"  budget {b / 2**20:7.2f} MiB: flops {tf * 1e3:7.1f} ms ({kf[1]} {kf[2]:g}) | measured "
                  f"{tm * 1e3:7.1f} ms ({km[1]} {km[2]:g}) {tf / tm - 1:+.1%}{'' if apart else ' (intervals overlap)'}")
        lowest = {est: min(v[0] for k, v in steps.items() if k[0] == est) for est in ("flops", "measured")}
        print(f"  measured faster at {wins}, slower at {losses}, within the noise at {ties} of the budgets where both "
              f"fit; lowest peak: flops {lowest['flops'] / 2**20:.2f} MiB, measured {lowest['measured'] / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'bench_runtime_estimator'))    # bad input: one line, exit 2