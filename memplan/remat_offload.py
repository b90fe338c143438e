"""Re-materialization and offloading together: ``memplan.remat_offload`` (paper 000).

Paper 000 (Beaumont et al., "Efficient Combination of Rematerialization and Offloading for Training
DNNs", NeurIPS 2021) plans a training iteration of a chain of ``L`` stages on one device with a host
link of bandwidth ``beta``: which activations to keep, to recompute (paper 004's operations
``F_all``, ``F_ck``, ``F_none``, ``B``) and to send to the host during the forward phase and bring
back during the backward phase, so that the device memory never exceeds ``memory`` and the makespan
is as small as possible. Schedules and their simulator are in :mod:`memplan.models.remat_offload`:
every reported makespan and peak is the simulator's replay.

Methods (:data:`METHODS`):

``dp`` (default)
    The best replayed schedule of a portfolio (see :func:`solve`): the joint dynamic program of
    paper 000, appendix B (:func:`memplan.baselines.remat_offload_dp.solve_remat_offload_dp`:
    memory-persistent sequences, top-level inputs offloaded, transfers in parts of one memory slot,
    ``N`` slots, sizes rounded up; time ``O(L^3 N^2 + L^2 N^3)``, memory ``O(L^2 N^2 + L N^3)``,
    :func:`memplan.baselines.remat_offload_dp.table_bytes`), rotor (re-materialization alone, paper
    004), DYNPROG (offloading alone, paper 001) and the least-memory schedule. So it is never slower
    than either problem's method alone at the same limit and bandwidth, and never infeasible above
    the minimum feasible memory (:mod:`memplan.baselines.remat_offload_min_memory`).
``exhaustive``
    The exact reference for tiny integer chains (``L <= 4`` or so): a breadth-first search over
    every operation sequence with any value offloaded in 1-byte parts, all starts on a common time
    grid (:func:`memplan.baselines.remat_offload_exhaustive.solve_exhaustive`), bounded by the
    portfolio's makespan: either it proves that schedule optimal in that space, or it finds the
    optimum.
    Exponential in ``L``.

Examples
--------
>>> import memplan
>>> chain, _ = memplan.load_instance("paper004_table2")
>>> sol = memplan.remat_offload.solve(chain, memory="85MiB", bandwidth="3GB/s", slots=50)
>>> sol.status.value, round(sol.objective * 1e3, 2), sol.peak_memory <= 85 * 2**20
('feasible', 41.11, True)
>>> {name: round(ms * 1e3, 2) for name, ms in sol.details["candidates"].items()}   # paper 000's N = 50 loses
{'rotor': 56.17, 'dynprog (offloading only)': 41.11, 'least-memory schedule': 78.72, 'joint DP (N = 50)': 42.73}
>>> round(chain.store_all_time() * 1e3, 2)     # compute only: nothing is faster
37.38
"""
from __future__ import annotations

import math
import time
from typing import Any

from memplan._frontend import (add_note, bandwidth_arg, budget, chain_arg, count_arg, finish, memory_arg,
                               method_arg, overheads_line, records_chain, solution_arg, solve_without_resident)
from memplan.baselines import offload as off_baselines
from memplan.baselines import remat_rotor
from memplan.baselines.remat_heuristics import min_memory, store_all
from memplan.baselines.remat_offload_dp import MAX_TABLE_BYTES, solve_remat_offload_dp, table_bytes
from memplan.baselines.remat_offload_exhaustive import solve_exhaustive
from memplan.baselines.remat_offload_min_memory import min_memory as ro_min_memory
from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.offload import peak_memory_no_offload
from memplan.models.offload import min_feasible_memory as off_min_memory
from memplan.models.remat_offload import (InvalidRematOffloadSchedule, RematOffloadSchedule, from_remat,
                                          offload_schedule_as_joint, simulate_remat_offload)
from memplan.models.solution import InputError, Solution, Status
from memplan.models.units import UnitError, fmt_bandwidth, fmt_bytes, fmt_memory, fmt_time, parse_bandwidth

PROBLEM = "remat-offload"
METHODS = ["dp", "exhaustive"]
DEFAULT_METHOD = "dp"
#: memory slots N of the DP when ``slots`` is not given (paper 000, appendix B.4)
DEFAULT_SLOTS = 50
#: larger ``slots`` values are clamped to this (the DP has O(L N^3) states); the Solution says so
MAX_SLOTS = 200
#: the exhaustive method's bounding DP runs in exact mode up to this memory limit (bytes), else N = 50
EXACT_BOUND_MEMORY = 500


# ----------------------------------------------------------------------------- inputs


def _bandwidth_arg(bandwidth: Any) -> float:
    """Bytes/s; None or 0 mean no link (re-materialization alone)."""
    if isinstance(bandwidth, (tuple, list)) or (isinstance(bandwidth, str) and ":" in bandwidth):
        raise InputError(f"{PROBLEM}: bandwidth={bandwidth!r} gives two link speeds; the joint DP takes one: give "
                         "one bandwidth (e.g. the slower direction's); --problem offload takes two")
    if bandwidth is None:
        return 0.0
    try:
        zero = (parse_bandwidth(bandwidth) if isinstance(bandwidth, str) else float(bandwidth)) == 0
    except (UnitError, TypeError, ValueError):
        zero = False            # bandwidth_arg below says what is wrong
    if zero and not isinstance(bandwidth, bool):
        return 0.0
    return float(bandwidth_arg(bandwidth, PROBLEM, required=True))


def _max_slots(L: int) -> int:
    """The largest N whose tables fit in MAX_TABLE_BYTES for L stages (0 if none)."""
    lo, hi = 0, 1
    while table_bytes(L, hi) <= MAX_TABLE_BYTES:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if table_bytes(L, mid) <= MAX_TABLE_BYTES else (lo, mid)
    return lo


