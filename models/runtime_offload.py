"""Offloading executor: run paper 001's activation-offloading schedules on real PyTorch stages.

Paper 001 (Beaumont, Eyraud-Dubois, Shilova, Euro-Par 2020, section 3.1; notation in
:mod:`models.offload`) keeps every forward value (no re-materialization): the computations are
``F_0..F_L`` then ``B_L..B_0`` (this chain's ``F_all^1..F_all^{L+1}``, then ``B^{L+1}..B^1``); a
chosen value ``x_j`` (``abar^j``: the output a^j and everything autograd keeps for B^j; ``a^0`` for
j = 0) is sent **whole** to the host once its forward reader ``F^{j+1}`` has run, and brought back
whole before ``B^{j+1}``, its first backward reader. :func:`memplan.remat_offload.offload_schedule_as_joint`
turns GREEDY's and DYNPROG's schedules (:func:`memplan.offload.solve`) into a
:class:`models.remat_offload.RematOffloadSchedule`: those are what :func:`execute_offload` runs.

What is executed
----------------
- ``F_all^l`` runs stage l with autograd under ``torch.autograd.graph.saved_tensors_hooks``. The pack
  hook files every saved tensor by its storage (``untyped_storage().data_ptr()``): a storage first
  seen in stage l's forward (an intermediate, the output) goes to abar^l's *box*; one already in a
  box (the input a^{l-1}, kept in abar^{l-1}'s box) is a reference to that box's entry; parameters and
  buffers are packed as they are (they stay on the device and moving them frees nothing). A box
  entry holds one flat byte alias of its storage; a packed tensor is (entry, dtype, size, stride,
  offset), and unpack rebuilds it from the entry's device storage (after its prefetch). The outputs'
  storages join the box too.
- No other reference to a box's storage survives the forward: the executor keeps the outputs only as
  ``torch.autograd.graph.GradientEdge`` (node + output number, no data), and stage l+1 reads a^l
  through :class:`_Inject`, an autograd function whose output shares a^l's storage and whose backward
  hands delta^l to the executor (a leaf input would pin a^l through its ``AccumulateGrad`` node).
  The box holds its outputs' entries until B^j ends (the model's a^j); the intermediates' entries are
  held by their packed tensors only (the box keeps weak references), so the engine frees them as it
  passes each node of B^j, as it does without hooks. Dropping an entry's device tensor therefore
  frees that storage: per operation, a run without transfers holds the bytes
  :func:`models.runtime.execute` holds (``tests/test_runtime_offload.py``: the same memory after and
  during every operation of store-all on ResNet-18 and GPT-2).
- A stage whose output is a view of its input (a flatten) shares abar^{l-1}'s storage: the profile
  counts it in ``wabar[l]`` too, and moving either value would not free what the chain says; such
  an offload raises :class:`InvalidRematOffloadSchedule` when it is reached. A saved tensor that
  existed before the run and is neither a parameter nor a buffer (a constant kept as a plain module
  attribute) would be boxed and copied without freeing anything; the zoo's networks have none.
- ``B^l``: ``torch.autograd.backward`` from stage l's output edges with delta^l (one call per stage),
  then box l and delta^l are dropped (Table 1 of paper 004: B^l discards abar^l).
- Transfers are issued at operation boundaries (boundary k: just before operation k; :func:`plan_offload`):
  the simulator (:func:`models.remat_offload.simulate_remat_offload`) gives each operation's start
  time and each transfer's start; a transfer is issued at the first boundary whose time is at or after
  its start, an offload of j not before the boundary after ``F^{j+1}`` (its reader; the converted
  schedules end it no earlier, :func:`memplan.remat_offload.offload_schedule_as_joint`), and no
  transfer before the previous one (one link, in list order). At a boundary the offloads go first,
  then the prefetches. An offload copies every entry of box j to the host and drops the device
  storage; a prefetch allocates it again and copies back. Before an operation reads index j (B^{j+1},
  B^j) the prefetch must have completed. Only store-all orders and whole-value transfers are accepted
  (one offload then one prefetch per index, ``part`` 0, ``nbytes`` = ``wabar[j]``, ``wa[0]`` for
  j = 0); anything else raises :class:`InvalidRematOffloadSchedule`.
- CUDA: one side stream; the side stream waits for the compute stream at the issue boundary (the
  transfer starts there), copies with ``non_blocking=True`` to / from pinned host buffers; an
  offloaded device tensor gets ``record_stream(side)`` before it is dropped (the caching allocator
  does not reuse it before the copy ends); a prefetch's device buffer is allocated on the compute
  stream and the compute stream waits on the prefetch's event before the first operation that reads it.

CPU emulation (tests). The host is a ``numpy.empty`` byte buffer wrapped by ``torch.from_numpy``:
neither the dispatch-mode :class:`models.memory.TensorMemoryTracker` (it counts storages that come
out of ATen operations; ``from_numpy`` is none) nor c10's CPU allocator sees it, so the measured
memory is the device side only (``tests/test_runtime_offload.py`` checks that the tracker does not
count it). Copies are synchronous: a transfer completes at its issue boundary, so the measured memory
is that of the schedule with transfers of zero duration at the issue boundaries
(:meth:`OffloadPlan.executed_schedule`), which is what the tests compare with.

Not validated (no GPU on the development machine): the CUDA path has not been run at all, so neither
its correctness on a device nor its timing, its overlap of transfers with computation, or its memory
figures (a block freed with ``record_stream`` is reusable only once the copy has ended, which the
allocator's statistics may not show) are checked. On a device, a transfer starts at its issue
boundary, not at its simulated start, so a run may take longer than the simulation says.
Stages with multi-tensor cuts (resident tensors) are refused. RNG: every stage runs once, as in a
plain forward, so dropout masks are those of plain autograd; with deterministic kernels the
gradients are bit-identical to ``loss_fn(model(x)).backward()`` (the tests check ``torch.equal``).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .chain import Chain
from .remat import store_all_ops
from .remat_offload import (InvalidRematOffloadSchedule, RematOffloadReplay, RematOffloadSchedule, Transfer,
                            simulate_remat_offload)
from .runtime import RuntimeResult, _run_timed, _stage_info, _tracker_for

# ------------------------------------------------------------------------------------------ planning
@dataclass
class OffloadPlan:
    """Where :func:`execute_offload` issues each transfer of ``schedule``: ``issue[q]`` is the
    boundary (0..n, boundary k is just before operation k) of transfer q; ``boundary_times[k]`` the
    simulated time of boundary k (start of operation k; the last one is the makespan); ``replay`` the
    simulation the times come from."""

    schedule: RematOffloadSchedule
    issue: list[int]
    boundary_times: list[float]
    replay: RematOffloadReplay

    def executed_schedule(self, chain: Chain, gap: float = 1.0) -> tuple[RematOffloadSchedule, float]:
        """The schedule as the executor runs it on CPU, for :func:`simulate_remat_offload`: ``(schedule,
        bandwidth)``. Operation k is released ``gap`` seconds after operation k-1 ends (its duration is
        the chain's); the transfers issued at boundary k (offloads first, then prefetches, each in list
        order, as :func:`execute_offload` issues them) are released a quarter of ``gap`` into that idle
        time and all end within a quarter more (the returned bandwidth), so each takes effect between
        operation k-1's end and operation k's start, as the emulation's synchronous copies do.
        ``memory_trace`` of the replay then holds, at each operation's end, the memory after it."""
        ops = list(self.schedule.ops)
        order = sorted(range(len(self.issue)),
                       key=lambda q: (self.issue[q], self.schedule.transfers[q].kind != "offload", q))
        release, t = [], 0.0
        for op, l in ops:
            t += gap
            release.append(t)
            t += float(chain.ub[l] if op == "B" else chain.uf[l])
        per_boundary: dict[int, float] = {}
        for q in order:
            per_boundary[self.issue[q]] = per_boundary.get(self.issue[q], 0.0) + self.schedule.transfers[q].nbytes
        bandwidth = max(per_boundary.values(), default=1.0) / (gap / 4)
        moves = []
        for q in order:
            tr, b = self.schedule.transfers[q], self.issue[q]
            at = (release[b] if b < len(ops) else t + gap) - gap * 3 / 4
            moves.append(Transfer(tr.kind, tr.index, tr.nbytes, release=at, part=tr.part))
        return RematOffloadSchedule(ops=ops, release=release, transfers=moves), bandwidth

    def host_intervals(self) -> dict[int, tuple[int, int]]:
        """Index j -> (boundary of its offload, boundary of its prefetch): abar^j is off the device
        during the operations o..p-1."""
        out: dict[int, list[int]] = {}
        for t, b in zip(self.schedule.transfers, self.issue):
            out.setdefault(t.index, [0, 0])[0 if t.kind == "offload" else 1] = b
        return {j: (o, p) for j, (o, p) in out.items()}


