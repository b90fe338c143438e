"""One sweep engine: a grid of solves, run in-process or on Dask, into one tidy, resumable table.

An experiment is a :class:`Grid` (or several): instances x problem x methods x memory limits x
bandwidths x GPU counts x options. Memory limits are absolute (``memory``), or ``points`` fractions
between the problem's minimum and store-all memory (:func:`memory_range`). Each (point, method) is one
task: one :func:`memplan.solve` call with its own time limit, run by :func:`run_task`, which never
raises (an exception becomes a row with status ``error`` and its message; an :class:`InfeasibleError`
is the answer ``infeasible``).

:func:`run_sweep` runs the tasks whose key is not yet in the table under ``DIR/results/`` (one Parquet
part file per finished task, written atomically, so an interrupted sweep resumes where it stopped):
``workers=1`` in this process, without Dask (for debugging); else on a ``dask.distributed``
``LocalCluster`` of ``workers`` single-threaded worker processes, or on an existing scheduler
(``scheduler="tcp://host:8786"``). A worker that dies loses only its task, which is retried once and
then recorded as an ``error`` row. The rows do not depend on the number of workers, timing columns
(:data:`VOLATILE`) aside. :func:`read_results` reads the table back (a folder, a Parquet or a CSV file).

Two things make a pipeline sweep (paper 003, Figs. 6-11) as good as the serial loop it replaces, and
its rows independent of machine load and of the number of workers:

* **shared inputs**: the baseline points of each (instance, bandwidth, GPUs, memory model, mini-batches)
  (PipeDream's sweep and GPipe's partitions, :func:`memplan.pipeline.baseline_points`, complete: no
  time cut) are computed once by :func:`expand` (it needs PipeDream's for the memory range anyway) and
  given to every ``ilp``, ``cyclic``, ``pipedream`` and ``gpipe`` task of that series as ``points=``:
  the baselines' rows are deterministic, and the ILP starts from every baseline pattern that fits
  (the same points its baseline rows are taken from);
* **carrying forward** (:data:`CARRIED`): the ``ilp`` tasks of one series (same instance, bandwidth,
  GPUs, options, time limit) are independent tasks, run in parallel; their rows keep the pattern they
  returned (column ``schedule``). Once every task of a run is back, :func:`carry_forward` walks each
  series by increasing memory limit and gives a row the best validated pattern of a smaller limit
  when that pattern is strictly faster than the row's own (a pattern that fits a smaller limit fits
  a larger one, and the simulator accepted it): so the ILP's period never increases with the limit,
  as in the serial script where each limit started from the pattern of the limit below, without
  making the series a serial chain. Such a row says so: ``carried_from`` is the limit whose pattern it
  holds, and its message gives the solve's own period. Its status stays what its own solve proved
  (``optimal`` only if its bound proves the carried period; ``no_solution`` becomes ``feasible``).
  The pass reads only the table, so it is repeated after a resumed run, and a second pass changes
  nothing. The client submits the tasks with a time limit first (longest first), at most one per
  worker thread, so a worker that dies loses only its own task (Dask counts every task a dead worker
  held against that task's retries).
"""
from __future__ import annotations

import hashlib
import importlib.metadata as _metadata
import inspect
import itertools
import json
import math
import threading
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import memplan
from memplan.experiments.cli_checks import writing
from memplan.formulations.highs_driver import silence_banner
from memplan.models.instance import InstanceError, load_instance
from memplan.models.solution import InfeasibleError, InputError
from memplan.models.units import is_free_link, parse_bandwidth, parse_memory

#: the table's columns and their Arrow types (one row per (point, method))
COLUMNS: list[tuple[str, str]] = [
    ("key", "string"), ("instance", "string"), ("instance_id", "string"), ("problem", "string"),
    ("method", "string"), ("memory_limit", "float64"), ("fraction", "float64"), ("bandwidth", "float64"),
    ("gpus", "int64"), ("options", "string"), ("time_limit", "float64"), ("batch", "float64"),
    ("status", "string"), ("objective", "float64"), ("peak_memory", "float64"), ("bound", "float64"),
    ("gap", "float64"), ("predicted", "float64"), ("memory_model", "string"), ("message", "string"),
    ("error", "string"), ("schedule", "string"), ("carried_from", "float64"), ("solve_time", "float64"), ("wall_time", "float64"), ("times", "string"),
    ("solver", "string"), ("memplan_version", "string"), ("worker", "string"), ("run_id", "string"),
    ("finished_at", "string"),
]
COLUMN_NAMES = [c for c, _ in COLUMNS]
#: columns that differ from one run to the next (timings, where and when); the rest is the answer
VOLATILE = ["solve_time", "wall_time", "times", "worker", "run_id", "finished_at"]
#: the returned schedule (JSON), kept for carried rows only: not compared by :func:`same_rows` (two
#: schedules of the same period and memory are the same answer)
NOT_COMPARED = ["schedule"]
#: (problem, method) whose rows keep their schedule and take a better one of a smaller limit of their
#: series (:func:`carry_forward`; see the module doc)
CARRIED: frozenset[tuple[str, str]] = frozenset({("pipeline", "ilp")})
#: (problem, method) whose tasks are quick whatever their time limit (a lookup in the shared points)
_QUICK = frozenset({("pipeline", "pipedream"), ("pipeline", "gpipe")})
#: the coordinates of a carried series: rows that differ only in their memory limit
SERIES = ["instance_id", "problem", "method", "bandwidth", "gpus", "options", "time_limit"]
#: pipeline methods that take the shared baseline points (``points=``), and which sweeps they need
_POINTS_NEED = {"ilp": ("pipedream", "gpipe"), "cyclic": ("pipedream", "gpipe"), "pipedream": ("pipedream",),
                "gpipe": ("gpipe",)}
#: the order of the table's rows (the grid's coordinates)
ORDER = ["instance_id", "problem", "method", "bandwidth", "gpus", "options", "memory_limit"]
#: the most memory limits one grid spaces (``points``): more is a typo, not an experiment (every
#: limit is a task and a part file per method)
MAX_POINTS = 1000


def _schema():
    import pyarrow as pa

    return pa.schema([(c, getattr(pa, t)()) for c, t in COLUMNS])


