"""Exact MILP of Problem 1 of paper 001 (offloading with whole, non-interruptible transfers in any order).

Paper 001 proves Problem 1 strongly NP-complete (Theorem 1) and only studies relaxations; this model
gives the exact optimum for small chains. Memory model and indices: :mod:`models.offload` (paper
operations ``F_i``, ``B_i``, activations ``x_j``, ``j = 0..L``; computation position ``q = i`` for
``F_i`` and ``q = 2L+1-i`` for ``B_i``).

Time model
----------
* ``s_q``: start of computation ``q``; ``c_seq``: ``s_{q+1} >= s_q + u_q`` (the data dependencies of
  Fig. 1 force the order ``F_0..F_L, B_L..B_0``); the makespan ``C = s_{2L+1} + u_{B_0}`` is minimised.
* ``y_j`` = 1 when ``x_j`` is offloaded; ``o_j``, ``p_j`` the starts of its offload and prefetch, each
  lasting ``c_j y_j`` with ``c_j = |x_j|/beta`` (a link of two speeds, memplan's extension: the offload
  lasts ``|x_j|/beta_out`` and the prefetch ``|x_j|/beta_in``; below, ``c_j`` is the offload's
  duration wherever an offload is meant and the prefetch's wherever a prefetch is, and ``2 c_j`` their
  sum): ``c_ready`` (offload after ``F_{j-1}``),
  ``c_prefetch_after`` (prefetch after the offload), ``c_prefetch_before`` (prefetch ends before
  ``B_j``). A non-offloaded ``x_j`` gets zero-length transfers, which constrain nothing.
* ``c_link_*``: disjunctive ordering of the single link (section 3.1, one transfer at a time): one
  binary ``z`` per pair of transfers of different activations, relaxed by big-M when either activation
  is not offloaded. Any order is allowed (``phased=True`` forces all offloads before all prefetches,
  the class of orders the no-wait builder and :func:`baselines.offload.exhaustive` enumerate).

Memory, checked at the instants where it can grow
-------------------------------------------------
Memory grows only when a computation starts or a prefetch starts (an offload only frees memory when it
ends), so it is enough to bound it at those instants.

* Windows: the time line is cut into ``run q = [s_q, s_q + u_q]`` and ``idle q = [s_q + u_q,
  s_{q+1}]``. Each window has a *static* memory (items whose presence does not depend on transfers:
  activations that are needed there or absent there, gradients ``y``, temporary memory ``ex``) and a
  set of *variable* activations: ``x_j`` is variable from ``idle F_j`` to ``idle B_{j+1}`` (it may be
  on the host then), forced otherwise while alive (:func:`window_memory`).
* ``v_{j,w}`` (binary, ``sum_w v_{j,w} = y_j``): the prefetch of ``x_j`` starts in window ``w``
  (``c_window_lo/hi`` place ``p_j`` in it); ``b_{j,q} = sum_{w < run q} v_{j,w}`` says that it started
  no later than ``s_q``.
* ``a_{j,q}`` (binary): the first copy of ``x_j`` is still there when ``q`` starts; ``a = 0`` forces
  ``o_j + c_j <= s_q`` (``c_release``).
* ``c_mem_compute``: at ``s_q``, static + ``sum_{j variable} |x_j| (1 - y_j + a_{j,q} + b_{j,q}) <= M``.
* ``c_mem_prefetch``: when the prefetch of ``x_k`` starts in window ``w`` (``v_{k,w} = 1``), static(w) +
  ``|x_k|`` + ``sum_{j variable} |x_j| (1 - y_j + [P_k before O_j] + [P_j before P_k]) <= M``: on a single
  link, ``x_j``'s first copy is still there iff its offload comes after ``P_k``, and its second copy is
  reserved iff its prefetch came before ``P_k`` -- both are link-order binaries.

Why it is exact. Every valid schedule gives a feasible point with the same makespan (take ``y``,
times, ``z`` from the start order on the link, ``v`` from the window containing each prefetch start --
an idle window whenever the start lies in one, ties at ``s_q`` or at the end of ``q`` included -- and
``a`` from whether the offload ended by ``s_q``; a non-offloaded ``x_j`` gets its zero-length offload
first and its prefetch last on the link, so that its link-order terms vanish); every feasible point is a valid schedule, because the constraints above are the
validator's rules written at the only instants where memory can exceed the limit (ties are counted on
the conservative side: ``a``/``b``/link terms may only over-count). Big-M constants: ``H`` = an upper
bound of an optimal makespan (a left-shifted optimal schedule never leaves both the device and the
link idle, so ``sum u + 2 sum c`` works; the best heuristic's makespan is used when smaller).
Times are scaled by the total compute time and memory by ``M`` before solving.

Strengthened model (default, :func:`build_offload_arrays`; issue 21)
--------------------------------------------------------------------
The model above, kept as :func:`build_offload_milp` (Pyomo) for reference, has the same optimum as the
strengthened one, which is built directly as sparse arrays for HiGHS (no Pyomo build or compilation:
ResNet-101's L = 73 builds in about 2 s instead of 31 s). Its changes, each keeping every valid
schedule of makespan <= H (so the optimum is unchanged; tests compare both models on random chains):

* Time windows from ``C <= H`` (the best heuristic's makespan): ``s_q`` in ``[sum_{q'<q} u, H - sum_{q'>=q} u]``,
  ``C >= `` Proposition 3's bound, ``o_j``/``p_j`` bounded likewise, and every big-M is computed per row
  from these bounds instead of one global ``H``.
* Prefetch windows are *cumulative*: binary ``G_{j,w}`` = 1 when the prefetch of ``x_j`` starts in window
  ``w`` or later (``G_{j,first} = y_j``, non-increasing in ``w``; ``v_{j,w} = G_{j,w} - G_{j,w+1}``), so
  ``c_window_lo/hi`` become ``G = 1 -> p_j >= start(w)`` and ``G = 0 -> p_j <= start(w)``. Windows where the
  prefetch cannot start (outside its time window, or ``static(w) + |x_j| > M``) get no variable.
* ``a_{j,q}`` is non-increasing in ``q``, ``a_{j,q} <= y_j`` and ``a_{j,q} <= G_{j,2q}`` (a first copy still
  there means its prefetch has not started), so ``c_mem_compute`` reads
  ``static + sum_j |x_j| (1 + a_{j,q} - G_{j,2q}) <= M``.
* Memory checks only where memory can peak: a computation or prefetch row is left out when even with
  every transfer-dependent activation present the memory fits. The transfer-dependent activations of a
  window are a prefix ``x_0..x_m`` (:func:`window_memory`), so in ``c_mem_prefetch`` the link-order
  terms are summed once per prefetched ``x_k`` into running totals (continuous ``R_{k,m}``, equality rows)
  and each window's row reads one total: O(L^2) non-zeros per ``k`` instead of O(L^3).
* Valid inequalities without big-M (the link does one transfer at a time), which carry Proposition 3's
  argument into the LP relaxation:
  (V1) for ``k = -1..L`` and ``r > k``: ``s_r - e_{F_k} >= sum_{j>k} c_j (y_j - a_{j,r})`` over the
  offloads completed by ``s_r`` (``2 c_j y_j`` once ``B_j`` has started), plus the prefetches of ``x_j``,
  ``j <= k``, that start after ``s_{k+1}`` and must end by ``s_r`` (``c_j G_{j,2(k+1)}``);
  (V2) for ``q < r``: ``s_r - s_q >= sum c_j G_{j,2q}`` over the ``x_j`` (``j < q``) whose prefetch
  starts at or after ``s_q`` and must end before ``B_j``, no later than ``s_r``.
* The MIP start is the best heuristic's schedule; HiGHS runs with feasibility tolerances of 1e-9 so
  that its schedules replay exactly. HiGHS 1.16 has no branching priorities (an open request,
  ERGO-Code/HiGHS#2670), so none are set.

Bound and neighbourhood search (issue 21, round 2)
--------------------------------------------------
* The Solution's ``bound`` is the largest of HiGHS's dual bound, Proposition 3's and the fractional
  relaxation's optimum (Theorem 2, :func:`fractional_bound`, proof there). On ResNet-18 (L = 23) the
  latter is 5.221 s against HiGHS's 5.06 s after 60 s. When the best schedule is within the gap of it,
  the call stops with status optimal before the full MIP.
* ``solve_offload_milp(..., cover=share)`` (issue 21, round 3) first enumerates offloaded sets: every
  set reaching ``M_peak - M`` bytes that is minimal in index order, scheduled by the no-wait builder
  (:func:`_cover_search`), then solves this model with ``y`` fixed to each of the best few sets
  (:func:`_polish_sets`: every link order, interleaved or not). HiGHS's own search rarely changes the
  set of its start; the enumeration does (ResNet-18, PipeDream's GPU profile, batch 128, 12 GB/s, 40%
  of the way: AutoSwap's 0.5767 s becomes 0.5681 s in about a second). Then the model is solved with
  ``y`` fixed to the neighbours of the best set (:func:`_set_descent`), those whose split bound (below)
  is not above the incumbent, best no-wait schedule first: on the CPU profile at 40 MB/s, where the
  full MILP alone ended at 5.811 s after 60 s (and 900 s), the enumeration reaches 5.704 s, the best
  sets 5.648 s and the descent 5.608 s, all within 35 s.
* The bound also takes the *split relaxation* (:mod:`baselines.offload_bound`, proof there): split any
  schedule where the memory peaks; before, only offloads (whole, freeing at their end), after, only
  prefetches (whole, reserving from their start) read in reversed time; both one-way problems are
  exact dynamic programmes over transferred sets. Unlike the fractional relaxation it keeps whole
  transfers, and it is computed where the chain has at most 22 activations worth a transfer (smaller
  ones relaxed to instant transfers). ResNet-18 after 60 s, 40% of the way: CPU profile at 40 MB/s
  5.608 s against a bound of 5.565 s (gap 0.77%; the fractional bound is 5.221 s); PipeDream's GPU
  profile at 12 GB/s 0.5681 s against 0.5659 s (0.39%). The split bound is also a lower bound on the
  makespan column ``C`` of the model.
* ``solve_offload_milp(..., lns=share)`` then spends ``share`` of the time limit around the best schedule:
  a local search over the offloaded set with the no-wait builder (:func:`_set_search`), then sub-MIPs of
  this model where only the decisions of a window of consecutive activations are free (:func:`_lns`,
  windows where the incumbent's computations wait first); the full MIP then starts from the best
  schedule found. Every accepted schedule is replayed by the simulator.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from memplan.formulations.highs_driver import EXACT_TOLERANCES, solve_arrays, solve_milp, timed
from memplan.models import budget as _budget
from memplan.models.chain import Chain
from memplan.models.offload import (PROBLEM, InvalidOffloadSchedule, OffloadData, OffloadSchedule, fractional_makespan,
                                    link_speeds, lower_bound_value, make_solution, peak_memory_no_offload,
                                    same_speed, validate_offload, window_memory)
from memplan.models.solution import InfeasibleError, Solution, Status


class BuildInterrupted(RuntimeError):
    """The call's time budget ran out while the model was being built (``stage`` "build"), or would
    run out before the build ends, which then is not started ("not built")."""

    def __init__(self, message: str, stage: str = "build"):
        super().__init__(message)
        self.stage = stage


#: seconds to build the model, ``BUILD_SECONDS_PER_L3 * L^3``: below what was measured (the strong
#: model on the toy chain repeated, 2 shared cores: 2.4 s at L = 100, 14 s at 200, 106 s at 400), so
#: that a build is skipped only where it surely would not end in time
BUILD_SECONDS_PER_L3 = 1.2e-6


def build_seconds(L: int) -> float:
    """The least time building the model of ``L`` stages takes (:data:`BUILD_SECONDS_PER_L3`)."""
    return BUILD_SECONDS_PER_L3 * float(L) ** 3


class _BuildClock:
    """Watches the active ``solve`` call's budget while the model is built. Constraint rules ask
    :meth:`out` and skip their row once time is out (an exception inside a rule would be logged by
    Pyomo as an error); :meth:`check` between the families then stops the build."""

    def __init__(self) -> None:
        self.budget = _budget.current()
        self.hit = False

    def out(self) -> bool:
        if not self.hit and self.budget.expired():
            self.hit = True
        return self.hit

    def check(self) -> None:
        if self.out():
            raise BuildInterrupted("the call's time limit was reached while the MILP was being built")


def build_offload_milp(chain: Chain, memory: float, bandwidth: float, *, horizon: float | None = None,
                       phased: bool = False):
    """The Pyomo model (see the module docstring). Returns ``(model, info)``; ``info`` holds the scales.

    Size: ``O(L^2)`` binaries (link order of every pair of transfers, prefetch windows) and ``O(L^2)``
    constraints of ``O(L)`` terms. Inside a ``solve`` call, raises :class:`BuildInterrupted` as soon as
    the call's time budget has run out (the largest constraint families check it row by row).
    """
    import pyomo.environ as pyo

    clock = _BuildClock()
    d = OffloadData.of(chain)
    L = d.L
    nq = 2 * L + 2
    dur_raw = [d.uF[q] if q <= L else d.uB[2 * L + 1 - q] for q in range(nq)]
    tu = float(sum(dur_raw)) or 1.0
    mu = float(memory)
    dur = [u / tu for u in dur_raw]
    J = [j for j in range(L + 1) if d.x[j] > 0]
    b_out, b_in = link_speeds(bandwidth)
    c = {j: d.x[j] / b_out / tu for j in J}            # offload durations
    ci = {j: d.x[j] / b_in / tu for j in J}            # prefetch durations
    H = sum(dur) + sum(c.values()) + sum(ci.values())
    if horizon is not None:
        H = min(H, horizon / tu * (1 + 1e-6) + 1e-9)
    Hm = float(d.x.sum() + d.y.sum() + d.exF.max() + d.exB.max()) / mu + 1.0
    qB = {j: 2 * L + 1 - j for j in range(L + 1)}

    m = pyo.ConcreteModel(name="offload_p1")
    m.Q = pyo.RangeSet(0, nq - 1)
    m.J = pyo.Set(initialize=J)
    m.s = pyo.Var(m.Q, bounds=(0, H))
    m.C = pyo.Var(bounds=(0, H))
    m.y = pyo.Var(m.J, within=pyo.Binary)
    m.o = pyo.Var(m.J, bounds=(0, H))
    m.p = pyo.Var(m.J, bounds=(0, H))
    m.obj = pyo.Objective(expr=m.C, sense=pyo.minimize)

    m.c_seq = pyo.Constraint(range(nq - 1), rule=lambda m, q: m.s[q + 1] >= m.s[q] + dur[q])
    m.c_makespan = pyo.Constraint(expr=m.C >= m.s[nq - 1] + dur[nq - 1])
    m.c_ready = pyo.Constraint(m.J, rule=lambda m, j: m.o[j] >= (m.s[j - 1] + dur[j - 1] if j > 0 else 0))
    m.c_prefetch_after = pyo.Constraint(m.J, rule=lambda m, j: m.p[j] >= m.o[j] + c[j] * m.y[j])
    m.c_prefetch_before = pyo.Constraint(m.J, rule=lambda m, j: m.p[j] + ci[j] * m.y[j] <= m.s[qB[j]])

    # link: transfers ("O", j), ("P", j)
    T = [(k, j) for j in J for k in ("O", "P")]
    pairs = [(A, B) for A, B in itertools.combinations(T, 2) if A[1] != B[1]]
    m.PAIRS = pyo.Set(initialize=range(len(pairs)))
    m.z = pyo.Var(m.PAIRS, within=pyo.Binary)   # z = 1: first of the pair before the second
    pidx = {(A, B): n for n, (A, B) in enumerate(pairs)}

    def start(A):
        return m.o[A[1]] if A[0] == "O" else m.p[A[1]]

    def before(A, B):
        """Expression equal to 1 when transfer A precedes B on the link."""
        if (A, B) in pidx:
            return m.z[pidx[(A, B)]]
        return 1 - m.z[pidx[(B, A)]]

    def link1(m, n):
        if clock.out():
            return pyo.Constraint.Skip
        A, B = pairs[n]
        relax = H * (2 - m.y[A[1]] - m.y[B[1]])
        return start(B) >= start(A) + (c if A[0] == "O" else ci)[A[1]] - H * (1 - m.z[n]) - relax

    def link2(m, n):
        if clock.out():
            return pyo.Constraint.Skip
        A, B = pairs[n]
        relax = H * (2 - m.y[A[1]] - m.y[B[1]])
        return start(A) >= start(B) + (c if B[0] == "O" else ci)[B[1]] - H * m.z[n] - relax

    m.c_link_ab = pyo.Constraint(m.PAIRS, rule=link1)
    m.c_link_ba = pyo.Constraint(m.PAIRS, rule=link2)
    clock.check()
    if phased:
        for n, (A, B) in enumerate(pairs):
            if A[0] != B[0]:
                m.z[n].fix(1 if A[0] == "O" else 0)

    # windows of each prefetch
    W = {j: list(range(2 * j + 1, 2 * (2 * L - j) + 2)) for j in J}
    VW = [(j, w) for j in J for w in W[j]]
    m.VW = pyo.Set(initialize=VW, dimen=2)
    m.v = pyo.Var(m.VW, within=pyo.Binary)
    m.c_window_one = pyo.Constraint(m.J, rule=lambda m, j: sum(m.v[j, w] for w in W[j]) == m.y[j])

    def win_lo(m, j, w):
        q, idle = divmod(w, 2)
        lo = m.s[q] + (dur[q] if idle else 0)
        return m.p[j] >= lo - H * (1 - m.v[j, w])

    def win_hi(m, j, w):
        q, idle = divmod(w, 2)
        hi = m.s[q + 1] if idle else m.s[q] + dur[q]
        return m.p[j] <= hi + H * (1 - m.v[j, w])

    m.c_window_lo = pyo.Constraint(m.VW, rule=win_lo)
    m.c_window_hi = pyo.Constraint(m.VW, rule=win_hi)

    # release of the first copy before computation q
    AQ = [(j, q) for j in J for q in range(j + 1, 2 * L - j + 1)]
    m.AQ = pyo.Set(initialize=AQ, dimen=2)
    m.a = pyo.Var(m.AQ, within=pyo.Binary)
    m.c_release = pyo.Constraint(m.AQ, rule=lambda m, j, q: m.o[j] + c[j] * m.y[j] <= m.s[q] + H * m.a[j, q])
    clock.check()

    def b(j, q):
        return sum(m.v[j, w] for w in W[j] if w < 2 * q)

    def mem_compute(m, q):
        static, var = window_memory(d, 2 * q)
        expr = static / mu
        for j in var:
            if j in c:
                expr = expr + d.x[j] / mu * (1 - m.y[j] + m.a[j, q] + b(j, q))
            else:
                expr = expr + d.x[j] / mu
        if isinstance(expr, float):
            if expr > 1.0 + 1e-9:
                raise InfeasibleError(f"computation {q} alone needs {expr * mu:.6g} B > {mu:.6g} B",
                                      minimum=expr * mu)
            return pyo.Constraint.Skip
        return expr <= 1.0

    m.c_mem_compute = pyo.Constraint(m.Q, rule=mem_compute)

    def mem_prefetch(m, k, w):
        if clock.out():
            return pyo.Constraint.Skip
        static, var = window_memory(d, w)
        expr = static / mu + d.x[k] / mu
        for j in var:
            if j == k:
                continue
            if j in c:
                expr = expr + d.x[j] / mu * (1 - m.y[j] + before(("P", k), ("O", j)) + before(("P", j), ("P", k)))
            else:
                expr = expr + d.x[j] / mu
        return expr <= 1.0 + Hm * (1 - m.v[k, w])

    m.c_mem_prefetch = pyo.Constraint(m.VW, rule=mem_prefetch)
    clock.check()
    info = {"tu": tu, "mu": mu, "H": H, "J": J, "c": c, "pairs": pairs, "W": W, "dur": dur, "nq": nq}
    return m, info


def _mip_start(m, info, d: OffloadData, sched: OffloadSchedule):
    """Variable values describing a valid schedule (see 'why it is exact')."""
    tu, c, L, nq, dur = info["tu"], info["c"], d.L, info["nq"], info["dur"]
    s = [(sched.tF[q] if q <= L else sched.tB[2 * L + 1 - q]) / tu for q in range(nq)]
    vals = [(m.s[q], s[q]) for q in range(nq)] + [(m.C, s[-1] + dur[-1])]
    eF = lambda i: s[i] + dur[i]
    st = {}
    for j in info["J"]:
        off = j in sched.offload
        # a non-offloaded x_j gets zero-length transfers placed so that its link-order terms in
        # c_mem_prefetch vanish: offload as early as possible, prefetch as late as possible (ranked
        # last on ties).
        o = sched.offload[j] / tu if off else (eF(j - 1) if j > 0 else 0.0)
        p = sched.prefetch[j] / tu if off else s[2 * L + 1 - j]
        st[("O", j)] = (o, 0 if not off else 1)
        st[("P", j)] = (p, 2 if off else 3)
        vals += [(m.y[j], 1.0 if off else 0.0), (m.o[j], o), (m.p[j], p)]
        win = None
        if off:   # an idle window when p lies in one (ties at s_q or e_q included), else the run
            fits = []
            for w in info["W"][j]:
                q, idle = divmod(w, 2)
                lo = s[q] + (dur[q] if idle else 0)
                hi = s[q + 1] if idle else s[q] + dur[q]
                if lo - 1e-12 <= p <= hi + 1e-12:
                    fits.append((0 if idle else 1, w))
            win = min(fits)[1] if fits else None
        for w in info["W"][j]:
            vals.append((m.v[j, w], 1.0 if w == win else 0.0))
        for q in range(j + 1, 2 * L - j + 1):
            vals.append((m.a[j, q], 1.0 if off and o + c[j] > s[q] + 1e-12 else 0.0))
    for n, (A, B) in enumerate(info["pairs"]):
        vals.append((m.z[n], 1.0 if st[A] <= st[B] else 0.0))
    return vals


def read_schedule(m, info, d: OffloadData, bandwidth: float) -> OffloadSchedule:
    tu, L, nq = info["tu"], d.L, info["nq"]
    s = [float(m.s[q].value) * tu for q in range(nq)]
    off, pre = {}, {}
    for j in info["J"]:
        if round(m.y[j].value or 0) == 1:
            off[j] = float(m.o[j].value) * tu
            pre[j] = float(m.p[j].value) * tu
    return OffloadSchedule(tF=s[:L + 1], tB=[s[2 * L + 1 - i] for i in range(L + 1)], offload=off,
                           prefetch=pre, bandwidth=bandwidth)


# ------------------------------------------------------------------------------ matrix builder
class _Model:
    """Columns (bounds, integrality) and rows (sparse, ``lo <= a x <= hi``) collected as arrays for
    :func:`formulations.highs_driver.solve_arrays` -- no Pyomo objects."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[bool] = []
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.families: dict[str, int] = {}
        self._csc = None            # the matrix, built once for every solve of this model

    def var(self, lb: float, ub: float, integer: bool = False) -> int:
        self._csc = None
        self.lb.append(float(lb))
        self.ub.append(float(ub))
        self.integer.append(integer)
        return len(self.lb) - 1

    def row(self, family: str, cols, vals, lo: float = -math.inf, hi: float = math.inf) -> None:
        cols = np.asarray(cols, dtype=np.int64)
        if not len(cols):
            if lo > 1e-12 or hi < -1e-12:
                raise AssertionError(f"{family}: an empty row {lo} <= 0 <= {hi} is violated")
            return
        r = len(self.row_lo)
        self._csc = None
        self._rows.append(np.full(len(cols), r, dtype=np.int64))
        self._cols.append(cols)
        self._vals.append(np.asarray(vals, dtype=float))
        self.row_lo.append(float(lo))
        self.row_hi.append(float(hi))
        self.families[family] = self.families.get(family, 0) + 1

    def matrix(self):
        """The rows as a CSC matrix, built on the first call after the last row was added (the sub-MIPs
        of the searches and the full model share it)."""
        from scipy.sparse import coo_matrix

        if self._csc is None:
            n, m = len(self.lb), len(self.row_lo)
            if not m:
                self._csc = coo_matrix((0, n)).tocsc()
            else:
                self._csc = coo_matrix((np.concatenate(self._vals), (np.concatenate(self._rows),
                                        np.concatenate(self._cols))), shape=(m, n)).tocsc()   # duplicates summed
        return self._csc


