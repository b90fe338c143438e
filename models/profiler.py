"""Parameter estimation of a chain of PyTorch stages (paper 004, section 5.1).

For every stage l = 1..L and for the loss L+1, on a sample input a^{l-1}_sample:

- ``u_f^l``: time of F_all^l (forward with autograd recording), ``u_b^l``: time of B^l (backward of the
  stage's output with a random delta^l), each the **median** of ``repeats`` runs after one warm-up run
  (the paper measures three times and keeps the median);
- ``omega_a^l``: bytes of the storage of the stage output (what F_ck / F_none keep);
- ``omega_abar^l``: bytes still alive after F_all^l that were allocated by it: the output plus everything
  autograd saved for B^l (the input a^{l-1} and the parameters existed before and are not counted: the
  simulator stores a^{l-1} on its own, weights are not activations);
- ``omega_delta^{l-1}``: bytes of the gradient with respect to the stage input produced by B^l;
- ``o_f^l``: peak during the forward beyond its inputs and outputs: max(peak of F_all - omega_abar,
  peak of the no-grad forward - omega_a). The papers' model has one o_f for F_all and F_ck, the larger
  of the two (for F_all it over-estimates by the difference, e.g. up to ~30% during a transformer
  block's F_all on CPU); each forward's own is kept too, ``o_f_all^l`` and ``o_f_ng^l``
  (:attr:`Chain.of_all`, :attr:`Chain.of_ng`), which the simulators charge and the solvers plan with;
- ``o_b^l``: peak during B^l beyond what was stored before it and beyond delta^{l-1};
- ``W^l``: bytes of the distinct parameters of the stage.

Timing
------
* **CPU**: ``time.perf_counter`` around the operation.
* **CUDA**: CUDA events recorded on the current stream around the operation, after a
  ``torch.cuda.synchronize`` (nothing else queued), read after another synchronize
  (:func:`_timed_runs`). The span from the first event to the last includes the host's launch time
  when the GPU waits for it, as when the stages run one after the other in training.

Memory measurement
------------------
* **CPU**: :class:`TensorMemoryTracker`, a ``TorchDispatchMode`` that sees every ATen operation
  (forward and backward: the autograd engine runs the backward of CPU tensors in the calling thread
  with the mode active), records each *new* tensor storage an operation returns (a storage that is
  not one of the operation's inputs and not already tracked) with its exact byte size, and frees it
  when the last Python tensor object that refers to it is collected (weak references; PyTorch keeps
  the Python object of a tensor alive as long as C++ code, e.g. autograd's saved variables, holds the
  tensor). The counts are exact tensor bytes as seen by the dispatcher; they leave out allocator
  rounding and scratch buffers that kernels allocate internally without going through the dispatcher.
* **CUDA**: ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` (caching-allocator statistics,
  which include the allocator's 512-byte rounding), after a synchronize.

Host link (:func:`measure_host_link`, CUDA only): the bandwidth of copies between a pinned host buffer
and device memory in each direction, median of repeated copies timed with CUDA events; the papers'
offloading model has one bandwidth beta, :func:`host_link_platform` takes the slower direction.

Parameter gradients: before measuring, every parameter gets a zero ``.grad``; backward then adds into
it in place, so the transient gradient a stage produces counts in ``o_b`` while the persistent
gradient buffers (weights' memory, not activations) do not appear in the activation figures.
"""
from __future__ import annotations

import datetime as _dt
import math
import platform as _platform
import statistics
import subprocess
import time
from typing import Any, Callable, Sequence

import torch

from .chain import Chain, Platform
from .resident import fresh_start, mark_resident
from .runtime import autocast_blocks, autocast_dtype, engine_backward, frozen_prefix, under_uncached_autocast


# memory tracking lives in models.memory (the runtime executor uses it and the profiler uses the
# executor); these names stay importable from here
from .memory import (MEMORY_METHODS, CudaMemoryTracker, ProfilerTracker, TensorMemoryTracker,  # noqa: E402,F401
                     _key, memory_tracker, saved_storages, storage_bytes)


def saved_tensor_bytes(fn: Callable[[], Any], exclude: Sequence[torch.Tensor] = ()) -> tuple[Any, int]:
    """Run ``fn()`` with saved-tensor hooks and return (its result, bytes of the distinct storages that
    autograd saved for the backward pass, leaving out those of ``exclude``: inputs, parameters)."""
    skip = {_key(t) for t in exclude}
    out, seen = saved_storages(fn)
    return out, int(sum(b for k, b in seen.items() if k not in skip))


# ---------------------------------------------------------------------------------------- profiling
def _is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def _sync(device) -> None:
    if _is_cuda(device):
        torch.cuda.synchronize(device)


def _timed_runs(stage: Callable, x: torch.Tensor, input_grad: bool, delta: torch.Tensor | None, repeats: int,
                device) -> tuple[list[float], list[float]]:
    """``repeats`` timed runs of F_all (and of B when ``delta`` is given): lists of seconds.

    CPU: ``time.perf_counter``; CUDA: events on the current stream (see the module docstring). The
    caller has made one warm-up run."""
    tf, tb = [], []
    cuda = _is_cuda(device)
    for _ in range(max(1, repeats)):
        xi = _as_input(x, input_grad)
        _sync(device)
        if cuda:
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            out = stage(xi)
            e1.record()
            if delta is not None:
                engine_backward((out,), (delta,))
            e2.record()
            torch.cuda.synchronize(device)
            tf.append(e0.elapsed_time(e1) / 1e3)          # elapsed_time is in milliseconds
            tb.append(e1.elapsed_time(e2) / 1e3)
        else:
            t0 = time.perf_counter()
            out = stage(xi)
            t1 = time.perf_counter()
            if delta is not None:
                engine_backward((out,), (delta,))
            t2 = time.perf_counter()
            tf.append(t1 - t0)
            tb.append(t2 - t1)
        del out, xi
    return tf, tb


def _is_compiled(stage) -> bool:
    """A ``torch.compile``'d stage (:mod:`models.compiled`): no saved-tensor hooks on it (they would
    make it compile again)."""
    from .compiled import CompiledStage

    return isinstance(stage, CompiledStage)


def _as_input(x: torch.Tensor, grad: bool) -> torch.Tensor:
    x = x.detach()
    if grad and x.is_floating_point():
        x.requires_grad_(True)
    return x


def _params(module) -> list[torch.nn.Parameter]:
    return list({id(p): p for p in module.parameters()}.values()) if isinstance(module, torch.nn.Module) else []


def _saved_bytes(stage: Callable, x: torch.Tensor, input_grad: bool) -> tuple[int, int, int]:
    """What autograd saves for the backward of ``stage`` on input ``x`` (one forward with saved-tensor
    hooks, distinct storages): ``(saved, saved_input, saved_buffers)``, the bytes apart from the input,
    the parameters and the buffers; the bytes of the input (the pipeline's autograd memory model
    counts a tensor saved by two consecutive stages once,
    :func:`memplan.models.pipeline.autograd_stored_bytes`, and needs both); and the bytes of the
    buffers (batch-norm running statistics; the profiler counted them in ``saved`` before it left them
    out, :func:`measure_saved_bytes` reports them to recognize such instances). Sizes only: they do
    not depend on timing or on the input's values."""
    params = _params(stage)
    buffers = list(stage.buffers()) if isinstance(stage, torch.nn.Module) else []
    xi = _as_input(x, input_grad)
    _, seen = saved_storages(lambda: stage(xi))
    kp, kb, ki = {_key(t) for t in params}, {_key(t) for t in buffers}, _key(xi)
    saved = sum(b for k, b in seen.items() if k != ki and k not in kp and k not in kb)
    saved_input = seen.get(ki, 0) if ki not in kp and ki not in kb else 0
    saved_buffers = sum(b for k, b in seen.items() if k in kb and k not in kp and k != ki)
    return int(saved), int(saved_input), int(saved_buffers)