def _discretization(chain: Chain, memory: float, slots: Any, exact: Any,
                    auto: bool = False) -> tuple[int, bool, str, dict]:
    """(N, exact, note for the report, details) after checking ``slots`` and ``exact``. ``auto`` (no
    slots given, method ``dp``): the tables' size is not checked here, :func:`_auto_slots` chooses N
    within it (a long chain gets fewer slots, not an error about a value the user never gave)."""
    if isinstance(exact, str) or exact not in (0, 1):       # True, False, 0, 1 (numpy's bools too)
        raise InputError(f"{PROBLEM}: exact={exact!r} must be True or False")
    exact = bool(exact)
    info: dict[str, Any] = {}
    if exact:
        if slots is not None:
            raise InputError(f"{PROBLEM}: exact=True uses one slot per byte, so slots={slots!r} would be ignored; "
                             "give one of them")
        if not chain.is_integer or memory != math.floor(memory):
            what = "the chain has float sizes" if not chain.is_integer else f"memory={fmt_bytes(memory)} B is not whole"
            raise InputError(f"{PROBLEM}: exact=True needs integer sizes and a whole memory limit ({what}); "
                             f"use slots=N instead (default {DEFAULT_SLOTS})")
        n = int(memory)
        need = table_bytes(chain.L, n)
        if need > MAX_TABLE_BYTES:
            raise InputError(f"{PROBLEM}: exact=True means N = {n} slots (one per byte), and the DP's tables would "
                             f"need {need / 1e9:.3g} GB for L = {chain.L} (at most {MAX_TABLE_BYTES / 1e9:.0f} GB); "
                             f"use slots=N instead (at most {min(MAX_SLOTS, _max_slots(chain.L))})")
        return n, True, "exact: one slot per byte", info
    if slots is None:
        n, note = DEFAULT_SLOTS, f"N = {DEFAULT_SLOTS} memory slots (paper 000's value; the slots option changes it)"
    else:
        try:
            n = count_arg(slots, "slots", PROBLEM, minimum=1)
        except (TypeError, ValueError) as e:
            if isinstance(e, InputError):
                raise
            raise InputError(f"{PROBLEM}: slots={slots!r} must be a whole number >= 1") from None
        note = f"N = {n} memory slots"
        if n > MAX_SLOTS:
            info.update(slots_requested=n, slots_clamped=True)
            note = (f"N = {MAX_SLOTS} memory slots (slots={n} clamped to {MAX_SLOTS}: the DP has O(L N^3) states, "
                    f"more slots are too slow)")
            n = MAX_SLOTS
    need = table_bytes(chain.L, n)
    if need > MAX_TABLE_BYTES and not auto:
        raise InputError(f"{PROBLEM}: slots={n}: the DP's tables would need {need / 1e9:.3g} GB for L = {chain.L} "
                         f"(at most {MAX_TABLE_BYTES / 1e9:.0f} GB); give slots <= {_max_slots(chain.L)}")
    return n, False, note, info