def build_offload_arrays(chain: Chain, memory: float, bandwidth: float, *, horizon: float | None = None,
                         phased: bool = False, cuts: bool = True):
    """The strengthened model as arrays (see the module docstring, "Strengthened model"). Returns
    ``(model, info)``; ``info`` maps the paper's quantities to column indices. Inside a ``solve`` call,
    raises :class:`BuildInterrupted` once the call's budget has run out (checked between families)."""
    clock = _BuildClock()
    d = OffloadData.of(chain)
    L = d.L
    nq = 2 * L + 2
    dur_raw = [float(d.uF[q]) if q <= L else float(d.uB[2 * L + 1 - q]) for q in range(nq)]
    tu = float(sum(dur_raw)) or 1.0
    mu = float(memory)
    dur = [u / tu for u in dur_raw]
    J = [j for j in range(L + 1) if d.x[j] > 0]
    b_out, b_in = link_speeds(bandwidth)
    c = {j: float(d.x[j]) / b_out / tu for j in J}     # offload durations
    ci = {j: float(d.x[j]) / b_in / tu for j in J}     # prefetch durations
    X = {j: float(d.x[j]) / mu for j in range(L + 2)}          # sizes in units of M
    H = sum(dur) + sum(c.values()) + sum(ci.values())
    if horizon is not None:
        H = min(H, horizon / tu * (1 + 1e-6) + 1e-9)
    lb_C = max(sum(dur), lower_bound_value(chain, memory, bandwidth) / tu * (1 - 1e-9))
    H = max(H, lb_C)
    qB = {j: 2 * L + 1 - j for j in range(L + 1)}
    pre = np.concatenate([[0.0], np.cumsum(dur)])             # pre[q]: compute before q
    ES = [pre[q] for q in range(nq)]                          # time windows of s_q given C <= H
    LS = [H - (pre[nq] - pre[q]) for q in range(nq)]
    mdl = _Model()
    s = [mdl.var(ES[q], max(ES[q], LS[q])) for q in range(nq)]
    C = mdl.var(lb_C, H)
    def wstart(w):
        """(column, constant) of the start of window w."""
        q, idle = divmod(w, 2)
        return s[q], (dur[q] if idle else 0.0)

    def wstart_lb(w):
        q, idle = divmod(w, 2)
        return ES[q] + (dur[q] if idle else 0.0)

    def wstart_ub(w):
        q, idle = divmod(w, 2)
        if q >= nq:
            return H
        return LS[q] + (dur[q] if idle else 0.0)

    ready_lb = {j: (0.0 if j == 0 else ES[j - 1] + dur[j - 1]) for j in J}
    y, o, p = {}, {}, {}
    for j in J:
        can = ready_lb[j] + c[j] + ci[j] <= LS[qB[j]] + 1e-12
        y[j] = mdl.var(0, 1 if can else 0, True)
        # o_j: at most the latest ready time (where a non-offloaded x_j's zero-length offload sits) or
        # the latest start of an offload that leaves room for the prefetch before B_j
        ready_ub = 0.0 if j == 0 else LS[j - 1] + dur[j - 1]
        o[j] = mdl.var(ready_lb[j], max(ready_ub, LS[qB[j]] - c[j] - ci[j]))
        p[j] = mdl.var(ready_lb[j], LS[qB[j]])
    lbv = lambda col: mdl.lb[col]
    ubv = lambda col: mdl.ub[col]

    # -- computations in sequence (Fig. 1) and the makespan
    for q in range(nq - 1):
        mdl.row("seq", [s[q + 1], s[q]], [1, -1], lo=dur[q])
    mdl.row("makespan", [C, s[nq - 1]], [1, -1], lo=dur[nq - 1])
    # -- transfers of x_j: offload after F_{j-1}, prefetch after the offload and before B_j
    for j in J:
        if j > 0:
            mdl.row("ready", [o[j], s[j - 1]], [1, -1], lo=dur[j - 1])
        mdl.row("prefetch_after", [p[j], o[j], y[j]], [1, -1, -c[j]], lo=0)
        mdl.row("prefetch_before", [s[qB[j]], p[j], y[j]], [1, -1, -ci[j]], lo=0)
    clock.check()

    # -- prefetch windows: G[j][w] = 1 when the prefetch of x_j starts in window w or later
    Gcol: dict[int, dict[int, int | None]] = {}
    Wj: dict[int, tuple[int, int]] = {}
    Wpos: dict[int, set[int]] = {}
    static_cache = {w: window_memory(d, w) for w in range(2 * nq)}
    for j in J:
        plo = ready_lb[j] + c[j]
        phi = LS[qB[j]] - ci[j]
        ws = []
        for w in range(2 * j + 1, 2 * (2 * L - j) + 2):
            if wstart_lb(w) > phi + 1e-9 or wstart_ub(w + 1) < plo - 1e-9:
                continue                                   # the prefetch cannot start there (C <= H)
            if static_cache[w][0] + d.x[j] > mu * (1 + 1e-12):
                continue                                   # memory: x_j cannot even be reserved there
            ws.append(w)
        if not ws:
            mdl.ub[y[j]] = 0.0
            ws = [2 * j + 1]
        Wj[j] = (ws[0], ws[-1])
        g: dict[int, int | None] = {ws[-1] + 1: None}
        possible = set(ws)
        Wpos[j] = possible
        for w in range(ws[-1], ws[0], -1):
            g[w] = mdl.var(0, 1, True) if w in possible else g[w + 1]
        g[ws[0]] = y[j]
        Gcol[j] = g

    def G(j, w):
        """(col or None) of G_{j,w}: y_j before the first window, none (0) after the last."""
        lo_w, hi_w = Wj[j]
        if w <= lo_w:
            return y[j]
        if w > hi_w:
            return None
        return Gcol[j][w]

    def v_terms(j, w):
        """v_{j,w} = G_{j,w} - G_{j,w+1} as (cols, vals)."""
        a, b = G(j, w), G(j, w + 1)
        if a == b:
            return [], []
        cols, vals = [a], [1.0]
        if b is not None:
            cols.append(b)
            vals.append(-1.0)
        return cols, vals

    for j in J:
        lo_w, hi_w = Wj[j]
        if mdl.ub[y[j]] == 0:
            continue
        for w in range(lo_w, hi_w + 1):
            if G(j, w) != G(j, w + 1) and G(j, w + 1) is not None:
                mdl.row("window_monotone", [G(j, w), G(j, w + 1)], [1, -1], lo=0)
        for w in range(lo_w, hi_w + 2):
            gw = G(j, w)
            if w in Wpos[j]:
                # start of a possible window: G_{j,w} = 1 -> p_j >= start of w      (c_window_lo)
                col, k = wstart(w)
                M = wstart_ub(w) - lbv(p[j])
                if M > 0:
                    mdl.row("window_lo", [p[j], col, gw], [1, -1, -M], lo=k - M)
            if w - 1 in Wpos[j]:
                # G_{j,w} = 0 and y_j = 1 -> p_j <= start of w (end of window w-1)  (c_window_hi)
                col, k = wstart(w) if w < 2 * nq else (C, 0.0)
                M = ubv(p[j]) - wstart_lb(w)
                if M > 0:
                    cols, vals = [p[j], col, y[j]], [1, -1, M]
                    if gw is not None:
                        cols.append(gw)
                        vals.append(-M)
                    mdl.row("window_hi", cols, vals, hi=k + M)
    clock.check()

    # -- first copy of x_j still there when computation q starts (a_{j,q}; c_release)
    A: dict[tuple[int, int], int | None] = {}
    for j in J:
        prev = y[j]
        for q in range(j + 1, 2 * L - j + 1):
            M = ubv(o[j]) + c[j] - lbv(s[q])
            if M <= 0 or mdl.ub[y[j]] == 0:
                A[j, q] = None                   # done by then whenever it is offloaded
                continue
            a = mdl.var(0, 1, True)
            A[j, q] = a
            mdl.row("release", [o[j], y[j], s[q], a], [1, c[j], -1, -M], hi=0)
            mdl.row("release_monotone", [prev, a], [1, -1], lo=0)   # a_{j,q} <= a_{j,q-1} (<= y_j)
            prev = a
            g = G(j, 2 * q)     # still there -> its prefetch has not started: a_{j,q} <= G_{j,2q}
            if g is None:
                mdl.row("release_prefetch", [a], [1], hi=0)
            elif g != y[j]:
                mdl.row("release_prefetch", [a, g], [1, -1], hi=0)
    clock.check()

    # -- memory when computation q starts: static + sum_j |x_j| (1 + a_{j,q} - G_{j,2q})
    mem_rows = 0
    for q in range(nq):
        static, var = static_cache[2 * q]
        if (static + sum(d.x[j] for j in var)) <= mu * (1 + 1e-12):
            continue                                   # cannot exceed M whatever is offloaded
        cols, vals, const = [], [], static / mu
        for j in var:
            const += X[j]
            if j not in y or mdl.ub[y[j]] == 0:
                continue
            a = A.get((j, q))
            if a is not None:
                cols.append(a)
                vals.append(X[j])
            g = G(j, 2 * q)
            if g is not None:
                cols.append(g)
                vals.append(-X[j])
        if not cols:
            raise InfeasibleError(f"computation {q} alone needs {const * mu:.6g} B > {mu:.6g} B",
                                  minimum=const * mu)
        mdl.row("mem_compute", cols, vals, hi=1.0 - const)
        mem_rows += 1
    clock.check()

    # -- link: one transfer at a time (pairwise order z, relaxed unless both are offloaded)
    T = [(kind, j) for j in J for kind in ("O", "P")]
    start_col = {("O", j): o[j] for j in J} | {("P", j): p[j] for j in J}
    pairs = [(Aa, Bb) for Aa, Bb in itertools.combinations(T, 2) if Aa[1] != Bb[1]]
    Z: dict[tuple, int | float] = {}
    for Aa, Bb in pairs:
        a_, b_ = Aa[1], Bb[1]
        if mdl.ub[y[a_]] == 0 or mdl.ub[y[b_]] == 0:
            Z[Aa, Bb] = 0.0     # irrelevant: one of them is not offloaded
            continue
        if phased and Aa[0] != Bb[0]:
            Z[Aa, Bb] = 1.0 if Aa[0] == "O" else 0.0
        else:
            Z[Aa, Bb] = mdl.var(0, 1, True)
        sa, sb = start_col[Aa], start_col[Bb]
        z = Z[Aa, Bb]
        # z = 1: B starts after A ends; z = 0: A starts after B ends. Each row is relaxed by its own
        # big-M (from the time windows) unless both activations are offloaded:
        #   second - first >= c_first - M (1 - order) - M (2 - y_a - y_b)
        dur_a = (c if Aa[0] == "O" else ci)[a_]
        dur_b = (c if Bb[0] == "O" else ci)[b_]
        for first, second, cl, zsign in ((sa, sb, dur_a, 1), (sb, sa, dur_b, -1)):
            M = ubv(first) + cl - lbv(second)
            if M <= 0:
                continue
            cols, vals, rhs = [second, first, y[a_], y[b_]], [1.0, -1.0, -M, -M], cl - 2 * M
            if isinstance(z, int):       # order = z (first row) or 1 - z (second row)
                cols.append(z)
                vals.append(-M if zsign == 1 else M)
                rhs -= M if zsign == 1 else 0.0
            else:
                rhs -= M * (1 - (z if zsign == 1 else 1 - z))
            mdl.row("link", cols, vals, lo=rhs)
    clock.check()

    def before(Aa, Bb):
        """(cols, vals, const) of the expression equal to 1 when A precedes B on the link."""
        if (Aa, Bb) in Z:
            z = Z[Aa, Bb]
            return ([z], [1.0], 0.0) if isinstance(z, int) else ([], [], z)
        z = Z[Bb, Aa]
        return ([z], [-1.0], 1.0) if isinstance(z, int) else ([], [], 1 - z)

    # -- memory when the prefetch of x_k starts in window w (v_{k,w} = 1). The transfer-dependent
    # activations of a window are a prefix x_0..x_m(w) (window_memory), so the link-order terms are
    # summed once per k into running totals R_{k,m} = sum_{j<=m, j!=k} |x_j| (-y_j + [P_k before O_j]
    # + [P_j before P_k]) (equality rows), and each window's row reads one of them: O(L^2) non-zeros
    # per k instead of O(L^3).
    for k in J:
        if mdl.ub[y[k]] == 0:
            continue
        lo_w, hi_w = Wj[k]
        need = []
        for w in range(lo_w, hi_w + 1):
            vc, vv = v_terms(k, w)
            if not vc:
                continue
            static, var = static_cache[w]
            others = [j for j in var if j != k]
            if static + d.x[k] + sum(d.x[j] for j in others) <= mu * (1 + 1e-12):
                continue                                   # memory cannot peak there
            need.append((w, vc, vv, static, others))
        if not need:
            continue
        mmax = max(max(e[4], default=-1) for e in need)
        R: dict[int, int | None] = {}
        prev = None
        tot = sum(X[j] for j in range(mmax + 1))
        for j in range(mmax + 1):
            if j == k or j not in y or mdl.ub[y[j]] == 0:
                R[j] = prev
                continue
            r_ = mdl.var(-tot, 2 * tot)
            cols, vals, const = [r_, y[j]], [1.0, X[j]], 0.0
            if prev is not None:
                cols.append(prev)
                vals.append(-1.0)
            for e in (before(("P", k), ("O", j)), before(("P", j), ("P", k))):
                cols += e[0]
                vals += [-X[j] * t for t in e[1]]
                const += X[j] * e[2]
            mdl.row("mem_prefetch_sum", cols, vals, lo=const, hi=const)   # R_{k,j} - R_{k,j-1} - term_j = 0
            R[j] = prev = r_
        for w, vc, vv, static, others in need:
            const = (static + d.x[k]) / mu + sum(X[j] for j in others)
            Mr = const + 2 * sum(X[j] for j in others) - 1.0
            cols, vals = list(vc), [Mr * t for t in vv]
            m_ = max(others, default=-1)
            if m_ >= 0 and R[m_] is not None:
                cols.append(R[m_])
                vals.append(1.0)
            # const + R_{k,m(w)} <= 1 + Mr (1 - v_{k,w})
            mdl.row("mem_prefetch", cols, vals, hi=1.0 + Mr - const)
        if clock.out():
            clock.check()
    clock.check()

    # -- valid inequalities: the link's work between two events (no big-M)
    if cuts:
        # (V1) everything sent after F_k ends and done by s_r: offloads of x_j (j > k) completed by then,
        # both transfers of those whose B_j has started, and the prefetches of x_j (j <= k) that start
        # after s_{k+1} and must end before B_j (no later than r)
        for k in range(-1, L + 1):
            for r in range(k + 1, nq):
                cols, vals = [s[r]], [1.0]
                lo = 0.0
                if k >= 0:
                    cols.append(s[k])
                    vals.append(-1.0)
                    lo = dur[k]
                n0 = len(cols)
                for j in J:
                    if mdl.ub[y[j]] == 0:
                        continue
                    if j <= k:
                        # x_j's prefetch, when it starts after s_{k+1} (>= e_k) and must end by s_r
                        g = G(j, 2 * (k + 1)) if qB[j] <= r else None
                        if g is not None:
                            cols.append(g)
                            vals.append(-ci[j])
                        continue
                    if r >= qB[j]:
                        cols.append(y[j])
                        vals.append(-(c[j] + ci[j]))
                    elif j + 1 <= r:
                        cols.append(y[j])
                        vals.append(-c[j])
                        a = A.get((j, r))
                        if a is not None:
                            cols.append(a)
                            vals.append(c[j])
                if len(cols) > n0:
                    mdl.row("cut_forward", cols, vals, lo=lo)
            if clock.out():
                clock.check()
        # (V2) prefetches that start at or after s_q and must end before s_r (B_j no later than r)
        for q in range(1, nq):
            for r in range(q + 1, nq):
                cols, vals = [s[r], s[q]], [1.0, -1.0]
                for j in J:
                    if mdl.ub[y[j]] == 0 or not q < qB[j] <= r:
                        continue
                    if j >= q:        # x_j is produced after s_q: both transfers (V1 with k = q-1 covers it)
                        continue
                    g = G(j, 2 * q)
                    if g is not None:
                        cols.append(g)
                        vals.append(-ci[j])
                if len(cols) > 2:
                    mdl.row("cut_backward", cols, vals, lo=0.0)
            if clock.out():
                clock.check()
    clock.check()
    cost = np.zeros(len(mdl.lb))
    cost[C] = 1.0
    info = {"tu": tu, "mu": mu, "H": H, "J": J, "c": c, "dur": dur, "nq": nq, "s": s, "C": C, "y": y, "o": o,
            "p": p, "G": G, "Wj": Wj, "Wpos": Wpos, "A": A, "Z": Z, "cost": cost, "families": dict(mdl.families)}
    return mdl, info


