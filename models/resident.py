"""Gradients of resident tensors (multi-tensor cuts, issue 30) accumulated in autograd's own order.

A resident tensor v (one that crosses two or more cuts, :func:`models.graph.residency`) is held by
the executor as one leaf whose gradient (its state's ``grad``, :class:`_State`) collects what every
reader's backward hands back. Plain autograd sums those contributions in the input buffer of v's
producer, one at a time, in the order the engine delivers them: on one device's ready queue, nodes run by decreasing sequence number
(creation order reversed), so the contributions arrive reader by reader from the last one created,
and within one reader in the order of its inputs. A left fold ``((c1 + c2) + c3) + ...``.

A leaf passed whole to a stage gets, instead, the sum of that stage's contributions from the leaf's
own input buffer, then ``.grad += that sum``: ``(c1 + c2) + (c3 + c4)`` when two stages read v
twice each. Floating-point addition is not associative, so the gradients differed from autograd's
in the last bits (1e-8 on a small Transformer's cross-attention, NASNet cells).

So every **use** of a resident input inside a stage goes through :func:`resident_use`
(:func:`models.graph.multi_stage_modules` puts one call per occurrence of the input in a node's
arguments, created in reverse order of the arguments so that the engine reaches them in the order
it would have delivered them). For a plain tensor it is the identity (the traced model, the
stages run one after the other). For a leaf marked by :func:`mark_resident` (the executor's and the
profiler's resident leaves) it is an identity autograd function whose backward adds its one
contribution into that gradient at once (the first contribution of a step is copied, the
others added) and hands nothing to the leaf itself: the same left fold, in the same order, as
autograd; the gradients are bit-identical (``tests/test_multi_cut.py``). No buffer of v's size
lives through a stage's backward either: each contribution is added as it comes. The executor's
leaves have no ``.grad`` until the first contribution, which makes it (since 2026-11-29; before, a
zero ``.grad`` made with the leaf lived from the forward on: 4 of the 6 MiB by which a Llama-style
stack's store-all exceeded plain autograd's peak); :attr:`models.chain.Chain.resident_grads` models that.

The use's graph node keeps the tensor's state (:class:`_State`: the gradient, the leaves), not the
leaf: it takes a detached alias of the value and a zero-size anchor leaf as its inputs (since
2026-11-29). With the leaf as its input, the engine's accumulator node of the leaf kept the leaf, and
with it the value, in every reader's graph until that reader's backward; now nothing of a reader's
graph keeps the value unless one of its operations saves it, so that the executor can let a value
no backward saves go after its last reader's forward, as autograd does (NASNet-A's cell outputs,
read by the next two cells' ReLUs: store-all 1.128 -> 1.007 of autograd's peak at 32x32).
"""
from __future__ import annotations

import weakref

import torch

_ATTR = "_memplan_resident"


class _State:
    """One resident tensor's gradient and the leaves that hold its value (a recomputation makes
    another). ``grad`` is the gradient itself: it outlives the leaves where the executor lets an
    unsaved value go after its last forward reader (``resident_free``, :mod:`models.runtime`), as
    autograd frees such a tensor in the forward and keeps only the gradient flowing to its producer.
    ``anchor``: a zero-size leaf that requires grad, the input through which a use is recorded in the
    graph (a use does not take the leaf itself as an input: the engine's accumulator node of a leaf
    keeps the leaf, and with it the value, until the reader's backward)."""

    __slots__ = ("fresh", "leaves", "grad", "anchor")

    def __init__(self, leaf: torch.Tensor) -> None:
        self.fresh = True       # no contribution yet: the next one is copied into .grad (autograd keeps the first as is)
        self.leaves = [weakref.ref(leaf)]   # the leaves of one resident tensor (a recomputation makes another)
        self.grad = None
        self.anchor = torch.empty(0, dtype=leaf.dtype, device=leaf.device, requires_grad=True)

    def live(self) -> list:
        return [t for t in (ref() for ref in self.leaves) if t is not None]

    def accumulate(self, g: torch.Tensor) -> None:
        """One contribution, in the order the engine delivers it: the first is copied (into a live
        leaf's ``.grad`` where it has one: the profiler's zero gradient, made before its measures),
        the others added. Only ``grad`` is assigned, never a leaf's ``.grad``: the executor reads the
        gradient here (assigning a leaf's ``.grad`` checks it, about 14 us a time)."""
        if self.fresh:
            self.fresh = False
            held = next((t.grad for t in self.live() if t.grad is not None), None)
            if held is not None:
                held.copy_(g)
                self.grad = held
            else:               # the executor's leaves: allocated at the first contribution
                self.grad = g.detach().clone()
        else:
            self.grad.add_(g)


def mark_resident(leaf: torch.Tensor) -> torch.Tensor:
    """Mark ``leaf`` (a leaf that requires grad, with a zero ``.grad`` or none yet: then the first
    contribution makes it, as autograd makes a gradient when the first one arrives) so that
    :func:`resident_use` accumulates into its ``.grad`` contribution by contribution. Returns ``leaf``."""
    if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
        setattr(leaf, _ATTR, _State(leaf))
    return leaf


def state_of(leaf) -> _State | None:
    """The state :func:`mark_resident` gave ``leaf`` (None for a tensor without one)."""
    return getattr(leaf, _ATTR, None)


def attach_resident(st: _State, new: torch.Tensor) -> torch.Tensor:
    """``new`` (a leaf that requires grad) becomes a leaf of the resident tensor whose state is ``st``
    (a recomputation of a value whose earlier leaves may all be gone): its readers add into ``st``'s
    gradient. Returns ``new``."""
    setattr(new, _ATTR, st)
    st.leaves = [r for r in st.leaves if r() is not None] + [weakref.ref(new)]
    return new


def fresh_start(leaf: torch.Tensor) -> None:
    """Forget the contributions so far (the profiler zeroes ``.grad`` between its measures, or sets
    it to None): the gradient is the leaf's ``.grad`` again, and the next contribution is the first."""
    st = getattr(leaf, _ATTR, None)
    if st is not None:
        st.fresh = True
        st.grad = leaf.grad


class _Use(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, t, st):
        ctx.st = st
        ctx.set_materialize_grads(False)
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        if g is not None:
            ctx.st.accumulate(g)
        return None, None, None


def resident_use(t):
    """One use of a resident input inside a stage (see the module's docstring). The use's graph node
    keeps the tensor's state, not the tensor: where no operation saves the value, nothing of the
    reader's graph keeps it alive."""
    st = getattr(t, _ATTR, None) if isinstance(t, torch.Tensor) else None
    if st is not None and t.requires_grad and torch.is_grad_enabled():
        return _Use.apply(st.anchor, t.detach(), st)
    return t
