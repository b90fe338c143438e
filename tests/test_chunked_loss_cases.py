"""The chunked loss stage (models.chunked_loss.ChunkedHeadLoss) against eager autograd on the cases a
user's language model meets: the loss value and every gradient of ``loss_fn(model(x), y).backward()``
on a deep copy, for chunk counts that do not divide the tokens, batch 1, ignored tokens (whole chunks
of them, all of them, ``ignore_index=0``), flattened targets, heads with and without bias, soft-capped
or scaled logits, weights tied to the embedding, and ``torch.autocast`` (bfloat16, the backward after
the autocast block as ``loss.backward()`` runs it, in the eager, the compiled and the gradients-in-the-
forward variants), at the stage and through ``BudgetSearch``'s measured plans.

Fixed here (each test says what failed): under autocast the backward recomputed the logits with
autocast off (float32 logits: the gradients of another function than the loss's, ~0.3% off, silently;
a bfloat16 head input met the float32 weight and the backward raised, so the search refused to chunk);
flattened targets (batch*seq,), which ``TokenCrossEntropy`` itself accepts, made the chunked stage
raise (the search refused, blaming the head)."""
from __future__ import annotations

import contextlib
import copy

import pytest

torch = pytest.importorskip("torch")

from memplan.models.chunked_loss import ChunkedHeadLoss, TokenCrossEntropy  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

F = torch.nn.functional
BACKEND = "aot_eager_decomp_partition"
C, V = 8, 50