def _start_values(mdl: _Model, info, d: OffloadData, sched: OffloadSchedule) -> tuple[np.ndarray, np.ndarray]:
    """Column values describing a valid schedule (see 'why it is exact'), as ``(indices, values)``."""
    tu, c, L, nq, dur = info["tu"], info["c"], d.L, info["nq"], info["dur"]
    x = np.full(len(mdl.lb), np.nan)
    s = [(sched.tF[q] if q <= L else sched.tB[2 * L + 1 - q]) / tu for q in range(nq)]
    for q in range(nq):
        x[info["s"][q]] = s[q]
    x[info["C"]] = s[-1] + dur[-1]
    eF = lambda i: s[i] + dur[i]
    st = {}
    G, A = info["G"], info["A"]
    for j in info["J"]:
        off = j in sched.offload
        # a non-offloaded x_j gets zero-length transfers placed so that its link-order terms in the
        # prefetch memory rows vanish: offload as early as possible, prefetch as late as possible
        # (ranked last on ties)
        o = sched.offload[j] / tu if off else (eF(j - 1) if j > 0 else 0.0)
        p = sched.prefetch[j] / tu if off else s[2 * L + 1 - j]
        st[("O", j)] = (o, 1 if off else 0)
        st[("P", j)] = (p, 2 if off else 3)
        x[info["y"][j]], x[info["o"][j]], x[info["p"][j]] = (1.0 if off else 0.0), o, p
        lo_w, hi_w = info["Wj"][j]
        win = None
        if off:   # an idle window when p lies in one (ties at s_q or e_q included), else the run
            fits = []
            for w in range(lo_w, hi_w + 1):
                q, idle = divmod(w, 2)
                lo = s[q] + (dur[q] if idle else 0)
                hi = s[q + 1] if idle else s[q] + dur[q]
                if w in info["Wpos"][j] and lo - 1e-12 <= p <= hi + 1e-12:
                    fits.append((0 if idle else 1, w))
            win = min(fits)[1] if fits else lo_w
        for w in range(lo_w, hi_w + 2):
            g = G(j, w)
            if g is not None and g != info["y"][j]:
                x[g] = 1.0 if off and win >= w else 0.0
        for q in range(j + 1, 2 * L - j + 1):
            a = A.get((j, q))
            if a is not None:
                still = off and o + c[j] > s[q] + 1e-12 and win >= 2 * q
                x[a] = 1.0 if still else 0.0
    for (Aa, Bb), z in info["Z"].items():
        if isinstance(z, int):
            x[z] = 1.0 if st[Aa] <= st[Bb] else 0.0
    idx = np.flatnonzero(~np.isnan(x))
    return idx.astype(np.int32), x[idx]