# ----------------------------------------------------------------------------- solve
@records_chain
def solve(chain: Chain, *, memory: float | str, bandwidth: float | str | None = None, method: str | None = None,
          time_limit: float | None = 60.0, slots: int | None = None, exact: bool = False,
          progress: ProgressFn | None = None) -> Solution:
    """Fastest training iteration that re-materializes and offloads within a memory limit (paper 000).

    Method ``dp`` returns the best replayed schedule of a portfolio (``details["candidates"]`` lists
    each candidate's makespan or why it has none, ``details["candidate"]`` the winner):

    - the joint DP of paper 000 with ``N`` slots (``slots``; None: the DP chooses, 50 then 100 and
      200 while the answer changes and the time limit allows each next run, about 8 times longer);
    - rotor, paper 004's persistent DP with its automatic discretization (a schedule without
      transfers is a re-materialization + offloading schedule), so ``dp`` is never slower than
      ``memplan.remat`` with method ``rotor``;
    - offloading only, DYNPROG of paper 001 (:func:`memplan.baselines.offload.dynprog`), its schedule
      converted (``F_all`` everywhere; each offload of ``x_j`` ends no earlier than the end of its
      forward reader, where paper 001 releases the memory anyway). Paper 001 reserves the seed
      gradient only when the loss's backward starts, this simulator holds it from the start: when
      the converted schedule does not fit for that reason, DYNPROG is run again with the limit
      lowered by the seed gradient's size (``details["candidates"]`` says so);
    - the least-memory schedule (:mod:`memplan.baselines.remat_offload_min_memory`), slow but valid
      down to the minimum feasible memory.

    Status OPTIMAL when proven: with a link, when the makespan is the compute time alone (no schedule
    is faster); without one, when rotor's optimum (among memory-persistent sequences) is proven and
    nothing beats it. Else FEASIBLE; INFEASIBLE only below the minimum feasible memory
    (``details["min_memory"]``: exact, or a proven bound where the message says so).

    Parameters
    ----------
    chain : Chain
        The chain (an :class:`~memplan.Instance` is accepted too: its chain is used).
    memory : float or str
        Device memory limit: bytes, or a string with units (``"85MiB"``).
    bandwidth : float or str, optional
        Host link bandwidth: bytes/s or ``"3GB/s"``. None or 0: no link, re-materialization alone.
    method : {'dp', 'exhaustive'}, optional
        :data:`DEFAULT_METHOD` (``'dp'``) when None; see the module docstring.
    time_limit : float or None
        Seconds for the whole call. A joint DP run stops between two rounds of its tables once the
        time is up (status TIME_LIMIT, with the best of the other candidates, or NO_SOLUTION when none
        has a schedule); the automatic choices (slots of the joint DP, rotor's refinement) stop
        before a run that would not fit in what is left. The
        exhaustive search gets what is left after the portfolio, and returns its best schedule with
        status TIME_LIMIT and the search's lower bound when it runs out.
    slots : int, optional
        Memory slots ``N`` of the joint DP (the exhaustive method's bounding DP included), honoured
        as given up to :data:`MAX_SLOTS` (larger values are clamped to it, and
        ``details["slots_clamped"]``, the slots note and the message say so). None: the DP chooses
        (see above); for ``exhaustive``, exact mode where the limit is a whole number of at most
        :data:`EXACT_BOUND_MEMORY` bytes. The other candidates choose their own discretization.
    exact : bool
        One slot per byte for the joint DP (integer sizes and a whole memory limit only; not with
        ``slots``).
    progress : callable, optional
        Receives one line per phase.

    Returns
    -------
    Solution
        ``objective`` (makespan, s) and ``peak_memory`` (bytes) replayed by
        :func:`memplan.models.remat_offload.simulate_remat_offload`; ``predicted`` the winning
        method's own value; ``schedule`` a :class:`~memplan.models.remat_offload.RematOffloadSchedule`;
        ``details``: ``candidate``, ``candidates``, ``slots_note``, ``offloaded`` (values sent to the
        host), ``recompute_time``, ``idle_time``, ``transfer_time``.

    Raises
    ------
    InputError
        A missing or malformed memory, bandwidth, method, slots or exact; tables too large for the
        slots; ``exhaustive`` on a chain with float sizes.

    Examples
    --------
    Paper 004's Table 2 chain at 85 MiB over a 3 GB/s link: three activations go to the host and
    nothing is recomputed; the iteration is 3% slower than storing everything, which needs 107 MiB:

    >>> import math, memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = memplan.remat_offload.solve(chain, memory="85MiB", bandwidth="3GB/s", slots=200)
    >>> round(sol.objective * 1e3, 2), sol.peak_memory <= 85 * 2**20, sol.details["candidate"]
    (38.42, True, 'joint DP (N = 200)')
    >>> [(o["value"], o["index"]) for o in sol.details["offloaded"]], sol.details["recompute_time"]
    ([('a', 0), ('abar', 1), ('abar', 2)], 0.0)

    At 90 MiB over a very slow link (1 KB/s) nothing is worth offloading: rotor's 47.42 ms wins,
    whatever the joint DP's slots:

    >>> [round(memplan.remat_offload.solve(chain, memory="90MiB", bandwidth="1KB/s", slots=n).objective * 1e3, 2)
    ...  for n in (50, 100)]
    [47.42, 47.42]

    Without the link it is re-materialization alone, which needs 82.1 MiB:

    >>> alone = memplan.remat_offload.solve(chain, memory="80MiB")
    >>> alone.status.value, round(alone.details["min_memory"] / 2**20, 2)
    ('infeasible', 82.12)
    """
    chain = chain_arg(chain, PROBLEM)
    method = method_arg(method, METHODS, DEFAULT_METHOD, PROBLEM)
    memory = memory_arg(memory, PROBLEM)
    beta = _bandwidth_arg(bandwidth)
    if chain.resident:
        return solve_without_resident(solve, chain, memory, dict(
            bandwidth=bandwidth, method=method, time_limit=time_limit, slots=slots, exact=exact,
            progress=progress))
    if chain.own_times:
        # the joint model (paper 000) times every forward u_f and charges no turn: solved, and replayed,
        # on the chain without them, and the message says so
        sol = solve(chain.papers_times(), memory=memory, bandwidth=bandwidth, method=method,
                    time_limit=time_limit, slots=slots, exact=exact, progress=progress)
        return add_note(sol, "the joint model (paper 000) times every forward with u_f and charges no turn: this "
                             "chain's no-grad forward times and turn cost (Chain.uf_ng, Chain.u_turn) are not used")
    if method == "exhaustive" and not chain.is_integer:
        raise InputError(f"{PROBLEM}: method='exhaustive' needs integer sizes (it is meant for tiny test chains); "
                         "use method='dp'")
    auto = slots is None and not exact and method == "dp"
    if method == "exhaustive" and slots is None and not exact:
        # the bounding DP's own choice (exact where small, else the default slots): a refusal of it names
        # what the caller can change, not an exact=True or a slots=50 the caller never gave
        exact_bound = (memory == math.floor(memory) and memory <= EXACT_BOUND_MEMORY
                       and table_bytes(chain.L, int(memory)) <= MAX_TABLE_BYTES)
        if not exact_bound and table_bytes(chain.L, DEFAULT_SLOTS) > MAX_TABLE_BYTES:
            raise InputError(f"{PROBLEM}: method='exhaustive' is meant for tiny chains: at L = {chain.L} its bounding "
                             f"DP's tables would need {table_bytes(chain.L, DEFAULT_SLOTS) / 1e9:.3g} GB with its "
                             f"default {DEFAULT_SLOTS} slots (at most {MAX_TABLE_BYTES / 1e9:.0f} GB); use method='dp', "
                             f"or give slots <= {_max_slots(chain.L)}")
        n, exact, note, info = _discretization(chain, memory, None, exact_bound)
    else:
        n, exact, note, info = _discretization(chain, memory, slots, exact, auto)
    if method == "exhaustive":
        note = f"the bounding DP: {note}"
    b = budget(time_limit, progress, PROBLEM)
    with b.active():
        replayed: dict = {}
        sol = _portfolio(chain, memory, beta, n, exact, auto, b, replayed)
        if auto and sol.details.get("slots_auto"):
            note = sol.details["slots_auto"]
        if method == "exhaustive":
            sol = _run_exhaustive(chain, memory, beta, sol, b)
        if sol.schedule is not None:
            _replay(chain, sol, beta, memory, replayed.get(id(sol.schedule)) if beta > 0 else None)
    sol.details["slots_note"] = note
    sol.details.update(info)
    if info.get("slots_clamped"):
        sol.message += f"; slots={info['slots_requested']} clamped to {MAX_SLOTS}"
    return finish(sol, b, memory=memory, bandwidth=beta)