# ----------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Source:
    """Where a chain comes from: an instance file or shipped name, or a PipeDream profile
    (``pipedream=True`` or a ``*.graph.txt`` name, rescaled to ``batch``). ``ident`` names it by
    content (sha256 of the file)."""

    spec: str
    batch: int | None = None
    pipedream: bool = False

    def load(self):
        """``(chain, platform)``."""
        if self.spec.startswith("random:"):      # random:L:seed -> models.chain.random_chain(L, seed)
            from memplan.models.chain import random_chain

            try:
                _, L, seed = self.spec.split(":")
                L, seed = int(L), int(seed)
            except ValueError:
                raise InputError(f"instance {self.spec!r}: expected random:L:SEED, e.g. random:12:0") from None
            try:
                return random_chain(L, seed, integer=False), None
            except ValueError as e:        # its own words: which of L and the seed, and what works
                raise InputError(f"instance {self.spec!r} (--random): {e}") from None
        if self.pipedream or self.spec.endswith(".graph.txt"):
            from memplan.models.pipedream import import_graph

            if not Path(self.spec).exists():
                raise InputError(f"--pipedream {self.spec}: no such PipeDream graph file (e.g. "
                                 "instances/pipedream/resnet18.graph.txt)")
            return import_graph(self.spec, batch=self.batch), None
        return load_instance(self.spec)

    @property
    def ident(self) -> str:
        p = Path(self.spec)
        if self.spec.startswith("random:"):
            return self.spec
        if p.is_file():
            digest = hashlib.sha256(p.read_bytes() + f"|batch={self.batch}".encode()).hexdigest()[:16]
        else:       # a shipped instance: its name and memplan's version identify it
            digest = hashlib.sha256(f"{self.spec}|{memplan.__version__}".encode()).hexdigest()[:16]
        return f"{p.name if p.suffix else self.spec}@{digest}"


def _batch_of(chain) -> float:
    b = chain.provenance.get("batch")
    try:
        return float(b) if b else 1.0
    except (TypeError, ValueError):
        return 1.0


# -------------------------------------------------------------------------------------------- grid
def memory_range(problem: str, chain, *, bandwidth: float | None = None, gpus: int | None = None,
                 memory_model: str | None = None, points=None, time_limit: float | None = None) -> tuple[float, float]:
    """``(minimum, store-all)`` memory (bytes) of ``problem`` on ``chain``, between which sweeps space
    their limits: remat :func:`memplan.remat.memory_range`; offload the minimum feasible memory and
    the peak without offloading (paper 001); remat-offload the least memory with offloading over
    ``bandwidth`` and store-all's peak; pipeline (paper 003 Figs. 6-11) from the memory lower bound
    (at least 0.6 x the smallest PipeDream point) to the largest memory of PipeDream's points (those
    of ``points`` when given, else computed here). ``time_limit``: the grid's seconds per solve, which
    also bound remat's exact minimum (past it, a baseline's replayed peak: :func:`memplan.remat.memory_range`)."""
    if problem == "remat":
        return memplan.remat.memory_range(chain, time_limit=time_limit)
    if problem == "offload":
        from memplan.models.offload import min_feasible_memory, peak_memory_no_offload

        return min_feasible_memory(chain), peak_memory_no_offload(chain)
    if problem == "remat-offload":
        from memplan.baselines.remat_heuristics import store_all
        from memplan.baselines.remat_offload_min_memory import min_memory

        return min_memory(chain, bandwidth).value, store_all(chain).peak_memory
    if problem == "pipeline":
        from memplan.models.pipeline import memory_lower_bound, task_data

        mm = memory_model or "autograd"          # the pipeline front end's default
        if points is None:
            points = memplan.pipeline.baseline_points(chain, bandwidth=bandwidth, gpus=gpus or 1,
                                                      methods=("pipedream",), memory_model=mm)
        mems = [p.memory for p in points if p.method == "pipedream"]
        return max(memory_lower_bound(task_data(chain, bandwidth, mm), gpus or 1), 0.6 * min(mems)), max(mems)
    raise InputError(f"unknown problem {problem!r}; choose from {', '.join(memplan.problems)}")


