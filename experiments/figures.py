"""Figures drawn from a results table (``memplan plot RESULTS --figure NAME``), never by solving again.

The four figure styles of the experiments, each a function of the tidy table of
:mod:`memplan.experiments.sweep_engine` (one row per (point, method)):

* ``remat`` (paper 004, Figs. 6-8): throughput (batch / makespan) against the replayed peak memory,
  one curve per method; ``sequential`` as crosses, ``store-all`` as squares, a schedule over its limit
  as a hollow red ring. One PNG per instance.
* ``offload`` (paper 001): Figure 2, makespan / LB (the ``lb`` rows, Proposition 3) against the memory
  limit, one curve per method, at the lowest bandwidth of the table; Figure 3, throughput against the
  limit for the best offloading heuristic at each bandwidth (x1, x2, ... of the lowest) and for
  re-materialization (the table's ``remat`` rows).
* ``remat-offload`` (paper 000): one panel per bandwidth factor: store-all, rotor (and rotor-500), the
  offloading-only DYNPROG, the joint DP for each slot count (``joint-N``) and ``joint``, the best of
  them; the curve table behind it is written beside the PNG (``.csv``).
* ``pipeline`` (paper 003, Figs. 6-11): period against the measured memory per GPU, one PNG per
  instance and GPU count: PipeDream (blue), GPipe (orange), the ILP (red squares), cyclic (green).
* ``budget`` (issue 28, ``benchmarks/bench_budget.py``'s table, ``problem == "budget"``): throughput
  (batch / median step time, with the 95% interval of the median as error bars) against the measured
  peak, one PNG per network: PyTorch's ``activation_memory_budget`` fractions (labelled), eager
  autograd, ``checkpoint_sequential``, memplan's rotor chain plans, and memplan's answer at each byte
  budget; a dotted line at PyTorch's lowest peak and one 25% below it.

Failed tasks (status ``error``) are never drawn as points; they are counted in the figure's title.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from memplan.experiments.cli_checks import output_dir
from memplan.experiments.sweep_engine import read_results

FIGURES = ["remat", "offload", "remat-offload", "pipeline", "budget"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int) -> Path:
    """Lay out, write and close a figure; its path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _plt().close(fig)
    return path


def _slug(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(s))


def _opt(options: str, name: str):
    try:
        return json.loads(options or "{}").get(name)
    except (TypeError, ValueError):
        return None


def _errors(df) -> str:
    n = int((df["status"] == "error").sum())
    return f" [{n} failed task(s) not drawn]" if n else ""


def _ok(df):
    return df[df["objective"].notna() & (df["status"] != "error")]


def curve_labels(df):
    """One curve label per row: the method, plus the options whose values differ between that
    method's rows (``rotor (slots=20)``, ``rotor (slots=500)``), so that a sweep over an option never
    draws or summarizes two settings as one zigzagging curve. ``threads`` is not a setting of the
    answer and never splits a curve."""
    import pandas as pd

    opts = df["options"].map(lambda o: {k: v for k, v in json.loads(o or "{}").items() if k != "threads"}
                             if isinstance(o, str) else {})
    labels = pd.Series(df["method"].astype(str).values, index=df.index)
    for method in df["method"].dropna().unique():
        rows = df.index[df["method"] == method]
        keys = sorted({k for i in rows for k in opts[i]})
        varying = [k for k in keys if len({json.dumps(opts[i].get(k), sort_keys=True) for i in rows}) > 1]
        if varying:
            labels[rows] = [f"{method} (" + ", ".join(f"{k}={opts[i].get(k)}" for k in varying) + ")" for i in rows]
    return labels


# ------------------------------------------------------------------------------------------ remat
STYLE = {"rotor": ("tab:blue", "^-"), "rotor-floating": ("tab:cyan", "v--"), "revolve": ("tab:green", "o-"),
         "recompute-all": ("tab:gray", "s:"), "remat-milp": ("tab:purple", "D--"),
         "checkmate": ("tab:orange", "P-"), "checkmate-lp": ("tab:brown", "X:")}


