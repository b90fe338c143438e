"""A loss stage computed over chunks of tokens: the language-model head and its loss, one chunk at a time.

A language model's loss stage L+1 (:class:`models.graph.HeadLoss`: the head folded into the loss,
:func:`models.graph.merge_unsaved_cuts`) turns a^L (batch x seq x width) into logits of batch x seq x
vocab and a cross-entropy over them. Run whole, its backward holds the log-softmax that the
cross-entropy saved, the gradient reaching it and the logits' gradient at once: three tensors of
batch x seq x vocab (GPT-2 at batch 2, sequence 256, vocabulary 50257: 98 MiB each). That is the
floor of every re-materialization plan of such a chain: rotor can recompute the blocks, not split a
stage.

:class:`ChunkedHeadLoss` is the same loss stage run over ``chunks`` slices of the token dimension
(dimension 1), a re-materialization of the logits along the tokens:

- forward (one autograd node, no graph inside): for each chunk the head's logits and the chunk's sum
  of token losses, then the logits are freed; the loss is the sum over the chunks divided by the
  mean's denominator (the number of counted tokens). What it keeps for the backward: its input a^L
  (stored anyway) and the random-number state;
- backward: for each chunk, the logits recomputed with autograd from the chunk of a^L, the chunk's
  loss weighted by ``grad / count`` and back-propagated at once (the head's parameter gradients are
  accumulated into their ``.grad``, the chunk's input gradient copied into delta^L). At most one
  chunk's logits, log-softmax and their gradients live at a time; what does not shrink with the
  chunks is each chunk's transient gradient of the head's weight (vocab x width), added into ``.grad``
  in place.

Gradients equal those of the unchunked stage up to float rounding (the loss is a mean over every
counted token: each chunk's sum is weighted by 1/count, not by 1/chunks); the executor
(:func:`models.runtime.execute`), the profiler (:func:`models.profiler.profile_stage`) and the
simulator see it as any loss stage, with its own sizes and overheads: ``abar^{L+1}`` is the loss value
and the RNG state, ``o_f`` one chunk's logits and loss temporaries, ``o_b`` one chunk's recomputed
logits with their gradients and the head's weight gradient.

Which losses: the loss must say how it splits over tokens, the :class:`TokenLoss` protocol
(``token_sum`` and ``token_count``). :class:`TokenCrossEntropy` (``loss(logits, targets)``, the
mean cross-entropy over every token) and :func:`models.profiler.classification_loss` (fixed random
labels) implement it; an arbitrary ``loss_fn`` is not chunked (:func:`token_loss` says which).
:func:`chunked_loss_check` runs the chunked and the whole stage on a sample input and refuses a head
that mixes tokens (its chunked loss or input gradient differs).

Compiled chunks (``ChunkedHeadLoss(..., backend=...)``, the loss stage of a chain of compiled stages,
:mod:`models.compiled`): each chunk's computation runs through ``torch.compile(fullgraph=True,
dynamic=False)`` as a function of tensors alone (the chunk and its targets,
:meth:`TokenLoss.chunk_targets`), so one graph serves every chunk of a size (two sizes at most). A
linear head: the chunk's logits are one matmul (the compiler would call the same kernel) and the
compiled function is the loss of the logits, whose compiled backward gives their gradient (with
Inductor the log-softmax and its gradient fuse: about two chunks of logits alive, against four
eagerly); the weight's gradient is added in place as above. Any other head: the head and the loss
compiled together, the chunk's backward its compiled backward (the head's parameter gradients
returned whole, one transient of their size per chunk, then added by autograd). Both passes run the
same training graph (the forward with autograd recording, its saved tensors dropped with the chunk),
from the same random-number state: the backward draws the forward's masks, with any backend. A
compiled chunked stage refuses to run under a dispatch mode, as compiled stages do; measure it with
:func:`models.memory.profiler_peak`.

``grad_in_forward=True`` (compiled chunks, a linear head): no recomputation. The forward computes each
chunk's logits, loss and logits' gradient, adds ``g^T x`` and ``sum g`` into buffers of the weight's
and the bias's size and writes ``g W`` into the input's gradient; the backward only scales the three
by ``grad / count`` and adds the parameters' into ``.grad``. One matmul per chunk fewer (the logits are
not computed twice), the buffers (the head's weight, its bias and a^L's size) held from the forward to
the backward: another point of the memory/time trade-off, offered to rotor beside the other.

Under ``torch.autocast`` the backward recomputes in the forward's autocast state (recorded with the
random-number state; the backward usually runs after the autocast block, as ``loss.backward()``):
the recomputed logits are the forward's (bfloat16), so the loss's gradients are those of the loss
computed. A linear head's weight and bias gradients are accumulated in their own dtype (float32) chunk
by chunk, where eager autograd rounds one bfloat16 matmul over all tokens: equal to bfloat16's
precision, not bit for bit. With bfloat16 parameters and no autocast the head's gradients are
accumulated in bfloat16, one rounding per chunk where eager autograd rounds once: relative error to
float64's 3.2e-3 at 4 chunks, 5.0e-3 at 16 and 7.3e-3 at 64, against eager's 2.4e-3 (a 2000 x 64 head,
512 tokens); a float32 accumulator would cost twice the weight's bfloat16 size in the backward. Every
target ignored: the loss is nan (0/0) as eager's, the gradients
zeros as eager's.

Limits: the nested backward accumulates the head's parameter gradients into ``.grad`` itself, as
``torch.utils.checkpoint``'s reentrant variant does, so the stage is for ``loss.backward()`` (what the
executor runs), not for ``torch.autograd.grad(loss, params)``. A head with dropout draws its masks
per chunk (replayed identically in the backward), not as the unchunked head would.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch

#: the token dimension of a chunked loss stage's input and output (batch x seq x ...)
TOKEN_DIM = 1


class TokenLoss:
    """The protocol of a loss that splits over tokens (dimension 1 of the model's output): the loss of
    an output ``out`` (batch x seq x ...) is ``sum over chunks of token_sum(chunk, lo, hi, shape, *targets)
    / token_count(shape, *targets)``, where ``chunk = out[:, lo:hi]`` and ``shape`` is ``out``'s shape.
    A subclass implements both; ``__call__(out, *targets)`` is the loss of the whole output."""

    def token_sum(self, chunk: torch.Tensor, lo: int, hi: int, shape: Sequence[int], *targets) -> torch.Tensor:
        raise NotImplementedError

    def token_count(self, shape: Sequence[int], *targets) -> float:
        raise NotImplementedError

    def chunk_targets(self, lo: int, hi: int, shape: Sequence[int], *targets) -> tuple:
        """Optional, for compiled chunks (:class:`ChunkedHeadLoss` with a ``backend``): the tensors
        that tokens ``lo:hi`` of the loss read, such that ``chunk_sum(chunk, *chunk_targets(lo, hi,
        shape, *targets)) == token_sum(chunk, lo, hi, shape, *targets)``. A compiled function of the
        chunk and these tensors alone (no ``lo``, ``hi`` in it) is one graph for every chunk of a size."""
        raise NotImplementedError

    def chunk_sum(self, chunk: torch.Tensor, *chunk_targets) -> torch.Tensor:
        """Optional, with :meth:`chunk_targets`: the chunk's sum of token losses."""
        raise NotImplementedError

    @property
    def compilable(self) -> bool:
        """Whether the loss gives its chunks' targets (:meth:`chunk_targets` and :meth:`chunk_sum`)."""
        return (type(self).chunk_targets is not TokenLoss.chunk_targets
                and type(self).chunk_sum is not TokenLoss.chunk_sum)


def token_loss(loss_fn: Any) -> TokenLoss | None:
    """``loss_fn`` as a :class:`TokenLoss`, or None when it does not say how it splits over tokens."""
    return loss_fn if isinstance(loss_fn, TokenLoss) else None


def _flat(logits: torch.Tensor) -> torch.Tensor:
    return logits.reshape(-1, logits.shape[-1])


class TokenCrossEntropy(TokenLoss):
    """``loss(logits, targets)``: the mean cross-entropy over every token whose target is not
    ``ignore_index`` (logits batch x seq x vocab, targets batch x seq class indices, or flattened:
    batch*seq), as
    ``torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))``. A
    :class:`TokenLoss`: the loss stage of a chain built with it can be chunked."""

    def __init__(self, ignore_index: int = -100):
        self.ignore_index = int(ignore_index)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(_flat(logits), targets.reshape(-1), ignore_index=self.ignore_index)

    def token_sum(self, chunk, lo, hi, shape, targets):
        return self.chunk_sum(chunk, *self.chunk_targets(lo, hi, shape, targets))

    def chunk_targets(self, lo, hi, shape, targets) -> tuple:
        # the targets as the logits' tokens (batch x seq): flattened ones (batch*seq,) as well, paired
        # with the logits' rows as __call__ pairs them
        return (targets.reshape(*shape[:-1])[:, lo:hi],)

    def chunk_sum(self, chunk, targets):
        return torch.nn.functional.cross_entropy(_flat(chunk), targets.reshape(-1),
                                                 ignore_index=self.ignore_index, reduction="sum")

    def token_count(self, shape, targets) -> float:
        return float((targets != self.ignore_index).sum())


class FixedLabelCrossEntropy(TokenLoss):
    """Cross-entropy against fixed random labels drawn on first use (``seed``; drawn again when the
    number of rows changes), for N x C logits and for N x T x V language-model logits (one label per
    token): what :func:`models.profiler.classification_loss` returns. A :class:`TokenLoss`."""

    def __init__(self, num_classes: int | None = None, seed: int = 0):
        self.num_classes, self.seed = num_classes, seed
        self.target: torch.Tensor | None = None

    def _targets(self, shape: Sequence[int], device) -> torch.Tensor:
        rows = 1
        for d in shape[:-1]:
            rows *= int(d)
        if self.target is None or self.target.shape[0] != rows:
            c = shape[-1] if self.num_classes is None else self.num_classes
            g = torch.Generator().manual_seed(self.seed)
            self.target = torch.randint(0, c, (rows,), generator=g)
        if device is not None and self.target.device != torch.device(device):
            self.target = self.target.to(device)
        return self.target

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        flat = _flat(logits)
        return torch.nn.functional.cross_entropy(flat, self._targets(logits.shape, logits.device))

    def token_sum(self, chunk, lo, hi, shape):
        return self.chunk_sum(chunk, *self.chunk_targets(lo, hi, shape, device=chunk.device))

    def chunk_targets(self, lo, hi, shape, device=None) -> tuple:
        return (self._targets(shape, device).view(*shape[:-1])[:, lo:hi],)

    def chunk_sum(self, chunk, targets):
        return torch.nn.functional.cross_entropy(_flat(chunk), targets.reshape(-1), reduction="sum")

    def token_count(self, shape) -> float:
        rows = 1
        for d in shape[:-1]:
            rows *= int(d)
        return float(rows)


def chunk_bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    """``chunks`` consecutive slices of ``range(n)``, as equal as can be (the first ``n % chunks`` one
    longer). ``chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]``."""
    if not 1 <= chunks <= n:
        raise ValueError(f"chunk_bounds: chunks={chunks} must be between 1 and the {n} tokens")
    q, r = divmod(n, chunks)
    out, lo = [], 0
    for i in range(chunks):
        hi = lo + q + (1 if i < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def _rng_get(device) -> tuple:
    return (torch.get_rng_state(), torch.cuda.get_rng_state(device) if torch.device(device).type == "cuda" else None)


def _autocast_get(device) -> tuple:
    """``torch.autocast``'s state of the forward on the CPU and on ``device``'s type: ``((kind, enabled,
    dtype), ...)`` and whether its weight cache is on; :func:`_autocast_set` enters it again."""
    kinds = ["cpu"] + ([torch.device(device).type] if torch.device(device).type not in ("cpu",) else [])
    from memplan.models.runtime import autocast_state

    state = [(kind, *st) for kind in kinds if (st := autocast_state(kind)) is not None]   # None: one autocast does not know
    return tuple(state), torch.is_autocast_cache_enabled()


def _autocast_set(state: tuple) -> contextlib.ExitStack:
    """A context with the autocast state :func:`_autocast_get` recorded (on, with its dtype, or off)."""
    kinds, cache = state
    stack = contextlib.ExitStack()
    for kind, enabled, dtype in kinds:
        stack.enter_context(torch.autocast(kind, dtype=dtype, enabled=enabled, cache_enabled=cache))
    return stack


def linear_head(head: Any) -> torch.nn.Linear | None:
    """The ``torch.nn.Linear`` that ``head`` is: an ``nn.Linear``, or an fx ``GraphModule`` (a stage of
    :func:`models.graph.stage_modules`) whose only operation is a call of one on its input; else None."""
    if isinstance(head, torch.nn.Linear):
        return head
    graph = getattr(head, "graph", None)
    if graph is None or not hasattr(head, "get_submodule"):
        return None
    nodes = list(graph.nodes)
    ops = [n for n in nodes if n.op not in ("placeholder", "output")]
    inputs = [n for n in nodes if n.op == "placeholder"]
    out = [n for n in nodes if n.op == "output"]
    if len(ops) != 1 or len(inputs) != 1 or len(out) != 1 or ops[0].op != "call_module":
        return None
    n = ops[0]
    if tuple(n.args) != (inputs[0],) or n.kwargs or tuple(out[0].args) != (n,):
        return None
    mod = head.get_submodule(n.target)
    return mod if isinstance(mod, torch.nn.Linear) else None


def _add_grad(p: torch.Tensor, fill: Callable[[torch.Tensor], None]) -> None:
    """``fill(p.grad)`` adds a gradient into ``p.grad`` in place (allocated as zeros if missing)."""
    if not p.requires_grad:
        return
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    fill(p.grad)


class _ChunkedFn(torch.autograd.Function):
    """The chunked head + loss (see the module): forward without a graph, backward chunk by chunk."""

    @staticmethod
    def forward(ctx, stage, x, *params):
        targets = stage.targets()
        bounds = chunk_bounds(x.shape[TOKEN_DIM], stage.chunks)
        ctx.rng = _rng_get(x.device)
        ctx.autocast = _autocast_get(x.device)
        total, shape = None, None
        if stage.compiled_chunk is not None:
            shape = stage.logits_shape(x)
            want_x = bool(ctx.needs_input_grad[1])
            lin = stage.compiled_linear
            if stage.grad_in_forward:      # gradients of every chunk now, scaled in the backward
                gx = torch.empty_like(x) if want_x else None
                gw, gb = (None if p is None or not p.requires_grad else torch.zeros_like(p)
                          for p in (lin.weight, lin.bias))
            for lo, hi in bounds:          # the training graph, as in the backward: the same random draws
                ct = stage.chunk_targets(lo, hi, shape, targets, x.device)
                if stage.grad_in_forward:
                    s = _linear_chunk(lin, x, lo, hi, lambda z, ct=ct: stage.compiled_chunk(z, *ct), None, gx,
                                      into=(gw, gb))
                elif lin is not None:
                    with torch.no_grad():
                        z = torch.nn.functional.linear(x[:, lo:hi], lin.weight, lin.bias)
                    with torch.enable_grad():
                        s = stage.compiled_chunk(z.requires_grad_(True), *ct).detach()
                    del z
                else:
                    with torch.enable_grad():
                        xc = x[:, lo:hi].detach().requires_grad_(want_x)
                        s = stage.compiled_chunk(xc, *ct).detach()
                total = s if total is None else total.add_(s)
            count = stage.loss.token_count(shape, *targets)
            ctx.stage, ctx.bounds, ctx.shape, ctx.count, ctx.n_params = stage, bounds, shape, count, len(params)
            if stage.grad_in_forward:
                ctx.grads = (gx, gw, gb)
            else:
                ctx.save_for_backward(x)
            return total / count
        for lo, hi in bounds:
            out = stage.head(x[:, lo:hi])
            if shape is None:
                shape = list(out.shape)
                shape[TOKEN_DIM] = x.shape[TOKEN_DIM]
            s = stage.loss.token_sum(out, lo, hi, shape, *targets)
            del out
            total = s if total is None else total.add_(s)
        count = stage.loss.token_count(shape, *targets)
        ctx.stage, ctx.bounds, ctx.shape, ctx.count, ctx.n_params = stage, bounds, shape, count, len(params)
        ctx.save_for_backward(x)
        return total / count

    @staticmethod
    def backward(ctx, grad):
        stage = ctx.stage
        if stage.grad_in_forward:
            return _scaled_grads(ctx, grad)
        (x,) = ctx.saved_tensors
        targets = stage.targets()
        want_x = ctx.needs_input_grad[1]
        gx = torch.empty_like(x) if want_x else None
        scale = _scale(grad, ctx.count)
        lin = linear_head(stage.head)
        cuda = x.device.type == "cuda"
        # the recomputation in the forward's autocast state (the backward usually runs after the autocast
        # block, as loss.backward(): the logits recomputed in float32 were another function than the
        # loss's, and a bfloat16 input met the float32 weight)
        with torch.random.fork_rng(devices=[x.device] if cuda else [], enabled=True), _autocast_set(ctx.autocast):
            torch.set_rng_state(ctx.rng[0])
            if cuda:
                torch.cuda.set_rng_state(ctx.rng[1], x.device)
            for lo, hi in ctx.bounds:
                if stage.compiled_linear is not None:
                    ct = stage.chunk_targets(lo, hi, ctx.shape, targets, x.device)
                    _linear_chunk(stage.compiled_linear, x, lo, hi, lambda z, ct=ct: stage.compiled_chunk(z, *ct),
                                  scale, gx)
                elif stage.compiled_chunk is not None:
                    _compiled_chunk(stage, x, lo, hi, ctx.shape, targets, scale, gx)
                elif lin is not None:
                    _linear_chunk(lin, x, lo, hi, lambda z: stage.loss.token_sum(z, lo, hi, ctx.shape, *targets),
                                  scale, gx)
                else:
                    _autograd_chunk(stage, x, lo, hi, ctx.shape, targets, scale, gx)
        return (None, gx) + (None,) * ctx.n_params


def _scale(grad: torch.Tensor, count: float) -> torch.Tensor:
    """The weight of each chunk's sum in the backward: ``grad / count``; zero where no token is counted
    (every target ignored): the mean is then nan (0/0) and eager autograd's gradients are zeros (an
    ignored token's gradient is 0), where ``inf`` times the zero gradients gave nan."""
    grad = grad.detach()
    return grad / count if count else torch.zeros_like(grad)


def _scaled_grads(ctx, grad):
    """The backward of a stage that computed its gradients in the forward (``grad_in_forward``): each
    scaled in place by ``grad / count``, the parameters' added into ``.grad`` (or become it)."""
    gx, gw, gb = ctx.grads
    ctx.grads = None
    scale = _scale(grad, ctx.count)
    lin = ctx.stage.compiled_linear
    with torch.no_grad():
        for p, g in ((lin.weight, gw), (lin.bias, gb)):
            if g is None:
                continue
            g.mul_(scale)
            if p.grad is None:
                p.grad = g
            else:
                p.grad.add_(g)
        if gx is not None and ctx.needs_input_grad[1]:
            gx.mul_(scale)
        else:
            gx = None
    return (None, gx) + (None,) * ctx.n_params


def _autograd_chunk(stage, x, lo, hi, shape, targets, scale, gx) -> None:
    """One chunk's backward through any head: its logits recomputed with autograd and the chunk's
    weighted loss back-propagated (the head's parameter gradients accumulate into ``.grad``, each
    through a transient gradient of the parameter's size)."""
    with torch.enable_grad():
        xc = x[:, lo:hi].detach()
        if gx is not None:
            xc.requires_grad_(True)
        out = stage.head(xc)
        s = stage.loss.token_sum(out, lo, hi, shape, *targets) * scale
        del out
        if s.requires_grad:
            torch.autograd.backward(s)
        del s
    if gx is not None:
        gx[:, lo:hi].copy_(xc.grad)


def _compiled_chunk(stage, x, lo, hi, shape, targets, scale, gx) -> None:
    """One chunk's backward through the compiled chunk function (:class:`ChunkedHeadLoss` with a
    ``backend``): its training graph run again on the chunk and its compiled backward given the
    chunk's weight ``scale`` (autograd adds the parameters' gradients it returns into ``.grad``)."""
    with torch.enable_grad():
        xc = x[:, lo:hi].detach().requires_grad_(gx is not None)
        s = stage.compiled_chunk(xc, *stage.chunk_targets(lo, hi, shape, targets, x.device))
        if s.requires_grad:
            torch.autograd.backward(s, scale.to(s.dtype).reshape(s.shape))
        del s
    if gx is not None:
        gx[:, lo:hi].copy_(xc.grad)


def _linear_chunk(lin, x, lo, hi, chunk_sum: Callable, scale, gx, into: tuple | None = None) -> torch.Tensor:
    """One chunk's backward through a linear head ``z = x W^T + b``: the logits z recomputed without
    a graph, their gradient g from the loss alone (``chunk_sum(z)``, the chunk's sum of token losses:
    eager, or compiled; weighted by ``scale``, None: 1), then ``W.grad += g^T x`` and
    ``b.grad += sum g`` in place (no transient weight-sized gradient, which the autograd path pays
    once per chunk) and the input's gradient ``g W``. ``into``: ``(buffer of W, buffer of b)`` to add
    the gradients into instead of ``.grad`` (None entries skipped). Returns the chunk's sum (detached)."""
    xc = x[:, lo:hi]
    with torch.no_grad():
        z = torch.nn.functional.linear(xc, lin.weight, lin.bias)
    z.requires_grad_(True)
    with torch.enable_grad():
        s = chunk_sum(z)
        (g,) = torch.autograd.grad(s, z, None if scale is None else scale.to(s.dtype).reshape(s.shape))
    s = s.detach()
    del z
    with torch.no_grad():
        g2 = g.reshape(-1, g.shape[-1])
        x2 = xc.reshape(-1, xc.shape[-1])
        # under autocast g (and x) may be bfloat16 where the weight is float32: accumulated in the weight's
        # dtype (an in-place addmm_ does not autocast)
        if into is None:
            _add_grad(lin.weight, lambda w: w.addmm_(g2.t().to(w.dtype), x2.to(w.dtype)))
            if lin.bias is not None:
                _add_grad(lin.bias, lambda b: b.add_(g2.sum(0, dtype=b.dtype)))
        else:
            if into[0] is not None:
                into[0].addmm_(g2.t().to(into[0].dtype), x2.to(into[0].dtype))
            if into[1] is not None:
                into[1].add_(g2.sum(0, dtype=into[1].dtype))
        if gx is not None:
            gx[:, lo:hi].copy_(torch.matmul(g, lin.weight))
    return s


class ChunkedHeadLoss(torch.nn.Module):
    """The loss stage L+1 ``loss(head(x), *targets())`` computed over ``chunks`` slices of the tokens
    (see the module). ``loss`` is a :class:`TokenLoss`; ``targets`` returns the loss's target tensors
    of the current step (none for :class:`FixedLabelCrossEntropy`)."""

    def __init__(self, head: Callable, loss: TokenLoss, chunks: int, targets: Callable[[], tuple] | None = None,
                 backend: str | None = None, options: dict | None = None, tag: str = "",
                 grad_in_forward: bool = False):
        super().__init__()
        if not isinstance(loss, TokenLoss):
            raise TypeError(f"ChunkedHeadLoss: the loss must be a TokenLoss, got {type(loss).__name__}")
        if int(chunks) < 1:
            raise ValueError(f"ChunkedHeadLoss: chunks={chunks} must be >= 1")
        self.head = head
        self.loss = loss
        self.chunks = int(chunks)
        self.targets = targets or (lambda: ())
        self.backend, self.options = backend, options
        self.compiled_chunk = None
        self.compiled_linear = None
        self.grad_in_forward = bool(grad_in_forward)
        self._shapes: dict[tuple, list[int]] = {}
        if backend is not None:
            if not loss.compilable:
                raise TypeError(f"ChunkedHeadLoss: compiled chunks need a loss that gives its chunks' targets "
                                f"(TokenLoss.chunk_targets and chunk_sum); {type(loss).__name__} does not")
            from .compiled import INDUCTOR_STAGE_OPTIONS, _fresh_caller

            if options is None and backend == "inductor":
                self.options = options = dict(INDUCTOR_STAGE_OPTIONS)

            def chunk_fn(xc, *chunk_targets):
                return loss.chunk_sum(head(xc), *chunk_targets)

            def loss_fn(z, *chunk_targets):
                return loss.chunk_sum(z, *chunk_targets)

            self.compiled_linear = linear_head(head)
            self.compiled_chunk = torch.compile(
                _fresh_caller(chunk_fn if self.compiled_linear is None else loss_fn, f"chunk_{tag or f'{id(self):x}'}"),
                backend=backend, fullgraph=True, dynamic=False, options=options)
        if self.grad_in_forward and self.compiled_linear is None:
            raise ValueError("ChunkedHeadLoss: grad_in_forward needs compiled chunks (a backend) and a linear head")

    def chunk_targets(self, lo: int, hi: int, shape, targets: tuple, device) -> tuple:
        """The loss's tensors of tokens ``lo:hi`` (:meth:`TokenLoss.chunk_targets`), on ``device``."""
        return tuple(t.to(device) for t in self.loss.chunk_targets(lo, hi, shape, *targets))

    def logits_shape(self, x: torch.Tensor) -> list[int]:
        """The head's output shape on ``x`` (compiled chunks: the loss's targets depend on it): the
        head run once on a one-token slice without autograd, random-number state put back."""
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in self._shapes:
            with torch.no_grad(), torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
                out = self.head(x[:, :1])
            shape = list(out.shape)
            shape[TOKEN_DIM] = x.shape[TOKEN_DIM]
            self._shapes[key] = shape
        return self._shapes[key]

    def forward(self, x):
        if self.compiled_chunk is not None:
            from torch.utils._python_dispatch import _get_current_dispatch_mode

            if _get_current_dispatch_mode() is not None:
                from .compiled import DispatchModeError

                raise DispatchModeError(
                    "compiled chunked loss stage: called under a TorchDispatchMode, where torch.compile does not "
                    "run compiled code; measure it with models.memory.profiler_peak or "
                    "profile_chain(memory='profiler')")
        params = list({id(p): p for p in self.parameters() if p.requires_grad}.values())
        return _ChunkedFn.apply(self, x, *params)


def chunked_loss_check(whole: Callable, chunked: Callable, x: torch.Tensor, *, rtol: float = 1e-4) -> str:
    """Why ``chunked`` (a :class:`ChunkedHeadLoss`) cannot replace the loss stage ``whole`` on input
    ``x``, or ``""`` when it can: both run forward and backward on ``x`` (the parameters' ``.grad``
    receive both backwards: the caller restores them); the losses must agree within ``rtol`` and the
    input gradients within ``rtol`` of their norm. A head that mixes tokens, or reads a shape that a
    chunk does not have, fails here."""
    if x.dim() < 2 or x.shape[TOKEN_DIM] < 2:
        return f"the loss stage's input {tuple(x.shape)} has no token dimension to chunk"
    res = []
    for fn in (whole, chunked):
        xi = x.detach().clone().requires_grad_(x.is_floating_point())
        try:
            loss = fn(xi)
            if loss.requires_grad:
                loss.backward()
        except Exception as e:  # noqa: BLE001 - any failure of the chunked head: not chunked, the reason said
            return f"the head does not run on a chunk of tokens ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
        res.append((float(loss.detach()), xi.grad))
    (l0, g0), (l1, g1) = res
    if abs(l1 - l0) > rtol * max(1.0, abs(l0)):
        return f"the chunked loss {l1!r} differs from the whole stage's {l0!r} (does the head mix tokens?)"
    if (g0 is None) != (g1 is None):
        return "the chunked stage's input gradient differs from the whole stage's"
    if g0 is not None and float((g1 - g0).norm()) > rtol * max(float(g0.norm()), 1e-30):
        return "the chunked stage's input gradient differs from the whole stage's (does the head mix tokens?)"
    return ""
