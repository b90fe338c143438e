"""``memplan sweep``: run an experiment grid on the sweep engine, write the table, draw the figure.

    memplan sweep PROBLEM --instance FILE [--methods a,b] (--points N | --memory 80MiB,90MiB)
                  [--bandwidth 1GB/s,2GB/s] [--gpus 4 8] [--time-limit S] [--option KEY=VALUE ...]
                  [--workers N | --scheduler ADDRESS] [-o DIR] [--csv] [--no-plot] [--fresh]
    memplan sweep --config exp.toml [-o DIR] [--workers N | --scheduler ADDRESS]

The run options (``--workers``, ``--scheduler``, ``-o``, ``--csv``, ``--no-plot``, ``--fresh``,
``-q``) may also come before PROBLEM: ``memplan sweep --workers 2 remat --instance ...``.

PROBLEM is one of the four experiments (``remat``, ``offload``, ``remat-offload``, ``pipeline``); each
is a thin module (a grid and a figure) with its own extra options (see ``memplan sweep PROBLEM
--help``). Every sweep writes one folder ``DIR`` (``-o``; default ``results/<experiment>``, or
``results/<config name>``): the table under ``DIR/results/`` (Parquet parts, resumable: a task already
there is not solved again), the same rows as ``DIR/results.csv`` (always; ``--csv`` is accepted for
old scripts), the figures beside them. A config file lists grids::

    out = "results/exp"            # optional (-o wins)
    workers = 2                    # optional (--workers / --scheduler win)
    [[grid]]
    problem = "remat"
    instances = ["instances/paper004_table2.json"]
    methods = ["rotor", "sequential"]
    points = 6                     # or memory = ["80MiB", "90MiB"]
    time_limit = 30
    [grid.options]                 # a list is one more axis of the grid
    slots = [200, 500]
    [[grid]]
    problem = "pipeline"
    pipedream = ["instances/pipedream/resnet18.graph.txt"]
    batch = 8
    bandwidth = ["12GB/s"]
    gpus = [4, 8]
    methods = ["ilp", "pipedream", "gpipe"]
    points = 6
    [grid.options]                 # a grid takes memplan.pipeline.solve's defaults (memory_model "autograd");
    memory_model = "paper"         # `memplan sweep pipeline` passes "paper" (paper 003's figures): the same here

Each row records the memory model it was solved in (column ``memory_model``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from pathlib import Path

from memplan.experiments import figures
from memplan.experiments.cli_checks import output_dir, positive_int, writing
from memplan.experiments.sweep_engine import (MAX_POINTS, Grid, RangeRecord, Source, expand, read_results,
                                              run_sweep, write_csv)
from memplan.models.solution import InputError
from memplan.models.units import UnitError, is_free_link, parse_bandwidth, parse_memory

EXPERIMENTS = {
    "remat": ("memplan.experiments.remat_sweep", "re-materialization: throughput vs memory, all methods (paper 004 Fig. 6-8)"),
    "offload": ("memplan.experiments.offload_figures", "offloading: ratio to LB and throughput vs memory (paper 001 Fig. 2-3)"),
    "pipeline": ("memplan.experiments.pipeline_figures", "pipelined model parallelism: ILP vs PipeDream (paper 003 Fig. 6-11)"),
    "remat-offload": ("memplan.experiments.remat_offload_figures", "re-materialization + offloading (paper 000)"),
}

GRID_KEYS = {"problem", "instances", "instance", "pipedream", "methods", "memory", "points", "fractions",
             "bandwidth", "gpus", "options", "time_limit", "batch"}
TOP_KEYS = {"out", "workers", "scheduler", "csv", "figures", "grid"}


# ----------------------------------------------------------------------------- shared options
def split_list(text) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]``."""
    items = text if isinstance(text, (list, tuple)) else [text]
    return [x.strip() for item in items if item is not None for x in str(item).split(",") if x.strip()]


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_options(pairs) -> dict:
    """``--option KEY=VALUE`` (JSON values; ``a,b`` is a list, i.e. one more axis of the grid)."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise InputError(f"--option {pair!r}: expected KEY=VALUE, e.g. --option slots=200")
        k, v = pair.split("=", 1)
        vals = [_value(x) for x in split_list(v)] if "," in v else _value(v.strip())
        out[k.strip().replace("-", "_")] = vals
    return out


class _Given(argparse.Action):
    """Store the value and note that the option was given (``args.<dest>_given``): ``--points`` has a
    default, and only a ``--points`` the user gave conflicts with ``--memory``."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def add_engine_arguments(p: argparse.ArgumentParser, *, methods: str | None = None, points: int | None = 10,
                         time_limit: float | None = 60.0, instance: str | None = None, out: str | None = None) -> None:
    """The options every experiment shares (grid axes, where to run, where to write)."""
    g = p.add_argument_group("grid")
    g.add_argument("--instance", action="append", default=None,
                   help="instance file or shipped name (repeat or comma-separate for several)"
                   + (f"; default {instance}" if instance else ""))
    g.add_argument("--pipedream", action="append", default=None, metavar="GRAPH_TXT",
                   help="a PipeDream profile (e.g. instances/pipedream/resnet18.graph.txt)")
    g.add_argument("--batch", type=positive_int, default=None, help="--pipedream: rescale the profile to this batch")
    g.add_argument("--methods", default=methods, help=f"comma-separated methods (default {methods or 'the problem default'})")
    g.add_argument("--points", type=int, default=points, action=_Given,
                   help=f"memory limits evenly spaced from the problem's minimum to store-all (default {points}; "
                        f"at most {MAX_POINTS})")
    g.add_argument("--memory", default=None, help="absolute memory limits instead, e.g. 80MiB,90MiB (not with "
                   "--points)")
    g.add_argument("--bandwidth", action="append", default=None,
                   help="link bandwidth(s), each one swept, e.g. 1GB/s or 1GB/s,2GB/s (default: the instance's "
                        "platform's; offload, remat-offload and pipeline refuse to run without one)")
    g.add_argument("--gpus", nargs="+", default=None, help="GPU counts (pipeline), e.g. --gpus 4 8")
    g.add_argument("--time-limit", type=float, default=time_limit,
                   help="seconds for each task, every phase included (default "
                   + (f"{time_limit:g})" if time_limit is not None else "none)"))
    g.add_argument("--option", action="append", default=None, metavar="KEY=VALUE",
                   help="an option of the problem's solve (repeatable), e.g. --option slots=200; a,b is an axis")
    r = p.add_argument_group("run")
    r.add_argument("--workers", type=positive_int, default=None,
                   help=f"local worker processes (default: the number of cores, {os.cpu_count()}); 1 runs in "
                        "this process without Dask")
    r.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="send the tasks to this Dask scheduler (e.g. tcp://10.0.0.1:8786) instead")
    r.add_argument("-o", "--out", default=out, help="output folder (results/ table, figure)")
    r.add_argument("--csv", action="store_true", help="accepted for old scripts: DIR/results.csv is always written")
    r.add_argument("--no-plot", action="store_true", help="do not draw the figure")
    r.add_argument("--fresh", action="store_true", help="drop the table under DIR first instead of resuming")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def sources(args, default: str | None = None) -> list[Source]:
    """The chains of ``--instance`` and ``--pipedream`` (``default`` when neither is given)."""
    if not args.instance and not getattr(args, "pipedream", None) and default:
        args.instance = [default]
    out = [Source(s, args.batch if s.endswith(".graph.txt") else None) for s in split_list(args.instance)]
    out += [Source(s, args.batch, pipedream=True) for s in split_list(args.pipedream)]
    return out


