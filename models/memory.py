"""Memory measurement of PyTorch code: exact live-tensor bytes on CPU (:class:`TensorMemoryTracker`, a
``TorchDispatchMode``) and the caching allocator's statistics on CUDA (:class:`CudaMemoryTracker`);
:func:`memory_tracker` picks one for a device. How each counts is described in :mod:`models.profiler`,
whose measurements, and the runtime executor's (:mod:`models.runtime`), are taken with them.
"""
from __future__ import annotations

import contextlib
import gc
import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class TensorMemoryTracker(TorchDispatchMode):
    """Exact live-tensor bytes on CPU, by intercepting every ATen operation (see the module docstring).

    ``current`` is the number of bytes of storages created while the tracker was active and still
    alive; ``peak`` its maximum since the last :meth:`reset_peak`. Storages that existed before the
    tracker started are never counted, nor are views of them.

    >>> with TensorMemoryTracker() as tr:
    ...     x = torch.ones(1000)            # 4000 bytes
    ...     y = x * 2                       # 4000 more
    ...     del x
    >>> tr.current, tr.peak
    (4000, 8000)
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, list] = {}    # storage data_ptr -> [nbytes, number of live weakrefs, weakrefs]
        self.current = 0
        self.peak = 0

    # public helpers ------------------------------------------------------------------------------
    def reset_peak(self) -> None:
        self.peak = self.current

    def is_tracked(self, t: torch.Tensor) -> bool:
        return _key(t) in self._live

    def sync(self) -> None:
        pass

    # dispatch -------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = None
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            k = _key(t)
            if k == 0:
                continue
            if k in self._live:
                self._add_ref(k, t)
                continue
            if inputs is None:
                inputs = {_key(a) for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
            if k in inputs:       # a view or in-place result of a storage we do not track
                continue
            nbytes = t.untyped_storage().nbytes()
            self._live[k] = [nbytes, 0, []]
            self.current += nbytes
            if self.current > self.peak:
                self.peak = self.current
            self._add_ref(k, t)
        return out

    def _add_ref(self, k: int, t: torch.Tensor) -> None:
        entry = self._live[k]

        def gone(_ref, k=k, entry=entry):
            entry[1] -= 1
            if entry[1] == 0 and self._live.get(k) is entry:
                del self._live[k]
                self.current -= entry[0]

        entry[1] += 1
        entry[2].append(weakref.ref(t, gone))


def _key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


class CudaMemoryTracker:
    """The same interface as :class:`TensorMemoryTracker`, from the CUDA caching allocator's statistics:
    ``current`` and ``peak`` are relative to the allocated bytes when the tracker was entered."""

    def __init__(self, device=None) -> None:
        self.device = device
        self.base = 0

    def __enter__(self):
        # the cyclic garbage collector waits until the window closes: garbage in reference cycles (an
        # earlier model, its hooks) collected during the measured run would lower memory_allocated below
        # the base and the peak with it (a 10 MiB sequence measured 4.4 MiB on an H100 after other
        # tests in the same process). A full gc.collect() here instead took 0.25 s per window once
        # Inductor had compiled a model (its objects fill the heap): 55 s of GPT-2 small's profile.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        torch.cuda.synchronize(self.device)
        self.base = torch.cuda.memory_allocated(self.device)
        self.base_requested = torch.cuda.memory_stats(self.device).get("requested_bytes.all.current", 0)
        torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc):
        try:
            torch.cuda.synchronize(self.device)
        finally:
            if self._gc_was_enabled:
                gc.enable()
        return False

    @property
    def current(self) -> int:
        return torch.cuda.memory_allocated(self.device) - self.base

    @property
    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device) - self.base

    @property
    def requested_peak(self) -> int:
        """The peak of the bytes callers asked for (the allocator's ``requested_bytes``), above the
        base: unlike ``peak`` it leaves out the 512-byte rounding and a cached block's unsplit rest
        (under 1 MiB), the latter depending on what the cache held before. An H100 measured one
        ResNet-50 plan at 729,164,288 and 729,950,720 allocated bytes in two windows. Raises
        RuntimeError where this build of torch keeps no ``requested_bytes`` statistic (a missing
        statistic read as 0 would let every step fit any budget)."""
        stats = torch.cuda.memory_stats(self.device)
        if "requested_bytes.all.peak" not in stats:
            raise RuntimeError("this build of torch's CUDA caching allocator keeps no requested_bytes "
                               "statistic: measure the allocated peak instead (cuda_peak='allocated')")
        return int(stats["requested_bytes.all.peak"] - self.base_requested)

    def reset_peak(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def is_tracked(self, t: torch.Tensor) -> bool:  # pragma: no cover - CUDA only
        return True


#: how a CPU step's memory is measured (:func:`memory_tracker`; :func:`models.profiler.profile_chain`'s
#: ``memory``): the dispatch-mode tracker, or c10's allocator events through PyTorch's profiler
MEMORY_METHODS = ("dispatch", "profiler")


def memory_tracker(device, method: str = "dispatch") -> Any:
    """:class:`CudaMemoryTracker` for CUDA; for CPU tensors :class:`TensorMemoryTracker` (``method``
    ``"dispatch"``, the default: tensors' storages as the operations dispatched through PyTorch's Python
    dispatcher make them, not a kernel's scratch nor compiled code's buffers) or :class:`ProfilerTracker`
    (``"profiler"``: c10's allocator events, every CPU allocation; ``../shared/guide/MEASURING.md``)."""
    if method not in MEMORY_METHODS:
        raise ValueError(f"memory_tracker: method={method!r}; choose from {', '.join(MEMORY_METHODS)}")
    dev = torch.device(device)
    if dev.type == "cuda":
        return CudaMemoryTracker(dev)
    return ProfilerTracker() if method == "profiler" else TensorMemoryTracker()


def step_peak(fn: Callable[[], Any], params, device, method: str = "dispatch") -> float:
    """Peak bytes of ``fn()`` (one training step) above what existed before, by :func:`memory_tracker`
    (``method``: its CPU method), with the weight gradients of ``params`` allocated (zeroed) before the window, as the runtime
    executor has them: persistent gradients stay out, so that a plain autograd step and an executed
    plan are measured the same way."""
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    with memory_tracker(device, method) as tr:
        fn()
        tr.sync()
        return float(tr.peak)


def grad_input(x: torch.Tensor) -> torch.Tensor:
    """A copy of a step's input for a plain autograd step: a float input requires grad, as an
    executed chain's B^1 computes delta^0 for it (token ids cannot)."""
    xi = x.detach().clone()
    if xi.is_floating_point():
        xi.requires_grad_(True)
    return xi


def storage_bytes(t) -> int:
    """Bytes of the distinct storages behind the tensors in ``t`` (a tensor or a structure of them)."""
    seen: dict[int, int] = {}
    for x in tree_leaves(t):
        if isinstance(x, torch.Tensor):
            seen[_key(x)] = x.untyped_storage().nbytes()
    return int(sum(seen.values()))




def saved_storages(fn: Callable[[], Any]) -> tuple[Any, dict[int, int]]:
    """Run ``fn()`` with saved-tensor hooks and return (its result, ``{storage key: bytes}`` of the
    distinct storages that autograd saved for the backward pass).

    The pack hook keeps a detached alias of each saved tensor (same storage, same values, so a
    backward through the result still works): packing the tensor itself makes every output an
    operation saves (ReLU, sigmoid, ...) refer to its own graph node, a reference cycle that is never
    freed, so each call leaked the graph's saved tensors (on a CPU profile of ResNet-50 at batch 8,
    gigabytes over the stages)."""
    seen: dict[int, int] = {}

    def pack(t):
        k = _key(t)
        if k:
            seen[k] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, seen


def _memory_deltas(prof) -> list[int]:
    """The byte deltas of every ``[memory]`` event of an ended ``torch.profiler.profile`` (made with
    ``profile_memory=True``), allocations positive and frees negative, in time order.

    ``prof.profiler.kineto_results`` is a private attribute; this is its only use in memplan
    (checked with torch 2.13.0, CPU wheel; ``tests/test_memory_methods.py`` holds the hand case)."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    return [int(e.nbytes()) for e in events]


def profiler_peak(fn) -> tuple[Any, int, int]:
    """Run ``fn()`` under PyTorch's profiler with memory profiling and return ``(its result, peak,
    final)``: the running maximum and the last value of the bytes allocated minus freed through c10's
    CPU allocator since the profile started (every ``[memory]`` event in time order). Unlike
    :class:`TensorMemoryTracker`, this sees allocations that do not pass through the Python-visible
    dispatcher: compiled code (``torch.compile``'s Inductor kernels allocate their buffers directly)
    and kernels' scratch buffers. Same definition as the CUDA tracker's ``max_memory_allocated() -
    base``: start it after what should not count exists (parameters, their gradients); a tensor made
    before and freed inside counts negative. Profiling slows the step: time steps in separate runs.
    It is one window of :class:`ProfilerTracker`, whose events :func:`_memory_deltas` reads.
    """
    with ProfilerTracker() as tr:
        out = fn()
    return out, tr.peak, tr.current


@contextlib.contextmanager
def _native_stderr_quiet():
    """File descriptor 2 to /dev/null for the block: Kineto (torch 2.13) writes a "USDT: ...
    profiler_start" and a "profiler_stop" line to the process's stderr at every profiler start and
    stop, below Python (``KINETO_LOG_LEVEL`` does not silence them); a measurement opens and closes one
    per window, and ``memplan budget`` printed dozens of them between its own lines."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):      # no usable fd 2 (an embedding host): leave it
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class ProfilerTracker:
    """The interface of :class:`TensorMemoryTracker` (``current``, ``peak``, :meth:`reset_peak`,
    :meth:`sync`, :meth:`is_tracked`) measured as :func:`profiler_peak` measures: c10's CPU allocator
    events, so it sees compiled code, which runs eagerly (or refuses to run) under a dispatch mode:
    ``torch.compile`` does not run its compiled frames while a non-infrastructure
    ``TorchDispatchMode`` is active.

    The events are read when the profile ends, so the block is cut into windows: each :meth:`sync`
    ends the running profile, adds its events to ``current`` and ``peak`` and starts the next one
    (code between two windows, the tracker's own, allocates nothing). ``current`` is the bytes
    allocated minus freed since the block was entered; a tensor made before and freed inside counts
    negative, as with the CUDA tracker. :meth:`is_tracked` cannot see which storage an event made:
    a tensor is taken as allocated inside unless its storage is one of ``existing`` (the stage's
    input, parameters and buffers: what a stage's output can alias).

    >>> with ProfilerTracker() as tr:
    ...     x = torch.ones(1000)            # 4000 bytes
    ...     tr.sync()
    ...     y = x.clone()                   # 4000 more
    ...     del x
    >>> tr.current, tr.peak
    (4000, 8000)
    """

    def __init__(self, existing=()) -> None:
        self._existing = {_key(t) for t in tree_leaves(existing) if isinstance(t, torch.Tensor)}
        self.current = 0
        self.peak = 0
        self._prof = None

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _native_stderr_quiet():
            self._prof.__enter__()

    def _fold(self) -> None:
        prof, self._prof = self._prof, None
        with _native_stderr_quiet():
            prof.__exit__(None, None, None)
        for d in _memory_deltas(prof):
            self.current += d
            self.peak = max(self.peak, self.current)

    def __enter__(self):
        self.current = self.peak = 0
        self._start()
        return self

    def __exit__(self, *exc):
        if self._prof is not None:
            self._fold()
        return False

    def sync(self) -> None:
        self._fold()
        self._start()

    def reset_peak(self) -> None:
        self.peak = self.current

    def is_tracked(self, t: torch.Tensor) -> bool:
        return _key(t) not in self._existing