def _autocast(on: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()


def _rel(g, r) -> float:
    g, r = g.double(), r.double()
    n = float(r.norm())
    return float((g - r).norm()) / n if n > 0 else float(g.abs().max())


class Cap(torch.nn.Module):
    """Logit soft-capping: ``cap * tanh(z / cap)``."""

    def __init__(self, bias=True):
        super().__init__()
        self.lin = torch.nn.Linear(C, V, bias=bias)

    def forward(self, x):
        return 3.0 * torch.tanh(self.lin(x) / 3.0)


class Temp(torch.nn.Module):
    """Logits over a temperature."""

    def __init__(self, bias=True):
        super().__init__()
        self.lin = torch.nn.Linear(C, V, bias=bias)

    def forward(self, x):
        return self.lin(x) / 0.7


def _head(kind: str, bias: bool = True):
    return {"linear": lambda: torch.nn.Linear(C, V, bias=bias),
            "norm+linear": lambda: torch.nn.Sequential(torch.nn.LayerNorm(C), torch.nn.Linear(C, V, bias=bias)),
            "softcap": lambda: Cap(bias), "temperature": lambda: Temp(bias)}[kind]()


def _stage_vs_eager(head, loss, x0, targets, chunks, *, autocast=False, backend=None, grad_in_forward=False):
    """The chunked stage and the eager whole stage (a deep copy of ``head``) on the same input: the
    forward under autocast where asked, the backward after the block (``loss.backward()``). Returns
    ``(chunked loss, eager loss, {name: (chunked grad, eager grad)})``, ``"x"`` the input's."""
    ref = copy.deepcopy(head)
    x = x0.clone().requires_grad_(True)
    with _autocast(autocast):
        whole = loss(ref(x), targets)
    whole.backward()
    stage = ChunkedHeadLoss(head, loss, chunks, targets=lambda: (targets,), backend=backend,
                            grad_in_forward=grad_in_forward)
    xc = x0.clone().requires_grad_(True)
    with _autocast(autocast):
        got = stage(xc)
    got.backward()
    grads = {"x": (xc.grad, x.grad)}
    for (name, p), r in zip(head.named_parameters(), ref.parameters()):
        grads[name] = (p.grad, r.grad)
    return float(got.detach()), float(whole.detach()), grads


def _targets(kind: str, B: int, T: int):
    torch.manual_seed(1)
    y = torch.randint(0, V, (B, T))
    if kind == "ignored chunks":         # the first half of the tokens (whole chunks) and a few more ignored
        y[:, :T // 2] = -100
        y[0, -3:] = -100
    elif kind == "ignore_index=0":
        y = y % 5
    elif kind == "flat":
        y = y.reshape(-1)
    return y


@pytest.mark.parametrize("head_kind,bias", [("linear", True), ("linear", False), ("norm+linear", True),
                                            ("softcap", True), ("temperature", False)])
@pytest.mark.parametrize("B,T,chunks,target_kind", [
    (2, 37, 8, "plain"),              # 37 tokens in 8 chunks (5 of 5, 3 of 4)
    (1, 37, 8, "ignored chunks"),     # batch 1, the first chunks all ignored
    (2, 12, 12, "ignore_index=0"),    # one token a chunk
    (2, 37, 8, "flat"),               # targets (B*T,), as TokenCrossEntropy itself takes them
])
def test_stage_equals_eager(head_kind, bias, B, T, chunks, target_kind):
    """Loss, input gradient and every parameter gradient of the chunked stage equal eager autograd's
    of the whole stage, on every head kind and target layout. Flattened targets raised IndexError
    (``targets[:, lo:hi]`` of a 1-d tensor) before; the search then refused to chunk, blaming the head."""
    torch.manual_seed(0)
    head = _head(head_kind, bias)
    x0 = torch.randn(B, T, C)
    y = _targets(target_kind, B, T)
    loss = TokenCrossEntropy(ignore_index=0 if target_kind == "ignore_index=0" else -100)
    got, whole, grads = _stage_vs_eager(head, loss, x0, y, chunks)
    assert got == pytest.approx(whole, rel=1e-6)
    for name, (g, r) in grads.items():
        assert g is not None, name
        assert _rel(g, r) <= 1e-5, name


@pytest.mark.parametrize("backend,grad_in_forward", [(None, False), (BACKEND, False), (BACKEND, True)])
def test_all_tokens_ignored(backend, grad_in_forward):
    """Every target ignored: eager's mean over no token is nan (0/0) and its gradients are zeros (the
    ignored tokens' gradient is 0); the chunked stage's the same, not nan gradients (1/count is inf)."""
    torch.manual_seed(0)
    head = torch.nn.Linear(C, V)
    y = torch.full((2, 10), -100)
    got, whole, grads = _stage_vs_eager(head, TokenCrossEntropy(), torch.randn(2, 10, C), y, 4,
                                        backend=backend, grad_in_forward=grad_in_forward)
    assert whole != whole and got != got          # nan, both
    for name, (g, r) in grads.items():
        assert torch.equal(r, torch.zeros_like(r)), name
        assert g is not None and torch.equal(g, torch.zeros_like(g)), name


@pytest.mark.parametrize("backend,grad_in_forward", [(BACKEND, False), (BACKEND, True)])
def test_compiled_flat_targets(backend, grad_in_forward):
    """Compiled chunks with flattened targets (B*T,): the chunks' targets are the flattened tensor
    taken as the logits' tokens, as eager pairs them (they raised IndexError before)."""
    torch.manual_seed(0)
    head = torch.nn.Linear(C, V)
    y = _targets("flat", 2, 10)
    y[3] = -100
    got, whole, grads = _stage_vs_eager(head, TokenCrossEntropy(), torch.randn(2, 10, C), y, 4,
                                        backend=backend, grad_in_forward=grad_in_forward)
    assert got == pytest.approx(whole, rel=1e-6)
    for name, (g, r) in grads.items():
        assert _rel(g, r) <= 1e-5, name


# under autocast: what the chunked stage computes with the same operations as eager (the logits, hence
# the loss, the input's gradient and a layer norm's before the head) is eager's to float32 rounding; a
# linear head's weight and bias gradients are accumulated in float32 chunk by chunk where eager rounds
# one bfloat16 matmul over all tokens: to bfloat16's precision (2^-8)
TIGHT, BF16 = 1e-4, 2e-2


@pytest.mark.parametrize("head_kind,backend,grad_in_forward", [
    ("linear", None, False), ("norm+linear", None, False),
    ("linear", BACKEND, False), ("linear", BACKEND, True), ("norm+linear", BACKEND, False)])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_autocast_backward_recomputes_in_the_forwards_precision(head_kind, backend, grad_in_forward, x_dtype):
    """Forward under ``torch.autocast("cpu", bfloat16)``, ``backward()`` after the block (as the
    executor runs it). The backward recomputed the logits with autocast off: from a float32 input,
    float32 logits, gradients ~0.3% off eager's (within bfloat16's tolerance, but of another function
    than the loss computed); from a bfloat16 input (a head after a linear layer), the float32 weight
    met the bfloat16 input and the backward raised (and the in-place weight-gradient ``addmm_`` raised
    on bfloat16 logits' gradients under autocast, the search's check inside its autocast block). Now
    the recomputation runs in the forward's autocast state."""
    torch.manual_seed(0)
    head = _head(head_kind)
    x0 = torch.randn(2, 10, C).to(x_dtype)
    y = _targets("plain", 2, 10)
    y[0, :4] = -100
    got, whole, grads = _stage_vs_eager(head, TokenCrossEntropy(), x0, y, 4, autocast=True, backend=backend,
                                        grad_in_forward=grad_in_forward)
    assert got == pytest.approx(whole, rel=1e-3)
    for name, (g, r) in grads.items():
        assert g is not None and g.dtype == r.dtype, name
        same_ops = x_dtype == torch.float32 and (name == "x" or name.startswith("0."))
        assert _rel(g, r) <= (TIGHT if same_ops else BF16), name


# -- end to end: BudgetSearch's least-memory plan (the chunked loss stage) against eager autograd ------

B2, T2, C2, V2 = 2, 32, 16, 2000


class TinyLM(torch.nn.Module):
    """Embedding, two residual MLP blocks, then the head: ``"norm"`` a layer norm and a linear layer
    (``tied``: the linear's weight is the embedding's), ``"act"`` a linear layer and a GELU before the
    head (under autocast its input is bfloat16), ``"functional"`` a layer norm and ``F.linear`` with the
    embedding's weight, over a temperature."""

    def __init__(self, kind="norm", tied=False):
        super().__init__()
        self.kind = kind
        self.emb = torch.nn.Embedding(V2, C2)
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(C2, 4 * C2), torch.nn.GELU(),
                                                               torch.nn.Linear(4 * C2, C2)) for _ in range(2)])
        self.pre = torch.nn.LayerNorm(C2) if kind != "act" else torch.nn.Linear(C2, C2)
        if kind != "functional":
            self.head = torch.nn.Linear(C2, V2, bias=False)
            if tied:
                self.head.weight = self.emb.weight

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = h + b(h)
        if self.kind == "act":
            return self.head(F.gelu(self.pre(h)))
        if self.kind == "functional":
            return F.linear(self.pre(h), self.emb.weight) / 0.7
        return self.head(self.pre(h))


