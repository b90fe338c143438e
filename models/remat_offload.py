"""Re-materialization + offloading schedules and their simulator (paper 000, sections 3-4).

A :class:`RematOffloadSchedule` is a re-materialization sequence (the operations of paper 004,
Table 1, with the semantics of :mod:`models.remat`) plus a list of **transfers** on one host link of bandwidth
``beta`` (bytes/s):

- ``offload`` of ``nbytes`` of a stored forward value (``a^l`` or ``abar^l``, whichever is stored at
  index ``l``): the bytes stay on the device, and count in its memory, until the transfer **ends**;
- ``prefetch`` of ``nbytes`` of a value that was offloaded: the device memory is **reserved at the
  start** of the transfer; the bytes are usable when it ends.

A value may be moved in several parts (``part`` numbers them); paper 000 (Lemma 1) treats transfers
as a fluid that frees or fills memory at rate beta, and the joint DP (:mod:`baselines.remat_offload_dp`)
realizes that fluid in parts of at most one memory slot each.

Timing. Every operation and every transfer has a ``release`` time (earliest start, seconds; 0 by
default). The transfer stream runs the transfers in list order: a transfer starts at
``max(release, end of the previous transfer)`` and lasts ``nbytes / beta``. The compute stream runs
the operations in order: an operation starts at ``max(release, end of the previous operation, time
at which all its inputs are entirely on the device)``. The simulator never delays anything for
memory: waits that a memory limit needs are part of the schedule (the release times), and the
simulator **checks** the memory at every instant: ``stored values - offloaded bytes + reserved
prefetch bytes + outputs and overhead of the running operation <= limit``. At equal instants (within
a relative 1e-9), offloads that end release their bytes first, then the operations take and give
back memory in their order (one of zero duration still holds its outputs and overhead for an
instant), then prefetches that start reserve theirs.

Checks (raise :class:`InvalidRematOffloadSchedule`): the operation sequence is valid for paper 004's
semantics (:func:`models.remat.simulate_remat`); an operation's inputs (``a^{l-1}`` for F^l;
``abar^l`` and ``a^{l-1}`` for B^l) have no byte left on the host when it starts; an offload moves
bytes of a value that is stored on the device when the transfer starts and that no operation
discards before the transfer ends; a prefetch brings back bytes that are on the host when it
starts; the memory limit holds at every instant.

With no transfers and no release times the result agrees with :func:`models.remat.simulate_remat`
(same makespan, peak and recomputation time).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from memplan.models.chain import Chain
from memplan.models.remat import InvalidSequence, RematSchedule, simulate_remat

if TYPE_CHECKING:
    from memplan.models.offload import OffloadSchedule


class InvalidRematOffloadSchedule(ValueError):
    """The re-materialization + offloading schedule is not valid; the message says which operation or
    transfer, and why."""


@dataclass
class Transfer:
    """One transfer on the host link: ``kind`` is ``"offload"`` or ``"prefetch"``; ``index`` the
    forward value's index l (a^l or abar^l, whichever is stored); ``nbytes`` how much of it."""

    kind: str
    index: int
    nbytes: float
    release: float = 0.0
    part: int = 0

    def to_json(self) -> dict:
        return {"kind": self.kind, "index": self.index, "nbytes": self.nbytes, "release": self.release,
                "part": self.part}


@dataclass
class RematOffloadSchedule:
    """Operations ``ops`` (as in :class:`models.remat.RematSchedule`), their release times, and the
    transfers in stream order."""

    ops: list[tuple[str, int]]
    release: list[float] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ops = [(str(op), int(l)) for op, l in self.ops]
        if not self.release:
            self.release = [0.0] * len(self.ops)
        if len(self.release) != len(self.ops):
            raise ValueError("release needs one time per operation")
        self.transfers = [t if isinstance(t, Transfer) else Transfer(**t) for t in self.transfers]

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def remat(self) -> RematSchedule:
        return RematSchedule(self.ops)

    def notation(self) -> str:
        return self.remat.notation()

    def offloaded(self) -> dict[int, float]:
        """Index -> bytes offloaded (summed over parts)."""
        out: dict[int, float] = {}
        for t in self.transfers:
            if t.kind == "offload":
                out[t.index] = out.get(t.index, 0.0) + t.nbytes
        return out

    def to_json(self) -> dict:
        return {"ops": [[op, l] for op, l in self.ops], "release": list(self.release),
                "transfers": [t.to_json() for t in self.transfers]}

    @classmethod
    def from_json(cls, data: dict) -> "RematOffloadSchedule":
        return cls(ops=[(op, l) for op, l in data["ops"]], release=list(data.get("release", [])),
                   transfers=[Transfer(**t) for t in data.get("transfers", [])])