@dataclass
class Grid:
    """instances x problem x methods x memory limits x bandwidths x gpus x options.

    ``memory``: absolute limits (bytes or strings with units); else ``points`` limits evenly spaced
    between the problem's minimum and store-all (:func:`memory_range`, fractions 0..1, or
    ``fractions`` given explicitly). ``options``: keyword options of the problem's solve; a list value
    is one more axis of the grid (e.g. ``slots = [50, 100]``). ``time_limit``: seconds per task.
    """

    problem: str
    instances: Sequence[str | Source]
    methods: Sequence[str] | None = None
    memory: Sequence[float | str] | None = None
    points: int | None = None
    fractions: Sequence[float] | None = None
    bandwidth: Sequence[float | str | None] | None = None
    gpus: Sequence[int | None] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    time_limit: float | None = 60.0
    batch: int | None = None          # PipeDream profiles: rescale to this batch

    def check(self) -> None:
        """Refuse what cannot work before anything runs (one line naming the field)."""
        if self.problem not in memplan.problems:
            raise InputError(f"problem: unknown {self.problem!r}; choose from {', '.join(memplan.problems)}")
        mod = memplan.problems[self.problem]
        if self.methods is not None and (isinstance(self.methods, str) or not all(isinstance(m, str)
                                                                                    for m in self.methods)):
            raise InputError(f"methods = {self.methods!r:.40}: give a list of method names, e.g. "
                             f"[{mod.DEFAULT_METHOD!r}] (available: {', '.join(mod.METHODS)})")
        bad = [m for m in (self.methods or []) if m not in mod.METHODS]
        if bad:
            raise InputError(f"methods: unknown for {self.problem}: {', '.join(bad)}; available: "
                             f"{', '.join(mod.METHODS)}")
        params = inspect.signature(mod.solve).parameters
        bad = [k for k in self.options if k not in params or k in ("chain", "memory", "bandwidth", "gpus",
                                                                     "method", "time_limit", "progress")]
        if bad:
            raise InputError(f"options: {self.problem} has no option {bad[0]!r}; its options: " + ", ".join(
                k for k in params if k not in ("chain", "memory", "bandwidth", "gpus", "method", "time_limit",
                                               "progress")))
        if self.methods is not None and not list(self.methods):
            raise InputError(f"methods: an empty list; name {self.problem}'s methods (e.g. {mod.DEFAULT_METHOD}) or "
                             "leave it out for its default")
        if self.methods is not None:
            # a tuning option that no method of the sweep reads: refused, not dropped from every task
            from memplan._frontend import unread_options

            idle = unread_options(getattr(mod, "OPTIONS_USED", None), self.methods,
                                  [k for k, v in self.options.items() if v is not None])
            if idle:
                key, users = idle[0]
                raise InputError(f"options: {key} is read by none of the methods {', '.join(self.methods)} "
                                 f"({self.problem}): it is for {', '.join(users)}; add one of them, or leave "
                                 f"{key} out")
        if not self.instances:
            raise InputError("instances: give at least one instance (--instance FILE or --pipedream GRAPH_TXT)")
        for key in ("memory", "fractions"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or len(v) == 0):
                raise InputError(f"{key} = {v!r:.40}: give a non-empty list" + (
                    " of limits, e.g. memory = [\"80MiB\", \"90MiB\"]" if key == "memory" else
                    " of numbers in [0, 1], e.g. fractions = [0.5, 1]"))
        for k, v in self.options.items():
            if isinstance(v, list) and not v:
                raise InputError(f"options.{k}: an empty list; give its values (a list is one axis of the grid) "
                                 "or leave it out for the default")
        if self.points is not None and (isinstance(self.points, bool) or not isinstance(self.points, int)
                                        or not 1 <= self.points <= MAX_POINTS):
            raise InputError(f"points: must be a whole number between 1 and {MAX_POINTS}, got {self.points!r}")
        if self.memory is None and not self.points and not self.fractions:
            raise InputError("memory: give absolute limits (--memory 80MiB,90MiB) or a number of points (--points N)")
        if self.memory is not None and (self.points or self.fractions):
            raise InputError("memory and points: give absolute limits (memory) or spaced ones (points or fractions), "
                             "not both: the one would silently replace the other")
        if self.points and self.fractions:
            raise InputError("points and fractions: give the number of evenly spaced limits (points) or the "
                             "fractions themselves, not both: the fractions would silently replace the points")
        if self.fractions and not all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 <= f <= 1
                                      for f in self.fractions):
            raise InputError(f"fractions = {list(self.fractions)!r:.60}: give numbers in [0, 1] (0: the least "
                             "memory, 1: store-all's)")
        if self.time_limit is not None and (isinstance(self.time_limit, bool)
                                            or not isinstance(self.time_limit, (int, float))
                                            or not (0 < self.time_limit < math.inf)):
            raise InputError(f"time_limit: must be positive finite seconds, got {self.time_limit!r}")
        self.check_values()

    def check_values(self) -> None:
        """The grid's memory limits, bandwidths, GPU counts and option values, each distinct value
        checked once with the checks of the problem's front end (:mod:`memplan._frontend`), before
        any task runs: a value every task would refuse is one error naming it, not an ``error`` row
        per task after the whole grid has run. What depends on the chain or the limit (``exact`` on
        fractional sizes, tables too large) is left to each task's solve."""
        from memplan import _frontend as fe

        mod = memplan.problems[self.problem]
        params = inspect.signature(mod.solve).parameters
        try:
            for m in self.memory or []:
                fe.memory_arg(m, self.problem)
        except InputError as e:
            raise InputError(f"memory: {e}") from None
        try:
            for b in self.bandwidth or []:
                if b is None or "bandwidth" not in params:
                    continue        # None: the platform's; a problem without a link: refused in expand
                if is_free_link(b):
                    if self.problem != "pipeline":
                        raise InputError(f"{self.problem}: bandwidth={b!r}: free links are a pipeline's option "
                                         "only; give the host link's bandwidth, e.g. 12GB/s")
                    continue
                if self.problem == "offload":
                    fe.link_arg(b, self.problem)
                elif self.problem == "remat-offload":
                    memplan.remat_offload._bandwidth_arg(b)      # 0: no link, re-materialization alone
                else:
                    fe.bandwidth_arg(b, self.problem)
        except InputError as e:
            raise InputError(f"bandwidth: {e}") from None
        if "gpus" in params:
            try:
                for P in self.gpus or []:
                    fe.count_arg(P, "gpus", self.problem, required=False)
            except InputError as e:
                raise InputError(f"gpus: {e}") from None
        counts = {"slots": 1, "threads": 1, "periodicity": 1}
        most: dict[str, int] = {}
        if self.problem == "pipeline":
            counts["n_batches"] = memplan.pipeline._MIN_N_BATCHES
            most["n_batches"] = memplan.pipeline._MAX_N_BATCHES
        try:
            for k, vals in self.options.items():
                for v in (vals if isinstance(vals, list) else [vals]):
                    if k in counts:      # None is the default where the solve's default is None
                        fe.count_arg(v, k, self.problem, minimum=counts[k], maximum=most.get(k),
                                     required=params[k].default is not None)
                    elif k == "gap":
                        fe.gap_arg(v, self.problem)
                    elif k == "memory_model" and self.problem == "pipeline":
                        memplan.pipeline._memory_model_arg(v)
                    elif k == "exact" and not isinstance(v, bool):
                        raise InputError(f"{self.problem}: exact={v!r} must be true or false")
        except InputError as e:
            raise InputError(f"options: {e}") from None


def _jsonable(x):
    if isinstance(x, float) and math.isfinite(x) and x == int(x) and abs(x) < 2**53:
        return x
    return x


def task_key(t: dict) -> str:
    """The identity of a task: instance content, problem, method, limits, options, time limit."""
    ident = [t["instance_id"], t["problem"], t["method"], repr(float(t["memory_limit"])),
             None if t["bandwidth"] is None else repr(float(t["bandwidth"])), t["gpus"], t["options"],
             None if t["time_limit"] is None else repr(float(t["time_limit"]))]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:24]


def _slim(point):
    """A baseline point without what no solve reads and rows never keep (the eager run's unrolled
    schedule and memory timeline: nine tenths of its size), so it travels to the workers quickly."""
    from dataclasses import replace

    r = point.result
    return replace(point, result=replace(r, unrolled=None, sim=replace(r.sim, timeline=None)))


class _Slow:
    """A phase of the grid's preparation that may take long (a pipeline series' baseline points, with no
    time limit; a chain's memory range): where ``say`` is given (``expand(progress=True)``) and the
    phase is still running after ``after`` seconds, ``say`` gets a line naming it, and one more with its
    time when it ends; a quicker phase prints nothing. Before, ``memplan sweep pipeline --gpus 23`` sat
    silent for 45 s (GPipe's points) before its progress bar appeared."""

    def __init__(self, say: Callable[[str], None] | None, what: str, after: float = 1.0):
        self.say, self.what, self.after = say, what, after
        self.said = False

    def _announce(self) -> None:
        self.said = True
        self.say(f"{self.what} ...")

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.timer = None
        if self.say is not None:
            self.timer = threading.Timer(self.after, self._announce)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.said and exc[0] is None:
            self.say(f"{self.what}: {time.perf_counter() - self.t0:.1f}s")


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


#: where a sweep folder records the memory ranges its grids were spaced in (:class:`RangeRecord`)
RANGES_FILE = "memory_ranges.json"
#: problems whose memory range depends on the grid's time limit (remat's exact minimum, past its time
#: limit a baseline's replayed peak): recorded in the sweep folder where a time limit is given
_TIMED_RANGES = frozenset({"remat"})