def bandwidths(args) -> list[float]:
    """The values of ``--bandwidth`` (repeated or comma-separated: every one is swept), in bytes/s;
    ``inf`` is free links (``math.inf``), which only the pipeline takes (the grid's check refuses it
    for the others, naming the problem)."""
    out = []
    for b in split_list(args.bandwidth):
        if is_free_link(b):
            out.append(math.inf)
            continue
        if ":" in b:        # memplan solve --problem offload's two directions: read as one garbled number here
            raise InputError(f"--bandwidth {b}: one bandwidth per value here (two directions, host:device, are for "
                             "memplan solve --problem offload); e.g. --bandwidth 12GB/s, or 12GB/s,24GB/s to sweep both")
        try:
            v = parse_bandwidth(b)
        except UnitError as e:
            raise InputError(f"--bandwidth {b}: {e}") from None
        if not v > 0:
            raise InputError(f"--bandwidth {b}: give a positive bandwidth, e.g. --bandwidth 12GB/s")
        out.append(v)
    return out


def links(given: list[float], src: Source, platform, what: str = "the link's") -> list[float]:
    """The bandwidths a figure sweeps for one source: every ``--bandwidth`` value given, else the
    instance's platform bandwidth; none is an error naming the source (never a made-up link: the
    figures are about its speed). ``what`` names the link in the message."""
    bws = given or ([platform.bandwidth] if platform is not None and platform.bandwidth else [])
    if not bws:
        raise InputError(f"--bandwidth: required, {src.spec} has no platform bandwidth; give {what}, e.g. "
                         "--bandwidth 12GB/s (or 1GB/s,2GB/s for several)")
    return bws


