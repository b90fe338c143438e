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
An instance with nothing to draw (every row failed or without a schedule, an offloading table without
its ``lb`` rows) is not drawn as empty axes: it is left out, with the reason (:func:`draw` makes that
reason its error when no figure at all is left).

Instances are told apart by ``instance_id`` (the file's content), not by the chain's name: two chains
of the same name are two curves, and two files whose names take a short id.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import warnings
from pathlib import Path

from memplan.experiments.cli_checks import output_dir, writing
from memplan.experiments.sweep_engine import read_results
from memplan.models.solution import InputError

FIGURES = ["remat", "offload", "remat-offload", "pipeline", "budget"]
#: the columns each figure reads, beyond those every results table has (problem, method, memory_limit,
#: status and objective, which :func:`read_results` checks): a CSV edited, or written by another tool,
#: may lack some. ``instance_id`` and ``time_limit`` are read where present (by name, one run, if not).
#: Each figure is named after the problem of its rows.
NEEDS = {"remat": ["instance", "batch", "options", "peak_memory"],
         "offload": ["instance", "bandwidth", "bound", "batch", "options"],
         "remat-offload": ["instance", "bandwidth", "batch", "options", "peak_memory", "wall_time", "message"],
         "pipeline": ["instance", "gpus", "bandwidth", "options", "peak_memory"],
         "budget": ["instance", "peak_memory"]}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int) -> Path:
    """Lay out, write and close a figure; its path."""
    fig.tight_layout()
    try:
        with writing(path):         # a full disk: one line naming the file (memplan plot, memplan sweep)
            fig.savefig(path, dpi=dpi)
    finally:
        _plt().close(fig)
    return path


def _slug(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(s))


def _opt(options: str, name: str):
    try:
        return json.loads(options or "{}").get(name)
    except (TypeError, ValueError):
        return None


def check_columns(df, figure: str, source="the results table") -> None:
    """Refuse, in one line naming ``source``, a table whose rows of ``figure`` lack a column the figure
    reads (before: a ``KeyError`` traceback from pandas). A table without any row of the figure's
    problem is left to :func:`draw`'s own error, which names the problems it holds."""
    rows = df[df["problem"] == figure]
    if rows.empty:
        return
    need = NEEDS.get(figure, [])
    if figure == "budget" and (rows["method"] == "pytorch").any():
        need = need + ["fraction"]                  # PyTorch's points are labelled with their fraction
    missing = [c for c in need if c not in df.columns]
    if figure == "pipeline" and "gpus" not in missing and rows["gpus"].isna().any():
        # read_results makes an absent gpus column one of missing values: a PNG per GPU count needs one
        missing.append("gpus")
    if missing:
        cols = ("column " if len(missing) == 1 else "columns ") + ", ".join(repr(c) for c in missing)
        empty = " (or no value in it)" if "gpus" in missing else ""
        raise InputError(f"{source}: no {cols}{empty}, which --figure {figure} reads; plot the sweep folder itself "
                         "or its results.csv as memplan sweep wrote it, or add the column")
    if "options" in need:       # before drawing: a value that is not JSON was a JSONDecodeError's own words
        keys = rows["key"] if "key" in rows.columns else [None] * len(rows)
        for key, o in zip(keys, rows["options"]):
            try:
                _options(o, f" (the row of key {key})" if isinstance(key, str) else "")
            except InputError as e:
                raise InputError(f"{source}: {e}") from None


def _not_drawn(skipped: list | None, reason: str) -> None:
    """An instance (or one of its figures) with nothing to draw: its reason goes to ``skipped`` (collected
    by :func:`draw`), or is a warning where a figure function is called alone (the experiments' own
    ``draw``), so that a figure left out is never silent."""
    if skipped is None:
        warnings.warn(reason, stacklevel=3)
    else:
        skipped.append(reason)


def _unsolved(name: str, d) -> str:
    """Why an instance has no point to draw: its rows' statuses, counted."""
    if d.empty:
        return f"no rows of a method to draw for {name}"
    return (f"no solved rows for {name}: every row is error, infeasible or without a schedule ({_counts(d)}; "
            "see the table's message and error columns)")


