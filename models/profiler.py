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
  peak of the no-grad forward - omega_a). The papers' model has one o_f for F_all and F_ck; taking the
  larger of the two keeps the simulator an upper bound for both (for F_all it then over-estimates by
  the difference, e.g. up to ~30% during a transformer block's F_all on CPU; peaks of whole sequences
  stay within a few percent, see experiments/runtime_check.py);
- ``o_b^l``: peak during B^l beyond what was stored before it and beyond delta^{l-1};
- ``W^l``: bytes of the distinct parameters of the stage.

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

Parameter gradients: before measuring, every parameter gets a zero ``.grad``; backward then adds into
it in place, so the transient gradient a stage produces counts in ``o_b`` while the persistent
gradient buffers (weights' memory, not activations) do not appear in the activation figures.
"""
from __future__ import annotations

import datetime as _dt
import statistics
import time
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .chain import Chain


# ----------------------------------------------------------------------------------- memory tracking
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
        torch.cuda.synchronize(self.device)
        self.base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize(self.device)
        return False

    @property
    def current(self) -> int:
        return torch.cuda.memory_allocated(self.device) - self.base

    @property
    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device) - self.base

    def reset_peak(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def is_tracked(self, t: torch.Tensor) -> bool:  # pragma: no cover - CUDA only
        return True


def memory_tracker(device) -> Any:
    """:class:`TensorMemoryTracker` for CPU tensors, :class:`CudaMemoryTracker` for CUDA."""
    dev = torch.device(device)
    return CudaMemoryTracker(dev) if dev.type == "cuda" else TensorMemoryTracker()


def storage_bytes(t) -> int:
    """Bytes of the distinct storages behind the tensors in ``t`` (a tensor or a structure of them)."""
    seen: dict[int, int] = {}
    for x in tree_leaves(t):
        if isinstance(x, torch.Tensor):
            seen[_key(x)] = x.untyped_storage().nbytes()
    return int(sum(seen.values()))


def saved_tensor_bytes(fn: Callable[[], Any], exclude: Sequence[torch.Tensor] = ()) -> tuple[Any, int]:
    """Run ``fn()`` with saved-tensor hooks and return (its result, bytes of the distinct storages that
    autograd saved for the backward pass, leaving out those of ``exclude``: inputs, parameters)."""
    skip = {_key(t) for t in exclude}
    seen: dict[int, int] = {}

    def pack(t):
        k = _key(t)
        if k not in skip and k:
            seen[k] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, int(sum(seen.values()))


# ---------------------------------------------------------------------------------------- profiling
def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _as_input(x: torch.Tensor, grad: bool) -> torch.Tensor:
    x = x.detach()
    if grad and x.is_floating_point():
        x.requires_grad_(True)
    return x


def _params(module) -> list[torch.nn.Parameter]:
    return list({id(p): p for p in module.parameters()}.values()) if isinstance(module, torch.nn.Module) else []


def profile_stage(stage: Callable, x: torch.Tensor, *, repeats: int = 3, device="cpu",
                  input_grad: bool = True, delta: torch.Tensor | None = None) -> tuple[dict[str, float], torch.Tensor]:
    """Measure one stage on sample input ``x`` (see the module docstring). Returns (values, output).

    ``values`` has keys ``uf``, ``ub`` (seconds), ``wa``, ``wabar``, ``wd_in`` (bytes of the gradient of
    the input), ``of``, ``ob``, ``weights`` (bytes), ``saved`` (bytes autograd saved, by hooks).
    """
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
        torch.autograd.backward(out, delta)
    del out, xi
    # timings
    tf, tb = [], []
    for _ in range(max(1, repeats)):
        xi = _as_input(x, input_grad)
        _sync(device)
        t0 = time.perf_counter()
        out = stage(xi)
        _sync(device)
        t1 = time.perf_counter()
        if needs_backward:
            torch.autograd.backward(out, delta)
            _sync(device)
        t2 = time.perf_counter()
        tf.append(t1 - t0)
        tb.append(t2 - t1)
        del out, xi
    # memory: no-grad forward
    xi = _as_input(x, input_grad)
    with memory_tracker(device) as tr, torch.no_grad():
        out = stage(xi)
        tr.sync()
        peak_ng, kept_ng = tr.peak, tr.current
    wa = storage_bytes(out)
    del out
    # memory: forward with autograd, then backward
    xi = _as_input(x, input_grad)
    buffers = list(stage.buffers()) if isinstance(stage, torch.nn.Module) else []
    _, saved = saved_tensor_bytes(lambda: stage(xi), exclude=[xi, *params, *buffers])  # hooks: what autograd keeps
    xi = _as_input(x, input_grad)
    with memory_tracker(device) as tr:
        out = stage(xi)
        tr.sync()
        peak_f, kept_f = tr.peak, tr.current
        wabar = kept_f + (0 if tr.is_tracked(out) else wa)
        wd_in = 0
        ob = 0.0
        if needs_backward:
            tr.reset_peak()
            base = tr.current
            torch.autograd.backward(out, delta)
            tr.sync()
            wd_in = storage_bytes(xi.grad) if xi.grad is not None else 0
            ob = max(0.0, tr.peak - base - wd_in)
        del out
    of = max(0.0, peak_f - kept_f, peak_ng - kept_ng)
    with torch.no_grad():
        y = stage(_as_input(x, False))
    values = dict(uf=statistics.median(tf), ub=statistics.median(tb) if needs_backward else 0.0, wa=float(wa),
                  wabar=float(max(wabar, wa)), wd_in=float(wd_in), of=float(of), ob=float(ob),
                  weights=float(sum(p.numel() * p.element_size() for p in params)), saved=float(saved))
    return values, y.detach()


def classification_loss(num_classes: int | None = None, seed: int = 0) -> Callable:
    """Cross-entropy against fixed random labels drawn on first use (works for N x C logits and for
    N x T x V language-model logits)."""
    state: dict[str, torch.Tensor] = {}

    def loss(logits: torch.Tensor) -> torch.Tensor:
        c = logits.shape[-1] if num_classes is None else num_classes
        flat = logits.reshape(-1, logits.shape[-1])
        if "target" not in state or state["target"].shape[0] != flat.shape[0]:
            g = torch.Generator().manual_seed(seed)
            state["target"] = torch.randint(0, c, (flat.shape[0],), generator=g).to(logits.device)
        return torch.nn.functional.cross_entropy(flat, state["target"])

    return loss


def profile_chain(stages: Sequence[Callable], x: torch.Tensor, loss_fn: Callable | None = None, *,
                  repeats: int = 3, device="cpu", names: Sequence[str] | None = None, name: str = "chain",
                  provenance: dict[str, Any] | None = None, input_grad: bool = True) -> Chain:
    """Profile stages 1..L and the loss stage L+1 on sample input ``x`` and build the Chain (seconds,
    bytes). ``input_grad``: whether B^1 computes delta^0 (the gradient of the network input), as the
    papers' chains do; with an integer input (token ids) there is no delta^0 and omega_delta^0 = 0."""
    loss_fn = loss_fn or classification_loss()
    x = x.to(device)
    L = len(stages)
    rows = []
    a = x
    for l, stage in enumerate(list(stages) + [loss_fn], start=1):
        is_loss = l == L + 1
        vals, a_next = profile_stage(stage, a, repeats=repeats, device=device,
                                     input_grad=(input_grad or l > 1),
                                     delta=torch.ones((), device=device) if is_loss else None)
        rows.append(vals)
        a = a_next
    wa = [float(storage_bytes(x))] + [r["wa"] for r in rows]
    wabar = [wa[0]] + [r["wabar"] for r in rows]
    wd = [r["wd_in"] for r in rows] + [4.0]     # delta^{l-1} from B^l; delta^{L+1} = dLoss/dLoss (fp32)
    if not (input_grad and x.is_floating_point()):
        wd[0] = 0.0
    stage_names = ["input"] + (list(names) if names else [f"stage{l}" for l in range(1, L + 1)]) + ["loss"]
    prov = {
        "device": str(torch.device(device)) if torch.device(device).type != "cuda"
        else f"cuda ({torch.cuda.get_device_name(device)})",
        "torch": torch.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "threads": torch.get_num_threads(),
        "timing": f"median of {repeats} runs after one warm-up (paper 004 section 5.1)",
        "memory_measurement": ("cpu: exact tensor-storage bytes from a TorchDispatchMode allocation tracker "
                               "(models.profiler.TensorMemoryTracker); allocator rounding and kernel-internal "
                               "scratch buffers are not seen" if torch.device(device).type == "cpu" else
                               "cuda: torch.cuda.memory_allocated / max_memory_allocated"),
        "saved_by_autograd_bytes": [r["saved"] for r in rows],
        **(provenance or {}),
    }
    return Chain(
        uf=[0.0] + [r["uf"] for r in rows], ub=[0.0] + [r["ub"] for r in rows],
        wa=wa, wabar=wabar, wd=wd, of=[0.0] + [r["of"] for r in rows], ob=[0.0] + [r["ob"] for r in rows],
        weights=[0.0] + [r["weights"] for r in rows], name=name, stage_names=stage_names, provenance=prov)


def profile_model(model_name: str, batch: int, input_shape: Sequence[int] | None = None, *, device="cpu",
                  repeats: int = 3, seed: int = 0, model_kw: dict[str, Any] | None = None) -> Chain:
    """Build a zoo model, linearize it (models.graph) and profile its stages: the chain of
    ``memplan profile``."""
    from .graph import linearize_model
    from .networks import DEFAULT_INPUT, canonical_name, example_input, get_model

    model_name = canonical_name(model_name)
    torch.manual_seed(seed)
    model_kw = dict(model_kw or {})
    model = get_model(model_name, **model_kw).to(device)
    model.train()
    shape = tuple(input_shape) if input_shape else DEFAULT_INPUT[model_name]
    vocab = model_kw.get("vocab", 50257)
    x = example_input(model_name, batch, shape, vocab=vocab, seed=seed, device=device)
    lm = linearize_model(model, x)
    chain = profile_chain(
        lm.stages, x, classification_loss(seed=seed), repeats=repeats, device=device, names=lm.names,
        name=f"{model_name}-b{batch}-{'x'.join(map(str, shape))}-{torch.device(device).type}",
        provenance={"network": model_name, "model_kw": model_kw, "batch": batch, "input": list(shape),
                    "source": "models.networks (random initialization)", "seed": seed,
                    "loss": "cross-entropy against fixed random labels",
                    "linearization": "models.graph.linearize: minimal single-tensor groups (papers 001/003 "
                                     "virtual layers) on the torch.fx graph",
                    "groups": [list(g) for g in lm.groups]})
    return chain