@dataclass
class RematOffloadReplay:
    """What the simulator measured (seconds, bytes)."""

    makespan: float
    peak_memory: float
    recompute_time: float
    idle_time: float                  # compute stream idle (all of it waits for transfers)
    idle_data: float                  # ... of which an input was still (partly) on the host
    op_start: list[float] = field(default_factory=list)
    op_end: list[float] = field(default_factory=list)
    transfer_start: list[float] = field(default_factory=list)
    transfer_end: list[float] = field(default_factory=list)
    transfer_time: float = 0.0        # busy time of the link
    offloaded_bytes: float = 0.0
    memory_trace: list[tuple[float, float]] = field(default_factory=list)   # (time, bytes) after each instant


def _inputs(op: str, l: int) -> tuple[int, ...]:
    """Indices an operation reads: a^{l-1} for F^l; abar^l and a^{l-1} for B^l."""
    return (l - 1,) if op != "B" else (l, l - 1)


def _discards(op: str, l: int, before: list[int], after: list[int]) -> list[int]:
    """Indices whose stored forward value this op removes (from the remat states before/after)."""
    return [k for k in (l - 1, l) if before[k] != 0 and after[k] == 0]


def simulate_remat_offload(chain: Chain, schedule: RematOffloadSchedule, bandwidth: float | None,
                           memory_limit: float | None = None, *, tol: float = 1e-9,
                           one_overhead: bool = False) -> RematOffloadReplay:
    """Replay a re-materialization + offloading schedule: makespan, peak, recomputation and idle times.
    Each forward is charged its own overhead (``one_overhead=True``: the papers' one ``o_f``), as in
    :func:`models.remat.simulate_remat`.

    The timing and memory rules are those of the module docstring. Time ``O(n L + (n + k) log(n + k))``
    for ``n`` operations and ``k`` transfers (the remat states of every operation, then each operation
    checked against the transfers of the values it reads or discards only).

    Parameters
    ----------
    chain : Chain
    schedule : RematOffloadSchedule
    bandwidth : float, (float, float) or None
        Link bandwidth (bytes/s); None or 0 only for a schedule without transfers. A pair is
        (device to host, host to device): offloads then last ``nbytes / pair[0]`` and prefetches
        ``nbytes / pair[1]`` (a PCIe or NVLink-C2C link is not equally fast both ways; the solvers
        take one number, this lets a replay use both).
    memory_limit : float, optional
        Bytes; exceeding it at any instant raises.
    tol : float
        Relative tolerance on times and on the limit.

    Returns
    -------
    RematOffloadReplay

    Raises
    ------
    InvalidRematOffloadSchedule
        The schedule breaks a rule (the message says which operation or transfer, and why).

    Examples
    --------
    Two stages (``a^0`` = 4 B, the others 2 B, forward 1 s, backward 2 s). Offloading ``a^0`` after
    ``F^1`` and bringing it back during ``B^2`` costs no time over a 4 B/s link:

    >>> c = Chain.from_stages(uf=[1, 1], ub=[2, 2], wa=[4, 2, 2])
    >>> ops = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)]
    >>> moves = [Transfer("offload", 0, 4.0, release=1.0), Transfer("prefetch", 0, 4.0, release=2.0)]
    >>> rep = simulate_remat_offload(c, RematOffloadSchedule(ops, transfers=moves), 4.0)
    >>> rep.makespan, rep.peak_memory, rep.transfer_start, rep.transfer_end
    (6.0, 12.0, [1.0, 2.0], [2.0, 3.0])

    Prefetched after ``B^2``, ``a^0`` arrives at 5 s and ``B^1`` waits one second for it:

    >>> late = [Transfer("offload", 0, 4.0, release=1.0), Transfer("prefetch", 0, 4.0, release=4.0)]
    >>> rep = simulate_remat_offload(c, RematOffloadSchedule(ops, transfers=late), 4.0)
    >>> rep.makespan, rep.idle_data
    (7.0, 1.0)
    """
    ops = schedule.ops
    L = chain.L
    try:
        base = simulate_remat(chain, ops, one_overhead=one_overhead)
    except InvalidSequence as e:
        raise InvalidRematOffloadSchedule(str(e)) from None
    b_off, b_pre = bandwidth if isinstance(bandwidth, tuple) else (bandwidth, bandwidth)
    if schedule.transfers and not (b_off and b_pre):
        raise InvalidRematOffloadSchedule("the schedule has transfers but the bandwidth is 0")

    # --- remat state (0 none, 1 a, 2 abar) before each op, to know sizes and discards
    wa, wab = chain.wa, chain.wabar
    states_before = remat_states(ops, L)

    # --- transfer stream
    ts, te = [], []
    free = 0.0
    for k, t in enumerate(schedule.transfers):
        if t.kind not in ("offload", "prefetch"):
            raise InvalidRematOffloadSchedule(f"transfer {k}: unknown kind {t.kind!r}")
        if not 0 <= t.index <= L or t.nbytes <= 0:
            raise InvalidRematOffloadSchedule(f"transfer {k}: bad index {t.index} or size {t.nbytes}")
        s = max(t.release, free)
        e = s + t.nbytes / (b_off if t.kind == "offload" else b_pre)
        ts.append(s)
        te.append(e)
        free = e
    scale = max([1e-12] + [abs(x) for x in te] + [float(chain.store_all_time())])
    eps = tol * scale

    # host bytes of index l as a function of time: + at offload end, - at prefetch end
    host_events: dict[int, list[tuple[float, float]]] = {}
    for k, t in enumerate(schedule.transfers):
        host_events.setdefault(t.index, []).append((te[k], t.nbytes if t.kind == "offload" else -t.nbytes))
    for v in host_events.values():
        v.sort()
    # the offloads of each index, in list order (the checks below look at those of one value only)
    offloads_of: dict[int, list[int]] = {}
    for q, t in enumerate(schedule.transfers):
        if t.kind == "offload":
            offloads_of.setdefault(t.index, []).append(q)

    def host_at(l: int, time: float) -> float:
        return sum(d for (tt, d) in host_events.get(l, ()) if tt <= time + eps)

    def size_of(l: int, st: list[int]) -> float:
        return wab[l] if st[l] == 2 else wa[l] if st[l] == 1 else 0.0

    # --- compute stream
    starts, ends = [], []
    prev = 0.0
    idle = idle_data = 0.0
    for pos, (op, l) in enumerate(ops):
        ready = prev            # when the inputs are entirely on the device (ignoring the release time)
        for k in _inputs(op, l):
            if k <= L and host_events.get(k):
                if host_at(k, ready) > 1e-9 * max(1.0, wab[k]):
                    later = [tt for (tt, d) in host_events[k] if d < 0 and tt > ready - eps]
                    ok = [tt for tt in later if host_at(k, tt) <= 1e-9 * max(1.0, wab[k])]
                    if not ok:
                        raise InvalidRematOffloadSchedule(
                            f"operation {pos} ({op}^{l}) needs value {k}, which is (partly) on the host "
                            f"and never entirely prefetched back")
                    ready = max(ready, min(ok))
        start = max(schedule.release[pos], ready)
        if start > ready:       # held back by the release time: inputs must still be there at start
            for k in _inputs(op, l):
                if k <= L and host_events.get(k) and host_at(k, start) > 1e-9 * max(1.0, wab[k]):
                    raise InvalidRematOffloadSchedule(f"operation {pos} ({op}^{l}) starts at {start:.6g}s when "
                                                      f"value {k} is (partly) on the host again")
        idle += start - prev
        idle_data += ready - prev
        dt = chain.ub[l] if op == "B" else chain.uf[l]
        starts.append(start)
        ends.append(start + dt)
        prev = start + dt
        # an offload part may not free bytes of an input while the operation reads it
        for k in _inputs(op, l):
            for q in offloads_of.get(k, ()):
                if start + eps < te[q] < prev - eps:
                    raise InvalidRematOffloadSchedule(f"transfer {q} frees bytes of value {k} at {te[q]:.6g}s while "
                                                      f"operation {pos} ({op}^{l}) reads it")
        # a value may not be discarded while part of it is on the host or being offloaded
        for k in _discards(op, l, states_before[pos], states_before[pos + 1]):
            for q in offloads_of.get(k, ()):
                if ts[q] < prev - eps and te[q] > start + eps:
                    raise InvalidRematOffloadSchedule(f"operation {pos} ({op}^{l}) discards value {k} while "
                                                      f"transfer {q} offloads it")
            if host_events.get(k) and host_at(k, prev) > 1e-9 * max(1.0, wab[k]):
                raise InvalidRematOffloadSchedule(f"operation {pos} ({op}^{l}) discards value {k} while part of it "
                                                  f"is on the host")
    makespan = prev

    # --- offload/prefetch validity against the remat states
    def state_at(time: float) -> list[int]:
        """Remat state at ``time`` (an op's effect applies at its end): before the first operation that
        ends after it (the ends never decrease: each operation starts after the previous one ends)."""
        return states_before[bisect.bisect_right(ends, time + eps)]

    # the bytes of each value on the host before transfer k: the link runs the transfers one at a time
    # in list order, so those of the transfers before k (counted by time instead, with the time
    # tolerance, a transfer shorter than it counted itself and the parts after it: a 9 B value moved in
    # 2.85 ns parts on a 98 s schedule was refused as "offloads more than is stored")
    on_host: dict[int, float] = {}
    for k, t in enumerate(schedule.transfers):
        st = state_at(ts[k])
        if st[t.index] == 0:
            raise InvalidRematOffloadSchedule(f"transfer {k} ({t.kind} of index {t.index}) starts at {ts[k]:.6g}s "
                                              f"when value {t.index} is not stored")
        size = size_of(t.index, st)
        host_before = on_host.get(t.index, 0.0)
        on_host[t.index] = host_before + (t.nbytes if t.kind == "offload" else -t.nbytes)
        if t.kind == "offload":
            if host_before + t.nbytes > size * (1 + 1e-9) + 1e-9:
                raise InvalidRematOffloadSchedule(f"transfer {k}: offloads more of value {t.index} than is stored")
        else:
            if host_before + eps < t.nbytes * (1 - 1e-9) - 1e-9:
                raise InvalidRematOffloadSchedule(f"transfer {k}: prefetches {t.nbytes:.6g} B of value {t.index} "
                                                  f"but only {host_before:.6g} B are on the host")

    # --- memory at every instant: events (time, delta)
    # (time, rank, delta): at one instant, offloads that end release first, then the compute stream's
    # events in its own order (an operation of zero duration still takes its memory before it gives
    # it back), then prefetches that start reserve
    events: list[tuple[float, float, float]] = []
    mem0 = chain.wa[0] + chain.wd[L + 1] + chain.resident     # as simulate_remat's initial state
    mem_before = [mem0] + list(base.memory_after[:-1])
    for pos in range(len(ops)):
        extra = base.memory_during[pos] - mem_before[pos]
        events.append((starts[pos], 1 + 2 * pos, extra))
        events.append((ends[pos], 2 + 2 * pos, base.memory_after[pos] - base.memory_during[pos]))
    last = 3 + 2 * len(ops)
    for k, t in enumerate(schedule.transfers):
        if t.kind == "offload":
            events.append((te[k], 0, -t.nbytes))
        else:
            events.append((ts[k], last, t.nbytes))
    events.sort(key=lambda e: e[0])
    mem = mem0
    peak = mem0
    limit = None if memory_limit is None else memory_limit * (1 + tol) + tol
    trace: list[tuple[float, float]] = [(0.0, mem0)]
    i = 0
    while i < len(events):
        j = i
        while j < len(events) and events[j][0] <= events[i][0] + eps:
            j += 1
        group = sorted(events[i:j], key=lambda e: e[1])
        for tt, _, d in group:
            mem += d
            if mem > peak:
                peak = mem
                if limit is not None and mem > limit:
                    raise InvalidRematOffloadSchedule(f"memory {mem:.6g} B exceeds the limit {memory_limit:.6g} B "
                                                      f"at t = {tt:.6g}s")
        trace.append((events[i][0], mem))
        i = j
    return RematOffloadReplay(makespan=float(makespan), peak_memory=float(peak),
                              recompute_time=float(base.recompute_time), idle_time=float(idle),
                              idle_data=float(idle_data), op_start=starts, op_end=ends, transfer_start=ts,
                              transfer_end=te, transfer_time=sum(e - s for s, e in zip(ts, te)),
                              offloaded_bytes=sum(t.nbytes for t in schedule.transfers if t.kind == "offload"),
                              memory_trace=trace)


