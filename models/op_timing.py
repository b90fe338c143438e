"""Measured per-operation costs for PyTorch's activation-memory-budget partitioner.

PyTorch's partitioner, under ``torch._functorch.config.activation_memory_budget``, chooses which
tensors of the joint forward-backward graph to save and which to recompute with a knapsack whose item
values are *runtime estimates* of the operations (``activation_memory_budget_runtime_estimator``):
``"flops"`` by default (FLOPs counted by ``torch.utils.flop_counter``: every pointwise operation, a
ReLU as a GELU, counts 0 and is floored at 1, so all of them tie), or ``"profile"``, which benchmarks
each node on a GPU only. memplan's own solvers (:mod:`memplan._compile_budget`: the exact knapsack
and the peak-aware MILP) take the same estimates, so they inherit the ties.

:func:`measured_estimator` returns an estimator (a ``torch._inductor.custom_graph_pass.
CustomRuntimeEstimator``, which the config accepts) that **times each candidate operation**: the
node's aten operation runs on real tensors with the shapes, strides and dtypes of its inputs (floating
ones drawn from a normal distribution, integer and boolean ones zero, a valid index), ``repeats`` times
after one warm-up, and the median in seconds is its cost. On a CPU it reads ``time.perf_counter``
around each call (``time.process_time`` with one torch thread: the CPU time of the process, which
other programs' load does not stretch); on CUDA, events around each call after a synchronize. Calls with equal signatures
(operation, shapes, strides, dtypes, device, the other arguments) are timed once (``cache``). An
operation that cannot be run that way (an argument it cannot be given) falls back to PyTorch's FLOP
estimate divided by :data:`FALLBACK_FLOPS_PER_SECOND`, so that one graph mixes only seconds; such
nodes are counted in ``fallbacks``.

These are **isolated** timings (each operation alone), the procedure paper 004 section 5.1 uses and
issue 27 found 30-61% too high on a GPU for whole steps, because launch latency counts for every small
operation. Here only the *ranking* of recompute costs inside one graph matters (which tensors are
cheapest to recompute), and isolated times rank a pointwise operation by its size where the FLOP
count gives them all the same value.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, NamedTuple

#: the FLOP rate that turns PyTorch's FLOP estimate into seconds for an operation that could not be
#: timed (a round number of a few GFLOP/s, one CPU core's order of magnitude); only fallbacks use it
FALLBACK_FLOPS_PER_SECOND = 1e10

_CLASS = None


def _estimator_class():
    """``MeasuredRuntime``, built on first use (its base class lives in torch, imported lazily)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from torch._inductor.custom_graph_pass import CustomRuntimeEstimator

    class MeasuredRuntime(CustomRuntimeEstimator):
        """See the module docstring. ``calls``: nodes estimated; ``timed``: distinct signatures
        timed; ``fallbacks``: nodes given the FLOP estimate instead."""

        def __init__(self, repeats: int = 5):
            self.repeats = int(repeats)
            self.cache: dict[Any, float] = {}
            self.calls = 0
            self.timed = 0
            self.fallbacks = 0

        def __call__(self, node) -> float:
            self.calls += 1
            try:
                key, args, kwargs = _materialize(node)
            except _Untimable:
                return self._fallback(node)
            if key in self.cache:
                return self.cache[key]
            try:
                t = _time_call(node.target, args, kwargs, self.repeats)
            except Exception:  # noqa: BLE001 - an operation that refuses these arguments: FLOP estimate
                return self._fallback(node)
            self.timed += 1
            self.cache[key] = t
            return t

        def _fallback(self, node) -> float:
            import torch._functorch.config as fconfig
            from torch._functorch.partitioners import estimate_runtime

            self.fallbacks += 1
            with fconfig.patch(activation_memory_budget_runtime_estimator="flops"):
                return float(estimate_runtime(node)) / FALLBACK_FLOPS_PER_SECOND

        def uuid(self):
            return f"memplan.MeasuredRuntime/1/{self.repeats}"

    _CLASS = MeasuredRuntime
    return MeasuredRuntime


def measured_estimator(repeats: int = 5):
    """A runtime estimator for ``torch._functorch.config.activation_memory_budget_runtime_estimator``
    that times each operation (see the module docstring)."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"measured_estimator: repeats must be an integer >= 1, got {repeats!r}")
    return _estimator_class()(repeats=repeats)


class _Untimable(Exception):
    """The node has an argument this module cannot turn into a real value."""


class _TensorSpec(NamedTuple):
    """What a real tensor for a node's argument is made from."""

    shape: tuple
    stride: tuple
    dtype: Any
    device: Any


def _materialize(node) -> tuple[Any, tuple, dict]:
    """(signature key, real args, real kwargs) for ``node``'s inputs."""
    import torch
    import torch.fx as fx
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._pytree import tree_map

    if not isinstance(node.target, torch._ops.OpOverload):
        raise _Untimable(str(node.target))
    sig: list = [str(node.target)]

    def spec(x):
        if isinstance(x, fx.Node):
            v = x.meta.get("val")
            if isinstance(v, torch.Tensor):
                t = _TensorSpec(tuple(int(d) for d in v.shape), tuple(int(d) for d in v.stride()), v.dtype, v.device)
                sig.append(("t", t.shape, t.stride, str(t.dtype), str(t.device)))
                return t
            if isinstance(v, (int, float, bool)):
                sig.append(("v", v))
                return v
            raise _Untimable(f"argument {x} has meta value {type(v).__name__}")
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise _Untimable("symbolic argument")
        sig.append(("c", repr(x)))
        return x

    def build(x):
        if not isinstance(x, _TensorSpec):
            return x
        t = torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device=x.device)
        return t.normal_() if x.dtype.is_floating_point or x.dtype.is_complex else t.zero_()

    specs = tree_map(spec, (tuple(node.args), dict(node.kwargs)))
    with unset_fake_temporarily():
        args, kwargs = tree_map(build, specs, is_leaf=lambda x: isinstance(x, _TensorSpec))
    return tuple(sig), args, kwargs


def _time_call(target, args, kwargs, repeats: int) -> float:
    """Median seconds of ``target(*args, **kwargs)`` over ``repeats`` runs after one warm-up."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._mode_utils import no_dispatch

    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in list(args) + list(kwargs.values()))
    # one torch thread: the process's CPU time, which other programs on a shared machine do not stretch
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    with unset_fake_temporarily(), no_dispatch(), torch.no_grad():
        target(*args, **kwargs)
        times = []
        for _ in range(repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                target(*args, **kwargs)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = clock()
                target(*args, **kwargs)
                times.append(clock() - t0)
    return max(statistics.median(times), 1e-9)