#: seconds per stage of the DYNPROG candidate's fixed part (its first schedule, its validation and the
#: joint replay: 1.2-1.5 s at L = 3000 on 2 loaded cores), which its time share does not bound
_DYNPROG_SECONDS_PER_STAGE = 4e-4

#: predicted seconds of the joint DP per L^2 N^3 (measured: 7e-9 to 8.5e-9 on one core)
_DP_SECONDS = 1e-8


def _auto_slots(chain: Chain, b: Budget) -> list[int]:
    """The joint DP's slots to try when none are given: 50, 100, 200 (fewer when the chain is long:
    the tables fit in :data:`MAX_TABLE_BYTES` and the first run is predicted to take at most half of
    what is left, 4 slots at least). Empty when not even one slot's tables fit (tens of thousands of
    stages): the DP is not run."""
    L = chain.L
    left = b.remaining()
    most = _max_slots(L)
    out = [n for n in (50, 100, 200) if n <= most]
    if not out:
        out = [min(50, most)] if most >= 1 else []
    if out and math.isfinite(left) and _DP_SECONDS * L * L * out[0] ** 3 > 0.5 * left:
        out = [min(most, max(4, int((0.5 * left / (_DP_SECONDS * L * L)) ** (1 / 3))))]
    return out


def _portfolio(chain: Chain, memory: float, beta: float, n: int, exact: bool, auto: bool, b: Budget,
               replayed: dict | None = None) -> Solution:
    """Every candidate of :func:`solve`, replayed; the best one, saying which and what is proven.
    ``replayed`` receives ``{id(schedule): (schedule, replay)}`` of the candidates, so that the final
    replay of the one returned is not made twice (0.3 s at L = 3000)."""
    cands: list[tuple[float, str, Solution]] = []
    notes: dict[str, Any] = {}

    def consider(name: str, sol: Solution | None, why: str | None = None, rep=None) -> None:
        if sol is None or sol.schedule is None:
            notes[name] = why or (sol.message if sol is not None else "no schedule")
            return
        try:
            if rep is None:         # (a candidate already replayed with these arguments brings its replay)
                rep = simulate_remat_offload(chain, sol.schedule, beta or None, memory)
        except InvalidRematOffloadSchedule as e:
            notes[name] = f"its schedule does not replay within the limit: {e}"
            return
        notes[name] = rep.makespan
        cands.append((rep.makespan, name, sol))
        if replayed is not None:
            replayed[id(sol.schedule)] = (sol.schedule, rep)

    times: dict[str, float] = {}
    # rotor: re-materialization alone, automatic discretization
    t0 = time.perf_counter()
    rot = remat_rotor.persistent(chain, memory, time_limit=b.limit())   # stops once proven
    times["rotor"] = time.perf_counter() - t0
    b.log(f"rotor: {rot.status}" + (f", makespan {fmt_time(rot.objective)}" if rot.objective is not None else ""))
    consider("rotor", _as_joint(rot, "rotor") if rot.success else None, rot.message)
    # offloading only: DYNPROG
    if beta > 0:
        need = _DYNPROG_SECONDS_PER_STAGE * chain.L
        if cands and b.remaining() < need:
            # its first schedule's build and replays alone (no-wait schedule, validation, the joint
            # replay) took 1.2-1.5 s at L = 3000 whatever its share: a 1 s call took 1.8 s
            notes["dynprog (offloading only)"] = (f"not run: about {need:.2g} s at L = {chain.L}, more than the "
                                                  f"{b.remaining():.2g} s left")
            b.log(f"dynprog: {notes['dynprog (offloading only)']}")
        else:
            t0 = time.perf_counter()
            consider("dynprog (offloading only)", *_dynprog_candidate(chain, memory, beta, b))
            times["dynprog"] = time.perf_counter() - t0
    # with a link, no schedule beats the compute time alone (every operation once, no wait): a
    # candidate there is optimal, and the joint DP (seconds to minutes) is not run unless its slots
    # (or exact) were asked for
    at_compute = beta > 0 and min((c[0] for c in cands), default=math.inf) <= float(chain.store_all_time()) * (1 + 1e-12)
    # the least-memory schedule: a candidate with a link, and the minimum stated when nothing fits. Not
    # made where a candidate already takes the compute time alone (it cannot be faster), nor, with a
    # candidate in hand, once the time limit is reached (O(L) with its replay: 0.7 s at L = 3000)
    mm = None
    if beta > 0 and not at_compute and (not cands or not b.expired()):
        mm = ro_min_memory(chain, beta)
        if memory >= mm.value * (1 - 1e-12):
            consider("least-memory schedule", Solution(PROBLEM, "dp", Status.FEASIBLE, schedule=mm.schedule,
                                                       predicted=mm.makespan, message="least-memory schedule"))
    elif beta > 0:
        notes["least-memory schedule"] = ("not made: a candidate already takes the compute time alone" if at_compute
                                          else "not made: the time limit was reached")
    others = min((c[0] for c in cands), default=math.inf)
    at_bound = auto and at_compute           # the joint DP is then not run (unless slots were asked for)
    # the joint DP: as given, or 50, 100, 200 slots until its answer stops changing or matches another's
    t0 = time.perf_counter()
    dp_runs = [] if at_bound else _auto_slots(chain, b) if auto else [n]
    dps = []
    for k, nn in enumerate(dp_runs):
        if not _time_for(chain, nn, b) and (k or (auto and cands)):
            # the first run too, with slots of its own choosing and a candidate in hand: it would be
            # stopped unfinished (at L = 3000 it was started with no time left, and its tables took 0.9 s
            # to stop); slots given are run as given, stopping at the limit
            b.log(f"dp: N = {nn} skipped (the time limit would not allow it)")
            break
        d = _run_dp(chain, memory, beta, nn, exact, b)
        dps.append((nn, d))
        if d.details.get("stopped"):
            break                    # the time limit is reached
        if d.objective is not None and abs(d.objective - others) <= 1e-12 * d.objective:
            break                    # it matches another candidate
        if k and d.objective is not None and dps[-2][1].objective is not None and \
                abs(d.objective - dps[-2][1].objective) <= 1e-12 * d.objective:
            break                    # the answer stopped changing
    times["dp"] = time.perf_counter() - t0
    if not dps:
        why = ("not run: a candidate already takes the compute time alone, the least any schedule takes"
               if at_bound else
               f"not run: its tables would need {table_bytes(chain.L, 1) / 1e9:.3g} GB for L = {chain.L} even with "
               f"one slot (at most {MAX_TABLE_BYTES / 1e9:.0f} GB)" if not dp_runs else
               f"not run: N = {dp_runs[0]} slots would not end within the time limit")
        if not dp_runs:
            b.log(f"dp: {why}")
        dps = [(dp_runs[0] if dp_runs else 0, Solution(PROBLEM, "dp", Status.NO_SOLUTION, memory_limit=memory,
                                                       message=f"the joint DP was {why}",
                                                       details={"not_run": bool(dp_runs)}))]
    best_dp = None
    for nn, d in dps:
        if d.schedule is not None and (best_dp is None or d.objective < best_dp[1].objective):
            best_dp = (nn, d)
    dp_name = ("joint DP (exact)" if exact else "joint DP" if not dp_runs else
               f"joint DP (N = {best_dp[0] if best_dp else dps[-1][0]})")
    consider(dp_name, best_dp[1] if best_dp else dps[-1][1])
    details_base = {"candidates": notes, "bandwidth": beta}
    if auto and not dp_runs:
        details_base["slots_auto"] = "no slots: " + dps[0][1].message
    elif auto and dps[0][1].details.get("not_run"):
        details_base["slots_auto"] = f"N = {dps[0][0]} memory slots chosen; {dps[0][1].message}"
    elif auto:
        details_base["slots_auto"] = ("N = " + ", ".join(str(nn) for nn, _ in dps) + " memory slots (chosen by "
                                      "the DP: more while its answer changes, matches no other candidate and "
                                      "time allows)")
    last = best_dp[1] if best_dp else dps[-1][1]
    if not cands:
        return _infeasible(chain, memory, beta, mm if mm is not None else ro_min_memory(chain, beta), last,
                           details_base, times)
    cands.sort(key=lambda c: (c[0], not c[1].startswith("joint")))
    mk, name, sol = cands[0]
    sol = Solution(PROBLEM, "dp", sol.status, objective=mk, schedule=sol.schedule, memory_limit=memory,
                   predicted=sol.predicted, message=sol.message, times=times,
                   details={**(sol.details if name.startswith("joint") else {}), **details_base, "candidate": name})
    compute = float(chain.store_all_time())
    if beta > 0:
        sol.bound = compute
        if mk <= compute * (1 + 1e-12):
            sol.status = Status.OPTIMAL
            why = "optimal: the compute time alone (every operation once, no wait)"
        else:
            sol.status = Status.FEASIBLE
            why = "best of the portfolio (joint DP, rotor, DYNPROG, least-memory schedule)"
    else:
        proven = name == "rotor" and rot.status == Status.OPTIMAL
        sol.status = Status.OPTIMAL if proven else Status.FEASIBLE
        sol.bound = rot.bound if proven else None
        why = ("optimal among memory-persistent sequences (paper 004, Theorem 4.8; no link)" if proven else
               "best of the joint DP and rotor (no link)")
    stopped = [nn for nn, d in dps if d.details.get("stopped")]
    skipped = [nn for nn, d in dps if d.details.get("not_run")]
    if stopped and sol.status != Status.OPTIMAL:
        sol.status = Status.TIME_LIMIT
        why = (f"time limit: the joint DP with N = {stopped[0]} slots was stopped before its tables were "
               f"finished; {why}")
    elif skipped and sol.status != Status.OPTIMAL:
        sol.status = Status.TIME_LIMIT
        why = f"time limit: the joint DP (N = {skipped[0]} slots) was not run, it would not end in time; {why}"
    sol.message = f"{why}; schedule from {name}" + (f" ({last.details.get('discretization')})"
                                                     if name.startswith("joint") else "")
    if not name.startswith("joint"):
        sol.details["offloaded"] = _offloaded(chain, sol.schedule)
    return sol