def _check_shape(chain: Chain, schedule: RematOffloadSchedule) -> None:
    """Store-all order, whole-value transfers: one offload then one prefetch per index."""
    L = chain.L
    if list(schedule.ops) != store_all_ops(L):
        raise InvalidRematOffloadSchedule(
            "execute_offload runs paper 001's store-all order only (F_all^1..F_all^{L+1}, B^{L+1}..B^1, "
            f"L = {L}); this schedule has {schedule.notation()} (re-materialization is not executed here: "
            "use models.runtime.execute for sequences without transfers)")
    seen: dict[int, list[str]] = {}
    for q, t in enumerate(schedule.transfers):
        where = f"transfer {q} ({t.kind} of index {t.index})"
        if t.kind not in ("offload", "prefetch"):
            raise InvalidRematOffloadSchedule(f"{where}: unknown kind {t.kind!r}")
        if not 0 <= t.index <= L:
            raise InvalidRematOffloadSchedule(f"{where}: index outside 0..{L}")
        whole = float(chain.wa[0] if t.index == 0 else chain.wabar[t.index])
        if t.part != 0 or abs(t.nbytes - whole) > 1e-9 * max(1.0, whole):
            raise InvalidRematOffloadSchedule(
                f"{where}: moves {t.nbytes:.6g} B (part {t.part}); execute_offload moves whole values only "
                f"(paper 001): one transfer of {whole:.6g} B, part 0")
        kinds = seen.setdefault(t.index, [])
        if kinds != ([] if t.kind == "offload" else ["offload"]):
            raise InvalidRematOffloadSchedule(
                f"{where}: execute_offload needs exactly one offload then one prefetch per index (paper 001); "
                f"index {t.index} had {kinds or 'nothing'} before")
        kinds.append(t.kind)
    for j, kinds in seen.items():
        if kinds != ["offload", "prefetch"]:
            raise InvalidRematOffloadSchedule(f"index {j} is offloaded but never prefetched")