def check_args(args) -> None:
    """The shared options, checked before the experiment builds its grid (some compute their memory
    limits from ``--points`` themselves): one error naming the option, not a grid that silently
    does something else (an empty ``--methods`` running the default, ``--points`` dropped for
    ``--memory``) or a task per point that fails."""
    if getattr(args, "batch", None) is not None and not split_list(getattr(args, "pipedream", None)) and not any(
            s.endswith(".graph.txt") for s in split_list(args.instance)):
        raise InputError(f"--batch {args.batch}: rescales a PipeDream profile only (--pipedream GRAPH_TXT); an "
                         "instance file keeps the batch it was profiled at: leave --batch out")
    if args.methods is not None and not split_list(args.methods):
        raise InputError(f"--methods {args.methods!r}: no method named; give comma-separated methods, e.g. "
                         "--methods rotor,revolve, or leave it out for the default")
    if args.memory is not None:
        if getattr(args, "points_given", False):
            raise InputError("--points and --memory: give one (--points N spaces N limits between the minimum and "
                             "store-all; --memory lists absolute limits)")
        if not split_list(args.memory):
            raise InputError("--memory: no limit given; e.g. --memory 80MiB,90MiB")
        for m in split_list(args.memory):
            try:
                if not parse_memory(m) > 0:
                    raise UnitError("must be positive")
            except UnitError as e:
                raise InputError(f"--memory {args.memory}: {m!r} is not a memory limit ({e}); e.g. "
                                 "--memory 80MiB,90MiB") from None
    elif args.points is not None and not 1 <= args.points <= MAX_POINTS:
        raise InputError(f"--points {args.points}: give a number of memory limits between 1 and {MAX_POINTS}")
    tl = getattr(args, "time_limit", None)
    if tl is not None and not 0 < tl < math.inf:      # argparse's float takes 0, -1, inf and nan
        raise InputError(f"--time-limit {tl:g}: give a positive, finite number of seconds for each task, e.g. "
                         "--time-limit 60")
    bandwidths(args)
    try:
        gpus = [int(x) for x in split_list(args.gpus)]
    except ValueError:
        raise InputError(f"--gpus: expected integers, e.g. --gpus 4 8, got {' '.join(args.gpus)}") from None
    if any(p < 1 for p in gpus):
        raise InputError(f"--gpus {' '.join(args.gpus)}: give GPU counts >= 1, e.g. --gpus 4 8")


