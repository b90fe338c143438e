"""The HiGHS driver shared by every formulation.

Formulations build a Pyomo ``ConcreteModel`` (constraint names carry the papers' numbers). This driver
compiles it to a sparse matrix with Pyomo's ``LinearStandardFormCompiler`` and hands the matrix to
``highspy`` directly. Going through highspy ourselves (rather than Pyomo's solver plug-in) gives us
what the Pyomo interfaces do not expose: a MIP start (``Highs.setSolution``, partial starts allowed),
the dual bound and gap of an interrupted run, and the log in a file.

Usage::

    model = build_something(chain, ...)          # a Pyomo model with one active objective
    res = solve_milp(model, time_limit=60, gap=1e-4, threads=1, mip_start=[(model.x[1], 1.0)])
    res.status, res.objective, res.bound          # values are also loaded into the Pyomo vars

Timing: ``res.times['compile']`` is Pyomo -> matrix, ``res.times['solve']`` is HiGHS; the caller
adds its own model-building time as ``res.times['build']`` (see :func:`timed`).
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from memplan.models import budget as _budget
from memplan.models.solution import Status
from memplan.models.units import fmt_time

INF = math.inf
# tight feasibility tolerances, for models whose solution is read back and must replay exactly in a
# simulator (times and sizes are scaled to about 1000 inside the models)
EXACT_TOLERANCES = {"mip_feasibility_tolerance": 1e-9, "primal_feasibility_tolerance": 1e-9}
_UNSET = object()
_SCHEDULER_THREADS: Any = _UNSET     # the ``threads`` of the last run (see solve_milp)

# HiGHS does not look at its time limit everywhere in a MIP's set-up (known: ERGO-Code/HiGHS issues
# 1501, 2226, 2478). Measured on paper 004's toy chain repeated (offload MILP, 2 shared cores): its
# presolve ran 2.6-5.1 s whatever the limit (0.5-4 s) on 0.57 M nonzeros, and 7 s on 2.2 M; with
# presolve off, the root's set-up (the MIP start's LP, feasibility jump, the first LP) still ran
# 1.2 s over on 0.57 M and 3-4.5 s on 2.2 M, with feasibility jump off 0.2 s and 1.5 s. Hence, for a
# MIP, by the time its limit leaves (seconds per nonzero of the matrix):
#: below this, presolve, feasibility jump and symmetry detection are switched off (their cost is not
#: bounded by the limit)
SLOW_SETUP_SECONDS_PER_NNZ = 1e-5
#: below this, the MIP is not started at all: its set-up alone would overrun the call
SETUP_SECONDS_PER_NNZ = 1e-6
#: a MIP run gets this share of what the call has left: the root's cut rounds also run past the limit
#: (offload MILP, L = 30, 0.1 M nonzeros: 9.4 s for 7.5 s left), and the call still replays the answer
MIP_LIMIT_SHARE = 0.9
#: a caller's ``root_overrun`` (seconds per nonzero, for models whose root HiGHS is known to run past
#: its limit) is taken off what the call has left before that share, at most this many seconds
ROOT_OVERRUN_MAX_S = 2.5
#: compiling a Pyomo model into a matrix (``LinearStandardFormCompiler``, which its time limit cannot
#: stop) takes about this share of the time its build took (measured on 2 shared cores: remat-milp
#: 0.36-0.48 at L = 50-120, Checkmate's model 0.16-0.74 at L = 20-60); on the same machine at the same
#: moment, so a loaded machine slows both alike
COMPILE_PER_BUILD = 0.6
#: seconds the first Pyomo model of a process costs beyond its own build and compilation, on a quiet
#: machine (2 cores): importing ``pyomo.environ`` (0.9 s once SciPy is loaded: it then imports
#: ``scipy.stats``) and the compiler's first run (0.55 s more than later ones); none of it can be
#: interrupted. A loaded machine takes longer (:meth:`memplan.models.budget.Budget.pace`)
PYOMO_IMPORT_SECONDS = 0.9
PYOMO_FIRST_COMPILE_SECONDS = 0.55
_PYOMO_COMPILED = False          # whether this process has compiled a Pyomo model yet


_PYOMO_IMPORT_LOCK = threading.Lock()
_PYOMO_IMPORT_THREAD: threading.Thread | None = None     # the background import of pyomo_ready
_PYOMO_IMPORTED = threading.Event()                     # set once that import has ended (or failed)


def _finish_import_before_fork() -> None:
    """A fork while :func:`pyomo_ready`'s thread is importing Pyomo would leave the child a module lock
    held by a thread it does not have: its own ``import pyomo`` then waits forever (a
    ``multiprocessing`` pool of solves started after a pipeline call that returned early). The fork
    waits for that import to end instead (about a second, once a process)."""
    if _PYOMO_IMPORT_THREAD is not None and not _PYOMO_IMPORTED.is_set():
        _PYOMO_IMPORTED.wait()


def _pyomo_import_done() -> bool:
    """Whether ``pyomo.environ`` is imported completely (``sys.modules`` holds a module from the
    start of its import: while :func:`pyomo_ready`'s thread imports it, it is there but not done)."""
    if _PYOMO_IMPORT_THREAD is not None:
        return _PYOMO_IMPORTED.is_set()
    return "pyomo.environ" in sys.modules


def pyomo_first_use_seconds() -> float:
    """Seconds (quiet machine) that the next Pyomo model of this process costs beyond its build and
    compilation: the import and the compiler's first run, where they have not happened yet."""
    return (0.0 if _pyomo_import_done() else PYOMO_IMPORT_SECONDS) + (
        0.0 if _PYOMO_COMPILED else PYOMO_FIRST_COMPILE_SECONDS)


def _import_pyomo() -> None:
    """pyomo_ready's thread: the imports of a process's first Pyomo model, the deferred one included:
    the compiler's first run resolves Pyomo's deferred SciPy import (``scipy.sparse`` through
    ``pyomo.common.dependencies``, 0.4-0.8 s: :data:`PYOMO_FIRST_COMPILE_SECONDS`), done here too."""
    global _PYOMO_COMPILED
    try:
        import highspy  # noqa: F401
        import pyomo.environ  # noqa: F401  (the import is the point)
        import pyomo.repn.plugins.standard_form  # noqa: F401
        from pyomo.common.dependencies import scipy as deferred_scipy

        deferred_scipy.sparse.csc_array     # resolves the deferred import
        _PYOMO_COMPILED = True
    except BaseException:            # the caller's own import raises it again, where it is reported
        pass
    finally:
        _PYOMO_IMPORTED.set()


def pyomo_ready(deadline: float | None = None) -> bool:
    """Whether Pyomo (``pyomo.environ``, its compiler and ``highspy``) is imported by ``deadline`` (a
    :func:`time.monotonic` time; None: wait for it). The import (0.9 s on a quiet machine, 2-4 s
    beside two busy loops on 2 cores, :data:`PYOMO_IMPORT_SECONDS`) cannot be interrupted, and an
    estimate of it scaled by :meth:`~memplan.models.budget.Budget.pace` either overruns (too low) or
    skips work that fits on a quiet machine (too high); so the first call runs it in a daemon thread
    and waits for it at most until ``deadline``, measuring it instead. False: it has not ended by then
    (it goes on in the background, and a later call finds it done); the caller skips what needs Pyomo
    rather than import it where it would block past its deadline."""
    global _PYOMO_IMPORT_THREAD
    if _pyomo_import_done():
        return True
    with _PYOMO_IMPORT_LOCK:
        if _PYOMO_IMPORT_THREAD is None:
            # the fork handler is registered now, after logging's (imported first if it was not): the
            # handlers run newest first, so a fork waits for the import before logging takes its lock,
            # which the import needs (getLogger); registered at the module's import, it ran after
            # logging's where logging came in with Pyomo itself, and the two waited on each other
            import logging  # noqa: F401

            if hasattr(os, "register_at_fork"):
                os.register_at_fork(before=_finish_import_before_fork)
            _PYOMO_IMPORT_THREAD = threading.Thread(target=_import_pyomo, name="memplan-pyomo-import",
                                                    daemon=True)
            _PYOMO_IMPORT_THREAD.start()
    if deadline is None or not math.isfinite(deadline):
        return _PYOMO_IMPORTED.wait()
    return _PYOMO_IMPORTED.wait(max(0.0, deadline - time.monotonic()))


class BuildInterrupted(RuntimeError):
    """The call's deadline passed while a model was being built (:class:`BuildClock`)."""


class BuildClock:
    """Watches a deadline while a model is built (``time.monotonic()`` seconds; by default the
    active ``solve`` call's, none outside one). A Pyomo constraint rule asks :meth:`out` and returns
    ``Constraint.Skip`` once it is past (an exception inside a rule would be logged by Pyomo as an
    error); :meth:`check`, between two families of rows, then raises :class:`BuildInterrupted`."""

    def __init__(self, deadline: float | None = None):
        self.deadline = _budget.current().deadline if deadline is None else float(deadline)
        self.hit = False

    def out(self) -> bool:
        if not self.hit and time.monotonic() >= self.deadline:
            self.hit = True
        return self.hit

    def check(self) -> None:
        if self.out():
            raise BuildInterrupted("the call's time limit was reached while the model was being built")


@dataclass
class MilpResult:
    status: Status
    objective: float | None
    bound: float | None
    message: str
    times: dict[str, float] = field(default_factory=dict)
    size: dict[str, int] = field(default_factory=dict)
    start_accepted: bool | None = None
    nodes: int | None = None          # branch-and-bound nodes HiGHS explored (MIPs only)

    @property
    def has_solution(self) -> bool:
        return self.objective is not None

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None:
            return None
        if self.objective == 0:
            return 0.0 if abs(self.bound) < 1e-12 else None
        return max(0.0, (self.objective - self.bound) / abs(self.objective))


@contextlib.contextmanager
def timed(times: dict[str, float], key: str) -> Iterator[None]:
    """``with timed(times, 'build'): ...`` stores the elapsed wall time in ``times[key]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[key] = times.get(key, 0.0) + time.perf_counter() - t0


def model_size(model) -> dict[str, int]:
    """Variables (and how many are integer) and constraints of a Pyomo model, as HiGHS will see it."""
    from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

    info = LinearStandardFormCompiler().write(model, mixed_form=True, set_sense=None)
    ints = sum(1 for v in info.columns if v.is_integer() or v.is_binary())
    return {"variables": len(info.columns), "integer": ints, "constraints": len(info.rows),
            "nonzeros": int(info.A.nnz)}


_BANNER_SHOWN = False
_BANNER_SILENT = False


def silence_banner(silent: bool = True) -> None:
    """Send HiGHS's banner nowhere instead of stderr (``memplan solve --quiet``, sweep workers, whose
    progress bar it would break into). Takes effect for the first ``Highs`` of the process, the one
    that prints it."""
    global _BANNER_SILENT
    _BANNER_SILENT = bool(silent)


def _new_highs():
    """A ``highspy.Highs``. The first one of a process prints HiGHS's banner on the C-level stdout,
    where it would land in the middle of a report: it is sent to stderr when the call shows progress
    (``progress=`` given, the command line without ``--quiet``), else nowhere (a library call
    with no progress sink prints nothing; :func:`silence_banner` silences it everywhere)."""
    import os
    import sys

    import highspy

    global _BANNER_SHOWN
    if _BANNER_SHOWN:
        return highspy.Highs()
    _BANNER_SHOWN = True
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = os.dup(1)
    except OSError:            # no file descriptor 1 (embedded interpreters): nothing to redirect
        return highspy.Highs()
    target = None
    try:
        if _BANNER_SILENT or _budget.current().progress is None:
            target = os.open(os.devnull, os.O_WRONLY)
            os.dup2(target, 1)
        else:
            os.dup2(2, 1)
        return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        if target is not None:
            os.close(target)


def solve_milp(model, *, time_limit: float | None = None, gap: float | None = None,
               threads: int | None = None, mip_start: Any = None,
               log_file: str | Path | None = None, verbose: bool = False, relax: bool = False,
               options: Mapping[str, Any] | None = None, objective_scale: float | None = None,
               root_overrun: float = 0.0, build_seconds: float | None = None) -> MilpResult:
    """Solve a Pyomo model (one active objective, linear) with HiGHS and load the values back.

    Parameters
    ----------
    time_limit : seconds for HiGHS (model compilation not included). Inside a ``solve`` call it is
        shortened to what the call's :class:`~memplan.models.budget.Budget` has left once the model is
        compiled, so a time limit bounds the whole call; each improving incumbent is reported to the
        budget's progress sink.
    gap : relative MIP gap at which HiGHS stops (HiGHS's default is 1e-4).
    threads : HiGHS threads (None: HiGHS decides).
    mip_start : ``[(pyomo_var, value), ...]`` or a ``pyomo.common.collections.ComponentMap``,
        complete or partial; HiGHS completes and checks it.
    log_file : write HiGHS's log there.
    relax : solve the LP relaxation (integrality dropped) instead.
    objective_scale : seconds per unit of the model's objective (models scale times to about 1): the
        progress lines then show incumbents and bounds in seconds; without it, in model units.
    root_overrun : seconds per nonzero by which HiGHS is known to run past its limit on this kind of
        model (in the root's LP and cut rounds, where it looks at its limit seldom: the 1-periodic
        pipeline MILP of 100 layers, 80 k nonzeros, ran 5.0 s for a 2.8 s limit, and its MIP interrupt
        callback came 2 s apart there, so a callback cannot stop it sooner). Inside a ``solve`` call,
        HiGHS's limit is shortened by that much (at most :data:`ROOT_OVERRUN_MAX_S`), and the MILP is
        not started where nothing would be left.
    build_seconds : how long the caller took to build ``model`` (its Pyomo import left out). Inside a
        ``solve`` call, the model is not compiled where what is left would not cover its compilation
        (:data:`COMPILE_PER_BUILD` of that, plus the compiler's first run in this process), which
        HiGHS's time limit does not bound: the result is then NO_SOLUTION, saying so.

    Status mapping: optimal -> OPTIMAL; time limit with an incumbent -> TIME_LIMIT, without ->
    NO_SOLUTION; infeasible -> INFEASIBLE; anything else -> ERROR (message says which).
    """
    import highspy
    from pyomo.common.errors import InfeasibleConstraintException
    from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

    global _PYOMO_COMPILED
    times: dict[str, float] = {}
    budget = _budget.current()
    if build_seconds is not None and math.isfinite(budget.remaining()):
        first = 0.0 if _PYOMO_COMPILED else PYOMO_FIRST_COMPILE_SECONDS * budget.pace()
        need = COMPILE_PER_BUILD * build_seconds + first
        if need >= budget.remaining():
            return MilpResult(status=Status.NO_SOLUTION, objective=None, bound=None, times=times,
                              message=f"not solved: compiling the model for HiGHS (about {need:.2g} s"
                                      + (", the compiler's first run in this process included" if first else "")
                                      + f") would not end in the {budget.remaining():.2g} s left of the call")
    with timed(times, "compile"):
        try:
            info = LinearStandardFormCompiler().write(model, mixed_form=True, set_sense=None)
            _PYOMO_COMPILED = True
        except InfeasibleConstraintException as e:   # a constant row violated (e.g. by fixed variables)
            return MilpResult(status=Status.INFEASIBLE, objective=None, bound=None,
                              message=f"trivially infeasible: {e}", times=times)
        cols = info.columns
        n = len(cols)
        if len(info.objectives) != 1:
            raise ValueError("solve_milp needs exactly one active objective")
        sense = info.objectives[0].sense  # 1 minimize, -1 maximize
        c = np.asarray(info.c.toarray()).ravel() if n else np.zeros(0)
        offset = float(np.asarray(info.c_offset).ravel()[0]) if len(np.asarray(info.c_offset).ravel()) else 0.0
        A = info.A.tocsr()
        m = A.shape[0]
        row_lo = np.full(m, -highspy.kHighsInf)
        row_hi = np.full(m, highspy.kHighsInf)
        for i, row in enumerate(info.rows):
            if row.bound_type <= 0:
                row_lo[i] = info.rhs[i]
            if row.bound_type >= 0:
                row_hi[i] = info.rhs[i]
        lo = np.array([-highspy.kHighsInf if v.lb is None else v.lb for v in cols], dtype=float)
        hi = np.array([highspy.kHighsInf if v.ub is None else v.ub for v in cols], dtype=float)
        integer = [v.is_integer() or v.is_binary() for v in cols]

        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, m
        lp.col_cost_ = c
        lp.offset_ = offset
        lp.col_lower_, lp.col_upper_ = lo, hi
        lp.row_lower_, lp.row_upper_ = row_lo, row_hi
        lp.sense_ = highspy.ObjSense.kMaximize if sense == -1 else highspy.ObjSense.kMinimize
        csc = A.tocsc()
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
        lp.a_matrix_.index_ = csc.indices.astype(np.int32)
        lp.a_matrix_.value_ = csc.data.astype(float)
        if not relax and any(integer):
            lp.integrality_ = [highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous
                               for f in integer]
    size = {"variables": n, "integer": int(sum(integer)), "constraints": m, "nonzeros": int(A.nnz)}
    start = None
    if mip_start and not relax:
        index = {id(v): j for j, v in enumerate(cols)}
        idx, val = [], []
        pairs = mip_start.items() if hasattr(mip_start, "items") else mip_start
        for var, value in pairs:
            j = index.get(id(var))
            if j is not None and value is not None:
                idx.append(j)
                val.append(float(value))
        start = (np.array(idx, dtype=np.int32), np.array(val, dtype=float))
    res, x = _run_highs(lp, integer, size=size, times=times, offset=offset, time_limit=time_limit, gap=gap,
                        threads=threads, start=start, log_file=log_file, verbose=verbose, relax=relax,
                        options=options, objective_scale=objective_scale, root_overrun=root_overrun)
    if x is not None:
        for j, v in enumerate(cols):
            val = float(x[j])
            if integer[j] and not relax:
                val = float(round(val))
            v.set_value(val, skip_validation=True)
    return res


def solve_arrays(*, cost, lower, upper, integer, A, row_lower, row_upper, offset: float = 0.0,
                 maximize: bool = False, time_limit: float | None = None, gap: float | None = None,
                 threads: int | None = None, mip_start: tuple[Any, Any] | None = None,
                 log_file: str | Path | None = None, verbose: bool = False, relax: bool = False,
                 options: Mapping[str, Any] | None = None,
                 objective_scale: float | None = None, quiet: bool = False,
                 root_overrun: float = 0.0) -> tuple[MilpResult, np.ndarray | None]:
    """:func:`solve_milp` for a model built directly as arrays (no Pyomo): ``min/max cost @ x + offset``
    subject to ``row_lower <= A @ x <= row_upper``, ``lower <= x <= upper``, ``x[j]`` integer where
    ``integer[j]``. ``A`` is a scipy sparse matrix (any format). ``mip_start`` is ``(indices, values)``
    (complete or partial). Same time-limit clamping, progress lines and status mapping as
    :func:`solve_milp`; returns ``(result, x)`` with ``x`` the solution (integers rounded) or None.
    ``result.times['compile']`` is the hand-over to HiGHS. ``quiet``: no incumbent lines on the progress
    sink (sub-MIPs of a search, whose incumbents are not the call's). ``root_overrun``: as for
    :func:`solve_milp`."""
    import highspy

    times: dict[str, float] = {}
    with timed(times, "compile"):
        csc = A.tocsc()
        n = csc.shape[1]
        m = csc.shape[0]
        integer = np.asarray(integer, dtype=bool)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, m
        lp.col_cost_ = np.asarray(cost, dtype=float)
        lp.offset_ = float(offset)
        inf = highspy.kHighsInf
        lp.col_lower_ = np.where(np.isfinite(lower), lower, -inf).astype(float)
        lp.col_upper_ = np.where(np.isfinite(upper), upper, inf).astype(float)
        lp.row_lower_ = np.where(np.isfinite(row_lower), row_lower, -inf).astype(float)
        lp.row_upper_ = np.where(np.isfinite(row_upper), row_upper, inf).astype(float)
        lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
        lp.a_matrix_.index_ = csc.indices.astype(np.int32)
        lp.a_matrix_.value_ = csc.data.astype(float)
        if not relax and integer.any():
            lp.integrality_ = [highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous
                               for f in integer]
    size = {"variables": n, "integer": int(integer.sum()), "constraints": m, "nonzeros": int(csc.nnz)}
    start = None
    if mip_start is not None and not relax:
        start = (np.asarray(mip_start[0], dtype=np.int32), np.asarray(mip_start[1], dtype=float))
    res, x = _run_highs(lp, list(integer), size=size, times=times, offset=offset, time_limit=time_limit,
                        gap=gap, threads=threads, start=start, log_file=log_file, verbose=verbose, relax=relax,
                        options=options, objective_scale=objective_scale, quiet=quiet, root_overrun=root_overrun)
    if x is not None and not relax:
        x = np.where(integer, np.round(x), x)
    return res, x


def _run_highs(lp, integer, *, size, times, offset, time_limit, gap, threads, start, log_file, verbose, relax,
               options, objective_scale, quiet=False, root_overrun: float = 0.0) -> tuple[MilpResult, np.ndarray | None]:
    """Hand ``lp`` to HiGHS (options, MIP start, progress callback, budget-clamped time limit), run it
    and map the outcome: the common part of :func:`solve_milp` and :func:`solve_arrays`."""
    import highspy

    budget = _budget.current()
    time_limit = budget.limit(time_limit)
    if time_limit is not None and time_limit <= 0.01:
        return MilpResult(status=Status.NO_SOLUTION, objective=None, bound=None, size=size, times=times,
                          message="not solved: the call's time limit was reached before this MILP"), None
    is_mip = any(integer) and not relax
    nnz = int(size.get("nonzeros", 0))
    if time_limit is not None and math.isfinite(budget.remaining()) and (is_mip or root_overrun > 0):
        # an LP (a relaxation) keeps back only its known overrun: it is solved to the end or not at all
        root = min(root_overrun * nnz, ROOT_OVERRUN_MAX_S)
        time_limit = min(time_limit, (MIP_LIMIT_SHARE if is_mip else 1.0) * (budget.remaining() - root))
        if time_limit <= 0.01:
            return MilpResult(status=Status.NO_SOLUTION, objective=None, bound=None, size=size, times=times,
                              message=f"not solved: the {budget.remaining():.3g} s left would not cover HiGHS's root "
                                      f"on this model ({nnz:,} nonzeros: about {root:.2g} s past its own limit)"), None
    # the set-up's costs are a quiet machine's: a loaded one (Budget.pace) takes longer, presolve included
    # (Checkmate's model, 0.2 M nonzeros, beside two busy loops on 2 cores: presolve 1.1 s, the root's
    # set-up 2.4 s more, 4.4 s for a 2.3 s limit)
    pace = budget.pace()
    if is_mip and time_limit is not None and time_limit < SETUP_SECONDS_PER_NNZ * nnz * pace:
        return MilpResult(status=Status.NO_SOLUTION, objective=None, bound=None, size=size, times=times,
                          message=f"not solved: the {time_limit:.3g} s left are less than HiGHS's set-up of this "
                                  f"model ({nnz:,} nonzeros, about {SETUP_SECONDS_PER_NNZ * nnz * pace:.2g} s), "
                                  "which its time limit does not stop"), None
    if is_mip and time_limit is not None and time_limit < SLOW_SETUP_SECONDS_PER_NNZ * nnz * pace:
        # symmetry detection, in the root's set-up, does not watch the limit either (Checkmate's model,
        # 1.9 M nonzeros: 4.0 s for a 2 s limit with it, 2.9 s without)
        options = {"presolve": "off", "mip_heuristic_run_feasibility_jump": False, "mip_detect_symmetry": False,
                   **(options or {})}
    h = _new_highs()
    h.setOptionValue("output_flag", bool(verbose or log_file))
    h.setOptionValue("log_to_console", bool(verbose))
    if log_file:
        h.setOptionValue("log_file", str(log_file))
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    if gap is not None:
        h.setOptionValue("mip_rel_gap", float(gap))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    for k, v in (options or {}).items():
        h.setOptionValue(k, v)
    h.passModel(lp)

    accepted = None
    if start is not None and len(start[0]):
        st = h.setSolution(len(start[0]), start[0], start[1])
        accepted = st == highspy.HighsStatus.kOk

    global _SCHEDULER_THREADS
    if _SCHEDULER_THREADS is not _UNSET and threads != _SCHEDULER_THREADS:
        # HiGHS keeps one process-wide thread pool, sized by the first run; a later run asking for
        # another thread count fails with status "Not Set" unless the pool is rebuilt first
        highspy.Highs.resetGlobalScheduler(True)
    _SCHEDULER_THREADS = threads
    if budget.progress is not None and any(integer) and not relax and not quiet:
        def show(v: float) -> str:
            return fmt_time(v * objective_scale, digits=6) if objective_scale else f"{v:.7g} (model units)"

        h.cbMipImprovingSolution.subscribe(lambda e: budget.log(
            f"MILP incumbent {show(e.data_out.objective_function_value)}"
            + (f", bound {show(e.data_out.mip_dual_bound)}" if math.isfinite(e.data_out.mip_dual_bound) else "")))
    with timed(times, "solve"):
        h.run()
    ms = h.getModelStatus()
    hinfo = h.getInfo()
    has_sol = hinfo.primal_solution_status == 2  # kSolutionStatusFeasible
    objective = float(hinfo.objective_function_value) if has_sol else None
    if is_mip:
        bound = float(hinfo.mip_dual_bound)
        if not math.isfinite(bound):
            bound = None
    else:
        bound = objective if ms == highspy.HighsModelStatus.kOptimal else None

    S = highspy.HighsModelStatus
    if ms == S.kModelEmpty:   # every variable fixed (e.g. checking a complete start): objective = offset
        ms, has_sol, objective, bound = S.kOptimal, True, offset, offset
    if ms == S.kOptimal:
        status, msg = Status.OPTIMAL, "optimal" + (f" (gap {hinfo.mip_gap:.2e})" if is_mip else "")
    elif ms in (S.kTimeLimit, S.kIterationLimit, S.kInterrupt, S.kSolutionLimit, S.kObjectiveBound,
                S.kObjectiveTarget, S.kHighsInterrupt, S.kMemoryLimit):
        status = Status.TIME_LIMIT if has_sol else Status.NO_SOLUTION
        msg = f"stopped: {h.modelStatusToString(ms)}" + ("" if has_sol else ", no feasible solution found")
    elif ms == S.kInfeasible:
        status, msg = Status.INFEASIBLE, "the model is infeasible"
    elif ms in (S.kUnbounded, S.kUnboundedOrInfeasible):
        status, msg = Status.ERROR, f"HiGHS: {h.modelStatusToString(ms)} (formulation error?)"
    else:
        status = Status.FEASIBLE if has_sol else Status.ERROR
        msg = f"HiGHS: {h.modelStatusToString(ms)}"

    x = np.asarray(h.getSolution().col_value, dtype=float) if has_sol and lp.num_col_ else None
    if has_sol and x is None:
        x = np.zeros(0)
    if has_sol and is_mip and len(x):
        # HiGHS 1.16 can report its incumbent's objective while returning another solution (seen:
        # the MIP start, with a MIP start and an objective cut, remat-milp on a 6-stage chain: 1.36
        # reported, 1.4133 returned); never pair an objective with a solution it does not belong to
        xi = np.where(np.asarray(integer, dtype=bool), np.round(x), x)
        worth = float(np.dot(np.asarray(lp.col_cost_, dtype=float), xi) + offset)
        if abs(worth - objective) > 1e-6 * max(1.0, abs(objective)):
            note = (f"HiGHS reported objective {objective:.9g} with a solution worth {worth:.9g}")
            if start is not None:
                left = None if time_limit is None else time_limit - times.get("solve", 0.0)
                res, x2 = _run_highs(lp, integer, size=size, times=times, offset=offset, time_limit=left, gap=gap,
                                     threads=threads, start=None, log_file=log_file, verbose=verbose, relax=relax,
                                     options=options, objective_scale=objective_scale, quiet=quiet)
                res.message += f" (solved again without the MIP start: {note})"
                return res, x2
            objective = worth
            if status == Status.OPTIMAL:
                status = Status.FEASIBLE
            msg += f"; {note}: the solution is kept, its optimality is not proven"
    return MilpResult(status=status, objective=objective, bound=bound, message=msg, times=times, size=size,
                      start_accepted=accepted, nodes=int(hinfo.mip_node_count) if is_mip else None), x


def value(var, default: float = 0.0) -> float:
    """The value of a Pyomo var (``default`` when it has none)."""
    v = var.value
    return default if v is None else float(v)