def plan_offload(chain: Chain, schedule: RematOffloadSchedule, bandwidth: float) -> OffloadPlan:
    """Check ``schedule`` (store-all order, whole-value transfers; valid for
    :func:`simulate_remat_offload` on ``chain`` over ``bandwidth``) and map each transfer to the
    operation boundary where the executor issues it (see the module docstring).

    Raises :class:`InvalidRematOffloadSchedule` with the reason."""
    _check_shape(chain, schedule)
    rep = simulate_remat_offload(chain, schedule, bandwidth)
    n = len(schedule.ops)
    L = chain.L
    times = list(rep.op_start) + [rep.makespan]
    eps = 1e-9 * max([1e-12] + [abs(t) for t in times] + [abs(t) for t in rep.transfer_end])
    issue: list[int] = []
    prev = 0
    for q, t in enumerate(schedule.transfers):
        b = next((k for k in range(n + 1) if times[k] >= rep.transfer_start[q] - eps), n)
        if t.kind == "offload":
            b = max(b, t.index + 1)            # after F^{j+1} (operation j), the value's forward reader
        b = max(b, prev)
        if t.kind == "prefetch":
            reader = 2 * L + 1 - t.index       # B^{j+1}: the first backward operation that reads index j
            if b > reader:
                raise InvalidRematOffloadSchedule(
                    f"transfer {q} (prefetch of index {t.index}) would be issued at boundary {b}, after "
                    f"B^{t.index + 1} (operation {reader}) that reads it")
        issue.append(b)
        prev = b
    return OffloadPlan(schedule=schedule, issue=issue, boundary_times=times, replay=rep)


