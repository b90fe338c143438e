"""Gradients of resident tensors (multi-tensor cuts, issue 30) accumulated in autograd's own order.

A resident tensor v (one that crosses two or more cuts, :func:`models.graph.residency`) is held by
the executor as one leaf whose ``.grad`` collects what every reader's backward hands back. Plain
autograd sums those contributions in the input buffer of v's producer, one at a time, in the order
the engine delivers them: on one device's ready queue, nodes run by decreasing sequence number
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
contribution into the leaf's ``.grad`` at once (the first contribution of a step is copied, the
others added) and hands nothing to the leaf itself: the same left fold, in the same order, as
autograd; the gradients are bit-identical (``tests/test_multi_cut.py``). No buffer of v's size
lives through a stage's backward either: each contribution is added as it comes. The executor's
leaves have no ``.grad`` until the first contribution, which makes it (since 2026-11-29; before, a
zero ``.grad`` made with the leaf lived from the forward on: 4 of the 6 MiB by which a Llama-style
stack's store-all exceeded plain autograd's peak); :attr:`models.chain.Chain.resident_grads` models that.
"""
from __future__ import annotations

import weakref

import torch

_ATTR = "_memplan_resident"


class _State:
    __slots__ = ("fresh", "leaves")

    def __init__(self, leaf: torch.Tensor) -> None:
        self.fresh = True       # no contribution yet: the next one is copied into .grad (autograd keeps the first as is)
        self.leaves = [weakref.ref(leaf)]   # the leaves of one resident tensor (a recomputation makes another)

    def set_grad(self, grad: torch.Tensor) -> None:
        """Every live leaf of the tensor gets ``grad`` as its ``.grad`` (one tensor for all)."""
        for ref in self.leaves:
            leaf = ref()
            if leaf is not None:
                leaf.grad = grad


def mark_resident(leaf: torch.Tensor) -> torch.Tensor:
    """Mark ``leaf`` (a leaf that requires grad, with a zero ``.grad`` or none yet: then the first
    contribution makes it, as autograd makes a gradient when the first one arrives) so that
    :func:`resident_use` accumulates into its ``.grad`` contribution by contribution. Returns ``leaf``."""
    if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
        setattr(leaf, _ATTR, _State(leaf))
    return leaf


def carry_resident(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``new`` (a leaf on a recomputed value's storage) takes over ``old``'s ``.grad`` and the state of
    its contributions (a reader whose graph still holds ``old`` keeps adding to that same ``.grad``
    once it exists; before, to the one ``new`` holds, which is the same tensor). Returns ``new``."""
    st = getattr(old, _ATTR, None)
    if st is not None:
        setattr(new, _ATTR, st)
        st.leaves.append(weakref.ref(new))
    if old.grad is not None:
        new.grad = old.grad
    return new


def fresh_start(leaf: torch.Tensor) -> None:
    """Forget the contributions so far (the profiler zeroes ``.grad`` between its measures)."""
    st = getattr(leaf, _ATTR, None)
    if st is not None:
        st.fresh = True


class _Use(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, leaf):
        ctx.leaf = leaf
        ctx.set_materialize_grads(False)
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        if g is not None:
            leaf = ctx.leaf
            st = getattr(leaf, _ATTR)
            if st.fresh:
                if leaf.grad is None:   # the executor's leaves: allocated at the first contribution
                    st.set_grad(g.detach().clone())
                else:                   # the profiler's: a zero .grad made before its measures
                    leaf.grad.copy_(g)
                st.fresh = False
            else:
                leaf.grad.add_(g)
        return None, None


def resident_use(t):
    """One use of a resident input inside a stage (see the module's docstring)."""
    if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled() and hasattr(t, _ATTR):
        return _Use.apply(t, t)
    return t