def _read_arrays(info, d: OffloadData, xs: np.ndarray, bandwidth: float) -> OffloadSchedule:
    tu, L, nq = info["tu"], d.L, info["nq"]
    s = [float(xs[info["s"][q]]) * tu for q in range(nq)]
    off, pre = {}, {}
    for j in info["J"]:
        if round(xs[info["y"][j]]) == 1:
            off[j] = float(xs[info["o"][j]]) * tu
            pre[j] = float(xs[info["p"][j]]) * tu
    return OffloadSchedule(tF=s[:L + 1], tB=[s[2 * L + 1 - i] for i in range(L + 1)], offload=off,
                           prefetch=pre, bandwidth=bandwidth)


def fractional_bound(chain: Chain, memory: float, bandwidth: float) -> float | None:
    """A lower bound on Problem 1's optimum from paper 001's fully fractional relaxation (section 4):
    the makespan of the no-wait, eager, ordered schedule offloading ``M_peak - M_GPU`` bytes
    (:func:`models.offload.fractional_makespan`), or None where it cannot be computed.

    Why it is valid. Every valid Problem-1 schedule is a schedule of the fractional relaxation: there,
    bytes are freed as they are sent and reserved as they arrive, which is never later (resp. earlier)
    than Problem 1's release at the end of a whole offload (reserve at the start of a whole prefetch),
    and every other rule is the same. By Lemma 1 it becomes an eager, ordered schedule with the same
    makespan offloading the same amount ``A >= M_peak - M_GPU`` (Proposition 2), and by Lemma 2 (and
    Proposition 1: the no-wait one is no worse) offloading ``M_peak - M_GPU`` instead is no worse; that
    is Theorem 2's schedule. So its makespan never exceeds Problem 1's optimum (tests compare it with
    proven optima of the reference model on random chains). On ResNet-18 (issue 21) it is 5.221 s where
    HiGHS's bound after 60 s is about 5.06 s."""
    if same_speed(bandwidth) is None:
        return None             # Theorem 2 is proven for one link speed
    try:
        if memory >= peak_memory_no_offload(chain) or not bandwidth or not math.isfinite(bandwidth):
            return None
        v = float(fractional_makespan(chain, memory, bandwidth))
    except Exception:           # no fractional schedule (e.g. memory below the minimum): no bound
        return None
    # the bisection returns a feasible T of the relaxation; 1e-9 relative slack for its rounding
    return v * (1 - 1e-9) if math.isfinite(v) else None


