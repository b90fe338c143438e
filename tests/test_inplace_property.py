"""In-place writes in a traced model, on every program (hypothesis): a forward made of a random sequence
of in-place and out-of-place operations on two activations (``h.mul_``, ``h += k``,
``F.relu(h, inplace=True)``, a write through a view of ``h``, linear layers, ...) is either refused by
the linearization (a view read after a write it cannot order) or cut into a chain whose stages, run
one after the other, give eager autograd's loss and every parameter gradient. Before
``models.graph._order_writes`` a write whose result was not used was dropped by dead-code elimination
(another loss, silently)."""
from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from memplan.models.graph import linearize_model  # noqa: E402

pytestmark = pytest.mark.torch

nn = torch.nn
F = torch.nn.functional

OPS = ("lin", "mul_", "iadd", "k=", "relu_k", "tanh", "relu_inplace", "view", "v_mul_", "h+k")


class _Program(nn.Module):
    """``forward`` runs ``ops`` (names of :data:`OPS`) on h (the first linear layer's output) and k."""

    def __init__(self, ops):
        super().__init__()
        self.ops = tuple(ops)
        self.lins = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        h, k, v = self.lins[0](x), None, None
        n = 0
        for op in self.ops:
            if op == "lin":
                n += 1
                h, v = self.lins[n % 3](h), None
            elif op == "mul_":
                h.mul_(0.5)
            elif op == "iadd" and k is not None:
                h += k
            elif op == "k=":
                k = h * 1.5
            elif op == "relu_k" and k is not None:
                k.relu_()
            elif op == "tanh":
                h, v = torch.tanh(h), None
            elif op == "relu_inplace":
                F.relu(h, inplace=True)
            elif op == "view":
                v = h[:, :4]
            elif op == "v_mul_" and v is not None:
                v.mul_(2.0)
            elif op == "h+k" and k is not None:
                h, v = h + k, None
        return h if k is None else h + k


def _loss(out):
    return (out * out).sum()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=8))
def test_a_chain_of_a_program_with_in_place_writes_trains_as_the_program(ops):
    torch.manual_seed(0)
    model = _Program(ops)
    x = torch.randn(4, 8)
    ref = copy.deepcopy(model)
    try:
        ref_loss = _loss(ref(x))
        ref_loss.backward()
    except RuntimeError:            # autograd itself refuses (a value saved for backward written in place)
        assume(False)
    try:
        lm = linearize_model(model, x, _loss)
    except ValueError as e:         # refused: the one case a chain cannot order
        assert "a view of it taken before, is read after it" in str(e)
        return
    a = x
    for stage in lm.stages:
        a = stage(a)
    loss = lm.loss_stage(_loss)(a)
    loss.backward()
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-5, abs=1e-6)
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=n)
