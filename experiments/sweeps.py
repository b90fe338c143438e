"""``memplan sweep <experiment>``: the experiment scripts behind one verb.

Each experiment module exposes ``add_arguments(parser)`` and ``run(args) -> int``, or a ``main(argv)``
that parses its own options (the arguments after the experiment's name are forwarded to it); each
also runs on its own as ``python -m memplan.experiments.<module>``.
"""
from __future__ import annotations

import argparse
import importlib

EXPERIMENTS = {
    "remat": ("memplan.experiments.remat_sweep", "re-materialization: throughput vs memory, all methods (paper 004 Fig. 6-8)"),
    "offload": ("memplan.experiments.offload_figures", "offloading: ratio to LB and throughput vs memory (paper 001 Fig. 2-3)"),
    "pipeline": ("memplan.experiments.pipeline_figures", "pipelined model parallelism: ILP vs PipeDream (paper 003 Fig. 6-11)"),
    "remat-offload": ("memplan.experiments.remat_offload_figures", "re-materialization + offloading (paper 000)"),
}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run an experiment (memory sweep + CSV + plot)",
                              description="Run an experiment; see `memplan sweep NAME --help`.")
    sub = p.add_subparsers(dest="experiment", required=True)
    for name, (modname, help_) in EXPERIMENTS.items():
        mod = importlib.import_module(modname)
        if hasattr(mod, "add_arguments") and hasattr(mod, "run"):
            sp = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).split("\n\n")[0])
            mod.add_arguments(sp)
            sp.set_defaults(func=mod.run)
        elif hasattr(mod, "main"):   # a script with its own argparse: forward the arguments to it
            sp = sub.add_parser(name, help=help_, add_help=False, prefix_chars="\0")
            sp.add_argument("rest", nargs=argparse.REMAINDER)
            sp.set_defaults(func=lambda args, _m=mod: int(_m.main(args.rest) or 0))