def _time_for(chain: Chain, n: int, b: Budget) -> bool:
    left = b.remaining()
    return not math.isfinite(left) or _DP_SECONDS * chain.L ** 2 * n ** 3 <= 0.8 * left


def _as_joint(sol: Solution, what: str) -> Solution:
    """A re-materialization Solution as a joint one (the same sequence, no transfers)."""
    return Solution(PROBLEM, "dp", sol.status, schedule=from_remat(sol.schedule.ops), predicted=sol.objective,
                    bound=sol.bound, message=f"{what}: {sol.message}", times=dict(sol.times),
                    details={"rotor": sol.details.get("candidate"), "discretization": sol.details.get("discretization")})


#: the share of what is left that the portfolio's DYNPROG candidate may take: its Algorithm 1 stops
#: at its deadline (0.9 s on 300 stages, where 0.1 of 3 s would stop it before its last level)
_DYNPROG_SHARE = 0.3


def _dynprog_candidate(chain: Chain, memory: float, beta: float, b: Budget) -> tuple[Solution | None, str | None, Any]:
    """DYNPROG's schedule converted (:func:`offload_schedule_as_joint`) and its replay, or why there is
    none."""
    seed = float(chain.wd[chain.L + 1])
    tried = []
    for m in ([memory] + ([memory - seed] if seed > 0 and memory - seed > 0 else [])):
        if m < off_min_memory(chain) * (1 - 1e-12):
            tried.append(f"below offloading's minimum memory {fmt_memory(off_min_memory(chain))}")
            break
        if m >= peak_memory_no_offload(chain):
            tried.append("nothing to offload (rotor's store-all covers it)")
            break
        sol = off_baselines.dynprog(chain, m, beta, time_limit=b.limit(share=_DYNPROG_SHARE))
        if not sol.success:
            tried.append(sol.message)
            continue
        joint = offload_schedule_as_joint(chain, sol.schedule, beta)
        try:
            rep = simulate_remat_offload(chain, joint, beta, memory)
        except InvalidRematOffloadSchedule as e:
            tried.append(f"at {fmt_memory(m)} its converted schedule is invalid here ({e})")
            continue
        note = "" if m == memory else (f"; run with the limit lowered by the seed gradient ({fmt_bytes(seed)} B), which this "
                                       "simulator holds from the start and paper 001 only from the loss's backward")
        b.log(f"dynprog: makespan {fmt_time(sol.objective)} (paper 001's model){note}")
        return Solution(PROBLEM, "dp", Status.FEASIBLE, schedule=joint, predicted=sol.objective,
                        message=f"DYNPROG (offloading only): {sol.message}{note}"), None, rep
    return None, "; ".join(tried) or "no schedule", None


