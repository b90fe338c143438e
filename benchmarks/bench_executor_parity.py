"""Issue 27's acceptance on a CPU: is memplan's executed plan as lean and as fast as what PyTorch gives,
and do its predictions hold? One run of ``memplan.experiments.runtime_check`` on the ``cpu-parity``
preset (ResNet-50 at batch 2, 224x224; GPT-2 with 4 layers, width 256, sequence 256, batch 4), then the
ratios the issue asks for, measured side by side in that run, every peak by one method (c10's allocator
events by default: every CPU allocation, the convolutions' scratch included; files before 2026-11-28
measured with the dispatch tracker, which does not see it):

- store-all peak / plain autograd peak, and store-all time / autograd time (with each median's 95%
  interval);
- memplan's ``sequential`` sequence with k segments against ``torch.utils.checkpoint.checkpoint_sequential``
  with k segments over the same stages (peak; k = 2, 4, ...);
- every executed row: predicted / measured - 1 for the time and the peak;
- paper 004's comparison redone: rotor at the memory of each ``checkpoint_sequential`` point against
  ``checkpoint_sequential`` itself, "not slower" meaning that the 95% interval of the per-round time
  ratio (rotor's over checkpoint_sequential's in the same round, ``models.measure.paired_ratio``)
  reaches down to 1 or below. Every time comparison is also printed paired in that way.

    python benchmarks/bench_executor_parity.py                       # both networks (20-40 min on 1 core)
    python benchmarks/bench_executor_parity.py --clock cpu           # on a shared machine: CPU time
    python benchmarks/bench_executor_parity.py --models gpt2 --max-rounds 10
    python benchmarks/bench_executor_parity.py --preset cpu-unseen --clock cpu --max-rounds 60 --timing-budget 240 \
        --out benchmarks/results/executor_parity_cpu_unseen     # the same targets on networks not tuned on
    python benchmarks/bench_executor_parity.py --preset cpu-unseen --models transformer,llama --cuts saved \
        --clock cpu --max-rounds 60 --timing-budget 240 --out benchmarks/results/executor_parity_cpu_unseen_saved
    python benchmarks/bench_executor_parity.py --clock cpu --memory-method dispatch   # the tensors' storages only
    python benchmarks/bench_executor_parity.py --preset cpu-multi --clock cpu --max-rounds 60 --timing-budget 240 \
        --out benchmarks/results/executor_parity_cpu_multi     # NASNet-A and U-Net, multi-tensor cuts

Writes ``benchmarks/results/executor_parity_cpu{,_throughput}.csv``, every round's times
(``executor_parity_cpu_traces.json``, for ``benchmarks/paired_ratios.py``) and the summary printed here to
``benchmarks/results/executor_parity_cpu.txt``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from memplan.experiments.cli_checks import OneLineParser, guarded

RESULTS = Path(__file__).resolve().parent / "results"


def summary(rt: pd.DataFrame, thr: pd.DataFrame) -> list[str]:
    from memplan.experiments import runtime_check
    from memplan.models.runtime import GRAD_REL_TOL

    out = []
    for net, d in rt.groupby("network", sort=False):
        ex = d[d["measured_time"].notna()]
        sa = ex[ex["method"] == "store-all"].iloc[0]
        ag = ex[ex["method"] == "autograd"].iloc[0]
        holds = {"none": "runs without holds, planned in the free replay",
                 "peak": "paper 004's model, held at the peak", "all": "paper 004's model, every B held"}
        how = holds.get(sa.get("holds")) if isinstance(sa.get("holds"), str) else None
        out.append(f"{net} (L = {int(sa['L'])}, clock {sa.get('clock', '?')}, peaks by "
                   f"{sa.get('memory_method', 'dispatch-mode tracker')}" + (f"; {how}" if how else "") + "):")
        out.append(f"  store-all / autograd: peak {sa['measured_peak'] / ag['measured_peak']:.4f} "
                   f"({sa['measured_peak'] / 2**20:.2f} vs {ag['measured_peak'] / 2**20:.2f} MiB), time "
                   f"{sa['measured_time'] / ag['measured_time']:.4f} ({sa['measured_time'] * 1e3:.1f} ms "
                   f"[{sa['time_low'] * 1e3:.1f}, {sa['time_high'] * 1e3:.1f}] vs {ag['measured_time'] * 1e3:.1f} ms "
                   f"[{ag['time_low'] * 1e3:.1f}, {ag['time_high'] * 1e3:.1f}])"
                   + (f"; paired round by round {sa['vs_autograd']:.4f} [{sa['vs_autograd_low']:.4f}, "
                      f"{sa['vs_autograd_high']:.4f}]" if pd.notna(sa.get("vs_autograd")) else ""))
        plans = ex[ex["method"] != "autograd"]
        te, pe = plans["time_rel_err"].abs(), plans["peak_rel_err"].abs()
        rows = [r for _, r in ex.iterrows()]
        same = sum(bool(r["grads_equal"]) for r in rows)
        close = [r for r in rows if not r["grads_equal"] and runtime_check.grads_ok(r.to_dict())]
        out.append(f"  gradients: {same} of {len(rows)} rows bit-identical to autograd's"
                   + (f", {len(close)} within {GRAD_REL_TOL:g} (at most "
                      f"{max(r['grads_max_rel_diff'] for r in close):.0e}: a shared weight's sums in another order)"
                      if close else "")
                   + (f", {len(rows) - same - len(close)} DIFFERENT" if len(rows) - same - len(close) else ""))
        out.append(f"  {len(plans)} executed plans: |predicted/measured - 1| time max {te.max() * 100:.1f}% "
                   f"(mean {te.mean() * 100:.1f}%), peak max {pe.max() * 100:.2f}%; rows over 5% in time: "
                   f"{int((te > 0.05).sum())}, over 1% in peak: {int((pe > 0.01).sum())}; noisy rows: "
                   f"{int(plans['noisy'].fillna(False).astype(bool).sum())}")
        t = thr[thr["network"] == net]
        for k, g in t.groupby("segments", sort=True):
            seq = g[g["strategy"] == "sequential"]
            ck = g[g["strategy"] == "checkpoint_sequential"]
            rot = g[g["strategy"] == "rotor"]
            if seq.empty or ck.empty:
                continue
            seq, ck = seq.iloc[0], ck.iloc[0]
            line = (f"  k = {int(k)}: sequential / checkpoint_sequential peak "
                    f"{seq['measured_peak'] / ck['measured_peak']:.4f}")
            if pd.notna(seq.get("vs_checkpoint_sequential")):
                line += (f", time {seq['vs_checkpoint_sequential']:.3f} [{seq['vs_checkpoint_sequential_low']:.3f}, "
                         f"{seq['vs_checkpoint_sequential_high']:.3f}]")
            if not rot.empty and pd.notna(rot.iloc[0]["measured_time"]):
                r = rot.iloc[0]
                line += (f"; rotor at that memory {r['gain_vs_checkpoint_sequential'] * 100:+.1f}% throughput vs "
                         f"checkpoint_sequential ({'not slower' if r['not_slower_than_checkpoint_sequential'] else 'SLOWER'}"
                         f" within the noise"
                         + (f"; time ratio {r['vs_checkpoint_sequential']:.3f} [{r['vs_checkpoint_sequential_low']:.3f}, "
                            f"{r['vs_checkpoint_sequential_high']:.3f}]" if pd.notna(r.get("vs_checkpoint_sequential"))
                            else "")
                         + f"), peak {r['measured_peak'] / ck['measured_peak']:.4f} of its")
            out.append(line)
    return out


def main(argv=None) -> int:
    from memplan.experiments import runtime_check

    p = OneLineParser(name="bench_executor_parity", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=["cpu-parity", "cpu-unseen", "cpu-multi"], default="cpu-parity",
                   help="runtime_check's preset: cpu-parity (the issue's ResNet-50 and GPT-2, default), cpu-unseen "
                        "(DenseNet-121, Inception v3, a Transformer and a Llama-style stack: networks nothing was "
                        "tuned on) or cpu-multi (NASNet-A and U-Net, multi-tensor cuts)")
    p.add_argument("--models", default=None, help="comma-separated networks of the preset (default: all of it)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    p.add_argument("--repeats", type=int, default=8, help="timed rounds at least")
    p.add_argument("--max-rounds", type=int, default=20)
    p.add_argument("--segment-counts", default="2,3,4,5,6")
    p.add_argument("--timing-budget", type=float, default=900.0, help="seconds of timing rounds per network")
    p.add_argument("--memory-method", choices=sorted(runtime_check.MEMORY_METHOD_NAMES), default="profiler",
                   help="how every peak is measured (runtime_check's --memory-method): profiler (default) counts "
                        "every CPU allocation, the convolutions' scratch included; dispatch the tensors' storages")
    p.add_argument("--cuts", choices=["auto", "saved"], default="auto",
                   help="runtime_check's --cuts: auto (as 'memplan profile', default) or saved (single-tensor cuts)")
    p.add_argument("--holds", choices=["auto", "peak", "all", "none"], default="auto",
                   help="runtime_check's --holds: none runs every sequence as autograd frees, planned in and "
                        "compared with the replay of that; peak: paper 004's model; auto (default since "
                        "2026-11-29): none where the profile has the free record, else peak")
    p.add_argument("--out", default=str(RESULTS / "executor_parity_cpu"))
    a = p.parse_args(argv)
    rt, thr = Path(a.out + ".csv"), Path(a.out + "_throughput.csv")
    models = a.models or ",".join(runtime_check.PRESETS[a.preset])
    rc = runtime_check.main(["--device", "cpu", "--preset", a.preset, "--models", models, "--clock", a.clock,
                             "--memory-method", a.memory_method, "--cuts", a.cuts, "--holds", a.holds,
                             "--repeats", str(a.repeats), "--max-rounds", str(a.max_rounds),
                             "--segment-counts", a.segment_counts, "--timing-budget", str(a.timing_budget),
                             "--methods", "rotor,sequential,store-all", "--out", str(rt), "--throughput", str(thr),
                             "--traces", a.out + "_traces.json"])
    if rc == 2:     # refused (bad input, said in one line): not a summary of the previous run's tables
        return rc
    lines = summary(pd.read_csv(rt), pd.read_csv(thr))
    text = "\n".join(["bench_executor_parity: " + " ".join(sys.argv[1:] if argv is None else argv)] + lines) + "\n"
    print(text)
    Path(a.out + ".txt").write_text(text)
    return rc


if __name__ == "__main__":
    sys.exit(guarded(main, "bench_executor_parity"))    # bad input: one line, exit 2
