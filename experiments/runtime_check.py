"""Run re-materialization sequences for real and compare with the simulator (issue: runtime executor).

For each network (ResNet-18 and a GPT-2-style decoder by default): linearize it, profile the chain
(:func:`models.profiler.profile_chain`), compute sequences with :func:`memplan.remat.solve` (rotor =
paper 004's persistent DP, revolve, sequential checkpointing; at memory limits a fraction of the way
from the smallest feasible memory to the store-all peak, :func:`memplan.remat.memory_range`) plus the
fixed store-all and bisection sequences of :mod:`memplan.baselines.remat_heuristics`,
then execute every sequence with :func:`models.runtime.execute` and record

* ``grads_equal``: every parameter gradient ``torch.equal`` to plain autograd's;
* ``sim_peak`` / ``real_peak``: the simulator's peak on the profiled chain vs the measured peak
  (CPU: dispatch-mode tracker; CUDA: allocator statistics);
* ``sim_time`` / ``real_time``: the simulator's makespan vs the executor's wall-clock time (median of
  ``--repeats`` untracked runs).

    python -m memplan.experiments.runtime_check --out results/runtime_check.csv
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path
from memplan import remat
from memplan.baselines.remat_heuristics import bisection_schedule, store_all_schedule
from memplan.models.remat import simulate_remat

CASES = {
    "resnet18": dict(kw={}, shape=(3, 64, 64), batch=2),
    "gpt2": dict(kw=dict(n_layer=4, n_embd=64, n_head=4, vocab=256, n_ctx=64, dropout=0.1), shape=(32,), batch=2),
}


def sequences(chain, fractions):
    out = [("store_all", None, store_all_schedule(chain)), ("bisection", None, bisection_schedule(chain))]
    lo, hi = remat.memory_range(chain)
    for f in fractions:
        mem = lo + f * (hi - lo)
        for name in ("rotor", "revolve", "sequential"):
            sol = remat.solve(chain, memory=mem, method=name, slots=500)
            if sol.success:
                out.append((name, mem, sol.schedule))
    return out


def run_case(name: str, spec: dict, fractions, repeats: int, device: str) -> list[dict]:
    import torch

    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    model = get_model(name, **spec["kw"]).to(device).train()
    x = example_input(name, spec["batch"], spec["shape"], vocab=spec["kw"].get("vocab", 50257), device=device)
    loss_fn = classification_loss()
    ref = copy.deepcopy(model)
    torch.manual_seed(7)
    loss_fn(ref(x)).backward()
    grads = {n: p.grad for n, p in ref.named_parameters()}
    lm = linearize_model(copy.deepcopy(model), x)
    chain = profile_chain(lm.stages, x, loss_fn, repeats=repeats, device=device, names=lm.names)
    rows = []
    for kind, mem, seq in sequences(chain, fractions):
        sim = simulate_remat(chain, seq)
        m = copy.deepcopy(model)
        stages = linearize_model(m, x).stages
        torch.manual_seed(7)
        res = execute(stages, loss_fn, x, seq, measure_memory=True, device=device)
        equal = all(torch.equal(p.grad, grads[n]) for n, p in m.named_parameters())
        times = []
        for _ in range(repeats):
            for p in m.parameters():
                p.grad = None
            torch.manual_seed(7)
            times.append(execute(stages, loss_fn, x, seq, device=device).time)
        rows.append({"model": name, "L": chain.L, "sequence": kind, "memory_limit": mem, "ops": len(seq),
                     "recomputations": seq.count("F_ck") + seq.count("F_none"), "grads_equal": equal,
                     "sim_peak": sim.peak_memory, "real_peak": res.peak_memory,
                     "peak_rel_err": res.peak_memory / sim.peak_memory - 1,
                     "sim_time": sim.makespan, "real_time": statistics.median(times),
                     "time_rel_err": statistics.median(times) / sim.makespan - 1})
    return rows


def main(argv=None) -> int:
    import pandas as pd
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,gpt2")
    p.add_argument("--fractions", default="0.25,0.5", help="memory limits between min and store-all")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="results/runtime_check.csv")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    fr = [float(f) for f in a.fractions.split(",") if f]
    rows = []
    for name in a.models.split(","):
        rows += run_case(name, CASES[name], fr, a.repeats, a.device)
    df = pd.DataFrame(rows)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out, index=False)
    with pd.option_context("display.width", 200):
        print(df.drop(columns=["memory_limit"]).round(4).to_string(index=False))
    print(f"written {a.out}")
    return 0 if df["grads_equal"].all() and (df["peak_rel_err"].abs() <= 0.10).all() else 1


if __name__ == "__main__":
    sys.exit(main())