class RangeRecord:
    """The memory ranges a sweep folder's grids were spaced in, ``DIR/memory_ranges.json``, so that a
    resumed run spaces its limits as the first run did. With a time limit the bottom of a range may be
    a fallback (remat's exact minimum estimated to take longer than the limit: a baseline's replayed
    peak, which depends on the time left and on a minimum computed earlier in the process), so a
    rerun could compute other limits: its tasks matched no row already written, every one was solved
    again and the folder held two sets of rows. A range is recorded the first time it is computed
    (before any task runs, so an interrupted sweep finds it) under the settings it depends on (the
    problem, the instance's content, the link, the GPUs, the memory model, the time limit) and read
    back when they are the same; other settings compute their own. ``fresh`` (``--fresh``) starts
    from none: the first run's record is replaced with what this run computes, once :func:`run_sweep`
    has dropped the table (:meth:`release`; an interrupt before leaves the old rows and their record)."""

    def __init__(self, out: str | Path, *, fresh: bool = False):
        self.path = Path(out) / RANGES_FILE
        self.ranges: dict[str, list[float]] = {}
        self.dirty = self.held = fresh
        if fresh or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text())
            self.ranges = {str(k): [float(v[0]), float(v[1])] for k, v in data["ranges"].items()}
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as e:
            raise InputError(f"{self.path}: the memory ranges of this folder's earlier runs cannot be read ({e}); "
                             "run the sweep with --fresh (its rows are solved again), or delete the file (a "
                             "range with a time limit may then be computed differently, and its limits solved "
                             "again beside the rows already there)") from None

    @staticmethod
    def key(parts: Sequence) -> str:
        return json.dumps([repr(x) if isinstance(x, float) and not math.isfinite(x) else x for x in parts])

    def get(self, parts: Sequence, compute: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        """The range recorded under ``parts`` (the settings it depends on), else ``compute()``, recorded."""
        k = self.key(parts)
        if k not in self.ranges:
            self.ranges[k] = [float(x) for x in compute()]
            self.dirty = True
            self.save()
        lo, hi = self.ranges[k]
        return lo, hi

    def release(self) -> None:
        """The table this record describes is dropped (``--fresh``): write it from now on."""
        self.held = False
        self.save()

    def save(self) -> None:
        if not self.dirty or self.held:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        with writing(self.path):
            tmp.write_text(json.dumps({"ranges": self.ranges}, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
        self.dirty = False


class _Points:
    """The complete baseline points of pipeline series, computed once per (instance, bandwidth, GPUs,
    memory model, mini-batches, sweep) and named by a key of the inputs table."""

    def __init__(self, inputs: dict, say: Callable[[str], None] | None = None):
        self.inputs = inputs
        self.cache: dict[tuple, list] = {}
        self.say = say

    def get(self, iid, chain, bw, P, opts: dict, methods: Sequence[str]) -> tuple[str, list]:
        mm = opts.get("memory_model", "autograd")      # memplan.pipeline.solve's defaults
        nb = opts.get("n_batches", 500)
        pts: list = []
        for m in methods:
            k = (iid, bw, P, mm, nb, m)
            if k not in self.cache:
                link = "free links" if bw is not None and math.isinf(bw) else f"{(bw or 0) / 1e9:g} GB/s"
                with _Slow(self.say, f"{m}'s baseline points of {chain.name} on {P or 1} GPU(s), {link} (once per "
                                     "series, no time limit)"):
                    self.cache[k] = [_slim(p) for p in memplan.pipeline.baseline_points(
                        chain, bandwidth=bw, gpus=P or 1, n_batches=nb, methods=(m,), memory_model=mm)]
            pts += self.cache[k]
        key = "points@" + hashlib.sha256(json.dumps([iid, bw, P, mm, nb, list(methods)]).encode()).hexdigest()[:16]
        self.inputs.setdefault(key, pts)
        return key, pts


def _weigh(tasks: list[dict]) -> None:
    """``weight``: the seconds a task may take (its time limit; 0 for the quick lookups of
    :data:`_QUICK`), by which the client submits the longest first."""
    for t in tasks:
        quick = (t["problem"], t["method"]) in _QUICK and t.get("inputs")
        t["weight"] = 0.0 if quick or t.get("time_limit") is None else float(t["time_limit"])


def expand(grids: Iterable[Grid], *, progress: bool = False,
           ranges: RangeRecord | None = None) -> tuple[list[dict], dict[str, Any]]:
    """The tasks of ``grids`` (plain dicts, in grid order, duplicates removed) and the inputs they
    use: ``instance_id -> (chain, platform)``, and the shared baseline points of pipeline series
    (``points@... -> [Point]``, named by a task's ``inputs``). ``progress``: a phase that runs for
    more than a second (a series' baseline points, a chain's memory range) says so on stderr.
    ``ranges``: the sweep folder's :class:`RangeRecord`; a memory range that depends on the time
    limit (:data:`_TIMED_RANGES`) is read from it, or computed and recorded there."""
    say = _say if progress else None
    tasks, instances, seen = [], {}, set()
    shared = _Points(instances, say)
    grids = list(grids)
    for g in grids:         # every grid's values before any work (a pipeline grid's baseline points)
        g.check()
    for g in grids:
        mod = memplan.problems[g.problem]
        methods = list(g.methods or [mod.DEFAULT_METHOD])
        params = inspect.signature(mod.solve).parameters
        bws = [None if b is None else math.inf if is_free_link(b) else parse_bandwidth(b) if isinstance(b, str)
               else float(b) for b in (g.bandwidth or [None])]
        gpus = list(g.gpus or [None])
        if "bandwidth" not in params and any(b is not None for b in bws):
            raise InputError(f"bandwidth: problem {g.problem} takes no bandwidth")
        if "gpus" not in params and any(p not in (None, 1) for p in gpus):
            raise InputError(f"gpus: problem {g.problem} takes no GPU count")
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in sorted(g.options.items())}
        option_sets = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())] or [{}]
        for spec in g.instances:
            src = spec if isinstance(spec, Source) else Source(str(spec), g.batch)
            iid = src.ident
            if iid not in instances:
                instances[iid] = src.load()
            chain, platform = instances[iid]
            for bw, P in itertools.product(bws, gpus):
                bw_eff = bw if bw is not None or platform is None else platform.bandwidth
                P_eff = P if P is not None or platform is None or "gpus" not in params else platform.gpus
                if "bandwidth" not in params:
                    bw_eff = None
                elif g.problem == "remat-offload" and bw_eff is None:
                    # the API reads no bandwidth as no link: a grid that forgot it ran re-materialization
                    # alone under the name remat-offload ('memplan sweep remat-offload' refuses it too)
                    raise InputError(f"bandwidth: grid remat-offload on {src.spec}: none given and the instance has "
                                     "no platform bandwidth; give the host link's, e.g. bandwidth = [\"12GB/s\"], or "
                                     "0 for no link (re-materialization alone)")
                if "gpus" not in params:
                    P_eff = None
                if g.memory is not None:
                    limits = [(parse_memory(m) if isinstance(m, str) else float(m), math.nan) for m in g.memory]
                else:
                    mm = next((o["memory_model"] for o in option_sets if "memory_model" in o), None)
                    pts = None
                    if g.problem == "pipeline":   # PipeDream's points of the first option set with this model
                        o = next((o for o in option_sets if o.get("memory_model") == mm), option_sets[0])
                        pts = shared.get(iid, chain, bw_eff, P_eff, o, ("pipedream",))[1]
                    def computed(chain=chain, bw_eff=bw_eff, P_eff=P_eff, mm=mm, pts=pts, g=g):
                        with _Slow(say, f"{g.problem}: the memory range of {chain.name}"):
                            return memory_range(g.problem, chain, bandwidth=bw_eff, gpus=P_eff, memory_model=mm,
                                                points=pts, time_limit=g.time_limit)

                    if ranges is not None and g.time_limit is not None and g.problem in _TIMED_RANGES:
                        lo, hi = ranges.get(["memory_range", g.problem, iid, bw_eff, P_eff, mm,
                                             float(g.time_limit)], computed)
                    else:
                        lo, hi = computed()
                    fr = list(g.fractions) if g.fractions else (
                        [k / (g.points - 1) for k in range(g.points)] if g.points > 1 else [1.0])
                    limits = [(lo + f * (hi - lo), f) for f in fr]
                used = getattr(mod, "OPTIONS_USED", None)
                tuning = set().union(*used.values()) if used else set()
                for (M, f), opts, m in itertools.product(limits, option_sets, methods):
                    if used:       # an option the method ignores: its task is solved once, labelled without it
                        opts = {k: v for k, v in opts.items() if k not in tuning or k in used[m]}
                    t = dict(instance=chain.name, instance_id=iid, problem=g.problem, method=m,
                             memory_limit=float(M), fraction=f, bandwidth=bw_eff, gpus=P_eff,
                             options=json.dumps(opts, sort_keys=True), time_limit=g.time_limit,
                             batch=_batch_of(chain))
                    t["key"] = task_key(t)
                    if g.problem == "pipeline" and m in _POINTS_NEED and "points" not in opts:
                        need = [x for x in ("pipedream", "gpipe") if any(x in _POINTS_NEED.get(mm_, ())
                                                                         for mm_ in methods)]
                        t["inputs"] = {"points": shared.get(iid, chain, bw_eff, P_eff, opts, need)[0]}
                    if t["key"] not in seen:
                        seen.add(t["key"])
                        tasks.append(t)
    _weigh(tasks)
    return tasks, instances