def _counts(d) -> str:
    return ", ".join(f"{n} {st}" for st, n in d["status"].value_counts().items())


def _legend(ax, **kw) -> None:
    """A legend where the axes have labelled artists (an empty call warns "No artists with labels found")."""
    if ax.get_legend_handles_labels()[1]:
        ax.legend(**kw)


def _ident(df):
    """The instance of each row: its ``instance_id`` (the instance file's content) where the table has
    one, else its name; two chains of the same name but different contents are two instances. A
    table with neither (a caller's own, of one instance) is one instance."""
    import pandas as pd

    name = df["instance"] if "instance" in df.columns else pd.Series("", index=df.index, dtype=object)
    if "instance_id" in df.columns:
        ids = df["instance_id"].astype(object)      # all missing: float64, which takes no name
        return ids.where(ids.notna(), name).astype(str)
    return name.astype(str)


def _short_ids(ids) -> dict:
    """A short tag per instance id (the content digest's first 8 hex digits of ``name@digest``), or a
    hash of the whole id where those would not tell them apart (the same file under two names)."""
    tags = {i: i.rsplit("@", 1)[-1][:8] for i in ids}
    if len(set(tags.values())) < len(tags):
        tags = {i: hashlib.sha256(i.encode()).hexdigest()[:8] for i in ids}
    return tags


def by_instance(df):
    """``(name, file name part, rows)`` per instance, in the order of the names: the chain's name, and
    where another instance of the table has the same name, both take a short id (``name [id]`` in
    titles, ``name_id`` in file names), so that neither figure overwrites the other."""
    if df.empty:
        return []
    ident = _ident(df)
    groups = [(str(g["instance"].dropna().iloc[0]) if g["instance"].notna().any() else i, i, g)
              for i, g in df.groupby(ident, sort=True)]
    groups.sort(key=lambda t: (t[0], t[1]))
    names = [n for n, _, _ in groups]
    shared = {n for n in names if names.count(n) > 1}
    tags = _short_ids([i for n, i, _ in groups if n in shared])
    return [(f"{n} [{tags[i]}]", f"{_slug(n)}_{tags[i]}", g) if n in shared else (n, _slug(n), g)
            for n, i, g in groups]


def _errors(df) -> str:
    n = int((df["status"] == "error").sum())
    return f" [{n} failed task(s) not drawn]" if n else ""


def _ok(df):
    return df[df["objective"].notna() & (df["status"] != "error")]


def _options(o, where: str = "") -> dict:
    """The solve options of one row (``threads`` left out), or an error naming the column (and
    ``where``, the row)."""
    if not isinstance(o, str):
        return {}
    try:
        d = json.loads(o or "{}")
    except ValueError:
        d = None
    if not isinstance(d, dict):
        raise InputError(f"column 'options' holds {o!r:.60}{where}, not the JSON object memplan sweep "
                         "writes (e.g. {\"slots\": 500}); fix or delete that row, or run the sweep again")
    return {k: v for k, v in d.items() if k != "threads"}


def _seconds(t) -> str:
    return "no time limit" if t is None or (isinstance(t, float) and math.isnan(t)) else f"time limit {t:g} s"


