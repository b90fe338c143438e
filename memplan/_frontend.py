"""What every problem front end (``memplan.remat``, ``.offload``, ``.remat_offload``, ``.pipeline``) shares.

Each front end's ``solve`` has the same shape::

    def solve(chain, *, memory, [bandwidth,] [gpus,] method=None, time_limit=60.0, [gap, threads,]
              [slots, exact,] [solver_log,] progress=None, ...) -> Solution

and does, in this order: check its inputs (:func:`memory_arg`, :func:`bandwidth_arg`, :func:`count_arg`,
:func:`method_arg`, which raise :class:`InputError` naming the input), open a :class:`Budget` for the
whole call (:func:`budget`), run the method with everything that makes the answer good, replay the
schedule in the problem's simulator, and stamp the solution (:func:`finish`).
"""
from __future__ import annotations

import functools
import importlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.solution import InputError, Solution, Status, chain_fingerprint, instance_record
from memplan.models.units import UnitError, did_you_mean, fmt_bytes, fmt_memory, parse_bandwidth, parse_memory

DEFAULT_TIME_LIMIT = 60.0
#: the slowest link a bandwidth may give, bytes/s: transfer times of the largest sizes stay finite
#: (1e-310 B/s made them inf); toy chains in bytes use links of 1e-4 B/s and slower
MIN_BANDWIDTH = 1e-100


def _quantity(value: Any, name: str, parse, example: str, *, required: bool, problem: str) -> float | None:
    if value is None:
        if required:
            raise InputError(f"{problem}: {name} is required (e.g. {name}={example!r}, bytes as a number, "
                             "or a platform in the instance file)")
        return None
    if isinstance(value, bool):
        raise InputError(f"{problem}: {name}={value!r} is not a quantity; give bytes{'/s' if name == 'bandwidth' else ''} "
                         f"as a number or a string with units, e.g. {example!r}")
    try:
        v = float(parse(value)) if isinstance(value, str) else float(value)
    except (UnitError, TypeError, ValueError) as e:
        raise InputError(f"{problem}: {name}={value!r} is not understood ({e}); e.g. {example!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise InputError(f"{problem}: {name}={value!r} must be a positive, finite quantity, e.g. {example!r}")
    if name == "bandwidth" and v < MIN_BANDWIDTH:
        # 1e-310 B/s passed, then transfer times overflowed to inf: numpy warnings and internal errors
        # ("operands could not be broadcast", "stages [(1, -1), (0, 23)] are not a contiguous partition")
        raise InputError(f"{problem}: bandwidth={value!r} is below {MIN_BANDWIDTH:g} bytes/s, slower than any link "
                         f"(a unit slip?); e.g. {example!r}")
    return v


def chain_arg(chain: Any, problem: str) -> Chain:
    """The Chain of ``chain`` (a Chain, or an Instance ``(chain, platform)``)."""
    if isinstance(chain, tuple) and len(chain) == 2 and isinstance(chain[0], Chain):
        chain = chain[0]
    if not isinstance(chain, Chain):
        raise InputError(f"{problem}: chain must be a Chain (e.g. memplan.load_instance(name).chain or "
                         f"memplan.random_chain(6, seed=0)), got {type(chain).__name__}")
    return chain


#: the module of each problem's ``report`` and ``gantt``
_MODULES = {"remat": "memplan.remat", "offload": "memplan.offload", "remat-offload": "memplan.remat_offload",
            "pipeline": "memplan.pipeline"}


def records_chain(solve_fn):
    """Decorate a front end's ``solve`` (or ``solve_graph``, which returns ``(solution, chain)``): the
    Solution it returns remembers the chain it was solved on (:func:`instance_record`, as the private
    attribute ``_solved_on``; not written to JSON), so that :func:`solution_arg` refuses a ``report`` or
    ``gantt`` on another chain. The outermost call stamps last: a solve that plans a variant of its chain
    (``without_resident``, ``papers_times``) records the chain it was given. A keyword it does not take is a
    TypeError naming the closest it takes (``memroy=``: did you mean 'memory'?), as :func:`memplan.solve`
    does; Python's own named none."""
    import inspect

    params = inspect.signature(solve_fn).parameters
    name = f"{solve_fn.__module__}.{solve_fn.__name__}"

    @functools.wraps(solve_fn)
    def solve(*args: Any, **kwargs: Any):
        unknown = [k for k in kwargs if k not in params]
        if unknown:
            raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}"
                            + did_you_mean(unknown[0], params)
                            + f"; it takes {', '.join(k for k in params if k not in ('chain', 'graph'))}")
        out = solve_fn(*args, **kwargs)
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Solution):
            sol, chain = out
        else:
            sol, chain = out, (args[0] if args else kwargs.get("chain"))
        if isinstance(chain, tuple) and len(chain) == 2 and isinstance(chain[0], Chain):
            chain = chain[0]
        if isinstance(sol, Solution) and isinstance(chain, Chain):
            sol._solved_on = instance_record(chain)
        return out

    return solve


