"""Chain stages compiled by ``torch.compile``: rotor across stages, the compiler within a stage (issue 28).

memplan's chain plans decide, per stage, whether F_all keeps what the backward needs or the forward
is run again later (paper 004); PyTorch's compiler decides, per tensor inside a graph, what to save
and what to recompute, and fuses kernels. :func:`compile_stages` puts the two together: each stage of
a linearized model (:func:`models.graph.linearize_model`), the loss stage L+1 included, becomes a
:class:`CompiledStage` that runs the stage through ``torch.compile(backend=...)``, so that
:func:`models.runtime.execute` runs a rotor plan with compiled stages, unchanged:

- ``F_all^l`` calls the compiled stage with autograd recording: AOTAutograd's min-cut partitioner
  chooses what the stage saves for its backward (its default ``activation_memory_budget``), and
  the output's ``grad_fn`` is the compiled backward (``CompiledFunctionBackward``);
- ``F_ck^l`` and ``F_none^l`` call it under ``torch.no_grad()``: Dynamo compiles a second,
  inference graph for that grad mode (nothing saved);
- ``B^l`` back-propagates through the compiled backward, which returns the parameters' gradients
  that autograd adds into ``.grad``; a fused backward group's node pre-hooks sit on the compiled
  backward nodes of the junctions (checked by ``tests/test_compiled_stages.py``: gradients equal
  eager autograd's within float32 rounding).

``compile_stages(config=...)`` compiles every stage under its own setting of
``torch._functorch.config`` (e.g. ``activation_memory_budget`` below 1 with a keep-or-recompute
solver: the partitioner then saves fewer bytes for a stage's backward and recomputes more in it);
the setting is patched around every call of the stage, so that the compile at the first call of each
grad mode, and any recompile, sees it, whatever the caller's setting.

Each stage is compiled through its own code object (a fresh function calling the stage), so that
Dynamo's per-code cache holds one stage's graphs only and no recompile limit is shared between
stages, and with ``fullgraph=True``: a stage Dynamo cannot capture in one graph raises at its first
call instead of running partly eagerly.

Measuring: ``torch.compile`` does not run compiled frames while a non-infrastructure
``TorchDispatchMode`` is active (it runs them eagerly, or, with ``fullgraph=True``, refuses), so the
project's dispatch-mode tracker cannot measure compiled stages. A :class:`CompiledStage` refuses to
run under one (:class:`DispatchModeError`); profile them with ``memory="profiler"``
(:func:`models.profiler.profile_chain`) and measure executions with
:func:`models.memory.profiler_peak`.

What compiling per stage costs, measured (ResNet-50, batch 2, Inductor, CPU): the partitioner does
not know that the chain keeps the stage's output in abar anyway, so a ReLU stage saves its 1-byte mask
besides the output (3.9 MiB kept against eager's 3.1); a compiled backward returns all of the stage's
parameter gradients before autograd adds them into ``.grad`` (a weight-sized transient in ``o_b``,
which eager autograd's per-operation accumulation spreads out); no fusion across a cut. What it wins:
pointwise chains fused without temporaries and recomputed from their input instead of saved
(``tanh(x) * sigmoid(x)`` keeps its output only, eager keeps two more tensors of its size).

Not supported: multi-tensor cuts' resident tensors are passed through (the attributes are copied) but
the profiler's ``memory="profiler"`` mode refuses them; dynamic shapes (``dynamic=False``: a new
shape compiles again); random operations are replayed by the executor's RNG state handling, but the
compiled kernels draw other numbers than eager ones.
"""
from __future__ import annotations

import types
from typing import Callable, Sequence

import torch


#: Inductor options of a compiled stage (``compile_stages(options=None)`` with ``backend="inductor"``).
#: Inductor's layout optimization turns a graph's convolutions channels-last; a stage's inputs and
#: outputs are contiguous again at every cut, so per stage it converted and saved copies of weights
#: and activations: on ResNet-50 (batch 2, 160x160, CPU) F_all of ``layer4.1`` kept 10.7 MiB against
#: 1.3 MiB without it (1.2 MiB eager), and forward plus backward took 25.0 against 22.5 ms
#: (``layer1.0``: 28.0 against 26.1 ms).
INDUCTOR_STAGE_OPTIONS = {"layout_optimization": False}