def curve_labels(df):
    """One curve label per row: the method, plus the options whose values differ between that
    method's rows (``rotor (slots=20)``, ``rotor (slots=500)``), so that a sweep over an option never
    draws or summarizes two settings as one zigzagging curve. ``threads`` is not a setting of the
    answer and never splits a curve. Rows of one method and instance at several time limits (two
    runs written to one folder) are split too (``rotor (time limit 2 s)``): each curve is one run's."""
    import pandas as pd

    opts = pd.Series([_options(o) for o in df["options"]], index=df.index, dtype=object)
    extra = {i: [] for i in df.index}
    for method in df["method"].dropna().unique():
        rows = df.index[df["method"] == method]
        keys = sorted({k for i in rows for k in opts[i]})
        varying = [k for k in keys if len({json.dumps(opts[i].get(k), sort_keys=True) for i in rows}) > 1]
        for i in rows:
            extra[i] += [f"{k}={opts[i].get(k)}" for k in varying]
    if "time_limit" in df.columns:
        tl = df["time_limit"]
        for _, rows in df.groupby([_ident(df), df["method"]], sort=False).groups.items():
            if tl[rows].nunique(dropna=False) > 1:
                for i in rows:
                    extra[i].append(_seconds(tl[i]))
    return pd.Series([f"{m} (" + ", ".join(extra[i]) + ")" if extra[i] else str(m)
                      for i, m in zip(df.index, df["method"])], index=df.index, dtype=object)


# ------------------------------------------------------------------------------------------ remat
STYLE = {"rotor": ("tab:blue", "^-"), "rotor-floating": ("tab:cyan", "v--"), "revolve": ("tab:green", "o-"),
         "recompute-all": ("tab:gray", "s:"), "remat-milp": ("tab:purple", "D--"),
         "checkmate": ("tab:orange", "P-"), "checkmate-lp": ("tab:brown", "X:")}


def figure_remat(df, out: Path, *, skipped: list | None = None) -> list[Path]:
    """Throughput against replayed peak memory, one PNG per instance (``OUT/remat_<instance>.png``);
    an instance without a solved row is left out (its reason to ``skipped``, see :func:`_not_drawn`)."""
    plt = _plt()
    written = []
    for inst, stem, d in by_instance(df[df["problem"] == "remat"]):
        ok = _ok(d).copy()
        if ok.empty:
            _not_drawn(skipped, _unsolved(inst, d))
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
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
        _legend(ax, fontsize=8)
        written.append(_save(fig, out / f"remat_{stem}.png", 130))
    return written


