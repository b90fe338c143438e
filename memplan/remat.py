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
``recompute-all``  only a^0 kept (often, not always, the least memory)                   O(L^2)
``remat-milp``     MILP exact for paper 004's model, MIP start from ``rotor``, the       MILP
                   floating DP on step functions as bound (often the proof, no MILP)
``checkmate``      Checkmate's MILP (Jain et al. 2020), converted into a valid sequence  MILP
``checkmate-lp``   Checkmate's LP relaxation + two-phase rounding                         LP
=================  ====================================================================  ==============

S is the number of memory slots of the DPs. ``slots=None`` (default): the DP chooses and refines it
(exact mode on small integer chains, else more slots until the rounded-up plan meets the rounded-down
lower bound, within the time limit) and compares its plan with the baselines of its class, so
``rotor`` and ``rotor-floating`` are never infeasible nor slower where ``sequential``, ``store-all``
or ``recompute-all`` has a schedule; status ``optimal`` only when proven for the chain as given.
``slots=N`` (sizes rounded up so that a plan never exceeds the limit) and ``exact=True`` (one slot
per byte, integer sizes) are honoured as given. INFEASIBLE means below the minimum feasible memory,
which is exact (:mod:`memplan.baselines.remat_min_memory`).

A chain with its own no-grad forward times or a turn cost (:attr:`Chain.uf_ng`, :attr:`Chain.u_turn`)
is planned with them by the methods of :data:`TIME_MODEL_METHODS` (the persistent DP, the baselines);
the others plan it in the papers' time model (:meth:`Chain.papers_times`), their plan is replayed
with them, rotor's plan is returned instead where it replays faster, and no optimality is claimed
(``details["makespan_papers_times"]``).

A chain profiled with its ``free_backward`` record (``memplan profile``, or
:func:`memplan.models.profiler.profile_chain` with ``free_backward=True``) can be planned for the
executor without holds, which frees as autograd does: ``solve(free_backward_chain(chain), ...)``
(:func:`memplan.models.remat.free_backward_chain`, re-exported here; ``memplan solve
--free-backward``); its plans run at the replay of :func:`memplan.models.remat.free_backward_model`.

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
from memplan.baselines import remat_bound, remat_heuristics, remat_rotor
from memplan.baselines.remat_min_memory import TooCostly, min_memory, min_memory_of, proven_infeasible_below
from memplan.formulations.highs_driver import pyomo_first_use_seconds
from memplan.formulations.remat_checkmate import solve_checkmate, solve_checkmate_lp
from memplan.formulations.remat_milp import solve_remat_milp
from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.remat import InvalidSequence, RematSchedule, free_backward_chain, simulate_remat, turns
from memplan.models.solution import InputError, Solution, Status
from memplan.models.units import fmt_bytes, fmt_memory, fmt_time

__all__ = ["PROBLEM", "METHODS", "DEFAULT_METHOD", "OPTIONS_USED", "solve", "report", "memory_range",
           "free_backward_chain"]

PROBLEM = "remat"
METHODS = ["rotor", "rotor-floating", "sequential", "revolve", "store-all", "recompute-all",
           "remat-milp", "checkmate", "checkmate-lp"]
DEFAULT_METHOD = "rotor"
#: the tuning options of :func:`solve` each method reads (the others it ignores: a sweep over
#: ``slots`` solves ``sequential`` once, not once per value, and draws it as one curve)
OPTIONS_USED: dict[str, frozenset[str]] = {
    **{m: frozenset({"slots", "exact"}) for m in ("rotor", "rotor-floating", "revolve")},
    **{m: frozenset() for m in ("sequential", "store-all", "recompute-all")},
    "remat-milp": frozenset({"slots", "exact", "gap", "threads", "solver_log"}),
    "checkmate": frozenset({"gap", "threads", "solver_log"}),
    "checkmate-lp": frozenset({"threads", "solver_log"}),
}
#: exact mode refuses limits above this many bytes (slots)
_EXACT_MAX = remat_rotor.EXACT_MAX


@dataclass(frozen=True)
class _Options:
    slots: int | None       # None: the DPs choose (automatic refinement)
    exact: bool
    gap: float | None
    threads: int | None
    solver_log: Any


# ----------------------------------------------------------------------------- methods
def _dp_log(b: Budget, sol: Solution) -> None:
    for r in sol.details.get("refinements") or []:
        b.log(f"  {r['slots']} slots: plan {'none' if r['value'] is None else fmt_time(r['value'])}, lower bound "
              f"{'none' if r['bound'] is None else fmt_time(r['bound'])}")
    if sol.details.get("candidate"):
        b.log(f"  best schedule: {sol.details['candidate']}")


