"""How far float32 training steps' gradients are from float64's: eager autograd against torch.compile.

Why: :mod:`benchmarks.bench_budget` checks that every contender's gradients equal eager autograd's. On an
H100, Inductor's ResNet-50 (batch 32, 224x224, randomly initialized) gradients were 40% (relative, 2-norm
over all parameters) from eager's: a bug, or rounding? This script answers it with a float64 copy of the
same step as the reference: with cuDNN's default TF32 convolutions eager's own gradients are as far from
float64's as Inductor's are, and with TF32 off both come within a few percent. bench_budget therefore also
counts a row as equal when it is as close to the float64 gradients as eager is (``GRAD_FP64_FACTOR``).

    python benchmarks/grad_precision.py                       # CPU: batch 2, 64x64 (a minute)
    python benchmarks/grad_precision.py --device cuda         # GPU: batch 32, 224x224

Output: ``benchmarks/results/grad_precision.txt`` holds a CPU run and the H100 run.
"""
from __future__ import annotations

import argparse
import copy
import math
import time


def rel_err(ref, got) -> float:
    """||got - ref|| / ||ref|| over all parameters together (float64 arithmetic)."""
    num = sum(float(((u - v) ** 2).sum()) for u, v in zip(ref, got))
    den = sum(float((u ** 2).sum()) for u in ref)
    return math.sqrt(num / den)


def main(argv=None) -> int:
    import torch

    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--network", default="resnet50")
    p.add_argument("--batch", type=int, default=None, help="default: 32 on cuda, 2 on cpu")
    p.add_argument("--size", type=int, default=None, help="image side; default: 224 on cuda, 64 on cpu")
    a = p.parse_args(argv)
    cuda = a.device.startswith("cuda")
    batch, side = a.batch or (32 if cuda else 2), a.size or (224 if cuda else 64)
    print(f"{a.network} batch {batch} {side}x{side} on {a.device}"
          + (f" ({torch.cuda.get_device_name(torch.device(a.device))})" if cuda else "")
          + f", torch {torch.__version__}", flush=True)

    torch.manual_seed(0)
    model = get_model(a.network).to(a.device).train()
    x = example_input(a.network, batch, (3, side, side), device=a.device)
    loss_fn = classification_loss()
    state = copy.deepcopy(model.state_dict())      # every step starts from the same batch-norm buffers

    def grads(m):
        return [q.grad.detach().double().clone() for q in m.parameters()]

    def step(m, f, inp):
        m.load_state_dict(state)
        m.zero_grad(set_to_none=True)
        f(inp).backward()
        return grads(m)

    m64 = copy.deepcopy(model).double()
    g64 = step(m64, lambda inp: loss_fn(m64(inp)), x.double())
    del m64
    print("float64 reference done", flush=True)

    def eager(inp):
        return loss_fn(model(inp))

    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32          # PyTorch's default: True (convolutions)
        torch.backends.cuda.matmul.allow_tf32 = False   # PyTorch's default: False (matrix products)
        ge = step(model, eager, x)
        print(f"tf32={tf32} eager vs fp64 {rel_err(g64, ge):.3g}", flush=True)
        t = time.time()
        compiled = torch.compile(eager, backend="inductor")
        gi = step(model, compiled, x)
        print(f"tf32={tf32} inductor vs fp64 {rel_err(g64, gi):.3g}, vs eager {rel_err(ge, gi):.3g} "
              f"({time.time() - t:.0f}s)", flush=True)
        torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
