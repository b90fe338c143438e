"""What planning with each forward's own overhead buys (2026-11-28): the same networks, limits and
solvers, planned once with each forward's own overhead (``Chain.of_all`` for F_all, ``Chain.of_ng``
for F_ck / F_none, what the executors hold) and once in the papers' one-overhead model (``o_f``, the
larger of the two, for every forward), side by side in one run.

Chains are profiled here on the CPU (one torch thread, sizes exact, times as measured unless said):
- ``gpt2-12``: GPT-2 small's 12 blocks at width 64, sequence 256, batch 2, its stage times taken from
  the H100 profile of GPT-2 small b8 s1024 (as ``offload_peak_gap.py``), the link 53.28 GB/s scaled by
  the two chains' stored bytes;
- ``gpt2-4``: issue 27's CPU GPT-2 (4 layers, width 256, sequence 256, batch 4), link 1 GB/s;
- ``resnet50``: batch 2 at 128x128, link 1 GB/s.

For each problem (re-materialization: rotor; offloading, paper 001: DYNPROG; both, paper 000: the
joint DP) it prints the least memory in both models, then at limits 5%, 20% and 50% of the way from the
own-overhead least memory to the peak without recomputation or transfers, each model's predicted step
time (the simulator's makespan, the model's own replay: with own overheads that replay is the executor's
peak to the byte on the CPU, ``offload_peak_gap.py``) and the ratio one-overhead / own (above 1: the
own-overhead plan is faster). "none" where the one-overhead model has no plan at that limit. Rotor's
own-overhead plan at the lowest limit is executed on the CPU: its measured peak against the limit and the
replay, its gradients against store-all's executed on the same stages.

    python benchmarks/own_overheads_gain.py [--out FILE]        # about 1-2 minutes on 2 cores
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import dataclasses
import sys
import time
from pathlib import Path

FRACTIONS = (0.05, 0.2, 0.5)


def _chains():
    import torch

    from memplan.models.graph import linearize_model
    from memplan.models.instance import load_chain
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain

    torch.set_num_threads(1)
    out = []
    specs = [("gpt2-12", "gpt2", dict(n_layer=12, n_embd=64, n_head=2, n_ctx=256, vocab=512), 2, (256,)),
             ("gpt2-4", "gpt2", dict(n_layer=4, n_embd=256, n_head=4, n_ctx=256, vocab=512), 4, (256,)),
             ("resnet50", "resnet50", dict(num_classes=10), 2, (3, 128, 128))]
    for name, net, kw, batch, shape in specs:
        torch.manual_seed(0)
        model = get_model(net, **kw).train()
        x = example_input(net, batch, shape, **({"vocab": kw["vocab"]} if "vocab" in kw else {}))
        loss_fn = classification_loss()
        lm = linearize_model(model, x, loss_fn)
        chain = profile_chain(lm.stages, x, lm.loss_stage(loss_fn), repeats=1, names=lm.names,
                              loss_name=lm.loss_name, input_grad=False)
        beta = 1e9
        if name == "gpt2-12":
            gpu = load_chain("instances/gpt2-small-b8-s1024-h100.json")
            beta = 53.28e9 * float(chain.wabar[1:].sum() / gpu.wabar[1:].sum())
            chain = dataclasses.replace(chain, uf=gpu.uf.copy(), ub=gpu.ub.copy())
        out.append((name, chain, beta, (model, lm.stages, lm.loss_stage(loss_fn), x)))
    return out


def _executed(run, chain, sched, limit) -> str:
    """Rotor's plan executed on the CPU (models.runtime.execute, the dispatch-mode tracker): the measured
    peak against the limit and the replay, and the gradients against plain autograd's."""
    import copy

    import torch

    from memplan.models.remat import simulate_remat
    from memplan.models.runtime import execute

    model, stages, loss_stage, x = run
    ref = copy.deepcopy(model)
    for m in (model, ref):
        m.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    res = execute(stages, loss_stage, x, sched, measure_memory=True, device="cpu", input_grad=False)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    execute(stages, loss_stage, x, [("F_all", l) for l in range(1, chain.L + 2)]
            + [("B", l) for l in range(chain.L + 1, 0, -1)], device="cpu", input_grad=False)
    same = all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)
    pred = simulate_remat(chain, sched).peak_memory
    return (f"executed: measured {res.peak_memory / 2**20:.2f} MiB ({res.peak_memory / pred - 1:+.2%} vs the "
            f"replay, {'within' if res.peak_memory <= limit else 'OVER'} the limit), gradients "
            f"{'equal' if same else 'DIFFER'} to store-all's")


