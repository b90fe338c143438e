"""Issue 27's comparisons read again from the rounds themselves: every pair that the issue compares,
paired round by round (:func:`memplan.models.measure.paired_ratio`: the median of the per-round time
ratios and its 95% interval), from a ``runtime_check --traces`` file (its ``timings``: every
contender's time in every round).

Why: ``runtime_check`` times its contenders once per round in rotating order, so a slow period of the
machine (a GPU starved by its host, a shared CPU) stretches every contender of that round. Two
medians with their own intervals keep that spread twice; the ratio within a round cancels it.

    python benchmarks/paired_ratios.py benchmarks/results/runtime_traces_resnet50_2026-11-27.json

Prints, per network: memplan's store-all over plain autograd; memplan's ``sequential``(k) over
``checkpoint_sequential``(k); rotor at that memory over ``checkpoint_sequential``(k); and for the
second and third the ratio of the fastest samples too (what each is at its best). A ratio is
"shown slower" when its interval lies above 1, "shown faster" below 1, "within the noise" else.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def verdict(r) -> str:
    return "shown slower" if r.shown_slower else "shown faster" if r.shown_faster else "within the noise"


def times_by_tag(timings: list[dict], net: str) -> dict[str, list[float]]:
    """Every contender's round times on network ``net``, under its own tag and under the tags of the
    identical sequences timed once with it (``also``)."""
    T: dict[str, list[float]] = {}
    for t in timings:
        if t["network"] == net and t["times"]:
            for tag in [t["contender"], *t.get("also", [])]:
                T.setdefault(tag, t["times"])
    return T


def comparisons(timings: list[dict]) -> list[str]:
    from memplan.models.measure import paired_ratio

    out: list[str] = []
    nets = list(dict.fromkeys(t["network"] for t in timings))
    for net in nets:
        T = times_by_tag(timings, net)
        rounds = max((len(v) for v in T.values()), default=0)
        out.append(f"{net} ({rounds} rounds):")

        def line(a: str, b: str, label: str) -> None:
            r = paired_ratio(T[a], T[b])
            best = min(T[a]) / min(T[b])
            out.append(f"  {label:48s} {r.text()}  {verdict(r):16s} (fastest samples {best:.3f})")

        if "store-all@1" in T and "autograd" in T:
            line("store-all@1", "autograd", "store-all / autograd")
        ks = sorted(int(m.group(1)) for c in T if (m := re.fullmatch(r"checkpoint_sequential:(\d+)", c)))
        for k in ks:
            ck = f"checkpoint_sequential:{k}"
            if f"sequential:{k}" in T:
                line(f"sequential:{k}", ck, f"sequential({k}) / checkpoint_sequential({k})")
        for k in ks:
            ck = f"checkpoint_sequential:{k}"
            if f"rotor@sequential:{k}" in T:
                line(f"rotor@sequential:{k}", ck, f"rotor at that memory / checkpoint_sequential({k})")
    return out


def _tag(r: dict) -> str | None:
    """The contender a throughput-CSV row was timed as (runtime_check's tags)."""
    k = r.get("segments")
    k = int(float(k)) if k not in (None, "") else None
    return {"store-all": "store-all@1", "sequential": f"sequential:{k}",
            "checkpoint_sequential": f"checkpoint_sequential:{k}", "rotor": f"rotor@sequential:{k}"}.get(r["strategy"])


def predictions(timings: list[dict], throughput_csv: str) -> list[str]:
    """Each executed row of a ``runtime_check --throughput`` CSV: its predicted time against the
    fastest, the 10th-percentile and the median sample of its rounds. A model that predicts the
    undisturbed step sits near the first two; disturbances that hit some steps move only the median."""
    import csv
    import statistics

    out = [f"predicted time against the rounds' samples ({throughput_csv}): min, 10th percentile, median"]
    with open(throughput_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    by_net = {net: times_by_tag(timings, net) for net in dict.fromkeys(r["network"] for r in rows)}
    for r in rows:
        tag, T = _tag(r), by_net[r["network"]]
        if tag not in T or not r.get("predicted_time"):
            continue
        ts, pred = sorted(T[tag]), float(r["predicted_time"])
        q10, med = ts[len(ts) // 10], statistics.median(ts)
        out.append(f"  {r['network']} {tag:28s} predicted {pred * 1e3:8.2f} ms; min {ts[0] / pred - 1:+6.1%}, "
                   f"10th percentile {q10 / pred - 1:+6.1%}, median {med / pred - 1:+6.1%}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="runtime_check --traces JSON files (with 'timings')")
    p.add_argument("--out", help="also write the lines here")
    p.add_argument("--throughput", help="the same run's --throughput CSV: also each row's predicted time against "
                   "its fastest, 10th-percentile and median samples (one traces file only)")
    a = p.parse_args(argv)
    if a.throughput and len(a.traces) > 1:
        print(f"paired_ratios: --throughput belongs to one run: give one traces file with it, not {len(a.traces)}",
              file=sys.stderr)
        return 2
    lines: list[str] = []
    for f in a.traces:
        try:
            d = json.loads(Path(f).read_text())
        except (OSError, ValueError) as e:
            print(f"paired_ratios: {f}: cannot read a JSON file ({e})", file=sys.stderr)
            return 2
        if not d.get("timings"):
            print(f"paired_ratios: {f}: no 'timings' (runtime_check --traces writes them since 2026-11-26)",
                  file=sys.stderr)
            return 2
        env = d.get("env", {})
        lines.append(f"# {f}: {env.get('device', '?')}, torch {env.get('torch', '?')}, {env.get('date', '?')}")
        lines += comparisons(d["timings"])
        if a.throughput:
            lines += predictions(d["timings"], a.throughput)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
