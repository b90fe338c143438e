"""Issue 30: the multi-branch networks of the zoo (NASNet-A-style, U-Net, Transformer encoder-decoder)
with single-tensor cuts and with multi-tensor cuts, and the multi-tensor chains executed.

For each network (default widths, a small input, batch 2, CPU, one thread): the traced graph's node
count; L of ``models.graph.linearize_model`` with ``cuts="saved"`` (the default of the existing zoo)
and the minimum feasible re-materialization memory of its profiled chain against store-all's peak;
then ``cuts="multi"`` (what ``cuts="auto"`` picks for these three): L, counted operations per stage,
the cells/blocks/layers of the network against the stages that end in each (every unit must end at
least one stage), the resident bytes, and the minimum feasible memory against store-all's peak
(issue 30 asks for at most 50%). The multi chain is profiled with ``models.profiler.profile_chain``
(``repeats=1``, in-context timing), and store-all plus rotor (``memplan.remat.solve``) at the minimum
(:func:`memplan.remat.memory_range`'s bottom: with resident tensors charged only while they exist, the
least memory a plan is known to fit in) and at 25% and 75% of the way from it to store-all's peak
are executed (``models.runtime.execute``,
``measure_memory=True``): parameter gradients against plain autograd's (``torch.equal``, same RNG
seed) and the measured peak against the simulator's (``models.remat.simulate_remat``). Last, the
chain pipelined on 4 GPUs (``memplan.pipeline.solve``, PipeDream's planner and the ILP, 30 s each).

``--pipeline-only`` (issue 30's last acceptance item) skips the remat part and the executions, and
plans the network over its DAG instead (:func:`memplan.pipeline.solve_graph` on the cost graph of
the traced network and its profiled multi-cut stages, :func:`memplan.models.cost_graph.
from_linearized`; then on PipeDream's published GNMT profile (shipped in ``instances/pipedream/``), its NASNet
profiles when they are in ``../shared/external/pipedream/`` and its ResNet-50 profile, :func:`memplan.models.pipedream.
cost_graph`, batch 32): on 4 GPUs, 12 GB/s, each GPU given its weights four times over plus 1.5
times the base chain's store-all activations, PipeDream's planner on the base chain (contiguous),
PipeDream's planner over the antichain DAG (:mod:`memplan.baselines.pipeline_dag`) and the ILP
(``time_limit`` 60 s, every phase included: at 30 s the ILP of the 40- and 63-stage chains is not
even built, :func:`memplan.pipeline.solve` then returns its best start pattern). These chains count memory from the graph's sizes (as
PipeDream's importer does), not from the profiler's measurements: compare the three methods with
each other, not with the lines above.

    nice -n 19 python benchmarks/bench_multi_branch.py            # about five minutes on one core
    nice -n 19 python benchmarks/bench_multi_branch.py --pipeline-only    # about five minutes

Writes the table printed here to ``benchmarks/results/multi_branch_cpu.txt`` (``--pipeline-only``:
``multi_branch_pipeline_cpu.txt``; ``--no-write``: print only).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PIPEDREAM_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "external" / "pipedream"
#: where PipeDream profiles are looked for, in this order (a file name found in the first is not read
#: again from the second): the ones shipped with memplan (instances/pipedream/: ResNet-18/50, GNMT),
#: then the workspace's shared folder
PIPEDREAM_DIRS = [Path(__file__).resolve().parents[1] / "instances" / "pipedream", PIPEDREAM_DIR]
#: PipeDream profiles planned over their DAG with --pipeline-only (file name patterns; GNMT and NASNet
#: are the issue's; NASNet's is published by PipeDream but not shipped nor in the shared folder today)
PIPEDREAM_PROFILES = ["gnmt*.graph.txt", "nasnet*.graph.txt", "resnet50.graph.txt"]

#: (network, constructor arguments, per-sample input, regular expression of a unit's module path)
SETTINGS = [
    ("nasnet_a", {}, (3, 32, 32), r"cells\.\d+"),          # C = 16, 4 normal cells per stack, 14 cells
    ("unet", {}, (3, 128, 128), r"(down\.\d+|bottleneck|dec\.\d+)"),   # base 64, depth 4: 9 blocks
    ("transformer", {}, (128,), r"(encoder|decoder)\.\d+"),  # 4 + 4 layers, d_model 256, 64 + 64 tokens
]


def _units(lm, pattern: str) -> tuple[int, int]:
    """(units of the network, units in which at least one stage ends): a unit is a module path matching
    ``pattern`` among the traced graph's module calls; a stage ends in the unit of its last node, or
    of the last module call before it."""
    G = lm.captured.graph
    rx = re.compile(pattern)

    def unit(v):
        m = rx.match(str(G.nodes[v].get("target", ""))) if G.nodes[v].get("op") == "call_module" else None
        return m.group(0) if m else None

    order = [lm.captured.source] + [v for g in lm.groups for v in g]
    last, where = None, {}
    for v in order:
        last = unit(v) or last
        where[v] = last
    units = {unit(v) for v in G if unit(v)}
    ends = {where[g[-1]] for g in lm.groups} & units
    return len(units), len(ends)


def graph_lines(cg, label: str, time_limit: float = 60.0) -> list[str]:
    """The 4-GPU pipeline of a cost graph: PipeDream's planner on the base chain, over the antichain
    DAG, and the ILP (``memplan.pipeline.solve_graph``), one line each."""
    import memplan
    from memplan.models.cost_graph import chain_of

    base = chain_of(cg, cg.base_groups)
    _, hi = memplan.remat.memory_range(base)
    mem = 4 * sum(base.weights) + 1.5 * hi
    out = [f"  {label}: pipeline over the DAG, {cg.H.number_of_nodes()} nodes, {len(cg.atoms)} atoms, base chain "
           f"L = {base.L}; 4 GPUs, {mem / 2**20:.1f} MiB each, 12 GB/s"]
    for method in ("pipedream", "pipedream-dag", "ilp"):
        t0 = time.perf_counter()
        sol, chain = memplan.pipeline.solve_graph(cg, memory=mem, gpus=4, bandwidth="12GB/s", method=method,
                                                  time_limit=time_limit, threads=1)
        sch = sol.schedule
        used = ([] if sch is None else sorted(set(sch.layer_gpus())) if hasattr(sch, "layer_gpus")
                else [s for s, (a, b) in enumerate(sch.stages) if a <= b])
        g = sol.details.get("graph", {})
        extra = ""
        if method == "pipedream-dag":
            kept = "every downset" if g.get("exact") else f"a beam of {g.get('beam')} per level"
            extra = f", {g.get('states')} states ({kept}), its chain L = {chain.L}"
        elif method == "ilp":
            extra = f", on the chain of {g.get('ilp_chain')} (L = {chain.L}); {sol.message[:150]}"
        per = "-" if sol.objective is None else f"{sol.objective:.6g} s"
        peak = "-" if sol.peak_memory is None else f"{sol.peak_memory / 2**20:.1f} MiB"
        out.append(f"    {method:13s} {str(sol.status):10s} period {per}, peak {peak}, GPUs with work {len(used)}"
                   f"{extra} ({time.perf_counter() - t0:.1f} s)")
    return out


def pipeline_only(args) -> list[str]:
    """``--pipeline-only``: the zoo networks and PipeDream's profiles planned over their DAG."""
    import torch

    from memplan.models.cost_graph import from_linearized
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.pipedream import cost_graph
    from memplan.models.profiler import classification_loss, multi_cut_provenance, profile_chain

    lines = []
    for name, kw, shape, _ in SETTINGS:
        if args.only and name != args.only:
            continue
        torch.manual_seed(0)
        model = get_model(name, **kw).train()
        x = example_input(name, args.batch, shape)
        loss_fn = classification_loss(seed=0)
        lm = linearize_model(model, x, loss_fn, cuts="multi")
        chain = profile_chain(lm.stages, x, lm.loss_stage(loss_fn), repeats=1, names=lm.names,
                              loss_name=lm.loss_name, name=name, provenance=multi_cut_provenance(lm))
        out = [f"{name} {kw or '(defaults)'}, input {'x'.join(map(str, shape))}, batch {args.batch}: multi cuts, "
               f"L = {chain.L}, atoms = the profiled stages"] + graph_lines(from_linearized(lm, chain), name)
        print("\n".join(out), flush=True)
        lines += out
    if args.only:
        return lines
    for pattern in PIPEDREAM_PROFILES:
        found: dict[str, Path] = {}
        for d in PIPEDREAM_DIRS:
            for f in sorted(d.glob(pattern)):
                found.setdefault(f.name, f)
        files = list(found.values())
        out = [] if files else [f"PipeDream {pattern}: not in {' nor '.join(map(str, PIPEDREAM_DIRS))} (not planned)"]
        for f in files:
            cg = cost_graph(f, batch=32)
            out += [f"PipeDream {f.name}, batch 32: atoms = the profile's nodes"] + graph_lines(cg, f.name)
        print("\n".join(out), flush=True)
        lines += out
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--only", help="one network of the table (implies --no-write)")
    p.add_argument("--pipeline-only", action="store_true",
                   help="only the 4-GPU pipeline, planned over each network's DAG (antichain planner, ILP)")
    args = p.parse_args(argv)
    if args.pipeline_only:
        import torch

        torch.set_num_threads(1)
        lines = [f"# {' '.join(['python', 'benchmarks/bench_multi_branch.py'] + (argv or sys.argv[1:]))}",
                 f"# torch {torch.__version__}, CPU, 1 thread; memory in MiB; periods of the simulator's replay"]
        lines += pipeline_only(args)
        if not (args.no_write or args.only):
            RESULTS.mkdir(exist_ok=True)
            (RESULTS / "multi_branch_pipeline_cpu.txt").write_text("\n".join(lines) + "\n")
        return 0

    import torch

    import memplan
    from memplan.baselines.remat_heuristics import store_all_schedule
    from memplan.models.graph import counted_operations, linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, multi_cut_provenance, profile_chain
    from memplan.models.remat import simulate_remat
    from memplan.models.runtime import execute

    torch.set_num_threads(1)
    lines = [f"# {' '.join(['python', 'benchmarks/bench_multi_branch.py'] + (argv or sys.argv[1:]))}",
             f"# torch {torch.__version__}, CPU, 1 thread, batch {args.batch}; memory in MiB (CPU tensor-storage bytes)"]
    for name, kw, shape, pattern in SETTINGS:
        if args.only and name != args.only:
            continue
        t0 = time.perf_counter()
        out = []
        torch.manual_seed(0)
        model = get_model(name, **kw).train()
        x = example_input(name, args.batch, shape)
        loss_fn = classification_loss(seed=0)
        saved = linearize_model(model, x, loss_fn, cuts="saved")
        nodes = saved.captured.graph.number_of_nodes()
        chain = profile_chain(saved.stages, x, saved.loss_stage(loss_fn), repeats=1, timing="isolated",
                              names=saved.names, loss_name=saved.loss_name, name=name)
        lo, hi = memplan.remat.memory_range(chain)
        out += [f"{name} {kw or '(defaults)'}, input {'x'.join(map(str, shape))}: {nodes} traced nodes",
                f"  cuts=saved: L = {saved.L:3d}, remat minimum feasible {lo / 2**20:.3f} MiB, store-all "
                f"peak {hi / 2**20:.3f} MiB, ratio {lo / hi:.1%}"]
        auto = linearize_model(model, x, loss_fn, cuts="auto")
        lm = linearize_model(model, x, loss_fn, cuts="multi")
        counted = counted_operations(lm.captured.graph)
        n_units, n_ended = _units(lm, pattern)
        chain = profile_chain(lm.stages, x, lm.loss_stage(loss_fn), repeats=1, names=lm.names,
                              loss_name=lm.loss_name, name=name, provenance=multi_cut_provenance(lm))
        lo, hi = memplan.remat.memory_range(chain)
        out += [f"  cuts=multi (auto picks {auto.cuts}): L = {lm.L:3d}, counted operations per stage "
                f"{[sum(v in counted for v in g) for g in lm.groups]}" + (f" [+{len(lm.head_group)} in loss]" if lm.head_group else ""),
                f"    units ({pattern}): {n_units}, with a stage ending in it: {n_ended}; resident tensors "
                f"{len(lm.residency.resident)}, {chain.resident / 2**20:.3f} MiB with their gradients",
                f"    remat minimum feasible {lo / 2**20:.3f} MiB, store-all peak {hi / 2**20:.3f} MiB, "
                f"ratio {lo / hi:.1%}"]

        def grads(fn):
            torch.manual_seed(1)
            for q in model.parameters():
                q.grad = None
            fn()
            return [q.grad.clone() for q in model.parameters()]

        ref = grads(lambda: loss_fn(model(x)).backward())
        plans = [("store-all", store_all_schedule(chain))]
        for f in (0.0, 0.25, 0.75):     # 0: the range's bottom, the least memory a plan is known to fit in
            sol = memplan.remat.solve(chain, memory=lo + f * (hi - lo), method="rotor", time_limit=60)
            plans.append((f"rotor at {lo / 2**20 + f * (hi - lo) / 2**20:.3f} MiB", sol.schedule))
        for label, seq in plans:
            got = {}
            g = grads(lambda: got.setdefault("r", execute(lm.stages, lm.loss_stage(loss_fn), x, seq,
                                                          measure_memory=True)))
            equal = all(torch.equal(a, b) for a, b in zip(ref, g))
            sim = simulate_remat(chain, seq).peak_memory
            meas = got["r"].peak_memory
            out.append(f"    executed {label}: gradients equal to autograd's: {equal}; peak simulated "
                       f"{sim / 2**20:.3f} MiB, measured {meas / 2**20:.3f} MiB, simulated/measured "
                       f"{sim / meas - 1:+.2%}")
        # pipelining on 4 GPUs: PipeDream's planner (on this chain) and the ILP, 12 GB/s links, each GPU
        # given its weights four times over plus 1.5 times store-all's activations on one GPU
        W = sum(chain.weights)
        mem = 4 * W + 1.5 * hi
        for method in ("pipedream", "ilp"):
            sol = memplan.pipeline.solve(chain, memory=mem, gpus=4, bandwidth="12GB/s", method=method,
                                         time_limit=30, threads=1)
            sch = sol.schedule
            used = ([] if sch is None else sorted(set(sch.layer_gpus())) if hasattr(sch, "layer_gpus")
                    else [s for s, (a, b) in enumerate(sch.stages) if a <= b])     # an eager 1F1B run
            out.append(f"    pipeline, 4 GPUs, {mem / 2**20:.1f} MiB each, 12 GB/s, {method}: {sol.status}, period "
                       f"{sol.objective if sol.objective is None else f'{sol.objective:.6g} s'}, GPUs with work {len(used)}")
        out[-1] += f"  ({time.perf_counter() - t0:.1f} s)"
        print("\n".join(out), flush=True)
        lines += out
    if not (args.no_write or args.only):
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "multi_branch_cpu.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