# -------------------------------------------------------------------------------------------- task
def _versions() -> tuple[str, str]:
    try:
        highs = "highspy " + _metadata.version("highspy")
    except _metadata.PackageNotFoundError:  # pragma: no cover
        highs = "highspy ?"
    return highs, memplan.__version__


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def run_task(task: dict, instance, inputs: dict | None = None) -> dict:
    """Solve one task (``memplan.solve`` with the task's time limit, solver threads 1 unless the
    options say otherwise) and return its row. ``inputs``: more solve options computed once for many
    tasks (the shared baseline points). The row of a :data:`CARRIED` method keeps the schedule (JSON).
    Never raises: an exception is a row with status ``error``, its type and message;
    :class:`InfeasibleError` is status ``infeasible``."""
    silence_banner()          # HiGHS's banner would break into the progress bar
    solver, version = _versions()
    row = {c: None for c in COLUMN_NAMES}
    row.update({k: task.get(k) for k in ("key", "instance", "instance_id", "problem", "method", "memory_limit",
                                          "fraction", "bandwidth", "gpus", "options", "time_limit", "batch")})
    row.update(solver=solver, memplan_version=version, worker=f"{socket.gethostname()}:{os.getpid()}")
    opts = json.loads(task["options"])
    mod = memplan.problems[task["problem"]]
    if "threads" in inspect.signature(mod.solve).parameters and opts.get("threads") is None:
        opts["threads"] = 1          # one thread per worker: HiGHS and numba have threads of their own
    opts.update(inputs or {})
    t0 = time.perf_counter()
    try:
        sol = memplan.solve(instance, task["problem"], task["method"], memory=task["memory_limit"],
                            bandwidth=task["bandwidth"], gpus=task["gpus"], time_limit=task["time_limit"],
                            progress=None, **opts)
        row.update(status=str(sol.status), objective=_num(sol.objective), peak_memory=_num(sol.peak_memory),
                   bound=_num(sol.bound), gap=_num(sol.gap), predicted=_num(sol.predicted),
                   message=str(sol.message or ""), solve_time=_num(sol.times.get("total")),
                   times=json.dumps({k: _num(v) for k, v in sol.times.items()}, sort_keys=True))
        mm = sol.details.get("memory_model")
        row["memory_model"] = None if mm is None else str(mm)
        if (task["problem"], task["method"]) in CARRIED and hasattr(sol.schedule, "to_json"):
            row["schedule"] = json.dumps(sol.schedule.to_json(), sort_keys=True,
                                         default=lambda o: o.item() if hasattr(o, "item") else str(o))
    except InfeasibleError as e:
        row.update(status="infeasible", message=str(e))
    except Exception as e:   # noqa: BLE001 - a failed task is a row, the sweep goes on
        row.update(status="error", error=f"{type(e).__name__}: {e}", message=f"{type(e).__name__}: {e}")
    row["wall_time"] = time.perf_counter() - t0
    row["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return row


def error_row(task: dict, message: str) -> dict:
    """The row of a task that never returned (its worker died twice, or the scheduler lost it)."""
    solver, version = _versions()
    row = {c: None for c in COLUMN_NAMES}
    row.update({k: task.get(k) for k in row if k in task})
    row.update(status="error", error=message, message=message, solver=solver, memplan_version=version,
               finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    return row


# ------------------------------------------------------------------------------------------- table
def results_dir(out: str | Path) -> Path:
    return Path(out) / "results"


def write_row(out: str | Path, row: dict) -> Path:
    """One part file per finished task, written atomically (a sweep killed mid-write leaves no part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = results_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"part-{row['key']}.parquet"
    tmp = d / f".tmp-{row['key']}-{os.getpid()}.parquet"
    clean = {c: row.get(c) for c in COLUMN_NAMES}
    for c, t in COLUMNS:
        if t == "float64":       # a bandwidth may be inf (free links); no other column is
            clean[c] = _num(clean[c]) if c != "bandwidth" or clean[c] != math.inf else math.inf
        elif t == "int64" and clean[c] is not None:
            clean[c] = int(clean[c])
    with writing(path):         # a full disk: one line naming the part, not pyarrow's own words
        pq.write_table(pa.Table.from_pylist([clean], schema=_schema()), tmp)
        os.replace(tmp, path)
    return path


def _parts(d: Path) -> list[Path]:
    """The sweep's part files in ``d`` (``part-<key>.parquet``); any other ``.parquet`` file there is
    not part of the table: it is left out, with a warning naming it."""
    import warnings

    parts, stray = [], []
    for f in sorted(d.glob("*.parquet")):
        if f.name.startswith("."):
            continue                      # a part being written (atomic rename)
        (parts if f.name.startswith("part-") else stray).append(f)
    if stray:
        warnings.warn(f"{d}: {len(stray)} file(s) not written by memplan sweep left out of the table: "
                      f"{', '.join(f.name for f in stray[:5])}{' ...' if len(stray) > 5 else ''} (its parts are "
                      "named part-<key>.parquet)", stacklevel=3)
    return parts


def _read_part(f: Path):
    """One part file as an Arrow table; a part that cannot be read (cut short when its sweep was killed
    on an old version, disk full, ...) is an error naming it and saying how to recover."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(f, schema=_schema())
    except (OSError, pa.ArrowException, ValueError) as e:
        raise InputError(f"{f}: this part of the results table cannot be read ({str(e).splitlines()[0]}); delete it "
                         "and run the sweep again: only its task is solved again") from None
    if t.num_rows != 1 or t.column("key")[0].as_py() != f.name[len("part-"):-len(".parquet")]:
        raise InputError(f"{f}: not a part of this sweep's table (one row whose key is in its name); delete or "
                         "move it and run the sweep again")
    return t


def _checked_table(df, path):
    """A table read from a file (CSV or Parquet, perhaps edited or cut short) as the figures need it,
    or an error naming the file, the column and the row: every row has its problem, method, status
    and memory limit, and the number columns hold numbers (an empty cell is a missing value). The
    part files of a sweep folder are checked against the schema when read (:func:`_read_part`)."""
    import numpy as np
    import pandas as pd

    df = df.reset_index(drop=True)
    for c in ("problem", "method", "status", "memory_limit"):
        bad = np.flatnonzero(df[c].isna())
        if len(bad):
            raise InputError(f"{path}: row {bad[0] + 1} has no {c} (cut short or edited?); every row of a results "
                             "table has one: delete that row or run the sweep again")
    for c, t in COLUMNS:
        if t not in ("float64", "int64") or c not in df.columns or df[c].dtype.kind in "fiu":
            continue
        num = pd.to_numeric(df[c], errors="coerce")
        bad = np.flatnonzero(num.isna() & df[c].notna())
        if t == "int64" and not len(bad):
            bad = np.flatnonzero(num.notna() & (num != num.round()))
        if len(bad):
            raise InputError(f"{path}: column {c!r} holds {df[c][bad[0]]!r} in row {bad[0] + 1}, not a "
                             f"{'number' if t == 'float64' else 'whole number'}; fix or delete that row, or run the "
                             "sweep again")
        df[c] = num.astype("float64")
    if "options" in df.columns:          # a JSON object per row ({} for none)
        for i, v in enumerate(df["options"]):
            if isinstance(v, str):
                try:
                    ok = isinstance(json.loads(v), dict)
                except ValueError:
                    ok = False
                if not ok:
                    raise InputError(f"{path}: column 'options' holds {v!r:.40} in row {i + 1}, not a JSON object "
                                     "of options (e.g. {\"slots\": 200}, or {} for none); fix or delete that row")
    for c in ("problem", "method", "status"):
        df[c] = df[c].astype(str)
    return df


def read_results(path: str | Path):
    """The results table (a pandas DataFrame, rows in grid order) from a sweep folder, its
    ``results/`` folder, a Parquet file or a CSV file."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    if p.is_dir() and (p / "results").is_dir():
        p = p / "results"
    if p.is_dir():
        parts = _parts(p)
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMN_NAMES})
        df = pa.concat_tables([_read_part(f) for f in parts]).to_pandas()
    elif p.suffix == ".parquet" and p.is_file():
        try:
            df = pq.read_table(p).to_pandas()
        except (OSError, pa.ArrowException, ValueError) as e:
            raise InputError(f"{path}: cannot be read as a Parquet results table ({str(e).splitlines()[0]})") from None
    elif p.suffix == ".csv" and p.is_file():
        try:
            df = pd.read_csv(p)
        except pd.errors.EmptyDataError:
            raise InputError(f"{path}: an empty file, not a results table of memplan sweep (its first line names "
                             "the columns: key, instance, ..., status, objective, ...)") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not a readable CSV results table ({str(e).splitlines()[0]})") from None
    else:
        raise FileNotFoundError(f"{path}: not a sweep folder (with results/), a .parquet or a .csv results table")
    missing = [c for c in ("problem", "method", "memory_limit", "status", "objective") if c not in df.columns]
    if missing:
        raise InputError(f"{path}: not a results table of memplan sweep (no column {missing[0]!r})")
    if not p.is_dir():
        df = _checked_table(df, path)
    df["gpus"] = df["gpus"].astype("Int64") if "gpus" in df else None
    keys = [c for c in ORDER if c in df.columns]
    return df.sort_values(keys, kind="stable", na_position="first").reset_index(drop=True)


# --------------------------------------------------------------------------------------------- run
@dataclass
class SweepStats:
    total: int
    skipped: int          # already in the table
    solved: int           # rows written by this run
    failed: int           # of which status error
    wall: float           # the whole run, start-up included
    run_id: str
    durations: list[float] = field(default_factory=list)
    startup: float = 0.0  # of which starting the cluster and warming the workers up
    shutdown: float = 0.0  # and closing the cluster after the last row
    carried: int = 0       # rows that took a better pattern of a smaller limit (:func:`carry_forward`)


def _log(out: Path, line: str) -> None:
    with writing(Path(out) / "sweep.log"), open(Path(out) / "sweep.log", "a") as f:
        f.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + line + "\n")


def _inputs(task: dict, instances: dict) -> dict:
    """The shared inputs a task names (solve option -> its value in the inputs table)."""
    return {n: instances[v] for n, v in (task.get("inputs") or {}).items()}


def _warm_up(problems: Sequence[str]) -> int:
    """Import the problems' modules and what their solves use, in a worker, before any task."""
    import importlib

    silence_banner()
    for name in ("memplan.formulations.highs_driver", "pyomo.environ", "highspy"):
        importlib.import_module(name)
    for p in problems:
        memplan.problems[p]
    if "pipeline" in problems:
        for name in ("memplan.formulations.pipeline_ilp", "memplan.formulations.pipeline_cyclic",
                     "memplan.baselines.pipeline", "memplan._pipeline_search"):
            importlib.import_module(name)
    return os.getpid()


def run_sweep(tasks: Sequence[dict], instances: dict, out: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, progress: bool = True, fresh: bool = False,
              on_row: Callable[[dict], None] | None = None,
              task_fn: Callable[..., dict] = None, ranges: RangeRecord | None = None) -> SweepStats:
    """Run the ``tasks`` not yet in ``out``'s table; see the module docstring. ``task_fn`` (default
    :func:`run_task`, same arguments) solves one task; it must be importable or picklable by value.
    ``ranges``: the folder's :class:`RangeRecord` the tasks' limits were spaced with (``fresh``: written
    once the old table is dropped)."""
    task_fn = task_fn or run_task
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if fresh:
        for f in results_dir(out).glob("part-*.parquet"):
            f.unlink()
    if ranges is not None:
        ranges.release()
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"workers={workers!r}: give a whole number of worker processes >= 1 (1 runs the tasks in "
                         "this process), or None for one per core")
    done = set(read_results(out)["key"]) if results_dir(out).is_dir() else set()
    todo = [t for t in tasks if t["key"] not in done]
    workers = workers or os.cpu_count() or 1
    run_id = uuid.uuid4().hex[:12]
    stats = SweepStats(total=len(tasks), skipped=len(tasks) - len(todo), solved=0, failed=0, wall=0.0, run_id=run_id)
    where = scheduler or ("in-process" if workers == 1 else f"LocalCluster({workers} workers)")
    _log(out, f"run {run_id}: {len(tasks)} tasks, {stats.skipped} already in the table, {len(todo)} to solve on {where}")
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="sweep", unit="task", disable=not progress or not todo)
    t0 = time.perf_counter()

    def finished(row: dict, pending: int) -> None:
        row["run_id"] = run_id
        write_row(out, row)
        stats.solved += 1
        stats.failed += row["status"] == "error"
        if row.get("wall_time") is not None:
            stats.durations.append(row["wall_time"])
        _log(out, f"solved {row['key']} {row['instance']} {row['problem']} {row['method']} "
                  f"M={row['memory_limit']:.6g} -> {row['status']}")
        if on_row is not None:
            on_row(row)
        bar.set_postfix(running=pending, failed=stats.failed, refresh=False)
        bar.update(1)

    try:
        if todo and workers == 1 and scheduler is None:
            for t in todo:
                bar.set_postfix(running=1, failed=stats.failed)
                # in this process one task runs at a time: none is running once it is back (the tasks
                # left are the bar's own count, not 'running')
                finished(task_fn(t, instances[t["instance_id"]], _inputs(t, instances)), 0)
        elif todo:
            stats.startup, stats.shutdown = _run_dask(todo, instances, workers, scheduler, finished, task_fn)
        if stats.solved == len(todo):       # every row is in: the carried series are complete
            stats.carried = carry_forward(out, tasks)
            if stats.carried:
                _log(out, f"run {run_id}: {stats.carried} rows took a better pattern of a smaller limit")
    finally:
        bar.close()
        stats.wall = time.perf_counter() - t0
        _log(out, f"run {run_id} ended: {stats.solved} solved ({stats.failed} errors) in {stats.wall:.1f}s "
                  f"(start-up {stats.startup:.1f}s, shut-down {stats.shutdown:.1f}s)")
    return stats