def from_remat(ops: Iterable[Sequence]) -> RematOffloadSchedule:
    """A re-materialization + offloading schedule without transfers."""
    return RematOffloadSchedule(ops=[(op, l) for op, l in ops])


def offload_schedule_as_joint(chain: Chain, sched: "OffloadSchedule", bandwidth) -> RematOffloadSchedule:
    """Paper 001's offloading schedule as a re-materialization + offloading schedule.

    Operations ``F_all^1..F_all^{L+1}`` then ``B^{L+1}..B^1`` at paper 001's start times (paper 001's
    ``F_i``, ``B_i`` are stage ``i+1``); each offload of ``x_j`` (``abar^j``, ``a^0`` for j = 0) is
    released so that it ends no earlier than the end of ``F_{j}`` (stage j+1, which reads it: this
    simulator forbids freeing an input while it is read, paper 001 releases the memory at that end
    anyway), each prefetch at paper 001's start. A value whose prefetch starts before paper 001 frees
    it (the end of its offload or of ``F_j``, whichever is later) gains nothing and is not moved. The
    simulator replays it; where the two memory models differ (the seed gradient), the replay says so.
    ``bandwidth``: one speed or ``(to_host, to_device)`` (:func:`memplan.models.offload.link_speeds`),
    as the schedule was planned with."""
    L = chain.L
    from memplan.models.offload import OffloadData, link_speeds

    b_out = link_speeds(bandwidth)[0]

    d = OffloadData.of(chain)
    ops = [("F_all", l) for l in range(1, L + 2)] + [("B", l) for l in range(L + 1, 0, -1)]
    release = [sched.tF[i] for i in range(L + 1)] + [sched.tB[i] for i in range(L, -1, -1)]
    moves = []
    for j in sched.offloaded:
        size = float(chain.wa[0] if j == 0 else chain.wabar[j])
        dur = size / b_out
        reader_end = sched.tF[j] + d.uF[j]
        if sched.prefetch[j] <= max(sched.offload[j] + dur, reader_end) * (1 + 1e-12):
            # paper 001 frees x_j at max(end of its offload, end of F_j) and reserves it again when the
            # prefetch starts: a prefetch that starts before that never lets the bytes go, and delaying
            # the offload to the end of its reader (as this simulator needs) would delay the prefetch and
            # then B_j past paper 001's times, into a later transfer's reservation (DYNPROG on GPT-2 small
            # offloaded the loss's input while the loss ran: +1 GiB in the replay). Such a pair is left out
            continue
        moves.append(Transfer("offload", j, size, release=max(sched.offload[j], reader_end - dur)))
        moves.append(Transfer("prefetch", j, size, release=sched.prefetch[j]))
    moves.sort(key=lambda t: (t.release, t.kind != "offload"))
    return RematOffloadSchedule(ops=ops, release=release, transfers=moves)


