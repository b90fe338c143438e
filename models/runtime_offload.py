"""Offloading executor: run paper 001's activation-offloading schedules on real PyTorch stages.

Paper 001 (Beaumont, Eyraud-Dubois, Shilova, Euro-Par 2020, section 3.1; notation in
:mod:`models.offload`) keeps every forward value (no re-materialization): the computations are
``F_0..F_L`` then ``B_L..B_0`` (this chain's ``F_all^1..F_all^{L+1}``, then ``B^{L+1}..B^1``); a
chosen value ``x_j`` (``abar^j``: the output a^j and everything autograd keeps for B^j; ``a^0`` for
j = 0) is sent **whole** to the host once its forward reader ``F^{j+1}`` has run, and brought back
whole before ``B^{j+1}``, its first backward reader. :func:`memplan.remat_offload.offload_schedule_as_joint`
turns GREEDY's and DYNPROG's schedules (:func:`memplan.offload.solve`) into a
:class:`models.remat_offload.RematOffloadSchedule`: those are what :func:`execute_offload` runs.

Paper 000's joint schedules (re-materialization + offloading) are run by :func:`execute_joint`, with the
same machinery (below): ``F_ck^l`` / ``F_none^l`` run stage l under ``torch.no_grad()`` and their
output's storage is box l (the stored a^l, which a transfer of index l then moves; ``F_none^l`` drops
a^{l-1}), ``F_all^l`` over a stored a^l replaces it, ``B^l`` also drops a^{l-1} when only a^{l-1} is
stored (Table 1 of paper 004), a stored a^l is kept as its box entries and rebuilt for each reader,
and a stage run more than once replays its RNG state (:class:`models.runtime._Rng`). Transfers
move the whole value stored at their index at the issue boundary (a^l or abar^l;
:func:`coalesce_parts` merges the joint DP's parts, :func:`plan_joint` maps them to boundaries).
:func:`execute_offload` is the same executor behind paper 001's checks (:func:`plan_offload`).

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
  transfer before the previous one (one link, in list order). An offload copies every entry of
  box j to the host and drops the device storage (where, next item); a prefetch allocates it again
  at its issue and copies back. Before an operation reads index j (B^{j+1},
  B^j) the prefetch must have completed. Only store-all orders and whole-value transfers are accepted
  (one offload then one prefetch per index, ``part`` 0, ``nbytes`` = ``wabar[j]``, ``wa[0]`` for
  j = 0); anything else raises :class:`InvalidRematOffloadSchedule`.
- Where an offload's copy starts and where its device storage is freed are two boundaries
  (:meth:`OffloadPlan.copy_boundaries`, :meth:`OffloadPlan.release_boundaries`): the copy at the
  last boundary at or before the replay's start once the value exists (a transfer that the replay
  starts inside a long operation starts before it, not after it), never after the issue; the
  storage stays readable until the first boundary at or after the replay's end, and not before the
  issue (after its readers). At a boundary the storages freed there go first, then the copies that
  start there in list order. The memory held, in that order, is :meth:`OffloadPlan.stream_schedule`'s
  replay, never above the plan's peak (``tests/test_offload_stream_order.py``).
- CUDA: one side stream; the side stream waits for the compute stream where a copy starts, copies
  with ``non_blocking=True`` to / from pinned host buffers, and records an event after each offload.
  Where the storage is freed the compute stream waits for that event and the storage is dropped
  without ``record_stream``, so the caching allocator reuses its bytes at once, in stream order,
  for work that runs after the copy. (Until 2026-11-27 the storage was dropped with
  ``record_stream`` at the copy's issue: the host ran ahead of the copies, the pending blocks could
  not be reused, and on an H100 the allocator's requested bytes peaked at 2.6 times the plan for
  GREEDY on GPT-2 small while ``max_memory_allocated`` stayed below it.) A prefetch's device buffer
  is allocated on the compute stream and the compute stream waits on the prefetch's event before
  the first operation that reads it.

CPU emulation (tests). The host is a ``numpy.empty`` byte buffer wrapped by ``torch.from_numpy``:
neither the dispatch-mode :class:`models.memory.TensorMemoryTracker` (it counts storages that come
out of ATen operations; ``from_numpy`` is none) nor c10's CPU allocator sees it, so the measured
memory is the device side only (``tests/test_runtime_offload.py`` checks that the tracker does not
count it). Copies are synchronous (at the boundary where they start) and the storages are freed at
the same boundaries as on CUDA, so the measured memory is that of :meth:`OffloadPlan.stream_schedule`,
which is what the tests compare with.

Validated on a GPU: the CUDA path as it was before 2026-11-27 (``record_stream`` at the copy's issue)
ran on an H100 (gradients bit-identical; ``benchmarks/results/offload_exec_gpu_gpt2*.csv``). The
copies started before the issue and the storages freed at their release boundaries have not run on
a GPU yet. A prefetch still starts at the first boundary at or after its simulated start (its
buffer, allocated there, must not be counted earlier), so a run may take longer than the simulation
says.
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

from .chain import _ARRAYS, _OWN_OVERHEADS, Chain
from .remat import store_all_ops
from .remat_offload import coalesce_parts  # noqa: F401 (re-exported: it lived here first)
from .remat_offload import _inputs, boundary_eps, issue_boundaries, remat_states
from .remat_offload import (InvalidRematOffloadSchedule, RematOffloadReplay, RematOffloadSchedule, Transfer,
                            simulate_remat_offload)
from .runtime import (RuntimeResult, _plan, _Rng, _run_timed, _stage_info, _tracker_for, backward_autocast_off,
                      frozen_prefix, under_uncached_autocast)

# ------------------------------------------------------------------------------------------ planning
@dataclass
class OffloadPlan:
    """Where :func:`execute_offload` issues each transfer of ``schedule``: ``issue[q]`` is the
    boundary (0..n, boundary k is just before operation k) of transfer q (where its prefetch buffer
    is allocated; an offload's copy may start earlier and its storage is freed later:
    :meth:`copy_boundaries`, :meth:`release_boundaries`); ``boundary_times[k]`` the
    simulated time of boundary k (start of operation k; the last one is the makespan); ``replay`` the
    simulation the times come from."""

    schedule: RematOffloadSchedule
    issue: list[int]
    boundary_times: list[float]
    replay: RematOffloadReplay

    def executed_schedule(self, chain: Chain, gap: float = 1.0) -> tuple[RematOffloadSchedule, float]:
        """The schedule with every transfer taking effect at its issue boundary, for
        :func:`simulate_remat_offload`: ``(schedule, bandwidth)`` (:meth:`stream_schedule` is what the
        executor holds: offloads there take effect at their release boundaries). Operation k is released ``gap`` seconds after operation k-1 ends (its duration is
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

    def copy_boundaries(self) -> list[int]:
        """The boundary at which the CUDA executor starts each transfer's copy: a prefetch at its
        issue (its device buffer is allocated there); an offload at the last boundary at or before
        its simulated start that follows the value's producer, so that the copy runs when the
        replay says although the executor frees the storage only later (:meth:`release_boundaries`);
        never before the previous transfer's (the side stream runs them in list order)."""
        times, rep = self.boundary_times, self.replay
        eps = boundary_eps(times, rep)
        out, prev = [], 0
        for q, (t, b) in enumerate(zip(self.schedule.transfers, self.issue)):
            c = b
            if t.kind == "offload":
                # the value must be on the device: the last operation before b that produced index j
                # (F^j), or boundary 0 for the input
                p = next((k for k in range(b - 1, -1, -1) if self.schedule.ops[k][0] != "B"
                          and self.schedule.ops[k][1] == t.index), -1)
                last = max(k for k in range(b + 1) if k == 0 or times[k] <= rep.transfer_start[q] + eps)
                c = min(b, max(p + 1, last))
            prev = max(prev, c)
            out.append(prev)
        return out

    def release_boundaries(self) -> dict[int, int]:
        """Offload q -> the boundary k at which the CUDA executor frees the device storage it copied:
        the first boundary whose simulated time is at or after the offload's simulated end, and not
        before its issue (:attr:`issue`: after the operations that read the value). There the compute
        stream waits for the copy's end event and the storage is dropped without ``record_stream``,
        so operation k and everything after it may reuse the bytes and nothing before it does: the
        caching allocator then holds, in stream order, what :meth:`stream_schedule` replays. An
        offload issued at the last boundary is left out (the executor frees it after the step's
        final wait for the side stream)."""
        times, rep = self.boundary_times, self.replay
        eps = boundary_eps(times, rep)
        n = len(times) - 1
        out: dict[int, int] = {}
        for q, (t, b) in enumerate(zip(self.schedule.transfers, self.issue)):
            if t.kind == "offload" and b < n:
                first = next((k for k in range(n + 1) if times[k] >= rep.transfer_end[q] - eps), n)
                out[q] = max(b, first)
        return out

    def stream_schedule(self, chain: Chain, gap: float = 1.0) -> tuple[RematOffloadSchedule, float]:
        """What the CUDA executor holds, in the caching allocator's (stream) order, as a schedule for
        :func:`simulate_remat_offload`: :meth:`executed_schedule` with each offload taking effect at
        its :meth:`release_boundaries` boundary (where its storage is freed) instead of its issue,
        and each prefetch at its issue (where its device buffer is allocated). ``(schedule,
        bandwidth)``; its replay's peak is the most the executor's stream order holds."""
        import dataclasses

        return dataclasses.replace(self, issue=self._effect_boundaries()).executed_schedule(chain, gap)

    def _effect_boundaries(self) -> list[int]:
        """Per transfer, the boundary where it takes effect in stream order: an offload where its
        storage is freed (the last boundary if it is issued there), a prefetch at its issue."""
        rel = self.release_boundaries()
        n = len(self.boundary_times) - 1
        return [rel.get(q, n) if t.kind == "offload" else b
                for q, (t, b) in enumerate(zip(self.schedule.transfers, self.issue))]

    def host_intervals(self) -> dict[int, tuple[int, int]]:
        """Index j -> (boundary where its offload frees the device storage, :meth:`release_boundaries`;
        boundary of its prefetch): abar^j is off the device during the operations o..p-1."""
        out: dict[int, list[int]] = {}
        for t, b in zip(self.schedule.transfers, self._effect_boundaries()):
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
    L = chain.L
    times = list(rep.op_start) + [rep.makespan]
    issue: list[int] = []
    # an offload of index j after F^{j+1} (operation j), the value's forward reader, which starts
    # before the offload ends in every schedule the simulator accepts
    for q, (t, b) in enumerate(zip(schedule.transfers, issue_boundaries(schedule, rep))):
        if t.kind == "prefetch":
            reader = 2 * L + 1 - t.index       # B^{j+1}: the first backward operation that reads index j
            if b > reader:
                raise InvalidRematOffloadSchedule(
                    f"transfer {q} (prefetch of index {t.index}) would be issued at boundary {b}, after "
                    f"B^{t.index + 1} (operation {reader}) that reads it")
        issue.append(b)
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
        raise RuntimeError(f"a tensor saved at index {entry.index} is read while index {entry.index} "
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


def view_stages(stages: Sequence[Callable], x: torch.Tensor) -> list[int]:
    """The stages l (1-based) whose output is a view of their input on ``x`` (a flatten, a dropout of
    rate 0): the chain counts that output apart although it shares a^{l-1}'s storage, and the
    executors do not move such a value (run without autograd, once)."""
    out, a = [], x
    with torch.no_grad():
        for l, s in enumerate(stages, start=1):
            b = s(a)
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
                    b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr():
                out.append(l)
            a = b
    return out


def merge_view_stages(stages: Sequence[Callable], chain: Chain, views: Sequence[int]) -> tuple[list, Chain]:
    """``stages`` and their ``chain`` with each view stage l of ``views`` (l >= 2: its output shares
    a^{l-1}'s storage, :func:`view_stages`) run together with stage l-1 as one stage
    (``torch.nn.Sequential``), so that the two values, one storage, are one value the executors can
    move. The merged row: times added, the output's ``wa``/``wd`` those of a^l, ``wabar`` that of
    abar^{l-1} plus what stage l keeps beyond its view (``wabar[l] - wa[l]``: the profile counts the
    view's bytes in both), ``o_f``/``o_b`` and each forward's own overheads the larger, weights added. Returns (stages,
    chain)."""
    import dataclasses

    stages = list(stages)
    arrays = {f: [float(v) for v in getattr(chain, f)] for f in _ARRAYS + _OWN_OVERHEADS}
    names = list(chain.stage_names)
    for l in sorted({int(v) for v in views if v >= 2}, reverse=True):
        k = l - 1
        a = arrays
        a["uf"][k] += a["uf"][l]
        a["ub"][k] += a["ub"][l]
        a["wabar"][k] += max(0.0, a["wabar"][l] - a["wa"][l])
        a["wa"][k], a["wd"][k] = a["wa"][l], a["wd"][l]
        for f in ("of", "ob") + _OWN_OVERHEADS:
            a[f][k] = max(a[f][k], a[f][l])
        a["weights"][k] += a["weights"][l]
        for f in a:
            del a[f][l]
        if len(names) > l:
            names[k] = f"{names[k]}+{names[l]}"
            del names[l]
        stages[k - 1] = torch.nn.Sequential(stages[k - 1], stages[l - 1])
        del stages[l - 1]
    merged = dataclasses.replace(chain, **{f: np.asarray(v) for f, v in arrays.items()}, stage_names=names,
                                 provenance={**chain.provenance, "merged_view_stages": sorted(views)})
    return stages, merged


def _key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


@under_uncached_autocast(x_at=2)
def execute_offload(stages: Sequence[Callable], loss_fn: Callable, x: torch.Tensor, schedule: RematOffloadSchedule,
                    chain: Chain, bandwidth: float, *, device=None, measure_memory: bool = False,
                    input_grad: bool = True, clock: Callable[[], float] = time.perf_counter,
                    sync: bool = True) -> OffloadResult:
    """Run paper 001's offloading ``schedule`` (store-all order, whole-value transfers) on ``stages``
    (stage l computes a^l from a^{l-1}; ``loss_fn`` is stage L+1) with input ``x``; parameter gradients
    are accumulated into the stages' ``.grad``. ``chain`` (the stages' profile) and ``bandwidth``
    give the simulated times from which the issue boundaries come (:func:`plan_offload`).
    ``measure_memory``: per-operation memory with :func:`models.memory.memory_tracker`, as
    :func:`models.runtime.execute` (parameters get zero ``.grad`` first; a^0 and delta^{L+1} are
    created inside the window). ``input_grad``: B^1 computes delta^0 (float inputs). ``sync=False``
    (CUDA): return once the work is queued, as :func:`models.runtime.execute` does (``loss_tensor``;
    ``time`` and ``loss`` NaN); the compute stream then waits for the side stream, so the next step
    is ordered after every transfer of this one.

    Raises :class:`InvalidRematOffloadSchedule` for a schedule it does not run (see the module
    docstring), ``ValueError`` for stages with multi-tensor cuts."""
    plan = plan_offload(chain, schedule, bandwidth)
    plan = JointPlan(**vars(plan), states=remat_states(schedule.ops, chain.L))
    return _execute(stages, loss_fn, x, schedule, chain, plan, device=device, measure_memory=measure_memory,
                    input_grad=input_grad, clock=clock, who="execute_offload", sync=sync)


# ------------------------------------------------------------------ joint schedules (paper 000)
@dataclass
class JointPlan(OffloadPlan):
    """:class:`OffloadPlan` of a joint schedule; ``states[k]``: the value stored at each index before
    operation k (0 nothing, 1 a^l, 2 abar^l; the last entry after the last operation)."""

    states: list[list[int]] = field(default_factory=list)


def plan_joint(chain: Chain, schedule: RematOffloadSchedule, bandwidth: float | None) -> JointPlan:
    """Check a re-materialization + offloading ``schedule`` for :func:`execute_joint` and map each
    transfer to the operation boundary where it is issued.

    The schedule must replay (:func:`simulate_remat_offload` over ``bandwidth``; no limit is applied
    here). A transfer is issued at the first boundary whose simulated time is at or after its
    simulated start, an offload of index j not before the boundary after the last operation that
    reads j and starts before the offload's simulated end (it may not free its input), and no
    transfer before the previous one (one link, list order). Each transfer must move the whole value
    stored at its index at that boundary (``wa[j]`` for a^j, ``wabar[j]`` for abar^j; see
    :func:`coalesce_parts`); offloads and prefetches of an index alternate, starting with an offload;
    no operation may read, recompute or discard an index between its offload and its prefetch, and
    every offloaded index is prefetched. Raises :class:`InvalidRematOffloadSchedule` with the reason."""
    L = chain.L
    ops = list(schedule.ops)
    n = len(ops)
    for q, t in enumerate(schedule.transfers):
        if t.kind not in ("offload", "prefetch"):
            raise InvalidRematOffloadSchedule(f"transfer {q}: unknown kind {t.kind!r} (offload or prefetch)")
        if not 0 <= t.index <= L:
            raise InvalidRematOffloadSchedule(f"transfer {q} ({t.kind} of index {t.index}): index outside 0..{L}")
    rep = simulate_remat_offload(chain, schedule, bandwidth)
    states = remat_states(ops, L)
    times = list(rep.op_start) + [rep.makespan]
    issue: list[int] = []
    away: dict[int, int] = {}           # index -> boundary of its pending offload
    for q, (t, b) in enumerate(zip(schedule.transfers, issue_boundaries(schedule, rep))):
        j = t.index
        where = f"transfer {q} ({t.kind} of index {j})"
        st = states[b][j]
        if t.kind == "offload":
            if j in away:
                raise InvalidRematOffloadSchedule(f"{where}: index {j} is already on the host")
            if st == 0:
                raise InvalidRematOffloadSchedule(
                    f"{where}: nothing is stored at index {j} at boundary {b} (before operation {b}), where "
                    "the transfer is issued: only a stored value (a^j or abar^j) can be offloaded")
        elif j not in away:
            raise InvalidRematOffloadSchedule(f"{where}: index {j} is not on the host (no offload before it)")
        whole = float(chain.wa[j] if st == 1 else chain.wabar[j])
        name = f"{'a' if st == 1 else 'abar'}^{j}"
        if abs(t.nbytes - whole) > 1e-9 * max(1.0, whole):
            raise InvalidRematOffloadSchedule(
                f"{where}: moves {t.nbytes:.6g} B (part {t.part}); execute_joint moves whole values only: "
                f"{name}, stored there at boundary {b}, has {whole:.6g} B (merge the parts with coalesce_parts)")
        if t.kind == "offload":
            away[j] = b
        else:
            o = away.pop(j)
            for p in range(o, n):
                op, l = ops[p]
                if j in _inputs(op, l) or (op != "B" and l == j):
                    if p < b:
                        raise InvalidRematOffloadSchedule(
                            f"{where} would be issued at boundary {b}, after operation {p} ({op}^{l}) that "
                            f"{'reads' if j in _inputs(op, l) else 'recomputes'} index {j} while it is on the host")
                    break
            if states[b][j] != states[o][j]:
                raise InvalidRematOffloadSchedule(f"{where}: the value at index {j} changed while it was on the host")
        issue.append(b)
    if away:
        j = sorted(away)[0]
        raise InvalidRematOffloadSchedule(f"index {j} is offloaded but never prefetched")
    return JointPlan(schedule=schedule, issue=issue, boundary_times=times, replay=rep, states=states)


class _Val:
    """One tensor of a stored a^l, kept without its data: its box entry and its view of the entry's
    storage (``saved``), or the tensor itself (``kept``: a parameter, a non-strided tensor) or a
    Python value crossing a cut (``raw``)."""

    __slots__ = ("saved", "kept", "raw")

    def __init__(self, saved=None, kept=None, raw=None) -> None:
        self.saved, self.kept, self.raw = saved, kept, raw

    def get(self):
        if self.saved is not None:
            p = self.saved
            return _view(p.entry, p.dtype, p.size, p.stride, p.offset)
        return self.kept if self.kept is not None else self.raw


@under_uncached_autocast(x_at=2)
def execute_joint(stages: Sequence[Callable], loss_fn: Callable, x: torch.Tensor, schedule: RematOffloadSchedule,
                  chain: Chain, bandwidth: float | None, *, device=None, measure_memory: bool = False,
                  input_grad: bool = True, clock: Callable[[], float] = time.perf_counter,
                  sync: bool = True) -> OffloadResult:
    """Run a re-materialization + offloading ``schedule`` (paper 000: operations F_all, F_ck, F_none, B
    of paper 004 with Table 1's semantics, and whole-value transfers; :func:`coalesce_parts` merges the
    joint DP's parts) on ``stages`` (stage l computes a^l from a^{l-1}; ``loss_fn`` is stage L+1).
    Parameter gradients are accumulated into the stages' ``.grad``. Arguments as
    :func:`execute_offload`; the transfers are issued at the boundaries of :func:`plan_joint`.

    - ``F_all^l``: stage l with autograd, its saved storages boxed as abar^l (see the module docstring;
      a^{l-1} is read through :class:`_Inject`); over a stored a^l it replaces a^l (dropped at its end).
    - ``F_ck^l``: stage l under ``torch.no_grad()``; its output's storage is box l (a^l), which an offload
      of index l moves while a^l is what is stored there. ``F_none^l``: the same, then a^{l-1} goes.
    - ``B^l``: one backward call from stage l's output edges with delta^l; then abar^l and delta^l go,
      and a^{l-1} when only a^{l-1} (not abar^{l-1}) is stored (Table 1).
    - A stage run more than once has its RNG state saved at its first run and replayed at every later
      one (:class:`models.runtime._Rng`), so dropout masks are plain autograd's; the gradients are
      bit-identical to ``loss_fn(model(x)).backward()`` with deterministic kernels.

    Memory: without transfers it holds, after and during each operation, the bytes
    :func:`models.runtime.execute` with ``fuse_backward=False`` holds. CUDA and ``sync``: as
    :func:`execute_offload` (run on an H100, ``benchmarks/results/offload_exec_gpu_gpt2.csv``). Raises :class:`InvalidRematOffloadSchedule` for a schedule it does not run
    (:func:`plan_joint`; the offload of a value sharing a storage with another index, e.g. a flatten's
    output, when it is reached), ``ValueError`` for stages with multi-tensor cuts."""
    return _execute(stages, loss_fn, x, schedule, chain, plan_joint(chain, schedule, bandwidth), device=device,
                    measure_memory=measure_memory, input_grad=input_grad, clock=clock, who="execute_joint",
                    sync=sync)


def _execute(stages: Sequence[Callable], loss_fn: Callable, x: torch.Tensor, schedule: RematOffloadSchedule,
             chain: Chain, plan: JointPlan, *, device, measure_memory: bool, input_grad: bool,
             clock: Callable[[], float], who: str, sync: bool = True) -> OffloadResult:
    """The executor of :func:`execute_joint` and :func:`execute_offload`, on a checked ``plan``."""
    L = len(stages)
    if chain.L != L:
        raise ValueError(f"{who}: the chain has L = {chain.L} stages, the model {L}")
    fns = list(stages) + [loss_fn]
    if _stage_info(fns).multi:
        raise ValueError(f"{who}: stages with multi-tensor cuts (resident tensors) are not supported")
    frozen = frozen_prefix(fns) if not input_grad else 0      # run without a graph, as execute runs them
    device = torch.device(device if device is not None else x.device)
    cuda = device.type == "cuda"
    ops = list(schedule.ops)
    n = len(ops)
    _, replayed, _, rstarts = _plan(ops, False)
    rng = _Rng(device, rstarts, fns, replayed)
    # boundary -> transfers whose copy starts there (list order: the side stream's order), and
    # offload q -> the boundary where its device storage is freed (OffloadPlan.copy_boundaries,
    # release_boundaries); an offload issued at the last boundary is freed at the end
    copy_at = plan.copy_boundaries()
    starts: dict[int, list[int]] = {}
    for q, b in enumerate(copy_at):
        starts.setdefault(b, []).append(q)
    frees: dict[int, list[int]] = {}
    for q, k in plan.release_boundaries().items():
        frees.setdefault(k, []).append(q)
    held: dict[int, tuple[Any, list]] = {}     # offload q -> (its copy's end event, the entries it moved)
    started: set[int] = set()

    keep: set[int] = set()
    for f in fns:
        if isinstance(f, torch.nn.Module):
            keep.update(_key(p) for p in f.parameters())
            keep.update(_key(b) for b in f.buffers())
    keep.discard(0)
    tracker = _tracker_for(fns, device) if measure_memory else None
    side = torch.cuda.Stream(device) if cuda else None

    boxes: dict[int, list] = {}       # index -> entries of the stored value (outputs strong, intermediates weak)
    owner: "weakref.WeakValueDictionary[int, _Entry]" = weakref.WeakValueDictionary()
    vals: dict[int, list[_Val]] = {}  # index -> the tensors of a^l (rebuilt from the entries when read)
    edges: dict[int, list] = {}       # l -> GradientEdge (or None) per output of F_all^l
    holders: dict[int, dict[int, torch.Tensor]] = {}   # l -> {slot: delta^l part}, filled by B^{l+1}
    moved: dict[int, int] = {}
    shared: set[int] = set()
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
            return _Saved(add_entry(t, l, output=False), t)

        def unpack(p):
            if isinstance(p, _Kept):
                return p.t
            return _view(p.entry, p.dtype, p.size, p.stride, p.offset)
        return pack, unpack

    def on_device(j: int, pos: int) -> None:
        for e in live(j):
            if e.dev is None:
                op, l = ops[pos]
                raise InvalidRematOffloadSchedule(f"operation {pos} ({op}^{l}) reads index {j}, which is on the host")
            if e.event is not None:
                torch.cuda.current_stream(device).wait_event(e.event)
                e.event = None

    def drop(j: int) -> None:
        for e in live(j):
            if e.dev is not None:
                owner.pop(_key(e.dev), None)
        boxes.pop(j, None)
        vals.pop(j, None)

    def offload(j: int, q: int) -> None:
        """Start offload q's copy of index j to the host. The device storage stays readable (the
        value's readers may still run) until :func:`release` frees it at its release boundary."""
        if j in shared:
            raise InvalidRematOffloadSchedule(
                f"index {j} shares a storage with index {', '.join(str(k) for k in sorted(shared - {j}))} (a "
                "stage's output is a view of its input, e.g. a flatten): offloading it would free nothing the "
                f"chain counts apart; {who} does not move such values")
        entries = live(j)
        if any(e.dev is None or e.host is not None for e in entries):
            raise InvalidRematOffloadSchedule(f"index {j} is offloaded twice")
        moved[j] = sum(e.nbytes for e in entries)
        if cuda:
            side.wait_stream(torch.cuda.current_stream(device))
        for e in entries:
            if cuda:
                e.host = torch.empty(e.nbytes, dtype=torch.uint8, pin_memory=True)
                with torch.cuda.stream(side):
                    e.host.copy_(e.dev, non_blocking=True)
            else:
                e.host = torch.from_numpy(np.empty(e.nbytes, dtype=np.uint8))
                e.host.copy_(e.dev)
        held[q] = (side.record_event() if cuda else None, entries)
        started.add(q)

    def release(q: int) -> None:
        """Free offload q's device storage. CUDA: the compute stream first waits for the copy's end
        event, and the storage is dropped without ``record_stream``, so the caching allocator reuses
        it at once for work ordered after the copy, and the host cannot run ahead of it. (Dropped
        with ``record_stream`` at the copy's issue, a block stays pending until the GPU reaches the
        copy's end while the host runs ahead, so the allocator takes fresh memory meanwhile, which
        ``max_memory_allocated`` does not show: an H100 run of GREEDY on GPT-2 small measured the
        requested bytes at 2.6 times the plan's peak.)"""
        ev, entries = held.pop(q)
        if ev is not None:
            torch.cuda.current_stream(device).wait_event(ev)
        for e in entries:
            if e.dev is not None:
                owner.pop(_key(e.dev), None)
            e.dev = None
        entries.clear()

    def prefetch(j: int) -> None:
        entries = live(j)
        if cuda:
            side.wait_stream(torch.cuda.current_stream(device))
        for e in entries:
            if e.dev is not None or e.host is None:
                raise InvalidRematOffloadSchedule(f"index {j} is prefetched but is not on the host")
            dev = torch.empty(e.nbytes, dtype=torch.uint8, device=device)
            if cuda:
                with torch.cuda.stream(side):
                    dev.copy_(e.host, non_blocking=True)
                    e.event = side.record_event()
            else:
                dev.copy_(e.host)
            e.dev, e.host = dev, None
            owner[_key(dev)] = e

    def keep_outputs(l: int, out: tuple) -> None:
        vs = []
        for o in out:
            if isinstance(o, torch.Tensor):
                e = add_entry(o, l, output=True)
                if e is not None and e.index != l:      # a view of an earlier value (a flatten)
                    shared.update((l, e.index))
                vs.append(_Val(saved=_Saved(e, o)) if e is not None else _Val(kept=o.detach()))
            else:
                vs.append(_Val(raw=o))
        vals[l] = vs

    def forward(pos: int, op: str, l: int, anchor: torch.Tensor) -> None:
        """F_all^l, F_ck^l or F_none^l. A function of its own: its locals are gone when it returns."""
        nonlocal loss_value
        on_device(l - 1, pos)
        old_box, old_vals = boxes.pop(l, None), vals.pop(l, None)     # a^l that F_all^l replaces
        src = [v.get() for v in vals[l - 1]]
        fn = fns[l - 1]
        if op == "F_all":
            grad_in = input_grad or l - 1 > frozen
            holders[l - 1] = {}
            inp = tuple(_Inject.apply(anchor, holders[l - 1], i, s)
                        if isinstance(s, torch.Tensor) and grad_in and s.is_floating_point() else s
                        for i, s in enumerate(src))
            del src
            pack, unpack = hooks(l)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                out = rng.run(l, lambda: fn(*inp))
            del inp
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            keep_outputs(l, out)
            edges[l] = [torch.autograd.graph.get_gradient_edge(o) if isinstance(o, torch.Tensor) and o.requires_grad
                        else None for o in out]
            if l == L + 1:
                loss_value = out[0].detach() if cuda else float(out[0].detach())
        else:
            with torch.no_grad():
                out = rng.run(l, lambda: fn(*src))
            del src
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            keep_outputs(l, out)
            if op == "F_none":
                drop(l - 1)
        del out, old_box, old_vals

    def backward(pos: int, l: int) -> None:
        rng.moved()
        on_device(l, pos)
        on_device(l - 1, pos)
        d = holders.pop(l)
        pairs = [(e, d[i]) for i, e in enumerate(edges.pop(l)) if e is not None and d.get(i) is not None]
        d.clear()
        if pairs:
            es, gs = [p[0] for p in pairs], [p[1] for p in pairs]
            pairs.clear()
            with backward_autocast_off():
                torch.autograd.backward(es, gs)
        drop(l)
        if plan.states[pos][l - 1] == 1:     # only a^{l-1} stored (not abar^{l-1}): B^l discards it (Table 1)
            drop(l - 1)

    def transfers(b: int) -> None:
        """Boundary b: the offloads freed here first (their copies started here if not before), then
        the other copies that start here, in list order (OffloadPlan.stream_schedule's order)."""
        for q in frees.get(b, ()):
            if q not in started:
                offload(schedule.transfers[q].index, q)
            release(q)
        for q in starts.get(b, ()):
            t = schedule.transfers[q]
            if t.kind == "prefetch":
                prefetch(t.index)
            elif q not in started:
                offload(t.index, q)

    def run() -> None:
        anchor = torch.empty(0, device=device, requires_grad=True)
        x0 = x.detach().clone()
        keep_outputs(0, (x0,))
        del x0
        holders[L + 1] = {0: torch.ones((), device=device)}
        for pos, (op, l) in enumerate(ops):
            transfers(pos)
            if tracker is not None:
                tracker.sync()
                tracker.reset_peak()
            if op == "B":
                backward(pos, l)
            else:
                forward(pos, op, l, anchor)
            if tracker is not None:
                tracker.sync()
                during.append(float(tracker.peak))
                after.append(float(tracker.current))
        transfers(n)
        if cuda:                  # the next step (or the caller's work) is ordered after every transfer
            torch.cuda.current_stream(device).wait_stream(side)
        for q in list(held):      # offloads issued at the last boundary: freed after that wait
            release(q)
        boxes.clear()
        vals.clear()
        owner.clear()
        edges.clear()

    wait = sync or tracker is not None
    elapsed = _run_timed(rng.guarded(run), tracker, device, clock, sync=wait)
    holders.clear()
    if cuda and not wait:
        return OffloadResult(loss=float("nan"), time=float("nan"), loss_tensor=loss_value, issue=list(plan.issue),
                             moved=moved)
    return OffloadResult(loss=float(loss_value), time=elapsed, peak_memory=max(during) if during else None,
                         memory_after=after, memory_peak_during=during, issue=list(plan.issue), moved=moved)