def _offloaded(chain: Chain, sched: RematOffloadSchedule) -> list[dict]:
    """Values sent to the host by a schedule (index, a or abar, bytes of its largest offload)."""
    out: dict[int, float] = {}
    for t in sched.transfers:
        if t.kind == "offload":
            out[t.index] = max(out.get(t.index, 0.0), t.nbytes)
    res = []
    for l, nb in sorted(out.items()):
        res.append({"index": l, "value": "abar" if l > 0 and chain.wabar[l] != chain.wa[l] and
                    nb > chain.wa[l] * (1 + 1e-12) else "a", "bytes": float(nb)})
    return res


def _infeasible(chain: Chain, memory: float, beta: float, mm, last: Solution, details: dict,
                times: dict) -> Solution:
    """No candidate fits: INFEASIBLE below the proven minimum, else NO_SOLUTION (the message says why)."""
    what = "with offloading over this link" if beta > 0 else "without a link (re-materialization alone)"
    details = {**details, "min_memory": mm.value}
    if memory < mm.lower * (1 - 1e-12):
        need = mm.value if mm.exact else mm.lower
        details["min_memory"] = need
        if mm.exact:
            msg = (f"no schedule fits in {fmt_memory(memory)} {what}: the minimum is {fmt_bytes(need)} B "
                   f"({fmt_memory(need)})")
        else:
            msg = (f"no schedule fits in {fmt_memory(memory)} {what}: none fits below {fmt_bytes(mm.lower)} B (a proven "
                   f"bound) and one fits in {fmt_bytes(mm.value)} B")
        if beta > 0:
            alone = min_memory(chain)
            msg += f"; re-materialization alone needs {fmt_bytes(alone)} B"
        return Solution(problem=PROBLEM, method="dp", status=Status.INFEASIBLE, memory_limit=memory,
                        message=msg, times=times, details={**last.details, **details})
    msg = (f"no candidate found a schedule within {fmt_memory(memory)} {what}; one fits in {fmt_bytes(mm.value)} B and "
           f"none below {fmt_bytes(mm.lower)} B")
    if last.details.get("stopped"):
        msg = f"time limit: {last.message}; {msg}"
    return Solution(problem=PROBLEM, method="dp", status=Status.NO_SOLUTION, memory_limit=memory, message=msg,
                    times=times, details={**last.details, **details})


def _run_dp(chain: Chain, memory: float, beta: float, n: int, exact: bool, b: Budget) -> Solution:
    what = "exact (one slot per byte)" if exact else f"N = {n} slots"
    b.log(f"dp: joint DP of paper 000, {what}, bandwidth {fmt_bandwidth(beta) if beta else '0'}")
    sol = solve_remat_offload_dp(chain, memory, beta, slots=n, exact=exact, time_limit=b.limit(),
                                 progress=lambda line: b.log(f"dp: N = {n}: {line}"))
    if sol.details.get("stopped"):
        b.log(f"dp: stopped at the time limit, its tables unfinished ({sol.times.get('total', 0.0):.3g}s)")
    elif sol.objective is None:
        b.log(f"dp: {sol.status} ({sol.times.get('total', 0.0):.3g}s)")
    else:
        b.log(f"dp: makespan {fmt_time(sol.objective)}, {len(sol.details.get('offloaded') or [])} values offloaded "
              f"({sol.times.get('total', 0.0):.3g}s)")
    return sol