def coalesce_parts(schedule: RematOffloadSchedule, chain: Chain) -> RematOffloadSchedule:
    """``schedule`` with every run of consecutive transfers of one value (same kind and index, parts
    numbered 0, 1, 2, ... in list order) merged into one transfer of the summed bytes, released at the
    run's first part's release, at the run's place in the list (list order is kept). A sum within
    a relative 1e-9 of ``chain.wa[l]`` or ``chain.wabar[l]`` is set to it exactly (the parts' floats
    need not add up to the byte). The joint DP (:mod:`baselines.remat_offload_dp`) moves values in parts
    of one memory slot; :func:`execute_joint` moves whole values only.

    The memory model differs (:func:`models.remat_offload.simulate_remat_offload`): a part of an
    offload frees its bytes when *it* ends, so the DP's offload frees memory gradually, one slot per
    part time; the whole offload frees everything at its end, the last part's end at the earliest. A
    part of a prefetch reserves its bytes when it starts; the whole prefetch reserves the whole value
    at the first part's start, so the memory is taken earlier. The merged transfers also start no
    earlier than the parts would (the link runs them in the same order, without gaps between the
    parts of a run, and the first part's release is kept). Peaks can therefore be higher than the DP's
    and the schedule can break its limit: replay the result with :func:`simulate_remat_offload` (with
    the limit) before running it; the operations and their release times are unchanged."""
    out: list[Transfer] = []
    part = -1                       # the part number of the last transfer merged into out[-1]
    for t in schedule.transfers:
        last = out[-1] if out else None
        if last is not None and last.kind == t.kind and last.index == t.index and t.part == part + 1:
            last.nbytes += float(t.nbytes)
        else:
            out.append(Transfer(t.kind, t.index, float(t.nbytes), release=t.release, part=0))
        part = t.part
    for t in out:
        if 0 <= t.index <= chain.L:
            for whole in (float(chain.wa[t.index]), float(chain.wabar[t.index])):
                if abs(t.nbytes - whole) <= 1e-9 * max(1.0, whole):
                    t.nbytes = whole
                    break
    return RematOffloadSchedule(ops=list(schedule.ops), release=list(schedule.release), transfers=out)


