"""compile_under_budget on model patterns users write (batch norm, buffers written in forward, ...):
each step compared with eager autograd's ``loss_fn(model(x), y).backward()`` on a copy of the model with
the same initial state (gradients, loss, and the parameters' and buffers' state after the step)."""
from __future__ import annotations

import copy
import random

import pytest

torch = pytest.importorskip("torch")

import memplan  # noqa: E402
from memplan._compile_budget import BudgetSearch  # noqa: E402

pytestmark = pytest.mark.torch

nn = torch.nn
F = torch.nn.functional


def _eager(model, xs, ys, loss_fn, steps=1):
    """A copy of ``model`` after ``steps`` plain autograd steps (gradients accumulate), and the last loss."""
    ref = copy.deepcopy(model)
    for _ in range(steps):
        loss = loss_fn(ref(*xs), *ys)
        loss.backward()
    return ref, float(loss.detach())


def _assert_like_eager(model, ref, loss=None, ref_loss=None):
    if loss is not None:
        assert float(loss) == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=n)
    for (n, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-7, msg=f"buffer {n}")


def _least_plan_like_eager(model, x, y, loss_fn, compiled, ref, ref_loss):
    """The search's least-memory chain plan (eager or compiled stages) recomputes some stage, and one
    step of it leaves ``model`` as eager's step left ``ref``."""
    search = BudgetSearch(model, (x,), loss_fn=loss_fn, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=compiled)
    search.minimum()
    kind = "chain-compiled" if compiled else "chain"
    least = min((c for c in search.measured() if c.kind == kind), key=lambda c: c.peak)
    forwards = [l for op, l in least.ops if op != "B"]
    assert len(forwards) > len(set(forwards)), "the plan recomputes no stage"
    step, _ = search._runner(least)
    loss = step(x, y)
    _assert_like_eager(model, ref, loss, ref_loss)


def _bn_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(64, 64), nn.BatchNorm1d(8),
                         nn.ReLU(), nn.Linear(64, 8))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-stages", "compiled-stages"])
def test_a_recomputed_batch_norm_updates_its_running_statistics_once(one_torch_thread, compiled):
    """The least-memory chain plan recomputes the batch-norm stages; the running statistics and
    num_batches_tracked after one step are eager's one step (they were updated once more per
    recomputation), and the gradients are eager's."""
    model = _bn_model()
    x, y = torch.randn(16, 8, 32), torch.randn(16, 8, 8)
    ref, ref_loss = _eager(model, (x,), (y,), F.mse_loss)
    _least_plan_like_eager(model, x, y, F.mse_loss, compiled, ref, ref_loss)


class _HandNorm(nn.Module):
    """A batch norm written by hand: ``F.batch_norm`` (or ``F.instance_norm``) on the module's own
    buffers, which the native kernel updates without moving their version counter."""

    def __init__(self, c, fn):
        super().__init__()
        self.fn = fn
        self.w, self.b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.register_buffer("rm", torch.zeros(c))
        self.register_buffer("rv", torch.ones(c))

    def forward(self, x):
        if self.fn == "instance_norm":
            return F.instance_norm(x, self.rm, self.rv, self.w, self.b, use_input_stats=True, momentum=0.1)
        return F.batch_norm(x, self.rm, self.rv, self.w, self.b, training=self.training, momentum=0.1)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-stages", "compiled-stages"])
@pytest.mark.parametrize("fn", ["batch_norm", "instance_norm"])
def test_a_hand_written_batch_norm_updates_its_running_statistics_once(one_torch_thread, compiled, fn):
    """The running statistics of a norm written with ``F.batch_norm`` on its own buffers, recomputed by
    the least-memory plan, end one step as eager's one step leaves them (an eager stage updated them
    again at each recomputation: up to 0.29 off on the variances)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Conv1d(4, 4, 3, padding=1), _HandNorm(4, fn), nn.Tanh())
                            for _ in range(5)], nn.Flatten(), nn.Linear(4 * 16, 3)).train()
    x, y = torch.randn(3, 4, 16), torch.randint(0, 3, (3,))
    ref, ref_loss = _eager(model, (x,), (y,), F.cross_entropy)
    _least_plan_like_eager(model, x, y, F.cross_entropy, compiled, ref, ref_loss)
    assert any(float(b.abs().sum()) > 0 for n, b in model.named_buffers() if n.endswith("rm"))   # they moved


class _Counter(nn.Module):
    """A buffer counter written in the forward, in one of the ways users write it."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.a = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64))
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("ema", torch.zeros(64))
        self.b = nn.Sequential(nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8))

    def forward(self, x):
        h = self.a(x)
        if self.how == "iadd":
            self.steps += 1
        elif self.how == "add_":
            self.steps.add_(1)
        elif self.how == "read":            # read after its update: a stage without the write reads 0
            self.steps += 1
            h = h / self.steps
        elif self.how == "ema":
            with torch.no_grad():
                self.ema.mul_(0.9).add_(0.1 * h.mean((0, 1)))
        return self.b(h)


