"""Issue 30, before the multi-tensor cuts: what today's single-tensor linearization makes of the
multi-branch networks of the zoo (NASNet-A-style, U-Net, Transformer encoder-decoder).

For each network (default widths, a small input, batch 2, CPU, one thread): the traced graph's node
count; the chain of ``models.graph.linearize_model`` with ``cuts="saved"`` (the default of ``memplan
profile``) and with ``cuts="minimal"``: number of stages L and nodes per stage (the folded loss head in
brackets); then the ``cuts="saved"`` chain profiled with ``models.profiler.profile_chain``
(``timing="isolated"``, ``repeats=1``) and ``memplan.remat.memory_range``: the minimum feasible
re-materialization memory against store-all's peak. Issue 30's acceptance asks for at most 50%.

    nice -n 19 python benchmarks/bench_multi_branch.py            # about a minute on one core

Writes the table printed here to ``benchmarks/results/multi_branch_cpu.txt`` (``--no-write``: print only).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

#: (network, constructor arguments, per-sample input)
SETTINGS = [
    ("nasnet_a", {}, (3, 32, 32)),          # C = 16, 4 normal cells per stack, 14 cells
    ("unet", {}, (3, 64, 64)),              # base 64, depth 4
    ("transformer", {}, (128,)),            # 4 + 4 layers, d_model 256, 64 source + 64 target tokens
]


def _sizes(lm) -> str:
    sizes = [len(g) for g in lm.groups]
    return str(sizes) + (f" [+{len(lm.head_group)} in loss]" if lm.head_group else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)

    import torch

    import memplan
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain

    torch.set_num_threads(1)
    lines = [f"# {' '.join(['python', 'benchmarks/bench_multi_branch.py'] + (argv or sys.argv[1:]))}",
             f"# torch {torch.__version__}, CPU, 1 thread, batch {args.batch}; memory in MiB (CPU tensor-storage bytes)"]
    for name, kw, shape in SETTINGS:
        t0 = time.perf_counter()
        torch.manual_seed(0)
        model = get_model(name, **kw).train()
        x = example_input(name, args.batch, shape)
        loss_fn = classification_loss(seed=0)
        saved = linearize_model(model, x, loss_fn, cuts="saved")
        minimal = linearize_model(model, x, loss_fn, cuts="minimal")
        nodes = saved.captured.graph.number_of_nodes()
        chain = profile_chain(saved.stages, x, saved.loss_stage(loss_fn), repeats=1, timing="isolated",
                              names=saved.names, loss_name=saved.loss_name, name=name)
        lo, hi = memplan.remat.memory_range(chain)
        lines += [f"{name} {kw or '(defaults)'}, input {'x'.join(map(str, shape))}: {nodes} traced nodes",
                  f"  cuts=saved:   L = {saved.L:3d}  nodes per stage {_sizes(saved)}  names {saved.names}",
                  f"  cuts=minimal: L = {minimal.L:3d}  nodes per stage {_sizes(minimal)}",
                  f"  remat (cuts=saved chain): minimum feasible {lo / 2**20:.3f} MiB, store-all peak "
                  f"{hi / 2**20:.3f} MiB, ratio {lo / hi:.1%}  ({time.perf_counter() - t0:.1f} s)"]
        print("\n".join(lines[-4:]), flush=True)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "multi_branch_cpu.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