def tuning(problem: str, methods, given: dict, defaults: dict | None = None) -> dict:
    """The tuning options of a grid of ``methods``: each given one (not None) and each default, only where
    one of the methods reads it (``OPTIONS_USED`` of the problem's module; every option where it has
    none). A given option that no method reads is refused (the flag's name: ``--gap`` for ``gap``): a
    sweep had solved ``--methods rotor --gap 0.5`` as if the flag were not there."""
    import memplan
    from memplan._frontend import unread_options

    used = getattr(memplan.problems[problem], "OPTIONS_USED", None)
    idle = unread_options(used, methods, [k for k, v in given.items() if v is not None])
    if idle:
        k, users = idle[0]
        raise InputError(f"--{k.replace('_', '-')}: read by none of the methods {', '.join(methods)} "
                         f"({problem}): it is for {', '.join(users)}; add one of them, or leave it out")
    dropped = {k for k, _ in unread_options(used, methods, defaults or {})}    # defaults no method here reads
    out = {}
    for k in dict.fromkeys([*(defaults or {}), *given]):
        v = given.get(k)
        v = v if v is not None else (defaults or {}).get(k)
        if v is not None and k not in dropped:
            out[k] = v
    return out


def base_grid(args, problem: str, *, methods=None, options=None, memory=None, bandwidth=None, gpus=None) -> Grid:
    """The grid the shared options describe (experiments add their axes on top)."""
    if args.points is not None and args.points < 1:
        raise InputError(f"--points: must be at least 1, got {args.points}")
    gp = split_list(args.gpus) if args.gpus else None
    try:
        gp = [int(x) for x in gp] if gp else None
    except ValueError:
        raise InputError(f"--gpus: expected integers, e.g. --gpus 4 8, got {' '.join(args.gpus)}") from None
    given = parse_options(args.option)
    both = sorted(set(given) & set(options or {}))
    if both:        # the experiment's own value would silently replace the one given
        raise InputError(f"--option {both[0]}: this experiment sets {both[0]} itself (see its --help for the option "
                         "that changes it); leave it out of --option")
    return Grid(problem=problem, instances=sources(args),
                methods=methods if methods is not None else (split_list(args.methods) or None),
                memory=memory if memory is not None else (split_list(args.memory) or None),
                points=None if args.memory or memory is not None else args.points,
                bandwidth=bandwidth if bandwidth is not None else (split_list(args.bandwidth) or None),
                gpus=gpus if gpus is not None else gp, options={**given, **(options or {})},
                time_limit=args.time_limit, batch=args.batch)


def rotor_min_memory(args, src: Source, chain) -> float:
    """Rotor's minimum memory of ``chain`` (the least memory of any re-materialization sequence,
    :func:`memplan.baselines.remat_min_memory.min_memory`), from which an experiment spaces its
    limits (remat-offload, the offload Figure 3), bounded as the README says time limits are. The
    exact minimum is O(L^3): 4 s at 1500 stages, 40 s at 3000, before any progress bar. With
    ``--time-limit``, where it is estimated to take longer, the grid starts from the bottom
    :func:`memplan.remat.memory_range` gives within that time (the least replayed peak of the
    baselines: a plan fits there; the true minimum may be lower), said on stderr, and recorded in the
    sweep folder (:class:`~memplan.experiments.sweep_engine.RangeRecord`, ``args.memory_ranges``) so a
    resumed run spaces the same limits. Without a time limit it is exact, and a computation still
    running after a second says so (unless ``-q``)."""
    from memplan import remat
    from memplan.baselines.remat_min_memory import TooCostly, min_memory, min_memory_of, min_memory_seconds
    from memplan.experiments.sweep_engine import _Slow, _say
    from memplan.models.units import fmt_memory

    say = None if getattr(args, "quiet", False) else _say
    tl = getattr(args, "time_limit", None)
    what = f"rotor's minimum memory of {chain.name} (L = {chain.L}"
    if tl is None:
        with _Slow(say, what + ", no time limit)"):
            return min_memory(chain)

    def bounded() -> tuple[float, float]:
        with _Slow(say, what + f", time limit {tl:g} s)"):
            try:
                v = min_memory_of(chain, "all", time_limit=tl).value
            except TooCostly:
                v = remat.memory_range(chain, time_limit=tl)[0]
                print(f"{what}): the exact value would take about {min_memory_seconds(chain.L):.2g} s, over "
                      f"--time-limit {tl:g}; the grid starts from the least peak of the baselines, {fmt_memory(v)} "
                      "(a plan fits there; the minimum may be lower)", file=sys.stderr)
        return v, v

    ranges = getattr(args, "memory_ranges", None)
    if ranges is None:
        return bounded()[0]
    return ranges.get(["rotor_min_memory", src.ident, float(tl)], bounded)[0]