# ------------------------------------------------------------------------------------------ execution
@dataclass
class OffloadResult(RuntimeResult):
    """:class:`models.runtime.RuntimeResult` plus ``issue`` (the boundary of each transfer, as
    :class:`OffloadPlan`) and ``moved`` (index -> bytes of the storages moved by its offload)."""

    issue: list[int] = field(default_factory=list)
    moved: dict[int, int] = field(default_factory=dict)


class _Entry:
    """One device storage of a box: ``dev`` a flat byte alias of it (None while on the host)."""

    __slots__ = ("dev", "host", "nbytes", "index", "event", "__weakref__")

    def __init__(self, dev: torch.Tensor, index: int) -> None:
        self.dev = dev
        self.host = None
        self.nbytes = dev.numel()
        self.index = index
        self.event = None


class _Saved:
    """A packed saved tensor: its box entry and its view of the entry's storage."""

    __slots__ = ("entry", "dtype", "size", "stride", "offset")

    def __init__(self, entry: _Entry, t: torch.Tensor) -> None:
        self.entry = entry
        self.dtype, self.size, self.stride, self.offset = t.dtype, t.size(), t.stride(), t.storage_offset()


class _Kept:
    """A packed tensor that stays as it is (a parameter, a buffer): a detached alias."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 alias of ``t``'s whole storage (views only: a dispatch tracker adds it to the
    storage it already counts)."""
    nbytes = t.untyped_storage().nbytes()
    item = t.element_size()
    if nbytes % item:
        raise ValueError(f"a storage of {nbytes} B does not hold whole {t.dtype} elements")
    flat = t.detach().as_strided((nbytes // item,), (1,), 0)
    return flat if t.dtype == torch.uint8 else flat.view(torch.uint8)


def _view(entry: _Entry, dtype, size, stride, offset) -> torch.Tensor:
    if entry.dev is None:
        raise RuntimeError(f"execute_offload: a tensor saved in abar^{entry.index} is read while abar^{entry.index} "
                           "is on the host (its prefetch was not issued before this operation)")
    base = entry.dev if dtype == torch.uint8 else entry.dev.view(dtype)
    return base.as_strided(size, stride, offset)


class _Inject(torch.autograd.Function):
    """Stage l+1's view of a^l: the same storage, and a backward that hands the gradient delta^l to
    ``holder[slot]`` instead of a leaf (a leaf's ``AccumulateGrad`` node would keep a^l's storage
    alive until B^{l+1}, through an offload). ``anchor`` is an empty leaf that makes the output
    require grad; it receives nothing."""

    @staticmethod
    def forward(ctx, anchor, holder, slot, x):
        ctx.holder, ctx.slot = holder, slot
        return x.detach()

    @staticmethod
    def backward(ctx, grad):
        ctx.holder[ctx.slot] = grad
        return None, None, None, None


def _key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def execute_offload(stages: Sequence[Callable], loss_fn: Callable, x: torch.Tensor, schedule: RematOffloadSchedule,
                    chain: Chain, bandwidth: float, *, device=None, measure_memory: bool = False,
                    input_grad: bool = True, clock: Callable[[], float] = time.perf_counter) -> OffloadResult:
    """Run paper 001's offloading ``schedule`` (store-all order, whole-value transfers) on ``stages``
    (stage l computes a^l from a^{l-1}; ``loss_fn`` is stage L+1) with input ``x``; parameter gradients
    are accumulated into the stages' ``.grad``. ``chain`` (the stages' profile) and ``bandwidth``
    give the simulated times from which the issue boundaries come (:func:`plan_offload`).
    ``measure_memory``: per-operation memory with :func:`models.memory.memory_tracker`, as
    :func:`models.runtime.execute` (parameters get zero ``.grad`` first; a^0 and delta^{L+1} are
    created inside the window). ``input_grad``: B^1 computes delta^0 (float inputs).

    Raises :class:`InvalidRematOffloadSchedule` for a schedule it does not run (see the module
    docstring), ``ValueError`` for stages with multi-tensor cuts."""
    L = len(stages)
    if chain.L != L:
        raise ValueError(f"execute_offload: the chain has L = {chain.L} stages, the model {L}")
    plan = plan_offload(chain, schedule, bandwidth)
    fns = list(stages) + [loss_fn]
    if _stage_info(fns).multi:
        raise ValueError("execute_offload: stages with multi-tensor cuts (resident tensors) are not supported")
    device = torch.device(device if device is not None else x.device)
    cuda = device.type == "cuda"
    n = len(schedule.ops)
    at: dict[int, list[int]] = {}
    for q, b in enumerate(plan.issue):
        at.setdefault(b, []).append(q)
    for b in at:       # at one boundary: offloads first, then prefetches, each in list order
        at[b].sort(key=lambda q: (schedule.transfers[q].kind != "offload", q))

    keep: set[int] = set()
    for f in fns:
        if isinstance(f, torch.nn.Module):
            keep.update(_key(p) for p in f.parameters())
            keep.update(_key(b) for b in f.buffers())
    keep.discard(0)
    tracker = _tracker_for(fns, device) if measure_memory else None
    side = torch.cuda.Stream(device) if cuda else None

    # index -> entries of abar^j (a^0 for j = 0): the outputs' held here until B^j ends (the model's a^j),
    # the intermediates' by weak reference: the packed tensors hold them, and the engine drops those as
    # it passes each node in B^j, as it drops saved tensors without hooks
    boxes: dict[int, list] = {}
    # storage key -> entry, for storages on the device (weak: an entry lives as long as its box or its packed tensors)
    owner: "weakref.WeakValueDictionary[int, _Entry]" = weakref.WeakValueDictionary()
    edges: dict[int, list] = {}                # l -> (GradientEdge or None) per output of stage l
    holders: dict[int, dict[int, torch.Tensor]] = {}   # l -> {slot: delta^l part}, filled by B^{l+1}
    current: dict[str, Any] = {}                # a^{l}: the tensors stage l+1 reads next
    moved: dict[int, int] = {}
    shared: set[int] = set()                    # indices whose values share a storage (an output that is a view)
    after: list[float] = []
    during: list[float] = []
    loss_value: Any = float("nan")

    def add_entry(t: torch.Tensor, index: int, output: bool) -> _Entry | None:
        k = _key(t)
        if k == 0 or k in keep or t.layout != torch.strided:
            return None
        e = owner.get(k)
        if e is None:
            e = _Entry(_flat_bytes(t), index)
            owner[k] = e
            boxes.setdefault(index, []).append(e if output else weakref.ref(e))
        elif output and e.index == index:           # an intermediate saved first, then returned: hold it
            box = boxes[index]
            box[:] = [r for r in box if r is not e and not (isinstance(r, weakref.ref) and r() is e)] + [e]
        return e

    def live(j: int) -> list[_Entry]:
        out = []
        for r in boxes.get(j, ()):
            e = r() if isinstance(r, weakref.ref) else r
            if e is not None:
                out.append(e)
        return out

    def hooks(l: int):
        def pack(t):
            k = _key(t)
            if k == 0 or k in keep or t.layout != torch.strided:
                return _Kept(t.detach())
            e = add_entry(t, l, output=False)
            return _Saved(e, t)

        def unpack(p):
            if isinstance(p, _Kept):
                return p.t
            return _view(p.entry, p.dtype, p.size, p.stride, p.offset)
        return pack, unpack

    def on_device(j: int, pos: int) -> None:
        for e in live(j):
            if e.dev is None:
                op, l = schedule.ops[pos]
                raise InvalidRematOffloadSchedule(f"operation {pos} ({op}^{l}) reads abar^{j}, which is on the host")
            if e.event is not None:
                torch.cuda.current_stream(device).wait_event(e.event)
                e.event = None

    def offload(j: int) -> None:
        if j in shared:
            raise InvalidRematOffloadSchedule(
                f"abar^{j} shares a storage with {', '.join(f'abar^{k}' for k in sorted(shared - {j}))} (a stage's "
                "output is a view of its input, e.g. a flatten): offloading it would free nothing the chain "
                "counts apart; execute_offload does not move such values")
        entries = live(j)
        if any(e.dev is None for e in entries):
            raise InvalidRematOffloadSchedule(f"abar^{j} is offloaded twice")
        moved[j] = sum(e.nbytes for e in entries)
        if cuda:
            side.wait_stream(torch.cuda.current_stream(device))
        for e in entries:
            owner.pop(_key(e.dev), None)
            if cuda:
                e.host = torch.empty(e.nbytes, dtype=torch.uint8, pin_memory=True)
                with torch.cuda.stream(side):
                    e.host.copy_(e.dev, non_blocking=True)
                e.dev.record_stream(side)
            else:   # the emulated host: bytes that neither c10's allocator nor the dispatch tracker sees
                e.host = torch.from_numpy(np.empty(e.nbytes, dtype=np.uint8))
                e.host.copy_(e.dev)
            e.dev = None

    def prefetch(j: int) -> None:
        entries = live(j)
        if cuda:
            side.wait_stream(torch.cuda.current_stream(device))
        for e in entries:
            if e.dev is not None or e.host is None:
                raise InvalidRematOffloadSchedule(f"abar^{j} is prefetched but is not on the host")
            dev = torch.empty(e.nbytes, dtype=torch.uint8, device=device)
            if cuda:
                with torch.cuda.stream(side):
                    dev.copy_(e.host, non_blocking=True)
                    e.event = side.record_event()
            else:
                dev.copy_(e.host)
            e.dev, e.host = dev, None
            owner[_key(dev)] = e

    def forward(pos: int, l: int, anchor: torch.Tensor) -> None:
        """F_all^l. A function of its own: its locals (outputs, inputs) are gone when it returns."""
        nonlocal loss_value
        on_device(l - 1, pos)
        src = current.pop("a")
        grad_in = input_grad or l > 1
        holders[l - 1] = {}
        inp = tuple(_Inject.apply(anchor, holders[l - 1], i, s.detach())
                    if isinstance(s, torch.Tensor) and grad_in and s.is_floating_point() else s
                    for i, s in enumerate(src))
        del src
        pack, unpack = hooks(l)
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = fns[l - 1](*inp)
        del inp
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        for o in out:
            if isinstance(o, torch.Tensor):
                e = add_entry(o, l, output=True)
                if e is not None and e.index != l:      # a view of an earlier value (a flatten)
                    shared.update((l, e.index))
        edges[l] = [torch.autograd.graph.get_gradient_edge(o) if isinstance(o, torch.Tensor) and o.requires_grad
                    else None for o in out]
        if l == L + 1:
            loss_value = out[0].detach() if cuda else float(out[0].detach())
        else:
            current["a"] = out

    def backward(pos: int, l: int) -> None:
        """B^l: one backward call from stage l's output edges with delta^l (delta^{l-1} lands in
        ``holders[l-1]`` through stage l's :class:`_Inject`), then abar^l and delta^l go."""
        on_device(l, pos)
        on_device(l - 1, pos)
        d = holders.pop(l)
        pairs = [(e, d[i]) for i, e in enumerate(edges.pop(l)) if e is not None and d.get(i) is not None]
        d.clear()
        if pairs:
            es, gs = [p[0] for p in pairs], [p[1] for p in pairs]
            pairs.clear()
            torch.autograd.backward(es, gs)
        for j in ((l, 0) if l == 1 else (l,)):
            for e in live(j):
                if e.dev is not None:
                    owner.pop(_key(e.dev), None)
            boxes.pop(j, None)

    def transfers(b: int) -> None:
        for q in at.get(b, ()):
            t = schedule.transfers[q]
            (offload if t.kind == "offload" else prefetch)(t.index)

    def run() -> None:
        anchor = torch.empty(0, device=device, requires_grad=True)
        x0 = x.detach().clone()
        add_entry(x0, 0, output=True)
        current["a"] = (x0,)
        del x0
        holders[L + 1] = {0: torch.ones((), device=device)}
        for pos, (op, l) in enumerate(schedule.ops):
            transfers(pos)
            if tracker is not None:
                tracker.sync()
                tracker.reset_peak()
            if op == "F_all":
                forward(pos, l, anchor)
            else:
                backward(pos, l)
            if tracker is not None:
                tracker.sync()
                during.append(float(tracker.peak))
                after.append(float(tracker.current))
        transfers(n)
        boxes.clear()
        owner.clear()
        edges.clear()
        current.clear()

    elapsed = _run_timed(run, tracker, device, clock)
    delta0 = holders.pop(0, {})
    holders.clear()
    del delta0
    return OffloadResult(loss=float(loss_value), time=elapsed, peak_memory=max(during) if during else None,
                         memory_after=after, memory_peak_during=during, issue=list(plan.issue), moved=moved)