#: the dtypes a chain may be profiled and run under ``torch.autocast`` with
AUTOCAST_DTYPES = ("bfloat16", "float16")


def _autocast_note(device) -> dict:
    """``{"autocast": ...}`` where the profile ran under ``torch.autocast`` (empty otherwise): the dtype
    its operations ran in and that the weight cache was off (:class:`models.runtime.uncached_autocast`)."""
    kind = torch.device(device).type
    dtype = autocast_dtype(kind)
    if dtype is None:
        return {}
    return {"autocast": dtype, "autocast_note": f"the stages ran under torch.autocast({kind!r}, dtype={dtype}) "
            "without its weight cache (models.runtime.uncached_autocast); plans run under the same autocast "
            "('memplan run' does so from this record)"}


@under_uncached_autocast()
def profile_stage(stage: Callable, x: torch.Tensor, *, repeats: int = 3, device="cpu",
                  input_grad: bool = True, delta: torch.Tensor | None = None,
                  no_grad_forward: bool = True, memory: str = "dispatch") -> tuple[dict[str, float], torch.Tensor]:
    """Measure one stage on sample input ``x`` (see the module docstring). Returns (values, output).

    ``no_grad_forward``: whether the stage also runs without autograd (F_ck, F_none), so that ``o_f``
    is the larger overhead of the two forwards; ``False`` for a stage that only runs F_all (the loss
    stage L+1 of a multi-tensor chain: without autograd every intermediate of a folded head and of the
    loss is transient, 82 KB more than F_all's on a small U-Net, which made the simulated store-all
    peak 1.1-2.2% too high).

    ``values`` has keys ``uf``, ``ub`` (seconds), ``wa``, ``wabar``, ``wd_in`` (bytes of the gradient of
    the input), ``of``, ``of_all``, ``of_ng`` (F_all's and the no-grad forward's own overheads, ``of`` the
    larger; ``of_ng`` is ``of`` for a stage with ``no_grad_forward=False``), ``ob``, ``weights``
    (bytes), ``saved`` (bytes autograd saved, by hooks).

    ``memory``: how the sizes are measured on CPU (:data:`MEMORY_METHODS`): ``"dispatch"`` (default)
    by :class:`TensorMemoryTracker`; ``"profiler"`` by :class:`models.memory.ProfilerTracker`, c10's
    allocator events, which see compiled code (a ``torch.compile``'d stage, :mod:`models.compiled`,
    does not run compiled under a dispatch mode). With ``"profiler"`` the no-grad forward is warmed up
    too (a compiled stage compiles its no-grad graph at its first such call), its input requires no
    grad (as the executor's F_ck and F_none give it), a stage with ``no_grad_forward=False`` is not
    run without autograd at all, and ``saved`` and
    ``saved_input`` are nan (saved-tensor hooks would make a compiled stage compile again); what
    F_all keeps beyond its output is ``wabar - wa``. On CUDA both use the allocator's statistics.
    """
    if memory not in MEMORY_METHODS:
        raise ValueError(f"profile_stage: memory={memory!r}; choose from {', '.join(MEMORY_METHODS)}")
    profiled = memory == "profiler" and not _is_cuda(device)
    params = _params(stage)
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    # warm-up (allocator, lazy initializations), also gives the output shape for delta
    xi = _as_input(x, input_grad)
    out = stage(xi)
    if delta is None:
        g = torch.Generator(device=out.device).manual_seed(1)
        delta = torch.randn(out.shape, dtype=out.dtype, device=out.device, generator=g) if out.dim() else torch.ones_like(out)
    needs_backward = out.requires_grad
    if needs_backward:
        engine_backward((out,), (delta,))
    del out, xi
    # profiled: the no-grad forward's input requires no grad, as the executor's F_ck and F_none give it
    # (a compiled stage guards on it: the measured graph is the executed one), and a stage that runs
    # F_all only is not run without autograd at all (a compiled stage would compile a graph for it)
    ng_grad = input_grad and not profiled
    ng_run = no_grad_forward or not profiled
    if profiled and no_grad_forward:
        with torch.no_grad():
            stage(_as_input(x, ng_grad))
    buffers = list(stage.buffers()) if isinstance(stage, torch.nn.Module) else []

    def tracker(xi):
        return ProfilerTracker(existing=(xi, params, buffers)) if profiled else memory_tracker(device)
    # timings
    if repeats > 0:
        tf, tb = _timed_runs(stage, x, input_grad, delta if needs_backward else None, repeats, device)
    else:                   # timed in context by profile_chain (models.runtime.time_in_context)
        tf, tb = [0.0], [0.0]
    # memory: no-grad forward
    peak_ng = kept_ng = wa = 0
    if ng_run:
        xi = _as_input(x, ng_grad)
        with tracker(xi) as tr, torch.no_grad():
            out = stage(xi)
            tr.sync()
            peak_ng, kept_ng = tr.peak, tr.current
        wa = storage_bytes(out)
        del out
    # memory: forward with autograd, then backward
    saved, saved_input, _ = _saved_bytes(stage, x, input_grad) if not profiled else (math.nan, math.nan, 0)
    xi = _as_input(x, input_grad)
    with tracker(xi) as tr:
        out = stage(xi)
        tr.sync()
        peak_f, kept_f = tr.peak, tr.current
        if not ng_run:
            wa = storage_bytes(out)
            y = out.detach()
        wabar = kept_f + (0 if tr.is_tracked(out) else wa)
        wd_in = 0
        ob = 0.0
        if needs_backward:
            tr.reset_peak()
            base = tr.current
            engine_backward((out,), (delta,))
            tr.sync()
            wd_in = storage_bytes(xi.grad) if xi.grad is not None else 0
            ob = max(0.0, tr.peak - base - wd_in)
        del out
    of_all = max(0.0, peak_f - kept_f)
    of_ng = max(0.0, peak_ng - kept_ng) if no_grad_forward else None
    of = max(of_all, of_ng or 0.0)
    if ng_run:
        with torch.no_grad():
            y = stage(_as_input(x, False))
    values = dict(uf=statistics.median(tf), ub=statistics.median(tb) if needs_backward else 0.0, wa=float(wa),
                  wabar=float(max(wabar, wa)), wd_in=float(wd_in), of=float(of), ob=float(ob),
                  weights=float(sum(p.numel() * p.element_size() for p in params)), saved=float(saved),
                  saved_input=float(saved_input), of_all=float(of_all),
                  of_ng=float(of if of_ng is None else of_ng))
    return values, y.detach()



def _res_leaf(t: torch.Tensor) -> torch.Tensor:
    """A resident tensor as the executor holds it: a leaf with a zero ``.grad`` (float tensors)."""
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach()
    if t.is_floating_point():
        t.requires_grad_(True)
        t.grad = torch.zeros_like(t)
        mark_resident(t)
    return t


def resident_bytes(t: torch.Tensor, grad: bool = True) -> int:
    """What a resident tensor costs the executor: its storage, plus its gradient's (float tensors
    with ``grad``)."""
    if not isinstance(t, torch.Tensor):
        return 0
    return storage_bytes(t) + (t.numel() * t.element_size() if grad and t.is_floating_point() else 0)