def figure_remat(df, out: Path) -> list[Path]:
    """Throughput against replayed peak memory, one PNG per instance (``OUT/remat_<instance>.png``)."""
    plt = _plt()
    written = []
    for inst, d in df[df["problem"] == "remat"].groupby("instance", sort=True):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        ok = _ok(d).copy()
        ok["throughput"] = ok["batch"].fillna(1.0) / ok["objective"]
        ok["curve"] = curve_labels(ok)
        for (method, curve), g in ok.groupby(["method", "curve"], sort=True):
            g = g.sort_values("memory_limit")
            x = g["peak_memory"] / 2**20
            split = curve != method          # one of several settings: matplotlib's own colours tell them apart
            if method == "sequential":
                ax.plot(x, g["throughput"], "x", color=None if split else "tab:purple", label=curve)
            elif method == "store-all":
                ax.plot(x, g["throughput"], "s", color=None if split else "tab:red", markersize=9,
                        label="store-all (PyTorch)" if not split else curve)
            else:
                color, fmt = STYLE.get(method, (None, "o-"))
                ax.plot(x, g["throughput"], fmt, color=None if split else color, label=curve, markersize=5)
            bad = g[g["peak_memory"] > g["memory_limit"] * (1 + 1e-9)]
            if len(bad):   # schedules over their limit (Checkmate's LP rounding): hollow red rings
                ax.plot(bad["peak_memory"] / 2**20, bad["throughput"], "o", mfc="none", mec="red", markersize=10,
                        label=f"{curve}: over its limit")
        batch = d["batch"].dropna()
        unit = "images/s" if len(batch) and batch.iloc[0] != 1 else "iterations/s"
        ax.set_xlabel("peak memory (MiB, replayed)")
        ax.set_ylabel(f"throughput ({unit})")
        ax.set_title(f"{inst}: throughput vs memory{_errors(d)}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"remat_{_slug(inst)}.png", 130))
    return written


# ---------------------------------------------------------------------------------------- offload
def figure_offload(df, out: Path, *, show_dynprog: bool = False) -> list[Path]:
    """Paper 001's Figures 2 and 3 per instance (``OUT/offload_<instance>_figure2.png``, ``..._figure3.png``)."""
    plt = _plt()
    written = []
    for inst, d in df[df["problem"].isin(["offload", "remat"])].groupby("instance", sort=True):
        off = d[d["problem"] == "offload"]
        if off.empty:
            continue
        base = off["bandwidth"].min()
        # Figure 2: makespan / LB at the base bandwidth
        lb = off[(off["method"] == "lb") & (off["bandwidth"] == base)].set_index("memory_limit")["bound"]
        fig, ax = plt.subplots(figsize=(7, 4))
        at_base = _ok(off[(off["bandwidth"] == base) & (off["method"] != "lb")])
        for meth, g in at_base.assign(curve=curve_labels(at_base)).groupby("curve", sort=True):
            g = g[g["memory_limit"].isin(lb.index)].sort_values("memory_limit")
            ratio = g["objective"].values / lb.reindex(g["memory_limit"]).values
            ax.plot(g["memory_limit"] / 2**20, ratio, marker="o", ms=3, label=meth)
        ax.set_xlabel("memory limit (MiB)")
        ax.set_ylabel("makespan / LB")
        ax.set_title(f"{inst}: offloading at {base / 1e9:.3g} GB/s (paper 001, Fig. 2){_errors(off)}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend()
        written.append(_save(fig, out / f"offload_{_slug(inst)}_figure2.png", 130))
        # Figure 3: throughput of the best heuristic at each bandwidth, and re-materialization
        fig, ax = plt.subplots(figsize=(7, 4))
        heur = _ok(off[~off["method"].isin(["lb", "milp"])])
        batch = float(d["batch"].dropna().iloc[0]) if d["batch"].notna().any() else 1.0
        styles = ["-", "--", ":", "-."]
        for k, (bw, g) in enumerate(heur.groupby("bandwidth", sort=True)):
            best = g.groupby("memory_limit")["objective"].min()
            ax.plot(best.index / 2**20, batch / best.values, styles[k % 4], ms=3,
                    label=f"offload best {bw / base:g}x")
            dyn = g[g["method"] == "dynprog"].sort_values("memory_limit")
            if show_dynprog and len(dyn):
                ax.plot(dyn["memory_limit"] / 2**20, batch / dyn["objective"], styles[k % 4], alpha=0.5,
                        label=f"offload dynprog {bw / base:g}x")
        for meth, g in _ok(d[d["problem"] == "remat"]).groupby("method", sort=True):
            g = g.sort_values("memory_limit")
            ax.plot(g["memory_limit"] / 2**20, batch / g["objective"], "-", marker="o", ms=3, color="k",
                    label=f"remat ({meth})")
        ax.set_xlabel("memory limit (MiB)")
        ax.set_ylabel("throughput (samples/s)" if batch != 1 else "throughput (iterations/s)")
        ax.set_title(f"{inst}: offloading vs re-materialization (paper 001, Fig. 3)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"offload_{_slug(inst)}_figure3.png", 130))
    return written


# ----------------------------------------------------------------------------------- remat-offload
def remat_offload_curves(df):
    """The curve table of the remat-offload figure: one row per (memory, curve, factor) with columns
    memory, method (the curve), factor, bandwidth, makespan, peak, status, seconds, message,
    throughput. ``joint`` is the best ``joint-N`` at each (memory, factor)."""
    import pandas as pd

    d = df[df["problem"].isin(["remat", "offload", "remat-offload"])].copy()
    joint_bw = d[d["problem"] != "remat"]["bandwidth"].dropna()
    base = joint_bw.min() if len(joint_bw) else math.nan
    rotor_slots = sorted({_opt(o, "slots") for o in d[(d["problem"] == "remat") & (d["method"] == "rotor")]["options"]},
                         key=lambda s: (s is None, s or 0))
    rows = []
    for r in d.itertuples(index=False):
        slots = _opt(r.options, "slots")
        if r.problem == "remat":
            if r.method == "store-all":
                name = "store-all"
            elif r.method == "rotor":
                name = "rotor-500" if slots == 500 and len(rotor_slots) > 1 else "rotor"
            else:
                name = r.method
        elif r.problem == "offload":
            name = "offload" if r.method == "dynprog" else f"offload-{r.method}"
        else:
            name = f"joint-{slots}" if slots is not None else f"joint-{r.method}"
        ok = r.status != "error" and r.objective is not None and not pd.isna(r.objective)
        status = r.status
        if name == "store-all":   # feasible exactly where its schedule fits
            ok = ok and r.peak_memory <= r.memory_limit * (1 + 1e-12)
            status = "feasible" if ok else ("error" if r.status == "error" else "infeasible")
        factor = math.nan if r.problem == "remat" or pd.isna(r.bandwidth) else r.bandwidth / base
        rows.append(dict(memory=r.memory_limit, method=name, factor=factor,
                         bandwidth=math.nan if r.problem == "remat" else r.bandwidth,
                         makespan=r.objective if ok else math.nan,
                         peak=r.peak_memory if r.peak_memory is not None else math.nan, status=status,
                         seconds=r.wall_time, message=r.message, batch=r.batch))
    cur = pd.DataFrame(rows)
    if cur.empty:
        return cur
    joint = cur[cur["method"].str.startswith("joint-")]
    best = []
    for (M, f), g in joint.groupby(["memory", "factor"], sort=True):
        g = g.dropna(subset=["makespan"])
        if len(g):
            b = g.loc[g["makespan"].idxmin()].to_dict()
            b.update(method="joint", message=f"best of {b['method']}")
        else:
            b = dict(memory=M, method="joint", factor=f, bandwidth=base * f, makespan=math.nan, peak=math.nan,
                     status="infeasible", seconds=0.0, message="", batch=joint["batch"].iloc[0])
        best.append(b)
    cur = pd.concat([cur, pd.DataFrame(best)], ignore_index=True)
    cur["throughput"] = cur["batch"].fillna(1.0) / cur["makespan"]
    return cur.drop(columns=["batch"])


def figure_remat_offload(df, out: Path) -> list[Path]:
    """One PNG per instance, one panel per bandwidth factor (``OUT/remat_offload_<instance>.png``); the
    curve table beside it (``.csv``)."""
    from memplan.models.units import fmt_bandwidth

    plt = _plt()
    written = []
    for inst, d in df[df["problem"].isin(["remat", "offload", "remat-offload"])].groupby("instance", sort=True):
        if not (d["problem"] == "remat-offload").any():
            continue
        cur = remat_offload_curves(d)
        stem = out / f"remat_offload_{_slug(inst)}"
        cur.to_csv(stem.with_suffix(".csv"), index=False)
        factors = sorted(cur["factor"].dropna().unique())
        base = d[d["problem"] != "remat"]["bandwidth"].min()
        joints = sorted({m for m in cur["method"] if m.startswith("joint-")})
        batch = d["batch"].dropna()
        unit = "samples/s" if len(batch) and batch.iloc[0] != 1 else "iterations/s"
        fig, axes = plt.subplots(1, len(factors), figsize=(5 * len(factors), 4), sharey=True, squeeze=False)
        for ax, f in zip(axes[0], factors):
            styles = [("store-all", "k*--"), ("rotor", "C0-o"), ("rotor-500", "C0:"), ("offload", "C2-s"),
                      ("joint", "C3-^")] + [(n, f"C{4 + k}:") for k, n in enumerate(joints)]
            for name, style in styles:
                g = cur[(cur["method"] == name) & ((cur["factor"] == f) | cur["factor"].isna())].sort_values("memory")
                if not g.empty:
                    ax.plot(g["memory"] / 2**20, g["throughput"], style, label=name, markersize=4)
            ax.set_title(f"beta x{f:g} = {fmt_bandwidth(base * f)}")
            ax.set_xlabel("memory limit (MiB)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"throughput ({unit})")
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"{inst}: re-materialization + offloading{_errors(d)}")
        written += [stem.with_suffix(".csv"), _save(fig, stem.with_suffix(".png"), 120)]
    return written


# --------------------------------------------------------------------------------------- pipeline
PIPE_STYLE = {"pipedream": dict(s=16, c="tab:blue", marker="o", label="PipeDream (eager 1F1B)"),
              "gpipe": dict(s=16, c="tab:orange", marker="v", label="GPipe (balanced)"),
              "ilp": dict(s=28, c="tab:red", marker="s", label="ILP (replayed)"),
              "cyclic": dict(s=22, c="tab:green", marker="^", label="cyclic (replayed)")}


def pipeline_summary(df):
    """ILP against the best PipeDream schedule, and against the best baseline row (PipeDream or
    GPipe), at each (instance, gpus, memory limit)."""
    import pandas as pd

    ok = _ok(df[df["problem"] == "pipeline"])
    piv = ok.groupby(["instance", "gpus", "bandwidth", "memory_limit", "method"], dropna=False)["objective"].min()
    piv = piv.unstack("method")
    if "ilp" not in piv or "pipedream" not in piv:
        return pd.DataFrame()
    s = piv.reset_index()
    s["ilp_over_pipedream"] = s["ilp"] / s["pipedream"]
    base = [m for m in ("pipedream", "gpipe") if m in s]
    s["ilp_over_best_baseline"] = s["ilp"] / s[base].min(axis=1)
    return s


def figure_pipeline(df, out: Path) -> list[Path]:
    """Period against the memory per GPU, ``OUT/pipeline_<instance>_P<gpus>.png``, one panel per link
    bandwidth swept (each titled with its bandwidth: points at different links are never drawn as one
    curve), and ``OUT/pipeline_summary.csv`` (ILP / PipeDream at each limit)."""
    from memplan.models.units import fmt_bandwidth

    plt = _plt()
    written = []
    d = df[df["problem"] == "pipeline"]
    for (inst, P), g in d.groupby(["instance", "gpus"], sort=True):
        links = sorted(g["bandwidth"].unique(), key=lambda b: (math.isnan(b), b))
        fig, axes = plt.subplots(1, len(links), figsize=(6.5 * len(links), 4.5), squeeze=False)
        tl = g[g["method"] == "ilp"]["time_limit"].dropna().unique()
        for ax, bw in zip(axes[0], links):
            gb = g[g["bandwidth"].isna()] if math.isnan(bw) else g[g["bandwidth"] == bw]
            okb = _ok(gb)
            for (method, curve), h in okb.assign(curve=curve_labels(okb)).groupby(["method", "curve"], sort=True):
                style = dict(PIPE_STYLE.get(method, dict(s=16, marker="x", label=method)))
                if curve != method:          # one of several settings of the method: its own colour
                    style.update(label=curve, c=None)
                ax.scatter(h["peak_memory"] / 2**30, h["objective"] * 1e3, **style)
            ax.set_xlabel("measured memory per GPU (GiB)")
            ax.set_ylabel("period (ms)")
            ax.ticklabel_format(useOffset=False)     # one period: "1e-11+2.3e1" helps no reader
            link = ("free links" if math.isinf(bw) else "no link" if math.isnan(bw)
                    else f"links {fmt_bandwidth(bw)}")
            ax.set_title(f"{inst}, {P} GPUs, {link}" + (f" (ILP time limit {tl[0]:g}s)" if len(tl) else "")
                         + _errors(gb), fontsize=9)
            ax.legend()
            ax.grid(alpha=0.3)
        written.append(_save(fig, out / f"pipeline_{_slug(inst)}_P{P}.png", 120))
    s = pipeline_summary(df)
    if len(s):
        s.to_csv(out / "pipeline_summary.csv", index=False)
        written.append(out / "pipeline_summary.csv")
    return written


# ----------------------------------------------------------------------------------------- budget
BUDGET_STYLE = {"pytorch": dict(fmt="o-", color="tab:orange", label="PyTorch activation_memory_budget"),
                "eager": dict(fmt="s", color="black", label="eager autograd", ms=8),
                "checkpoint_sequential": dict(fmt="x", color="tab:purple", label="checkpoint_sequential", ms=8),
                "rotor": dict(fmt="^:", color="tab:blue", label="memplan chain plans (rotor)"),
                "rotor-compiled": dict(fmt="v:", color="tab:green",
                                       label="memplan chain plans, compiled stages (rotor + torch.compile)"),
                "rotor-per-stage": dict(fmt="D:", color="tab:olive",
                                        label="memplan chain plans, a partitioner budget per stage", ms=5),
                "memplan": dict(fmt="*", color="tab:red", label="memplan at a byte budget", ms=10)}


def figure_budget(df, out: Path) -> list[Path]:
    """Throughput against measured peak per network (``OUT/budget_<instance>.png``)."""
    plt = _plt()
    written = []
    d = df[(df["problem"] == "budget") & (df["status"] == "executed") & df["objective"].notna()]
    for inst, g in d.groupby("instance", sort=True):
        fig, ax = plt.subplots(figsize=(7, 4.6))
        batch = float(g["batch"].iloc[0]) if "batch" in g and g["batch"].notna().any() else 1.0
        for method, st in BUDGET_STYLE.items():
            rows = g[g["method"] == method].sort_values("peak_memory")
            if rows.empty:
                continue
            if method == "memplan":       # one star per distinct step (rows answered by the same step overlap)
                rows = rows.drop_duplicates(subset=["peak_memory", "objective"])
            # compiled-stage chains at several partitioner budgets: one line each (a line across them
            # would join plans of different chains)
            sfs = (sorted(rows["stage_fraction"].fillna(1.0).unique(), reverse=True)
                   if method == "rotor-compiled" and "stage_fraction" in rows else [None])
            for k, sf in enumerate(sfs):
                h = rows if sf is None else rows[rows["stage_fraction"].fillna(1.0) == sf]
                thr = batch / h["objective"]
                err = None              # the 95% interval of the median time, as throughput
                if "time_low" in h and h["time_low"].notna().all() and h["time_high"].notna().all():
                    err = [(thr - batch / h["time_high"]).clip(lower=0), (batch / h["time_low"] - thr).clip(lower=0)]
                label = st["label"] + (f", partitioner budget {sf:g}" if sf is not None and len(sfs) > 1 else "")
                ax.errorbar(h["peak_memory"] / 2**20, thr, yerr=err, fmt=st["fmt"], color=st["color"],
                            label=label, ms=st.get("ms", 5), capsize=2, lw=1, alpha=1.0 if k == 0 else 0.5)
            h = rows
            if method == "pytorch":
                for _, r in h.iterrows():
                    ax.annotate(f"{r['fraction']:g}", (r["peak_memory"] / 2**20, batch / r["objective"]),
                                textcoords="offset points", xytext=(3, 4), fontsize=7, color=st["color"])
        pts = g[g["method"] == "pytorch"]
        if len(pts):
            lowest = pts["peak_memory"].min() / 2**20
            ax.axvline(lowest, color="tab:orange", ls=":", lw=1)
            ax.axvline(0.75 * lowest, color="tab:red", ls=":", lw=1)
            ax.annotate("PyTorch's lowest", (lowest, ax.get_ylim()[0]), fontsize=7, rotation=90, va="bottom",
                        ha="right", color="tab:orange")
            ax.annotate("25% below", (0.75 * lowest, ax.get_ylim()[0]), fontsize=7, rotation=90, va="bottom",
                        ha="right", color="tab:red")
        unit = "samples/s" if batch != 1 else "steps/s"
        clock = g["clock"].iloc[0] if "clock" in g else ""
        backend = g["backend"].iloc[0] if "backend" in g else ""
        how = ("CUDA max_memory_allocated" if "synchronized" in str(clock) else "profiler_peak")
        ax.set_xlabel(f"measured peak of a training step (MiB, {how})")
        ax.set_ylabel(f"throughput ({unit})")
        ax.set_title(f"{inst}: throughput vs measured peak ({backend}, {clock} clock){_errors(df[df['instance'] == inst])}",
                     fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, out / f"budget_{_slug(inst)}.png", 130))
    return written


def draw(df, figure: str, out: str | Path, **kw) -> list[Path]:
    """Draw ``figure`` (one of :data:`FIGURES`) from the results table ``df`` into the folder ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fn = {"remat": figure_remat, "offload": figure_offload, "remat-offload": figure_remat_offload,
          "pipeline": figure_pipeline, "budget": figure_budget}.get(figure)
    if fn is None:
        raise ValueError(f"--figure: unknown {figure!r}; choose from {', '.join(FIGURES)}")
    paths = fn(df, out, **kw)
    if not paths:
        raise ValueError(f"--figure {figure}: the table has no rows this figure draws (problems in it: "
                         f"{', '.join(sorted({str(x) for x in df['problem'].dropna()}) or ['none'])})")
    return paths


def _cmd_plot(args: argparse.Namespace) -> int:
    df = read_results(args.results)
    res = Path(args.results)
    out = Path(args.out) if args.out else (res if res.is_dir() else res.parent)
    if args.out:
        output_dir(out, "-o/--out")
    for p in draw(df, args.figure, out):
        print(f"wrote {p}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plot", help="draw a figure from a sweep's results table",
                              description="Draw one of the experiments' figures from a results table (a sweep "
                              "folder, its results/ folder, a .parquet or a .csv), without solving again.")
    p.add_argument("results", help="sweep folder (memplan sweep -o DIR), DIR/results, or a .parquet/.csv table")
    p.add_argument("--figure", required=True, choices=FIGURES)
    p.add_argument("-o", "--out", help="output folder (default: the sweep folder)")
    p.set_defaults(func=_cmd_plot)