def _integer_owners(mdl: _Model, info) -> dict[int, tuple[int, ...]]:
    """Integer column -> the activations it is about (y, G, a: one; a link-order z: two)."""
    own: dict[int, set[int]] = {}
    for j in info["J"]:
        own.setdefault(info["y"][j], set()).add(j)
        lo_w, hi_w = info["Wj"][j]
        for w in range(lo_w, hi_w + 2):
            g = info["G"](j, w)
            if g is not None:
                own.setdefault(g, set()).add(j)
    for (j, _q), a in info["A"].items():
        if a is not None:
            own.setdefault(a, set()).add(j)
    for (Aa, Bb), z in info["Z"].items():
        if isinstance(z, int):
            own.setdefault(z, set()).update((Aa[1], Bb[1]))
    ints = set(np.flatnonzero(np.asarray(mdl.integer)).tolist())
    if set(own) != ints:
        raise AssertionError("offload MILP: integer columns without an owner")
    return {k: tuple(sorted(v)) for k, v in own.items()}


def _no_wait_value(chain: Chain, memory: float, bandwidth: float, S) -> tuple[OffloadSchedule | None, float]:
    """The no-wait schedule of Proposition 1 offloading the set ``S`` (ordered transfers) and its makespan
    as the validator replays it; ``(None, inf)`` where it does not fit."""
    from memplan.models.offload import NoWaitInfeasible, no_wait_schedule

    try:
        sc = no_wait_schedule(chain, memory, bandwidth, sorted(S))
        return sc, validate_offload(chain, sc, memory).makespan
    except (NoWaitInfeasible, InvalidOffloadSchedule, ValueError):
        return None, math.inf


def _set_search(chain: Chain, memory: float, bandwidth: float, incumbent: OffloadSchedule, value: float,
                deadline: float) -> tuple[OffloadSchedule, float, int]:
    """Local search over the offloaded set (first improvement): flip one activation in or out, then
    swap one offloaded for one kept, each candidate set scheduled by the no-wait builder of
    Proposition 1 (:func:`models.offload.no_wait_schedule`, ordered transfers) and replayed by the
    validator; repeats while a move improves and time is left. DYNPROG merges states on a memory grid,
    so single moves sometimes find a slightly better set (ResNet-101, issue 21). Returns
    ``(schedule, makespan, candidate sets evaluated)``."""
    import time as _time

    d = OffloadData.of(chain)
    cand = [j for j in range(d.L + 1) if d.x[j] > 0]
    S = frozenset(incumbent.offload)
    n = 0
    improved = True
    while improved and _time.monotonic() < deadline:
        improved = False
        moves = [S ^ {j} for j in cand]
        moves += [(S - {a}) | {b} for a in sorted(S) for b in cand if b not in S]
        for T in moves:
            if _time.monotonic() >= deadline:
                break
            sc, v = _no_wait_value(chain, memory, bandwidth, T)
            n += 1
            if v < value * (1 - 1e-12):
                S, incumbent, value, improved = T, sc, v, True
                break
    return incumbent, value, n