def _run_exhaustive(chain: Chain, memory: float, beta: float, dp: Solution, b: Budget) -> Solution:
    """The exhaustive search bounded by the portfolio's makespan; the better of the two, with what is
    proven."""
    if dp.status == Status.INFEASIBLE:
        # below the proven minimum (details["min_memory"]): nothing to search; the search's own
        # INFEASIBLE had been returned without the minimum
        dp.method = "exhaustive"
        return dp
    ub = dp.objective
    if ub is not None and dp.schedule is not None and ub <= float(chain.store_all_time()) * (1 + 1e-12):
        # the compute time alone, the least any schedule takes (every operation once, no wait): proven,
        # nothing to search (the search had run past a 1 s limit by 2 s at L = 300 to find nothing)
        dp.method = "exhaustive"
        dp.status, dp.bound = Status.OPTIMAL, ub
        dp.message += "; the exhaustive search is not run: nothing is faster than the compute time alone"
        return dp
    limit = b.limit(None)
    b.log(f"exhaustive: searching below {fmt_time(ub) if ub is not None else 'any makespan'}"
          + (f" ({limit:.3g}s left)" if limit is not None else ""))
    try:
        sol = solve_exhaustive(chain, memory, beta, upper_bound=ub, time_limit=limit)
    except ValueError as e:      # operation times without a common grid
        raise InputError(f"{PROBLEM}: method='exhaustive': {e}; use method='dp'") from None
    search = sol.times.get("total", 0.0)
    b.log(f"exhaustive: {sol.status} after {search:.3g}s, {sol.details.get('states')} states")
    if sol.details.get("proven_optimal_at_upper_bound") and dp.schedule is not None:
        # nothing faster than the DP's schedule exists in the searched space: it is optimal
        dp.method = "exhaustive"
        dp.status = Status.OPTIMAL
        dp.bound = dp.objective
        dp.times = {**dp.times, "search": search}
        dp.details.update(search_states=sol.details.get("states"), grid=sol.details.get("grid"))
        dp.message = ("optimal: the exhaustive search (every sequence, any value offloaded in 1-byte parts, starts "
                      f"on a {sol.details.get('grid'):.4g}s grid) finds nothing faster than the schedule of "
                      f"{dp.details.get('candidate', 'the joint DP')}")
        return _whole_bytes_only(dp, memory)
    if sol.status == Status.TIME_LIMIT and sol.schedule is None and dp.schedule is not None:
        # keep the DP's schedule; the search proved that nothing ends before the time it reached
        dp.method = "exhaustive"
        dp.status = Status.TIME_LIMIT
        # every operation runs at least once on the one compute stream: store-all time is a bound too
        dp.bound = max(sol.bound or 0.0, float(chain.store_all_time()))
        dp.times = {**dp.times, "search": search}
        dp.details.update(search_states=sol.details.get("states"), grid=sol.details.get("grid"))
        dp.message = (f"the exhaustive search stopped (time or state limit) at t = {sol.bound:.6g}s without a schedule "
                      "faster than the portfolio's, which is returned (the optimum lies between the bound and it)")
        return dp
    if sol.objective is not None and ub is not None:
        sol.details["dp_makespan"] = ub
        sol.message += f"; the portfolio's makespan is {ub:.6g}s" + (
            f" ({(ub / sol.objective - 1) * 100:.2f}% above)" if sol.objective > 0 else "")
    sol.times = {**dp.times, "search": search}
    if sol.status == Status.INFEASIBLE:
        # above the proven minimum nothing fits in the searched space (whole bytes, the time grid), which
        # proves nothing for every schedule: the portfolio's answer, with the minimum it knows
        sol.status = Status.NO_SOLUTION
        sol.details.update({k: v for k, v in dp.details.items() if k.startswith("min_memory")})
        sol.message += f" in the searched space; {dp.message}" if dp.message else " in the searched space"
    return _whole_bytes_only(sol, memory)


def _whole_bytes_only(sol: Solution, memory: float) -> Solution:
    """The search runs within ``floor(memory)`` bytes: below a limit that is not whole, a schedule that
    peaks in the fraction above it (the joint DP's transfer parts are slots, not bytes) is outside
    the searched space, so nothing is proven optimal there (method ``dp`` found 12.2733 s at 20.5 B,
    peak 20.205 B, where the search's 12.3333 s had been called optimal)."""
    if sol.status != Status.OPTIMAL or memory == math.floor(memory):
        return sol
    sol.status = Status.FEASIBLE
    sol.message += (f" within {math.floor(memory):.0f} B; not proven optimal at the {fmt_bytes(memory)} B limit, "
                    "whose fraction of a byte above that the search leaves out")
    return sol


def _replay(chain: Chain, sol: Solution, beta: float, memory: float, known: tuple | None = None) -> None:
    """The final replay: objective and peak are the simulator's (it raises on an invalid schedule).
    ``known``: ``(schedule, replay)`` of a candidate replayed with the same arguments; its replay is
    used when it is this very schedule."""
    rep = known[1] if known is not None and known[0] is sol.schedule else \
        simulate_remat_offload(chain, sol.schedule, beta, memory)
    sol.objective = rep.makespan
    sol.peak_memory = rep.peak_memory
    sol.details.update(recompute_time=rep.recompute_time, idle_time=rep.idle_time, idle_data=rep.idle_data,
                       offloaded_bytes=rep.offloaded_bytes, transfer_time=rep.transfer_time)


