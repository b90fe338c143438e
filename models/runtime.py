"""Runtime executor: run a re-materialization sequence on real PyTorch stages (paper 004, sections 3
and 5.3 "sequence processing"), and measure its memory and time against :func:`models.remat.simulate_remat`.

Given stage modules ``stages[0..L-1]`` (stage l computes a^l from a^{l-1}; e.g.
:func:`models.graph.linearize_model`), a loss function (stage L+1) and a sequence of operations
``(op, l)`` from any solver (:class:`models.remat.RematSchedule`: :func:`memplan.remat.solve`'s, or a
fixed one of :mod:`memplan.baselines.remat_heuristics` such as ``store_all_schedule``,
``sequential_schedule`` or ``bisection_schedule``; the executor builds no sequence itself),
:func:`execute` does exactly what the sequence says:

- ``F_all^l``: runs stage l with autograd recording on a detached copy of a^{l-1} (a leaf that requires
  grad when it is a float tensor), and keeps the output together with its graph: that is abar^l;
- ``F_ck^l``: runs stage l under ``torch.no_grad()`` and keeps the output a^l;
- ``F_none^l``: the same, then drops a^{l-1};
- ``B^l``: back-propagates delta^l through the graph kept by F_all^l (``torch.autograd.backward``),
  which accumulates the stage's parameter gradients and leaves delta^{l-1} in the input leaf's
  ``.grad`` (or hands it on to B^{l-1} inside the same call: ``fuse_backward``); then drops delta^l
  and abar^l, and a^{l-1} when it was kept as a^{l-1} only (Table 1).

RNG: the CPU (and CUDA) generator state is saved before the first execution of each stage and restored
around every later execution (recomputation), then the global state is put back, as
``torch.utils.checkpoint`` does; the global generator therefore advances exactly as in a plain forward
pass, and dropout masks are the same in every recomputation. With deterministic kernels the parameter
gradients are bit-identical to ``loss_fn(model(x)).backward()`` (the tests check ``torch.equal``).
Buffers: a recomputation leaves the buffers its stage's first run wrote (a BatchNorm's running
statistics and ``num_batches_tracked`` in training mode, a counter) as that run left them, so that they
end the step as a plain forward pass leaves them (``torch.utils.checkpoint`` updates them again at each
recomputation): an eager stage's batch norms replay with ``track_running_stats`` off, a compiled
stage's statistics are copied before each replay, into a tensor kept across steps, and put back after
it, as are the buffers a stage gives ``F.batch_norm`` itself (a hand-written norm: the native kernel
moves no version counter, so the write is found in the stage's graph) (:class:`_Rng`). A batch norm in
training mode normalizes with the batch's own statistics either way, so the output is the same.

Multi-tensor cuts (:func:`models.graph.multi_stage_modules`): a^l is a tuple, and a resident tensor
(crossing two or more cuts) is held once, as a leaf from its producer's first forward to the end of its
producer's backward, its gradient made by its last reader's backward (:mod:`models.resident`). One
that no backward saves (the stage's ``resident_free``) is let go after the last forward of a reader
that comes before its producer's next forward (:func:`models.remat.value_drops`), as autograd frees it;
its producer's backward then starts from the value's gradient edge, which does not keep the value.
:attr:`models.chain.Chain.resident_values` charges it so.

Memory: the executor is run inside :class:`models.profiler.TensorMemoryTracker` on CPU (or CUDA
allocator statistics); the input a^0 is copied inside the tracked region and delta^{L+1} = 1 is created
there, so the measured state matches the simulator's initial state (a^0 and delta^{L+1} stored).
Parameters get zero ``.grad`` buffers first (gradients are then added in place, so the persistent
weight gradients, which the chain model does not count, stay out of the activation figures).
"""
from __future__ import annotations

import functools
import math
import statistics
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from .memory import storage_bytes
from .resident import attach_resident, mark_resident, state_of
from .remat import (OPS, InvalidSequence, RematSchedule, store_all_ops, turn_ops, turn_ops_no_grad,  # noqa: F401
                    value_drops)                                                      # (re-exported)


try:                                   # the engine's entry below torch.autograd.backward (torch 2.x)
    from torch.autograd.graph import _engine_run_backward as _ENGINE_RUN
except ImportError:                    # pragma: no cover - another torch: the public function
    _ENGINE_RUN = None


def engine_backward(outputs: Sequence, grads: Sequence) -> None:
    """``torch.autograd.backward(outputs, grads)`` (tensors or gradient edges, and one gradient each)
    for gradients the caller made itself to match (shapes, dtypes, devices: a^l's delta^l, a resident
    tensor's accumulated gradient): the engine is called without the public function's argument
    checks. Those (``_make_grads``: a symbolic shape comparison per output) cost about 20 us a call
    on the CPU of the tests, paid once per backward call: NASNet-A's executed store-all makes 64
    (one per stage on its multi-tensor cuts), and they made 1.7% of its step (paired, 40 rounds:
    1.085 -> 1.066 of autograd's time, gradients bit-identical). The arguments are held through the
    call, as the public function holds them. The profiler times its stages' backward through this too,
    so that profiled and executed B^l pay the same call."""
    if _AUTOCAST_OFF:                 # inside uncached_autocast: the backward without autocast, as loss.backward()
        with backward_autocast_off():                                # after the autocast block runs it
            _engine(outputs, grads)
        return
    _engine(outputs, grads)


def _engine(outputs: Sequence, grads: Sequence) -> None:
    if _ENGINE_RUN is None:
        torch.autograd.backward(list(outputs), list(grads))
        return
    _ENGINE_RUN(tuple(outputs), tuple(grads), False, False, (), allow_unreachable=True, accumulate_grad=True)


#: device kinds whose autocast :class:`uncached_autocast` runs under (innermost last): the backward calls
#: of :func:`engine_backward` run with it off
_AUTOCAST_OFF: list[str] = []


def autocast_state(kind: str) -> tuple[bool, Any] | None:
    """``(enabled, dtype)`` of ``torch.autocast`` on device type ``kind`` here (its dtype even where it
    is off), None for a device type autocast does not know."""
    try:
        return torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
    except (RuntimeError, TypeError, ValueError):
        return None


def autocast_dtype(kind: str) -> str | None:
    """The dtype (``"bfloat16"``, ``"float16"``) ``torch.autocast`` runs device type ``kind``'s
    operations in here, None where it is off (or the device type is one autocast does not know)."""
    state = autocast_state(kind)
    return None if state is None or not state[0] else str(state[1]).replace("torch.", "")


def autocast_blocks(dtype: str | None, device) -> Callable[[], Any]:
    """A factory of fresh ``torch.autocast`` blocks of ``dtype`` (a name, ``"bfloat16"``) on ``device``'s
    type, one per training step as a loop opens them (no step keeps another's cast weights); without a
    dtype, of blocks that do nothing."""
    import contextlib

    if dtype is None:
        return contextlib.nullcontext
    kind, dt = torch.device(device).type, getattr(torch, dtype)
    return lambda: torch.autocast(kind, dtype=dt)


def backward_autocast_off():
    """A context for a backward call made inside :class:`uncached_autocast`: autocast off (as
    ``loss.backward()`` after the autocast block); nothing outside it."""
    import contextlib

    return torch.autocast(_AUTOCAST_OFF[-1], enabled=False) if _AUTOCAST_OFF else contextlib.nullcontext()