# ---------------------------------------------------------------------------------------- offload
def figure_offload(df, out: Path, *, show_dynprog: bool = False, skipped: list | None = None) -> list[Path]:
    """Paper 001's Figures 2 and 3 per instance (``OUT/offload_<instance>_figure2.png``, ``..._figure3.png``).
    Figure 2 needs the ``lb`` rows (its y axis is makespan / LB): without them, or without a solved row
    at their limits, it is left out with its reason, as is Figure 3 without a solved row."""
    plt = _plt()
    written = []
    for inst, stem, d in by_instance(df[df["problem"].isin(["offload", "remat"])]):
        off = d[d["problem"] == "offload"]
        if off.empty:
            continue
        base = off["bandwidth"].min()
        # Figure 2: makespan / LB at the base bandwidth
        lb = off[(off["method"] == "lb") & (off["bandwidth"] == base)].set_index("memory_limit")["bound"].dropna()
        lb = lb[~lb.index.duplicated()]          # the same bound from two runs at one limit
        rows = off[(off["bandwidth"] == base) & (off["method"] != "lb")]
        at_base = _ok(rows)[_ok(rows)["memory_limit"].isin(lb.index)]
        if lb.empty:
            _not_drawn(skipped, f"Figure 2 of {inst} not drawn: no 'lb' rows (with a bound) at its lowest bandwidth "
                       f"{base / 1e9:.3g} GB/s, by which it divides the makespans (memplan sweep offload adds them; "
                       "add method lb to the grid)")
        elif _ok(rows).empty:
            _not_drawn(skipped, f"Figure 2 of {inst} not drawn: {_unsolved(inst, rows)}")
        elif at_base.empty:
            _not_drawn(skipped, f"Figure 2 of {inst} not drawn: no solved row at a memory limit of its 'lb' rows "
                       "(rows of another grid?); sweep lb at the same limits as the methods")
        else:
            fig, ax = plt.subplots(figsize=(7, 4))
            for meth, g in at_base.assign(curve=curve_labels(at_base)).groupby("curve", sort=True):
                g = g.sort_values("memory_limit")
                ratio = g["objective"].values / lb.reindex(g["memory_limit"]).values
                ax.plot(g["memory_limit"] / 2**20, ratio, marker="o", ms=3, label=meth)
            ax.set_xlabel("memory limit (MiB)")
            ax.set_ylabel("makespan / LB")
            ax.set_title(f"{inst}: offloading at {base / 1e9:.3g} GB/s (paper 001, Fig. 2){_errors(off)}", fontsize=9)
            ax.grid(alpha=0.3)
            _legend(ax)
            written.append(_save(fig, out / f"offload_{stem}_figure2.png", 130))
        # Figure 3: throughput of the best heuristic at each bandwidth, and re-materialization
        heur = _ok(off[~off["method"].isin(["lb", "milp"])])
        remat = _ok(d[d["problem"] == "remat"])
        if heur.empty and remat.empty:
            _not_drawn(skipped, f"Figure 3 of {inst} not drawn: " + _unsolved(
                inst, d[~d["method"].isin(["lb", "milp"])]))
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        batch = float(d["batch"].dropna().iloc[0]) if d["batch"].notna().any() else 1.0
        styles = ["-", "--", ":", "-."]
        # rows of several runs (time limits) are a best curve each, as curve_labels splits a method's
        runs = heur["time_limit"].fillna(-1.0) if "time_limit" in heur.columns else heur["method"].map(lambda _: -1.0)
        several = runs.nunique() > 1
        for k, ((bw, t), g) in enumerate(heur.groupby([heur["bandwidth"], runs], sort=True)):
            run = f" ({_seconds(None if t < 0 else t)})" if several else ""
            best = g.groupby("memory_limit")["objective"].min()
            ax.plot(best.index / 2**20, batch / best.values, styles[k % 4], ms=3,
                    label=f"offload best {bw / base:g}x{run}")
            dyn = g[g["method"] == "dynprog"].sort_values("memory_limit")
            if show_dynprog and len(dyn):
                ax.plot(dyn["memory_limit"] / 2**20, batch / dyn["objective"], styles[k % 4], alpha=0.5,
                        label=f"offload dynprog {bw / base:g}x{run}")
        for meth, g in remat.assign(curve=curve_labels(remat)).groupby("curve", sort=True):
            g = g.sort_values("memory_limit")
            ax.plot(g["memory_limit"] / 2**20, batch / g["objective"], "-", marker="o", ms=3, color="k",
                    label=f"remat ({meth})")
        ax.set_xlabel("memory limit (MiB)")
        ax.set_ylabel("throughput (samples/s)" if batch != 1 else "throughput (iterations/s)")
        ax.set_title(f"{inst}: offloading vs re-materialization (paper 001, Fig. 3)", fontsize=9)
        ax.grid(alpha=0.3)
        _legend(ax, fontsize=8)
        written.append(_save(fig, out / f"offload_{stem}_figure3.png", 130))
    return written


