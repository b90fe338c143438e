"""Store-all on multi-tensor chains (resident tensors) against plain autograd: the general loop, one
backward call per stage, beside the fused path ``execute(..., hold=False)`` takes
(``models.runtime._run_store_all_multi``: one call from the loss, plain autograd over the stages).

For each network (cut with ``cuts="multi"``, batch 2, one torch thread, the process's CPU clock):
plain autograd, memplan's store-all with every B held (``hold=True``, paper 004's model operation by
operation, the general loop) and without holds (``hold=False``, the fused path), in rotating rounds
(``models.measure.interleaved``), compared round by round (``models.measure.paired_ratio``); each
contender's peak by the dispatch tracker (``models.memory.step_peak``: the weight gradients allocated
before the window, as ``runtime_check`` measures; a float input requires grad in autograd's step, as
the executor computes delta^0), after a warm-up; the gradients of both memplan runs compared with
autograd's (``torch.equal``). The gradients are cleared before each timed step.

    python benchmarks/bench_multi_store_all.py --out benchmarks/results/multi_store_all_cpu.txt   # about 2 min
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

#: network -> constructor keywords, per-sample input shape, input keywords
NETWORKS = {
    "nasnet_a": (dict(), (3, 32, 32), dict()),
    "transformer": (dict(), (128,), dict()),
    "llama": (dict(vocab=8000, n_ctx=256, n_layer=4, d_model=256, n_head=4), (256,), dict(vocab=8000)),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(NETWORKS), help=f"comma-separated, from {', '.join(NETWORKS)}")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--out", help="also write the lines to this file")
    a = p.parse_args(argv)
    names = [n for n in a.models.split(",") if n]
    bad = [n for n in names if n not in NETWORKS]
    if bad or not names or a.rounds < 6:
        print(f"bench_multi_store_all: --models from {', '.join(NETWORKS)} (got {a.models!r}); --rounds >= 6",
              file=sys.stderr)
        return 2
    import torch

    from memplan.models.graph import linearize_model
    from memplan.models.measure import interleaved, paired_ratio
    from memplan.models.memory import grad_input, step_peak
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss
    from memplan.models.runtime import execute, store_all_ops

    torch.set_num_threads(1)
    lines = [f"bench_multi_store_all: batch 2, {a.rounds} rounds, CPU clock, one thread, dispatch tracker, "
             f"torch {torch.__version__}"]
    for name in names:
        kw, shape, xkw = NETWORKS[name]
        torch.manual_seed(0)
        model = get_model(name, **kw).train()
        x = example_input(name, 2, shape, seed=0, **xkw)
        loss = classification_loss(seed=0)
        lm = linearize_model(model, x, loss, cuts="multi")
        ls = lm.loss_stage(loss)
        ops = store_all_ops(lm.L)
        params = list(model.parameters())

        def clear():
            for q in params:
                q.grad = None

        def autograd():
            torch.manual_seed(7)
            loss(model(grad_input(x))).backward()

        def plan(hold):
            def step():
                torch.manual_seed(7)
                execute(lm.stages, ls, x, ops, hold=hold)
            return step

        runs = {"autograd": autograd, "store-all held": plan(True), "store-all hold=False": plan(False)}
        grads = {}
        peaks = {}
        for n, fn in runs.items():
            clear()
            fn()
            grads[n] = [q.grad.clone() for q in params]
            peaks[n] = step_peak(fn, params, "cpu")      # the weight gradients allocated before, as runtime_check
            clear()

        def timed(fn):
            def once():
                clear()
                t0 = time.process_time()
                fn()
                return time.process_time() - t0
            return once

        res = interleaved({n: timed(f) for n, f in runs.items()}, min_rounds=a.rounds, max_rounds=a.rounds)
        lines.append(f"{name} (L = {lm.L}):")
        for n, t in res.items():
            same = "" if n == "autograd" else (", gradients bit-identical to autograd's" if all(
                torch.equal(u, v) for u, v in zip(grads[n], grads["autograd"])) else ", GRADIENTS DIFFER")
            lines.append(f"  {n:22s} {t.median * 1e3:8.2f} ms [{t.low * 1e3:.2f}, {t.high * 1e3:.2f}]  "
                         f"peak {peaks[n] / 2**20:8.3f} MiB{same}")
        for n in ("store-all held", "store-all hold=False"):
            r = paired_ratio(res[n].times, res["autograd"].times)
            lines.append(f"  {n + ' / autograd':35s} time {r.text()} (paired), peak {peaks[n] / peaks['autograd']:.4f}")
        print(f"{name}: done", file=sys.stderr)
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