# ----------------------------------------------------------------------------- running
def execute(grids, out, *, workers=None, scheduler=None, csv=True, fresh=False, progress=True,
            ranges: RangeRecord | None = None) -> tuple:
    """Expand, run, write: returns (table, stats). ``DIR/results.csv`` (the grid's rows, readable
    without pyarrow) is written beside the Parquet parts. ``ranges``: the folder's record of memory
    ranges (default: read from ``DIR``), so that a resumed run spaces its limits as the first did."""
    output_dir(out, "-o/--out")
    ranges = ranges if ranges is not None else RangeRecord(out, fresh=fresh)
    tasks, instances = expand(grids, progress=progress, ranges=ranges)
    stats = run_sweep(tasks, instances, out, workers=workers, scheduler=scheduler, progress=progress, fresh=fresh,
                      ranges=ranges)
    df = read_results(out)
    df = df[df["key"].isin({t["key"] for t in tasks})].reset_index(drop=True)
    print(f"{stats.total} tasks: {stats.solved} solved now ({stats.failed} errors), {stats.skipped} already in "
          f"the table; {stats.wall:.1f}s; table {Path(out) / 'results'}/"
          + (f"; {stats.carried} ILP rows took the better pattern of a smaller limit (column carried_from)"
             if stats.carried else ""), file=sys.stderr)
    if csv:
        with writing(Path(out) / "results.csv"):
            df.to_csv(Path(out) / "results.csv", index=False)
        print(f"table {Path(out) / 'results.csv'} ({len(df)} rows)", file=sys.stderr)
    errors = df[df["status"] == "error"]
    for r in errors.head(10).itertuples():
        print(f"error: {r.instance} {r.problem} {r.method} at {r.memory_limit:.6g} B: {r.error}", file=sys.stderr)
    return df, stats


#: the run options ``memplan sweep`` takes before and after the experiment's name
RUN_OPTIONS = ("workers", "scheduler", "out", "csv", "no_plot", "fresh", "quiet")


def merge_run_options(args) -> None:
    """``memplan sweep --workers 2 remat ...``: a run option given before the experiment's name (kept
    under ``top_<name>`` by the ``sweep`` parser, so that the experiment parser's defaults do not
    overwrite it) counts; the same option on both sides is refused by the parser
    (:meth:`~memplan.experiments.cli_checks.OneLineParser.parse_known_args`: an option given twice)."""
    for name in RUN_OPTIONS:
        top = getattr(args, f"top_{name}", None)
        if top not in (None, False) and getattr(args, name, None) in (None, False):
            setattr(args, name, top)


def run_experiment(mod, args) -> int:
    """``memplan sweep PROBLEM``: the module's grid, the engine, its figure."""
    if getattr(args, "config", None):
        raise InputError(f"--config {args.config} and the experiment {getattr(args, 'experiment', '')!r}: give one "
                         "(the config file's grids, or the experiment's options), not both")
    merge_run_options(args)
    if args.out is not None and not str(args.out).strip():     # '' had written to the default folder
        raise InputError("-o/--out '': an empty folder name; give one, e.g. results/mine, or leave -o out for "
                         f"the default ({mod.default_out(args)})")
    out = Path(args.out or mod.default_out(args))
    check_args(args)                       # before anything is made or computed
    output_dir(out, "-o/--out")            # before the grid's own work (the pipeline's baseline points)
    args.memory_ranges = RangeRecord(out, fresh=args.fresh)     # the ranges of the folder's first run
    grids = mod.grids(args)
    df, stats = execute(grids, out, workers=args.workers, scheduler=args.scheduler, fresh=args.fresh,
                        progress=not args.quiet, ranges=args.memory_ranges)
    if not args.no_plot:
        with writing(out):          # the figures and their tables, written into the folder
            for p in mod.draw(df, out, args):
                print(f"wrote {p}")
    if hasattr(mod, "summary"):
        mod.summary(df, args)
    return 1 if (df["status"] == "error").any() else 0