@pytest.mark.parametrize("kind,tied,autocast,compiled,target_kind", [
    ("norm", True, False, False, "ignored chunks"),
    ("functional", True, False, True, "flat"),
    ("norm", False, True, False, "plain"),
    ("act", False, True, False, "plain"),
    ("norm", True, True, True, "plain"),
])
def test_budget_search_least_plan_equals_eager(kind, tied, autocast, compiled, target_kind):
    """BudgetSearch (no fractions) chunks the loss stage and its least-memory plan (with
    ``compiled_stages=True`` the compiled chain's least chunked plan too) trains as eager autograd:
    loss and every parameter gradient; a tied weight's gradient (both uses) too. Under autocast the
    step runs in the block and eager is run the same way; the parameters below the head are to float32
    rounding (before: ~0.5% off, the head's backward recomputed in float32), the head's weight to
    bfloat16's precision. A head after a linear layer (a bfloat16 input under autocast) was refused
    before (the check's backward raised); flattened targets were refused too."""
    from memplan._compile_budget import BudgetSearch

    torch.manual_seed(0)
    model = TinyLM(kind, tied).train()
    x = torch.randint(0, V2, (B2, T2))
    y = _targets(target_kind, B2, T2)
    loss = TokenCrossEntropy()
    ref = copy.deepcopy(model)
    with _autocast(autocast):
        whole = loss(ref(x), y)
    whole.backward()
    with _autocast(autocast):
        search = BudgetSearch(model, (x,), loss_fn=loss, example_targets=(y,), fractions=(),
                              compiled_stages=compiled, repeats=1)
        assert search.loss_chunks > 1, search.loss_chunks_note
        least = search.minimum()
    plans = [least]
    if compiled:
        assert search.compiled_loss_chunks > 1, search.compiled_loss_chunks_note
        plans += [min((c for c in search.measured() if c.kind == "chain-compiled" and c.loss_chunks > 1),
                      key=lambda c: c.peak)]
    assert least.loss_chunks > 1
    head_weight = "emb.weight" if tied or kind == "functional" else "head.weight"
    for cand in plans:
        step = search._runner(cand)[0]
        for p in model.parameters():
            p.grad = None
        with _autocast(autocast):
            got = step(x, y)
        assert float(got) == pytest.approx(float(whole.detach()), rel=1e-5), cand.label
        for (name, p), r in zip(model.named_parameters(), ref.parameters()):
            assert p.grad is not None, name
            tol = BF16 if autocast and name == head_weight else 1e-4
            assert _rel(p.grad, r.grad) <= tol, (cand.label, name)