#: how often a task whose worker died is tried again before it is an ``error`` row (a LocalCluster's
#: scheduler; an external scheduler uses its own ``distributed.scheduler.allowed-failures``)
WORKER_DEATH_RETRIES = 1


def _warm_up_plugin(problems: Sequence[str]):
    """A Dask worker plugin that runs :func:`_warm_up` on every worker, also those that join later
    (or restart after a death)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class WarmUp(WorkerPlugin):
        name = "memplan-warm-up"

        def __init__(self, problems):
            self.problems = list(problems)

        def setup(self, worker):
            _warm_up(self.problems)

    return WarmUp(problems)


def _run_dask(todo, instances, workers, scheduler, finished, task_fn) -> tuple[float, float]:
    """Run ``todo`` on Dask; returns the seconds of start-up (cluster, warm-up) and of shut-down.

    The client hands out the tasks itself, at most one per worker thread at a time: a worker that
    dies then takes only its own task with it (Dask counts every task a dead worker held against
    that task's retries), and the tasks that may take longest (``weight``: their time limit) go
    first, grid order otherwise. Inputs travel inside the tasks (a chain and slimmed baseline points:
    tens of kB), so a worker's death loses no data."""
    import heapq

    import dask
    from dask.distributed import Client, LocalCluster, as_completed

    t0 = time.perf_counter()
    cluster = None
    if scheduler is None:
        one = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1"}
        # the scheduler runs in this process: a task whose worker dies is tried once more, then fails.
        # The worker processes start with SIGINT ignored (a disposition they inherit): Ctrl-C reaches the
        # whole process group, and each worker printed a KeyboardInterrupt traceback before this process
        # could say "interrupted" and close the cluster, which stops them
        import signal

        main_thread = threading.current_thread() is threading.main_thread()
        before = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
        try:
            with dask.config.set({"distributed.scheduler.allowed-failures": WORKER_DEATH_RETRIES}):
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, env=one)
        finally:
            if main_thread:
                signal.signal(signal.SIGINT, before)
        client = Client(cluster)
    else:
        try:
            # Dask's connect timeout (30 s unless configured, e.g. DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s)
            client = Client(scheduler, timeout=dask.config.get("distributed.comm.timeouts.connect"))
        except (OSError, ValueError, TypeError) as e:     # ValueError: an address Dask cannot parse
            raise InputError(f"--scheduler {scheduler}: cannot reach a Dask scheduler there ({e}); give its "
                             "address, e.g. tcp://10.0.0.1:8786") from None
    try:
        client.register_plugin(_warm_up_plugin(sorted({t["problem"] for t in todo})))
        startup = time.perf_counter() - t0
        ready = [(-float(t.get("weight") or 0.0), i, t) for i, t in enumerate(todo)]
        heapq.heapify(ready)
        running: dict = {}                   # future -> task
        ac = as_completed()

        def slots() -> int:
            return max(1, sum(client.nthreads().values()))

        while ready or running:
            while ready and len(running) < slots():
                t = heapq.heappop(ready)[2]
                f = client.submit(task_fn, t, instances[t["instance_id"]], _inputs(t, instances),
                                  key=f"memplan-task-{t['key']}-{uuid.uuid4().hex[:6]}", pure=False, retries=1)
                running[f] = t
                ac.add(f)
            f = next(ac)
            t = running.pop(f)
            try:
                row = f.result()
            except Exception as e:   # noqa: BLE001 - KilledWorker (died twice) or the scheduler lost it
                row = error_row(t, f"{type(e).__name__}: {e}")
            f.release()
            finished(row, len(running))
    finally:
        t1 = time.perf_counter()
        client.close()
        if cluster is not None:
            cluster.close()
    return startup, time.perf_counter() - t1