# ----------------------------------------------------------------------------------- remat-offload
def remat_offload_curves(df):
    """The curve table of the remat-offload figure: one row per (memory, curve, factor, time limit) with
    columns memory, method (the curve's name: store-all, rotor, rotor-500, offload, joint-N, joint),
    factor, bandwidth, makespan, peak, status, seconds, message, time_limit, curve, throughput.
    ``joint`` is the best ``joint-N`` at each (memory, factor) of a run. Rows of one method at several
    time limits (runs written to one folder) are a curve per run: ``curve`` is the method, plus its
    time limit where that method's rows have several (``joint (time limit 2 s)``), as
    :func:`curve_labels` splits the other figures' curves."""
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
        tl = getattr(r, "time_limit", math.nan)
        rows.append(dict(memory=r.memory_limit, method=name, factor=factor,
                         bandwidth=math.nan if r.problem == "remat" else r.bandwidth,
                         makespan=r.objective if ok else math.nan,
                         peak=r.peak_memory if r.peak_memory is not None else math.nan, status=status,
                         seconds=r.wall_time, message=r.message, batch=r.batch,
                         time_limit=math.nan if tl is None or pd.isna(tl) else float(tl)))
    cur = pd.DataFrame(rows)
    if cur.empty:
        return cur
    joint = cur[cur["method"].str.startswith("joint-")]
    best = []
    for (M, f, t), g in joint.groupby(["memory", "factor", "time_limit"], sort=True, dropna=False):
        g = g.dropna(subset=["makespan"])
        if len(g):
            b = g.loc[g["makespan"].idxmin()].to_dict()
            b.update(method="joint", message=f"best of {b['method']}")
        else:
            b = dict(memory=M, method="joint", factor=f, bandwidth=base * f, makespan=math.nan, peak=math.nan,
                     status="infeasible", seconds=0.0, message="", batch=joint["batch"].iloc[0], time_limit=t)
        best.append(b)
    cur = pd.concat([cur, pd.DataFrame(best)], ignore_index=True)
    cur["throughput"] = cur["batch"].fillna(1.0) / cur["makespan"]
    several = cur.groupby("method")["time_limit"].transform(lambda t: t.nunique(dropna=False) > 1)
    cur["curve"] = [f"{m} ({_seconds(t)})" if k else m for m, t, k in zip(cur["method"], cur["time_limit"], several)]
    return cur.drop(columns=["batch"])


#: the line style of each run's curve where a method's rows are of several runs (time limits)
_RUN_LINES = ["-", "--", ":", "-."]


def _run(t) -> float:
    """A time limit as a sortable key (no time limit last)."""
    return math.inf if t is None or (isinstance(t, float) and math.isnan(t)) else float(t)