def profile_multi_stage(stage: Callable, xs: Sequence[torch.Tensor], res: Sequence[torch.Tensor], *,
                        device="cpu", input_grad: bool = True, first: Sequence[int] = (),
                        memory: str = "dispatch") -> tuple[dict[str, float], tuple, tuple]:
    """:func:`profile_stage` for a stage of a multi-tensor linearization
    (:func:`models.graph.multi_stage_modules`): ``xs`` are the tensors of a^{l-1}, ``res`` the
    resident tensors it reads (leaves with a zero ``.grad``, made before the measures, as the
    executor holds them). Sizes only (times: in context, :func:`models.runtime.time_in_context`).

    Against :func:`profile_stage`: ``wa`` is a^l's tensors (not the resident outputs); ``wabar`` is
    what F_all keeps minus the resident outputs' storages (the chain's ``resident`` holds them; the
    executor's resident leaf shares that storage); ``o_f`` counts the resident outputs as overhead
    (a recomputation holds a second copy until it is dropped or handed to the leaf); ``wd_in`` is the
    gradients of a^{l-1}'s tensors (the resident inputs' gradients exist beforehand, so what a
    backward adds into them is in ``o_b``). ``first``: the indices in ``res`` of the resident inputs
    this stage reads last (the first backward to add to their gradient): measured with no gradient
    yet, which the backward makes (``o_b`` counts it where B's peak comes after it), as the
    executor's leaves; the chain charges it from the end of this B on (:attr:`Chain.resident_grads`).
    ``memory``: ``"dispatch"`` (the tensors' storages) or ``"profiler"`` (c10's allocator events, every
    CPU allocation, a kernel's scratch included; :class:`models.memory.ProfilerTracker`, whose
    ``existing`` are the inputs, the resident tensors read, the parameters and the buffers).
    Returns (values, a^l's tensors, resident outputs), both detached, from a forward without grad."""
    n_res = len(getattr(stage, "resident_out", None) or [])
    params = _params(stage)
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)

    def inputs(grad: bool) -> tuple:
        return tuple(_as_input(t, grad) if isinstance(t, torch.Tensor) else t for t in xs)

    def split(out) -> tuple[tuple, tuple]:
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return out[:len(out) - n_res], out[len(out) - n_res:]

    def deltas(outs) -> list:
        g = torch.Generator(device=device).manual_seed(1)
        return [None if not isinstance(o, torch.Tensor) else
                torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=g) if o.dim() and o.is_floating_point()
                else torch.ones_like(o) for o in outs]

    def needs(o) -> bool:
        return isinstance(o, torch.Tensor) and o.requires_grad

    def backward(outs, routs, ds, rds) -> None:
        ts = [o for o in list(outs) + list(routs) if needs(o)]
        gs = [d for o, d in zip(list(outs) + list(routs), list(ds) + list(rds)) if needs(o)]
        if ts:
            engine_backward(ts, gs)

    profiled = memory == "profiler" and not _is_cuda(device)
    buffers = list(stage.buffers()) if isinstance(stage, torch.nn.Module) else []

    def tracker(xi):
        # c10's allocator events (kernels' scratch included) where asked for; what a stage's output can
        # alias is its inputs, the resident tensors it reads, its parameters and buffers
        return (ProfilerTracker(existing=(xi, list(res), params, buffers)) if profiled else
                memory_tracker(device))

    xi = inputs(input_grad)
    outs, routs = split(stage(*xi, *res))                     # warm-up
    ds, rds = deltas(outs), [torch.zeros_like(o) if isinstance(o, torch.Tensor) else None for o in routs]
    backward(outs, routs, ds, rds)
    del outs, routs, xi
    with tracker(xs) as tr, torch.no_grad():
        outs, routs = split(stage(*inputs(False), *res))
        tr.sync()
        peak_ng, kept_ng = tr.peak, tr.current
    wa = storage_bytes(outs)
    r_ng = storage_bytes(routs)
    del outs, routs
    xi = inputs(input_grad)
    for i, r in enumerate(res):         # a resident gradient a later stage's backward added to exists
        if isinstance(r, torch.Tensor) and r.grad is not None:
            if i in first:
                r.grad = None           # none yet: this B makes it, as in the executor
            else:
                r.grad.zero_()
            fresh_start(r)
    with tracker(xi) as tr:
        outs, routs = split(stage(*xi, *res))
        tr.sync()
        peak_f, kept_f = tr.peak, tr.current
        r_f = sum(storage_bytes(o) for o in routs if isinstance(o, torch.Tensor) and tr.is_tracked(o))
        wabar = kept_f - r_f + sum(storage_bytes(o) for o in outs if isinstance(o, torch.Tensor) and not tr.is_tracked(o))
        tr.reset_peak()
        base = tr.current
        backward(outs, routs, ds, rds)
        tr.sync()
        wd_in = storage_bytes([t.grad for t in xi if isinstance(t, torch.Tensor) and t.grad is not None])
        ob = max(0.0, tr.peak - base - wd_in)
        del outs, routs
    for i in first:                     # the zero gradient the stages before this one measure with
        r = res[i]
        if isinstance(r, torch.Tensor) and r.requires_grad and r.grad is None:
            r.grad = torch.zeros_like(r)
    of_all = max(0.0, peak_f - (kept_f - r_f))
    of_ng = max(0.0, peak_ng - (kept_ng - r_ng))
    of = max(of_all, of_ng)
    with torch.no_grad():
        y, r_out = split(stage(*inputs(False), *res))
    values = dict(uf=0.0, ub=0.0, wa=float(wa), wabar=float(max(wabar, wa)), wd_in=float(wd_in), of=float(of),
                  of_all=float(of_all), of_ng=float(of_ng), ob=float(ob),
                  weights=float(sum(p.numel() * p.element_size() for p in params)), saved=0.0, saved_input=0.0)
    det = lambda t: t.detach() if isinstance(t, torch.Tensor) else t  # noqa: E731
    return values, tuple(det(t) for t in y), tuple(det(t) for t in r_out)


def _profile_multi_rows(stages: Sequence[Callable], x: torch.Tensor, loss_fn: Callable, *, device,
                        input_grad: bool, memory: str = "dispatch") -> tuple[list[dict], float, float, list, list]:
    """Rows of stages 1..L+1 of a multi-tensor linearization, the chain's ``resident`` bytes (every
    resident tensor and its gradient, :func:`resident_bytes`), ``wa[0]`` (0 when the input itself
    is resident), :attr:`Chain.resident_grads` (each gradient's bytes, producer and last reader) and
    :attr:`Chain.resident_values` (the storage bytes, producer and readers of each value its stage lists
    in ``resident_free`` or ``resident_kept``: let go after its last forward reader, or held to its
    producer's backward; readers ``()`` for the latter).
    Each resident gradient is made by its last reader's backward step, the first to add to it
    (:func:`profile_multi_stage`'s ``first``); the chain charges it from the end of that B on."""
    produced = {v for s in stages for v in (getattr(s, "resident_out", None) or [])}
    read = {v for s in stages for v in (getattr(s, "resident_in", None) or [])}
    src = sorted(read - produced, key=str)
    last_reader = {v: l for l, s in enumerate(stages, start=1) for v in (getattr(s, "resident_in", None) or [])}
    store: dict[Any, torch.Tensor] = {}
    spans: list[tuple[float, int, int]] = []
    values: list[tuple[float, int, tuple]] = []
    readers = {v: tuple(l for l, s in enumerate(stages, start=1) if v in (getattr(s, "resident_in", None) or []))
               for v in produced}
    total = 0.0

    def span(v, t, k: int) -> None:
        g = resident_bytes(t) - resident_bytes(t, grad=False)
        if g and v in last_reader and last_reader[v] > k:
            spans.append((float(g), k, last_reader[v]))

    if src:
        store[src[0]] = _res_leaf(x) if input_grad else x.detach()
        total += resident_bytes(x, grad=input_grad)
        if input_grad:
            span(src[0], x, 0)
        a: tuple = ()
    else:
        a = (x,)
    rows = []
    for l, stage in enumerate(list(stages) + [loss_fn], start=1):
        res = tuple(store[v] for v in (getattr(stage, "resident_in", None) or []))
        if l == len(stages) + 1:
            vals, _ = profile_stage(stage, a[0], repeats=0, device=device, input_grad=True,
                                    delta=torch.ones((), device=device), no_grad_forward=False, memory=memory)
            rows.append(vals)
            break
        names = getattr(stage, "resident_in", None) or []
        vals, a, r_out = profile_multi_stage(stage, a, res, device=device, input_grad=(input_grad or l > 1),
                                             first=[i for i, v in enumerate(names) if last_reader.get(v) == l],
                                             memory=memory)
        free = set(getattr(stage, "resident_free", None) or [])
        kept = set(getattr(stage, "resident_kept", None) or [])
        for v, t in zip(getattr(stage, "resident_out", None) or [], r_out):
            store[v] = _res_leaf(t)
            # a view of the input (the Transformer's target ids, ids[:, src_len:]) has no storage of its
            # own: the input's is a^0's (wa[0]) or, resident itself, counted above; charged again here,
            # every plan's peak was predicted 512 B over the run's (the ids of batch 2 x 32 tokens)
            shared = isinstance(t, torch.Tensor) and _key(t) != 0 and _key(t) == _key(x)
            total += resident_bytes(t) - (storage_bytes(t) if shared else 0)
            span(v, t, l)
            if (v in free and readers[v]) or v in kept:
                values.append((0.0 if shared else float(resident_bytes(t, grad=False)), l,
                               readers[v] if v in free else ()))
        rows.append(vals)
    return rows, total, 0.0 if src else float(storage_bytes(x)), spans, values