def carry_forward(out: str | Path, tasks: Sequence[dict] | None = None) -> int:
    """Give each row of a :data:`CARRIED` series the best validated pattern of a smaller limit of the
    same series when it is strictly faster than the row's own; returns how many rows changed (their
    part files are rewritten). ``tasks``: only their rows are considered (default: the whole table).

    A source is a row with a period, a schedule and a status that says the simulator accepted it
    (``optimal``, ``feasible``, ``time_limit``); its pattern fits the smaller limit, so it fits every
    larger one. A row takes it when its own period is larger by more than one part in 10^9, or when
    it has none (``no_solution``, which becomes ``feasible``). Rows with status ``error`` or
    ``infeasible`` are left as they are (a pattern below an ``infeasible`` row would be a bug to see,
    not to hide). The row keeps its own bound and times; its gap is recomputed; its status becomes
    ``optimal`` when its bound proves the carried period. Idempotent: a second pass changes nothing."""
    from memplan.models.units import fmt_memory

    if not results_dir(out).is_dir():
        return 0
    df = read_results(out)
    if tasks is not None:
        df = df[df["key"].isin({t["key"] for t in tasks})]
    carried = [(p, m) in CARRIED for p, m in zip(df["problem"], df["method"])]
    df = df[carried]
    if df.empty:
        return 0
    changed = 0
    for _, ser in df.groupby([df[c].astype(str) for c in SERIES], sort=False, dropna=False):
        best = None          # the fastest source so far: its values and the limit its pattern was found at
        for r in ser.sort_values("memory_limit", kind="stable").to_dict("records"):
            own = _num(r.get("objective"))
            if r["status"] in ("error", "infeasible"):
                continue
            if best is not None and (own is None or best["objective"] < own * (1 - 1e-9)):
                row = {c: (None if _isna(v) else v) for c, v in r.items()}
                row.update(best)
                bound = _num(r.get("bound"))
                row["gap"] = None if bound is None else max(0.0, (row["objective"] - bound) / abs(row["objective"]))
                if r["status"] == "no_solution":
                    row["status"] = "feasible"
                if row["gap"] is not None and row["gap"] <= 1e-9:
                    row["status"] = "optimal"
                mine = "no pattern" if own is None else f"period {own:.6g}"
                row["message"] = (f"pattern of the limit {fmt_memory(row['carried_from'])} (period "
                                  f"{row['objective']:.6g}): this solve found {mine}; " + str(r.get("message") or ""))
                write_row(out, row)
                changed += 1
            elif (own is not None and isinstance(r.get("schedule"), str)
                  and (best is None or own < best["objective"])):
                origin = _num(r.get("carried_from"))
                best = {c: r.get(c) for c in ("objective", "peak_memory", "predicted", "schedule")}
                best["carried_from"] = origin if origin is not None else r["memory_limit"]
    return changed


