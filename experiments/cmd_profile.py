"""``memplan profile`` and ``memplan import-pipedream``: make instance files from real networks.

    memplan profile --model resnet50 --batch 8 --input 3x224x224 --device cpu -o instances/resnet50-b8.json
    memplan import-pipedream ../shared/external/pipedream/resnet18.graph.txt --batch 32 -o instances/pd.json

``profile`` builds a zoo network (models.networks), linearizes it (models.graph) and measures every stage
(models.profiler); ``import-pipedream`` reads a PipeDream profile (models.pipedream). Both write a
``memplan-instance/1`` file (times in ms, sizes in MiB with enough digits to keep exact byte counts)
with the provenance: network, batch, input, device, torch version, date, linearization and groups.
torch is imported only when ``profile`` runs.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(p) for p in text.lower().replace("×", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"input shape {text!r}: expected e.g. 3x224x224 (or 512 for gpt2)")
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"input shape {text!r}: dimensions must be positive")
    return dims


def _kv(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE, e.g. n_layer=6")
    k, v = text.split("=", 1)
    for conv in (int, float):
        try:
            return k, conv(v)
        except ValueError:
            pass
    return k, {"true": True, "false": False}.get(v.lower(), v)


def _summary(chain) -> str:
    from models.units import fmt_memory, fmt_time

    return (f"{chain.name}: L = {chain.L} stages (+ loss), store-all time {fmt_time(chain.store_all_time())}, "
            f"sum abar {fmt_memory(chain.wabar[1:].sum())}, weights {fmt_memory(chain.total_weights())}")


def _cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from models.instance import save_instance
    from models.networks import canonical_name
    from models.profiler import profile_model

    try:
        key = canonical_name(args.model)
    except KeyError as e:
        from experiments.cli import CliError

        raise CliError(str(e.args[0])) from None
    if args.device == "cuda" and not torch.cuda.is_available():
        from experiments.cli import CliError

        raise CliError("--device cuda: no CUDA device is available to this torch build")
    out = Path(args.output)
    if out.exists() and not args.force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    if args.threads:
        torch.set_num_threads(args.threads)
    chain = profile_model(key, args.batch, args.input, device=args.device, repeats=args.repeats,
                          seed=args.seed, model_kw=dict(args.set or []))
    if args.name:
        chain.name = args.name
    save_instance(chain, out, overwrite=args.force, time_unit="ms", memory_unit="MiB", digits=9,
                  description=f"{key}, batch {args.batch}, input {'x'.join(map(str, chain.provenance['input']))} "
                              f"profiled on {chain.provenance['device']} by memplan profile")
    print(_summary(chain))
    print(f"instance written to {out}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from models.instance import save_instance
    from models.pipedream import import_graph

    out = Path(args.output)
    if out.exists() and not args.force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    if not Path(args.graph).exists():
        from models.instance import InstanceError

        raise InstanceError(f"{args.graph}: no such PipeDream graph file")
    chain = import_graph(args.graph, batch=args.batch, name=args.name)
    save_instance(chain, out, overwrite=args.force, time_unit="ms", memory_unit="MiB", digits=9,
                  description=f"PipeDream profile {Path(args.graph).name}, linearized"
                              + (f", rescaled to batch {args.batch}" if args.batch else ""))
    print(_summary(chain))
    print(f"instance written to {out}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="profile a zoo network into an instance file",
        description="Build a network of the zoo, linearize it into a chain (minimal single-tensor groups) "
                    "and measure u_f, u_b, a, abar, delta, o_f, o_b, W per stage.")
    p.add_argument("--model", required=True, help="resnet18..152, preact_resnet200/1001, densenet121..201, "
                   "inception_v3, vgg16/19, gpt2")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--input", type=_shape, default=None,
                   help="per-sample input shape, e.g. 3x224x224 (gpt2: the sequence length, e.g. 512)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per operation; the median is kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--set", type=_kv, action="append", metavar="KEY=VALUE",
                   help="model constructor argument, e.g. --set n_layer=6 --set n_embd=512 (repeatable)")
    p.add_argument("--name", help="instance name (default: model-bBATCH-INPUT-DEVICE)")
    p.add_argument("-o", "--output", required=True, help="instance file to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=_cmd_profile)

    q = subparsers.add_parser(
        "import-pipedream", help="import a PipeDream graph.txt profile as a linearized chain",
        description="Read PipeDream's per-layer profile (graph.txt), linearize the DAG and write an instance.")
    q.add_argument("graph", help="PipeDream graph.txt file")
    q.add_argument("--batch", type=int, default=None,
                   help="rescale times and activation sizes linearly from the profile's batch (128)")
    q.add_argument("--name", help="instance name")
    q.add_argument("-o", "--output", required=True, help="instance file to write")
    q.add_argument("--force", action="store_true", help="overwrite an existing file")
    q.set_defaults(func=_cmd_import)
