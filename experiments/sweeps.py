"""``memplan sweep <experiment>``: the experiment scripts behind one verb.

Each experiment module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and also runs on its
own as ``python -m experiments.<module>``. Modules that are not present in this checkout are skipped.
"""
from __future__ import annotations

import importlib

EXPERIMENTS = {
    "remat": ("experiments.remat_sweep", "re-materialization: throughput vs memory, all methods (paper 004 Fig. 6-8)"),
    "offload": ("experiments.offload_figures", "offloading: ratio to LB and throughput vs memory (paper 001 Fig. 2-3)"),
    "pipeline": ("experiments.pipeline_figures", "pipelined model parallelism: ILP vs PipeDream (paper 003 Fig. 6-11)"),
    "remat-offload": ("experiments.remat_offload_figures", "re-materialization + offloading (paper 000)"),
}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run an experiment (memory sweep + CSV + plot)",
                              description="Run an experiment; see `memplan sweep NAME --help`.")
    sub = p.add_subparsers(dest="experiment", required=True)
    for name, (modname, help_) in EXPERIMENTS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name == modname:
                continue
            raise
        if not (hasattr(mod, "add_arguments") and hasattr(mod, "run")):
            continue
        sp = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).split("\n\n")[0])
        mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)
