"""``memplan budget``: the fastest training step of a zoo network within a byte budget, from the shell.

    memplan budget --model gpt2 --batch 2 --input 256 --set n_layer=4 --set n_embd=256 --memory 150MiB
    memplan budget --model resnet50 --batch 2 --input 3x160x160 --memory 40MiB --backend inductor

A thin user of :func:`memplan.compile_under_budget` (the library's front door for issue 28): it builds
the network of the zoo with a random sample input and the zoo's loss (``classification_loss``: a
token loss for the language models, so their loss stage may be chunked), runs the search (PyTorch's
``activation_memory_budget`` fractions, memplan's rotor chain plans eager and over compiled stages),
and prints the report: every candidate's measured peak and step time, and the one chosen. A budget
below every measured peak is an error stating the smallest (exit status 2). torch is imported only
when the command runs.
"""
from __future__ import annotations

import argparse
import math
import sys

from memplan.experiments.cli_checks import (batch_fits, input_shape, key_value, model_kwargs, positive_int,
                                            repeated, seed_arg)
from memplan.models.solution import InputError


def _fractions(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in text.split(",") if v.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fractions {text!r}: expected numbers in [0, 1] separated by commas, "
                                         f"e.g. 1,0.5,0.1 (or an empty string for chain plans only)") from None
    if any(not 0 <= v <= 1 for v in vals):
        raise argparse.ArgumentTypeError(f"--fractions {text!r}: every fraction must lie in [0, 1]")
    why = repeated("--fractions", text, vals, "distinct numbers in [0, 1]", "fraction")
    if why:         # 1,1,1 was compiled and measured three times
        raise argparse.ArgumentTypeError(why)
    return vals


def _stage_fractions(text: str) -> tuple[float, ...]:
    try:
        vals = _fractions(text)                # numbers in [0, 1]; here also at least one, and distinct
    except argparse.ArgumentTypeError:
        vals = ()
    if not vals or len(set(vals)) != len(vals):
        raise argparse.ArgumentTypeError(f"--stage-fractions {text!r}: expected distinct numbers in [0, 1] separated "
                                         f"by commas, e.g. 1,0.5 (1: the partitioner's own choice in every stage)")
    return vals