def _grid_from_toml(d: dict, where: str) -> Grid:
    if not isinstance(d, dict):
        raise InputError(f"{where}: must be a table ([[grid]]), got {type(d).__name__} {d!r:.40}")
    bad = set(d) - GRID_KEYS
    if bad:
        raise InputError(f"{where}: unknown key {sorted(bad)[0]!r}; a grid takes {', '.join(sorted(GRID_KEYS))}")
    if "problem" not in d:
        raise InputError(f"{where}.problem: missing (one of remat, offload, remat-offload, pipeline)")
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool)            # noqa: E731
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    for key, ok, what in (("points", whole, "a whole number, e.g. points = 6"),
                          ("batch", whole, "a whole number, e.g. batch = 8"),
                          ("time_limit", number, "a number of seconds, e.g. time_limit = 30"),
                          ("options", lambda v: isinstance(v, dict), "a table, e.g. [grid.options] slots = [200, 500]"),
                          ("fractions", lambda v: isinstance(v, list) and all(number(x) and 0 <= x <= 1 for x in v),
                           "a list of numbers in [0, 1], e.g. fractions = [0.5, 1]")):
        if key in d and not ok(d[key]):
            raise InputError(f"{where}.{key} = {d[key]!r:.40}: give {what}")
    inst = split_list(d.get("instances", [])) + split_list(d.get("instance", []))
    if "batch" in d and not split_list(d.get("pipedream", [])):
        raise InputError(f"{where}.batch = {d['batch']!r}: batch rescales PipeDream profiles (pipedream = [...]) "
                         "only; an instance file keeps the batch it was profiled at: leave batch out")
    srcs = [Source(s) for s in inst] + [Source(s, d.get("batch"), pipedream=True)
                                           for s in split_list(d.get("pipedream", []))]
    listy = lambda v: v if isinstance(v, list) or v is None else [v]   # noqa: E731
    return Grid(problem=d["problem"], instances=srcs, methods=listy(d.get("methods")), memory=listy(d.get("memory")),
                points=d.get("points"), fractions=d.get("fractions"), bandwidth=listy(d.get("bandwidth")),
                gpus=listy(d.get("gpus")), options=dict(d.get("options", {})), time_limit=d.get("time_limit", 60.0),
                batch=d.get("batch"))


