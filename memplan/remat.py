"""Re-materialization: which activations to keep and which to recompute (paper 004; paper 002).

Problem Remat(L, M) (paper 004, Beaumont et al., "Optimal re-materialization strategies for
heterogeneous chains", Definition 3.5): a chain of stages 1..L plus the loss L+1; a sequence of the
operations ``F_all^l`` (forward keeping the tape abar^l), ``F_ck^l`` (forward keeping a^l),
``F_none^l`` (forward, dropping a^{l-1}) and ``B^l`` (Table 1) that computes delta^0 while no
operation's memory exceeds M (Definitions 3.3-3.4), of minimum makespan (Definition 3.2). The
simulator :func:`memplan.models.remat.simulate_remat` is the definition; every schedule returned here
is replayed by it and the replay's makespan and peak are what the Solution reports.

=================  ====================================================================  ==============
method             what it computes                                                      time
=================  ====================================================================  ==============
``rotor``          optimal memory-persistent sequence (Theorem 4.8, Algorithms 3-4)      O(S L^3)
``rotor-floating`` optimal sequence among *all* valid ones (Theorem 4.7 + Lemma 4.4)     O(S L^5)
``revolve``        optimal sequence of the AD model (F_all^l right before B^l), 5.4      O(S L^3)
``sequential``     PyTorch's ``checkpoint_sequential``, best number of segments          O(L^3)
``store-all``      plain autograd, no re-materialization                                 O(L)
``recompute-all``  only a^0 kept; the smallest peak of any sequence                      O(L^2)
``remat-milp``     MILP exact for paper 004's model, MIP start from ``rotor``            MILP
``checkmate``      Checkmate's MILP (Jain et al. 2020), converted into a valid sequence  MILP
``checkmate-lp``   Checkmate's LP relaxation + two-phase rounding                         LP
=================  ====================================================================  ==============

S is the number of memory slots of the DPs (``slots``, default 500; sizes rounded up so that a plan
never exceeds the limit; ``exact=True`` uses one slot per byte for integer sizes).

Examples
--------
The toy chain of paper 004 (section 3.2, Table 2) at 90 MiB: 47.42 ms at a peak of 86.75 MiB.

>>> import memplan
>>> chain, _ = memplan.load_instance("paper004_table2")
>>> sol = memplan.remat.solve(chain, memory="90MiB", method="rotor")
>>> sol.status, round(sol.objective * 1e3, 2), round(sol.peak_memory / 2**20, 2)
(<Status.OPTIMAL: 'optimal'>, 47.42, 86.75)
>>> sol.schedule.notation()
'F_ck^1 F_∅^2 F_∅^3 F_all^4..F_all^7 B^7..B^4 F_ck^1 F_∅^2 F_all^3 B^3 F_all^1 F_all^2 B^2 B^1'
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from memplan import _frontend
from memplan.baselines import remat_heuristics, remat_rotor
from memplan.formulations.remat_checkmate import solve_checkmate, solve_checkmate_lp
from memplan.formulations.remat_milp import solve_remat_milp
from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.remat import InvalidSequence, RematSchedule, simulate_remat
from memplan.models.solution import InputError, Solution, Status
from memplan.models.units import fmt_memory, fmt_time

__all__ = ["PROBLEM", "METHODS", "DEFAULT_METHOD", "DEFAULT_SLOTS", "solve", "report", "memory_range"]

PROBLEM = "remat"
METHODS = ["rotor", "rotor-floating", "sequential", "revolve", "store-all", "recompute-all",
           "remat-milp", "checkmate", "checkmate-lp"]
DEFAULT_METHOD = "rotor"
#: memory slots of the DPs when ``slots`` is not given
DEFAULT_SLOTS = 500
#: remat-milp's MIP start runs the persistent DP exactly (one slot per byte) up to this limit (bytes)
_EXACT_START_LIMIT = 20000
#: exact mode refuses limits above this many bytes (slots)
_EXACT_MAX = 5_000_000


@dataclass(frozen=True)
class _Options:
    slots: int
    exact: bool
    gap: float | None
    threads: int | None
    solver_log: Any


# ----------------------------------------------------------------------------- methods
def _rotor(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log(f"rotor: persistent DP, {_slots_text(o)}")
    return remat_rotor.persistent(chain, memory, slots=o.slots, exact=o.exact)


def _rotor_floating(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log(f"rotor-floating: floating DP, {_slots_text(o)}")
    return remat_rotor.floating(chain, memory, slots=o.slots, exact=o.exact)


def _revolve(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log(f"revolve: persistent DP restricted to the AD model, {_slots_text(o)}")
    return remat_rotor.revolve(chain, memory, slots=o.slots, exact=o.exact)


def _sequential(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log(f"sequential: checkpoint_sequential with 1..{chain.L} segments")
    return remat_heuristics.sequential(chain, memory)


def _store_all(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    return remat_heuristics.store_all(chain, memory)


def _recompute_all(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    return remat_heuristics.recompute_all(chain, memory)


def _milp_start(chain: Chain, memory: float, o: _Options, need: float) -> tuple[RematSchedule | None, str]:
    """remat-milp's MIP start: the persistent DP's sequence (exact on small integer instances; its
    rounding can make it fail near the minimum memory), else recompute-all when it fits (the sequence
    of minimum peak), else none."""
    exact = o.exact or (chain.is_integer and memory <= _EXACT_START_LIMIT and float(memory).is_integer())
    dp = remat_rotor.persistent(chain, memory, exact=True) if exact else \
        remat_rotor.persistent(chain, memory, slots=o.slots)
    if dp.success:
        return dp.schedule, "the persistent DP"
    if memory >= need * (1 - 1e-12):
        sched = remat_heuristics.recompute_all_schedule(chain)
        try:
            simulate_remat(chain, sched, memory_limit=memory)
            return sched, "recompute-all (the persistent DP found no sequence)"
        except InvalidSequence:
            pass
    return None, "no MIP start (neither the persistent DP nor recompute-all fits)"


def _remat_milp(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    t0 = time.perf_counter()
    need = remat_heuristics.min_memory(chain)
    start, source = _milp_start(chain, memory, o, need)
    t_start = time.perf_counter() - t0
    b.log(f"remat-milp: MIP start: {source}" + ("" if start is None else
                                                 f" ({fmt_time(simulate_remat(chain, start).makespan)})"))
    sol = solve_remat_milp(chain, memory, time_limit=b.limit(), gap=o.gap, threads=o.threads, start=start,
                           start_source=source, min_memory=need, log_file=o.solver_log)
    if start is None:
        sol.details["mip_start"] = source
    sol.times = _with_start_time(sol.times, t_start)
    if start is not None and sol.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        sol = _better_of_milp_and_start(chain, memory, sol, start, source)
    return sol


def _with_start_time(times: dict[str, float], t_start: float) -> dict[str, float]:
    """The MILP's times with the start's computation added to ``start`` (placed after ``build``)."""
    out: dict[str, float] = {}
    for k, v in times.items():
        out[k] = v + t_start if k == "start" else v
        if k == "build" and "start" not in times:
            out["start"] = t_start
    if "start" not in out:
        out["start"] = t_start
    return out


def _better_of_milp_and_start(chain: Chain, memory: float, sol: Solution, start: RematSchedule,
                              source: str) -> Solution:
    """When the MILP stopped without proof, return its MIP start if the MILP has nothing better."""
    rep = simulate_remat(chain, start, memory_limit=memory)
    if sol.schedule is not None and sol.objective is not None and sol.objective <= rep.makespan * (1 + 1e-12):
        return sol
    why = "found no schedule" if sol.schedule is None else f"found only {fmt_time(sol.objective)}"
    details = dict(sol.details, recompute_time=rep.recompute_time, returned="mip start")
    return Solution(PROBLEM, sol.method, Status.TIME_LIMIT, objective=rep.makespan, peak_memory=rep.peak_memory,
                    schedule=start, bound=sol.bound, memory_limit=memory, predicted=sol.predicted,
                    message=f"the MILP {why} in time ({sol.message}); returning its MIP start from {source}",
                    times=sol.times, details=details)


def _checkmate(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log("checkmate: Checkmate's MILP")
    return solve_checkmate(chain, memory, time_limit=b.limit(), gap=o.gap, threads=o.threads,
                           log_file=o.solver_log)


def _checkmate_lp(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log("checkmate-lp: LP relaxation + two-phase rounding")
    return solve_checkmate_lp(chain, memory, time_limit=b.limit(), threads=o.threads, log_file=o.solver_log)


#: method name -> runner(chain, memory, options, budget) -> Solution
_RUNNERS: dict[str, Callable[[Chain, float, _Options, Budget], Solution]] = {
    "rotor": _rotor,
    "rotor-floating": _rotor_floating,
    "sequential": _sequential,
    "revolve": _revolve,
    "store-all": _store_all,
    "recompute-all": _recompute_all,
    "remat-milp": _remat_milp,
    "checkmate": _checkmate,
    "checkmate-lp": _checkmate_lp,
}
assert list(_RUNNERS) == METHODS
#: the methods whose memory is discretized into slots (and that take ``exact``)
_DP_METHODS = ("rotor", "rotor-floating", "revolve", "remat-milp")


def _slots_text(o: _Options) -> str:
    return "exact (one slot per byte)" if o.exact else f"{o.slots} memory slots"


# ----------------------------------------------------------------------------- input checks
def _chain_arg(chain: Any) -> Chain:
    if isinstance(chain, Chain):
        return chain
    if isinstance(chain, tuple) and len(chain) == 2 and isinstance(chain[0], Chain):
        return chain[0]                          # an Instance (chain, platform)
    raise InputError(f"{PROBLEM}: chain must be a memplan.Chain (e.g. memplan.load_instance(name)[0] or "
                     f"memplan.random_chain(6, seed=0)), got {type(chain).__name__}")


def _gap_arg(gap: Any) -> float | None:
    if gap is None:
        return None
    try:
        g = float(gap)
    except (TypeError, ValueError):
        raise InputError(f"{PROBLEM}: gap={gap!r} must be a relative MILP gap, e.g. 1e-4") from None
    if not (g >= 0 and math.isfinite(g)):
        raise InputError(f"{PROBLEM}: gap={gap!r} must be a non-negative relative MILP gap, e.g. 1e-4")
    return g


def _exact_arg(exact: Any, chain: Chain, memory: float, method: str) -> bool:
    if not isinstance(exact, bool):
        raise InputError(f"{PROBLEM}: exact={exact!r} must be True or False")
    if not exact or method not in _DP_METHODS:
        return exact
    if not chain.is_integer:
        raise InputError(f"{PROBLEM}: exact=True needs integer sizes, and {chain.name} has fractional ones; "
                         f"use slots=... (default {DEFAULT_SLOTS}) instead")
    if not float(memory).is_integer():
        raise InputError(f"{PROBLEM}: exact=True needs a whole number of bytes as memory, got {memory!r}")
    if memory > _EXACT_MAX:
        raise InputError(f"{PROBLEM}: exact=True would need {memory:.0f} slots (one per byte; at most "
                         f"{_EXACT_MAX}); use slots=... instead")
    return exact


def _check_tables(chain: Chain, method: str, o: _Options, memory: float) -> None:
    if method != "rotor-floating":
        return
    slots = int(memory) if o.exact else o.slots
    need = remat_rotor.floating_table_bytes(chain.L, slots)
    if need > remat_rotor.FLOATING_TABLE_LIMIT:
        fits = max(1, int(remat_rotor.FLOATING_TABLE_LIMIT / remat_rotor.floating_table_bytes(chain.L, 0)) - 1)
        what = "exact=True (one slot per byte)" if o.exact else f"slots={slots}"
        raise InputError(f"{PROBLEM}: rotor-floating with {what} on L = {chain.L} stages needs "
                         f"{fmt_memory(need)} of DP tables (more than {fmt_memory(remat_rotor.FLOATING_TABLE_LIMIT)}); "
                         f"use slots <= {fits}, or method 'rotor' (the persistent DP)")


# ----------------------------------------------------------------------------- the replay
def _replay(chain: Chain, memory: float, method: str, sol: Solution) -> Solution:
    """The simulator is the judge: the schedule must replay with the reported makespan, and within
    the limit unless the result says it is not (``details['limit_exceeded']``)."""
    if sol.schedule is None or sol.status == Status.ERROR:
        return sol                    # ERROR: the message says why the schedule is not valid
    rep = simulate_remat(chain, sol.schedule)
    over = rep.peak_memory > memory * (1 + 1e-9)
    if abs(rep.makespan - (sol.objective or 0.0)) > 1e-9 * max(1.0, rep.makespan) or (
            over and not sol.details.get("limit_exceeded")):
        raise RuntimeError(f"{method}: the simulator does not confirm the solution (replayed makespan "
                           f"{rep.makespan}, peak {rep.peak_memory}; reported {sol.objective}, {sol.peak_memory})")
    sol.objective, sol.peak_memory = rep.makespan, rep.peak_memory
    return sol


def _explain_infeasible(chain: Chain, sol: Solution) -> Solution:
    """An INFEASIBLE result always carries the minimum feasible memory (``details['min_memory']``)."""
    if sol.status == Status.INFEASIBLE and sol.details.get("min_memory") is None:
        need = remat_heuristics.min_memory(chain)
        sol.details["min_memory"] = need
        sol.message += f" (minimum feasible memory for any sequence: {fmt_memory(need)})"
    return sol


# ----------------------------------------------------------------------------- public API
def memory_range(chain: Chain) -> tuple[float, float]:
    """``(minimum, store-all)``: the memory limits (bytes) between which re-materialization matters.

    Below the minimum (the peak of recompute-all) no valid sequence exists; from store-all's peak on
    nothing needs recomputing. Memory sweeps (paper 004, Figures 6-8) space their limits in between.

    Examples
    --------
    >>> import memplan
    >>> lo, hi = memplan.remat.memory_range(memplan.load_instance("paper004_table2")[0])
    >>> round(lo / 2**20, 2), round(hi / 2**20, 2)
    (82.12, 106.99)
    """
    chain = _chain_arg(chain)
    return remat_heuristics.min_memory(chain), remat_heuristics.store_all(chain).peak_memory


def solve(chain: Chain, *, memory: float | str, method: str | None = None, time_limit: float | None = 60.0,
          gap: float | None = 1e-4, threads: int | None = None, slots: int | None = None, exact: bool = False,
          solver_log: str | None = None, progress: ProgressFn | None = None) -> Solution:
    """Fastest re-materialization sequence of ``chain`` within ``memory`` (paper 004, Remat(L, M)).

    Runs ``method`` (see the module's table); for ``remat-milp`` computes the MIP start with the
    persistent DP (else recompute-all) and the minimum feasible memory, and keeps the start when the
    MILP stops without anything better. Every schedule is replayed by
    :func:`memplan.models.remat.simulate_remat` before it is returned.

    Parameters
    ----------
    chain : Chain
        The chain (``memplan.load_instance(name)[0]``, ``memplan.random_chain(...)``).
    memory : float or str
        Memory limit: bytes, or a string with units (``"90MiB"``, ``"1.5GB"``).
    method : str, optional
        One of :data:`METHODS`; :data:`DEFAULT_METHOD` (``"rotor"``) when None.
    time_limit : float or None
        Seconds for the whole call (None: no limit). The MILPs get what is left of it; the DPs run
        to the end (their time is predictable: O(S L^3) for rotor and revolve, O(S L^5) for
        rotor-floating).
    gap : float or None
        Relative gap at which the MILPs stop (``remat-milp``, ``checkmate``).
    threads : int, optional
        HiGHS threads.
    slots : int, optional
        Memory slots of the DPs (``rotor``, ``rotor-floating``, ``revolve``, and remat-milp's start);
        :data:`DEFAULT_SLOTS` (500) when None.
    exact : bool
        The DPs use one slot per byte (integer sizes and limit only; at most 5,000,000 bytes).
    solver_log : str, optional
        File for HiGHS's log.
    progress : callable, optional
        Receives one line per phase and per improving MILP incumbent.

    Returns
    -------
    Solution
        ``objective`` (makespan, s) and ``peak_memory`` (bytes) as replayed; ``schedule`` a
        :class:`~memplan.models.remat.RematSchedule`; ``bound`` for remat-milp; status OPTIMAL (proven
        within the method's model and discretization), FEASIBLE, TIME_LIMIT, or INFEASIBLE with
        ``details["min_memory"]`` (the minimum feasible memory, also in ``message``).

    Raises
    ------
    InputError
        Missing or malformed memory, unknown method, slots < 1, exact on fractional sizes, ...

    Examples
    --------
    >>> import memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = memplan.remat.solve(chain, memory="90MiB", method="revolve")
    >>> str(sol.status), round(sol.objective * 1e3, 2)
    ('feasible', 55.06)
    >>> low = memplan.remat.solve(chain, memory="50MiB")
    >>> str(low.status), round(low.details["min_memory"] / 2**20, 2)
    ('infeasible', 82.12)
    """
    chain = _chain_arg(chain)
    memory = _frontend.memory_arg(memory, PROBLEM)
    method = _frontend.method_arg(method, METHODS, DEFAULT_METHOD, PROBLEM)
    n_slots = _frontend.count_arg(slots, "slots", PROBLEM, required=False)
    opts = _Options(slots=DEFAULT_SLOTS if n_slots is None else n_slots,
                    exact=_exact_arg(exact, chain, memory, method), gap=_gap_arg(gap),
                    threads=_frontend.count_arg(threads, "threads", PROBLEM, required=False),
                    solver_log=solver_log)
    _check_tables(chain, method, opts, memory)
    b = _frontend.budget(time_limit, progress, PROBLEM)
    with b.active():
        b.log(f"remat: {method} on {chain.name} (L = {chain.L}), memory limit {fmt_memory(memory)}")
        sol = _RUNNERS[method](chain, memory, opts, b)
        sol = _explain_infeasible(chain, _replay(chain, memory, method, sol))
        if "time_limit" in sol.details:     # the MILPs record what they were given: say the call's limit
            sol.details["time_limit"] = b.time_limit
        b.log(f"remat: {sol.status}" + ("" if sol.objective is None else f", makespan {fmt_time(sol.objective)}, "
                                        f"peak {fmt_memory(sol.peak_memory)}"))
    return _frontend.finish(sol, b, memory=memory)


def report(solution: Solution, chain: Chain) -> str:
    """The text ``memplan solve --problem remat`` prints: status, makespan and peak against store-all,
    recomputation time, bounds, times and the sequence in the papers' notation.

    Examples
    --------
    >>> import memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> text = memplan.remat.report(memplan.remat.solve(chain, memory="90MiB"), chain)
    >>> print(text.splitlines()[2])
    makespan     47.4 ms  (+26.9% vs store-all 37.4 ms)
    """
    sol = solution
    base = remat_heuristics.store_all(chain)
    lines = [f"{chain.name}: L = {chain.L}, problem remat, method {sol.method}, "
             f"memory limit {fmt_memory(sol.memory_limit)}",
             f"status       {sol.status}: {sol.message}"]
    if sol.objective is not None:
        over = (sol.objective / base.objective - 1) * 100 if base.objective else 0.0
        lines += [
            f"makespan     {fmt_time(sol.objective)}  ({over:+.1f}% vs store-all {fmt_time(base.objective)})",
            f"peak memory  {fmt_memory(sol.peak_memory)}  (store-all {fmt_memory(base.peak_memory)})",
        ]
        if sol.details.get("recompute_time") is not None:
            lines.append(f"recompute    {fmt_time(sol.details['recompute_time'])}")
        if sol.bound is not None:
            gap = sol.gap
            lines.append(f"bound        {fmt_time(sol.bound)}" + (f"  (gap {gap * 100:.2f}%)" if gap is not None else ""))
        d = sol.details
        if d.get("limit_exceeded"):
            lines.append(f"LIMIT EXCEEDED the rounded schedule needs {fmt_memory(sol.peak_memory)} > "
                         f"{fmt_memory(sol.memory_limit)} (reported honestly, not a valid plan for this limit)")
        if sol.method.startswith("checkmate") and sol.predicted is not None:
            lines.append(f"own model    {fmt_time(sol.predicted)} (Checkmate's plan before conversion to "
                         "F_all/F_ck/F_none/B)")
        if d.get("milp_bound") is not None:
            g = d.get("milp_gap")
            lines.append(f"MILP bound   {fmt_time(d['milp_bound'])} in Checkmate's own model"
                         + (f" (gap {g * 100:.2f}%)" if g is not None else ""))
        if d.get("lp_bound") is not None:
            lines.append(f"LP bound     {fmt_time(d['lp_bound'])} (relaxation, Checkmate's model)")
        t = sol.times
        lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in t.items()))
        lines.append(f"sequence     ({len(sol.schedule)} operations)")
        lines.append("  " + sol.schedule.notation())
    return "\n".join(lines)