def solution_arg(solution: Any, chain: Any, problem: str, what: str) -> tuple[Solution, Chain]:
    """The ``(solution, chain)`` given to ``problem``'s ``report``/``gantt`` (``what``): a Solution of
    this problem and its Chain, else an InputError naming the function that takes it. A Solution that
    remembers the chain it was solved on (:func:`records_chain`) is refused with another chain: the
    report compared its schedule with the other chain's store-all (-99.9%) and listed stages it lacks."""
    if not isinstance(solution, Solution):
        raise InputError(f"{problem}: {what} takes a Solution (what {_MODULES[problem]}.solve returns), got "
                         f"{type(solution).__name__}")
    if solution.problem != problem:
        other = _MODULES.get(solution.problem)
        has = other is not None and hasattr(importlib.import_module(other), what)
        raise InputError(f"{problem}: this Solution is of problem {solution.problem!r}: "
                         + (f"use {other}.{what}, not {_MODULES[problem]}.{what}" if has else
                            f"{_MODULES[problem]}.{what} draws {problem} schedules only"
                            + (f" ({other} has no {what})" if other else "")))
    chain = chain_arg(chain, problem)
    rec = getattr(solution, "_solved_on", None)
    if rec is not None and rec.get("sha256") != chain_fingerprint(chain):
        same = rec.get("name") == chain.name and rec.get("L") == chain.L
        raise InputError(f"{problem}: {what}: this Solution was solved on chain {rec.get('name')!r} (L = {rec.get('L')}), "
                         + ("a chain of that name and length whose times or sizes differ from the one given"
                            if same else f"not on the one given, {chain.name!r} (L = {chain.L})")
                         + f"; pass the chain it was solved on ({_MODULES[problem]}.{what}(solution, chain))")
    return solution, chain


def gap_arg(gap: Any, problem: str) -> float | None:
    """A relative MILP gap in [0, 1) (None: the solver's default)."""
    if gap is None:
        return None
    if isinstance(gap, bool):       # float(False) is 0.0: a gap of zero nobody asked for
        raise InputError(f"{problem}: gap={gap!r} must be a number (a relative MILP gap, e.g. 1e-4)")
    try:
        g = float(gap)
    except (TypeError, ValueError):
        raise InputError(f"{problem}: gap={gap!r} must be a number (a relative MILP gap, e.g. 1e-4)") from None
    if not (0 <= g < 1):
        raise InputError(f"{problem}: gap={gap!r} is out of range; give a relative gap in [0, 1), e.g. 1e-4")
    return g


def solver_log_arg(value: Any, problem: str) -> str | None:
    """The file for the MILP solver's log (None: no log): a path whose folder exists and can be written,
    checked before the solve (HiGHS, given a missing folder, silently wrote nothing; a number was taken
    as a file name)."""
    import os
    from pathlib import Path

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise InputError(f"{problem}: solver_log={value!r:.40} must be a file name for the MILP solver's log, e.g. "
                         "'highs.log' (or None for no log)")
    p = Path(value)
    if p.is_dir():
        raise InputError(f"{problem}: solver_log={str(value)!r} is a folder; give a file name, e.g. {str(p / 'highs.log')!r}")
    folder = p.parent
    if not folder.is_dir():
        raise InputError(f"{problem}: solver_log={str(value)!r}: cannot write there, no folder {str(folder)!r}")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"{problem}: solver_log={str(value)!r}: cannot write there (permission denied)")
    return str(p)


def memory_arg(value: Any, problem: str, *, required: bool = True) -> float | None:
    """A memory limit in bytes from bytes or a string with units (``"90MiB"``)."""
    return _quantity(value, "memory", parse_memory, "90MiB", required=required, problem=problem)


def bandwidth_arg(value: Any, problem: str, *, required: bool = False) -> float | None:
    """A bandwidth in bytes/s from a number or a string with units (``"12GB/s"``)."""
    return _quantity(value, "bandwidth", parse_bandwidth, "12GB/s", required=required, problem=problem)


