"""The executor's own host time, where the kernels cost almost nothing (issue 27: on a GPU whose
host queues the kernels barely ahead of it, every microsecond of Python is step time).

A chain of ``--stages`` tiny stages (``Linear(8, 8)``, ``Dropout``, ``Tanh``; batch 4), one torch
thread, the process's CPU clock, every contender once per round in rotating order
(``models.measure.interleaved``), compared round by round (``models.measure.paired_ratio``):

- plain autograd on the ``nn.Sequential`` of the stages, and memplan's store-all (``execute``), with
  and without the holds (``hold=False``: no hook per junction of the fused backward), and both again
  through the general loop (``fast=False``; by default store-all skips it once its first run has
  shown one fused group);
- both held only at their peak too (``hold=holds_at_peak(...)`` of a held measured run: two hooks
  per held B instead of one per junction; the run's peak is the held run's, to the byte);
- memplan's ``sequential``(k) (with and without the holds, and held at its peak) against
  ``torch.utils.checkpoint.checkpoint_sequential``(k), reentrant, over the same stages.

The dropout makes every recomputation replay the generator's state, as it does in GPT-2.

    python benchmarks/bench_executor_overhead.py                 # 40 stages, k = 4, 30 rounds (about 1 min)
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    p = OneLineParser(name='bench_executor_overhead', description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", type=int, default=40)
    p.add_argument("--segments", type=int, default=4)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=20, help="steps per sample")
    p.add_argument("--out", help="also write the lines to this file")
    a = p.parse_args(argv)
    if a.stages < 2 or not 2 <= a.segments <= a.stages or a.rounds < 6 or a.steps < 1:
        print("bench_executor_overhead: --stages >= 2, 2 <= --segments <= --stages, --rounds >= 6 and --steps >= 1",
              file=sys.stderr)
        return 2
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    from memplan.baselines.remat_heuristics import sequential_schedule
    from memplan.models.measure import interleaved, paired_ratio
    from memplan.models.runtime import execute, holds_at_peak, store_all_ops

    torch.set_num_threads(1)
    torch.manual_seed(0)
    L, k = a.stages, a.segments
    stages = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Tanh()) for _ in range(L)]
    model = torch.nn.Sequential(*stages)

    class Loss(torch.nn.Module):
        def forward(self, y):
            return y.square().sum()

    loss = Loss()
    x = torch.randn(4, 8)
    params = list(model.parameters())
    store_all, seq = store_all_ops(L), sequential_schedule(L, k)

    def clear():
        for q in params:
            q.grad = None

    def autograd():
        clear()
        loss(model(x.clone().requires_grad_(True))).backward()

    def plan(ops, hold, fast=True):
        def step():
            clear()
            execute(stages, loss, x, ops, sync=False, hold=hold, fast=fast)
        return step

    def ck():
        clear()
        loss(checkpoint_sequential(model, k, x.clone().requires_grad_(True), use_reentrant=True)).backward()

    def peak(ops):
        for q in params:
            q.grad = torch.zeros_like(q)
        return holds_at_peak(ops, execute(stages, loss, x, ops, measure_memory=True).memory_peak_during)

    runs = {"autograd": autograd, "store-all": plan(store_all, True), "store-all hold=False": plan(store_all, False),
            "store-all, held at its peak": plan(store_all, peak(store_all)),
            "store-all, general loop": plan(store_all, True, False),
            "store-all, general loop, hold=False": plan(store_all, False, False),
            f"sequential({k})": plan(seq, True), f"sequential({k}) hold=False": plan(seq, False),
            f"sequential({k}), held at its peak": plan(seq, peak(seq)),
            f"checkpoint_sequential({k})": ck}
    for fn in runs.values():
        fn()

    def timed(fn):
        def once():
            t0 = time.process_time()
            for _ in range(a.steps):
                fn()
            return (time.process_time() - t0) / a.steps
        return once

    res = interleaved({n: timed(f) for n, f in runs.items()}, min_rounds=a.rounds, max_rounds=a.rounds)
    lines = [f"bench_executor_overhead: {L} tiny stages, sequential with {k} segments, {a.rounds} rounds of "
             f"{a.steps} steps, CPU clock, one thread, torch {torch.__version__}"]
    for n, t in res.items():
        lines.append(f"  {n:38s} {t.median * 1e3:7.3f} ms [{t.low * 1e3:.3f}, {t.high * 1e3:.3f}]")
    lines.append("paired round by round (median of the per-round ratios, 95% interval), and the difference per stage:")
    for num, den in [("store-all", "autograd"), ("store-all hold=False", "autograd"),
                     ("store-all, held at its peak", "autograd"),
                     ("store-all, general loop", "autograd"), ("store-all, general loop, hold=False", "autograd"),
                     (f"sequential({k})", f"checkpoint_sequential({k})"),
                     (f"sequential({k}) hold=False", f"checkpoint_sequential({k})"),
                     (f"sequential({k}), held at its peak", f"checkpoint_sequential({k})")]:
        r = paired_ratio(res[num].times, res[den].times)
        per = (res[num].median - res[den].median) / L * 1e6
        lines.append(f"  {num + ' / ' + den:58s} {r.text()}  ({per:+.1f} us a stage)")
    text = "\n".join(lines) + "\n"
    if a.out:                       # the file first: an interrupted print leaves it whole
        Path(a.out).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'bench_executor_overhead'))    # bad input: one line, exit 2