def _covering_sets(d: OffloadData, need: float, max_excess, stop):
    """The offloaded sets ``S`` (sorted lists) whose size reaches ``need`` bytes and that are minimal in
    index order (``x(S) >= need > x(S) - |x_max S|``), depth first with every ``x_j`` taken before it is
    left out (so ``x_0, x_1, ...`` first, the order of the fractional relaxation). A set is only yielded
    when its excess ``x(S) - need`` is at most ``max_excess()`` (re-read at every set: the caller ties it
    to its incumbent), and branches that can no longer reach ``need`` are cut. The walk ends as soon as
    ``stop()`` is true (asked every 1024 nodes)."""
    J = [j for j in range(d.L + 1) if d.x[j] > 0]
    x = [float(d.x[j]) for j in J]
    rest = np.concatenate([np.cumsum(x[::-1])[::-1], [0.0]])     # rest[i] = x_{J[i]} + ... + x_{J[-1]}
    S: list[int] = []
    nodes = [0]

    class _Stop(Exception):
        pass

    def walk(i: int, tot: float):
        nodes[0] += 1
        if nodes[0] % 1024 == 0 and stop():
            raise _Stop
        if tot >= need:
            if tot - need <= max_excess():
                yield list(S)
            return
        if i == len(J) or tot + rest[i] < need:
            return
        S.append(J[i])
        yield from walk(i + 1, tot + x[i])
        S.pop()
        yield from walk(i + 1, tot)

    try:
        yield from walk(0, 0.0)
    except _Stop:
        return


def _cover_search(chain: Chain, memory: float, bandwidth: float, incumbent: OffloadSchedule, value: float,
                  bound: float, deadline: float, keep: int = 4, log=None) -> tuple[OffloadSchedule, float, dict]:
    """Search of the offloaded set by enumeration (issue 21): every set of :func:`_covering_sets` (at
    the peak without offloading, ``M_peak - M`` bytes must be on the host, so every valid set reaches
    that size), scheduled by the no-wait builder of Proposition 1 (ordered transfers) and replayed by the
    validator, until ``deadline`` (``time.monotonic()`` seconds). A set whose excess over ``M_peak - M``
    costs more link time (``2 excess / beta``) than the incumbent's distance to ``bound`` is skipped:
    that is a heuristic filter, not a proof (the link may idle anyway), and it tightens as the
    incumbent improves. It reaches sets that single moves from DYNPROG's or AutoSwap's set do not: on
    PipeDream's GPU profile of ResNet-18 (batch 128, 12 GB/s) it takes AutoSwap's 0.5767 s to 0.5681 s
    in about 5 s, on the CPU profile at 40 MB/s the MILP's 5.811 s after 60 s to 5.704 s.

    Returns ``(schedule, makespan, stats)``; ``stats['best_sets']`` holds up to ``keep`` of the best sets
    found as ``(makespan, set, schedule)``, for :func:`_polish_sets`. ``log`` (a progress sink) gets a
    line every 10 s."""
    import heapq
    import time as _time

    d = OffloadData.of(chain)
    need = peak_memory_no_offload(chain) - float(memory)
    b_out, b_in = link_speeds(bandwidth)
    best: list[tuple[float, int, list[int], OffloadSchedule]] = []    # max-heap on makespan (negated)
    S0 = sorted(incumbent.offload)
    heapq.heappush(best, (-value, 0, S0, incumbent))
    state = {"value": value, "sets": 0, "done": True}

    def max_excess():
        return max(0.0, state["value"] - bound) / (1 / b_out + 1 / b_in)

    def stop():
        if _time.monotonic() >= deadline:
            state["done"] = False
        return not state["done"]

    seen = {tuple(S0)}
    next_log = _time.monotonic() + 10.0
    for S in _covering_sets(d, need, max_excess, stop):
        if stop():
            break
        if log is not None and _time.monotonic() >= next_log:
            next_log += 10.0
            log(f"MILP set enumeration: {state['sets']} sets, best makespan {state['value']:.6g} s")
        if tuple(S) in seen:
            continue
        seen.add(tuple(S))
        state["sets"] += 1
        sc, v = _no_wait_value(chain, memory, bandwidth, S)
        if sc is None:
            continue
        if len(best) < keep or v < -best[0][0]:
            heapq.heappush(best, (-v, state["sets"], S, sc))
            if len(best) > keep:
                heapq.heappop(best)
        if v < state["value"] * (1 - 1e-12):
            state["value"], incumbent = v, sc
    ranked = sorted(((-nv, S, sc) for nv, _, S, sc in best), key=lambda e: e[0])
    return incumbent, state["value"], {"sets": state["sets"], "complete": state["done"], "best_sets": ranked}


class _SetSolver:
    """This model with every ``y_j`` fixed to one offloaded set (every link order, interleaved or not,
    and every timing stay free) and the makespan capped below the incumbent: the exact best schedule of
    that set, when HiGHS finishes within its limit. A point of it is a point of the full model; a
    schedule counts only when the simulator replays it."""

    def __init__(self, chain: Chain, memory: float, bandwidth: float, mdl: _Model, info, d: OffloadData,
                 threads) -> None:
        self.chain, self.memory, self.bandwidth = chain, memory, bandwidth
        self.mdl, self.info, self.d, self.threads = mdl, info, d, threads
        self.A = mdl.matrix()
        self.lower0, self.upper0 = np.array(mdl.lb), np.array(mdl.ub)
        self.integer = np.array(mdl.integer)
        self.row_lo, self.row_hi = np.array(mdl.row_lo), np.array(mdl.row_hi)

    def solve(self, S, value: float, start: OffloadSchedule | None, start_value: float | None,
              time_limit: float) -> tuple[OffloadSchedule | None, float | None, str]:
        """``(schedule, makespan, status)``: a schedule only when it replays faster than ``value``."""
        info = self.info
        lower, upper = self.lower0.copy(), self.upper0.copy()
        for j, col in info["y"].items():
            want = 1.0 if j in S else 0.0
            if want > self.upper0[col]:
                return None, None, "excluded"     # the model rules x_j out (it cannot beat the horizon)
            lower[col] = upper[col] = want
        C = info["C"]
        upper[C] = min(upper[C], value / info["tu"] * (1 - 1e-9))
        if upper[C] < lower[C]:
            return None, None, "bound"
        st = None
        if start is not None and start_value is not None and start_value < value * (1 - 1e-9):
            st = _start_values(self.mdl, info, self.d, start)
        res, xs = solve_arrays(cost=info["cost"], lower=lower, upper=upper, integer=self.integer, A=self.A,
                               row_lower=self.row_lo, row_upper=self.row_hi, time_limit=time_limit, gap=1e-6,
                               threads=self.threads, mip_start=st, objective_scale=info["tu"],
                               options=dict(EXACT_TOLERANCES), quiet=True)
        if xs is None or res.objective is None or res.objective * info["tu"] >= value * (1 - 1e-9):
            return None, None, str(res.status)
        sched = _read_arrays(info, self.d, xs, self.bandwidth)
        try:
            got = validate_offload(self.chain, sched, self.memory, tol=1e-6).makespan
        except InvalidOffloadSchedule:
            return None, None, "rejected"
        if got >= value * (1 - 1e-9):
            return None, None, str(res.status)
        return sched, got, str(res.status)


def _polish_sets(solver: _SetSolver, candidates, incumbent: OffloadSchedule, value: float, deadline: float,
                 sub_limit: float = 5.0) -> tuple[OffloadSchedule, float, list]:
    """Each candidate ``(makespan, set, no-wait schedule)`` solved exactly with its set fixed
    (:class:`_SetSolver`), for at most ``sub_limit`` s each and until ``deadline``. Returns
    ``(schedule, makespan, runs)``."""
    import time as _time

    runs = []
    for v0, S, sc in candidates:
        left = deadline - _time.monotonic()
        if left < 0.5:
            break
        sched, got, status = solver.solve(S, value, sc, v0, min(sub_limit, left))
        if sched is not None:
            incumbent, value = sched, got
        runs.append((list(S), status, got))
    return incumbent, value, runs