class DispatchModeError(RuntimeError):
    """A compiled stage was called under a ``TorchDispatchMode`` (such as the dispatch-mode memory
    tracker), where ``torch.compile`` would not run its compiled code."""


def _fresh_caller(stage: Callable, tag: str) -> Callable:
    """``run(*args) -> stage(*args)`` with its own code object (Dynamo keys its cache on the code)."""

    def run(*args):
        return stage(*args)

    name = f"memplan_stage_{tag}"
    return types.FunctionType(run.__code__.replace(co_name=name), run.__globals__, name, None, run.__closure__)


class CompiledStage(torch.nn.Module):
    """One chain stage run through ``torch.compile(backend=backend, fullgraph=True, dynamic=False)``.

    The original stage is kept as ``stage`` (a submodule when it is an ``nn.Module``), so the
    parameters and buffers are the stage's own: the executor's shared-parameter check, the
    profiler's ``W^l`` and gradient accumulation see the same tensors. ``resident_in`` and
    ``resident_out`` (multi-tensor cuts) are copied; ``resident_free`` is not (compiled code decides what
    it saves, so no resident value is let go early, and its chain charges them whole). ``compiled`` holds Dynamo's entry point.
    ``config``: ``torch._functorch.config`` settings patched around every call (None: the caller's)."""

    def __init__(self, stage: Callable, backend: str, tag: str, options: dict | None = None,
                 config: dict | None = None):
        super().__init__()
        if isinstance(stage, torch.nn.Module):
            self.stage = stage
        else:
            self._fn = stage
        for attr in ("resident_in", "resident_out"):
            if hasattr(stage, attr):
                setattr(self, attr, getattr(stage, attr))
        self.backend = backend
        self.options = options
        self.config = dict(config) if config else None
        self.compiled = torch.compile(_fresh_caller(stage, tag), backend=backend, fullgraph=True, dynamic=False,
                                      options=options)

    @property
    def original(self) -> Callable:
        return self.stage if "stage" in self._modules else self._fn

    def forward(self, *args):
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not None:
            raise DispatchModeError(
                "compiled stage: called under a TorchDispatchMode (the dispatch-mode memory tracker?), where "
                "torch.compile does not run compiled code; measure compiled stages with "
                "models.memory.profiler_peak or profile_chain(memory='profiler')")
        if self.config is None:
            return self.compiled(*args)
        import torch._functorch.config as fconfig

        with fconfig.patch(**self.config):
            return self.compiled(*args)


def compile_stages(stages: Sequence[Callable], loss_stage: Callable, backend: str, *,
                   options: dict | None = None, tag: str = "",
                   config: dict | None = None) -> tuple[list[CompiledStage], CompiledStage]:
    """``(compiled stages 1..L, compiled loss stage L+1)``: each a :class:`CompiledStage` of the
    given stage with ``backend`` (``"inductor"``, ``"aot_eager_decomp_partition"``, ...). Nothing is
    compiled yet: each stage compiles at its first call in each grad mode (with autograd: forward
    and, at the first backward, backward; without: an inference graph). ``options``: Inductor's
    (``torch.compile(options=...)``); None gives :data:`INDUCTOR_STAGE_OPTIONS` with Inductor and
    nothing with another backend (which takes no options). ``config``: ``torch._functorch.config``
    settings every stage compiles and runs under (:class:`CompiledStage`), e.g.
    ``{"activation_memory_budget": 0.5, "activation_memory_budget_solver": ...}``."""
    if options is None and backend == "inductor":
        options = dict(INDUCTOR_STAGE_OPTIONS)
    tag = tag or f"{id(stages):x}"
    out = [CompiledStage(s, backend, f"{tag}_{l}", options, config) for l, s in enumerate(stages, start=1)]
    return out, CompiledStage(loss_stage, backend, f"{tag}_{len(out) + 1}", options, config)


def stage_graph_count(stage: CompiledStage) -> int:
    """How many graphs Dynamo holds for ``stage`` (one per grad mode it was called in): a check that
    the stage really runs compiled code."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    code = getattr(stage.compiled, "_torchdynamo_orig_callable", stage.compiled).__code__
    return len(_debug_get_cache_entry_list(code))
