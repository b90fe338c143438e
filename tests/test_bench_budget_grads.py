"""bench_budget's gradient check: equal to eager's, or as close to a float64 step's as eager's are."""
import importlib.util
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location("bench_budget", Path(__file__).parents[1] / "benchmarks" / "bench_budget.py")
bb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bb)


def test_close_accepts_rounding_and_rejects_a_wrong_gradient():
    g64 = [torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([[0.0, 12.0]], dtype=torch.float64)]
    # eager: 0.1 away from float64 in 2-norm over |g64| = 13 (relative 0.1/13)
    eager = [torch.tensor([3.1, 4.0]), torch.tensor([[0.0, 12.0]])]
    e64 = bb._rel_err(g64, eager)
    assert e64 == pytest.approx(0.1 / 13, rel=1e-5)
    # within GRAD_RTOL of eager: equal
    ok, err, _ = bb._close(eager, [t * (1 + 1e-4) for t in eager], g64, e64)
    assert ok and err == pytest.approx(1e-4, rel=1e-3)
    # 0.2 from eager the other way, 0.1 from float64: far from eager (> 1e-3) but as accurate as eager
    other = [torch.tensor([2.9, 4.0]), torch.tensor([[0.0, 12.0]])]
    ok, err, err64 = bb._close(eager, other, g64, e64)
    assert err == pytest.approx(0.2 / math.sqrt(3.1 ** 2 + 16 + 144), rel=1e-5) and err > bb.GRAD_RTOL
    assert ok and err64 == pytest.approx(e64, rel=1e-5)
    # three times eager's distance from float64: not equal
    wrong = [torch.tensor([3.3, 4.0]), torch.tensor([[0.0, 12.0]])]
    ok, _, err64 = bb._close(eager, wrong, g64, e64)
    assert not ok and err64 == pytest.approx(3 * e64, rel=1e-4)
    # without a float64 reference only GRAD_RTOL counts; a missing gradient is never equal
    assert not bb._close(eager, other)[0]
    assert bb._close(eager, [eager[0], None], g64, e64)[1] == math.inf


def test_float64_gradients_of_a_linear_model_are_exact():
    # loss = sum(W x + b) over a batch: dL/dW[i, j] = sum_n x[n, j], dL/db[i] = batch size
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    x = torch.randn(5, 3)
    got = bb._grads_fp64(lin, x, lambda out: out.sum())
    assert got[0].dtype == torch.float64
    assert torch.allclose(got[0], x.double().sum(0).expand(2, 3), rtol=0, atol=1e-12)
    assert torch.equal(got[1], torch.full((2,), 5.0, dtype=torch.float64))
    assert lin.weight.grad is None and lin.weight.dtype == torch.float32     # the model itself is untouched


def test_a_network_with_dropout_is_refused_and_every_spec_has_none():
    """With dropout the compiled steps, eager's and float64's draw different masks and the gradient check
    compares nothing (the zoo Transformer's default 0.1 gave eager's gradients 0.35 from float64's, which
    every row then 'equalled'): such a spec is refused naming the module, before any step runs; every
    spec of the benchmark sets it to 0."""
    from memplan.models.networks import get_model

    spec = dict(model="transformer", kw={}, shape=(16,), batch=1)
    with pytest.raises(ValueError, match=r"network 'tr' has dropout \(.*p > 0\)"):
        bb.run_network("tr", spec, fractions=(1.0,), backend="aot_eager", max_rounds=1, min_rounds=1,
                       timing_budget=None, clock_name="wall", segments=())
    for specs in (bb.NETWORKS, bb.QUICK, bb.GPU):
        for name, s in specs.items():
            model = get_model(s["model"], **s["kw"])
            assert not [m for m in model.modules()
                        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0], name