def link_arg(value: Any, problem: str) -> float | tuple[float, float] | None:
    """The host link: one bandwidth (``"12GB/s"`` or bytes/s, both directions) or two, to the host
    then to the device, as a pair or a string ``"49GB/s:56GB/s"`` (a colon: in ``memplan sweep`` a comma
    separates the values swept). A pair with equal speeds is one number (paper 001's single ``beta``)."""
    if isinstance(value, str) and "," in value:
        raise InputError(f"{problem}: bandwidth={value!r}: one link here; for two speeds write them to the host, "
                         "then to the device, with a colon, e.g. '49GB/s:56GB/s' (a comma lists the values of a sweep)")
    if isinstance(value, str) and ":" in value:
        value = tuple(v.strip() for v in value.split(":"))
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InputError(f"{problem}: bandwidth={value!r} must be one bandwidth or two (to the host, to the "
                             "device), e.g. '12GB/s' or '12GB/s:16GB/s'")
        out, inn = (bandwidth_arg(v, problem, required=True) for v in value)
        return out if out == inn else (out, inn)
    return bandwidth_arg(value, problem)


def count_arg(value: Any, name: str, problem: str, *, minimum: int = 1, maximum: int | None = None,
              required: bool = True) -> int | None:
    """A whole number option (GPUs, slots, periodicity) within ``[minimum, maximum]``."""
    if value is None:
        if required:
            raise InputError(f"{problem}: {name} is required (a whole number >= {minimum})")
        return None
    try:
        whole = not isinstance(value, bool) and float(value).is_integer()
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise InputError(f"{problem}: {name}={value!r} must be a whole number >= {minimum}")
    v = int(float(value))          # '1e1' is whole too
    if v < minimum or (maximum is not None and v > maximum):
        rng = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InputError(f"{problem}: {name}={value!r} is out of range; give a whole number {rng}")
    return v


def unread_options(used: dict[str, frozenset] | None, methods: Sequence[str], keys) -> list[tuple[str, list[str]]]:
    """``(key, the methods that read it)`` for each tuning option in ``keys`` that none of ``methods``
    reads (``used``: a problem's ``OPTIONS_USED``; none for a problem without one): what ``memplan
    solve`` and the sweeps refuse rather than ignore."""
    if not used:
        return []
    every = set().union(*used.values())
    return [(k, [m for m in used if k in used[m]]) for k in keys
            if k in every and not any(k in used[m] for m in methods)]


def method_arg(method: str | None, methods: Sequence[str], default: str, problem: str) -> str:
    """The method to run: ``default`` for None, else one of ``methods`` (the error lists them)."""
    if method is None:
        return default
    if method not in methods:
        raise InputError(f"{problem}: unknown method {method!r}{did_you_mean(method, methods)}; choose from {', '.join(methods)}")
    return method


def time_limit_arg(time_limit: Any, problem: str) -> float | None:
    if time_limit is None:
        return None
    if isinstance(time_limit, bool):      # float(True) is 1.0: not a limit anyone means
        raise InputError(f"{problem}: time_limit={time_limit!r} must be a number of seconds (or None for no limit)")
    try:
        t = float(time_limit)
    except (TypeError, ValueError):
        raise InputError(f"{problem}: time_limit={time_limit!r} must be a number of seconds") from None
    if not (t > 0 and math.isfinite(t)):
        raise InputError(f"{problem}: time_limit={time_limit!r} must be a positive number of seconds "
                         "(or None for no limit)")
    return t


def budget(time_limit: Any, progress: ProgressFn | None, problem: str) -> Budget:
    """The :class:`Budget` of one ``solve`` call (activate it with ``with b.active():``)."""
    if progress is not None and not callable(progress):
        raise InputError(f"{problem}: progress={progress!r:.40} must be a function of one line of text (or None)")
    return Budget(time_limit_arg(time_limit, problem), progress)


def finish(sol: Solution, b: Budget, *, memory: float | None = None, bandwidth: float | None = None,
           gpus: int | None = None) -> Solution:
    """Stamp the inputs and the whole call's wall time on ``sol`` (``times['total']``)."""
    if sol.memory_limit is None:
        sol.memory_limit = memory
    if bandwidth is not None and sol.bandwidth is None:
        sol.bandwidth = bandwidth
    if gpus is not None and sol.gpus is None:
        sol.gpus = gpus
    sol.times["total"] = b.elapsed()
    if b.time_limit is not None:
        sol.details.setdefault("time_limit", b.time_limit)
    return sol