def measure_saved_bytes(stages: Sequence[Callable], x: torch.Tensor, loss_fn: Callable | None = None, *,
                        device="cpu", input_grad: bool = True) -> dict[str, list[float]]:
    """The sizes :func:`profile_chain` records for stages 1..L and the loss stage L+1, without the
    timings: ``wa`` (a^0..a^{L+1}, bytes of each output's storage), ``wabar`` (abar^0..abar^{L+1},
    abar^0 = a^0), ``saved_by_autograd_bytes`` and ``saved_input_bytes`` (index l-1 for stage l,
    :func:`_saved_bytes`). They are sizes of tensors, so they do not depend on the machine's speed:
    recomputing them for an instance made by ``memplan profile`` gives its recorded values (the
    ``benchmarks/add_saved_input_bytes.py`` script adds ``saved_input_bytes`` to instances recorded
    before the profiler measured it). Also ``saved_buffer_bytes``: what of the stage's buffers autograd
    saves, which instances profiled before the profiler left buffers out count in
    ``saved_by_autograd_bytes``. Each stage runs two forwards with autograd recording and one without;
    no backward."""
    loss_fn = loss_fn or classification_loss()
    x = x.to(device)
    out: dict[str, list[float]] = {"wa": [float(storage_bytes(x))], "wabar": [float(storage_bytes(x))],
                                   "saved_by_autograd_bytes": [], "saved_input_bytes": [], "saved_buffer_bytes": []}
    a = x
    for l, stage in enumerate(list(stages) + [loss_fn], start=1):
        grad = input_grad or l > 1
        for p in _params(stage):          # as profile_stage: gradients exist before the measures
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        with torch.no_grad():
            y = stage(_as_input(a, False))
        wa = storage_bytes(y)
        saved, saved_input, saved_buffers = _saved_bytes(stage, a, grad)
        xi = _as_input(a, grad)
        with memory_tracker(device) as tr:          # abar as profile_stage measures it
            o = stage(xi)
            tr.sync()
            wabar = tr.current + (0 if tr.is_tracked(o) else wa)
            del o
        out["wa"].append(float(wa))
        out["wabar"].append(float(max(wabar, wa)))
        out["saved_by_autograd_bytes"].append(float(saved))
        out["saved_input_bytes"].append(float(saved_input))
        out["saved_buffer_bytes"].append(float(saved_buffers))
        a = y.detach()
    return out


def classification_loss(num_classes: int | None = None, seed: int = 0) -> Callable:
    """Cross-entropy against fixed random labels drawn on first use (works for N x C logits and for
    N x T x V language-model logits); a :class:`models.chunked_loss.TokenLoss`, so that a language
    model's loss stage can be chunked over its tokens (:class:`models.chunked_loss.ChunkedHeadLoss`)."""
    from .chunked_loss import FixedLabelCrossEntropy

    return FixedLabelCrossEntropy(num_classes, seed)


def free_backward_overhead(stage: Callable, x: torch.Tensor, *, input_grad: bool = True,
                           delta: torch.Tensor | None = None, device="cpu",
                           memory: str = "dispatch") -> tuple[float, bool]:
    """What the executor without its holds charges for B^l of ``stage`` on input ``x``
    (:func:`models.remat.free_backward_model`): B's peak above everything before it (the stage's saved
    tensors, its output, delta^l), less the gradient of its input, with nothing held by the caller
    while the backward runs (the output and delta^l go where autograd lets them go: an empty root,
    ``models.runtime._Seed``), which may be below zero; and whether the stage saves its own
    output (where it does not, autograd frees it once the next stage's backward is done). ``delta``:
    the output's gradient (default ones); ``memory``: :func:`profile_stage`'s method."""
    from .runtime import _Seed

    profiled = memory == "profiler" and not _is_cuda(device)
    params = _params(stage)
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    buffers = list(stage.buffers()) if isinstance(stage, torch.nn.Module) else []
    xi = _as_input(x, input_grad)
    out, seen = saved_storages(lambda: stage(xi))
    saves_output = isinstance(out, torch.Tensor) and _key(out) in seen
    del out, seen
    xi = _as_input(x, input_grad)
    tracker = ProfilerTracker(existing=(xi, params, buffers)) if profiled else memory_tracker(device)
    with tracker as tr:
        # through a view, as a fused group's stage reads its input (a junction, not a leaf): the
        # gradients reaching it are added in the view's buffer, as the engine adds them at a junction,
        # and not handed to the leaf's .grad, which may keep the incoming delta^l itself as it is
        out = stage(xi.view_as(xi) if xi.requires_grad else xi)
        d = torch.ones_like(out) if delta is None else delta.detach().clone()
        # an empty root (models.runtime._Seed) holds delta^l until the backward hands it on, and the
        # output only through its graph: the base is then taken with an output the stage does not save
        # already gone (the model releases it when B^{l+1} ends, before B^l), one it saves still there
        root = _Seed.apply([[d]], out) if out.requires_grad else None
        del out, d
        tr.sync()
        base = tr.current
        tr.reset_peak()
        if root is not None:
            engine_backward((root,), (root.new_empty((0,)),))
            del root
        tr.sync()
        wd_in = storage_bytes(xi.grad) if xi.grad is not None else 0
        return float(tr.peak - base - wd_in), bool(saves_output)


#: how profile_chain times the stages
TIMINGS = ("in-context", "isolated")