def boundary_eps(times: Sequence[float], rep: RematOffloadReplay) -> float:
    """The tolerance within which a boundary time (``times``: the operations' starts and the
    makespan) counts as at or after a transfer's start or end of ``rep``."""
    return 1e-9 * max([1e-12] + [abs(t) for t in times] + [abs(t) for t in rep.transfer_end])


def issue_boundaries(schedule: RematOffloadSchedule, rep: RematOffloadReplay) -> list[int]:
    """The operation boundary (0..len(ops): before that operation) at which an executor issues each
    transfer of ``schedule``, from its replay ``rep``: the first boundary whose time is at or after the
    transfer's simulated start; an offload of index j not before the boundary after the last
    operation that reads j and starts before the offload's simulated end (it may not free what is
    read); never before the previous transfer's (one link, list order)."""
    ops = list(schedule.ops)
    n = len(ops)
    times = list(rep.op_start) + [rep.makespan]
    eps = boundary_eps(times, rep)
    out: list[int] = []
    prev = 0
    for q, t in enumerate(schedule.transfers):
        b = next((k for k in range(n + 1) if times[k] >= rep.transfer_start[q] - eps), n)
        if t.kind == "offload":
            readers = [p for p in range(n) if t.index in _inputs(*ops[p]) and rep.op_start[p] < rep.transfer_end[q] - eps]
            if readers:
                b = max(b, readers[-1] + 1)
        prev = max(b, prev)
        out.append(prev)
    return out