def overheads_line(chain: Chain, one_overhead_peak: Callable[[], float]) -> list[str]:
    """The reports' line on the forward overheads, where the chain has each forward's own
    (:attr:`Chain.own_overhead_stages`): what the plan was made and replayed with, and the peak the
    papers' one-overhead model gives the same schedule (``one_overhead_peak()``, a replay, run only
    then). Empty otherwise."""
    from memplan.models.units import fmt_memory

    if not chain.own_overhead_stages:
        return []
    return [f"overheads    each forward's own at {chain.own_overhead_stages} stage(s) (o_f_all, o_f_ng), as "
            f"planned and executed; the papers' one o_f would put this schedule's peak at "
            f"{fmt_memory(one_overhead_peak())}"]


def solve_without_resident(solve_fn, chain: Chain, memory: float, kwargs: dict[str, Any]) -> Solution:
    """Solve a chain whose ``resident`` bytes (tensors crossing two or more cuts, issue 30) are > 0:
    ``solve_fn`` runs on ``chain.without_resident()`` under ``memory - resident`` (the DPs and MILPs
    are unchanged inside), then the solution is charged with the resident bytes: ``peak_memory``
    and ``details["min_memory"]`` grow by them, ``memory_limit`` is the limit given, and
    ``details["resident_bytes"]`` records them. The problem's simulator, replaying the schedule on
    ``chain`` itself, adds them too, so the two agree. Below ``resident`` nothing fits: the inner
    call runs at 1 byte and reports INFEASIBLE with its own minimum (plus the resident bytes)."""
    r = float(chain.resident)
    sol = solve_fn(chain.without_resident(), memory=max(memory - r, 1.0), **kwargs)
    if sol.peak_memory is not None:
        sol.peak_memory = float(sol.peak_memory) + r
    if sol.details.get("min_memory") is not None:
        sol.details["min_memory"] = float(sol.details["min_memory"]) + r
    sol.memory_limit = memory
    sol.details["resident_bytes"] = r
    if sol.status == Status.INFEASIBLE and sol.details.get("min_memory") is not None:
        # the inner call's message names its own limit (1 B when the resident bytes alone exceed the
        # limit) and its own minimum: say it with the limit given and the whole minimum
        need = float(sol.details["min_memory"])
        sol.message = (f"nothing fits in {fmt_memory(memory)} ({fmt_bytes(memory)} B): the minimum feasible memory is "
                       f"{fmt_memory(need)} ({fmt_bytes(need)} B), of which {fmt_memory(r)} of resident tensors "
                       f"(Chain.resident: tensors crossing two or more cuts and their gradients), charged for "
                       f"the whole step")
        return sol
    note = (f"{fmt_bytes(r)} B of resident tensors (Chain.resident: tensors crossing two or more cuts and their "
            f"gradients) are charged for the whole step; the chain was planned under {fmt_bytes(max(memory - r, 0.0))} B")
    return add_note(sol, note)


def add_note(sol: Solution, note: str) -> Solution:
    """``sol`` with ``note`` appended to its message (after a semicolon, or as the message)."""
    sol.message = f"{sol.message}; {note}" if sol.message else note
    return sol


def schedule_from_json(problem: str, data: Any) -> Any:
    """The schedule object of ``problem`` from its ``to_json`` form (remat sequences, offloading and joint
    schedules, pipeline patterns and cyclic schedules; anything else, a pipeline's eager 1F1B run, stays
    the JSON written)."""
    if problem == "remat":
        from memplan.models.remat import RematSchedule

        return RematSchedule.from_json(data)
    if problem == "offload":
        from memplan.models.offload import OffloadSchedule

        return OffloadSchedule.from_json(data)
    if problem == "remat-offload":
        from memplan.models.remat_offload import RematOffloadSchedule

        return RematOffloadSchedule.from_json(data)
    if problem == "pipeline" and isinstance(data, dict):
        from memplan.models.pipeline import CyclicSchedule, Pattern

        kind = data.get("kind")
        if kind == "pipeline-pattern":
            return Pattern.from_json(data)
        if kind == "pipeline-cyclic":
            return CyclicSchedule.from_json(data)
    return data


def load_solution(path: str | Path) -> Solution:
    """A Solution from a JSON file written by :meth:`Solution.write_json` (``memplan solve --json``), its
    schedule made again as its problem's object (:func:`schedule_from_json`), so that it can be
    replayed, reported or executed. A file that cannot be read, is not JSON or not a solution raises
    :class:`InputError` naming it."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError(f"{p}: not JSON ({e})") from None
    except RecursionError:
        raise InputError(f"{p}: JSON nested too deeply to read (not a solution file)") from None
    try:
        return Solution.from_dict(data, read_schedule=schedule_from_json)
    except InputError as e:
        raise InputError(f"{p}: {e}") from None