@under_uncached_autocast()
def profile_chain(stages: Sequence[Callable], x: torch.Tensor, loss_fn: Callable | None = None, *,
                  repeats: int = 3, device="cpu", names: Sequence[str] | None = None, name: str = "chain",
                  provenance: dict[str, Any] | None = None, input_grad: bool = True,
                  loss_name: str = "loss", timing: str = "in-context", clock: str = "wall",
                  memory: str = "dispatch", deadline: float | None = None, turns: bool = False,
                  free_backward: bool = False, timing_budget: float = 0.0) -> Chain:
    """Profile stages 1..L and the loss stage L+1 on sample input ``x`` and build the Chain (seconds,
    bytes). ``loss_name``: the name of stage L+1 (``fc+loss`` where a head is folded into the loss,
    :meth:`models.graph.LinearizedModel.loss_stage`). ``input_grad``: whether B^1 computes delta^0 (the gradient of the network input), as the
    papers' chains do; with an integer input (token ids) there is no delta^0 and omega_delta^0 = 0.

    ``timing``: ``"in-context"`` (default) times u_f and u_b inside whole store-all runs of the
    executor (:func:`models.runtime.time_in_context`, ``max(3, repeats)`` runs after one warm-up, the
    median per operation), scaled by one factor per chain so that they add up to the median
    wall-clock time of a whole untimed run (the executor's own work between operations, and the
    interference that per-operation medians leave out, are then spread over the stages in proportion
    to their times; the factor is recorded as ``timing_calibration``; ``timing_budget`` seconds: more
    runs while the whole runs' median is not known within 2%, :func:`models.runtime.time_in_context`'s
    ``budget``, the number run recorded as ``timing_runs``); ``"isolated"`` times each
    operation alone (paper 004 section 5.1's procedure, :func:`_timed_runs`). ``clock``: ``wall`` or
    ``cpu`` (:data:`models.measure.CLOCKS`; CPU, one thread, in-context timing only), recorded in the
    provenance. ``memory``: how sizes are measured on CPU (:func:`profile_stage`); ``"profiler"``
    (c10's allocator events, which see compiled stages, :mod:`models.compiled`, and kernels' scratch:
    on multi-tensor cuts too since session 40, :func:`profile_multi_stage`'s ``memory``; a U-Net's plans
    then run at their replay's peak to the byte, where the dispatch sizes left 36 MiB of a
    convolution backward's scratch unseen) is recorded in the provenance's ``memory_measurement``;
    with it the loss stage's ``o_f`` is
    that of F_all alone (the loss stage runs F_all only, and a compiled one's inference graph, 2x the
    training graph's transients under Inductor on a small Llama, was never run).

    ``turns`` (in-context timing only): also calibrate the no-grad forwards' own times and the cost of a
    turn (:attr:`Chain.uf_ng`, :attr:`Chain.u_turn`; :meth:`models.runtime.InContextTimes.turn_model`,
    from runs of :func:`models.remat.turn_ops` between the store-all runs), recorded in the provenance
    as ``turn_model``. Off by default: only rotor, revolve and the baselines plan with them (the other
    methods then plan in the papers' time model and claim no optimality, :func:`memplan.remat.solve`).

    ``free_backward`` (single-tensor cuts, stages not compiled): also measure what the executor without
    its holds charges for each B (:func:`free_backward_overhead`), recorded in the provenance as
    ``free_backward`` (``ob``, L + 2 values, and ``release``) for :func:`models.remat.free_backward_model`
    (the replay) and :func:`models.remat.free_backward_chain` (a chain for the solvers to plan with it);
    the chain's own ``ob`` stays paper 004's.

    ``deadline``: a ``time.perf_counter()`` value; where the next stage's profile (a compiled stage
    compiles on its first call), estimated as the slowest stage's so far, would end past it, or the
    in-context timing would start past it, :class:`TimeoutError` is raised (a caller's time limit then
    bounds the profile to about its own, past it by one stage's work at most where a stage is slower
    than every one before it)."""
    if memory not in MEMORY_METHODS:
        raise ValueError(f"profile_chain: memory={memory!r}; choose from {', '.join(MEMORY_METHODS)}")
    if clock != "wall" and (timing != "in-context" or _is_cuda(device)):
        raise ValueError("profile_chain: clock='cpu' is for in-context timing on a CPU")
    if timing not in TIMINGS:
        raise ValueError(f"profile_chain: timing={timing!r}; choose from {', '.join(TIMINGS)}")
    loss_fn = loss_fn or classification_loss()
    x = x.to(device)
    L = len(stages)
    rows = []
    a = x
    multi = any(hasattr(s, "resident_in") for s in stages)
    resident, wa0, resident_grads, resident_values = 0.0, float(storage_bytes(x)), [], []
    if multi:
        if timing != "in-context":
            raise ValueError("profile_chain: stages with multi-tensor cuts are timed in context only")
        rows, resident, wa0, resident_grads, resident_values = _profile_multi_rows(
            stages, x, loss_fn, device=device, input_grad=input_grad, memory=memory)

    slowest = 0.0               # the longest stage's profile so far (a compiled one compiles in it)

    def _check_deadline(what: str) -> None:
        if deadline is not None and time.perf_counter() + slowest > deadline:
            raise TimeoutError(f"profile_chain: {what} would end past the deadline")

    free_ob: list[float] | None = [0.0] if free_backward and not multi else None
    free_release: list[int] = []
    # a frozen first part (no trained parameter) runs without a graph where no input gradient is asked
    # for, as models.runtime.execute runs it (models.runtime.frozen_prefix)
    frozen = frozen_prefix(stages) if not input_grad and not multi else 0
    for l, stage in enumerate([] if multi else list(stages) + [loss_fn], start=1):
        is_loss = l == L + 1
        _check_deadline(f"stage {l} of {L + 1}")
        t_stage = time.perf_counter()
        if free_ob is not None and _is_compiled(stage):
            free_ob = None          # saved-tensor hooks would compile it again
        if free_ob is not None:
            o, saves = free_backward_overhead(stage, a, input_grad=(input_grad or l - 1 > frozen), device=device,
                                              delta=torch.ones((), device=device) if is_loss else None,
                                              memory=memory)
            free_ob.append(o)
            if not saves and not is_loss:
                free_release.append(l)
        vals, a_next = profile_stage(stage, a, repeats=repeats if timing == "isolated" else 0, device=device,
                                     input_grad=(input_grad or l - 1 > frozen),
                                     delta=torch.ones((), device=device) if is_loss else None, memory=memory,
                                     no_grad_forward=not (is_loss and memory == "profiler"))
        rows.append(vals)
        a = a_next
        slowest = max(slowest, time.perf_counter() - t_stage)
    in_context: dict[str, Any] = {}
    own_times: dict[str, Any] = {}
    if turns and timing != "in-context":
        raise ValueError("profile_chain: turns=True calibrates in context; use timing='in-context'")
    if timing == "in-context":
        from .measure import clock as _clock
        from .runtime import time_in_context

        _check_deadline("the in-context timing")

        ic = time_in_context(stages, loss_fn, x, runs=max(3, repeats), device=device, input_grad=input_grad,
                             clock=_clock(clock, torch.get_num_threads()) if not _is_cuda(device) else time.perf_counter,
                             turns=turns, budget=timing_budget)
        timed_runs = ic.runs
        uf, ub, factor = ic.calibrated()
        if turns:
            uf_ng, u_turn = ic.turn_model(ic.turn_per_op, ic.turn_run_times)
            own_times = {"uf_ng": uf_ng, "u_turn": u_turn}
        for l, r in enumerate(rows, start=1):
            r["uf"], r["ub"] = uf[l], ub[l]
        in_context = {"timing_clock": "cpu (time.process_time, one thread)" if clock == "cpu" else "wall",
                      "timing_calibration": round(factor, 6), "timing_runs": ic.runs,
                      "timing_run_seconds": [round(t, 6) for t in ic.run_times],
                      "timing_spread_max": round(max(ic.spread), 4)}
        if turns:
            in_context["turn_model"] = (f"uf_ng and u_turn ({u_turn * 1e6:.1f} us a turn) from {len(ic.turn_run_times)} "
                                        "runs of models.remat.turn_ops between the store-all runs: each "
                                        "stage's second no-grad run of the step, after a warm-up sweep (the "
                                        "last stage's first) "
                                        "(models.runtime.InContextTimes.turn_model)")
    wa = [wa0] + [r["wa"] for r in rows]
    wabar = [wa[0]] + [r["wabar"] for r in rows]
    wd = [r["wd_in"] for r in rows] + [4.0]     # delta^{l-1} from B^l; delta^{L+1} = dLoss/dLoss (fp32)
    if not (input_grad and x.is_floating_point()):
        wd[0] = 0.0
    stage_names = ["input"] + (list(names) if names else [f"stage{l}" for l in range(1, L + 1)]) + [loss_name]
    dtypes = sorted({str(p.dtype).replace("torch.", "") for s in stages for p in _params(s) if p.is_floating_point()})
    prov = {
        "device": str(torch.device(device)) if not _is_cuda(device)
        else f"cuda ({torch.cuda.get_device_name(device)})",
        **device_info(device),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "threads": torch.get_num_threads(),
        "dtype": ",".join(dtypes) if dtypes else str(x.dtype).replace("torch.", ""),
        **_autocast_note(device),
        "timing": (f"in context: median per operation over {timed_runs} whole store-all runs of the executor "
                   "after one warm-up" + (f" (at least {max(3, repeats)}, more while the 95% interval of the whole "
                                          f"runs' median was wider than 2%, within {timing_budget:g} s)"
                                          if timing_budget > 0 else "") + ", " + ("CUDA events recorded between operations, no synchronize until the run "
                                            "ends" if _is_cuda(device) else "time.perf_counter between operations")
                   + ", scaled by timing_calibration to the median untimed run (models.runtime.time_in_context; "
                   "held on multi-tensor cuts, as their plans are timed)")
                  if timing == "in-context" else
                  (f"isolated: median of {repeats} runs after one warm-up (paper 004 section 5.1); "
                   + ("CUDA events around each operation after torch.cuda.synchronize" if _is_cuda(device)
                      else "time.perf_counter around each operation")),
        **in_context,
        "memory_measurement": ("cpu: exact tensor-storage bytes from a TorchDispatchMode allocation tracker "
                               "(models.profiler.TensorMemoryTracker); allocator rounding and kernel-internal "
                               "scratch buffers are not seen" if not _is_cuda(device) and memory == "dispatch" else
                               PROFILER_MEMORY if not _is_cuda(device) else
                               "cuda: caching-allocator statistics torch.cuda.memory_allocated / "
                               "max_memory_allocated after torch.cuda.synchronize (512-byte rounding and "
                               "workspaces allocated through the allocator included; reserved-but-free cache "
                               "not counted)"),
        "measurement": measurement_notes(device, timed_runs if timing == "in-context" else repeats, timing, memory),
        **({} if multi or memory != "dispatch" else {"saved_by_autograd_bytes": [r["saved"] for r in rows],
                             "saved_input_bytes": [r["saved_input"] for r in rows]}),
        **({} if free_ob is None else {"free_backward": {
            "ob": free_ob, "release": free_release,
            "how": "models.profiler.free_backward_overhead: B's peak with nothing held by the caller, less "
                   "delta^{l-1}; release: stages whose own backward does not save their output"}}),
        **(provenance or {}),
    }
    return Chain(
        uf=[0.0] + [r["uf"] for r in rows], ub=[0.0] + [r["ub"] for r in rows],
        wa=wa, wabar=wabar, wd=wd, of=[0.0] + [r["of"] for r in rows], ob=[0.0] + [r["ob"] for r in rows],
        weights=[0.0] + [r["weights"] for r in rows], name=name, stage_names=stage_names, provenance=prov,
        resident=resident, resident_grads=resident_grads, resident_values=resident_values, of_all=[0.0] + [r.get("of_all", r["of"]) for r in rows],
        of_ng=[0.0] + [r.get("of_ng", r["of"]) for r in rows], **own_times)


