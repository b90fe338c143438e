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
    The joint dynamic program of paper 000, appendix B
    (:func:`memplan.baselines.remat_offload_dp.solve_remat_offload_dp`): memory-persistent
    sequences, top-level inputs offloaded, transfers in parts of one memory slot. Memory is counted
    in ``N`` slots (``slots``; paper 000's ``N = 50`` by default, at most :data:`MAX_SLOTS`; sizes are
    rounded up, so the plans never exceed the limit). Time ``O(L^3 N^2 + L^2 N^3)``, memory
    ``O(L^2 N^2 + L N^3)`` (:func:`memplan.baselines.remat_offload_dp.table_bytes`). Without a link
    (``bandwidth`` None or 0) it is paper 004's persistent DP with the same slots.
``exhaustive``
    The exact reference for tiny integer chains (``L <= 4`` or so): a breadth-first search over
    every operation sequence with any value offloaded in 1-byte parts, all starts on a common time
    grid (:func:`memplan.baselines.remat_offload_exhaustive.solve_exhaustive`), bounded by the
    DP's makespan: either it proves the DP's schedule optimal in that space, or it finds the optimum.
    Exponential in ``L``.

Examples
--------
>>> import memplan
>>> chain, _ = memplan.load_instance("paper004_table2")
>>> sol = memplan.remat_offload.solve(chain, memory="85MiB", bandwidth="3GB/s")
>>> sol.status.value, round(sol.objective * 1e3, 2), sol.peak_memory <= 85 * 2**20
('feasible', 42.73, True)
>>> round(chain.store_all_time() * 1e3, 2)     # compute only: nothing is faster
37.38
"""
from __future__ import annotations

import math
from typing import Any

from memplan._frontend import bandwidth_arg, budget, count_arg, finish, memory_arg, method_arg
from memplan.baselines.remat_heuristics import store_all
from memplan.baselines.remat_offload_dp import MAX_TABLE_BYTES, solve_remat_offload_dp, table_bytes
from memplan.baselines.remat_offload_exhaustive import solve_exhaustive
from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.remat_offload import simulate_remat_offload
from memplan.models.solution import InputError, Solution, Status
from memplan.models.units import UnitError, fmt_bandwidth, fmt_memory, fmt_time, parse_bandwidth

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
def _chain_arg(chain: Any) -> Chain:
    if isinstance(chain, tuple) and len(chain) == 2 and isinstance(chain[0], Chain):
        chain = chain[0]        # an Instance (chain, platform)
    if not isinstance(chain, Chain):
        raise InputError(f"{PROBLEM}: chain must be a Chain (e.g. memplan.load_instance(name).chain), "
                         f"got {type(chain).__name__}")
    return chain


def _bandwidth_arg(bandwidth: Any) -> float:
    """Bytes/s; None or 0 mean no link (re-materialization alone)."""
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


def _discretization(chain: Chain, memory: float, slots: Any, exact: Any) -> tuple[int, bool, str, dict]:
    """(N, exact, note for the report, details) after checking ``slots`` and ``exact``."""
    if isinstance(exact, str) or exact not in (0, 1):       # True, False, 0, 1 (numpy's bools too)
        raise InputError(f"{PROBLEM}: exact={exact!r} must be True or False")
    exact = bool(exact)
    info: dict[str, Any] = {}
    if exact:
        if slots is not None:
            raise InputError(f"{PROBLEM}: exact=True uses one slot per byte, so slots={slots!r} would be ignored; "
                             "give one of them")
        if not chain.is_integer or memory != math.floor(memory):
            what = "the chain has float sizes" if not chain.is_integer else f"memory={memory:.6g} B is not whole"
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
    if need > MAX_TABLE_BYTES:
        raise InputError(f"{PROBLEM}: slots={n}: the DP's tables would need {need / 1e9:.3g} GB for L = {chain.L} "
                         f"(at most {MAX_TABLE_BYTES / 1e9:.0f} GB); give slots <= {_max_slots(chain.L)}")
    return n, False, note, info


# ----------------------------------------------------------------------------- solve
def solve(chain: Chain, *, memory: float | str, bandwidth: float | str | None = None, method: str | None = None,
          time_limit: float | None = 60.0, slots: int | None = None, exact: bool = False,
          progress: ProgressFn | None = None) -> Solution:
    """Fastest training iteration that re-materializes and offloads within a memory limit (paper 000).

    Parameters
    ----------
    chain : Chain
        The chain (an :class:`~memplan.Instance` is accepted too: its chain is used).
    memory : float or str
        Device memory limit: bytes, or a string with units (``"85MiB"``).
    bandwidth : float or str, optional
        Host link bandwidth: bytes/s or ``"3GB/s"``. None or 0: no link, re-materialization alone
        (the ``dp`` method is then paper 004's persistent DP).
    method : {'dp', 'exhaustive'}, optional
        :data:`DEFAULT_METHOD` (``'dp'``) when None; see the module docstring.
    time_limit : float or None
        Seconds for the whole call. The DP runs to its end (its tables cannot be interrupted); the
        exhaustive search gets what is left after it, and returns the DP's schedule with status
        TIME_LIMIT and the search's lower bound when it runs out.
    slots : int, optional
        Memory slots ``N`` of the DP (the exhaustive method's bounding DP included). None: paper
        000's ``N = 50`` (:data:`DEFAULT_SLOTS`), or for ``exhaustive`` exact mode where the limit is
        a whole number of at most :data:`EXACT_BOUND_MEMORY` bytes. Values above :data:`MAX_SLOTS`
        are clamped to it (``details["slots_clamped"]``, and the slots note and message say so).
    exact : bool
        One slot per byte (integer sizes and a whole memory limit only; not with ``slots``).
    progress : callable, optional
        Receives one line per phase.

    Returns
    -------
    Solution
        ``objective`` (makespan, s) and ``peak_memory`` (bytes) replayed by
        :func:`memplan.models.remat_offload.simulate_remat_offload`; ``predicted`` the DP's own
        value; ``schedule`` a :class:`~memplan.models.remat_offload.RematOffloadSchedule`;
        ``details``: ``slots_note``, ``offloaded`` (values sent to the host), ``recompute_time``,
        ``idle_time``, ``transfer_time``. Status FEASIBLE (best within the DP's model), OPTIMAL (no
        link, or proven by the exhaustive search), TIME_LIMIT, or INFEASIBLE with
        ``details["min_memory"]`` (the least memory of re-materialization alone) when no schedule
        of the model fits.

    Raises
    ------
    InputError
        A missing or malformed memory, bandwidth, method, slots or exact; tables too large for the
        slots; ``exhaustive`` on a chain with float sizes.

    Examples
    --------
    Paper 004's Table 2 chain at 85 MiB over a 3 GB/s link (paper 000's N = 50 slots): three
    activations go to the host and nothing is recomputed; the iteration is 14% slower than storing
    everything, which needs 107 MiB:

    >>> import math, memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = memplan.remat_offload.solve(chain, memory="85MiB", bandwidth="3GB/s")
    >>> round(sol.objective * 1e3, 2), sol.peak_memory <= 85 * 2**20, math.isclose(sol.objective, sol.predicted)
    (42.73, True, True)
    >>> [(o["value"], o["index"]) for o in sol.details["offloaded"]], sol.details["recompute_time"]
    ([('a', 0), ('abar', 1), ('abar', 2)], 0.0)

    Without the link nothing fits in 85 MiB with 50 slots (sizes are rounded up to 1.7 MiB slots);
    re-materialization alone needs 82.1 MiB exactly:

    >>> alone = memplan.remat_offload.solve(chain, memory="85MiB")
    >>> alone.status.value, round(alone.details["min_memory"] / 2**20, 2)
    ('infeasible', 82.12)

    At 90 MiB it is paper 004's persistent DP (rotor) with the same slots:

    >>> alone = memplan.remat_offload.solve(chain, memory="90MiB")
    >>> alone.status.value, round(alone.objective * 1e3, 2)
    ('optimal', 56.17)
    >>> from memplan.baselines.remat_rotor import persistent
    >>> persistent(chain, 90 * 2**20, slots=50).objective == alone.objective
    True
    """
    chain = _chain_arg(chain)
    method = method_arg(method, METHODS, DEFAULT_METHOD, PROBLEM)
    memory = memory_arg(memory, PROBLEM)
    beta = _bandwidth_arg(bandwidth)
    if method == "exhaustive" and not chain.is_integer:
        raise InputError(f"{PROBLEM}: method='exhaustive' needs integer sizes (it is meant for tiny test chains); "
                         "use method='dp'")
    if method == "exhaustive" and slots is None and not exact:
        exact_bound = memory == math.floor(memory) and memory <= EXACT_BOUND_MEMORY
        n, exact, note, info = _discretization(chain, memory, None, exact_bound)
    else:
        n, exact, note, info = _discretization(chain, memory, slots, exact)
    if method == "exhaustive":
        note = f"the bounding DP: {note}"
    b = budget(time_limit, progress, PROBLEM)
    with b.active():
        dp = _run_dp(chain, memory, beta, n, exact, b)
        if method == "dp":
            sol = dp
        else:
            sol = _run_exhaustive(chain, memory, beta, dp, b)
        if sol.schedule is not None:
            _replay(chain, sol, beta, memory)
    sol.details["slots_note"] = note
    sol.details.update(info)
    if info.get("slots_clamped"):
        sol.message += f"; slots={info['slots_requested']} clamped to {MAX_SLOTS}"
    return finish(sol, b, memory=memory, bandwidth=beta)


def _run_dp(chain: Chain, memory: float, beta: float, n: int, exact: bool, b: Budget) -> Solution:
    what = "exact (one slot per byte)" if exact else f"N = {n} slots"
    b.log(f"dp: joint DP of paper 000, {what}, bandwidth {fmt_bandwidth(beta) if beta else '0'}")
    sol = solve_remat_offload_dp(chain, memory, beta, slots=n, exact=exact)
    if sol.objective is None:
        b.log(f"dp: {sol.status} ({sol.times.get('total', 0.0):.3g}s)")
    else:
        b.log(f"dp: makespan {fmt_time(sol.objective)}, {len(sol.details.get('offloaded') or [])} values offloaded "
              f"({sol.times.get('total', 0.0):.3g}s)")
    return sol


def _run_exhaustive(chain: Chain, memory: float, beta: float, dp: Solution, b: Budget) -> Solution:
    """The exhaustive search bounded by the DP's makespan; the better of the two, with what is proven."""
    ub = dp.objective
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
                      f"on a {sol.details.get('grid'):.4g}s grid) finds nothing faster than the joint DP's schedule")
        return dp
    if sol.status == Status.TIME_LIMIT and sol.schedule is None and dp.schedule is not None:
        # keep the DP's schedule; the search proved that nothing ends before the time it reached
        dp.method = "exhaustive"
        dp.status = Status.TIME_LIMIT
        # every operation runs at least once on the one compute stream: store-all time is a bound too
        dp.bound = max(sol.bound or 0.0, float(chain.store_all_time()))
        dp.times = {**dp.times, "search": search}
        dp.details.update(search_states=sol.details.get("states"), grid=sol.details.get("grid"))
        dp.message = (f"the exhaustive search stopped (time or state limit) at t = {sol.bound:.6g}s without a schedule "
                      "faster than the joint DP's, which is returned (the optimum lies between the bound and it)")
        return dp
    if sol.objective is not None and ub is not None:
        sol.details["dp_makespan"] = ub
        sol.message += f"; the joint DP's makespan is {ub:.6g}s ({(ub / sol.objective - 1) * 100:.2f}% above)"
    sol.times = {**dp.times, "search": search}
    return sol


def _replay(chain: Chain, sol: Solution, beta: float, memory: float) -> None:
    """The final replay: objective and peak are the simulator's (it raises on an invalid schedule)."""
    rep = simulate_remat_offload(chain, sol.schedule, beta, memory)
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
    makespan     42.7 ms  (+14.3% vs store-all 37.4 ms; throughput 23.4 iterations/s)
    """
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
    if sol.predicted is not None:
        lines.append(f"predicted    {fmt_time(sol.predicted)} (the method's own value; replayed "
                     f"{'equal' if abs(sol.predicted - sol.objective) <= 1e-9 * max(1.0, sol.objective) else 'DIFFERENT'})")
    d = sol.details
    if d.get("recompute_time") is not None:
        lines.append(f"recompute    {fmt_time(d['recompute_time'])}  "
                     f"({100 * d['recompute_time'] / sol.objective:.1f}% of the makespan)")
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