def main(argv=None) -> int:
    p = OneLineParser(name='own_overheads_gain', description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the lines to this file")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per solve (default 30)")
    a = p.parse_args(argv)
    if not a.time_limit > 0:
        print(f"own_overheads_gain: --time-limit {a.time_limit:g}: give a positive number of seconds", file=sys.stderr)
        return 2
    import numpy as np

    from memplan import offload, remat, remat_offload
    from memplan.baselines.remat_offload_min_memory import min_memory as joint_min_memory
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload
    from memplan.models.remat import simulate_remat, store_all_ops

    t0 = time.perf_counter()
    lines = ["own_overheads_gain: each forward's own overhead (own) against the papers' one o_f (one), same "
             "limits, predicted step times; ratio = one / own"]
    for name, chain, beta, run in _chains():
        one = chain.one_overhead()
        lines.append(f"{name}: L = {chain.L}, link {beta / 1e6:.0f} MB/s; stages whose two forward overheads "
                     f"differ: {int(np.sum(chain.of_all != chain.of_ng))}; F_all's own below o_f by up to "
                     f"{float((chain.of - chain.of_all).max()) / 2**20:.2f} MiB, the no-grad forward's by up to "
                     f"{float((chain.of - chain.of_ng).max()) / 2**20:.2f} MiB (largest o_f "
                     f"{float(chain.of.max()) / 2**20:.2f} MiB)")
        store_all = simulate_remat(chain, store_all_ops(chain.L)).peak_memory
        problems = [
            ("rotor", lambda c: remat.memory_range(c)[0], store_all,
             lambda c, m: remat.solve(c, memory=m, method="rotor", time_limit=a.time_limit)),
            ("dynprog", min_feasible_memory, peak_memory_no_offload(chain),
             lambda c, m: offload.solve(c, memory=m, bandwidth=beta, method="dynprog", time_limit=a.time_limit)),
            ("joint", lambda c: joint_min_memory(c, beta).value, store_all,
             lambda c, m: remat_offload.solve(c, memory=m, bandwidth=beta, method="dp", time_limit=a.time_limit)),
        ]
        for method, least, top, solve in problems:
            lo_own, lo_one = float(least(chain)), float(least(one))
            lines.append(f"  {method:8s} least memory: own {lo_own / 2**20:9.2f} MiB, one {lo_one / 2**20:9.2f} MiB "
                         f"({lo_one / lo_own - 1:+.2%})")
            for f in FRACTIONS:
                m = float(int(lo_own + f * (top - lo_own)))
                s_own, s_one = solve(chain, m), solve(one, m)
                if not s_own.success:
                    lines.append(f"    {f:4.2f} ({m / 2**20:9.2f} MiB): own: {s_own.status}")
                    continue
                own_t = s_own.objective
                if s_one.success:
                    lines.append(f"    {f:4.2f} ({m / 2**20:9.2f} MiB): own {own_t * 1e3:9.2f} ms, one "
                                 f"{s_one.objective * 1e3:9.2f} ms, ratio {s_one.objective / own_t:.4f}")
                else:
                    lines.append(f"    {f:4.2f} ({m / 2**20:9.2f} MiB): own {own_t * 1e3:9.2f} ms, one none "
                                 f"({s_one.status})")
                if method == "rotor" and f == FRACTIONS[0]:
                    lines.append(f"      rotor's own-overhead plan {_executed(run, chain, s_own.schedule, m)}")
    lines.append(f"({time.perf_counter() - t0:.0f} s)")
    print(*lines, sep="\n")
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'own_overheads_gain'))    # bad input: one line, exit 2