@pytest.mark.parametrize("how", ["iadd", "add_", "read", "ema"])
def test_a_buffer_written_in_forward_gets_no_chain_plans(one_torch_thread, how):
    """The traced graph does not replay a buffer written in the forward (the chain's stages had left it
    as it was, or read 0 where eager reads 1: NaN gradients): no chain plans, the reason named; the
    compiled fraction's step writes it as eager does. Chain plans only: refused with the reason."""
    torch.manual_seed(0)
    model = _Counter(how)
    x, y = torch.randn(8, 8, 32), torch.randn(8, 8, 8)
    ref, ref_loss = _eager(model, (x,), (y,), F.mse_loss)
    with pytest.raises(memplan.InputError, match="writes buffer '(steps|ema)' in place"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=F.mse_loss, example_targets=(y,), fractions=(),
                                     repeats=1)
    step = memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=F.mse_loss, example_targets=(y,),
                                        fractions=(1.0,), repeats=1)
    assert step.kind == "compiled" and "writes buffer" in step.chain_note
    for p in model.parameters():
        p.grad = None
    loss = step(x, y)
    _assert_like_eager(model, ref, loss, ref_loss)


class _InPlace(nn.Module):
    """In-place writes whose result is not used: the value's later readers must see the write."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.lins = nn.ModuleList([nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 8)])

    def forward(self, x):
        h = self.lins[0](x)
        if self.how == "mul_":
            h.mul_(0.5)
        elif self.how == "view":
            h[:, :4].mul_(0.5).add_(1.0)
        elif self.how == "relu":
            torch.nn.functional.relu(h, inplace=True)
        elif self.how == "view-read":          # a view taken before the write, read after it
            v = h[:, :2]
            h.mul_(2)
            h = h + v.sum()
        h = self.lins[1](torch.tanh(h))
        k = self.lins[2](torch.tanh(h))
        k.mul_(0.9)
        return self.lins[3](torch.tanh(k))


@pytest.mark.parametrize("how", ["mul_", "view", "relu"])
def test_in_place_writes_whose_result_is_unused_train_as_eager(one_torch_thread, how):
    """fx records ``k.mul_(0.9); f(k)`` as a write nobody reads and a read of k before it: the chain's
    stages dropped the write (other loss, other gradients). Every chain plan measured, the least-memory
    one included, trains as eager autograd."""
    torch.manual_seed(0)
    model = _InPlace(how)
    x, y = torch.randn(16, 8, 32), torch.randn(16, 8, 8)
    ref, ref_loss = _eager(model, (x,), (y,), F.mse_loss)
    search = BudgetSearch(model, (x,), loss_fn=F.mse_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False)
    assert search.chain_note == ""
    search.minimum()
    search.under("1GiB")
    assert len(search.measured()) >= 2
    for cand in search.measured():
        for p in model.parameters():
            p.grad = None
        step, _ = search._runner(cand)
        loss = step(x, y)
        _assert_like_eager(model, ref, loss, ref_loss)


def test_a_view_read_after_an_in_place_write_gets_no_chain_plans(one_torch_thread):
    """A view taken before an in-place write and read after it: nothing in the traced graph orders the
    read after the write, so no chain plans (the reason named); the compiled step trains as eager."""
    torch.manual_seed(0)
    model = _InPlace("view-read")
    x, y = torch.randn(16, 8, 32), torch.randn(16, 8, 8)
    ref, ref_loss = _eager(model, (x,), (y,), F.mse_loss)
    with pytest.raises(memplan.InputError, match="in place .* a view"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=F.mse_loss, example_targets=(y,), fractions=(),
                                     repeats=1)
    step = memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=F.mse_loss, example_targets=(y,),
                                        fractions=(1.0,), repeats=1)
    assert step.kind == "compiled"
    for p in model.parameters():
        p.grad = None
    _assert_like_eager(model, ref, step(x, y), ref_loss)


class _LayerDrop(nn.Module):
    """LayerDrop written with Python's random module, as users write it."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.layers = nn.ModuleList([nn.Linear(64, 64) for _ in range(6)])
        self.out = nn.Linear(64, 8)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            if self.training and random.random() < 0.5:
                continue
            h = torch.tanh(layer(h))
        return self.out(h)


def test_a_forward_drawing_from_pythons_random_gets_no_chain_plans(one_torch_thread):
    """The trace runs the forward's Python code once: a chain had dropped the same layers at every step
    (those never trained). No chain plans, the reason named; the compiled step draws at every call as
    eager does."""
    torch.manual_seed(0)
    random.seed(1)
    model = _LayerDrop()
    x, y = torch.randn(8, 8, 32), torch.randn(8, 8, 8)
    state = random.getstate()
    with pytest.raises(memplan.InputError, match="draws from Python's random module"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=F.mse_loss, example_targets=(y,), fractions=(),
                                     repeats=1)
    # the search's first run of the model (its inputs checked) and the trace drew: both put back
    assert random.getstate() == state
    step = memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=F.mse_loss, example_targets=(y,),
                                        fractions=(1.0,), repeats=1)
    assert step.kind == "compiled" and "random" in step.chain_note
    for seed in range(3):
        for p in model.parameters():
            p.grad = None
        random.seed(seed)
        ref, ref_loss = _eager(model, (x,), (y,), F.mse_loss)
        random.seed(seed)
        _assert_like_eager(model, ref, step(x, y), ref_loss)