def _isna(v) -> bool:
    """A missing scalar of a table row (None, NaN, pandas' NA)."""
    import pandas as pd

    return v is None or (pd.api.types.is_scalar(v) and bool(pd.isna(v)))


def write_csv(out: str | Path, path: str | Path | None = None) -> Path:
    """``DIR/results.csv``: the whole table as CSV (on request)."""
    path = Path(path) if path else Path(out) / "results.csv"
    read_results(out).to_csv(path, index=False)
    return path


#: the grid's coordinates and the answer's kind: what :func:`same_rows` compares of a row solved
#: under a clock (``status_only``)
_COORDINATES = ["key", "instance", "instance_id", "problem", "method", "memory_limit", "fraction", "bandwidth",
                "gpus", "options", "time_limit", "batch", "status", "memory_model", "solver", "memplan_version"]


def same_rows(a, b, *, rtol: float = 1e-9, status_only: Sequence[str] = (),
              counts: dict | None = None) -> list[str]:
    """Differences between two tables, timing columns (:data:`VOLATILE`) and :data:`NOT_COMPARED`
    aside (empty: they agree). Every value is compared (floats within ``rtol``), except in the rows
    whose status is in ``status_only`` in both tables (e.g. ``("time_limit",)``: a solve stopped by
    its clock keeps what it had found by then, which depends on the machine's load): of those only
    the grid's coordinates and the status are compared. ``counts``, when given, receives how many
    rows were compared each way (``{"all values": n, "status only": m}``)."""
    import numpy as np

    cols = [c for c in COLUMN_NAMES if c not in VOLATILE and c not in NOT_COMPARED
            and c in a.columns and c in b.columns]
    a = a[cols].sort_values("key").reset_index(drop=True)
    b = b[cols].sort_values("key").reset_index(drop=True)
    if len(a) != len(b) or list(a.key) != list(b.key):
        return [f"different tasks: {len(a)} vs {len(b)} rows"]
    loose = np.asarray(a.status.isin(list(status_only)) & b.status.isin(list(status_only)))
    if counts is not None:
        counts.update({"all values": int((~loose).sum()), "status only": int(loose.sum())})
    diffs = []
    for c in cols:
        x, y = a[c], b[c]
        if x.dtype.kind == "f" and y.dtype.kind == "f":
            bad = ~(np.isclose(x, y, rtol=rtol, atol=0, equal_nan=True))
        else:
            bad = ~((x == y) | (x.isna() & y.isna()))
        bad = np.asarray(bad) & (~loose if c not in _COORDINATES else True)
        for i in np.flatnonzero(bad):
            diffs.append(f"{a.method[i]} P={a.gpus[i]} M={a.memory_limit[i]:.6g}: {c} {x[i]!r} != {y[i]!r}")
    return diffs


__all__ = ["Grid", "Source", "RangeRecord", "COLUMNS", "VOLATILE", "NOT_COMPARED", "CARRIED", "memory_range", "expand", "task_key",
           "run_task", "run_sweep", "carry_forward", "read_results", "write_csv", "same_rows", "SweepStats", "InstanceError"]
