"""Does ``memplan.compile_under_budget(..., time_limit=T)`` return within T? The whole call, timed around it.

For each network and each limit the call is made once (one thread, fresh model) and its wall time
printed beside the limit, with what the search did (candidates measured, what it left untried) and its
answer (the chosen candidate, or the refusal). A row is ``OVER`` when the call took more than
``max(T, first) + slack``: ``first`` is when the first candidate was done (the model and loss run once,
the first fraction compiled and measured: its progress line; it always runs, so that there is an
answer), ``slack`` (default 0.5 s) the granularity of the
parts that cannot be interrupted (one stage's profile, the chosen step's last measurement).

The limits were tuned on the tiny GPT-2 (``gpt2-tiny``); the others were not looked at while tuning.

Usage::

    python benchmarks/check_budget_time_limits.py                       # every network, limits 1,5,8,10,14
    python benchmarks/check_budget_time_limits.py --nets gpt2-tiny --limits 5,10
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import time

NETS = {
    # name: (zoo key, batch, input, model options, budget)
    "gpt2-tiny": ("gpt2", 2, (64,), dict(n_layer=2, n_embd=64, n_head=2), "20MiB"),
    "llama-tiny": ("llama", 2, (64,), dict(n_layer=2, d_model=64, n_head=2), "12MiB"),
    "resnet18-64px": ("resnet18", 2, (3, 64, 64), {}, "24MiB"),
}


def one(net: str, limit: float, slack: float, verbose: bool = False) -> dict:
    import torch

    import memplan
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    key, batch, shape, kw, budget = NETS[net]
    torch.manual_seed(0)
    model = get_model(key, **kw).train()
    x = example_input(key, batch, shape, vocab=kw.get("vocab"), seed=0)
    t0 = time.perf_counter()
    lines: list[float] = []           # when each progress line came: the first ends the first candidate
    try:
        step = memplan.compile_under_budget(model, (x,), budget, loss_fn=classification_loss(seed=0),
                                            time_limit=limit, progress=lambda _: lines.append(time.perf_counter()))
        cands, answer = step.candidates, f"chose {step.choice.label}, peak {step.peak / 2**20:.1f} MiB"
    except memplan.InfeasibleError as e:
        cands = getattr(e, "candidates", [])
        answer = "refused: " + (str(e) if verbose else str(e).split(":")[0][:70])
    wall = time.perf_counter() - t0
    first = lines[0] - t0 if lines and cands and cands[0].kind == "compiled" else 0.0
    bound = max(limit, first) + slack
    return dict(net=net, limit=limit, wall=wall, first=first, bound=bound, over=wall > bound,
                measured=len(cands), answer=answer)


def main(argv=None) -> int:
    p = OneLineParser(name='check_budget_time_limits', description=__doc__.splitlines()[0])
    p.add_argument("--nets", default=",".join(NETS), help=f"comma-separated, of {', '.join(NETS)}")
    p.add_argument("--limits", default="1,5,8,10,14", help="seconds, comma-separated")
    p.add_argument("--slack", type=float, default=0.5)
    p.add_argument("--verbose", action="store_true", help="whole refusal messages")
    a = p.parse_args(argv)
    import torch

    import memplan

    torch.set_num_threads(1)
    print(f"memplan {memplan.__version__} from {memplan.__file__}; torch {torch.__version__}, 1 thread")
    print(f"{'network':<15} {'limit':>6} {'wall':>7} {'first':>6} {'bound':>6}  {'':4} {'meas':>4}  answer")
    over = 0
    for net in a.nets.split(","):
        for limit in (float(v) for v in a.limits.split(",")):
            r = one(net, limit, a.slack, a.verbose)
            over += r["over"]
            print(f"{r['net']:<15} {r['limit']:6.1f} {r['wall']:7.2f} {r['first']:6.2f} {r['bound']:6.2f}  "
                  f"{'OVER' if r['over'] else 'ok':4} {r['measured']:4d}  {r['answer']}", flush=True)
    print(f"{over} row(s) over")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'check_budget_time_limits'))    # bad input: one line, exit 2