def whole_values(schedule: RematOffloadSchedule, chain: Chain, bandwidth, rounds: int = 3) -> RematOffloadSchedule:
    """``schedule`` (its parts merged, :func:`coalesce_parts`) with every trip of a value to the host and
    back made of one whole transfer each way: the first offload of the trip moves the whole value
    stored at its index (``wa[j]`` for a^j, ``wabar[j]`` for abar^j, at the operation boundary where
    it is issued, :func:`issue_boundaries`), later offloads of the same
    index before its prefetch are left out, and the first prefetch brings the whole value back (later
    ones left out). The joint DP's fluid moves a fraction of a value, or a value in separate runs;
    an executor moves storages whole. Rounding up frees more memory at the offload's end but
    reserves more at the prefetch's start and keeps the link busy longer, so replay the result with
    the limit. The boundaries depend on the replay's times, which the rounding changes: repeated
    until nothing changes, ``rounds`` times at most (then returned as it is, for the replay to judge)."""
    L = chain.L
    ops = list(schedule.ops)
    states = remat_states(ops, L)
    cur = schedule
    for _ in range(rounds):
        bounds = issue_boundaries(cur, simulate_remat_offload(chain, cur, bandwidth))
        out: list[Transfer] = []
        trip: dict[int, str] = {}          # index -> "off" (an offload kept, no prefetch yet) / "pre"
        changed = False
        for t, b in zip(cur.transfers, bounds):
            j = t.index
            if (t.kind == "offload" and trip.get(j) == "off") or (t.kind == "prefetch" and trip.get(j) == "pre"):
                changed = True             # a later run of a value already on its way: merged into the first
                continue
            st = states[b][j]                  # the replay checked that j is an index of the chain
            whole = float(chain.wa[j] if st == 1 else chain.wabar[j]) if st else float(t.nbytes)
            if abs(t.nbytes - whole) > 1e-9 * max(1.0, whole):
                changed = True
            out.append(Transfer(t.kind, j, whole, release=t.release, part=0))
            trip[j] = "off" if t.kind == "offload" else "pre"
        cur = RematOffloadSchedule(ops=list(ops), release=list(schedule.release), transfers=out)
        if not changed:
            break
    return cur


def remat_states(ops: Sequence[tuple[str, int]], L: int) -> list[list[int]]:
    """The stored value at each index (0 nothing, 1 a^l, 2 abar^l) before each operation and after the
    last (Table 1 of paper 004, as :func:`models.remat.simulate_remat`; the sequence is checked there)."""
    state = [0] * (L + 2)
    state[0] = 1
    out = []
    for op, l in ops:
        out.append(list(state))
        if op == "B":
            state[l] = 0
            if state[l - 1] == 1:
                state[l - 1] = 0
        else:
            state[l] = 2 if op == "F_all" else max(state[l], 1)
            if op == "F_none":
                state[l - 1] = 0
    out.append(list(state))
    return out