def under_uncached_autocast(x_at: int | None = None) -> Callable:
    """A decorator: the function (an entry with a ``device`` keyword) runs under
    :class:`uncached_autocast` on ``device``; where it is not given, on the device of the input tensor
    at position ``x_at`` (None: the CPU, the profiling entries' default)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kw):
            device = kw.get("device")
            if device is None and x_at is not None:
                x = args[x_at] if len(args) > x_at else kw.get("x")
                device = x.device if isinstance(x, torch.Tensor) else None
            with uncached_autocast(device if device is not None else "cpu"):
                return fn(*args, **kw)
        return wrapped
    return wrap


@dataclass
class RuntimeResult:
    """What an execution produced: the loss value, wall-clock time (s), peak and per-operation memory
    (bytes above what existed before the run, a^0 and delta^{L+1} included)."""

    loss: float
    time: float
    peak_memory: float | None = None
    memory_after: list[float] = field(default_factory=list)
    memory_peak_during: list[float] = field(default_factory=list)
    #: the loss as a detached device tensor, where reading it as a float would wait for the device
    #: (``execute(..., sync=False)`` on CUDA: ``loss`` and ``time`` are then NaN)
    loss_tensor: Any = None


#: id(buffer) -> (a weak reference to it, the tensor its value is kept in across a step's replays)
_STASH: dict[int, tuple] = {}


def _stash_of(b: torch.Tensor) -> torch.Tensor:
    """A tensor of ``b``'s shape, dtype and device, the same one at every step while ``b`` lives (made
    at the first step, a warm-up: not an allocation of a later step)."""
    got = _STASH.get(id(b))
    if got is not None and got[0]() is b and got[1].shape == b.shape and got[1].dtype == b.dtype \
            and got[1].device == b.device:
        return got[1]
    c = torch.empty_like(b)
    _STASH[id(b)] = (weakref.ref(b), c)
    weakref.finalize(b, _STASH.pop, id(b), None)
    return c


#: stage module -> what :class:`_Rng` needs of its buffers (:func:`_buffer_plan`), found once per module
_BUFFER_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


#: functions that update the running statistics they are given in training mode (``F.batch_norm``,
#: ``F.instance_norm`` and their ``torch``/``aten`` forms), by the last part of their name
_NORM_FUNCTIONS = frozenset({"batch_norm", "instance_norm", "native_batch_norm", "_native_batch_norm_legit",
                             "_batch_norm_impl_index", "_batch_norm_with_update"})


def _functional_norm_buffers(f: torch.nn.Module) -> tuple:
    """``(module, name)`` of each buffer that an fx stage ``f`` (a ``GraphModule``: a model's layers traced
    through, a hand-written batch norm's ``F.batch_norm(x, self.rm, self.rv, ...)`` among them) passes
    to one of :data:`_NORM_FUNCTIONS`. The native kernels update the running statistics without moving
    their version counter, so :class:`_Rng` cannot see that write as it sees a counter's; these are
    kept across replays as a ``torch.nn`` batch norm of a compiled stage is."""
    from torch import fx

    if not isinstance(f, fx.GraphModule):
        return ()
    found = []
    for node in f.graph.nodes:
        t = node.target
        name = t if isinstance(t, str) else getattr(t, "__name__", str(t))     # aten's: "batch_norm.default"
        if node.op not in ("call_function", "call_method") or not _NORM_FUNCTIONS.intersection(name.split(".")):
            continue
        for a in list(node.args) + list(node.kwargs.values()):
            if isinstance(a, fx.Node) and a.op == "get_attr":
                owner, _, attr = str(a.target).rpartition(".")
                try:
                    m = f.get_submodule(owner) if owner else f
                except AttributeError:
                    continue
                if attr in m._buffers and (m, attr) not in found:
                    found.append((m, attr))
    return tuple(found)


def _buffer_plan(f: torch.nn.Module) -> tuple[tuple, tuple, bool, tuple]:
    """``(batch norms, (module, name) of every other buffer, compiled, (module, name) of the buffers it
    gives a batch-norm function)`` of stage ``f`` (:func:`_functional_norm_buffers`): its modules
    walked once, not at every step (the walk cost 5-30 us a stage, a step's host time no chain
    models); the tensors are read at each step (``.to()`` replaces them), the norms' mode too."""
    plan = _BUFFER_PLANS.get(f)
    if plan is None:
        from .compiled import CompiledStage

        mods = list(f.modules())
        norms = tuple(m for m in mods if isinstance(m, torch.nn.modules.batchnorm._NormBase))
        fnorms = _functional_norm_buffers(f)
        others = tuple((m, n) for m in mods if not isinstance(m, torch.nn.modules.batchnorm._NormBase)
                       for n in m._buffers if (m, n) not in fnorms)
        plan = _BUFFER_PLANS[f] = (norms, others, any(isinstance(m, CompiledStage) for m in mods), fnorms)
    return plan


class _Rng:
    """Per-stage RNG states: a recomputation draws the random numbers its stage drew the first time.

    The generator is put at stage l's saved state before a replay of l only where the previous
    operation was not a run of stage l-1: after running l-1 from its own state the generator already
    holds l's (the first runs of the stages are in order, 1, 2, ..., and only forwards draw random
    numbers). So a segment recomputed stage by stage costs one save, one read and two writes, as
    ``torch.utils.checkpoint`` pays per segment, not four calls per stage (a read 1.5 us, a write
    0.4 us alone on this CPU; with the Python around them about 5 us a recomputed stage, 0.15 ms of a
    ``sequential``(4) step of 40 tiny stages, ``benchmarks/bench_executor_overhead.py``). The global state
    is put back before the next first run and at the end, so the generator advances exactly as in a
    plain forward pass (the copy of the global state lives only while the replays run, as
    ``torch.utils.checkpoint``'s does). ``starts``: the stages some replay of which starts a run (their state is saved
    at their first run; :func:`_plan`). Every forward goes through :meth:`run`, every other operation
    calls :meth:`moved`, and :meth:`restore` ends the sequence.

    The CPU generator's states are kept as generators (``Generator.clone_state``), not as the 5056-byte
    tensors ``torch.get_rng_state`` returns: those live in c10's allocator, so a CPU step measured by its
    allocator events (``models.memory.ProfilerTracker``) held 5 KB per replayed segment that no chain
    models (the tiny GPT-2 of ``runtime_check --quick``: up to 15 KB, 26% of its peak); a state is
    written back through a tensor that lives only during the write. The CUDA generator's state is a
    host tensor (it never counts in the device's memory)."""

    def __init__(self, device, starts: set[int], fns: Sequence[Callable] = (), replayed: set[int] = frozenset()) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.states: dict[int, tuple] = {}
        self.starts = starts
        self.seen: set[int] = set()
        self.outer = None                # the global state to put back when the replays end
        self.at: int | None = None       # while replaying: the stage whose saved state the generator holds
        # buffers: a replayed stage (``fns[l - 1]``, l in ``replayed``) leaves the buffers its first run
        # wrote as that run left them, so that they end the step as one plain forward leaves them
        # (recomputing a batch norm had updated its running statistics once more per recomputation).
        # An eager stage's batch norms in training mode replay with track_running_stats off (they
        # normalize by the batch's statistics either way, and then neither update the running ones nor
        # count the batch: nothing allocated, the executed memory the simulator's to the byte); a
        # compiled stage's (the flag would compile another graph) have their statistics copied before
        # each replay into tensors kept from step to step (:func:`_stash_of`) and put back after it (a
        # copy of the first run's statistics was wrong where a stage run once since, sharing the norm,
        # had updated them). Other buffers a first run wrote (their version moved: a counter) are copied at each
        # replay.
        self.toggled: dict[int, list] = {}   # l -> stage l's batch norms replayed without running statistics
        self.norms: dict[int, list] = {}     # l -> [(buffer, its copy)] of a compiled stage l's batch norms
                                             # and of the buffers stage l gives a batch-norm function
        self.others: dict[int, list] = {}    # l -> stage l's other buffers
        self.written: dict[int, list] = {}   # l -> the other buffers stage l's first run wrote
        for l in replayed:
            f = fns[l - 1] if 0 < l <= len(fns) else None
            if not isinstance(f, torch.nn.Module):
                continue
            norms, others, compiled, fnorms = _buffer_plan(f)
            norms = [m for m in norms if m.training and m.track_running_stats]
            kept = [b for m, n in fnorms if isinstance(b := m._buffers.get(n), torch.Tensor)]
            if norms and compiled:
                kept += [b for m in norms for b in (m.running_mean, m.running_var, m.num_batches_tracked)
                         if isinstance(b, torch.Tensor)]
            elif norms:
                self.toggled[l] = norms
            if kept:
                self.norms[l] = [(b, _stash_of(b)) for b in kept]
            if others:
                self.others[l] = others

    def _get(self):
        # clone_state: a generator, outside c10's allocator (see the class docstring)
        return (torch.default_generator.clone_state(), torch.cuda.get_rng_state() if self.cuda else None)

    def _set(self, s) -> None:
        torch.default_generator.set_state(s[0].get_state())
        if self.cuda:
            torch.cuda.set_rng_state(s[1])

    def run(self, l: int, fn: Callable[[], Any]):
        if l not in self.seen:           # the first run of stage l: from the global state
            self.seen.add(l)
            self.restore()
            if l in self.starts:
                self.states[l] = self._get()
            others = self.others.get(l)
            if others:                   # the buffers now (a .to() replaces them): by their owner and name
                others = [b for b in (m._buffers.get(n) for m, n in others) if b is not None]
                versions = [b._version for b in others]
            out = fn()
            if others:
                self.written[l] = [b for b, v in zip(others, versions) if b._version != v]
            return out
        if self.outer is None:
            self.outer = self._get()
        if self.at != l:
            self._set(self.states[l])
        self.at = None                   # unknown if fn raises
        toggled, norms, written = self.toggled.get(l), self.norms.get(l), self.written.get(l)
        if toggled or norms or written:
            kept = [b.detach().clone() for b in written] if written else []
            for m in toggled or ():
                m.track_running_stats = False
            if norms:
                # the statistics as they are before this replay, not as the stage's first run left them:
                # a batch norm reused by a later stage that runs once (a block applied twice) updated
                # them since, and putting back the first run's copy lost that update
                with torch.no_grad():
                    for b, c in norms:
                        c.copy_(b)
            try:
                out = fn()
            finally:
                for m in toggled or ():
                    m.track_running_stats = True
                # through .data: no version bump (a replayed F_all's graph saved the running
                # statistics, and the native batch norm, which wrote them, bumps none either)
                for b, c in norms or ():
                    b.data.copy_(c)
                for b, v in zip(written or (), kept):
                    b.data.copy_(v)
        else:
            out = fn()
        self.at = l + 1
        return out

    def moved(self) -> None:
        """An operation other than a forward ran: the global state goes back now (its saved copy is not
        kept through the backward, where the peaks are) and the next replay starts from a saved state."""
        self.restore()
        self.at = None

    def restore(self) -> None:
        """Put the global state back after replays (before a first run, at the end)."""
        if self.outer is not None:
            self._set(self.outer)
            self.outer, self.at = None, None

    def guarded(self, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` (a whole sequence) that leaves the global state as a plain forward does, also when it
        raises (an invalid sequence)."""
        def run() -> None:
            try:
                fn()
            finally:
                self.restore()
        return run


class uncached_autocast:
    """Where ``torch.autocast`` is on for ``device`` with its weight cache (the default), the cache off
    for the block, the autocast dtype kept; nothing otherwise (a flag read, about 1 us).

    Autocast keeps every weight it casts (a float32 leaf that requires grad, cast to bfloat16 or
    float16) until the outermost autocast block ends: a stage's cast weights were made by its first
    forward of the step and lived to its end whatever the plan did, memory that no stage's profile
    sees and no sequence frees (rotor's plans on a 6-block MLP under bfloat16 measured up to 1.97x
    their prediction on this CPU, 1.00x without the cache; 1.39-2.68x on runtime_check's small preset). Without the cache a forward casts its
    weights again: the copies an operation saves for its backward are the stage's abar^l, freed with
    it, the others transient, and the chain's model holds (every plan to the byte on the same MLP).
    Plain autograd's memory is the same either way (each weight cast once, saved by its operation);
    a recomputation costs the cast again. The backward calls (:func:`engine_backward`) run with
    autocast off, as ``loss.backward()`` after the autocast block does (PyTorch's advice; on a CPU the
    engine runs the backward on the calling thread, where autocast inside the block would cast its
    operations again: +0.5 MiB on the MLP). :func:`execute` and :func:`models.profiler.profile_chain`
    run under it, so that a chain is profiled and run alike."""

    def __init__(self, device) -> None:
        self.kind = torch.device(device).type if device is not None else "cpu"
        self.ctx = None
        self.pushed = False

    def __enter__(self):
        if autocast_dtype(self.kind) is not None:
            if torch.is_autocast_cache_enabled():
                self.ctx = torch.autocast(self.kind, dtype=torch.get_autocast_dtype(self.kind), cache_enabled=False)
                self.ctx.__enter__()
            _AUTOCAST_OFF.append(self.kind)      # the backward without autocast, cache or not
            self.pushed = True
        return self

    def __exit__(self, *exc):
        if self.pushed:
            _AUTOCAST_OFF.pop()
            self.pushed = False
        if self.ctx is not None:
            self.ctx.__exit__(*exc)
            self.ctx = None
        return False


@under_uncached_autocast(x_at=2)
def execute(stages: Sequence[Callable], loss_fn: Callable, x: torch.Tensor,
            schedule: RematSchedule | Sequence[tuple[str, int]], *, measure_memory: bool = False,
            device=None, input_grad: bool = True, op_times: list | None = None,
            clock: Callable[[], float] = time.perf_counter, fuse_backward: bool = True,
            sync: bool = True, hold: bool = True, fast: bool = True) -> RuntimeResult:
    """Run ``schedule`` (ops on stages 1..L+1, L+1 = ``loss_fn``) on input ``x``; parameter gradients
    are accumulated into the stages' ``.grad``. ``input_grad``: B^1 computes delta^0 (float inputs).
    Under ``torch.autocast`` the run keeps its dtype without the weight cache (:class:`uncached_autocast`).

    ``sync=False`` (CUDA): return as soon as the work is queued, as ``loss.backward()`` does, with no
    synchronize and no read of the loss (``time`` and ``loss`` are NaN, ``loss_tensor`` holds it), so
    that steps timed back to back between two synchronizes queue as plain autograd's do. A synchronize
    per step had made the executed plans pay a drained queue that the PyTorch contenders did not (on an
    H100, ResNet-50 b32 timed as the mean of 5 steps: memplan's ``sequential`` with 2 segments 34.9 ms
    against ``checkpoint_sequential``'s 28.1 ms, where one step per sample had given 31.0 and 30.7).
    Ignored on a CPU and with ``measure_memory`` or ``op_times`` (those read the device).

    ``op_times``: a list that receives the seconds each operation took, in the order of the ops, as it
    ran inside the whole sequence (the in-context times of :func:`time_in_context`). CPU:
    ``time.perf_counter`` between operations; CUDA: an event recorded on the current stream between
    operations, no synchronize until the sequence has ended (so the GPU runs the ops back to back
    as in an unmeasured run), then read. ``clock``: what ``time`` and the CPU ``op_times`` are read
    with (``time.process_time`` for CPU time on a shared machine, :data:`models.measure.CLOCKS`).

    ``fuse_backward`` (on by default): where the sequence runs B^l and B^{l-1} one right after the other
    and F_all^l read a^{l-1} from abar^{l-1}, F_all^l takes abar^{l-1}'s output itself instead of a
    detached copy, so that the two stages' graphs are one and a single backward call runs B^l,
    B^{l-1}, ... (store-all: one call for the whole step, as plain autograd). It computes the same
    gradients with the same kernels in the same order and frees each stage's saved tensors as the
    engine passes them; per-stage calls cost a Python round trip and, on a GPU, an engine hand-off each
    (the executed store-all plan was 15-21% slower than autograd on an H200 with one call per B).
    With ``measure_memory`` each B of the group gets its own memory, and with ``op_times`` its own
    time, both read by a hook on each junction's gradient (the moment delta^{j-1} is complete: B^j has
    ended, B^{j-1} starts; the engine runs a stage's nodes before the stage below's, by sequence
    number). Without the holds (``hold=False``) there are no hooks and a group's time is reported on
    its first B (the others' about 0).

    Memory of a fused group: the engine would free a^j as soon as B^{j+1} is done with it and delta^j
    as soon as B^j's first node has used it; the model, the profiler's ``ob^l`` and an unfused run keep
    both until B^j ends. The executor does the same: it holds them, and a hook on each junction's
    gradient (delta^{j-1} complete, so B^j has ended) lets them go. A group is also split where two of
    its stages share a parameter (:func:`_split_shared`). Fused and unfused runs then hold the same
    bytes after and during every operation (the tests check it on the zoo), the simulator's.

    ``hold=False`` (not with ``measure_memory``): a fused group does not hold a^j and delta^j until
    B^j ends. The engine then frees each as soon as it has used it: the same tensors are allocated in
    the same order and some are freed sooner, so the memory after and during every operation is at
    most the held run's, and the hooks (a registration and a Python callback per junction inside the
    backward, about 10 us a stage on this CPU) are not paid, and a B in a backward call of its own is
    called through the empty root too, so that the call holds neither a^l nor delta^l. The price is
    paper 004's model: the chain's ``ob^l`` were measured with delta^l held, so its replay no longer
    predicts the unheld run's peak to 1% (a compiled-stage chain's plan: 2.77 MB measured against
    3.32 MB predicted, 17% less); the replay of :func:`models.remat.free_backward_model` does (48 of 48
    zoo plans within 8 bytes, ``benchmarks/held_vs_free_peaks.py``), and
    :func:`models.remat.free_backward_chain` lets the solvers plan in it. The default holds, so that
    what is measured is paper 004's model operation by operation.

    ``hold`` as a set of stages (not with ``measure_memory``): only their B's are held
    (:func:`_hold_group`), two hooks each; with :func:`holds_at_peak` of a held measured run (or of
    the simulator's replay) the run peaks at the held run's peak to the byte, with the host time of
    ``hold=False`` but a few hooks (the tests check it on the zoo and on random chains). Its answer,
    a :class:`Holds`, also lets the run call a fused group's backward directly, without the empty
    Python root, where the group's B's have the room for it.

    Without ``measure_memory``, the group that starts at the loss stage (scalar outputs and
    gradients) is back-propagated by a direct call rather than through an empty root
    (:func:`_backward_from`): the two scalars are then held through the call, 8 bytes on a CPU.

    ``fast`` (on by default): once a run of the store-all sequence on these stages has shown its fused
    groups (single-tensor cuts; one group, or several where stages share a parameter), an unmeasured
    run of it skips the general loop (:func:`_run_store_all`: the same tensors, holds and backward
    calls, about 3 us a stage less host time on a CPU); ``False`` keeps the loop
    (``benchmarks/bench_executor_overhead.py`` compares the two). On multi-tensor stages (resident
    tensors) with ``hold=False`` and no measure, the store-all sequence runs as plain autograd over
    the stages, one backward call from the loss (:func:`_run_store_all_multi`: the general loop's one
    call per stage made NASNet-A's store-all 8-9% slower than autograd's step; its peak is autograd's,
    at most the held run's, on NASNet 1.1% below it). Not with a set of held stages: the chain's times
    are the general loop's, one call per B, and a fused store-all ran 8% under them, beyond the 5%
    the time model must hold (a remat plan re-timed on it was predicted 8% too fast).

    Raises :class:`models.remat.InvalidSequence` when an operation's inputs are not in memory.
    """
    L = len(stages)
    fns = list(stages) + [loss_fn]
    info = _stage_info(fns)
    r_in, r_out, src_res, r_free = info.r_in, info.r_out, info.src_res, info.r_free
    ops, replayed, join, starts = _plan(schedule.ops if isinstance(schedule, RematSchedule) else schedule,
                                        fuse_backward and not info.multi, info.shared)
    device = device if device is not None else x.device
    keep = _keep(hold)
    free = hold is False or (isinstance(hold, Holds) and hold.free)   # no holds: the single-stage calls
    headroom = hold.headroom if isinstance(hold, Holds) else None       # hold nothing either
    if measure_memory and keep is not None:
        raise ValueError("execute: measure_memory reads each B's memory from the holds' hooks; use hold=True")
    # stages 1..frozen (no trained parameter, no input gradient asked for) run without a graph
    frozen = frozen_prefix(fns) if not input_grad and not info.multi else 0
    if fast and info.fast_ops is ops and not measure_memory and op_times is None:
        return _run_store_all(fns, x, device, input_grad, clock, sync, keep, info.fast_splits, headroom, free,
                              frozen)
    if (fast and info.multi and free and not info.shared and not measure_memory and op_times is None
            and ops == _store_all_plan(L)):
        return _run_store_all_multi(fns, x, device, input_grad, clock, sync, info)
    rng = _Rng(device, starts, fns, replayed) if replayed else None
    cuda = torch.device(device).type == "cuda"
    marks: list = []                  # CUDA events or perf_counter readings between operations
    tracker = _tracker_for(fns, device) if measure_memory else None
    a: dict[int, tuple] = {}                       # a^l kept without graph (F_ck / F_none), as a tuple
    abar: dict[int, tuple] = {}      # l -> (inputs, outputs with graph, joined to abar^{l-1}, resident outputs)
    delta: dict[int, tuple] = {}     # delta^l: one gradient (or None) per tensor of a^l
    R: dict[Any, torch.Tensor] = {}  # resident tensors: one leaf each, its .grad allocated with it
    RS: dict[Any, Any] = {}          # resident float tensors' states (models.resident): the gradient,
                                     # kept until the producer's B also where the value has been let go
    drop_after = info.drops_of(ops) if info.multi else {}      # position -> values let go after it
    after: list[float] = []
    during: list[float] = []
    loss_value = float("nan")

    def value(k: int, pos: int, op) -> tuple:
        if k in abar:
            return abar[k][1]
        if k in a:
            return a[k]
        raise InvalidSequence(pos, op, f"a^{k} is not in memory")

    def resident_leaf(t: torch.Tensor, grad: bool = True) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if grad and t.is_floating_point():
            t.requires_grad_(True)
            # no .grad until its first reader's backward hands a contribution (as autograd; the chain's
            # resident_grads), then added into one by one, in autograd's order
            mark_resident(t)
        return t

    def keep_resident(l: int, outs: tuple, graph: bool) -> None:
        for v, t in zip(r_out[l - 1], outs):
            if v in R and not (graph and isinstance(t, torch.Tensor)):
                continue                 # a no-grad recomputation: the leaf held stays
            st = RS.get(v)
            if st is not None:
                # recomputed by F_all, or made again after it was let go (value_drops): a new leaf on the
                # new storage with the same state (gradient, contributions); the old storage goes with
                # the old leaf (a ``.data`` swap kept the leaf but hid the swap from the dispatch
                # tracker, which counted the old storage as long as the leaf lived)
                R[v] = attach_resident(st, t.detach().requires_grad_(True))
            else:
                R[v] = resident_leaf(t)
                st = state_of(R[v])
                if st is not None:
                    RS[v] = st

    def _stamp():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return clock()

    def _mark() -> None:
        marks.append(_stamp())

    ended: dict[int, Any] = {}       # op_times of a fused group: j -> when B^j ended (its junction's hook)

    queued: list[tuple[float, float]] = []     # (peak, current) of B's of a fused group not yet reported
    held: dict[int, torch.Tensor] = {}          # a^j of a fused group, kept until B^j ends (as the model)
    held_delta: dict[int, torch.Tensor] = {}    # delta^j of a fused group, kept until B^j ends

    def _junction(j: int):
        def hook(grad):
            # delta^{j-1} is complete: B^j of a fused group has ended, B^{j-1} starts. ``grad``: the
            # gradient (tensor hook) or the tuple of gradients of a^{j-1}'s node (node pre-hook)
            if op_times is not None:
                ended[j] = _stamp()
            held.pop(j, None)
            held_delta.pop(j, None)
            if keep is None or j - 1 in keep:
                held_delta[j - 1] = grad
            if tracker is not None:
                tracker.sync()
                queued.append((float(tracker.peak), float(tracker.current)))
                tracker.reset_peak()
        return hook

    unjoined: list[int] = []          # stages l >= 2 whose F_all took a detached copy of its input
    single = True                     # every F_all read one tensor and returned one
    grad_mode = torch.is_grad_enabled()
    nograd = False                    # the loop has switched grad mode off for F_ck / F_none

    def run() -> None:
        nonlocal loss_value, single, nograd
        x0 = x.detach().clone()
        if src_res:
            R[src_res[0]] = resident_leaf(x0, grad=input_grad)
            if state_of(R[src_res[0]]) is not None:
                RS[src_res[0]] = state_of(R[src_res[0]])
            a[0] = ()
        else:
            a[0] = (x0,)
        del x0
        delta[L + 1] = (torch.ones((), device=device),)
        skip = 0
        for pos, (op, l) in enumerate(ops):
            if skip:                     # a B fused into the previous operation's backward call
                skip -= 1
                if tracker is not None:
                    peak_now, current_now = queued.pop(0)
                    during.append(peak_now)
                    after.append(current_now)
                if op_times is not None:
                    got = ended.pop(l + 1, None)       # B^{l+1} ended, B^l started, inside the call
                    marks.append(got if got is not None else _stamp())
                continue
            if tracker is not None:
                tracker.reset_peak()
            if op_times is not None:
                _mark()
            if op not in OPS or not 1 <= l <= L + 1:
                raise InvalidSequence(pos, (op, l), f"unknown operation or stage outside 1..{L + 1}")
            fn = fns[l - 1]
            if (op == "F_ck" or op == "F_none") != nograd:
                # a run of no-grad forwards in one grad-mode switch (``torch.no_grad()`` around each
                # cost 1.6 us an operation here, a switch 0.4 us; run() is wrapped to put the mode back)
                nograd = not nograd
                torch.set_grad_enabled(False if nograd else grad_mode)
            if op == "B":
                if l not in abar:
                    raise InvalidSequence(pos, (op, l), f"abar^{l} is not in memory")
                if l not in delta:
                    raise InvalidSequence(pos, (op, l), f"delta^{l} is not in memory")
                group = [l]             # l, l-1, ..., k: stages whose graphs are joined (see fuse_backward)
                while abar[group[-1]][2]:
                    group.append(group[-1] - 1)
                inp = abar[group[-1]][0]
                outs, routs = abar[l][1], abar[l][3]
                junctions = [abar[j][0][0] for j in group[:-1]]      # a^{j-1}, j = l, ..., k+1
                handles = []
                for j in group:
                    del abar[j]
                if len(group) == 1:      # one call: it holds a^l and delta^l until B^l ends, as the model
                    d = delta.pop(l)
                    if len(outs) == 1 and not routs:
                        if d[0] is not None and outs[0].requires_grad:
                            if free and tracker is None:
                                # no holds: nothing held by the call, as autograd frees (the replay of
                                # models.remat.free_backward_model); a direct call would keep both
                                pairs = [(outs[0], d[0])]
                                del d, outs
                                _backward_from(pairs)
                                d = outs = None
                            else:
                                engine_backward((outs[0],), (d[0],))
                    else:
                        # (in a function: a loop variable here would hold the last root until it is
                        # bound again, one resident value 128 KiB over the model after NASNet's B^60)
                        ts, gs = _roots(outs, d, r_out[l - 1], routs, RS)
                        if ts:
                            engine_backward(ts, gs)
                        del ts, gs
                    del d, outs
                else:
                    # a fused group (single-tensor cuts): the engine would free a^j as soon as B^{j+1}
                    # is done with it and delta^j as soon as B^j's first node has used it, while the
                    # model (and an unfused run) keeps both until B^j ends. ``held`` and ``held_delta``
                    # keep them; a hook on each junction's gradient (delta^{j-1} complete: B^j has
                    # ended) lets them go
                    d = delta.pop(l)
                    pairs = [(o, g) for o, g in zip(outs, d) if g is not None and _needs_grad(o)]
                    _hold_group(group, junctions, outs, d, keep, held, held_delta, _junction, handles)
                    del d, outs
                    junctions.clear()
                    if pairs:
                        _backward_from(pairs, exact=tracker is not None,
                                       direct=tracker is None and _direct_ok(headroom, group, pairs, free),
                                       scalars=not (free and headroom is not None))
                    held.clear()
                    held_delta.clear()
                delta[group[-1] - 1] = ((inp[0].grad if inp[0].requires_grad else None,) if len(inp) == 1 else
                                        tuple(i.grad if _needs_grad(i) else None for i in inp))
                del inp, routs
                for h in handles:
                    h.remove()
                for v in r_out[l - 1]:        # its producer's backward is the resident tensor's last use
                    R.pop(v, None)
                    if v in RS:
                        RS.pop(v).grad = None
                for j in group:
                    if j - 1 in a and j - 1 not in abar:
                        del a[j - 1]
                skip = len(group) - 1
                if rng is not None:
                    rng.moved()
            else:
                src = value(l - 1, pos, (op, l))
                if r_in[l - 1]:
                    missing = [v for v in r_in[l - 1] if v not in R]
                    if missing:
                        raise InvalidSequence(pos, (op, l), f"resident tensor {missing[0]} is not in memory")
                    res = tuple(R[v] for v in r_in[l - 1])
                else:
                    res = ()
                nr = len(r_out[l - 1])
                if op == "F_all":
                    joined = pos in join and l - 1 in abar and len(src) == 1 and _needs_grad(src[0])
                    if not joined and l > 1:
                        unjoined.append(l)
                    inp = src if joined else tuple(_leaf(t, input_grad or l - 1 > frozen) for t in src)
                    out = rng.run(l, lambda: fn(*inp, *res)) if rng is not None else fn(*inp, *res)
                    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                    single = single and len(src) == 1 and len(out) == 1
                    outs, routs = (out[:len(out) - nr], out[len(out) - nr:]) if nr else (out, ())
                    if nr:
                        keep_resident(l, routs, graph=True)
                        if r_free[l - 1]:
                            # a value no backward saves: the producer's backward starts from its gradient
                            # edge, so that the graph does not keep the value (autograd frees it once its
                            # last reader's forward has run; drop_after lets the leaf go then)
                            routs = tuple(_edge(o) if v in r_free[l - 1] and _needs_grad(o) else o
                                          for v, o in zip(r_out[l - 1], routs))
                    abar[l] = (inp, outs, joined, routs)
                    a.pop(l, None)
                    if l == L + 1:
                        # CUDA: read after the run, not with a device sync mid-step
                        loss_value = outs[0].detach() if cuda else float(outs[0].detach())
                    del outs, routs
                else:
                    # detached where it has a graph: an output that is the input itself, or a view of
                    # it, must not keep abar^{l-1}'s graph alive in a^l
                    inp = tuple(t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t for t in src)
                    if op == "F_none" and l - 1 in abar:
                        raise InvalidSequence(pos, (op, l), f"F_none^{l} would discard abar^{l - 1}")
                    out = rng.run(l, lambda: fn(*inp, *res)) if rng is not None else fn(*inp, *res)
                    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                    if nr:
                        keep_resident(l, out[len(out) - nr:], graph=False)
                    if l not in abar:
                        a[l] = out[:len(out) - nr] if nr else out
                    if op == "F_none":
                        a.pop(l - 1, None)
                del src, inp, out, res
                for v in drop_after.get(pos, ()):
                    R.pop(v, None)
            if tracker is not None:
                tracker.sync()
                queued.append((float(tracker.peak), float(tracker.current)))
                peak_now, current_now = queued.pop(0)
                during.append(peak_now)
                after.append(current_now)
        if op_times is not None:
            _mark()
        if 0 not in delta:
            raise InvalidSequence(len(ops), None, "delta^0 was never computed")
        a.clear()
        abar.clear()
        delta.clear()
        R.clear()

    def moded() -> None:
        try:
            run()
        finally:
            torch.set_grad_enabled(grad_mode)

    wait = sync or tracker is not None or op_times is not None
    elapsed = _run_timed(rng.guarded(moded) if rng is not None else moded, tracker, device, clock, sync=wait)
    if info.fast_ops is None and L >= 1 and single and not info.multi and list(ops) == store_all_ops(L):
        info.fast_ops = ops          # single tensors, every F_all^l, l >= 2, joined but at ``unjoined``: the
        info.fast_splits = tuple(unjoined)        # groups _run_store_all runs
    if cuda and not wait:
        return RuntimeResult(loss=float("nan"), time=float("nan"), loss_tensor=loss_value)
    if op_times is not None:
        op_times.clear()
        if cuda:
            op_times.extend(a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:]))
        else:
            op_times.extend(b - a for a, b in zip(marks, marks[1:]))
    return RuntimeResult(loss=float(loss_value), time=elapsed, peak_memory=max(during) if during else None,
                         memory_after=after, memory_peak_during=during)


class Holds(frozenset):
    """The stages whose B a run holds (a frozenset, as ``execute``'s ``hold``), with ``headroom``:
    for each stage l, how many bytes B^l stayed below the run's peak in the fully held run they
    come from (:func:`holds_at_peak`). With it an unmeasured run also calls a fused group's
    backward directly, as plain autograd and ``torch.utils.checkpoint`` do, where that is safe: a
    direct call keeps the group's top output a^l and its gradient delta^l until the whole call
    returns instead of until B^l ends, so it is made only where every later B of the group has
    that many bytes of headroom; elsewhere the empty Python root of :func:`_backward_from` (about
    40 us a group on this CPU, 3 of the 5% by which ``sequential``(4) trailed
    ``checkpoint_sequential``(4) on 40 tiny stages) lets them go when B^l ends."""

    headroom: dict
    free: bool

    def __new__(cls, stages, headroom: dict | None = None, free: bool = False):
        self = super().__new__(cls, stages)
        self.headroom = dict(headroom or {})
        self.free = bool(free)
        return self


def free_holds(ops: RematSchedule | Sequence[tuple[str, int]], memory_during: Sequence[float]) -> Holds:
    """``execute``'s ``hold`` for a run without holds (``hold=False``: autograd's own freeing, the
    replay of :func:`models.remat.free_backward_model`) that also knows each B's headroom below the
    peak of that replay (``memory_during``, one value per operation of ``ops``). Without it a free run
    back-propagates the group that starts at the loss stage by a direct call, which keeps the loss and
    its seed gradient (8 bytes on a CPU) until the group's last B, where the replay lets them go after
    B^{L+1}: at a plan's least memory, where the peak is reached inside that group, the run measured 8
    bytes over its limit (ResNet-18 and Inception v3 at f = 0 in ``runtime_check``). With the headroom
    the direct call is made only where every later B of the group has those bytes to spare (else the
    empty root of :func:`_backward_from`, about 35 us on a CPU, once a step)."""
    ops = ops.ops if isinstance(ops, RematSchedule) else ops
    if len(memory_during) != len(ops):
        raise ValueError(f"free_holds: {len(memory_during)} memory values for {len(ops)} operations")
    top = max(memory_during, default=0.0)
    return Holds((), {int(l): top - m for (op, l), m in zip(ops, memory_during) if op == "B"}, free=True)


def _direct_ok(headroom: dict | None, group: list, pairs: list, free: bool) -> bool:
    """:func:`_direct_fits`, and in a run without holds (``free``) only for the loss's scalars: there
    B^top itself may let a^top go (a stage whose backward does not save its output, the free replay's
    ``release``), which a direct call keeps to the group's end (2 KiB over the free replay on a tiny
    chain's ``sequential`` plan); the loss and its seed are in B^{L+1}'s memory either way."""
    if free and not _scalars(pairs):
        return False
    return _direct_fits(headroom, group, pairs)


def _scalars(pairs: list) -> bool:
    """Whether every output and gradient of ``pairs`` has at most one element (the loss's group)."""
    return all(o.numel() <= 1 and g.numel() <= 1 for o, g in pairs)


def _direct_fits(headroom: dict | None, group: list, pairs: list) -> bool:
    """Whether a fused group's backward may be called directly (:class:`Holds`): every B below its
    top has at least the bytes of the top's outputs and gradients (distinct storages) below the peak."""
    if headroom is None:
        return False
    extra = storage_bytes(pairs)
    return all(headroom.get(j, -1.0) >= extra for j in group[1:])


def _keep(hold) -> frozenset | None:
    """``execute``'s ``hold`` as the set of stages whose B is held (None: every one)."""
    if hold is True:
        return None
    if hold is False or hold is None:
        return frozenset()
    try:
        return frozenset(int(l) for l in hold)
    except (TypeError, ValueError):
        raise ValueError(f"execute: hold={hold!r}; give True, False or the stages whose B is held") from None


def _hold_group(group: list, junctions, outs, d, keep: frozenset | None, held: dict, held_delta: dict,
                hook_for: Callable, handles: list) -> None:
    """The holds of a fused group ``group`` = [l, l-1, ..., k] (one backward call runs B^l, ..., B^k):
    ``junctions`` are a^{l-1}, ..., a^k (the inputs of stages l..k+1), ``outs`` a^l and ``d`` delta^l.

    Every stage held (``keep`` None): each a^j is kept until B^j ends and each delta^j from its
    completion until B^j ends, as the model (and an unfused run) has them. A hook ``hook_for(j)`` on
    a^{j-1}, run when delta^{j-1} is complete (B^j has ended), lets ``held[j]`` and ``held_delta[j]``
    go and keeps delta^{j-1} in ``held_delta[j - 1]`` when B^{j-1} is held: a pre-hook on a^{j-1}'s
    node, which dies with the graph, or, where a stage returned its input (the step's leaf, no node),
    a tensor hook whose handle goes into ``handles`` for the caller to remove.

    Some stages held (``keep``, a set): during each held B^m the memory is the fully held run's, and
    at every other moment at most that (nothing is kept longer than there). B^m's own delta^m and
    a^m, and the a^j below it (j < m, kept until B^j ends in the full run, so present during B^m),
    are kept until B^m ends; an a^j is let go when the lowest held B^m with m >= j ends (B^m runs
    before B^j: earlier than, or as, in the full run). Two hooks per held B (the one that hands it
    delta^m and the one that lets go at its end) instead of one per stage: about 5 us each on the
    CPU of the tests, all of the held store-all's remaining host time over plain autograd
    (``benchmarks/bench_executor_overhead.py``). :func:`holds_at_peak` gives the stages at a run's
    peak: its peak is then the fully held run's."""
    l, k = group[0], group[-1]
    want = sorted(group) if keep is None else sorted(m for m in group if m in keep)
    if not want:
        return
    hooks = {m + 1 for m in want if m < l} | {m for m in want if m > k}
    if want[-1] == l:
        held[l] = [outs]
        held_delta[l] = d
    i = len(want) - 1                 # want[i]: the lowest held m >= j-1, which lets a^{j-1} go
    for j, t in zip(group, junctions):                       # t = a^{j-1}, j = l, ..., k+1
        while i > 0 and want[i - 1] >= j - 1:
            i -= 1
        if want[i] >= j - 1:
            got = held.get(want[i])
            if got is None:
                held[want[i]] = [t]
            else:
                got.append(t)
        if j in hooks:
            if t.grad_fn is not None:
                t.grad_fn.register_prehook(hook_for(j))
            else:
                handles.append(t.register_hook(hook_for(j)))


def holds_at_peak(ops: RematSchedule | Sequence[tuple[str, int]], memory_during: Sequence[float], rel: float = 0.0,
                  slack: float | None = None, device="cpu") -> Holds:
    """The stages l whose B^l's memory (``memory_during``, one value per operation of ``ops``: a held
    measured run's, or the simulator's) is within ``rel`` of the largest, less ``slack`` bytes:
    ``execute(hold=...)`` with them holds the memory of the fully held run where it peaks, and at
    most that elsewhere, so its peak is the held run's (the model's) with two hooks per stage given
    instead of one per stage of every fused group. Empty where the peak is at a forward (no hold
    changes it). The answer is a :class:`Holds`, which also carries each B's headroom below the
    peak: with it an unmeasured run calls a fused group's backward directly where that stays below
    the peak.

    ``slack``: an unmeasured run back-propagates the loss's group by a direct call that holds the
    loss and its seed gradient until it returns (:func:`_backward_from`), where a measured run lets
    them go after B^{L+1}: two scalars, which can make a B a few bytes below the measured peak the
    unmeasured run's largest (found by the random chains' test). None: what they take on ``device``,
    16 bytes on a CPU (float64 at most), two 512-byte blocks on CUDA. No more than that: on chains
    of small tensors a larger slack holds many B's (1 KiB held 6 of store-all's and 17 of
    ``sequential``(4)'s on 40 stages of 4 x 8 floats, where 16 bytes hold one)."""
    ops = ops.ops if isinstance(ops, RematSchedule) else ops
    if len(memory_during) != len(ops):
        raise ValueError(f"holds_at_peak: {len(memory_during)} memory values for {len(ops)} operations")
    if not ops:
        return Holds(())
    top = max(memory_during)
    if slack is None:
        slack = 1024.0 if torch.device(device).type == "cuda" else 16.0
    at = [int(l) for (op, l), m in zip(ops, memory_during) if op == "B" and m >= top * (1 - rel) - slack]
    # headroom: below the peak less ``rel`` and the slack, so that what they cover is not spent twice
    return Holds(at, {int(l): top * (1 - rel) - m - slack for (op, l), m in zip(ops, memory_during) if op == "B"})


#: :func:`holds_at_replay_peak`'s margin: a replay within 1% of the measured run
REPLAY_HOLD_REL = 0.01


def holds_at_replay_peak(ops: RematSchedule | Sequence[tuple[str, int]], memory_during: Sequence[float],
                         device="cpu") -> Holds:
    """:func:`holds_at_peak` from a replay's memory per operation (the simulator's on the chain the
    plan was solved on, not a measured run's): every B within :data:`REPLAY_HOLD_REL` of its peak,
    so that a B a little off in the model is held too. The holds of an unmeasured step whose peak
    the measuring method cannot attribute to operations: c10's allocator events (the budget search,
    ``runtime_check``/``memplan run`` with ``profiler``)."""
    return holds_at_peak(ops, memory_during, rel=REPLAY_HOLD_REL, device=device)


#: gradients that are not bit-identical to a reference but within this difference, relative to each
#: parameter's largest reference gradient, are the same sums in another order: where a parameter shared
#: by three stages or more has their backward steps in separate calls (:func:`_split_shared`), its
#: contributions are added in another order than one autograd call adds them (the zoo's Transformer
#: cut into four stages, its tied embedding: 4e-8); float32's rounding of a few terms, some 1e-7, where
#: a wrong gradient is off by far more
GRAD_REL_TOL = 1e-5


def grads_max_rel_diff(grads, ref) -> float:
    """The largest ``max |g - r| / max |r|`` over pairs of gradients (tensors or None, in the same
    order): 0.0 where every pair is bit-identical, ``inf`` where a gradient is missing but its
    reference is not. Compare with :data:`GRAD_REL_TOL`."""
    worst = 0.0
    for g, r in zip(grads, ref):
        if r is None:
            continue
        if g is None:
            return math.inf
        if not torch.equal(g, r):
            scale = float(r.abs().max()) or 1.0
            worst = max(worst, float((g - r).abs().max()) / scale)
    return worst


def _run_store_all(fns: list, x: torch.Tensor, device, input_grad: bool, clock: Callable[[], float], sync: bool,
                   keep: frozenset | None, splits: tuple = (), headroom: dict | None = None,
                   free: bool = False, frozen: int = 0) -> RuntimeResult:
    """:func:`execute` of the store-all sequence once a run of it through the general loop has shown
    its fused groups (single-tensor cuts, no replay): every F_all^l, l >= 2, takes abar^{l-1}'s output
    except at ``splits``, the stages whose F_all took a detached copy (:func:`_split_shared`: GPT-2's
    head and embedding share a weight), each the bottom of a group. The same forwards on the same
    tensors, the same backward calls from the loss down, group by group, with the same holds and the
    same references alive through each call, without the general loop's per-operation bookkeeping.
    On a GPU whose host paces the step every microsecond of it is step time (the executed store-all
    plan was 3-7% slower than plain autograd on a host-bound H100 and H200); the general loop costs
    about 3 us a stage and 45 us a step more than this on the CPU of the tests
    (``benchmarks/bench_executor_overhead.py``). Not for measured runs (``measure_memory``,
    ``op_times``), which take the general path."""
    cuda = torch.device(device).type == "cuda"
    held: dict[int, Any] = {}
    held_delta: dict[int, Any] = {}
    loss_value: Any = float("nan")
    L1 = len(fns)
    split = frozenset(splits)
    bottoms = sorted(split, reverse=True) + [1]       # each group's lowest stage, from the loss down

    def junction(j: int):
        def hook(grad):
            held.pop(j, None)
            held_delta.pop(j, None)
            if keep is None or j - 1 in keep:
                held_delta[j - 1] = grad
        return hook

    def run() -> None:
        nonlocal loss_value
        x0 = _leaf(x.detach().clone(), input_grad)
        h = x0
        ins: list = [None]              # ins[l]: the tensor stage l read (a^{l-1}, or its detached copy at a split)
        tops: dict[int, torch.Tensor] = {}   # a^{s-1} with its graph, for each split s: the top of the group below
        for l in range(1, L1 + 1):
            if l in split:
                tops[l - 1] = h
                h = _leaf(h, input_grad or l - 1 > frozen)
            ins.append(h)
            out = fns[l - 1](h)
            h = out[0] if isinstance(out, (tuple, list)) else out
        del out
        loss_value = h.detach() if cuda else float(h.detach())
        outs, d = (h,), (torch.ones((), device=device),)
        del h
        top = L1
        for k in bottoms:               # one backward call per group: B^top, ..., B^k
            group = list(range(top, k - 1, -1))
            inp = ins[k]
            junctions = ins[k + 1:top + 1][::-1]          # a^{top-1}, ..., a^k
            del ins[k:]
            handles: list = []
            if len(group) == 1:         # one call, which holds a^top and delta^top until B^top ends
                if d[0] is not None and outs[0].requires_grad:
                    if free:                # no holds: the call holds nothing either
                        pairs = [(outs[0], d[0])]
                        del outs, d
                        _backward_from(pairs)
                        outs = d = None
                    else:
                        engine_backward((outs[0],), (d[0],))
                del outs, d
            else:
                pairs = [(o, g) for o, g in zip(outs, d) if g is not None and _needs_grad(o)]
                _hold_group(group, junctions, outs, d, keep, held, held_delta, junction, handles)
                junctions.clear()
                del outs, d
                if pairs:
                    _backward_from(pairs, exact=False, direct=_direct_ok(headroom, group, pairs, free),
                                   scalars=not (free and headroom is not None))
                held.clear()
                held_delta.clear()
            for hd in handles:
                hd.remove()
            d = (inp.grad if _needs_grad(inp) else None,)
            del inp
            if k > 1:
                outs = (tops.pop(k - 1),)
                top = k - 1
        del d, x0

    elapsed = _run_timed(run, None, device, clock, sync=sync)
    if cuda and not sync:
        return RuntimeResult(loss=float("nan"), time=float("nan"), loss_tensor=loss_value)
    return RuntimeResult(loss=float(loss_value), time=elapsed)


@functools.lru_cache(maxsize=16)
def _store_all_plan(L: int) -> tuple:
    """The store-all sequence as :func:`_plan` normalizes it (a tuple of ``(str, int)``)."""
    return tuple(store_all_ops(L))


def _run_store_all_multi(fns: list, x: torch.Tensor, device, input_grad: bool, clock: Callable[[], float],
                         sync: bool, info: "_StageInfo") -> RuntimeResult:
    """:func:`execute` of the store-all sequence on multi-tensor stages (resident tensors) without holds
    (``hold=False``): every stage reads the outputs of the stages before it with
    their graphs, each resident value is dropped after its last reader's forward, and one backward
    call from the loss runs every B, as plain autograd over the same stages does (which it is: the
    same operations in the same order, the gradients bit-identical to ``loss_fn(model(x)).backward()``).
    The general loop runs one backward call per stage, since a resident tensor's gradient is handed
    to its producer's B by hand (:mod:`models.resident`); each call's start cost NASNet-A's store-all
    (63 stages) 8% over autograd's step on a CPU. Memory: autograd's own freeing, at most the held
    run's (the chain's) after and during every operation; on NASNet-A 0.7% below it at the peak (the
    a^l tensors that no backward saves, which the chain keeps with abar^l), equal on the Transformer
    and the Llama-style stack. Not for measured runs, nor with holds (``hold=True``: paper 004's model
    operation by operation; a set of stages: runs timed against the chain, whose times are the
    general loop's) or a parameter shared by two stages: those take the general loop."""
    cuda = torch.device(device).type == "cuda"
    loss_value: Any = float("nan")
    n = len(fns)
    last: dict = {}                  # resident tensor -> the last stage that reads it
    for l, names in enumerate(info.r_in, start=1):
        for v in names:
            last[v] = l
    gone = [[v for v, r in last.items() if r == l] for l in range(1, n + 1)]

    def run() -> None:
        nonlocal loss_value
        x0 = x.detach().clone()
        store: dict = {}
        if info.src_res:
            store[info.src_res[0]] = _leaf(x0, input_grad)
            a: tuple = ()
        else:
            a = (_leaf(x0, input_grad),)
        del x0
        for l in range(1, n + 1):
            out = fns[l - 1](*a, *[store[v] for v in info.r_in[l - 1]])
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            nr = len(info.r_out[l - 1])
            if nr:
                store.update(zip(info.r_out[l - 1], out[len(out) - nr:]))
                out = out[:len(out) - nr]
            for v in gone[l - 1]:
                store.pop(v, None)
            a = out
            del out
        loss = a[0]
        del a
        loss_value = loss.detach() if cuda else float(loss.detach())
        if loss.requires_grad:
            engine_backward((loss,), (torch.ones((), device=device),))
        del loss
        store.clear()

    elapsed = _run_timed(run, None, device, clock, sync=sync)
    if cuda and not sync:
        return RuntimeResult(loss=float("nan"), time=float("nan"), loss_tensor=loss_value)
    return RuntimeResult(loss=float(loss_value), time=elapsed)


def _tracker_for(fns: Sequence[Callable], device):
    """The memory tracker of an executor's measured run (:func:`models.memory.memory_tracker`), the
    stages' parameters (the loss stage's too: a head folded into it has some) given zero ``.grad``
    buffers first, so that the persistent weight gradients stay out of the activation figures."""
    from .memory import memory_tracker

    for s in fns:
        if isinstance(s, torch.nn.Module):
            for p in s.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
    return memory_tracker(device)


def _run_timed(run: Callable[[], None], tracker, device, clock: Callable[[], float], sync: bool = True) -> float:
    """Seconds of ``run()`` on ``clock``, inside ``tracker``'s window when there is one, up to the end
    of its work on a CUDA device (a synchronize): the executors' whole-sequence time. ``sync=False``:
    no synchronize (the seconds are then only those to queue the work)."""
    t0 = clock()
    if tracker is not None:
        with tracker:
            run()
    else:
        run()
    if sync and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return clock() - t0


class _Seed(torch.autograd.Function):
    """An empty root (no storage) whose backward hands the gradients it was given to the outputs'
    graphs."""

    @staticmethod
    def forward(ctx, holder, *outs):
        ctx.holder = holder
        return outs[0].new_empty((0,))

    @staticmethod
    def backward(ctx, _grad):
        return (None, *ctx.holder.pop())


def _backward_from(pairs: list, exact: bool = True, direct: bool = False, scalars: bool = True) -> None:
    """``torch.autograd.backward(outputs, gradients)`` for ``pairs`` [(output, its gradient), ...],
    emptied, without the call's arguments holding the outputs and gradients until the whole call
    returns: whoever else holds them decides when they go (a fused group's ``held`` and
    ``held_delta`` let a^l and delta^l go when B^l ends, not when B^k, the group's last, does). The
    root and its gradient are empty tensors: the call itself holds no byte.

    ``exact=False`` (a run whose memory is not measured): where every output and gradient has at
    most one element (a group that starts at the loss stage, as store-all's one group does), the call
    is made directly. It then holds those scalars until it returns (8 bytes on a CPU, two blocks of
    512 bytes on a GPU; the model frees them after B^{L+1}), and saves the empty root, a Python
    autograd function: about 35 us a call alone, 6% of a store-all step of 40 tiny stages on this
    CPU (``benchmarks/bench_executor_overhead.py``). Measured runs keep the root, so that their
    bytes are the model's exactly. ``direct`` (with ``exact=False``): the direct call for any
    outputs, where the caller has found it safe (:class:`Holds`). ``scalars=False``: not the direct
    call for scalars unless ``direct`` (a free run that knows its headroom, :func:`free_holds`)."""
    outs = [o for o, _ in pairs]
    if not exact and (direct or (scalars and _scalars(pairs))):
        grads = [g for _, g in pairs]
        pairs.clear()
        engine_backward(outs, grads)
        return
    root = _Seed.apply([[g for _, g in pairs]], *outs)
    pairs.clear()
    del outs
    engine_backward((root,), (root.new_empty((0,)),))


_PLANS: dict[tuple, tuple[tuple, set[int], set[int], set[int]]] = {}


@dataclass
class _StageInfo:
    """What :func:`execute` reads from the stage objects: ``shared``, pairs (i, j), i < j (1-based
    stages, L+1 = the loss) of stages that use a common parameter (GPT-2's language-model head reads
    the token embedding's weight); ``r_in``/``r_out``, the resident tensors each stage reads/computes
    (multi-tensor cuts, :func:`models.graph.multi_stage_modules`); ``src_res``, a resident tensor no
    stage computes (the input); ``multi``, any resident tensor at all."""

    shared: frozenset
    r_in: list
    r_out: list
    src_res: list
    multi: bool
    refs: list         # weak references to the stage objects: a cached entry is used only while
                       # they are alive and the same (ids can be reused); the cache keeps no model alive
    fast_ops: Any = None   # the store-all sequence (the _plan tuple itself) once a run has shown that
                           # every F_all^l, l >= 2, joins abar^{l-1} but at fast_splits (:func:`_run_store_all`)
    fast_splits: tuple = ()
    r_free: list = field(default_factory=list)   # per stage: its resident outputs no backward saves
                                                 # (``resident_free``), let go after their last reader's forward
    _drops: dict = field(default_factory=dict)   # sequence -> :func:`_drops` (a timing loop runs one many times)

    def drops_of(self, ops: tuple) -> dict:
        """:func:`_drops` of the normalized sequence ``ops`` on these stages, cached (126 us a call on
        NASNet-A's 63 stages)."""
        got = self._drops.get(ops)
        if got is None:
            if len(self._drops) >= 16:
                self._drops.clear()
            got = self._drops[ops] = _drops(ops, self.r_in, self.r_free)
        return got


_INFO: dict[tuple, _StageInfo] = {}


def _stage_info(fns: Sequence[Callable]) -> _StageInfo:
    """:class:`_StageInfo` of a list of stage objects, cached per list (a timing loop executes the same
    stages many times)."""
    key = tuple(id(f) for f in fns)
    got = _INFO.get(key)
    if got is not None and all(r() is f for r, f in zip(got.refs, fns)):
        return got
    owner: dict[int, int] = {}
    pairs = set()
    for i, f in enumerate(fns, start=1):
        if isinstance(f, torch.nn.Module):
            for p in f.parameters():
                if p.requires_grad:
                    j = owner.setdefault(id(p), i)
                    if j != i:
                        pairs.add((j, i))
    r_in = [list(getattr(f, "resident_in", None) or []) for f in fns]
    r_out = [list(getattr(f, "resident_out", None) or []) for f in fns]
    r_free = [set(getattr(f, "resident_free", None) or []) & set(names) for f, names in zip(fns, r_out)]
    produced = {v for names in r_out for v in names}
    src_res = sorted({v for names in r_in for v in names} - produced, key=str)
    if len(src_res) > 1:
        raise ValueError(f"execute: resident tensors {src_res} are read but no stage computes them "
                         "(only the input may be)")
    try:
        refs = [weakref.ref(f) for f in fns]
    except TypeError:                  # an object without weak references: not cached
        refs = None
    got = _StageInfo(frozenset(pairs), r_in, r_out, src_res, bool(produced or src_res), refs or [], r_free=r_free)
    if refs is not None:
        if len(_INFO) >= 16:
            _INFO.clear()
        _INFO[key] = got
    return got


def _plan(ops, fuse_backward: bool, shared: frozenset = frozenset()) -> tuple[tuple, set[int], set[int], set[int]]:
    """What :func:`execute` derives from a sequence before running it: the sequence as a tuple of
    ``(str, int)``, the stages run more than once (their RNG state is replayed), the joined F_all
    positions (:func:`_joined_forwards`, then :func:`_split_shared`) and the stages some replay of
    which does not follow a forward of the stage before (:class:`_Rng`'s ``starts``). Cached per
    sequence, since a timing loop executes the same sequence many times (a few dozen entries)."""
    try:
        key = (tuple(ops), fuse_backward, shared)
        got = _PLANS.get(key)
    except TypeError:                  # unhashable entries (lists from a JSON file)
        key, got = None, None
    if got is None:
        norm = tuple((str(o), int(l)) for o, l in ops)
        seen: set[int] = set()
        replayed: set[int] = set()
        starts: set[int] = set()
        prev = None                      # the stage the operation before replayed, if it was a replay
        for op, l in norm:
            if op != "B":
                again = l in seen
                if again:
                    replayed.add(l)
                    if prev != l - 1:
                        starts.add(l)
                seen.add(l)
                prev = l if again else None
            else:
                prev = None
        join = _split_shared(norm, _joined_forwards(norm), shared) if fuse_backward else set()
        got = (norm, replayed, join, starts)
        if key is not None:
            if len(_PLANS) >= 64:
                _PLANS.clear()
            _PLANS[key] = got
    return got


def _split_shared(ops: Sequence[tuple[str, int]], join: set[int], shared: frozenset) -> set[int]:
    """``join`` less the junctions that would put two stages sharing a parameter in one backward call.

    Within one call the engine accumulates a shared parameter's gradient contributions in its own
    buffer and hands them to ``.grad`` only when the last use has been back-propagated: the buffer
    (GPT-2: the embedding-sized gradient of the tied weight) then lives from the first B to the last,
    memory the per-stage model does not have (measured: +3.2 KB through the whole backward of a tiny
    GPT-2, +80% at B^1). Separate calls accumulate into ``.grad`` at the end of each, as the model
    assumes. Walking each fused group from its top B down, the junction above a stage that shares a
    parameter with a stage already in the group is not joined: that stage starts a new group. O(len(ops))
    plus the pairs."""
    if not shared or not join:
        return join
    partners: dict[int, set[int]] = {}
    for i, j in shared:
        partners.setdefault(i, set()).add(j)
        partners.setdefault(j, set()).add(i)
    last: dict[int, int] = {}
    kept = set(join)
    group: set[int] = set()
    prev_b = None
    for p, (op, l) in enumerate(ops):
        if op == "F_all":
            last[l] = p
        elif op == "B":
            if prev_b is not None and prev_b == l + 1 and last.get(l + 1) in kept:
                if partners.get(l, set()) & group:
                    kept.discard(last[l + 1])          # B^{l+1} and B^l in separate calls
                    group = {l}
                else:
                    group.add(l)
            else:
                group = {l}
            prev_b = l
        else:
            prev_b = None
    return kept


_Edge = torch.autograd.graph.GradientEdge
_edge = torch.autograd.graph.get_gradient_edge


def _roots(outs: tuple, d: tuple, names: list, routs: tuple, states: dict) -> tuple[list, list]:
    """The roots and gradients of a stage's backward call: a^l's tensors that have a gradient in
    ``d`` (delta^l), then its resident outputs ``routs`` (``names``; tensors or gradient edges) whose
    gradient a reader has made (``states``, :mod:`models.resident`)."""
    ts = [o for o, g in zip(outs, d) if g is not None and _needs_grad(o)]
    gs = [g for o, g in zip(outs, d) if g is not None and _needs_grad(o)]
    for v, o in zip(names, routs):
        st = states.get(v)
        if st is not None and st.grad is not None and (_needs_grad(o) or isinstance(o, _Edge)):
            ts.append(o)
            gs.append(st.grad)
    return ts, gs


def _drops(ops: Sequence[tuple[str, int]], r_in: list, r_free: list) -> dict[int, list]:
    """``{position: [resident values let go after that operation]}``: each value of ``r_free[k-1]``
    (stage k's outputs no backward saves) after the positions :func:`models.remat.value_drops` gives
    for its readers (the stages whose ``r_in`` holds it), as the simulator charges them
    (:attr:`models.chain.Chain.resident_values`)."""
    out: dict[int, list] = {}
    for k, names in enumerate(r_free, start=1):
        for v in sorted(names, key=str):
            readers = [l for l, ins in enumerate(r_in, start=1) if v in ins]
            for p in value_drops(ops, k, readers):
                out.setdefault(p, []).append(v)
    return out


def frozen_prefix(stages: Sequence[Callable]) -> int:
    """How many leading stages hold no parameter that requires grad (a frozen backbone under a trained
    head; a stage that is not an ``nn.Module`` counts as trained). Where the network input needs no
    gradient either (``input_grad=False``), nothing needs a gradient below the first trained stage, and
    plain autograd records no graph there: the stages 1..k run without one in :func:`execute` and
    :func:`models.profiler.profile_chain` alike (their abar^l is a^l, their B^l does nothing, delta^l
    is not computed for l < k + 1), and stage k + 1 reads a^k without a gradient. Before, each stage's
    input was made a leaf that requires grad: the frozen stages recorded graphs and their B^l computed
    input gradients nobody reads. Each frozen a^l is still held until its (empty) B^l in paper 004's
    model, as in the executor: :meth:`models.graph.LinearizedModel.fold_frozen_prefix` folds such
    stages into the first trained one, where autograd's memory is reached."""
    k = 0
    for f in stages:
        if not isinstance(f, torch.nn.Module) or any(p.requires_grad for p in f.parameters()):
            break
        k += 1
    return k


def _leaf(t: torch.Tensor, grad: bool) -> torch.Tensor:
    """A detached copy of a stage input (sharing its storage) that requires grad when it is a float
    tensor and ``grad``."""
    if not isinstance(t, torch.Tensor):         # a Python value crossing a cut (a size): passed as is
        return t
    t = t.detach()
    if grad and t.is_floating_point():
        t.requires_grad_(True)
    return t


def _needs_grad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


def _joined_forwards(ops: Sequence[tuple[str, int]]) -> set[int]:
    """Positions of the F_all^l operations that may take abar^{l-1}'s output with its graph (see
    ``fuse_backward`` of :func:`execute`): abar^{l-1} is in memory when F_all^l runs, F_all^{l-1} does
    not run again before B^l (it would replace the graph joined to), and B^{l-1} is the operation right
    after B^l. O(len(ops))."""
    present: set[int] = set()
    last: dict[int, int] = {}        # stage -> position of its latest F_all
    candidate: set[int] = set()
    join: set[int] = set()
    for p, (op, l) in enumerate(ops):
        if op == "F_all":
            if l + 1 in present:
                candidate.discard(last[l + 1])
            if l - 1 in present and l > 1:
                candidate.add(p)
            present.add(l)
            last[l] = p
        elif op == "B":
            if l in present and last[l] in candidate and p + 1 < len(ops) and tuple(ops[p + 1]) == ("B", l - 1):
                join.add(last[l])
            present.discard(l)
    return join


@dataclass
class InContextTimes:
    """Per-stage times measured inside whole store-all runs (:func:`time_in_context`), seconds:
    ``uf[l]``, ``ub[l]`` for l = 1..L+1 (index 0 unused, 0), the median over ``runs`` runs; ``spread``:
    per stage, (max - min) / median over the runs of F and B together; ``run_times``: the whole
    sequences' times, timed as the executor runs them (no per-operation timers)."""

    uf: list[float]
    ub: list[float]
    runs: int
    spread: list[float]
    run_times: list[float]
    overhead: float
    turn_per_op: list = field(default_factory=list)     # op_times of runs of models.remat.turn_ops (turns=True)
    turn_run_times: list = field(default_factory=list)  # whole untimed runs of it

    @classmethod
    def from_runs(cls, per_op: Sequence[Sequence[float]], run_times: Sequence[float], L: int) -> "InContextTimes":
        """From the ``op_times`` of store-all runs (:func:`store_all_ops` order) and the times of whole
        untimed runs: the median per operation, and ``overhead`` = median run time - their sum."""
        ops = store_all_ops(L)
        med = [statistics.median(col) for col in zip(*per_op)]
        uf, ub, spread = [0.0] * (L + 2), [0.0] * (L + 2), [0.0] * (L + 2)
        for k, (op, l) in enumerate(ops):
            (uf if op == "F_all" else ub)[l] = med[k]
        for l in range(1, L + 2):
            tot = [r[l - 1] + r[2 * (L + 1) - l] for r in per_op]      # F_all^l is op l-1, B^l op 2(L+1)-l
            m = statistics.median(tot)
            spread[l] = (max(tot) - min(tot)) / m if m > 0 else 0.0
        return cls(uf=uf, ub=ub, runs=len(per_op), spread=spread, run_times=list(run_times),
                   overhead=statistics.median(run_times) - sum(med))

    def calibrated(self) -> tuple[list[float], list[float], float]:
        """``(uf, ub, factor)``: the times scaled by one factor so that they add up to the median whole
        run (the executor's own work between operations, and interference the per-operation medians
        leave out, spread over the stages in proportion to their times)."""
        total = sum(self.uf) + sum(self.ub)
        factor = statistics.median(self.run_times) / total if total > 0 else 1.0
        return [v * factor for v in self.uf], [v * factor for v in self.ub], factor

    def turn_model(self, per_op: Sequence[Sequence[float]], run_times: Sequence[float]) -> tuple[list[float], float]:
        """``(uf_ng, u_turn)`` (:attr:`Chain.uf_ng`, :attr:`Chain.u_turn`) from the ``op_times`` of runs of
        :func:`models.remat.turn_ops` (a warm-up sweep without a tape, every stage's second no-grad run,
        then each stage recomputed with a tape right before its backward step: L turns) and the times of
        whole untimed runs of it, taken in the same rounds as this store-all's: ``uf_ng[l]`` is the median
        in-context time of stage l's no-grad run at :func:`models.remat.turn_ops_no_grad`'s position,
        scaled by :meth:`calibrated`'s factor (the loss stage keeps ``uf``); ``u_turn`` is what the median
        whole run takes beyond its operations' calibrated times (the warm-up sweep's included, as
        measured), per turn (at least 0). On the CPU a repeated no-grad forward took 0.2-0.95 of F_all
        (the least on tiny stages, whose F_all is mostly building the tape) and a turn 0-180 us
        (``benchmarks/time_model_turns.py``, ``runtime_check``; the turn cost is the least steady of the
        two)."""
        uf, ub, factor = self.calibrated()
        L = len(uf) - 2
        ops = turn_ops(L)
        med = [statistics.median(col) for col in zip(*per_op)]
        if len(med) != len(ops):
            raise ValueError(f"turn_model: {len(med)} operation times for a sequence of {len(ops)} operations")
        uf_ng = list(uf)
        at = turn_ops_no_grad(L)
        for l, k in at.items():
            uf_ng[l] = med[k] * factor
        warm_up = sum(med[k] for k in range(L) if k not in at.values()) * factor
        body = sum(uf_ng[1:L + 1]) + sum(uf[1:]) + sum(ub[1:]) + warm_up
        u_turn = max(0.0, (statistics.median(run_times) - body) / L) if L > 0 else 0.0
        return uf_ng, u_turn


def whole_runs_hold(stages: Sequence[Callable], loss_fn: Callable) -> bool:
    """``execute``'s ``hold`` for whole runs timed as executed plans are timed (the profile's
    calibration, ``memplan run``'s re-timing): held on multi-tensor cuts (no fused groups: no junction
    hooks; without holds a B of its own is called through an empty root, and store-all takes plain
    autograd's single call, where every other plan takes the general loop), not on single-tensor cuts
    (see :func:`time_in_context`)."""
    return bool(_stage_info(list(stages) + [loss_fn]).multi)


def time_in_context(stages: Sequence[Callable], loss_fn: Callable, x: torch.Tensor, *, runs: int = 5,
                    warmup: int = 1, device=None, input_grad: bool = True,
                    clear_grads: Callable[[], None] | None = None,
                    clock: Callable[[], float] = time.perf_counter, turns: bool = False,
                    budget: float = 0.0, target: float = 0.02, max_runs: int = 50) -> InContextTimes:
    """Time every F_all^l and B^l as the executor really runs them: inside whole store-all sequences,
    back to back, with timers between the operations only (see ``op_times`` of :func:`execute`).

    Isolated timings (one operation after a synchronize, on a fresh copy of its input) miss what
    the sequence changes: caches warm from the previous operation, the allocator's state, and on a
    GPU the launch latency that a busy stream hides (a per-operation synchronize makes every small
    kernel pay it, which made the ResNets' predicted times 30-61% too high on an H200). ``warmup``
    runs first, then ``runs`` timed sequences; the median per operation is kept. ``overhead`` is what
    the executor spends outside the operations (median run time without timers minus the sum of the
    medians), reported, not added to the chain. ``clear_grads`` is called before each run (the
    default sets every parameter's ``.grad`` to None, as a training step after ``zero_grad``).
    ``turns``: each run also runs :func:`models.remat.turn_ops`, timed per operation and whole, for
    :meth:`InContextTimes.turn_model` (``turn_per_op``, ``turn_run_times``). On single-tensor cuts the
    whole runs hold nothing (``hold=False``): executed plans are timed holding only at their peak (a
    few hooks, :func:`holds_at_peak`) or not at all (``memplan run`` on a profile with the free
    record), and a measured run to find that peak cannot run compiled stages (the dispatch-mode
    tracker), so the chain's times leave out the hook at every junction that a fully held run pays,
    as the timed plans do, less their few. On multi-tensor cuts (no fused groups, so no junction
    hooks) they hold (``hold=True``), as those plans are timed: without holds a B of its own is called
    through an empty root, and store-all takes plain autograd's one call
    (:func:`_run_store_all_multi`), where every other plan takes the general loop; calibrated on
    that, a 2-layer Llama's chain was 8-9% too fast for every plan but store-all.

    ``budget`` (seconds, default 0: exactly ``runs``): after the ``runs`` timed rounds, more rounds
    while the 95% interval of a whole run's median (store-all's, and turn_ops' with ``turns``,
    :func:`models.measure.median_interval`) is wider than ``target`` of it, until the rounds have
    taken ``budget`` seconds or ``max_runs`` rounds have run. Three runs had left a tiny chain's
    profile off by 9-23% on a shared CPU (a 2-layer Llama's three store-all runs: 15.4, 17.9 and
    18.0 ms); a 1-2 s step still takes the ``runs`` asked for.
    """
    device = device if device is not None else x.device
    ops = store_all_ops(len(stages))
    params = [p for f in list(stages) + [loss_fn] if isinstance(f, torch.nn.Module) for p in f.parameters()]

    def clear() -> None:
        if clear_grads is not None:
            clear_grads()
        else:
            for p in params:
                p.grad = None

    # (sequence, its per-operation times, its whole runs' times): store-all, and turn_ops with ``turns``
    kinds = [(ops, [], [])] + ([(turn_ops(len(stages)), [], [])] if turns else [])
    whole_hold = whole_runs_hold(stages, loss_fn)

    def settled() -> bool:
        from .measure import median_interval

        for _, _, whole in kinds:
            if len(whole) < 6:                 # fewer: no 95% interval of the median (min and max cover less)
                return False
            m = statistics.median(whole)
            lo, hi = median_interval(whole)
            if not (m > 0 and (hi - lo) / m <= target):
                return False
        return True

    warm = max(0, warmup)
    least = warm + max(1, runs)
    i = 0
    t_timed = time.perf_counter()         # set again when the warm-up rounds are over (i == warm < least)
    while True:
        if i >= least and (time.perf_counter() - t_timed >= budget or i - warm >= max_runs or settled()):
            break
        if i == warm:
            t_timed = time.perf_counter()
        for seq, per_op, whole in kinds:
            clear()
            times: list[float] = []
            execute(stages, loss_fn, x, seq, device=device, input_grad=input_grad, op_times=times, clock=clock,
                    fuse_backward=False)
            clear()
            t = execute(stages, loss_fn, x, seq, device=device, input_grad=input_grad, clock=clock,
                        hold=whole_hold).time
            if i >= warmup:
                per_op.append(times)
                whole.append(t)
        i += 1
    ic = InContextTimes.from_runs(kinds[0][1], kinds[0][2], len(stages))
    if turns:
        ic.turn_per_op, ic.turn_run_times = kinds[1][1], kinds[1][2]
    return ic