def _dp(fn: Callable[..., Solution], what: str, never_worse: bool = True
        ) -> Callable[[Chain, float, _Options, Budget], Solution]:
    """The runner of one of paper 004's DPs (``fn`` of :mod:`memplan.baselines.remat_rotor`). With
    ``slots`` given (``never_worse``: rotor and rotor-floating, whose classes hold the baselines) the
    answer is never slower than the fastest baseline that fits (:func:`_baseline_if_rounded`); with
    automatic slots the DP compares them itself, and exact mode is exact."""
    def run(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
        b.log(f"{what}, {_slots_text(o)}")
        base = _best_baseline(chain, memory, b) if never_worse and o.slots is not None and not o.exact else None
        sol = fn(chain, memory, slots=o.slots, exact=o.exact, time_limit=b.limit())
        _dp_log(b, sol)
        return _baseline_if_rounded(chain, memory, sol, base, o, b) if base is not None else sol
    return run


def _baseline_if_rounded(chain: Chain, memory: float, sol: Solution, base, o: _Options, b: Budget) -> Solution:
    """A DP run with the caller's ``slots`` rounds every size up to a slot, so it can miss a baseline that
    fits (PipeDream's ResNet-18 at store-all's own memory with 500 slots: 66.3 ms where store-all takes
    64.9 ms), or find nothing where one fits. The fastest baseline that fits (``base``,
    :func:`_best_baseline`) is returned then: ``details["candidate"]`` names it, ``details["dp_value"]``
    keeps the DP's makespan (None: it had none); the DP's lower bound (sizes rounded down) stays where
    the baseline does not pass below it, OPTIMAL where the baseline reaches it, else FEASIBLE. An
    INFEASIBLE answer (nothing fits, proven) stands, and so does a TIME_LIMIT one (the stopped DP's
    fallback, the persistent DP with its own slots, has compared the baselines)."""
    mk, name, make = base
    if sol.status in (Status.INFEASIBLE, Status.TIME_LIMIT):
        # proven nothing fits; or the DP stopped at the time limit, its answer then the persistent DP's
        # with slots of its own choosing, which compares the baselines itself
        return sol
    if sol.schedule is not None and sol.objective is not None and sol.objective <= mk * (1 + 1e-12):
        return sol
    sched = make()
    rep = simulate_remat(chain, sched, memory_limit=memory)
    bound = sol.bound if sol.bound is not None and rep.makespan >= sol.bound * (1 - 1e-12) else None
    reached = bound is not None and rep.makespan <= bound * (1 + 1e-12)
    what = (f"found no sequence within the limit ({sol.message})" if sol.schedule is None else
            f"gave {fmt_time(sol.objective)}")
    msg = (f"the DP at {o.slots} slots (sizes rounded up) {what}; {name} fits and is faster, so it is returned"
           + ("; it reaches the lower bound (sizes rounded down): optimal" if reached else
              "" if bound is None else f"; the optimum is at least {fmt_time(bound)}"))
    b.log(f"{sol.method}: {msg}")
    details = {k: v for k, v in sol.details.items() if k != "min_memory"}
    details.update(candidate=name, returned="baseline", dp_value=sol.objective, proven=reached,
                   recompute_time=rep.recompute_time)
    return Solution(PROBLEM, sol.method, Status.OPTIMAL if reached else Status.FEASIBLE, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, bound=bound, memory_limit=memory, predicted=None,
                    message=msg, times=sol.times, details=details)


_rotor = _dp(remat_rotor.persistent, "rotor: persistent DP")
_rotor_floating = _dp(remat_rotor.floating, "rotor-floating: floating DP")
# the AD model's class holds no store-all nor checkpoint_sequential: paper 004's revolve, as the paper has it
_revolve = _dp(remat_rotor.revolve, "revolve: persistent DP restricted to the AD model", never_worse=False)


def _sequential(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log(f"sequential: checkpoint_sequential with 1..{chain.L} segments")
    return remat_heuristics.sequential(chain, memory, time_limit=b.limit())


def _store_all(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    return remat_heuristics.store_all(chain, memory, time_limit=b.limit())


def _recompute_all(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    return remat_heuristics.recompute_all(chain, memory, time_limit=b.limit())


# ----------------------------------------------------------------------------- what fits in the time limit
#: seconds per operation of a sequence built, replayed twice and reported in Python (about 1.5 us per
#: replayed operation measured; recompute-all has L(L+1)/2 + 2L + 2 operations)
_SECONDS_PER_OP = 4e-6
#: seconds, ``a + b L^2`` on a quiet machine (2 cores), of what a MILP method does before HiGHS runs
#: and HiGHS cannot stop: remat-milp builds its Pyomo model and compiles it (build + compile 0.54 s,
#: 1.66 s, 3.1 s at L = 50, 80, 120; its first model of a process also imports Pyomo,
#: :func:`formulations.highs_driver.pyomo_first_use_seconds`); checkmate and checkmate-lp build their
#: arrays (0.02 s at L = 60, 0.66 s at L = 300) and HiGHS's root runs past its limit by up to 0.2 s and
#: 1 us per nonzero (58 L^2 nonzeros: :data:`formulations.remat_checkmate.ROOT_SECONDS_PER_NNZ`)
_BUILD_SECONDS = {"remat-milp": (0.1, 2.1e-4), "checkmate": (0.25, 7e-5), "checkmate-lp": (0.25, 7e-5)}


def _too_long(chain: Chain, method: str, time_limit: float | None, pace: float = 1.0) -> str | None:
    """Why ``method`` cannot answer on ``chain`` within ``time_limit`` seconds (None: it can): a step
    that cannot be interrupted (building and compiling remat-milp's model, HiGHS's set-up of
    Checkmate's, recompute-all's quadratic sequence) is estimated to take longer. The MILPs' estimates
    are a quiet machine's, times ``pace`` (:meth:`memplan.models.budget.Budget.pace`: how much slower
    this call is running)."""
    if time_limit is None:
        return None
    if method == "recompute-all":
        n = remat_heuristics.recompute_all_ops(chain.L)
        need = n * _SECONDS_PER_OP
        what = f"recompute-all's sequence on L = {chain.L} stages ({n:,} operations)"
    elif method in _BUILD_SECONDS:
        a, c = _BUILD_SECONDS[method]
        first = pyomo_first_use_seconds() if method == "remat-milp" else 0.0
        need = pace * (a + c * chain.L ** 2 + first)
        what = (f"building {method}'s model on L = {chain.L} stages" if method == "remat-milp" else
                f"building {method}'s model on L = {chain.L} stages and HiGHS's set-up of it")
        if first:
            what += " (Pyomo's import included)"
        if pace > 1.05:
            what += f" on this machine, now {pace:.2g} times slower than when measured,"
    else:
        return None
    if need <= time_limit:
        return None
    return (f"{what} takes about {need:.3g} s here, more than the {time_limit:.2g} s left of the time limit: "
            f"give a time limit of at least {math.ceil(need * 1.5)} s, or use method 'rotor' (it answers within "
            "any limit)")


#: remat-milp gives its MIP start (the persistent DP) ``_START_SHARE`` of the call's time when the
#: call has at least ``_MILP_ROOM`` times the model's build time; with less, the MILP would have next
#: to no time to improve on its start, and a DP stopped early can lose to rotor run alone with the
#: same limit (ResNet-101 at 1-5 s: 4.870 and 4.8516 s against rotor's 4.8513 s), so the DP gets all
#: of it (it stops by itself once its discretization stops paying: 1.2-2.6 s there)
_START_SHARE = 0.25
_MILP_ROOM = 10.0


def _start_share(chain: Chain, b: Budget) -> float:
    """The share of what is left that remat-milp's MIP start may take (see ``_MILP_ROOM``)."""
    a, c = _BUILD_SECONDS["remat-milp"]
    left = b.remaining()
    return _START_SHARE if not math.isfinite(left) or left >= _MILP_ROOM * (a + c * chain.L ** 2) else 1.0


def _milp_start(chain: Chain, memory: float, o: _Options, b: Budget) -> tuple[RematSchedule | None, str]:
    """remat-milp's MIP start: the persistent DP's answer (with ``slots=None``, the best of the DP
    and the baselines, the least-memory sequence included, so there is a start whenever anything
    fits), else the least-memory sequence when it fits, else none. The DP's time: :func:`_start_share`."""
    dp = remat_rotor.persistent(chain, memory, slots=o.slots, exact=o.exact,
                                time_limit=b.limit(share=_start_share(chain, b)))
    if dp.success:
        src = dp.details.get("candidate", "dp")
        return dp.schedule, "the persistent DP" + ("" if src == "dp" else f" ({src})")
    try:
        sched = min_memory_of(chain, "all", time_limit=b.limit()).schedule
    except TooCostly:
        return None, "no MIP start (nothing found in the time limit)"
    try:
        simulate_remat(chain, sched, memory_limit=memory)
        return sched, "the least-memory sequence (the persistent DP found no sequence)"
    except InvalidSequence:
        pass
    return None, "no MIP start (nothing fits)"


#: share of what is left of the call that remat-milp's DP bound may take (the MILP gets the rest)
_BOUND_SHARE = 0.5
#: share of what is left that the DP's plan on the chain as given may take (when the bound's run has none)
_PLAN_SHARE = 0.8
#: HiGHS's default relative gap, used for the DP bound's test when ``gap=None``
_DEFAULT_GAP = 1e-4


def _dp_bound(chain: Chain, memory: float, b: Budget):
    """remat-milp's lower bound from the floating DP on step functions
    (:func:`memplan.baselines.remat_bound.floating_bound`, proven there), within ``_BOUND_SHARE`` of
    what the call has left; None when it would not finish in time. On integer chains the same run
    rebuilds the DP's sequence (``ops``), optimal among all sequences."""
    left = b.limit(share=_BOUND_SHARE)
    deadline = None if left is None else time.perf_counter() + left
    res = remat_bound.floating_bound(chain, memory, deadline=deadline, plan=chain.is_integer)
    if res.note is not None:
        b.log(f"remat-milp: DP bound {res.note}")
        return None, res
    if not res.complete or res.value is None or not math.isfinite(res.value):
        b.log(f"remat-milp: DP bound stopped at its share of the time ({res.seconds:.1f} s)")
        return None, res
    b.log(f"remat-milp: DP bound {fmt_time(res.value)} ({res.describe()}, {res.seconds:.1f} s)")
    return res.value, res


def _dp_plan(chain: Chain, memory: float, b: Budget, bres):
    """The floating DP's sequence on step functions: from the bound's run when it replays within the
    limit (integer chains), else from a second run on the chain as given with sizes rounded up
    (:func:`memplan.baselines.remat_bound.floating_plan`) when ``_PLAN_SHARE`` of the time left
    allows it (it takes about as long as the bound). Returns
    ``(schedule, makespan)`` replayed within the limit, or ``(None, None)``."""
    ops = bres.ops
    if ops is not None:
        try:
            simulate_remat(chain, RematSchedule(ops), memory_limit=memory)
        except InvalidSequence:
            ops = None       # a sequence of the relaxed chain (rule 3) that the real one cannot run
    if ops is None:
        # the plan is what most often closes the gap (the MILP's bound rarely moves past the DP's), so
        # it may take most of what is left; it takes about as long as the bound did
        left = b.limit(share=_PLAN_SHARE)
        if left is not None and left < 1.2 * bres.seconds:
            return None, None
        deadline = None if left is None else time.perf_counter() + left
        res = remat_bound.floating_plan(chain, memory, deadline=deadline)
        ops = res.ops if res.complete else None
        b.log("remat-milp: DP plan on the chain as given: "
              + ("none" if ops is None else fmt_time(res.value)) + f" ({res.seconds:.1f} s)")
    if ops is None:
        return None, None
    sched = RematSchedule(ops)
    try:
        rep = simulate_remat(chain, sched, memory_limit=memory)
    except InvalidSequence:
        return None, None
    return sched, rep.makespan


def _remat_milp(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    """The MIP start (:func:`_milp_start`), then the floating DP's lower bound (:func:`_dp_bound`):
    when the start is within ``gap`` of it, the start is returned as OPTIMAL without a MILP
    (``details["proved_by"]`` names the bound); otherwise the MILP runs with the bound as an
    objective cut, and the better of the two bounds is reported (``proved_by`` says which one
    closed the gap, None when none did)."""
    t0 = time.perf_counter()
    start, source = _milp_start(chain, memory, o, b)     # first: it may take the whole call (_start_share)
    t_start = time.perf_counter() - t0
    start_time = None if start is None else simulate_remat(chain, start).makespan
    b.log(f"remat-milp: MIP start: {source}" + ("" if start is None else f" ({fmt_time(start_time)})"))
    gap = _DEFAULT_GAP if o.gap is None else o.gap
    lb, bres = (None, None)
    t_b = time.perf_counter()
    if start is not None:
        lb, bres = _dp_bound(chain, memory, b)
    t_bound = time.perf_counter() - t_b
    bound_info = {} if bres is None else {"dp_bound": lb, "dp_bound_method": bres.describe(),
                                          "dp_bound_exact_sizes": bres.exact, "dp_bound_seconds": bres.seconds,
                                          "dp_bound_complete": bres.complete, "dp_bound_relaxed": bres.relaxed,
                                          **({"dp_bound_note": bres.note} if bres.note else {})}
    if lb is not None and start_time - lb > gap * abs(start_time):
        # the start is not proven: the floating DP's own sequence may be better (non-persistent)
        t_p = time.perf_counter()
        sched, mk = _dp_plan(chain, memory, b, bres)
        t_bound += time.perf_counter() - t_p
        if sched is not None:
            bound_info["dp_plan"] = mk
            if mk < start_time * (1 - 1e-12):
                start, start_time = sched, mk
                source = "the floating DP on step functions" + (" (exact sizes)" if bres.exact else
                                                                " (sizes rounded up)")
                b.log(f"remat-milp: start replaced by {source} ({fmt_time(mk)})")
    if lb is not None and start_time - lb <= gap * abs(start_time):
        rep = simulate_remat(chain, start, memory_limit=memory)
        times = {"start": t_start, "bound": t_bound}
        details = {"mip_start": f"MIP start from {source}", "proved_by": "dp bound", "recompute_time": rep.recompute_time,
                   "returned": "mip start", **bound_info}
        msg = (f"optimal for paper 004's model within gap {gap:g}: the schedule of {source} meets the lower "
               f"bound of the {bres.describe()} (no MILP needed)")
        return Solution(PROBLEM, "remat-milp", Status.OPTIMAL, objective=rep.makespan, peak_memory=rep.peak_memory,
                        schedule=start, bound=min(lb, rep.makespan), memory_limit=memory, predicted=start_time,
                        message=msg, times=times, details=details)
    try:
        need = min_memory_of(chain, "all", time_limit=b.limit()).value
    except TooCostly:
        need = None        # not computed in the time left; _explain_infeasible says what is proven
    why = _too_long(chain, "remat-milp", b.limit(), b.pace())
    if why:                   # the model's build alone would overrun the call
        sol = Solution(PROBLEM, "remat-milp", Status.NO_SOLUTION, memory_limit=memory, message=f"not solved: {why}",
                       times={}, details={"mip_start": source})
    else:
        sol = solve_remat_milp(chain, memory, time_limit=b.limit(), gap=o.gap, threads=o.threads, start=start,
                               start_source=source, min_memory=need, log_file=o.solver_log, lower_bound=lb)
    if start is None:
        sol.details["mip_start"] = source
    sol.details.update(bound_info)
    sol.times = _with_start_time(sol.times, t_start)
    sol.times["bound"] = t_bound
    if start is not None and sol.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        sol = _better_of_milp_and_start(chain, memory, sol, start, source)
    if sol.schedule is not None:
        # every sequence runs each F^l and B^l at least once: store-all's time is a bound whatever
        # HiGHS got to prove (it has none when stopped before the root LP finishes)
        milp_bound = sol.bound if sol.bound is not None else 0.0
        sol.bound = max(chain.store_all_time(), milp_bound, lb if lb is not None else 0.0)
        proven = sol.gap is not None and sol.gap <= gap + 1e-12
        # the MILP's dual bound includes the DP bound through the cut: credit the DP when the MILP's
        # bound did not go beyond it, i.e. the incumbent reached the DP bound
        by_dp = lb is not None and milp_bound <= lb * (1 + 1e-8)
        sol.details["proved_by"] = None if not proven else ("dp bound + milp incumbent" if by_dp else "milp")
        if proven and sol.status == Status.TIME_LIMIT:
            sol.status = Status.OPTIMAL
            sol.message += f"; proven within gap {gap:g} by the {bres.describe()}"
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
    base = _best_baseline(chain, memory, b)
    why = _too_long(chain, "checkmate", b.limit(), b.pace())
    if why:
        sol = Solution(PROBLEM, "checkmate", Status.NO_SOLUTION, memory_limit=memory, message=f"not solved: {why}",
                       details={"stopped_by_time": True})
    else:
        sol = solve_checkmate(chain, memory, time_limit=b.limit(), gap=o.gap, threads=o.threads,
                              log_file=o.solver_log)
    return _baseline_if_stopped(chain, memory, sol, base, "Checkmate's MILP", b)


def _checkmate_lp(chain: Chain, memory: float, o: _Options, b: Budget) -> Solution:
    b.log("checkmate-lp: LP relaxation + two-phase rounding")
    base = _best_baseline(chain, memory, b)
    why = _too_long(chain, "checkmate-lp", b.limit(), b.pace())
    if why:
        sol = Solution(PROBLEM, "checkmate-lp", Status.NO_SOLUTION, memory_limit=memory,
                       message=f"not solved: {why}", details={"stopped_by_time": True})
    else:
        sol = solve_checkmate_lp(chain, memory, time_limit=b.limit(), threads=o.threads, log_file=o.solver_log)
    return _baseline_if_stopped(chain, memory, sol, base, "Checkmate's LP relaxation", b)


#: compiled replay steps per second assumed for recompute-all's stats (:func:`_best_baseline`): 0.8-1.8e8
#: measured on 2 shared cores (L = 1000-4000: 0.5-8 M operations in 5-103 ms)
_REPLAY_STEPS_PER_SECOND = 2e7


def _best_baseline(chain: Chain, memory: float, b: Budget):
    """``(makespan, name, () -> schedule)`` of the fastest baseline that fits ``memory``: store-all,
    the best ``checkpoint_sequential`` cut, recompute-all and recursive bisection (their compiled
    replays: milliseconds at L = 1000; the cuts and recompute-all, quadratic, only where they fit in
    what is left of the call, at least 0.1 s), or None. What Checkmate's methods return when the time
    runs out before they have a plan (:func:`_baseline_if_stopped`); computed before they start, so
    that the call's time covers it."""
    H = remat_heuristics
    lim = memory * (1 + 1e-9) + 1e-9
    left = max(0.1, b.remaining())
    cands = []

    def add(stats, name, make):
        if stats[1] <= lim:
            cands.append((stats[0], name, make))

    add(H.schedule_stats(chain, H.store_all_schedule(chain)), "store-all", lambda: H.store_all_schedule(chain))
    if H.sequential_points_seconds(chain) <= left:
        fit = [p for p in H.sequential_points(chain) if p[2] <= lim]
        if fit:
            k, mk, pk = min(fit, key=lambda p: (p[1], p[2]))
            add((mk, pk), f"sequential ({k} segment{'s' if k > 1 else ''})", lambda: H.sequential_schedule(chain, k))
    if H.recompute_all_ops(chain.L) <= left * _REPLAY_STEPS_PER_SECOND:
        add(H.recompute_all_stats(chain), "recompute-all", lambda: H.recompute_all_schedule(chain))
    bis = H.best_bisection(chain, memory)
    if bis is not None:
        leaf = bis[0]
        add(bis[1:], f"bisection (runs of {leaf} stages stored)" if leaf > 1 else "bisection",
            lambda: H.bisection_schedule(chain, leaf))
    return min(cands, key=lambda c: c[0]) if cands else None         # ties: the first (store-all first)


def _baseline_if_stopped(chain: Chain, memory: float, sol: Solution, base, what: str, b: Budget) -> Solution:
    """Checkmate's methods stopped by the call's time (``details["stopped_by_time"]``: not started,
    interrupted while building, or HiGHS stopped at its limit) are never worse than a baseline: the
    fastest baseline that fits (``base``, :func:`_best_baseline`) is returned, status TIME_LIMIT,
    ``details["candidate"]`` naming it, where the method has no schedule within the limit or a slower
    one. An answer HiGHS finished (Checkmate's optimum in its own model, the relaxation's rounding) is
    Checkmate's and is kept, whatever a baseline does."""
    if not sol.details.get("stopped_by_time") or base is None:
        return sol
    mk, name, make = base
    planned = (sol.schedule is not None and sol.objective is not None and not sol.details.get("limit_exceeded")
               and sol.status in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT))
    if planned and sol.objective <= mk * (1 + 1e-12):
        return sol
    sched = make()
    rep = simulate_remat(chain, sched, memory_limit=memory)
    why = ("found no schedule" if sol.schedule is None else
           f"found only a sequence over the limit ({fmt_memory(sol.peak_memory)})" if not planned else
           f"found only {fmt_time(sol.objective)}")
    b.log(f"{sol.method}: {what} {why} in the time limit: the best baseline, {name}, is returned")
    details = dict(sol.details, candidate=name, returned="baseline", limit_exceeded=False,
                   recompute_time=rep.recompute_time)
    return Solution(PROBLEM, sol.method, Status.TIME_LIMIT, objective=rep.makespan, peak_memory=rep.peak_memory,
                    schedule=sched, bound=None, memory_limit=memory, predicted=None,
                    message=f"{what} {why} in the time limit ({sol.message}); returning the best baseline: {name}",
                    times=sol.times, details=details)


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
assert list(_RUNNERS) == METHODS and set(OPTIONS_USED) == set(METHODS)
#: the methods whose memory is discretized into slots (and that take ``exact``)
_DP_METHODS = ("rotor", "rotor-floating", "revolve", "remat-milp")


def _slots_text(o: _Options) -> str:
    if o.exact:
        return "exact (one slot per byte)"
    return "automatic memory slots" if o.slots is None else f"{o.slots} memory slots"


# ----------------------------------------------------------------------------- input checks




def _exact_arg(exact: Any, chain: Chain, memory: float, method: str) -> bool:
    if not isinstance(exact, bool):
        raise InputError(f"{PROBLEM}: exact={exact!r} must be True or False")
    if not exact or method not in _DP_METHODS:
        return exact
    if not chain.is_integer:
        raise InputError(f"{PROBLEM}: exact=True needs integer sizes, and {chain.name} has fractional ones; "
                         "leave slots=None (the DP chooses) or give slots=N instead")
    if not float(memory).is_integer():
        raise InputError(f"{PROBLEM}: exact=True needs a whole number of bytes as memory, got {memory!r}")
    if memory > _EXACT_MAX:
        raise InputError(f"{PROBLEM}: exact=True would need {memory:.0f} slots (one per byte; at most "
                         f"{_EXACT_MAX}); use slots=... instead")
    return exact


def _check_tables(chain: Chain, method: str, o: _Options, memory: float) -> None:
    """A given discretization whose tables would not fit in memory is an InputError naming it."""
    if method not in _DP_METHODS or (o.slots is None and not o.exact):
        return
    kind = remat_rotor.KINDS.get(method, "persistent")        # remat-milp's start: the persistent DP
    slots = int(memory) if o.exact else o.slots
    what = "exact=True (one slot per byte)" if o.exact else f"slots={slots}"
    try:
        remat_rotor.check_tables(kind, chain.L, slots, what=f"{method} with {what}")
    except remat_rotor.TableTooLarge as e:
        raise InputError(f"{PROBLEM}: {e} (or slots=None: the DP chooses)") from None


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
    if over:        # a valid schedule, not a plan for this limit: never "feasible", never a success
        sol.status = Status.LIMIT_EXCEEDED
    return sol


#: the methods that plan with a chain's own no-grad forward times and turn cost (:attr:`Chain.uf_ng`,
#: :attr:`Chain.u_turn`): the persistent DP (rotor, revolve: one turn per split of the recursion) and
#: the baselines, whose replays charge them
TIME_MODEL_METHODS = ("rotor", "revolve", "sequential", "store-all", "recompute-all")


def _solve_in_papers_times(chain: Chain, sol: Solution, method: str, memory: float,
                           time_left: float | None) -> Solution:
    """A chain with its own no-grad forward times or a turn cost (:attr:`Chain.own_times`) and a method
    that does not model them (not in :data:`TIME_MODEL_METHODS`): ``sol`` was solved on
    :meth:`Chain.papers_times` (one forward time per stage, no turn cost) and its schedule is replayed
    here on ``chain`` itself, which charges them (the memory is the same). A proof of the papers' model
    proves nothing here: OPTIMAL becomes FEASIBLE and the bound goes (a no-grad forward may be cheaper
    than the ``uf`` the bound charges). Never worse than rotor, which plans with them: where rotor's
    plan (in ``time_left`` seconds) replays faster, it is returned instead and the message says so
    (``details["candidate"]``)."""
    if sol.schedule is None:
        return sol
    papers = sol.objective
    rep = simulate_remat(chain, sol.schedule)
    sol.objective, sol.bound = rep.makespan, None
    sol.details["makespan_papers_times"] = papers
    if "recompute_time" in sol.details:
        sol.details["recompute_time"] = rep.recompute_time
    if sol.status == Status.OPTIMAL:
        sol.status = Status.FEASIBLE
    head = (f"planned in the papers' time model ({method} does not model the chain's no-grad forward times "
            f"and turn cost)")
    tail = f"replayed with them: {fmt_time(rep.makespan)} (papers' model: {fmt_time(papers)})"
    sol.message = f"{head}: {sol.message}; {tail}" if sol.message else f"{head}; {tail}"
    rot = remat_rotor.persistent(chain, memory, time_limit=time_left)
    if rot.success and rot.peak_memory <= memory * (1 + 1e-9) and rot.objective < sol.objective * (1 - 1e-12):
        sol.message += (f"; rotor's plan, made with them, replays faster ({fmt_time(rot.objective)}) and is "
                        f"returned instead")
        sol.schedule, sol.objective, sol.peak_memory = rot.schedule, rot.objective, rot.peak_memory
        sol.details["recompute_time"] = rot.details.get("recompute_time")
        sol.details.pop("limit_exceeded", None)
        sol.details["candidate"] = "rotor"
        if sol.status == Status.LIMIT_EXCEEDED:      # rotor's plan is within the limit
            sol.status = Status.FEASIBLE
    return sol


def _replayed_baselines(chain: Chain, memory: float, method: str, sol: Solution,
                        time_left: float | None = None) -> Solution:
    """Never worse than a baseline where the replay charges resident tensors only while they exist
    (:attr:`Chain.resident_grads`, :attr:`Chain.resident_values`). The methods plan with the whole
    ``resident``, an upper bound, so a baseline's sequence may fit ``memory`` in the replay where the
    plan the method proved best with the whole charge is slower, or where the method found nothing
    (NASNet-A's sequential(4) peaks at 21 MiB; rotor given those 21 MiB, whole charge 16 MiB more,
    planned a sequence 2% slower). The baselines of ``method``'s class (store-all, recompute-all,
    ``checkpoint_sequential`` with every number of segments; a baseline method: its own) are replayed
    on ``chain``, and the fastest that fits replaces ``sol`` where it is faster or ``sol`` has no plan
    within the limit: status FEASIBLE (a proof made with the whole charge proves nothing here; its
    bound goes to ``details["bound_whole_resident"]``), ``details["candidate"]`` names it, the message
    says so. O(L) replays of O(L) operations (at most :data:`~memplan.baselines.remat_heuristics.REPLAYED_SEGMENTS` + L/8 segment counts;
    33 ms on NASNet-A's 63 stages), no new one once ``time_left`` seconds have passed (store-all and
    recompute-all first, then the segment counts from 1 up; :func:`memplan.baselines.remat_heuristics.replayed_baselines`)."""
    best, least = remat_heuristics.replayed_baselines(chain, memory, method, time_left)
    planned = sol.schedule is not None and sol.status in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT)
    if best is None:
        if sol.status == Status.INFEASIBLE and least is not None and sol.details.get("min_memory") is not None:
            # proven with the whole charge only: below it, a plan may still fit where the spans save
            # bytes. Proven: the whole minimum less every span's bytes; enough: the least baseline
            spans = sum(g for g, _, _ in chain.resident_grads) + sum(b for b, _, _ in chain.resident_values)
            whole = float(sol.details["min_memory"])
            low = whole - spans
            enough = min(whole, least[2].peak_memory)
            sol.details.update(min_memory=enough, min_memory_whole_resident=whole, min_memory_proven_above=low)
            name = least[0] if least[2].peak_memory < whole else "with the whole charge"
            sol.message = (f"nothing found in {fmt_memory(memory)} ({fmt_bytes(memory)} B): {fmt_memory(enough)} "
                           f"({fmt_bytes(enough)} B) is enough ({name}, replayed with the resident tensors charged only "
                           f"while they exist), and at least {fmt_memory(low)} ({fmt_bytes(low)} B) is needed (proven: "
                           f"the whole charge's minimum, {fmt_bytes(whole)} B, less the {fmt_bytes(spans)} B of gradients and "
                           f"values the replay charges only while they exist)")
            if memory >= low * (1 - 1e-12):
                sol.status = Status.NO_SOLUTION
        return sol
    if planned and best[2].makespan >= sol.objective * (1 - 1e-9):
        return sol
    name, sched, rep = best
    what = (f"{method}'s plan ({fmt_time(sol.objective)}) is slower" if planned else
            f"{method} found no plan within the limit with the whole resident charge ({sol.status})")
    sol.schedule, sol.objective, sol.peak_memory = sched, rep.makespan, rep.peak_memory
    sol.details["recompute_time"] = rep.recompute_time
    sol.details["candidate"] = name
    sol.details.pop("limit_exceeded", None)
    if sol.bound is not None:
        sol.details["bound_whole_resident"] = sol.bound
    sol.bound = None
    if not planned:             # the answer was "nothing fits", with its minimum: no longer what it says
        sol.message = ""
        if sol.details.get("min_memory") is not None:
            sol.details["min_memory_whole_resident"] = sol.details.pop("min_memory")
    sol.status = Status.FEASIBLE
    return _frontend.add_note(sol, f"replayed with the resident tensors charged only while they exist, {name} "
                                   f"fits ({fmt_memory(rep.peak_memory)}) and takes {fmt_time(rep.makespan)}: "
                                   f"{what}, so it is returned instead")


def _explain_infeasible(chain: Chain, memory: float, sol: Solution, time_limit: float | None = None) -> Solution:
    """An INFEASIBLE result always carries the minimum feasible memory (``details['min_memory']``),
    and is INFEASIBLE only below it: a method whose own model finds nothing where some sequence fits
    (Checkmate's, which does not tell a^l from abar^l) gets NO_SOLUTION, saying so. Conversely a
    method that found nothing within the limit (NO_SOLUTION, a TIME_LIMIT without a schedule) or only a
    schedule above it (LIMIT_EXCEEDED: Checkmate's rounding) below the proven minimum is INFEASIBLE,
    as every method answers there (Checkmate's MILP had said no_solution after its whole limit)."""
    found_nothing = sol.status in (Status.NO_SOLUTION, Status.LIMIT_EXCEEDED) or (
        sol.status == Status.TIME_LIMIT and sol.schedule is None)
    if found_nothing:
        need = proven_infeasible_below(chain, time_limit=time_limit)
        if memory < need * (1 - 1e-12):
            sol.status = Status.INFEASIBLE
            sol.details["min_memory"] = need
            sol.message = (f"no valid sequence fits in {fmt_memory(memory)} ({fmt_bytes(memory)} B): none fits below "
                           f"{fmt_memory(need)} ({fmt_bytes(need)} B, proven); {sol.method}: {sol.message}")
        return sol
    if sol.status != Status.INFEASIBLE:
        return sol
    need = proven_infeasible_below(chain, time_limit=time_limit)
    if sol.details.get("min_memory") is None:
        sol.details["min_memory"] = need
        sol.message += f" (minimum feasible memory for any sequence: {fmt_memory(need)})"
    if memory >= need * (1 - 1e-12):
        sol.status = Status.NO_SOLUTION
        try:
            fits = min_memory_of(chain, "all", time_limit=time_limit).value
        except TooCostly:
            fits = None
        if fits is not None and fits > need * (1 + 1e-12):
            # ``need`` is only a proven bound (min_memory_of not exact: a gradient larger than its
            # activation on a chain too long for the exhaustive search): nothing is known to fit there.
            # Said as remat_rotor says it: min_memory where a sequence fits, min_memory_bound proven
            sol.details.update(min_memory=fits, min_memory_bound=need)
            sol.message += (f"; not proven infeasible: none fits below {fmt_memory(need)} ({need:.0f} B, a proven "
                            f"bound), and one fits in {fmt_memory(fits)} ({fits:.0f} B)")
        else:
            sol.details["min_memory"] = need
            sol.message += (f"; not infeasible: the minimum feasible memory is {fmt_memory(need)}, and e.g. "
                            "rotor-floating finds a sequence")
    return sol


# ----------------------------------------------------------------------------- public API
def memory_range(chain: Chain, *, time_limit: float | None = None) -> tuple[float, float]:
    """``(minimum, store-all)``: the memory limits (bytes) between which re-materialization matters.

    Below the minimum (exact: :func:`memplan.baselines.remat_min_memory.min_memory`, often but not
    always the peak of recompute-all) no valid sequence exists; from store-all's peak on nothing
    needs recomputing. Memory sweeps (paper 004, Figures 6-8) space their limits in between.

    A chain whose resident gradients or values are charged only while they exist
    (:attr:`Chain.resident_grads`, :attr:`Chain.resident_values`: profiled multi-tensor cuts): the
    solvers plan with the whole ``resident`` charge, an upper bound, so both ends are replayed
    (:func:`memplan.models.remat.simulate_remat`). The top is store-all's replayed peak (NASNet-A at
    32x32: 49.9 MiB, where the whole charge says 64.1); the bottom is the least memory at which a plan
    is known to fit: the whole charge's minimum, or a baseline's replayed peak (store-all,
    recompute-all, ``checkpoint_sequential`` with any number of segments) where lower. The exact
    minimum is then only bracketed: :func:`solve` proves none fits below the whole minimum less the
    spans' bytes.

    ``time_limit`` (seconds, None: none): the exact minimum is O(L^3) (12 s at L = 2000, 43 s at
    L = 3000 on the CPU of the tests); where it is estimated
    (:func:`memplan.baselines.remat_min_memory.min_memory_seconds`, a conservative estimate: 81 s
    there) to take longer than the limit, the bottom is the least replayed peak of the baselines that
    fit in the time: recursive bisection (O(log L) checkpoints, O(L log L) operations: 119 B against
    the exact 69 B on a random chain of 3000 stages; not on a chain with spans, where the methods do
    not compare their plans with it), store-all and recompute-all (up to 200 stages: O(L^2)
    operations), then ``checkpoint_sequential`` with 1, 2, ... segments while time is left (so the
    bottom can depend on the machine's speed, and on a minimum computed earlier in the process, which
    is cached). ``rotor``, ``rotor-floating`` and the baselines return a plan there; the true minimum
    may be lower.

    Examples
    --------
    >>> import memplan
    >>> lo, hi = memplan.remat.memory_range(memplan.load_instance("paper004_table2")[0])
    >>> round(lo / 2**20, 2), round(hi / 2**20, 2)
    (82.12, 106.99)
    """
    t0 = time.perf_counter()
    chain = _frontend.chain_arg(chain, PROBLEM)
    time_limit = _frontend.time_limit_arg(time_limit, f"{PROBLEM} memory_range")
    inner, r = chain.without_resident(), chain.resident      # resident tensors: charged once, for the whole step
    hi = remat_heuristics.store_all(inner).peak_memory + r
    try:
        lo = min_memory_of(inner, "all", time_limit=time_limit).value + r
    except TooCostly:
        # the least replayed peak of the baselines within the time left (store-all's replay is the top)
        deadline = t0 + time_limit
        first = [remat_heuristics.store_all_schedule]
        if not (chain.resident_grads or chain.resident_values):
            # rotor's candidates include bisection (so a plan fits there); on a chain with spans only
            # the baselines of _replayed_baselines are sure to be returned at their replayed peak
            first.append(remat_heuristics.bisection_schedule)
        if chain.L <= _RANGE_RECOMPUTE_ALL_MAX_L:
            first.append(remat_heuristics.recompute_all_schedule)
        peaks = [simulate_remat(chain, make(chain)).peak_memory for make in first]     # peaks[0]: store-all's
        lo = min(peaks)
        for _, make in remat_heuristics.baseline_schedules(chain, "sequential"):      # 1, 2, ... segments, while time is left
            if time.perf_counter() > deadline:
                break
            lo = min(lo, simulate_remat(chain, make()).peak_memory)
        return lo, min(hi, peaks[0])
    if not (chain.resident_grads or chain.resident_values):
        return lo, hi
    # spans: the solvers' whole charge is an upper bound. Store-all replayed is the memory from which
    # nothing needs recomputing; the low end is the least memory at which a plan is known to fit: the
    # whole charge's minimum (its sequence replays at most there) or a baseline's replayed peak
    peaks = {name: simulate_remat(chain, make()).peak_memory for name, make in remat_heuristics.baseline_schedules(chain, "all")}
    return min(lo, min(peaks.values())), min(hi, peaks["store-all"])


#: :func:`memory_range` past its time limit replays recompute-all (O(L^2) operations) up to this many stages
_RANGE_RECOMPUTE_ALL_MAX_L = 200


@_frontend.records_chain
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
        Seconds for the whole call (None: no limit). The MILPs get what is left of it; the DPs'
        automatic refinement stops when the next run would not fit in it (one DP run itself is not
        interrupted: O(S L^3) for rotor and revolve, O(S L^5) for rotor-floating).
    gap : float or None
        Relative gap at which the MILPs stop (``remat-milp``, ``checkmate``).
    threads : int, optional
        HiGHS threads.
    slots : int, optional
        Memory slots of the DPs (``rotor``, ``rotor-floating``, ``revolve``, and remat-milp's start),
        honoured as given. None (default): the DP chooses and refines them, and its answer is never
        worse than the baselines' (see the module docstring).
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
        :class:`~memplan.models.remat.RematSchedule`; ``bound`` (the DPs' proven lower bound,
        remat-milp's dual bound); status OPTIMAL (proven within the method's class of sequences for
        the chain as given), FEASIBLE (the message states the rounding), TIME_LIMIT, NO_SOLUTION
        (this method has no schedule although some sequence fits; the message says why), or
        INFEASIBLE below the minimum feasible memory (``details["min_memory"]``, also in
        ``message``).

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
    chain = _frontend.chain_arg(chain, PROBLEM)
    memory = _frontend.memory_arg(memory, PROBLEM)
    method = _frontend.method_arg(method, METHODS, DEFAULT_METHOD, PROBLEM)
    if chain.resident:
        t0 = time.perf_counter()
        if progress is not None:
            progress(f"[{0.0:7.1f}s] remat: {chain.name} holds {fmt_memory(chain.resident)} of resident tensors "
                     f"(charged whole): planned under {fmt_memory(max(memory - chain.resident, 0.0))} of the "
                     f"{fmt_memory(memory)} limit")
        sol = _frontend.solve_without_resident(solve, chain, memory, dict(
            method=method, time_limit=time_limit, gap=gap, threads=threads, slots=slots, exact=exact,
            solver_log=solver_log, progress=progress))
        if (chain.resident_grads or chain.resident_values) and sol.schedule is not None:
            # the resident gradients exist only from their last reader's B to their producer's
            # (Chain.resident_grads), the values with a storage of their own only while they live
            # (Chain.resident_values): the replay's peak, at most the whole charge the solver planned with
            whole = sol.peak_memory
            sol.peak_memory = simulate_remat(chain, sol.schedule).peak_memory
            sol.details["peak_memory_whole_resident"] = whole
            what = " and ".join(w for w, on in (("gradients", chain.resident_grads), ("values", chain.resident_values))
                                if on)
            fields = ", ".join(f for f, on in (("Chain.resident_grads", chain.resident_grads),
                                               ("Chain.resident_values", chain.resident_values)) if on)
            sol = _frontend.add_note(sol, f"the resident {what} charged only while they exist "
                                          f"({fields}): replayed peak {fmt_bytes(sol.peak_memory)} B (the "
                                          f"status is proven, where it is, with the whole charge)")
        if chain.resident_grads or chain.resident_values:
            left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
            sol = _replayed_baselines(chain, memory, method, sol, left)
        if progress is not None:        # the inner call's last line gave the peak without the resident tensors
            progress(f"[{time.perf_counter() - t0:7.1f}s] remat: with the resident tensors: {sol.status}"
                     + ("" if sol.objective is None else f", makespan {fmt_time(sol.objective)}, "
                        f"peak {fmt_memory(sol.peak_memory)}"))
        return sol
    if chain.own_times and method not in TIME_MODEL_METHODS:
        t0 = time.perf_counter()
        inner = solve(chain.papers_times(), memory=memory, method=method, time_limit=time_limit, gap=gap,
                      threads=threads, slots=slots, exact=exact, solver_log=solver_log, progress=progress)
        left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
        return _solve_in_papers_times(chain, inner, method, memory, left)
    n_slots = _frontend.count_arg(slots, "slots", PROBLEM, required=False)
    opts = _Options(slots=n_slots,
                    exact=_exact_arg(exact, chain, memory, method), gap=_frontend.gap_arg(gap, PROBLEM),
                    threads=_frontend.count_arg(threads, "threads", PROBLEM, required=False),
                    solver_log=_frontend.solver_log_arg(solver_log, PROBLEM))
    _check_tables(chain, method, opts, memory)
    b = _frontend.budget(time_limit, progress, PROBLEM)
    if method == "recompute-all" and (why := _too_long(chain, method, b.limit())):
        raise InputError(f"{PROBLEM}: {why}")
    with b.active():
        b.log(f"remat: {method} on {chain.name} (L = {chain.L}), memory limit {fmt_memory(memory)}")
        sol = _RUNNERS[method](chain, memory, opts, b)
        sol = _explain_infeasible(chain, memory, _replay(chain, memory, method, sol), b.limit())
        if "time_limit" in sol.details:     # the MILPs record what they were given: say the call's limit
            sol.details["time_limit"] = b.time_limit
        b.log(f"remat: {sol.status}" + ("" if sol.objective is None else f", makespan {fmt_time(sol.objective)}, "
                                        f"peak {fmt_memory(sol.peak_memory)}"))
    return _frontend.finish(sol, b, memory=memory)


def _time_model_line(chain: Chain, sol: Solution) -> str:
    """The report's line on a chain with its own time model (no-grad forwards' own times, a cost per
    turn): what the makespan charges for them and what the papers' time model would give the same
    sequence."""
    k = turns(sol.schedule.ops)
    ng = "" if chain.uf_ng is None else (
        f"no-grad forwards at {chain.ufn[1:chain.L + 1].sum() / chain.uf[1:chain.L + 1].sum():.3g} x F_all's time, ")
    papers = simulate_remat(chain.papers_times(), sol.schedule).makespan
    return (f"time model   {ng}{fmt_time(chain.u_turn)} a turn ({k} turn{'s' if k != 1 else ''} here, "
            f"{fmt_time(k * chain.u_turn)}), as the chain gives them; the papers' model would give this sequence "
            f"{fmt_time(papers)}")


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
    solution, chain = _frontend.solution_arg(solution, chain, PROBLEM, "report")
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
        lines += _frontend.overheads_line(
            chain, lambda: simulate_remat(chain, sol.schedule, one_overhead=True).peak_memory)
        if chain.own_times:
            lines.append(_time_model_line(chain, sol))
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