def _set_descent(solver: _SetSolver, set_bound, incumbent: OffloadSchedule, value: float, deadline: float,
                 sub_limit: float = 3.0, log=None) -> tuple[OffloadSchedule, float, dict]:
    """Local search over the offloaded set (issue 21): the neighbours of the incumbent's set (one
    activation in or out, one swapped, two added) whose bound ``set_bound(S, cutoff)`` (a lower bound of
    every schedule offloading exactly ``S``, or None: no filter; the front end passes the split
    relaxation restricted to the set, :meth:`baselines.offload_bound.SplitRelaxation.bound`) is below
    the incumbent are solved exactly with the set fixed (:class:`_SetSolver`), best no-wait schedule
    first; the first improvement is taken and the search goes on from it, until a neighbourhood gives
    none or ``deadline``. On ResNet-18's CPU profile at 40 MB/s it goes from 5.648 s to 5.608 s in
    about 15 s."""
    import time as _time

    chain, memory, beta, d = solver.chain, solver.memory, solver.bandwidth, solver.d
    cand = [j for j in range(d.L + 1) if d.x[j] > 0]
    cur = frozenset(incumbent.offload)
    seen = {cur}
    stats = {"rounds": 0, "bounded": 0, "pruned": 0, "solved": 0, "improvements": 0, "values": [value]}
    while _time.monotonic() < deadline - 0.5:
        stats["rounds"] += 1
        out = [j for j in cand if j not in cur]
        nb = {cur ^ {j} for j in cand}
        nb |= {(cur - {a}) | {b} for a in cur for b in out}
        nb |= {cur | {a, b} for a, b in itertools.combinations(out, 2)}
        scored = []
        for S in nb:
            if S in seen or not S or _time.monotonic() >= deadline:
                continue
            seen.add(S)
            if set_bound is not None:
                b = set_bound(sorted(S), value)
                if b is not None:
                    stats["bounded"] += 1
                    if b >= value * (1 - 1e-9):
                        stats["pruned"] += 1
                        continue
            sc, v = _no_wait_value(chain, memory, beta, S)
            scored.append((v, sorted(S), sc))
        scored.sort(key=lambda e: e[0])
        if log is not None:
            log(f"MILP set descent: round {stats['rounds']}, {len(scored)} neighbouring sets to solve")
        improved = False
        for v0, S, sc in scored:
            left = deadline - _time.monotonic()
            if left < 0.5:
                break
            stats["solved"] += 1
            if sc is not None and v0 < value * (1 - 1e-9):       # the no-wait schedule already improves
                incumbent, value = sc, v0
            sched, got, _ = solver.solve(S, value, sc, v0, min(sub_limit, left))
            if sched is not None:
                incumbent, value = sched, got
            if value < stats["values"][-1]:
                stats["improvements"] += 1
                stats["values"].append(value)
                cur = frozenset(S)
                improved = True
                if log is not None:
                    log(f"MILP set descent: makespan {value:.6g} s")
                break
        if not improved:
            break
    return incumbent, value, stats