def run_config(args) -> int:
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        raise InputError("--config needs Python 3.11 or later (tomllib)") from None

    path = Path(args.config)
    try:
        cfg = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--config {path}: cannot read this file ({getattr(e, 'strerror', None) or e}); give a "
                         "TOML file listing grids (format: memplan sweep --help)") from None
    bad = set(cfg) - TOP_KEYS
    if bad:
        raise InputError(f"{path}: unknown key {sorted(bad)[0]!r}; the file takes {', '.join(sorted(TOP_KEYS))}")
    if not cfg.get("grid"):
        raise InputError(f"{path}: no [[grid]] table (see memplan sweep --help)")
    if not isinstance(cfg["grid"], list):
        raise InputError(f"{path}: grid = {cfg['grid']!r:.40}: give [[grid]] tables (see memplan sweep --help)")
    if "out" in cfg and not isinstance(cfg["out"], str):
        raise InputError(f"{path}: out = {cfg['out']!r:.40}: give a folder name, e.g. out = \"results/exp\"")
    if not isinstance(cfg.get("figures", []), list):
        raise InputError(f"{path}: figures = {cfg['figures']!r:.40}: give a list, e.g. figures = [\"remat\"] "
                         f"(of {', '.join(figures.FIGURES)})")
    bad = [f for f in (cfg.get("figures") or []) if f not in figures.FIGURES]
    if bad:     # checked before the grids run, not after
        raise InputError(f"{path}: figures: unknown {bad[0]!r}; give a list of {', '.join(figures.FIGURES)}")
    grids = [_grid_from_toml(g, f"{path}: grid[{k}]") for k, g in enumerate(cfg["grid"])]
    for k, g in enumerate(grids):      # the grid's own checks, naming the file and the grid (expand repeats them)
        try:
            g.check()
        except InputError as e:
            raise InputError(f"{path}: grid[{k}]: {e}") from None
    # a figure is drawn from the rows of its problem: one no grid sweeps failed after every grid had run
    bad = [f for f in (cfg.get("figures") or []) if f not in {g.problem for g in grids}]
    if bad:
        raise InputError(f"{path}: figures: {bad[0]!r} draws the rows of {bad[0]} grids, and no grid has problem = "
                         f"{bad[0]!r}; list the figures of its grids' problems "
                         f"({', '.join(sorted({g.problem for g in grids}))}), or leave figures out for those")
    if args.out is not None and not str(args.out).strip():
        raise InputError("-o/--out '': an empty folder name; give one, e.g. results/mine, or leave -o out")
    out = Path(args.out or cfg.get("out") or f"results/{path.stem}")
    output_dir(out, "-o/--out" if args.out else f"{path}: out")
    workers = args.workers or cfg.get("workers")
    scheduler = args.scheduler or cfg.get("scheduler")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"{path}: workers = {workers!r}: give a whole number >= 1")
    if scheduler is not None and not (isinstance(scheduler, str) and scheduler.strip()):
        raise InputError(f"{path}: scheduler = {scheduler!r:.40}: give a Dask scheduler's address as a string, "
                         "e.g. scheduler = \"tcp://10.0.0.1:8786\"")
    df, stats = execute(grids, out, workers=workers, scheduler=scheduler, fresh=args.fresh,
                        progress=not args.quiet)
    if not args.no_plot:
        with writing(out):
            for fig in cfg.get("figures") or sorted({g.problem for g in grids}):
                for p in figures.draw(df, fig, out):
                    print(f"wrote {p}")
    return 1 if (df["status"] == "error").any() else 0


def _cmd_sweep(args) -> int:
    for name in RUN_OPTIONS:
        setattr(args, name, getattr(args, f"top_{name}"))
    if args.config:
        return run_config(args)
    raise InputError("sweep: name an experiment (remat, offload, remat-offload, pipeline) or give --config FILE")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run an experiment grid (table + figure; resumable, on Dask)",
                              description=__doc__.split("\n\n")[0],
                              epilog="See `memplan sweep PROBLEM --help` for an experiment's options.\n\n"
                              "--config FILE, a TOML file listing grids, e.g.:"
                              + __doc__[__doc__.index("A config file lists grids::") + len("A config file lists grids::"):],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    # the run options may come before the experiment's name too (memplan sweep --workers 2 remat ...):
    # kept as top_<name> (an experiment parser's defaults would overwrite them), see merge_run_options
    p.add_argument("--config", help="a TOML file listing grids (several instances and problems)")
    p.add_argument("--workers", dest="top_workers", type=positive_int, default=None,
                   help="local worker processes (default: cores; 1: no Dask)")
    p.add_argument("--scheduler", dest="top_scheduler", default=None, metavar="ADDRESS",
                   help="an existing Dask scheduler")
    p.add_argument("-o", "--out", dest="top_out", default=None, help="output folder")
    p.add_argument("--csv", dest="top_csv", action="store_true", help="accepted for old scripts: DIR/results.csv "
                   "is always written")
    p.add_argument("--no-plot", dest="top_no_plot", action="store_true")
    p.add_argument("--fresh", dest="top_fresh", action="store_true")
    p.add_argument("--quiet", "-q", dest="top_quiet", action="store_true")
    p.set_defaults(func=_cmd_sweep)
    sub = p.add_subparsers(dest="experiment", required=False)
    for name, (modname, help_) in EXPERIMENTS.items():
        mod = importlib.import_module(modname)
        sp = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).split("\n\n")[0])
        mod.add_arguments(sp)
        sp.set_defaults(func=lambda a, _m=mod: run_experiment(_m, a))