#: how :func:`profile_model` cuts a network, as its instances' provenance records it
LINEARIZATION = ("models.graph.linearize_model, cuts='saved': the minimal single-tensor groups of "
                 "models.graph.linearize (papers 001/003 virtual layers) on the torch.fx graph, merged where "
                 "autograd saves no boundary tensor (models.graph.merge_unsaved_cuts), so the executor holds "
                 "nothing autograd frees; loss_group: the last group, folded into the loss stage L+1 where the "
                 "loss does not save its input")


#: the same for a network cut where several tensors cross (``cuts="auto"`` on a coarse graph)
LINEARIZATION_MULTI = ("models.graph.linearize_model, cuts='multi' (the single-tensor groups are too coarse: "
                       "{why}): models.graph.multi_cut_groups, the cuts of one topological order with "
                       "at most {max_nodes} counted operations per stage and the fewest bytes of tensors no backward "
                       "saves crossing, then the fewest bytes crossing (a shortest path), tensors whose autograd "
                       "gradient is strided kept inside a stage; a tensor crossing one cut is part of a^l, one "
                       "crossing several is resident (charged once, with its gradient, as the chain's resident "
                       "bytes; the simulator charges the gradients and the values with a storage of their own "
                       "only while they exist: resident_grads, resident_values); loss_group: the saved rule's "
                       "head, folded into the loss")


def multi_cut_provenance(lm) -> dict[str, Any]:
    """``cuts`` and ``resident`` of a multi-tensor linearization (:func:`models.cut_report.
    multi_cut_tensors` on a :class:`models.graph.LinearizedModel`), for a chain's provenance: what
    crosses each cut, and where each resident tensor lives (the pipeline charges it there,
    :func:`models.pipeline.resident_spans`). Float tensors are charged with their gradient."""
    from .cut_report import multi_cut_tensors

    meta = {n.name: n.meta.get("tensor_meta") for n in lm.captured.gm.graph.nodes}
    grads = {v for v in lm.residency.resident      # float tensors have a gradient (the executor's leaves)
             if getattr(meta.get(v), "dtype", None) is not None and meta[v].dtype.is_floating_point}
    cuts, resident = multi_cut_tensors(lm.captured.graph, lm.residency, grad=grads)
    return {"cuts": cuts, "resident": resident}