def _time_limit(text: str) -> float:
    """argparse type of ``--time-limit``: a positive number of seconds (the API's own refusal of -5, 0
    or nan named ``time_limit``, not the option)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not v > 0:
        raise argparse.ArgumentTypeError(f"--time-limit {text!r}: give a positive number of seconds, e.g. 600 "
                                         f"(or leave it out: no limit)")
    return v


def _cmd_budget(args: argparse.Namespace) -> int:
    import torch

    import memplan
    from memplan.models.networks import DEFAULT_INPUT, canonical_name, example_input, get_model
    from memplan.models.profiler import check_example_input, classification_loss
    from memplan.models.units import UnitError, parse_bandwidth, parse_memory

    try:
        key = canonical_name(args.model)
    except KeyError as e:
        raise InputError(str(e.args[0])) from None
    try:
        budget = parse_memory(args.memory)
    except UnitError as e:      # "memory '-3GiB' is negative" did not say which option
        raise InputError(f"--memory {args.memory!r}: {e}; e.g. 300MiB") from None
    if not 0 < budget < float("inf"):      # before the search: a budget of 0 took 29 s to be refused
        raise InputError(f"--memory {args.memory!r}: the budget must be a positive, finite quantity, e.g. 300MiB")
    if budget < 1:     # whole bytes, rounded down (the peaks are whole bytes: 1.5 answers as 1 does)
        raise InputError(f"--memory {args.memory!r}: less than one byte (the budget is whole bytes, a fraction of "
                         f"one rounded down); e.g. 300MiB")
    kw = model_kwargs(args.set)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available to this torch build")
    if args.bandwidth is not None and not args.offload:
        raise InputError(f"--bandwidth {args.bandwidth}: the host link of --offload, which is not given; add --offload "
                         "(--device cuda) or leave --bandwidth out")
    if args.bandwidth is not None:
        try:
            link = parse_bandwidth(args.bandwidth)
        except (UnitError, ValueError) as e:
            raise InputError(f"--bandwidth {args.bandwidth!r}: {e}; e.g. 25GB/s") from None
        if not link > 0:        # as the API's own check, which would name bandwidth, not the option
            raise InputError(f"--bandwidth {args.bandwidth!r}: give a positive link, e.g. 25GB/s")
    if args.cuda_peak != "requested" and args.device != "cuda":
        raise InputError(f"--cuda-peak {args.cuda_peak}: reads the CUDA caching allocator, and --device is "
                         f"{args.device}; leave it out (the CPU's peak is the tracker's)")
    if args.no_chain and tuple(args.stage_fractions) != (1.0,):
        raise InputError("--stage-fractions: budgets of the chain's compiled stages, and --no-chain leaves the chain "
                         "out; give one of the two")
    if args.no_compiled_stages and tuple(args.stage_fractions) != (1.0,):
        raise InputError("--stage-fractions: budgets of the chain's compiled stages, and --no-compiled-stages leaves "
                         "them out; give one of the two")
    below_one = min(args.stage_fractions) < 1
    if args.stage_solver != "memplan-peak" and not below_one:     # memplan-peak: the default, not asked for
        raise InputError(f"--stage-solver {args.stage_solver}: the solver inside stages compiled at a "
                         f"--stage-fractions value below 1, and there is none; add one (e.g. --stage-fractions "
                         f"1,0.5) or leave --stage-solver out")
    if args.fractions == () and args.no_chain:
        raise InputError("--no-chain with an empty --fractions: nothing to try; give fractions (e.g. --fractions "
                         "1,0.5) or leave --no-chain out")
    if args.fractions == () and args.solver != "pytorch":
        raise InputError(f"--solver {args.solver}: the partitioner's solver for the compiled --fractions, and "
                         f"--fractions is empty; give fractions (e.g. --fractions 1,0.5) or leave --solver out")
    if args.fractions == () and args.runtime_estimator != "flops" and not below_one:
        raise InputError(f"--runtime-estimator {args.runtime_estimator}: weighs the partitioner's recomputations in "
                         f"the compiled --fractions and in stages compiled at a --stage-fractions value below 1, and "
                         f"there are none; give one, or leave --runtime-estimator out")
    compiles = args.fractions != () or not (args.no_chain or args.no_compiled_stages)
    if not compiles and args.backend != "aot_eager_decomp_partition":      # it had been taken, and unused
        raise InputError(f"--backend {args.backend}: the compiler of the --fractions and of the chain's compiled "
                         "stages, and nothing is compiled (--fractions is empty, the compiled stages left out); "
                         "give fractions, or leave --backend out")
    if args.offload and args.device != "cuda":
        raise InputError("--offload needs --device cuda: on a CPU the host is the same memory, nothing would be saved")
    if args.offload and args.no_chain:
        raise InputError("--offload: its plans run on the chain, and --no-chain leaves it out; give one of the two")
    torch.set_num_threads(args.threads)
    batch_fits(key, args.batch, args.input, args.device, kw, args.seed)    # before anything of its size is made
    torch.manual_seed(args.seed)
    model = get_model(key, **kw).to(args.device).train()
    shape = tuple(args.input) if args.input else DEFAULT_INPUT[key]
    x = example_input(key, args.batch, shape, vocab=kw.get("vocab"), seed=args.seed, device=args.device)
    check_example_input(key, model, x, shape)      # a wrong --input: one line, not a traceback
    # --autocast: the whole search (every candidate's step, the chains' profiles) inside one autocast
    # block, as a training loop would call the returned step
    from memplan.models.runtime import autocast_blocks

    with autocast_blocks(args.autocast, args.device)():
        step = memplan.compile_under_budget(
            model, (x,), budget, loss_fn=classification_loss(seed=args.seed), backend=args.backend,
            solver=args.solver, fractions=args.fractions, repeats=args.repeats, time_limit=args.time_limit,
            chain=not args.no_chain, compiled_stages=not args.no_compiled_stages,
            runtime_estimator=args.runtime_estimator, stage_fractions=args.stage_fractions,
            stage_solver=args.stage_solver, progress=_progress_printer(args.progress), offload=args.offload,
            bandwidth=args.bandwidth, cuda_peak=args.cuda_peak)
    print(f"{key}, batch {args.batch}, input {'x'.join(map(str, shape))}, on {args.device}, "
          f"{args.threads} thread(s)" + (f", under torch.autocast({args.autocast})" if args.autocast else ""))
    print(step.report())
    return 0


def _progress_printer(wanted: bool | None):
    """The search's progress lines on stderr: with --progress, or by default when stderr is a
    terminal (a script that reads stderr gets only the one-line error of a refusal)."""
    if wanted is None:
        wanted = sys.stderr.isatty()
    if not wanted:
        return None
    return lambda line: print(f"memplan budget: {line}", file=sys.stderr, flush=True)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "budget", help="the fastest training step of a zoo network within a byte budget",
        description="Search torch.compile's activation_memory_budget fractions and memplan's rotor chain plans "
                    "(eager and over compiled stages) for a zoo network's training step, measure each one's peak "
                    "and step time, and print the fastest whose measured peak fits --memory "
                    "(memplan.compile_under_budget).")
    p.add_argument("--model", required=True, help="a zoo network (as for 'memplan profile')")
    p.add_argument("--batch", type=positive_int, required=True)
    p.add_argument("--input", type=input_shape, default=None, help="per-sample input shape, e.g. 3x224x224 or 256")
    p.add_argument("--memory", required=True, help="the budget: bytes above parameters, gradients and the input, "
                   "e.g. 1.5GiB or 300MiB (whole bytes: a fraction of one is rounded down; the measured peaks are "
                   "whole bytes, so the answer is the same)")
    p.add_argument("--set", type=key_value, action="append", metavar="KEY=VALUE",
                   help="model constructor argument, e.g. --set n_layer=4 (repeatable, each key once)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--autocast", choices=["bfloat16", "float16"], default=None,
                   help="mixed precision: the steps (and the chains' profiles) run under torch.autocast with this "
                        "dtype on --device (default: none, the model's own dtype)")
    p.add_argument("--backend", choices=["aot_eager_decomp_partition", "inductor"],
                   default="aot_eager_decomp_partition")
    p.add_argument("--solver", choices=["pytorch", "memplan", "memplan-peak", "both", "all"], default="pytorch",
                   help="the partitioner's keep-or-recompute solver for the compiled fractions")
    p.add_argument("--fractions", type=_fractions, default=None,
                   help="PyTorch budget fractions to compile, distinct and comma-separated (default "
                        "1,0.7,0.5,0.3,0.2,0.1,0.05,0; an empty string: chain plans only)")
    p.add_argument("--runtime-estimator", choices=["flops", "measured"], default="flops")
    p.add_argument("--stage-fractions", type=_stage_fractions, default=(1.0,),
                   help="compiled-stage chains at these partitioner budgets, e.g. 1,0.5; with two or more, "
                        "rotor also picks the budget per stage (default 1)")
    p.add_argument("--stage-solver", choices=["memplan-peak", "pytorch", "memplan"], default="memplan-peak",
                   help="the keep-or-recompute solver inside stages compiled below 1")
    p.add_argument("--no-chain", action="store_true", help="compiled fractions only, no rotor chain plans")
    p.add_argument("--no-compiled-stages", action="store_true", help="chain plans over eager stages only")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed steps per candidate (median)")
    p.add_argument("--time-limit", type=_time_limit, default=None, help="seconds for the whole search: no part is started that would overrun it (the first fraction always runs, so that there is an answer)")
    p.add_argument("--offload", action="store_true", help="also offloading over the chain (paper 001 alone, and paper "
                   "000 with recomputation), executed and measured (--device cuda only)")
    p.add_argument("--bandwidth", default=None, help="the host link for --offload, e.g. 25GB/s (default: measured)")
    p.add_argument("--cuda-peak", choices=["requested", "allocated"], default="requested",
                   help="--device cuda: the caching allocator's peak compared with the budget, the bytes the "
                        "tensors asked for (default; the same in every window) or max_memory_allocated")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a line on stderr as each part of the search ends (default: when stderr is a terminal)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--seed", type=seed_arg, default=0, help="the model's and the example input's seed, 0 to 2**64 - 1")
    p.set_defaults(func=_cmd_budget)
