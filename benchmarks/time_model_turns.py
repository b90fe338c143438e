"""Where the in-context time model misses on small CPU steps (issue 27, item 3): every plan of a sweep
executed and timed, its prediction on the chain re-timed in the same rounds, and the miss broken
down by operation context.

``runtime_check --device cpu`` predicted every plan within 5% but one on 2026-11-28: the tiny GPT-2's
rotor plan at 25% of its range (steps of 5-8 ms), +6.2%. This script asks whether that row is an
outlier or a pattern, and what the model leaves out. For each GPT-2 size it executes rotor at seven
fractions of the memory range, ``sequential`` with 2 to 6 segments and store-all (identical sequences
once), each twice per round: untimed (the measured time) and with per-operation timers
(``execute(op_times=...)``, where a fused backward call now gives each B its own time). The
prediction is the makespan on the chain re-timed from store-all's timed runs of the same rounds,
scaled to store-all's untimed median, as ``runtime_check`` does.

Per plan it prints predicted / measured - 1, the number of turns (a B followed by a forward: the
backward call stops, forwards run, another call starts), and where the plan's per-operation medians
differ from store-all's for the same stage:

* ``first B``: the first B of each backward call after the step's first (B^{L+1}'s call starts in
  store-all too), against the same stage's B inside store-all's call;
* ``other B``: the other B's;
* ``F after B``: the first forward after a B, against the same stage's F_all in store-all's sweep;
* ``F_all``, ``F_ck/F_none``: the other forwards, against F_all in store-all's sweep;
* ``outside``: the untimed run's median less the sum of the per-operation medians, against
  store-all's (the executor's work between operations, and the per-operation medians' own bias).

Then a one-parameter fit, seconds per turn, by least squares over the plans of the first size (the
tuning set), applied unchanged to the second, with the error it leaves on each: whether a per-turn
cost is a model worth having. The column ``turn model`` is the model in use since: the chain's
no-grad forward times and turn cost (:attr:`Chain.uf_ng`, :attr:`Chain.u_turn`) calibrated, as
``runtime_check`` does, from :func:`memplan.models.remat.turn_ops` timed in the same rounds (a
sequence that is none of the plans), so nothing in it is fitted on the plans it predicts.

    python benchmarks/time_model_turns.py --out benchmarks/results/time_model_turns_cpu.txt
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import dataclasses
import statistics
import sys
import time
from pathlib import Path

from memplan.models.remat import turns  # B's followed by a forward

SIZES = {
    # runtime_check's default preset's GPT-2 (5-8 ms steps on this CPU)
    "gpt2-tiny": dict(kw=dict(n_layer=4, n_embd=64, n_head=4, vocab=256, n_ctx=64, dropout=0.1), shape=(32,),
                      batch=2),
    # twice as wide, four times the sequence (35-55 ms steps)
    "gpt2-wide": dict(kw=dict(n_layer=4, n_embd=128, n_head=4, vocab=256, n_ctx=128, dropout=0.1), shape=(128,),
                      batch=2),
}
FRACTIONS = (0.02, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8)
SEGMENTS = (2, 3, 4, 5, 6)
KINDS = ("first B", "other B", "F after B", "F_all", "F_ck/F_none")


def kind(ops, p: int) -> str:
    op, _ = ops[p]
    prev = ops[p - 1][0] if p else None
    if op == "B":
        return "first B" if prev is not None and prev != "B" and p != first_b(ops) else "other B"
    if prev == "B":
        return "F after B"
    return "F_all" if op == "F_all" else "F_ck/F_none"


def first_b(ops) -> int:
    return next(p for p, (op, _) in enumerate(ops) if op == "B")


def plans_of(chain):
    from memplan import remat
    from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule

    lo, hi = remat.memory_range(chain)
    out, seen = {}, set()
    cands = [(f"rotor@{f:g}", remat.solve(chain, memory=lo + f * (hi - lo), method="rotor").schedule)
             for f in FRACTIONS]
    cands += [(f"sequential({k})", sequential_schedule(chain, k)) for k in SEGMENTS]
    cands.append(("store-all", store_all_schedule(chain)))
    for name, seq in cands:
        key = tuple(seq.ops)
        if key not in seen:
            seen.add(key)
            out[name] = seq
    return out


def measure(name: str, spec: dict, min_rounds: int, max_rounds: int, say, holds: str = "peak"):
    """{plan: (ops, measured median, predicted, per-op medians, predicted by the turn model)}. ``holds``:
    how the measured (untimed) runs hold, as ``runtime_check --holds`` (``peak``: at the replay's peak,
    the timed configuration of ``runtime_check`` and ``memplan run``; ``all``: every B, this script's
    only configuration before 2026-11-29, which pays an empty root per fused backward call, about
    40 us a turn that the turn calibration's one-stage calls do not; ``none``: no holds). The runs
    with per-operation timers hold every B (their junction hooks time each B of a fused call)."""
    import torch

    from memplan.experiments.runtime_check import Case
    from memplan.models.measure import interleaved
    from memplan.models.remat import simulate_remat
    from memplan.models.remat import turn_ops
    from memplan.models.runtime import InContextTimes, execute

    case = Case("gpt2", spec, "cpu", repeats=min_rounds, clock="cpu")
    case.holds = holds
    plans = plans_of(case.chain)
    per: dict[str, list[list[float]]] = {k: [] for k in plans}
    cal = turn_ops(case.chain.L)           # the turn model's calibration (not one of the plans)
    per_cal: list[list[float]] = []

    def runner(seq, store):
        ops = seq.ops if hasattr(seq, "ops") else seq
        hold = case._holds(ops, simulate_remat(case.chain, ops).memory_during, replay=True)

        def run():
            case._clear_grads()
            torch.manual_seed(7)
            t0 = time.process_time()
            if store is None:
                execute(case.stages, case.loss_stage, case.x, seq, device="cpu", sync=False, hold=hold)
            else:
                ts: list[float] = []
                execute(case.stages, case.loss_stage, case.x, seq, device="cpu", op_times=ts,
                        clock=time.process_time)
                store.append(ts)
            return time.process_time() - t0
        return run

    runs = {}
    for k, seq in plans.items():
        runs[k] = runner(seq, None)
        runs[k + " (timed ops)"] = runner(seq, per[k])
    runs["turn_ops"] = runner(cal, None)
    runs["turn_ops (timed ops)"] = runner(cal, per_cal)
    t0 = time.perf_counter()
    res = interleaved(runs, target=0.01, min_rounds=min_rounds, max_rounds=max_rounds)
    say(f"{name}: L = {case.chain.L}, {len(plans)} sequences, {len(res['store-all'].times)} rounds "
        f"in {time.perf_counter() - t0:.0f} s (CPU clock, one torch thread, holds {holds})")
    ic = InContextTimes.from_runs(per["store-all"], res["store-all"].times, case.chain.L)
    uf, ub, _ = ic.calibrated()
    timed = dataclasses.replace(case.chain, uf=uf, ub=ub)
    uf_ng, u_turn = ic.turn_model(per_cal, res["turn_ops"].times)
    turned = dataclasses.replace(timed, uf_ng=uf_ng, u_turn=u_turn)
    say(f"{name}: turn model from models.remat.turn_ops in the same rounds: no-grad forwards "
        f"{sum(uf_ng[1:-1]) / sum(uf[1:-1]):.3f} x F_all's, a turn {u_turn * 1e6:.0f} us")
    out = {}
    for k, seq in plans.items():
        med = [statistics.median(col) for col in zip(*per[k])]
        out[k] = (list(seq.ops), statistics.median(res[k].times), simulate_remat(timed, seq).makespan, med,
                  simulate_remat(turned, seq).makespan)
    return out


def report(name: str, rows: dict, say) -> list[tuple[int, float, float, float]]:
    """Prints the table; returns (turns, measured, predicted, predicted by the turn model) per plan."""
    sa_ops, sa_meas, _, sa_med, _ = rows["store-all"]
    ref = {op: t for op, t in zip(sa_ops, sa_med)}
    sa_out = sa_meas - sum(sa_med)
    say(f"  {'plan':15s} {'ops':>3s} {'turns':>5s} {'measured':>9s} {'predicted':>9s} {'error':>6s} {'turn model':>10s}"
        f"   differences from store-all's operations, microseconds: " + ", ".join(KINDS) + ", outside")
    got = []
    for k, (ops, meas, pred, med, turned) in rows.items():
        diff = {c: 0.0 for c in KINDS}
        for p, ((op, l), t) in enumerate(zip(ops, med)):
            diff[kind(ops, p)] += t - ref[("B", l) if op == "B" else ("F_all", l)]
        outside = (meas - sum(med)) - sa_out
        say(f"  {k:15s} {len(ops):3d} {turns(ops):5d} {meas * 1e3:7.3f}ms {pred * 1e3:7.3f}ms {pred / meas - 1:+6.1%} "
            f"{turned / meas - 1:+10.1%}   " + " ".join(f"{diff[c] * 1e6:+7.0f}" for c in KINDS) + f" {outside * 1e6:+7.0f}")
        got.append((turns(ops), meas, pred, turned))
    return got


def main(argv=None) -> int:
    ap = OneLineParser(name='time_model_turns', description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, from {', '.join(SIZES)}; "
                    "the first is the tuning set of the per-turn fit")
    ap.add_argument("--min-rounds", type=int, default=40)
    ap.add_argument("--max-rounds", type=int, default=100)
    ap.add_argument("--out", type=Path, help="also write the report here")
    ap.add_argument("--holds", choices=["peak", "all", "none"], default="peak",
                    help="how the measured runs hold (runtime_check's --holds; default peak, as plans are timed)")
    a = ap.parse_args(argv)
    names = [s for s in a.sizes.split(",") if s]
    bad = [s for s in names if s not in SIZES]
    if bad or not names:
        print(f"time_model_turns: --sizes {a.sizes!r}: choose from {', '.join(SIZES)}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"# python benchmarks/time_model_turns.py --sizes {','.join(names)} --min-rounds {a.min_rounds} "
        f"--max-rounds {a.max_rounds} --holds {a.holds}  (torch {torch.__version__})")
    results = {}
    for n in names:
        results[n] = report(n, measure(n, SIZES[n], a.min_rounds, a.max_rounds, say, a.holds), say)
    tune = results[names[0]]
    num = sum(t * (m - p) for t, m, p, _ in tune)
    den = sum(t * t for t, _, _, _ in tune)
    per_turn = num / den if den else 0.0
    say(f"per-turn cost fitted on {names[0]} (least squares, measured - predicted = c x turns): "
        f"c = {per_turn * 1e6:.0f} us")
    for n in names:
        errs = [(p + per_turn * t) / m - 1 for t, m, p, _ in results[n]]
        base = [p / m - 1 for t, m, p, _ in results[n]]
        say(f"  {n}: |error| without the term max {max(map(abs, base)):.1%} (mean {statistics.mean(map(abs, base)):.1%}), "
            f"with c x turns max {max(map(abs, errs)):.1%} (mean {statistics.mean(map(abs, errs)):.1%})"
            + ("  [tuning set]" if n == names[0] else "  [not tuned on]"))
    say("the turn model (Chain.uf_ng, Chain.u_turn from turn_ops in the rounds, as runtime_check; fitted on no plan):")
    for n in names:
        tm = [q / m - 1 for t, m, p, q in results[n]]
        say(f"  {n}: |error| max {max(map(abs, tm)):.1%} (mean {statistics.mean(map(abs, tm)):.1%})")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'time_model_turns'))    # bad input: one line, exit 2