def _lns(chain: Chain, memory: float, bandwidth: float, mdl: _Model, info, d: OffloadData, *, start_x,
         incumbent: OffloadSchedule, value: float, deadline: float, threads, window: int = 12,
         sub_limit: float = 10.0, log=None) -> tuple[OffloadSchedule, float, np.ndarray, dict]:
    """Large-neighbourhood search around the incumbent (issue 21): each step frees the decisions of a
    window of ``window`` consecutive activations (their ``y``, prefetch windows ``G``, releases ``a`` and
    every link-order binary touching one of them), fixes every other integer column to the incumbent's
    value, and solves that sub-MIP (all times stay free) from the incumbent. Windows slide by half
    their width over ``x_0..x_L``; an improvement is kept only when the simulator replays it
    (:func:`validate_offload`) with a smaller makespan. Passes repeat while one improved and time is left
    (until ``deadline``, ``time.monotonic()`` seconds). Every sub-MIP point is a point of the full model,
    so an accepted schedule is valid and the full model accepts it as a start.

    Returns ``(schedule, makespan, start vector of the full model, stats)``."""
    import time as _time

    owners = _integer_owners(mdl, info)
    Amat = mdl.matrix()
    lower0, upper0 = np.array(mdl.lb), np.array(mdl.ub)
    integer = np.array(mdl.integer)
    row_lo, row_hi = np.array(mdl.row_lo), np.array(mdl.row_hi)
    icols = np.array(sorted(owners), dtype=np.int64)
    x_inc = np.full(len(lower0), np.nan)
    x_inc[start_x[0]] = start_x[1]
    if np.isnan(x_inc[icols]).any():
        raise AssertionError("offload MILP: the start leaves integer columns unset")
    J = list(info["J"])
    width = max(1, min(window, len(J)))
    step = max(1, width // 2)
    firsts = list(range(0, max(1, len(J) - width + 1), step))
    if firsts[-1] + width < len(J):
        firsts.append(len(J) - width)
    # windows where the incumbent's computations wait first: idle time before F_q / B_q, q in the window
    L, nq, dur = d.L, info["nq"], info["dur"]

    def idle_of(sched):
        t = [(sched.tF[q] if q <= L else sched.tB[2 * L + 1 - q]) / info["tu"] for q in range(nq)]
        out = np.zeros(L + 2)
        for q in range(1, nq):
            i = q if q <= L else 2 * L + 1 - q
            out[i] += max(0.0, t[q] - t[q - 1] - dur[q - 1])
        return out

    idle = idle_of(incumbent)
    firsts.sort(key=lambda f: -idle[J[f]:J[min(f + width, len(J)) - 1] + 1].sum())
    stats = {"subproblems": 0, "improvements": 0, "passes": 0, "values": [value], "time": 0.0}
    t0 = _time.monotonic()
    # first the offloaded set (cheap moves, no-wait schedules), for at most a quarter of the time
    sched, v, stats["set_moves"] = _set_search(chain, memory, bandwidth, incumbent, value,
                                                t0 + 0.25 * max(0.0, deadline - t0))
    if v < value * (1 - 1e-12):
        incumbent, value = sched, v
        stats["values"].append(v)
        stats["set_search"] = v
        x_inc = np.full(len(lower0), np.nan)
        sx = _start_values(mdl, info, d, sched)
        x_inc[sx[0]] = sx[1]
        if log is not None:
            log(f"MILP set search: makespan {v:.6g} s")
    improved = True
    while improved and _time.monotonic() < deadline - 0.5:
        improved = False
        stats["passes"] += 1
        for f in firsts:
            left = deadline - _time.monotonic()
            if left < 0.5:
                break
            free = set(J[f:f + width])
            lower, upper = lower0.copy(), upper0.copy()
            # free: the window's own columns and the link order among its transfers; the order of a
            # window's transfer against an outside one stays the incumbent's (small sub-MIPs)
            fix = np.array([not set(owners[k]) <= free for k in icols.tolist()], dtype=bool)
            cols = icols[fix]
            lower[cols] = upper[cols] = np.round(x_inc[cols])
            have = ~np.isnan(x_inc)
            res, xs = solve_arrays(cost=info["cost"], lower=lower, upper=upper, integer=integer, A=Amat,
                                   row_lower=row_lo, row_upper=row_hi, time_limit=min(sub_limit, left),
                                   gap=1e-6, threads=threads,
                                   mip_start=(np.flatnonzero(have).astype(np.int32), x_inc[have]),
                                   objective_scale=info["tu"], options=dict(EXACT_TOLERANCES), quiet=True)
            stats["subproblems"] += 1
            stats.setdefault("runs", []).append((J[f], str(res.status), round(res.times.get("solve", 0.0), 2),
                                                 None if res.objective is None else res.objective * info["tu"]))
            if xs is None or res.objective is None or res.objective * info["tu"] >= value * (1 - 1e-9):
                continue
            sched = _read_arrays(info, d, xs, bandwidth)
            try:
                got = validate_offload(chain, sched, memory, tol=1e-6).makespan
            except InvalidOffloadSchedule:
                continue
            if got < value * (1 - 1e-9):
                value, incumbent, x_inc = got, sched, np.asarray(xs, dtype=float).copy()
                stats["improvements"] += 1
                stats["values"].append(got)
                improved = True
                if log is not None:
                    log(f"MILP neighbourhood x_{J[f]}..x_{J[min(f + width, len(J)) - 1]}: makespan {got:.6g} s")
    stats["time"] = _time.monotonic() - t0
    have = ~np.isnan(x_inc)
    return incumbent, value, (np.flatnonzero(have).astype(np.int32), x_inc[have]), stats


def solve_offload_milp(chain: Chain, memory: float, bandwidth: float, *, start: OffloadSchedule | None = None,
                       time_limit: float | None = 60, gap: float | None = 1e-6, threads: int | None = None,
                       log_file=None, phased: bool = False, verbose: bool = False, formulation: str = "strong",
                       options: dict | None = None, lns: float = 0.0, cover: float = 0.0,
                       bound=None, set_bound=None) -> Solution:
    """Solve Problem 1 exactly (within HiGHS's gap) from an optional MIP start (a valid schedule, e.g.
    the best heuristic's: it also caps the horizon); the schedule is replayed by the validator.

    ``formulation``: ``"strong"`` (default; the model of "Strengthened model", built as arrays) or
    ``"reference"`` (the original Pyomo model of this module's first part, kept to check the strong one
    against). Both have the same optimum.

    ``lns`` (strong formulation with a start only): share of ``time_limit`` (of what the call's budget
    has left, when smaller) spent first in a large-neighbourhood search around the start (:func:`_lns`);
    the full model then runs for the rest of the time from the best schedule found. 0 (default): none.

    ``cover`` (strong formulation with a start only): share of the time limit spent, before anything
    else, enumerating offloaded sets (:func:`_cover_search`, for at most half of it), then solving
    this model with ``y`` fixed to each of the best sets found (:func:`_polish_sets`) and to the
    neighbours of the best set (:func:`_set_descent`); the model is built with the enumeration's best
    makespan as its horizon. The neighbourhood search, when asked for, runs after it until
    ``cover + lns`` of the limit. 0 (default): none.

    ``bound(cutoff)`` (optional): a stronger relaxation, returning None or an object with ``value`` (a
    lower bound on the optimum, at most ``cutoff`` -- the best makespan known -- and equal to it when
    that schedule is optimal), ``split``, ``absent`` and ``relaxed``
    (:func:`baselines.offload_bound.split_bound`). ``set_bound(S, cutoff)`` (optional): a lower bound
    on the makespan of every schedule offloading exactly the set ``S`` (``>= cutoff`` when none is
    below), used by the set descent to skip sets. The front end :func:`memplan.offload.solve` passes
    the split relaxation's.

    Inside a ``solve`` call whose budget runs out while the model is being built, the build stops and
    the Solution is NO_SOLUTION (``details['interrupted'] = 'build'``); HiGHS's own time limit is
    clamped to what the budget has left by :mod:`formulations.highs_driver`. The ``bound`` is the
    largest of HiGHS's dual bound, Proposition 3's (:func:`models.offload.lower_bound_value`) and the
    fractional relaxation's (:func:`fractional_bound`); when the best schedule is within ``gap`` of it
    before the full model runs, the call stops there with status optimal.
    """
    import time as _time

    if formulation not in ("strong", "reference"):
        raise ValueError(f"formulation must be 'strong' or 'reference', got {formulation!r}")
    if not 0.0 <= lns < 1.0:
        raise ValueError(f"lns must be a share in [0, 1), got {lns!r}")
    if not 0.0 <= cover < 1.0 or cover + lns >= 1.0:
        raise ValueError(f"cover must be a share in [0, 1) with cover + lns < 1, got cover={cover!r}, lns={lns!r}")
    t_call = _time.monotonic()
    d = OffloadData.of(chain)
    times: dict[str, float] = {}
    lb = lower_bound_value(chain, memory, bandwidth)
    with timed(times, "bound"):
        frac = fractional_bound(chain, memory, bandwidth)
    if frac is not None:
        lb = max(lb, frac)
    horizon = None
    if start is not None:
        horizon = validate_offload(chain, start, memory).makespan
    details = {"size": {}, "start_accepted": None, "phased": phased, "start_makespan": horizon,
               "formulation": formulation, "fractional_bound": frac}
    best, best_val = start, horizon
    rel = 1e-6 if gap is None else gap

    def proven(v):
        return v is not None and v - lb <= rel * v

    cap = _budget.current().limit(time_limit)

    def proven_solution():
        """The best schedule, within the gap of the best bound before the full model ran."""
        details["stopped"] = "the best schedule is within the gap of the bound"
        which = "the split relaxation's" if details.get("split_bound", {}).get("value") == lb else (
            "the fractional relaxation's" if frac is not None and frac == lb else "Proposition 3's")
        return make_solution(chain, "milp", best, memory, bound=min(lb, best_val), predicted=best_val,
                             status=Status.OPTIMAL, message=f"within the gap of {which} bound",
                             times=times, details=details, tol=1e-6)

    def share_end(share):
        """The deadline after ``share`` of the call's limit (60 s when it has none)."""
        return t_call + share * cap if cap is not None else t_call + 60.0 * share

    polish = None
    if formulation == "strong" and start is not None and cover > 0 and not proven(best_val):
        # when the model cannot be built in the whole limit, the enumeration is all that runs: it may
        # take all of it (on long chains it then finds better sets than in half of its share)
        builds = cap is None or build_seconds(d.L) <= cap
        with timed(times, "cover"):
            best, best_val, cstats = _cover_search(chain, memory, bandwidth, start, horizon, lb,
                                                   share_end(cover / 2 if builds else 0.95),
                                                   log=_budget.current().log)
        polish = cstats.pop("best_sets")
        details["cover"] = cstats
        if best_val < horizon * (1 - 1e-12):
            _budget.current().log(f"MILP set enumeration ({cstats['sets']} sets): makespan {best_val:.6g} s")
        horizon = best_val
    try:
        left = math.inf if cap is None else cap - (_time.monotonic() - t_call)
        if build_seconds(d.L) > left:
            # it would be interrupted anyway, after the budget is spent (a constraint family of a long
            # chain is not interrupted in the middle): not started
            need = build_seconds(d.L)
            raise BuildInterrupted(f"building the MILP on L = {d.L} stages takes at least {need:.3g} s here, more "
                                   f"than the {max(0.0, left):.3g} s left: give a time limit of at least "
                                   f"{math.ceil(need * 2)} s, or use method 'dynprog' (it answers within any limit)",
                                   "not built")
        with timed(times, "build"):
            if formulation == "strong":
                mdl, info = build_offload_arrays(chain, memory, bandwidth, horizon=horizon, phased=phased)
                mip_start = _start_values(mdl, info, d, best) if best is not None else None
                details["rows"] = info["families"]
            else:
                m, info = build_offload_milp(chain, memory, bandwidth, horizon=horizon, phased=phased)
                mip_start = _mip_start(m, info, d, start) if start is not None else None
    except BuildInterrupted as e:
        details["interrupted"] = e.stage
        if best is not None and best is not start:      # the enumeration's schedule is still an answer
            return make_solution(chain, "milp", best, memory, bound=lb, predicted=best_val,
                                 status=Status.TIME_LIMIT, message=f"{e}; the set enumeration's schedule",
                                 times=times, details=details, tol=1e-6)
        return Solution(PROBLEM, "milp", Status.NO_SOLUTION, bound=lb, memory_limit=memory,
                        message=f"not solved: {e}", times=times, details=details)
    if bound is not None and formulation == "strong" and not proven(best_val) and _budget.current().remaining() > 5.0:
        # a stronger relaxation given by the caller (the split relaxation, issue 21), pruned by the best
        # schedule's makespan
        with timed(times, "bound"):
            sb = bound(best_val if best_val is not None else math.inf)
        if sb is not None:
            details["split_bound"] = {"value": sb.value, "split": sb.split, "absent": sb.absent,
                                      "relaxed": sb.relaxed}
            if sb.value > lb:
                lb = sb.value
                _budget.current().log(f"MILP split bound {lb:.6g} s")
                # every schedule's makespan is at least that: a lower bound on C for HiGHS
                mdl.lb[info["C"]] = max(mdl.lb[info["C"]], min(lb / info["tu"] * (1 - 1e-9), mdl.ub[info["C"]]))
    if best is not None and proven(best_val):
        return proven_solution()
    if polish is not None and not proven(best_val):
        solver = _SetSolver(chain, memory, bandwidth, mdl, info, d, threads)
        with timed(times, "cover"):
            got, got_val, runs = _polish_sets(solver, polish, best, best_val, share_end(cover))
        details["cover"]["polish"] = runs
        if got_val < best_val * (1 - 1e-12):
            best, best_val = got, got_val
            _budget.current().log(f"MILP best sets with every order: makespan {best_val:.6g} s")
        if not proven(best_val):
            with timed(times, "cover"):
                best, best_val, dstats = _set_descent(solver, set_bound, best, best_val, share_end(cover),
                                                      log=_budget.current().log)
            details["cover"]["descent"] = dstats
        mip_start = _start_values(mdl, info, d, best)

    if formulation == "strong" and start is not None and lns > 0 and not proven(best_val):
        deadline = share_end(cover + lns)
        with timed(times, "lns"):
            best, best_val, mip_start, stats = _lns(chain, memory, bandwidth, mdl, info, d, start_x=mip_start,
                                                    incumbent=best, value=best_val, deadline=deadline,
                                                    threads=threads, log=_budget.current().log)
        details["lns"] = stats
    if best is not None and proven(best_val):
        return proven_solution()
    if formulation == "strong":
        with timed(times, "matrix"):
            Amat = mdl.matrix()
        res, xs = solve_arrays(cost=info["cost"], lower=np.array(mdl.lb), upper=np.array(mdl.ub),
                               integer=np.array(mdl.integer), A=Amat, row_lower=np.array(mdl.row_lo),
                               row_upper=np.array(mdl.row_hi), time_limit=time_limit, gap=gap, threads=threads,
                               mip_start=mip_start, log_file=log_file, verbose=verbose,
                               objective_scale=info["tu"], options={**EXACT_TOLERANCES, **(options or {})})
        times["compile"] = times.pop("matrix") + res.times.get("compile", 0.0)
        times["solve"] = res.times.get("solve", 0.0)
    else:
        res = solve_milp(m, time_limit=time_limit, gap=gap, threads=threads, mip_start=mip_start,
                         log_file=log_file, verbose=verbose, objective_scale=info["tu"], options=options)
        times.update(res.times)
    bound = lb if res.bound is None else max(res.bound * info["tu"], lb)   # Prop. 3 / Theorem 2 hold regardless
    details.update(size=res.size, start_accepted=res.start_accepted, nodes=res.nodes)
    improved_start = best is not None and best is not start
    if not res.has_solution or (improved_start and res.objective * info["tu"] >= best_val * (1 - 1e-9)):
        if improved_start:      # the full model did not beat the searches' schedule (set search, neighbourhoods)
            status = Status.OPTIMAL if res.status == Status.OPTIMAL else (
                Status.TIME_LIMIT if res.status in (Status.TIME_LIMIT, Status.NO_SOLUTION) else Status.FEASIBLE)
            if status == Status.OPTIMAL:
                bound = max(bound, res.objective * info["tu"]) if res.objective is not None else bound
            return make_solution(chain, "milp", best, memory, bound=min(bound, best_val), predicted=best_val,
                                 status=status, message=f"{res.message}; the schedule found before the full model "
                                 f"(by the {' and '.join(n for k, n in (('cover', 'set search'), ('lns', 'neighbourhood search')) if k in details)})",
                                 times=times, details=details, tol=1e-6)
        if res.status == Status.INFEASIBLE and start is not None:
            res.message += " (unexpected: a MIP start was given)"
        return Solution(PROBLEM, "milp", res.status, bound=bound, memory_limit=memory, message=res.message,
                        times=times, details=details)
    sched = _read_arrays(info, d, xs, bandwidth) if formulation == "strong" else read_schedule(m, info, d, bandwidth)
    try:
        validate_offload(chain, sched, memory, tol=1e-6)
    except InvalidOffloadSchedule as e:
        if best is not None and best_val <= res.objective * info["tu"] * (1 + 1e-6):
            sched = best
            details["note"] = f"MILP schedule rejected by the validator ({e}); the start is as good"
        else:
            return Solution(PROBLEM, "milp", Status.ERROR, bound=bound, memory_limit=memory,
                            predicted=res.objective * info["tu"], times=times, details=details,
                            message=f"MILP schedule rejected by the validator: {e}")
    sol = make_solution(chain, "milp", sched, memory, bound=bound, predicted=res.objective * info["tu"],
                        status=res.status, message=res.message, times=times, details=details, tol=1e-6)
    return sol
