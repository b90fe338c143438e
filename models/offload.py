"""Activation offloading (paper 001, Beaumont, Eyraud-Dubois, Shilova, Euro-Par 2020): timed schedules,
their validator, the problem's bounds (``M_peak``, the minimum feasible memory, the lower bound of
Proposition 3), the no-wait schedule builder of Proposition 1, and :func:`make_solution`, which wraps a
replayed schedule in a :class:`Solution` for every method (heuristics and MILP alike).

Notation: paper 001 -> :class:`models.chain.Chain`
===================================================

Paper 001 numbers the operations ``F_0..F_L`` and ``B_0..B_L`` (section 3.1, "0 <= i <= L"): ``F_i``
reads ``x_i`` and writes ``x_{i+1}``; ``B_i`` reads ``x_{i+1}``, ``x_i`` and ``y_{i+1}`` and writes
``y_i``. A :class:`~models.chain.Chain` with stages ``1..L+1`` (stage ``L+1`` is the loss) maps onto it
with the *same* ``L``:

===================  ===========================  ===============================================
paper 001            chain field                  remark
===================  ===========================  ===============================================
``F_i``, ``B_i``     stage ``i+1``                i = 0..L; ``F_L``/``B_L`` are the loss stage
``u_{F_i}``          ``uf[i+1]``                  seconds
``u_{B_i}``          ``ub[i+1]``
``|x_i|``            ``wabar[i]``                 i = 0..L+1; what autograd keeps of the forward
                                                  value (abar contains a), so what is offloaded
``|y_i|``            ``wd[i]``                    gradient delta^i, i = 0..L+1
``ex^F_i``           ``of_all[i+1]``              temporary memory of F_i beyond inputs/outputs:
                                                  every forward here keeps its abar, so F_all's own
                                                  overhead (``of`` where it is not given)
``ex^B_i``           ``ob[i+1]``
``M_GPU``            ``memory_limit``             activation budget, bytes (parameters
                                                  ``weights`` are not modelled, as in the paper)
``beta``             ``bandwidth``                bytes/s, one link, one transfer at a time; or
                                                  a pair ``(to_host, to_device)``, below
===================  ===========================  ===============================================

Memory model (section 3.1, and ``m_{F_i}``, ``m_{B_i}`` of section 3.2)
----------------------------------------------------------------------
* ``x_0`` is in memory from time 0. ``x_{i+1}`` is reserved when ``F_i`` starts (an operation reserves
  its output when it starts) and is freed when ``B_i`` ends (``B_i`` is its last reader).
* ``ex^F_i`` is held while ``F_i`` runs; ``B_i`` holds ``ex^B_i`` and reserves ``y_i`` when it starts;
  ``y_{i+1}`` (reserved by ``B_{i+1}``; the seed ``y_{L+1}`` by ``B_L``) is freed when ``B_i`` ends.
  ``y_0`` stays. Without offloading, the memory during ``F_i`` is ``ex^F_i + sum_{j<=i+1} |x_j|`` and
  during ``B_i`` ``ex^B_i + |y_i| + |y_{i+1}| + sum_{j<=i+1} |x_j|``: exactly ``m_{F_i}`` and
  ``m_{B_i}`` of section 3.2, whose maximum is ``M_peak`` (:func:`peak_memory_no_offload`).
* Offloading ``x_j`` (``j`` in ``0..L``; ``x_{L+1}``, the loss output, is never worth offloading) is
  one *offload* transfer followed by one *prefetch* transfer, each lasting ``|x_j|/beta``, on a single
  link (one transfer at a time; transfers overlap computations). The offload may start once ``x_j``
  exists (end of ``F_{j-1}``; time 0 for ``x_0``). The memory of ``x_j`` is released *at the end* of
  the offload, and not before ``F_j`` (its forward reader) has ended: release time
  ``max(end of offload, end of F_j)``. The prefetch starts after the offload ended, *reserves*
  ``|x_j|`` when it starts, and must end before ``B_j`` starts (``B_j`` is the first backward reader
  of ``x_j``); the memory is then freed with ``B_{j-1}`` as usual.
* **Two link speeds** (memplan's extension; paper 001 has one ``beta``). A measured host link is
  often faster in one direction than the other, and the paper's model then needs one number for
  both: the slower (too long a prefetch when copies to the device are faster) or the faster (too
  short an offload). ``bandwidth`` may be a pair ``(beta_out, beta_in)``: an offload of ``x_j``
  lasts ``|x_j|/beta_out``, its prefetch ``|x_j|/beta_in``, still one transfer at a time. Every
  rule above holds with those durations; with ``beta_out == beta_in`` everything is the paper's.
  :func:`link_speeds` reads either form.
* Computations run one at a time in the order ``F_0..F_L, B_L..B_0`` (the data dependencies of Fig. 1
  force that order). The makespan is the end of ``B_0``.

Instants. Memory can only grow when a computation or a prefetch starts, so the validator checks it at
those instants, after applying every release that happens at the same instant (an operation may use
memory freed by a transfer that ends when it starts). Zero-duration operations (used by the reduction
of Theorem 1) are handled as instants of their own, in chain order.

No-wait schedules (Proposition 1)
---------------------------------
For a fixed offloaded set and fixed transfer orders (offloads in one order, then prefetches in one
order), :func:`no_wait_schedule` builds the schedule in which every forward action starts as soon as
its data is there and memory allows (forward phase from time 0), every backward action is done as
*late* as possible before the end (section 5.2 analyses the backward phase that way: it is the no-wait
policy in reversed time, where a prefetch is an offload and ``B_i`` reserves ``x_{i+1}``), and the two
phases are joined with the smallest feasible idle time between them (the ``epsilon_G`` of Lemma 4,
found here by a search over the instants where the two phases can collide, replayed by the validator).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .chain import Chain
from .solution import Solution, Status

PROBLEM = "offload"


class InvalidOffloadSchedule(ValueError):
    """The schedule breaks a rule of the model; the message names the rule, the item and the time."""


class NoWaitInfeasible(ValueError):
    """The no-wait schedule for this offloaded set and these orders cannot fit in memory."""


# ---------------------------------------------------------------------------------------------- sizes
@dataclass(frozen=True)
class OffloadData:
    """Paper-001 view of a chain (arrays indexed like the paper; see the module docstring)."""

    L: int
    uF: np.ndarray   # 0..L
    uB: np.ndarray   # 0..L
    x: np.ndarray    # 0..L+1
    y: np.ndarray    # 0..L+1
    exF: np.ndarray  # 0..L
    exB: np.ndarray  # 0..L

    @classmethod
    def of(cls, chain: Chain) -> "OffloadData":
        L = chain.L
        return cls(L=L, uF=chain.uf[1:L + 2].copy(), uB=chain.ub[1:L + 2].copy(), x=chain.wabar.copy(),
                   y=chain.wd.copy(), exF=chain.of_all[1:L + 2].copy(), exB=chain.ob[1:L + 2].copy())

    @property
    def candidates(self) -> list[int]:
        """Activations that may be offloaded: x_0..x_L."""
        return list(range(self.L + 1))


def peak_memory_no_offload(chain: Chain) -> float:
    """``M_peak`` of section 3.2: ``max_i max(m_{F_i}, m_{B_i})`` with
    ``m_{F_i} = ex^F_i + sum_{j<=i+1}|x_j|`` and ``m_{B_i} = ex^B_i + |y_i| + |y_{i+1}| + sum_{j<=i+1}|x_j|``."""
    d = OffloadData.of(chain)
    cum = np.cumsum(d.x)  # cum[k] = sum_{j<=k} x_j
    mF = d.exF + cum[1:d.L + 2]
    mB = d.exB + d.y[:d.L + 1] + d.y[1:d.L + 2] + cum[1:d.L + 2]
    return float(max(mF.max(), mB.max()))


def min_feasible_memory(chain: Chain) -> float:
    """Smallest memory limit for which some schedule exists (everything offloadable is offloaded and
    transfers are run between computations): each operation still needs its own inputs and outputs,
    ``max_i max(|x_i| + |x_{i+1}| + ex^F_i, |x_i| + |x_{i+1}| + |y_i| + |y_{i+1}| + ex^B_i)``."""
    d = OffloadData.of(chain)
    pair = d.x[:d.L + 1] + d.x[1:d.L + 2]
    f = pair + d.exF
    b = pair + d.y[:d.L + 1] + d.y[1:d.L + 2] + d.exB
    return float(max(f.max(), b.max()))


def link_speeds(bandwidth) -> tuple[float, float]:
    """``(beta_out, beta_in)``: the link's speed to the host (offloads) and to the device (prefetches),
    bytes/s, from one number (both directions) or a pair ``(to_host, to_device)``; None or 0 gives
    ``(0.0, 0.0)`` (no link). Raises ValueError for anything else (a pair must be two numbers).

    >>> link_speeds(4.0), link_speeds((2, 8)), link_speeds(None)
    ((4.0, 4.0), (2.0, 8.0), (0.0, 0.0))
    """
    if bandwidth is None:
        return 0.0, 0.0
    if isinstance(bandwidth, (tuple, list)):
        if len(bandwidth) != 2:
            raise ValueError(f"a link is one bandwidth or a pair (to the host, to the device), got {bandwidth!r}")
        out, inn = (float(v) for v in bandwidth)
        return out, inn
    b = float(bandwidth)
    return b, b


def has_link(bandwidth) -> bool:
    """Whether ``bandwidth`` (one number or a pair) allows transfers: finite and positive both ways."""
    out, inn = link_speeds(bandwidth)
    return out > 0 and inn > 0 and math.isfinite(out) and math.isfinite(inn)


def same_speed(bandwidth) -> float | None:
    """The one speed of a link that has the same speed both ways (paper 001's ``beta``), else None."""
    out, inn = link_speeds(bandwidth)
    return out if out == inn else None


def lower_bound_value(chain: Chain, memory: float, bandwidth) -> float:
    """Proposition 3 of paper 001: ``LB = max(sum_i (u_{F_i} + u_{B_i}), 2 (M_peak - M_GPU) / beta)``;
    with two link speeds ``(M_peak - M_GPU) (1/beta_out + 1/beta_in)``.

    Every schedule computes everything, and the ``M_peak - M_GPU`` bytes that must leave the device
    (Proposition 2) are sent and fetched back on the one link. ``inf`` when offloading is needed and
    no bandwidth is known. O(L).

    Examples
    --------
    A two-stage chain (``x = (4, 1, 1, 0)``, unit times, ``ex^B_1 = 6``): ``M_peak = 12``, so at
    ``M = 9`` three bytes go out and back at 1 byte/s.

    >>> from memplan.models.chain import Chain
    >>> c = Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[4, 1, 1], wd=[0, 0, 0], of=[0, 0], ob=[0, 6])
    >>> peak_memory_no_offload(c), min_feasible_memory(c)
    (12.0, 8.0)
    >>> lower_bound_value(c, 9, 1.0), lower_bound_value(c, 12, None)
    (6.0, 4.0)
    """
    d = OffloadData.of(chain)
    comp = float(d.uF.sum() + d.uB.sum())
    excess = max(0.0, peak_memory_no_offload(chain) - memory)
    if excess <= 0:
        return comp
    out, inn = link_speeds(bandwidth)
    if not (out > 0 and inn > 0):
        return math.inf
    return max(comp, excess / out + excess / inn)


# ------------------------------------------------------------------------------------------- schedule
@dataclass
class OffloadSchedule:
    """Start times (seconds) of every ``F_i``, ``B_i`` (paper indices 0..L) and of the offload and
    prefetch of every offloaded ``x_j``. ``bandwidth`` (bytes/s, or a pair ``(to_host, to_device)``)
    fixes the transfer durations."""

    tF: list[float]
    tB: list[float]
    offload: dict[int, float] = field(default_factory=dict)
    prefetch: dict[int, float] = field(default_factory=dict)
    bandwidth: float | tuple[float, float] = math.inf

    def __post_init__(self) -> None:
        if isinstance(self.bandwidth, (list, tuple)):
            out, inn = link_speeds(self.bandwidth)
            self.bandwidth = out if out == inn else (out, inn)
        self.tF = [float(t) for t in self.tF]
        self.tB = [float(t) for t in self.tB]
        self.offload = {int(j): float(t) for j, t in self.offload.items()}
        self.prefetch = {int(j): float(t) for j, t in self.prefetch.items()}

    @property
    def L(self) -> int:
        return len(self.tF) - 1

    @property
    def offloaded(self) -> list[int]:
        return sorted(self.offload)

    def link_order(self) -> list[tuple[str, int]]:
        """Transfers in start order: ``[("O", j), ("P", k), ...]``."""
        ev = [(t, 0, "O", j) for j, t in self.offload.items()] + [(t, 1, "P", j) for j, t in self.prefetch.items()]
        return [(k, j) for _, _, k, j in sorted(ev)]

    def to_json(self) -> dict:
        return {"model": "paper001-offload", "index": "paper 001: F_i, B_i, x_i for i = 0..L (chain stage i+1)",
                "bandwidth": list(self.bandwidth) if isinstance(self.bandwidth, tuple) else self.bandwidth,
                "tF": self.tF, "tB": self.tB,
                "offload": {str(j): t for j, t in sorted(self.offload.items())},
                "prefetch": {str(j): t for j, t in sorted(self.prefetch.items())},
                "offloaded": self.offloaded}

    @classmethod
    def from_json(cls, data: dict) -> "OffloadSchedule":
        return cls(tF=data["tF"], tB=data["tB"], offload={int(k): v for k, v in data["offload"].items()},
                   prefetch={int(k): v for k, v in data["prefetch"].items()}, bandwidth=data["bandwidth"])


@dataclass
class OffloadReplay:
    """What the validator measured."""

    makespan: float
    peak_memory: float
    peak_time: float
    offloaded: list[int]
    offloaded_bytes: float
    link_busy: float
    compute_idle: float


#: relative window (of the makespan) within which event times are one instant
CLUSTER_TOL = 1e-9


def _cluster_times(times: Iterable[float], eps: float) -> dict[float, float]:
    """Map each time to a representative so that times closer than ``eps`` compare equal."""
    out: dict[float, float] = {}
    rep = None
    for t in sorted(set(times)):
        if rep is None or t - rep > eps:
            rep = t
        out[t] = rep
    return out


def validate_offload(chain: Chain, schedule: OffloadSchedule, memory_limit: float | None = None,
                     bandwidth=None, *, tol: float = 1e-7,
                     trace: list | None = None) -> OffloadReplay:
    """Replay a timed offloading schedule; return makespan and peak memory or raise
    :class:`InvalidOffloadSchedule` with the rule that is broken.

    Checks (paper 001, section 3.1): computation order and data dependencies; offload after the
    activation exists; prefetch after the offload and before ``B_j``; one transfer at a time; memory at
    every instant (see the module docstring for the memory model) at most ``memory_limit``.
    ``tol`` is relative (to the makespan for times, to the limit for memory). ``trace``, when a list,
    receives ``(time, memory)`` after every memory event (a step function).
    """
    d = OffloadData.of(chain)
    L = d.L
    S = schedule
    b_out, b_in = link_speeds(bandwidth if bandwidth is not None else S.bandwidth)
    if len(S.tF) != L + 1 or len(S.tB) != L + 1:
        raise InvalidOffloadSchedule(f"schedule has {len(S.tF)} forward / {len(S.tB)} backward times, "
                                     f"the chain needs {L + 1} of each (F_0..F_{L}, B_0..B_{L})")
    if set(S.offload) != set(S.prefetch):
        miss = sorted(set(S.offload) ^ set(S.prefetch))
        raise InvalidOffloadSchedule(f"x_{miss[0]} has an offload without a prefetch or the reverse")
    for j in S.offload:
        if not 0 <= j <= L:
            raise InvalidOffloadSchedule(f"x_{j} cannot be offloaded (candidates are x_0..x_{L})")
    if S.offload and not has_link((b_out, b_in)):
        raise InvalidOffloadSchedule("transfers need a finite positive bandwidth")
    allt = [*S.tF, *S.tB, *S.offload.values(), *S.prefetch.values()]
    if not all(math.isfinite(t) for t in allt):
        raise InvalidOffloadSchedule("a start time is not finite")
    makespan = S.tB[0] + d.uB[0]
    eps = tol * max(1.0, abs(makespan)) if makespan > 0 else tol
    eF = [S.tF[i] + d.uF[i] for i in range(L + 1)]
    eB = [S.tB[i] + d.uB[i] for i in range(L + 1)]
    c = {j: d.x[j] / b_out for j in S.offload}          # offload durations
    ci = {j: d.x[j] / b_in for j in S.offload}          # prefetch durations

    # -- computations: order and dependencies (Fig. 1)
    if S.tF[0] < -eps:
        raise InvalidOffloadSchedule(f"F_0 starts at {S.tF[0]:.6g} < 0")
    for i in range(1, L + 1):
        if S.tF[i] < eF[i - 1] - eps:
            raise InvalidOffloadSchedule(f"F_{i} starts at {S.tF[i]:.6g} before F_{i - 1} ends "
                                         f"({eF[i - 1]:.6g}): it needs x_{i}")
    if S.tB[L] < eF[L] - eps:
        raise InvalidOffloadSchedule(f"B_{L} starts at {S.tB[L]:.6g} before F_{L} ends ({eF[L]:.6g})")
    for i in range(L - 1, -1, -1):
        if S.tB[i] < eB[i + 1] - eps:
            raise InvalidOffloadSchedule(f"B_{i} starts at {S.tB[i]:.6g} before B_{i + 1} ends "
                                         f"({eB[i + 1]:.6g}): it needs y_{i + 1}")
    # -- transfers: dependencies
    for j in S.offload:
        o, p = S.offload[j], S.prefetch[j]
        ready = 0.0 if j == 0 else eF[j - 1]
        if o < ready - eps:
            raise InvalidOffloadSchedule(f"offload of x_{j} starts at {o:.6g} before x_{j} exists "
                                         f"(end of F_{j - 1} at {ready:.6g})")
        if p < o + c[j] - eps:
            raise InvalidOffloadSchedule(f"prefetch of x_{j} starts at {p:.6g} before its offload ends "
                                         f"({o + c[j]:.6g})")
        if p + ci[j] > S.tB[j] + eps:
            raise InvalidOffloadSchedule(f"prefetch of x_{j} ends at {p + ci[j]:.6g} after B_{j} starts "
                                         f"({S.tB[j]:.6g}), which needs x_{j}")
    # -- one transfer at a time
    tr = sorted([(S.offload[j], c[j], f"offload of x_{j}") for j in S.offload]
                + [(S.prefetch[j], ci[j], f"prefetch of x_{j}") for j in S.prefetch])
    tr = [t for t in tr if t[1] > 0]
    for (a0, l0, n0), (a1, l1, n1) in zip(tr, tr[1:]):
        if a1 < a0 + l0 - eps:
            raise InvalidOffloadSchedule(f"{n1} starts at {a1:.6g} while {n0} runs until {a0 + l0:.6g} "
                                         "(one transfer at a time)")

    # -- memory. Event key: (time, cls, sub, phase); cls 0 = releases at the end of something that
    # lasts, cls 1 = zero-duration computations (sub = position in the computation order, phase 0
    # reserve / 1 free), cls 2 = reservations of things that last.
    pos_F = {i: i for i in range(L + 1)}
    pos_B = {i: 2 * L + 1 - i for i in range(L + 1)}
    events: list[tuple[float, int, int, int, float, str]] = []

    def reserve(t, size, pos, zero, what):
        if size:
            events.append((t, 1, pos, 0, size, what) if zero else (t, 2, 0, 0, size, what))

    def free(t, size, pos, zero):
        if size:
            events.append((t, 1, pos, 1, -size, "") if zero else (t, 0, 0, 0, -size, ""))

    zF = [d.uF[i] == 0 for i in range(L + 1)]
    zB = [d.uB[i] == 0 for i in range(L + 1)]
    # x_0 is there from time 0; an offloaded x_0 leaves at max(end of its offload, end of F_0)
    if d.x[0]:
        events.append((0.0, 2, 0, 0, d.x[0], "x_0"))
    if 0 in S.offload:
        rel, pos, zero = _release(S, d, 0, eF, c, zF, pos_F)
        free(rel, d.x[0], pos, zero)
    for i in range(L + 1):
        # F_i: output x_{i+1} and ex^F_i
        reserve(S.tF[i], d.exF[i], pos_F[i], zF[i], f"ex^F_{i}")
        free(eF[i], d.exF[i], pos_F[i], zF[i])
        reserve(S.tF[i], d.x[i + 1], pos_F[i], zF[i], f"x_{i + 1}")
        j = i + 1
        if j in S.offload:
            rel, pos, zero = _release(S, d, j, eF, c, zF, pos_F)
            free(rel, d.x[j], pos, zero)
        # B_i: ex^B_i, y_i; frees x_{i+1}, y_{i+1}
        reserve(S.tB[i], d.exB[i], pos_B[i], zB[i], f"ex^B_{i}")
        free(eB[i], d.exB[i], pos_B[i], zB[i])
        reserve(S.tB[i], d.y[i], pos_B[i], zB[i], f"y_{i}")
        if i > 0:
            free(eB[i - 1], d.y[i], pos_B[i - 1], zB[i - 1])
        if i == L:
            reserve(S.tB[L], d.y[L + 1], pos_B[L], zB[L], f"y_{L + 1}")
            free(eB[L], d.y[L + 1], pos_B[L], zB[L])
        free(eB[i], d.x[i + 1], pos_B[i], zB[i])
    for j in S.prefetch:
        if d.x[j]:
            events.append((S.prefetch[j], 2, 0, 0, d.x[j], f"prefetch of x_{j}"))
    free(eB[0], d.x[0], pos_B[0], zB[0])

    # Events closer than the clustering window happen at one instant (frees first). The window only
    # absorbs floating-point noise (a MILP's times are exact to about 1e-9 of the makespan): a wider
    # one would net a reservation against a later free and accept a schedule that is over the limit
    # for that long (with tol = 1e-6 and a 1 KB/s link that was 8 ms and 0.7 MB).
    rep = _cluster_times([e[0] for e in events], min(eps, CLUSTER_TOL * max(1.0, abs(makespan))))
    events = sorted(((rep[t], cl, s, ph, dl, w) for t, cl, s, ph, dl, w in events), key=lambda e: e[:4])
    limit = None if memory_limit is None else memory_limit * (1 + tol) + tol
    mem = float(chain.resident)        # tensors crossing two or more cuts, held for the whole step
    peak, peak_t = mem, 0.0
    if limit is not None and mem > limit:
        raise InvalidOffloadSchedule(f"memory {mem:.6g} B exceeds the limit {memory_limit:.6g} B: the resident "
                                     "tensors alone (Chain.resident) do not fit")
    for t, cl, s, ph, dl, what in events:
        mem += dl
        if trace is not None:
            trace.append((t, mem))
        if dl > 0:
            if mem > peak:
                peak, peak_t = mem, t
            if limit is not None and mem > limit:
                # report after all reservations of this instant of the same class
                raise InvalidOffloadSchedule(
                    f"memory {mem:.6g} B exceeds the limit {memory_limit:.6g} B at time {t:.6g} "
                    f"(when {what} is reserved)")
    busy = sum(c[j] + ci[j] for j in S.offload)
    comp = float(d.uF.sum() + d.uB.sum())
    return OffloadReplay(makespan=float(makespan), peak_memory=float(peak), peak_time=float(peak_t),
                         offloaded=S.offloaded, offloaded_bytes=float(sum(d.x[j] for j in S.offload)),
                         link_busy=float(busy), compute_idle=float(makespan - comp))


def _release(S, d, j, eF, c, zF, pos_F):
    """Release instant of the first copy of an offloaded x_j: max(end of offload, end of F_j)."""
    endO = S.offload[j] + c[j]
    if eF[j] >= endO:
        return eF[j], pos_F[j], zF[j]
    return endO, 0, False


def is_valid(chain, schedule, memory_limit, bandwidth=None) -> bool:
    try:
        validate_offload(chain, schedule, memory_limit, bandwidth)
        return True
    except InvalidOffloadSchedule:
        return False


def make_solution(chain: Chain, method: str, schedule: OffloadSchedule | None, memory: float, *,
                  bound: float | None = None, predicted: float | None = None, message: str = "",
                  status: Status = Status.FEASIBLE, times=None, details=None, tol: float = 1e-7) -> Solution:
    """Replay ``schedule`` with :func:`validate_offload` and wrap it in a :class:`Solution`.

    ``objective`` and ``peak_memory`` are the replayed makespan and peak; ``details`` gets what was
    offloaded and the link order. A FEASIBLE schedule that reaches ``bound`` becomes OPTIMAL. Without a
    schedule the Solution is NO_SOLUTION. Raises :class:`InvalidOffloadSchedule` for an invalid one.
    """
    details = dict(details or {})
    if schedule is None:
        return Solution(PROBLEM, method, Status.NO_SOLUTION, bound=bound, memory_limit=memory,
                        predicted=predicted, message=message or "no valid schedule found",
                        times=dict(times or {}), details=details)
    r = validate_offload(chain, schedule, memory, tol=tol)
    details.update(offloaded=r.offloaded, offloaded_bytes=r.offloaded_bytes, link_busy=r.link_busy,
                   compute_idle=r.compute_idle, link_order=[f"{k}{j}" for k, j in schedule.link_order()])
    if bound is not None and r.makespan <= bound * (1 + 1e-9) and status == Status.FEASIBLE:
        status = Status.OPTIMAL
    return Solution(PROBLEM, method, status, objective=r.makespan, peak_memory=r.peak_memory,
                    schedule=schedule, bound=bound, memory_limit=memory, predicted=predicted,
                    message=message, times=dict(times or {}), details=details)


# ------------------------------------------------------------------------------- no-wait (Prop. 1)
def _phase(dur: Sequence[float], extra: Sequence[float], items: list[tuple[float, int, int, int, bool]],
           order: Sequence[int], M: float, beta: float, what: str):
    """One phase run as early as possible: operations ``q = 0..n-1`` in sequence, transfers in
    ``order`` on one link; an item ``(size, produced_by, ready_after, last_use, transferred)`` is
    reserved when operation ``produced_by`` starts (-1: at time 0), may be transferred after
    ``ready_after`` ends (-1: time 0) and is released at ``max(transfer end, end of last_use)``.
    Operation ``q`` needs ``extra[q]`` besides the items. Returns (starts, transfer starts, releases).
    """
    n = len(dur)
    start = [0.0] * n
    tstart: dict[int, float] = {}
    release: dict[int, float] = {}
    rel_times: list[float] = []      # sorted release times after the previous operation's end
    rel_cum: list[float] = []        # parallel: size released at that time (cumulated later)
    # bytes released at or before the previous operation's end: every later operation starts after
    # that instant, so they are summed once (the scan below then only walks the transfers in flight:
    # O(L) instead of O(L^2) per phase on long chains)
    past = 0.0
    pending_rel: dict[int, list[int]] = {}   # op -> items whose release waits for its end
    alloc = sum(s for s, p, *_ in items if p < 0)
    by_prod: dict[int, float] = {}
    for s, p, *_ in items:
        if p >= 0:
            by_prod[p] = by_prod.get(p, 0.0) + s
    link = 0.0
    k = 0
    end_prev = 0.0

    def add_release(t, size):
        nonlocal past
        if t <= end_prev:
            past += size
            return
        idx = bisect.bisect_right(rel_times, t)
        rel_times.insert(idx, t)
        rel_cum.insert(idx, size)

    def push_transfers(q_known: int):
        """Schedule transfers in order while their item is ready (ready_after < q_known)."""
        nonlocal k, link
        while k < len(order):
            it = order[k]
            size, prod, ready, last, _ = items[it]
            if ready >= q_known:
                return
            rt = 0.0 if ready < 0 else start[ready] + dur[ready]
            st = max(link, rt)
            tstart[it] = st
            link = st + size / beta
            if last < q_known:
                r = max(link, 0.0 if last < 0 else start[last] + dur[last])
                release[it] = r
                add_release(r, size)
            else:
                pending_rel.setdefault(last, []).append(it)
            k += 1

    for q in range(n):
        push_transfers(q)
        alloc += by_prod.get(q, 0.0)
        need = alloc + extra[q] - M
        t = end_prev
        if need > 1e-12 * max(1.0, M):
            acc = past
            found = end_prev if acc >= need * (1 - 1e-12) - 1e-9 else None
            for rt, sz in zip(rel_times, rel_cum):
                if found is not None:
                    break
                acc += sz
                if acc >= need * (1 - 1e-12) - 1e-9:
                    found = rt
            if found is None:
                raise NoWaitInfeasible(f"{what}: operation {q} needs {need:.6g} B more than the limit and "
                                       "the queued transfers cannot free it")
            t = max(t, found)
        start[q] = t
        end_prev = t + dur[q]
        n_past = bisect.bisect_right(rel_times, end_prev)
        if n_past:
            past += sum(rel_cum[:n_past])
            del rel_times[:n_past], rel_cum[:n_past]
        for it in pending_rel.pop(q, []):
            r = max(tstart[it] + items[it][0] / beta, end_prev)
            release[it] = r
            add_release(r, items[it][0])
    push_transfers(n + 1)
    for q, its in pending_rel.items():   # pragma: no cover - last_use always < n
        for it in its:
            release[it] = max(tstart[it] + items[it][0] / beta, start[q] + dur[q])
    return start, tstart, release


def no_wait_schedule(chain: Chain, memory_limit: float, bandwidth, offloaded: Iterable[int] = (),
                     offload_order: Sequence[int] | None = None,
                     prefetch_order: Sequence[int] | None = None) -> OffloadSchedule:
    """The no-wait schedule of Proposition 1 for a set of offloaded activations and transfer orders.

    ``offloaded``: indices ``j`` of ``x_j`` (0..L). ``offload_order`` (default increasing) and
    ``prefetch_order`` (default decreasing: the *ordered* schedules of section 4) must be permutations of
    it; all offloads precede all prefetches on the link. Forward actions start as early as possible
    from time 0, backward actions as late as possible before the end (no-wait in reversed time), and the
    smallest idle time between the phases that the validator accepts is used (monotone in that idle
    time, so found by bisection over the instants where the phases can collide).
    Raises :class:`NoWaitInfeasible` when no such schedule fits in ``memory_limit``. ``bandwidth``:
    one speed or a pair ``(to_host, to_device)`` (:func:`link_speeds`): the forward phase's transfers
    are offloads, the backward phase's prefetches.
    """
    d = OffloadData.of(chain)
    L, M = d.L, float(memory_limit)
    S = sorted(set(int(j) for j in offloaded))
    for j in S:
        if not 0 <= j <= L:
            raise ValueError(f"x_{j} cannot be offloaded (candidates x_0..x_{L})")
    oo = list(S) if offload_order is None else [int(j) for j in offload_order]
    po = sorted(S, reverse=True) if prefetch_order is None else [int(j) for j in prefetch_order]
    if sorted(oo) != S or sorted(po) != S:
        raise ValueError("offload_order and prefetch_order must be permutations of the offloaded set")
    if S and not has_link(bandwidth):
        raise ValueError("offloading needs a finite positive bandwidth")
    b_out, b_in = link_speeds(bandwidth) if S else (math.inf, math.inf)
    Sset = set(S)
    # forward phase: operations F_0..F_L; item j = x_j
    itemsF = [(d.x[0], -1, -1, 0, 0 in Sset)] + [(d.x[j], j - 1, j - 1, j, j in Sset) for j in range(1, L + 2)]
    tF, oF, relF = _phase(list(d.uF), list(d.exF), itemsF, oo, M, b_out, "forward phase")
    # backward phase in reversed time: operations R_i = B_i for i = 0..L; x_j reserved by R_{j-1}
    # (x_0 from the start), transferable after R_j, released at the end of its reversed transfer.
    itemsB = [(d.x[0], -1, 0, 0, 0 in Sset)] + [(d.x[j], j - 1, j, j, j in Sset) for j in range(1, L + 2)]
    extraB = [d.y[i] + d.y[i + 1] + d.exB[i] for i in range(L + 1)]
    rB, rP, _ = _phase(list(d.uB), extraB, itemsB, list(reversed(po)), M, b_in, "backward phase")
    DB = rB[L] + d.uB[L]
    rev_link_end = max((rP[j] + d.x[j] / b_in for j in S), default=0.0)
    eFL = tF[L] + d.uF[L]
    last_off = max((oF[j] + d.x[j] / b_out for j in S), default=0.0)
    T_low = max(eFL + DB, last_off + rev_link_end)
    fwd_end = max([eFL, last_off] + list(relF.values()))
    T_high = max(T_low, fwd_end + max(DB, rev_link_end))

    def build(T: float) -> OffloadSchedule:
        tB = [T - (rB[i] + d.uB[i]) for i in range(L + 1)]
        pre = {j: T - (rP[j] + d.x[j] / b_in) for j in S}
        return OffloadSchedule(tF=tF, tB=tB, offload={j: oF[j] for j in S}, prefetch=pre,
                               bandwidth=(b_out, b_in) if S else (bandwidth or math.inf))

    def ok(T: float) -> bool:
        return is_valid(chain, build(T), M)

    if ok(T_low):
        return build(T_low)
    if not ok(T_high):
        try:
            validate_offload(chain, build(T_high), M)
        except InvalidOffloadSchedule as e:
            raise NoWaitInfeasible(f"phases cannot be joined: {e}") from None
    # collision instants: forward releases f and backward reservations at T - b
    fr = sorted(set([eFL] + [relF[j] for j in S] + [oF[j] + d.x[j] / b_out for j in S]
                    + [tF[i] + d.uF[i] for i in range(L + 1)]))
    bk = sorted(set([rB[i] + d.uB[i] for i in range(L + 1)] + [rP[j] + d.x[j] / b_in for j in S]))
    cand = np.add.outer(np.array(fr), np.array(bk)).ravel()
    cand = np.unique(cand[(cand > T_low) & (cand < T_high)])
    cand = list(cand) + [T_high]
    lo, hi = 0, len(cand) - 1          # cand[hi] feasible
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(cand[mid]):
            hi = mid
        else:
            lo = mid + 1
    return build(float(cand[lo]))


# ------------------------------------------------------------------------------------ text timeline
def timeline(chain: Chain, schedule: OffloadSchedule, width: int = 72) -> str:
    """A two-row text Gantt chart: computations (F forward, B backward, . idle) and the link
    (> offload, < prefetch, . idle)."""
    d = OffloadData.of(chain)
    T = schedule.tB[0] + d.uB[0]
    if T <= 0:
        return "(empty schedule)"
    b_out, b_in = link_speeds(schedule.bandwidth)

    def row(intervals):
        cells = ["."] * width
        for a, b, ch in intervals:
            i0 = int(math.floor(a / T * width))
            i1 = max(i0 + 1, int(math.ceil(b / T * width)))
            for i in range(max(0, i0), min(width, i1)):
                cells[i] = ch
        return "".join(cells)

    comp = [(schedule.tF[i], schedule.tF[i] + d.uF[i], "F") for i in range(d.L + 1) if d.uF[i] > 0]
    comp += [(schedule.tB[i], schedule.tB[i] + d.uB[i], "B") for i in range(d.L + 1) if d.uB[i] > 0]
    link = [(t, t + d.x[j] / b_out, ">") for j, t in schedule.offload.items()]
    link += [(t, t + d.x[j] / b_in, "<") for j, t in schedule.prefetch.items()]
    return f"compute |{row(comp)}|\nlink    |{row(link)}|\n         0{' ' * (width - 1)}{T:.4g}s"


# ------------------------------------------------------------------------- fractional relaxation
# (a lower bound of Problem 1, Theorem 2: used by GREEDY's bound and by the MILP's bound)
def _frac_phase(dur, alloc0, alloc, extra, elig0, elig_end, Q, M, beta, what):
    """One phase of the fully fractional model run as early as possible. The link sends the first Q
    eligible bytes at rate beta as soon as they are eligible; sent bytes are freed at once.
    Returns (starts, bursts [(a, b)], sent_total)."""
    n = len(dur)
    starts = []
    bursts: list[list[float]] = []
    t, sent, elig, used = 0.0, 0.0, min(Q, elig0), alloc0

    def send(t0, t1):
        nonlocal sent
        b = elig - sent
        if b <= 0 or t1 <= t0:
            return
        dt = min(t1 - t0, b / beta)
        sent += dt * beta
        if bursts and abs(bursts[-1][1] - t0) <= 1e-12 * max(1.0, t0):
            bursts[-1][1] = t0 + dt
        else:
            bursts.append([t0, t0 + dt])

    for q in range(n):
        used += alloc[q]
        need = used + extra[q] - sent - M
        if need > 1e-12 * max(1.0, M):
            if need > elig - sent + 1e-9 * max(1.0, M):
                raise NoWaitInfeasible(f"{what}: operation {q} cannot fit even after offloading "
                                       f"{Q:.6g} bytes")
            w = need / beta
            send(t, t + w)
            t += w
        starts.append(t)
        send(t, t + dur[q])
        t += dur[q]
        elig = min(Q, elig + elig_end[q])
    send(t, math.inf)
    return starts, [tuple(b) for b in bursts], sent


def _interval_sum(a: np.ndarray, b: np.ndarray, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``sum_j w_j [a_j <= t < b_j]`` at every instant of ``t``: the weights of the intervals started
    by t minus those of the intervals ended by t (an empty interval, ``a_j >= b_j``, weighs nothing)."""
    w = np.where(a < b, w, 0.0)
    return _step_sum(a, w, t) - _step_sum(b, w, t)


def _step_sum(e: np.ndarray, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``sum_j w_j [e_j <= t]`` at every instant of ``t``."""
    if len(e) == 0:
        return np.zeros(len(t))
    order = np.argsort(e, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(w[order])])
    return cum[np.searchsorted(e[order], t, side="right")]


def _ramp_sum(e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``sum_j max(0, t - e_j)`` at every instant of ``t``."""
    if len(e) == 0:
        return np.zeros(len(t))
    es = np.sort(e)
    cum = np.concatenate([[0.0], np.cumsum(es)])
    k = np.searchsorted(es, t, side="right")
    return k * t - cum[k]


def fractional_makespan(chain: Chain, memory: float, bandwidth, amount: float | None = None,
                        *, return_parts: bool = False):
    """Makespan of the no-wait, eager, ordered schedule of the fully fractional relaxation (section 4)
    that offloads ``amount`` bytes (default ``Q = M_peak - M_GPU``, optimal by Theorem 2).

    Model: ``x_0, x_1, ...`` are offloaded in that order, the last one partially, as soon as they are
    computed; sent bytes are freed at once; prefetching runs in the reverse order, bytes being
    reserved as they arrive, and byte of ``x_j`` must be back before ``B_j``. The forward phase runs as
    early as possible, the backward phase as late as possible (reversed time), and the smallest idle
    time between them that keeps memory and the single link valid is found by bisection (memory is
    piecewise linear in time, so it is checked at every breakpoint). With two link speeds
    (:func:`link_speeds`) the forward phase sends at ``beta_out`` and the backward phase fetches at
    ``beta_in``. Theorem 2 (this schedule is optimal for the relaxation, hence a lower bound of
    Problem 1) is proven for one rate only: with two, the value is a makespan of the relaxation, not
    a proven bound, and the callers do not use it as one."""
    d = OffloadData.of(chain)
    L, M = d.L, float(memory)
    b_out, b_in = link_speeds(bandwidth)
    Q = max(0.0, peak_memory_no_offload(chain) - M) if amount is None else float(amount)
    total = float(d.x[:L + 1].sum())
    Q = min(Q, total)
    sF, bF, _ = _frac_phase(list(d.uF), d.x[0], list(d.x[1:L + 2]), list(d.exF), d.x[0],
                            list(d.x[1:L + 1]) + [0.0], Q, M, b_out, "forward")
    sR, bR, _ = _frac_phase(list(d.uB), d.x[0], list(d.x[1:L + 2]),
                            [d.y[i] + d.y[i + 1] + d.exB[i] for i in range(L + 1)], 0.0,
                            list(d.x[:L + 1]), Q, M, b_in, "backward")
    eF = [sF[i] + d.uF[i] for i in range(L + 1)]
    DB = sR[L] + d.uB[L]
    f_link_end = bF[-1][1] if bF else 0.0
    r_link_end = bR[-1][1] if bR else 0.0
    T_low = max(eF[L] + DB, f_link_end + r_link_end)
    T_high = max(T_low, max(eF[L], f_link_end) + max(DB, r_link_end))

    bF_a = np.array([a for a, _ in bF]); bF_b = np.array([b for _, b in bF])
    bR_a = np.array([a for a, _ in bR]); bR_b = np.array([b for _, b in bR])

    # memory is a sum of interval indicators and burst ramps: each term is evaluated at all instants
    # at once from sorted endpoints and prefix sums (O((P + L) log L) per call instead of the dense
    # P x L comparison, which made GREEDY take seconds on 1000 stages)
    def sent_by(A, Bb, t, beta):
        """Bytes sent by time(s) t through bursts [A, B) at rate beta (vectorised over t): each burst
        adds t - A once started and takes back t - B once ended."""
        return beta * (_ramp_sum(A, t) - _ramp_sum(Bb, t))

    sFa, eFa = np.array(sF), np.array(eF)
    uB = np.asarray(d.uB, float)
    x_all = np.asarray(d.x[:L + 2], float)
    exF, exB, y = np.asarray(d.exF, float), np.asarray(d.exB, float), np.asarray(d.y, float)
    a_x = np.concatenate([[0.0], sFa])      # x_j alive from the start of F_{j-1} (0 for x_0) ...

    def mem_at(T, tau):
        """Device memory at the instants ``tau`` (array) when the backward phase ends at T."""
        tB = T - (np.array(sR) + uB)
        eB = tB + uB
        m = _interval_sum(a_x, np.concatenate([[eB[0]], eB]), x_all, tau)   # ... to the end of B_{j-1} (B_0 for x_0)
        m = m + _interval_sum(sFa, eFa, exF, tau)
        m = m + _interval_sum(tB, eB, exB, tau)
        m = m + _interval_sum(tB, np.concatenate([[np.inf], eB[:-1]]), y[:L + 1], tau)   # y_i freed by B_{i-1}
        m = m + ((tB[L] <= tau) & (tau < eB[L])) * y[L + 1]
        m = m - sent_by(bF_a, bF_b, tau, b_out) + (Q - sent_by(bR_a, bR_b, T - tau, b_in))
        return m

    def ok(T):
        pts = set([0.0, T])
        pts.update(sF); pts.update(eF)
        for a, b in bF:
            pts.update((a, b))
        for i in range(L + 1):
            pts.update((T - sR[i], T - sR[i] - d.uB[i]))
        for a, b in bR:
            pts.update((T - a, T - b))
        pts = np.array(sorted(p for p in pts if 0 <= p <= T))
        keep = np.diff(pts) > 1e-12 * max(1.0, T)
        p0, p1 = pts[:-1][keep], pts[1:][keep]
        lim = M * (1 + 1e-12) + 1e-12
        v0 = mem_at(T, p0)
        vm = mem_at(T, 0.5 * (p0 + p1))
        return bool(np.all(v0 <= lim) and np.all(2 * vm - v0 <= lim))

    if not ok(T_low):
        lo, hi = T_low, T_high
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if ok(mid):
                hi = mid
            else:
                lo = mid
        T = hi
    else:
        T = T_low
    T = float(T)
    if return_parts:
        return T, {"Q": float(Q), "forward_end": float(eF[L]), "backward_span": float(DB)}
    return T


# ------------------------------------------------------------------ memory windows (MILP, bounds)
def window_memory(d: OffloadData, w: int) -> tuple[float, list[int]]:
    """Static memory of window ``w`` (``2q`` = run of computation q, ``2q+1`` = idle after it) and the
    candidates ``j`` whose presence there depends on transfers."""
    L = d.L
    q, idle = divmod(w, 2)
    static = 0.0
    var = []
    for j in range(L + 2):
        prod = 0 if j == 0 else 2 * (j - 1)
        if j == L + 1:
            alive_end = 2 * (L + 1)                  # freed with B_L
        elif j == 0:
            alive_end = 2 * (2 * L + 1) + 1          # kept to the end (freed with B_0)
        else:
            alive_end = 2 * (2 * L + 2 - j)          # run of B_{j-1}
        if w < prod or w > alive_end:
            continue
        if j <= L and 2 * j + 1 <= w <= 2 * (2 * L - j) + 1:
            var.append(j)
        else:
            static += d.x[j]
    if q <= L:                       # F_q
        if not idle:
            static += d.exF[q]
    else:                            # B_i
        i = 2 * L + 1 - q
        if not idle:
            static += d.exB[i] + d.y[i] + d.y[i + 1]
        else:
            static += d.y[i]
    return static, var