def check_example_input(model_name: str, model, x: torch.Tensor, shape: Sequence[int]) -> None:
    """Run ``model`` once on its example input ``x`` (batch ``x.shape[0]``, per-sample ``shape``), before
    it is traced or compiled, and turn an error of that run into an
    :class:`~memplan.models.solution.InputError` of one line: the model, the input shape, the error's
    first line and what would work (the zoo's default shape; for a token model, at most its context
    length). A wrong ``--input`` (rank, channels, a sequence past ``n_ctx``, one value per batch-norm
    channel) otherwise failed deep inside torch.fx's shape propagation with two chained tracebacks;
    only this first plain run is caught, so an error in the tracing or profiling after it still shows
    in full. The run leaves no trace: no gradients, RNG states and buffers (batch-norm statistics) put
    back, as :func:`models.graph.capture` does."""
    from .networks import DEFAULT_INPUT, TOKEN_MODELS
    from .solution import InputError

    config = getattr(model, "config", None)
    src_len = config.get("src_len") if isinstance(config, dict) else None
    if src_len is not None and len(shape) == 1 and shape[0] <= src_len:
        # the encoder-decoder reads the first src_len ids as its source and the rest as its target: with
        # none left it ran on an empty target, a NaN loss, and a plan was made for it (exit 0)
        raise InputError(f"{model_name} cannot run on input {shape[0]}: its first src_len = {src_len} tokens are "
                         f"the source, which leaves no target token; give --input more than {src_len} (e.g. "
                         f"--input {2 * src_len}) or --set src_len={max(1, shape[0] // 2)}")
    devices = [x.device] if x.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            saved = {name: b.clone() for name, b in model.named_buffers()}
            try:
                model(x)
            finally:
                for name, b in model.named_buffers():
                    b.copy_(saved[name])
    except (RuntimeError, ValueError, IndexError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        given = "x".join(map(str, shape))
        default = "x".join(map(str, DEFAULT_INPUT.get(model_name, ())))
        config = getattr(model, "config", None)      # the zoo's token models record their n_ctx there
        n_ctx = config.get("n_ctx") if isinstance(config, dict) else None
        if model_name in TOKEN_MODELS and len(shape) != 1:
            hint = f"a token model takes a sequence length, e.g. --input {default}"
        elif n_ctx and len(shape) == 1 and shape[0] > n_ctx:
            hint = (f"the sequence is longer than the model's n_ctx = {n_ctx}: give --input {n_ctx} or less "
                    f"(or --set n_ctx={shape[0]})")
        elif "more than 1 value per channel" in first:
            hint = "batch normalization needs more than one value per channel: a larger --batch or --input"
        else:
            hint = f"its default input is {default}" if default else "give another --input"
        raise InputError(f"{model_name} cannot run on input {given} (batch {x.shape[0]}): {first}; {hint}") from None


def step_memory_estimate(model_name: str, batch: int, input_shape: Sequence[int] | None = None, *,
                         model_kw: dict[str, Any] | None = None, seed: int = 0,
                         small: tuple[int, int] | None = (2, 4)) -> dict[str, Any]:
    """What a training step of a zoo model needs at ``batch`` at least, worked out before anything of
    that size is made (``memplan profile --batch 1000000`` had allocated until the OOM killer came):
    ``input`` (bytes of the batch's input: the per-sample input times ``batch``) and ``step`` (bytes a
    plain autograd step holds above what existed before it, the tracker's peak of
    :func:`models.memory.step_peak` on the CPU, at the batches ``small``, extended linearly to
    ``batch`` from the slope between the two: the part that does not grow with the batch, the weight
    gradients among it, is left out, so that this stays below what the step takes where the peak is
    linear in the batch, as in every network of the zoo), ``per_sample`` (the two slopes added) and
    ``batches`` (``small``, or None where ``batch`` is not above both: then ``step`` is 0, not
    measured; ``small=None``: the input alone, nothing run). The model and its inputs at ``small`` run
    on the CPU, and are let go before returning; a model or input that fails there raises what it
    raised (``check_example_input`` names it)."""
    from .memory import grad_input, step_peak
    from .networks import DEFAULT_INPUT, canonical_name, example_input, example_input_bytes, get_model

    name = canonical_name(model_name)
    model_kw = dict(model_kw or {})
    shape = tuple(input_shape) if input_shape else DEFAULT_INPUT[name]
    vocab = model_kw.get("vocab")
    per_input = example_input_bytes(name, 1, shape)        # not made: one sample can exceed the memory
    out = {"input": float(per_input) * batch, "step": 0.0, "per_sample": float(per_input), "batches": None}
    if small is None or batch <= max(small):
        return out
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = get_model(name, **model_kw).train()
        params = list(model.parameters())
        loss_fn = classification_loss(seed=seed)
        peaks = []
        for b in small:
            x = grad_input(example_input(name, b, shape, vocab=vocab, seed=seed))
            peaks.append(step_peak(lambda: loss_fn(model(x)).backward(), params, "cpu", "dispatch"))
        for q in params:
            q.grad = None
    slope = max(0.0, (peaks[1] - peaks[0]) / (small[1] - small[0]))
    out.update(step=slope * batch, per_sample=per_input + slope, batches=tuple(small))
    return out


def available_memory(device="cpu") -> float | None:
    """Bytes this process could still allocate on ``device``: a CUDA device's free memory
    (``torch.cuda.mem_get_info``); on the host, MemAvailable plus free swap (psutil where installed,
    else ``/proc/meminfo``). None where neither answers."""
    if _is_cuda(device):
        return float(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        import psutil  # optional

        return float(psutil.virtual_memory().available + psutil.swap_memory().free)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info = {k.strip(): v.split() for k, v in (line.split(":", 1) for line in f if ":" in line)}
        return float(sum(int(info[k][0]) * 1024 for k in ("MemAvailable", "SwapFree") if k in info)) \
            if "MemAvailable" in info else None
    except (OSError, ValueError, IndexError):
        return None


def profile_model(model_name: str, batch: int, input_shape: Sequence[int] | None = None, *, device="cpu",
                  repeats: int = 3, seed: int = 0, model_kw: dict[str, Any] | None = None,
                  provenance: dict[str, Any] | None = None, name: str | None = None,
                  cuts: str = "auto", turns: bool = False, memory: str = "dispatch",
                  free_backward: bool = False, timing_budget: float = 0.0, autocast: str | None = None) -> Chain:
    """Build a zoo model, linearize it (models.graph) and profile its stages: the chain of
    ``memplan profile`` (and of :mod:`memplan.experiments.gpu_profile`). ``provenance`` is added to
    the chain's provenance (its keys win); ``name`` replaces the default chain name. ``cuts``: the
    rule of :func:`models.graph.linearize_model`; ``"auto"`` (default) is ``"saved"`` for every network
    whose single-tensor groups are fine enough (the ResNets, DenseNets, Inception, VGG, GPT-2: their
    chains do not change) and ``"multi"`` for the others (:func:`models.graph.coarse_single_cuts`:
    NASNet-A and the Transformer, fewer than one group per ten operations; U-Net, one group holding
    most of the network);
    the provenance's ``cut_rule`` says which was taken, ``cuts`` what crosses each cut and ``resident``
    the tensors crossing several. ``turns``: :func:`profile_chain`'s (the turn model); ``memory``: its
    CPU memory method (``"profiler"``: c10's allocator events, the convolutions' scratch included);
    ``free_backward``: its too (the record of the executor without holds, single-tensor cuts only).
    ``autocast`` (``"bfloat16"``, ``"float16"``): the linearization and the profile under
    ``torch.autocast`` of that dtype on ``device`` (recorded as the provenance's ``autocast``)."""
    if autocast is not None:
        if autocast not in AUTOCAST_DTYPES:
            raise ValueError(f"profile_model: autocast={autocast!r}; choose from {', '.join(AUTOCAST_DTYPES)}")
        with autocast_blocks(autocast, device)():
            return profile_model(model_name, batch, input_shape, device=device, repeats=repeats, seed=seed,
                                 model_kw=model_kw, provenance=provenance, name=name, cuts=cuts, turns=turns,
                                 memory=memory, free_backward=free_backward, timing_budget=timing_budget)
    from .graph import linearize_model
    from .networks import DEFAULT_INPUT, canonical_name, example_input, get_model

    model_name = canonical_name(model_name)
    torch.manual_seed(seed)
    model_kw = dict(model_kw or {})
    model = get_model(model_name, **model_kw).to(device)
    model.train()
    shape = tuple(input_shape) if input_shape else DEFAULT_INPUT[model_name]
    vocab = model_kw.get("vocab")       # None: the model's default (networks.TOKEN_MODELS)
    x = example_input(model_name, batch, shape, vocab=vocab, seed=seed, device=device)
    check_example_input(model_name, model, x, shape)     # a wrong input shape: one line, not a traceback
    t0 = time.perf_counter()
    loss_fn = classification_loss(seed=seed)
    lm = linearize_model(model, x, loss_fn, cuts=cuts)
    t_linearize = time.perf_counter() - t0
    from .cut_report import coarse_chain_warning, counted_operations, cut_tensors
    from .graph import MULTI_MAX_NODES, coarse_single_cuts

    graph = lm.captured.graph
    ops = counted_operations(graph)
    multi = lm.residency is not None
    instead = (f"cut where several tensors cross instead (cuts='multi'): {lm.L} stages, "
               f"{len(lm.residency.resident)} resident tensor(s)" if multi else None)
    warning = coarse_chain_warning(graph, lm.captured.groups(), what=model_name, counted=ops,
                                   unit="operations", note="views and shape queries not counted", instead=instead)
    if multi:
        why = coarse_single_cuts(lm.captured.groups(), ops) or "cuts='multi' asked for"
        extra = {"cut_rule": "multi", "linearization": LINEARIZATION_MULTI.format(max_nodes=MULTI_MAX_NODES, why=why),
                 **multi_cut_provenance(lm)}
    else:
        extra = {"cut_rule": "saved" if lm.cuts == "saved" else lm.cuts, "linearization": LINEARIZATION,
                 "cuts": cut_tensors(graph, lm.groups)}
    chain = profile_chain(
        lm.stages, x, lm.loss_stage(loss_fn), repeats=repeats, device=device, names=lm.names,
        loss_name=lm.loss_name, turns=turns, memory=memory, free_backward=free_backward, timing_budget=timing_budget,
        name=name or f"{model_name}-b{batch}-{'x'.join(map(str, shape))}-{torch.device(device).type}",
        provenance={"network": model_name, "model_kw": model_kw, "batch": batch, "input": list(shape),
                    "source": "models.networks (random initialization)", "seed": seed,
                    "loss": "cross-entropy against fixed random labels",
                    "linearize_seconds": round(t_linearize, 3),
                    "groups": [list(g) for g in lm.groups], "loss_group": list(lm.head_group),
                    "nodes": graph.number_of_nodes(), "operations": len(ops),
                    **extra,
                    **({"linearization_warning": warning} if warning else {}),
                    **(provenance or {})})
    return chain


# ------------------------------------------------------------------------------ environment, host link
def _driver_version() -> str | None:
    """The NVIDIA driver's version (pynvml, else nvidia-smi); None when neither answers."""
    try:
        import pynvml  # optional (nvidia-ml-py)

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - any failure: try nvidia-smi
        pass
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


def device_info(device="cpu") -> dict[str, Any]:
    """What an instance's provenance records about where it was measured.

    Always: ``torch``, ``deterministic_algorithms``. CUDA: ``gpu`` (the device name), ``gpu_memory_bytes``,
    ``compute_capability``, ``multiprocessors``, ``driver`` (None when neither pynvml nor nvidia-smi
    answers), ``cuda`` (torch's CUDA version), ``cudnn``, ``tf32_matmul``, ``tf32_cudnn``,
    ``cudnn_benchmark``. CPU: ``cpu`` (the processor's name). No GPU key is written for a CPU device.

    >>> sorted(k for k in device_info("cpu") if k in ("gpu", "driver", "cuda"))
    []
    """
    info: dict[str, Any] = {"torch": torch.__version__,
                            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}
    dev = torch.device(device)
    if dev.type != "cuda":
        info["cpu"] = _cpu_name()
        return info
    props = torch.cuda.get_device_properties(dev)
    info.update(gpu=props.name, gpu_memory_bytes=int(props.total_memory),
                compute_capability=f"{props.major}.{props.minor}", multiprocessors=int(props.multi_processor_count),
                driver=_driver_version(), cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
                tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
                cudnn_benchmark=bool(torch.backends.cudnn.benchmark))
    return info


#: ``memory_measurement`` of a chain profiled with ``memory="profiler"`` on CPU
PROFILER_MEMORY = ("cpu: c10 CPU allocator events of PyTorch's profiler (torch.profiler, profile_memory=True; "
                   "models.memory.ProfilerTracker, the method of models.memory.profiler_peak): every allocation and "
                   "free, compiled code included, in windows cut at each reading; exact requested bytes, allocator "
                   "rounding not seen")


def profiled_by_allocator_events(chain) -> bool:
    """Whether ``chain`` was profiled on a CPU with ``memory="profiler"`` (its provenance says so):
    ``memplan run`` then measures the executed plan and plain autograd the same way."""
    return chain.provenance.get("memory_measurement") == PROFILER_MEMORY


def measurement_notes(device="cpu", repeats: int = 3, timing: str = "isolated",
                      memory: str = "dispatch") -> dict[str, str]:
    """How each quantity of a profiled instance was measured (one line per stage-table field)."""
    cuda = _is_cuda(device)
    clock = ("CUDA events after torch.cuda.synchronize" if cuda else "time.perf_counter")
    if timing == "in-context":
        where = ("CUDA events between operations, no synchronize inside the run" if cuda
                 else "time.perf_counter between operations")
        ctx = (f"median over {max(3, repeats)} whole store-all runs of the executor after one warm-up, {where}, "
               "scaled by timing_calibration")
        notes = measurement_notes(device, repeats, "isolated", memory)
        notes["u_f"] = f"forward with autograd recording (F_all), timed in context: {ctx}"
        notes["u_b"] = f"backward of the stage, timed in context: {ctx}"
        return notes
    mem = ("caching-allocator statistics (torch.cuda.memory_allocated / max_memory_allocated, after "
           "torch.cuda.synchronize)" if cuda else "the TorchDispatchMode tracker's exact tensor-storage bytes"
           if memory == "dispatch" else "c10 CPU allocator events of PyTorch's profiler (models.memory.ProfilerTracker)")
    return {
        "u_f": f"forward with autograd recording (F_all), median of {repeats} runs after one warm-up; {clock}",
        "u_b": f"backward of the stage output with a fixed random delta, median of {repeats} runs after one "
               f"warm-up; {clock}",
        "a": "bytes of the storage of the stage output",
        "abar": f"bytes allocated by F_all and still alive after it (output + what autograd saved); {mem}",
        "delta": f"bytes of the gradient of the stage input left by B^(l+1); {mem}",
        "o_f": f"peak during the forward beyond inputs and outputs, max over F_all and the no-grad forward"
               f"{' (the loss stage L+1: F_all only, the only forward it runs)' if memory == 'profiler' else ''}; {mem}",
        "o_f_all": "F_all's own peak beyond its inputs and outputs (o_f is the larger of it and o_f_ng)",
        "o_f_ng": "the no-grad forward's own peak beyond its input and output (o_f where the stage runs F_all only)",
        "o_b": f"peak during B beyond what was stored before it and beyond delta^(l-1); {mem}",
        "W": "bytes of the stage's distinct parameters (numel x element size)",
    }


def measure_host_link(device="cuda", nbytes: int = 512 * 2**20, repeats: int = 20,
                      warmup: int = 3) -> dict[str, Any]:
    """Bandwidth of the host link, measured: copies of a pinned host buffer of ``nbytes`` to device
    memory (``h2d``) and back (``d2h``), each timed with CUDA events after a synchronize; the
    median of ``repeats`` copies after ``warmup`` untimed ones, in bytes per second.

    Returns ``{"h2d_bytes_per_s", "d2h_bytes_per_s", "buffer_bytes", "repeats", "h2d_seconds",
    "d2h_seconds", "method"}``. Raises ValueError for a device that is not CUDA: a CPU has no host
    link to measure and no number is made up for it.
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"measure_host_link: device {dev} is not a CUDA device, there is no host link to "
                         "measure (run on the GPU machine)")
    if nbytes <= 0 or repeats < 1:
        raise ValueError("measure_host_link: nbytes and repeats must be positive")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host.fill_(7)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=dev)

    def one(dst: torch.Tensor, src: torch.Tensor) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(dev)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        torch.cuda.synchronize(dev)
        return start.elapsed_time(end) / 1e3

    for _ in range(max(0, warmup)):
        one(buf, host)
        one(host, buf)
    h2d = [one(buf, host) for _ in range(repeats)]
    d2h = [one(host, buf) for _ in range(repeats)]
    del host, buf
    return {"h2d_bytes_per_s": nbytes / statistics.median(h2d), "d2h_bytes_per_s": nbytes / statistics.median(d2h),
            "buffer_bytes": int(nbytes), "repeats": int(repeats), "h2d_seconds": h2d, "d2h_seconds": d2h,
            "method": f"pinned host buffer of {nbytes} bytes <-> device buffer, Tensor.copy_(non_blocking=True) "
                      f"timed with CUDA events after torch.cuda.synchronize; median of {repeats} copies per "
                      f"direction after {warmup} untimed ones"}


def host_link_platform(link: dict[str, Any] | None, device="cuda") -> Platform | None:
    """The platform of a GPU instance: the device's memory (bytes), the measured link bandwidth (the
    slower of the two directions: the papers' offloading model has one beta for offloads and
    prefetches), one GPU, the device's name. None for a CPU device (nothing measured)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(dev)
    bw = None
    if link and link.get("h2d_bytes_per_s") and link.get("d2h_bytes_per_s"):
        bw = float(min(link["h2d_bytes_per_s"], link["d2h_bytes_per_s"]))
    return Platform(memory=float(props.total_memory), bandwidth=bw, gpus=1, name=props.name)