def figure_remat_offload(df, out: Path, *, skipped: list | None = None) -> list[Path]:
    """One PNG per instance, one panel per bandwidth factor (``OUT/remat_offload_<instance>.png``); the
    curve table beside it (``.csv``). Runs at several time limits written to one folder are a curve
    each (:func:`remat_offload_curves`: the method's colour and marker, a line style per run, the time
    limit in the label). An instance without a solved point, or whose table still holds two rows of
    one curve at one point (two runs at the same time limit with other options: its curves name the
    method and slots only, and would zigzag between the runs), is left out with the reason."""
    from memplan.models.units import fmt_bandwidth

    plt = _plt()
    written = []
    for inst, name, d in by_instance(df[df["problem"].isin(["remat", "offload", "remat-offload"])]):
        if not (d["problem"] == "remat-offload").any():
            continue
        cur = remat_offload_curves(d)
        twice = cur[cur["method"] != "joint"].duplicated(["curve", "memory", "factor"])
        if twice.any():
            _not_drawn(skipped, f"{inst}: the table holds several runs of one curve ({cur['curve'][twice.idxmax()]} "
                       "twice at one memory limit, at the same time limit), which would be drawn as one; sweep "
                       "each run to its own folder (-o) and plot each")
            continue
        if not cur["throughput"].notna().any():
            _not_drawn(skipped, _unsolved(inst, d))
            continue
        stem = out / f"remat_offload_{name}"
        with writing(stem.with_suffix(".csv")):
            cur.to_csv(stem.with_suffix(".csv"), index=False)
        factors = sorted(cur["factor"].dropna().unique())
        base = d[d["problem"] != "remat"]["bandwidth"].min()
        joints = sorted({m for m in cur["method"] if m.startswith("joint-")})
        batch = d["batch"].dropna()
        unit = "samples/s" if len(batch) and batch.iloc[0] != 1 else "iterations/s"
        fig, axes = plt.subplots(1, len(factors), figsize=(5 * len(factors), 4), sharey=True, squeeze=False)
        runs = sorted({_run(t) for t in cur["time_limit"]})        # the same line style for a run in every curve
        for ax, f in zip(axes[0], factors):
            styles = [("store-all", "k*--"), ("rotor", "C0-o"), ("rotor-500", "C0:"), ("offload", "C2-s"),
                      ("joint", "C3-^")] + [(n, f"C{4 + k}:") for k, n in enumerate(joints)]
            for name, style in styles:
                g = cur[(cur["method"] == name) & ((cur["factor"] == f) | cur["factor"].isna())]
                for curve, c in g.groupby("curve", sort=True):
                    c = c.sort_values("memory")
                    k = runs.index(_run(c["time_limit"].iloc[0]))
                    fmt = style if curve == name else re.sub(r"--|-\.|-|:", "", style) + _RUN_LINES[k % 4]
                    ax.plot(c["memory"] / 2**20, c["throughput"], fmt, label=curve, markersize=4)
            ax.set_title(f"beta x{f:g} = {fmt_bandwidth(base * f)}")
            ax.set_xlabel("memory limit (MiB)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"throughput ({unit})")
        _legend(axes[0][0], fontsize=8)
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
    GPipe), at each (instance, gpus, memory limit); and at each ``instance_id`` and ``time_limit`` where
    the table holds several (two chains of one name, two runs in one folder), never the best of both."""
    import pandas as pd

    ok = _ok(df[df["problem"] == "pipeline"])
    keys = ["instance"]
    if "instance_id" in ok.columns and len(ok) and _ident(ok).nunique() > ok["instance"].nunique():
        keys.append("instance_id")
    if "time_limit" in ok.columns and ok["time_limit"].nunique(dropna=False) > 1:
        keys.append("time_limit")
    piv = ok.groupby(keys + ["gpus", "bandwidth", "memory_limit", "method"], dropna=False)["objective"].min()
    piv = piv.unstack("method")
    if "ilp" not in piv or "pipedream" not in piv:
        return pd.DataFrame()
    s = piv.reset_index()
    s["ilp_over_pipedream"] = s["ilp"] / s["pipedream"]
    base = [m for m in ("pipedream", "gpipe") if m in s]
    s["ilp_over_best_baseline"] = s["ilp"] / s[base].min(axis=1)
    return s


def figure_pipeline(df, out: Path, *, skipped: list | None = None) -> list[Path]:
    """Period against the memory per GPU, ``OUT/pipeline_<instance>_P<gpus>.png``, one panel per link
    bandwidth swept (each titled with its bandwidth: points at different links are never drawn as one
    curve), and ``OUT/pipeline_summary.csv`` (ILP / PipeDream at each limit). An (instance, GPU count)
    without a solved row is left out with the reason."""
    written = []
    d = df[df["problem"] == "pipeline"]
    for inst, stem, rows in by_instance(d):
        for P, g in rows.groupby("gpus", sort=True):
            if _ok(g).empty:
                _not_drawn(skipped, _unsolved(f"{inst} on {P} GPUs", g))
                continue
            written.append(_pipeline_png(g, inst, P, out / f"pipeline_{stem}_P{P}.png"))
    s = pipeline_summary(df)
    if len(s):
        with writing(out / "pipeline_summary.csv"):
            s.to_csv(out / "pipeline_summary.csv", index=False)
        written.append(out / "pipeline_summary.csv")
    return written


def _pipeline_png(g, inst: str, P, path: Path) -> Path:
    """One (instance, GPU count)'s figure: a panel per link bandwidth."""
    from memplan.models.units import fmt_bandwidth

    plt = _plt()
    links = sorted(g["bandwidth"].unique(), key=lambda b: (math.isnan(b), b))
    fig, axes = plt.subplots(1, len(links), figsize=(6.5 * len(links), 4.5), squeeze=False)
    # the ILP's time limit in the title where it is one; several (runs in one folder) are in the curves' labels
    tl = g[g["method"] == "ilp"]["time_limit"].dropna().unique() if "time_limit" in g.columns else []
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
        ax.set_title(f"{inst}, {P} GPUs, {link}" + (f" (ILP time limit {tl[0]:g}s)" if len(tl) == 1 else "")
                     + _errors(gb), fontsize=9)
        if okb.empty:
            ax.text(0.5, 0.5, "no solved row at this link", transform=ax.transAxes, ha="center", va="center")
        _legend(ax)
        ax.grid(alpha=0.3)
    return _save(fig, path, 120)


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