# ----------------------------------------------------------------------------- output
def report(solution: Solution, chain: Chain) -> str:
    """The text ``memplan solve --problem remat-offload`` prints.

    Parameters
    ----------
    solution : Solution
        A result of :func:`solve`.
    chain : Chain
        The chain it was solved for (for the store-all comparison).

    Returns
    -------
    str
        Status, slots, makespan against store-all, peak, recomputation, idle time, offloaded values,
        times and the operation sequence.

    Examples
    --------
    >>> import memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = solve(chain, memory="85MiB", bandwidth="3GB/s")
    >>> print(report(sol, chain).splitlines()[3])
    makespan     38.4 ms  (+2.8% vs store-all 37.4 ms; throughput 26.03 iterations/s)
    """
    solution, chain = solution_arg(solution, chain, PROBLEM, "report")
    sol = solution
    base = store_all(chain)
    beta = sol.bandwidth if sol.bandwidth is not None else sol.details.get("bandwidth")
    lines = [f"{chain.name}: L = {chain.L}, problem remat-offload, method {sol.method}, memory limit "
             f"{fmt_memory(sol.memory_limit)}, bandwidth {fmt_bandwidth(beta) if beta else '0 (no offloading)'}",
             f"status       {sol.status}: {sol.message}"]
    if sol.details.get("slots_note"):
        lines.append(f"slots        {sol.details['slots_note']}")
    if sol.objective is None:
        if sol.bound is not None:
            lines.append(f"bound        {fmt_time(sol.bound)}")
        return "\n".join(lines)
    over = (sol.objective / base.objective - 1) * 100 if base.objective else 0.0
    lines += [
        f"makespan     {fmt_time(sol.objective)}  ({over:+.1f}% vs store-all {fmt_time(base.objective)}; "
        f"throughput {1 / sol.objective:.4g} iterations/s)" if sol.objective > 0 else
        f"makespan     {fmt_time(sol.objective)}",
        f"peak memory  {fmt_memory(sol.peak_memory)}  (store-all {fmt_memory(base.peak_memory)})",
    ]
    lines += overheads_line(chain, lambda: simulate_remat_offload(chain, sol.schedule, beta or None,
                                                                 one_overhead=True).peak_memory)
    if sol.predicted is not None:
        lines.append(f"predicted    {fmt_time(sol.predicted)} (the method's own value; replayed "
                     f"{'equal' if abs(sol.predicted - sol.objective) <= 1e-9 * max(1.0, sol.objective) else 'DIFFERENT'})")
    d = sol.details
    if d.get("recompute_time") is not None:
        lines.append(f"recompute    {fmt_time(d['recompute_time'])}"
                     + (f"  ({100 * d['recompute_time'] / sol.objective:.1f}% of the makespan)" if sol.objective > 0
                        else ""))
    if d.get("idle_time") is not None:
        lines.append(f"idle         {fmt_time(d['idle_time'])} waiting for transfers "
                     f"({fmt_time(d.get('idle_data', 0.0))} of it for prefetched inputs, the rest for memory "
                     f"freed by offloads or reserved by prefetches)")
    off = d.get("offloaded") or []
    if off:
        what = ", ".join(f"{o['value']}^{o['index']} ({fmt_memory(o['bytes'])})" for o in off)
        lines.append(f"offloaded    {len(off)} values, {fmt_memory(d.get('offloaded_bytes', 0.0))}: {what}")
        if d.get("transfer_time") is not None:
            lines.append(f"link busy    {fmt_time(d['transfer_time'])} (offload + prefetch)")
    else:
        lines.append("offloaded    nothing")
    if sol.bound is not None:
        lines.append(f"bound        {fmt_time(sol.bound)}")
    lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in sol.times.items()))
    sched = sol.schedule
    if sched is not None:
        lines.append(f"sequence     ({len(sched)} operations)")
        lines.append("  " + sched.notation())
    return "\n".join(lines)


def gantt(solution: Solution, chain: Chain, path: str) -> None:
    """Draw the compute stream, the link (offload and prefetch parts) and the memory over time.

    The times are the simulator's replay of ``solution.schedule`` (under ``solution.bandwidth`` and
    ``solution.memory_limit``); the image goes to ``path`` (any format matplotlib writes).

    Parameters
    ----------
    solution : Solution
        A result of :func:`solve` with a schedule.
    chain : Chain
        The chain it was solved for.
    path : str or Path
        The image file to write.

    Examples
    --------
    >>> import os, tempfile, memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = solve(chain, memory="85MiB", bandwidth="3GB/s")
    >>> path = os.path.join(tempfile.mkdtemp(), "ro.png")
    >>> gantt(sol, chain, path)
    >>> os.path.getsize(path) > 10_000
    True
    """
    solution, chain = solution_arg(solution, chain, PROBLEM, "gantt")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sol = solution
    if sol.schedule is None:
        raise InputError(f"{PROBLEM}: gantt: the solution has no schedule ({sol.status}: {sol.message})")
    beta = sol.bandwidth if sol.bandwidth is not None else sol.details.get("bandwidth")
    rep = simulate_remat_offload(chain, sol.schedule, beta or None, sol.memory_limit)
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(12, 5), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    colors = {"F_all": "C0", "F_ck": "C1", "F_none": "C2", "B": "C3"}
    for (op, l), s, e in zip(sol.schedule.ops, rep.op_start, rep.op_end):
        ax.barh(1, e - s, left=s, color=colors[op], edgecolor="k", linewidth=0.3)
        if e - s > rep.makespan / 80:
            ax.text((s + e) / 2, 1, str(l), ha="center", va="center", fontsize=6)
    for t, s, e in zip(sol.schedule.transfers, rep.transfer_start, rep.transfer_end):
        ax.barh(0, e - s, left=s, color="C4" if t.kind == "offload" else "C5", edgecolor="k", linewidth=0.2)
    ax.set_yticks([0, 1], ["link", "compute"])
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in list(colors.values()) + ["C4", "C5"]]
    ax.legend(handles, list(colors) + ["offload", "prefetch"], ncol=6, fontsize=7, loc="upper right")
    ts = [t for t, _ in rep.memory_trace] + [rep.makespan]
    ms = [m / 2**20 for _, m in rep.memory_trace]
    axm.step(ts[:-1], ms, where="post", color="k", linewidth=0.8)
    if sol.memory_limit:
        axm.axhline(sol.memory_limit / 2**20, color="r", linestyle="--", linewidth=0.8, label="limit")
        axm.legend(fontsize=7)
    axm.set_ylabel("memory (MiB)")
    axm.set_xlabel("time (s)")
    ax.set_title(f"{chain.name}: {sol.method}, makespan {fmt_time(sol.objective)}, idle {fmt_time(rep.idle_time)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