def figure_budget(df, out: Path, *, skipped: list | None = None) -> list[Path]:
    """Throughput against measured peak per network (``OUT/budget_<instance>.png``); a network without
    an executed row is left out with the reason."""
    plt = _plt()
    written = []
    for inst, stem, every in by_instance(df[df["problem"] == "budget"]):
        g = every[(every["status"] == "executed") & every["objective"].notna()]
        if g.empty:
            _not_drawn(skipped, f"no executed rows for {inst}: no row has status executed and a step time ("
                       + _counts(every) + "; see the table's message and error columns)")
            continue
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
        ax.set_title(f"{inst}: throughput vs measured peak ({backend}, {clock} clock){_errors(every)}",
                     fontsize=8)
        ax.grid(alpha=0.3)
        _legend(ax, fontsize=7)
        written.append(_save(fig, out / f"budget_{stem}.png", 130))
    return written


def draw(df, figure: str, out: str | Path, *, source="the results table", **kw) -> list[Path]:
    """Draw ``figure`` (one of :data:`FIGURES`) from the results table ``df`` into the folder ``out``.
    The columns the figure reads are checked first (:func:`check_columns`, naming ``source``). An
    instance with nothing to draw is left out: with a warning where others are drawn, as the error
    (its reasons, on one line) where none is, so that no empty figure is ever written."""
    out = Path(out)
    fn = {"remat": figure_remat, "offload": figure_offload, "remat-offload": figure_remat_offload,
          "pipeline": figure_pipeline, "budget": figure_budget}.get(figure)
    if fn is None:
        raise ValueError(f"--figure: unknown {figure!r}; choose from {', '.join(FIGURES)}")
    check_columns(df, figure, source)
    out.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    paths = fn(df, out, skipped=skipped, **kw)
    if not paths and skipped:
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise ValueError(f"--figure {figure}: nothing to draw: " + "; ".join(skipped[:3]) + more)
    if not paths:
        raise ValueError(f"--figure {figure}: the table has no rows this figure draws (problems in it: "
                         f"{', '.join(sorted({str(x) for x in df['problem'].dropna()}) or ['none'])})")
    for reason in skipped:
        warnings.warn(f"--figure {figure}: {reason}", stacklevel=2)
    return paths


def default_out(results: str | Path) -> Path:
    """Where ``memplan plot`` writes without ``-o``: the sweep folder, beside its ``results.csv``. Given
    the folder of a sweep's parts (``SWEEP/results``, as :func:`read_results` takes it), that is its
    parent, not the parts folder (whose files the table is read from); given a table file, its folder."""
    res = Path(results)
    if not res.is_dir():
        return res.parent
    if res.name == "results" and not (res / "results").is_dir():
        return res.parent
    return res


def _not_a_sweep_folder(res: Path) -> None:
    """A folder with neither a ``results/`` folder nor part files is no sweep's (``memplan plot results``,
    the folder above the sweeps): an error naming it and the sweep folders inside, not "the table has
    no rows this figure draws (problems in it: none)", which reads as a sweep that solved nothing."""
    if not res.is_dir() or (res / "results").is_dir() or any(res.glob("*.parquet")) or res.name == "results" \
            and (res.parent / "sweep.log").is_file():       # a sweep's parts folder, before its first row
        return
    inside = sorted(str(d) for d in res.iterdir() if d.is_dir() and (d / "results").is_dir())
    raise InputError(f"{res}: not a sweep folder (no results/ folder, no part files: memplan sweep -o DIR writes its "
                     "table under DIR/results/); give a sweep's folder"
                     + (f", e.g. {', '.join(inside[:3])}" + (" ..." if len(inside) > 3 else "") if inside else ""))


def _cmd_plot(args: argparse.Namespace) -> int:
    _not_a_sweep_folder(Path(args.results))
    df = read_results(args.results)
    out = Path(args.out) if args.out else default_out(args.results)
    if args.out:
        output_dir(out, "-o/--out")
    for p in draw(df, args.figure, out, source=args.results):
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
