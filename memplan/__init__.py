"""memplan: plan memory-constrained training of chains of layers, exactly where exactness is possible.

Four problems, one module each, each with ``METHODS``, ``DEFAULT_METHOD`` and a keyword-only
``solve(chain, *, memory, ...) -> Solution``:

==================  ======================  =========================================================
problem             module                  what is planned (paper)
==================  ======================  =========================================================
``remat``           :mod:`memplan.remat`          which activations to keep or recompute (002/004)
``offload``         :mod:`memplan.offload`        which activations to send to the host and when (001)
``remat-offload``   :mod:`memplan.remat_offload`  both at once (000)
``pipeline``        :mod:`memplan.pipeline`       layers on P GPUs, periodic 1F1B pattern (003)
==================  ======================  =========================================================

:func:`solve` dispatches to them and fills the memory, bandwidth and GPU count from an instance's
platform where they are not given. Quantities are bytes, bytes/s and seconds, or strings with units
(``memory="90MiB"``, ``bandwidth="12GB/s"``). Every Solution's ``objective`` and ``peak_memory`` come
from the problem's simulator replaying the schedule.

Examples
--------
>>> import memplan
>>> inst = memplan.load_instance("paper004_table2")
>>> sol = memplan.solve(inst, "remat", method="rotor", memory="90MiB")
>>> sol.status, round(sol.objective * 1e3, 2), sol.peak_memory <= 90 * 2**20
(<Status.OPTIMAL: 'optimal'>, 47.42, True)
"""
from __future__ import annotations

from pathlib import Path as _Path

# In a source checkout the sub-packages are the folders beside this one (pyproject.toml maps
# memplan.models -> models/, ...). Where this very folder was imported from a checkout (no install,
# or a non-editable install while the working directory is the checkout), look for them there too.
# Only when nothing else provides them (an editable install maps them itself): the root on __path__
# also shows the checkout's other folders as sub-packages (help(memplan) listed memplan.memplan).
_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "models" / "chain.py").is_file():
    import importlib.util as _ilu
    if _ilu.find_spec(__name__ + ".models") is None:
        __path__.append(str(_ROOT))  # type: ignore[name-defined]  # noqa: F821

import importlib
import importlib.metadata as _metadata
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

from memplan.models.budget import ProgressFn
from memplan.models.chain import Chain, Platform, random_chain
from memplan.models.instance import Instance, InstanceError, load_instance, save_instance, shipped_instances
from memplan.models.solution import InfeasibleError, InputError, Solution, Status
from memplan.models.units import UnitError

try:
    __version__ = _metadata.version("memplan")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

__all__ = [
    "Chain", "Platform", "Instance", "Solution", "Status",
    "load_instance", "save_instance", "shipped_instances", "random_chain", "load_solution",
    "solve", "problems",
    "InputError", "InfeasibleError", "InstanceError", "UnitError",
    "compile_under_budget", "TokenCrossEntropy",
]

#: problem name (as on the command line) -> module name
_PROBLEM_MODULES = {
    "remat": "memplan.remat",
    "offload": "memplan.offload",
    "remat-offload": "memplan.remat_offload",
    "pipeline": "memplan.pipeline",
}


class _Problems(Mapping):
    """Read-only ``problem name -> module`` mapping; a module is imported on first access."""

    def __getitem__(self, name: str):
        if name not in _PROBLEM_MODULES:
            raise KeyError(name)
        return importlib.import_module(_PROBLEM_MODULES[name])

    def __iter__(self) -> Iterator[str]:
        return iter(_PROBLEM_MODULES)

    def __len__(self) -> int:
        return len(_PROBLEM_MODULES)

    def __repr__(self) -> str:
        return f"memplan.problems({', '.join(_PROBLEM_MODULES)})"


#: ``problems["remat"]`` is :mod:`memplan.remat`, and so on (``list(problems)`` names them all)
problems: Mapping = _Problems()


def __getattr__(name: str):     # PEP 562: ``memplan.remat`` etc. without importing every solver up front
    modname = f"memplan.{name}"
    if name == "compile_under_budget":      # imports torch: only when asked for
        from memplan._compile_budget import compile_under_budget

        return compile_under_budget
    if name == "load_solution":             # a Solution from its JSON file, its schedule an object again
        from memplan._frontend import load_solution

        return load_solution
    if name == "TokenCrossEntropy":         # a loss whose chain loss stage can be chunked (imports torch)
        from memplan.models.chunked_loss import TokenCrossEntropy

        return TokenCrossEntropy
    if modname in _PROBLEM_MODULES.values():
        return importlib.import_module(modname)
    raise AttributeError(f"module 'memplan' has no attribute {name!r}")


def _problem(problem: str):
    if problem not in _PROBLEM_MODULES:
        from memplan.models.units import did_you_mean

        hint = did_you_mean(str(problem).replace("_", "-"), _PROBLEM_MODULES)
        raise InputError(f"unknown problem {problem!r}{hint}; choose from {', '.join(_PROBLEM_MODULES)}")
    return problems[problem]


def solve(instance: Instance | Chain | str | Path, problem: str, method: str | None = None, *,
          memory: float | str | None = None, bandwidth: float | str | None = None, gpus: int | None = None,
          time_limit: float | None = 60.0, progress: ProgressFn | None = None, **options: Any) -> Solution:
    """Solve one problem on one chain.

    Parameters
    ----------
    instance : Instance, Chain, str or Path
        A chain, an :class:`Instance` (chain and platform), an instance file, or the name of a
        shipped instance (see :func:`shipped_instances`).
    problem : {'remat', 'offload', 'remat-offload', 'pipeline'}
        Which problem (see :data:`problems`).
    method : str, optional
        One of the problem module's ``METHODS``; its ``DEFAULT_METHOD`` when None.
    memory : float or str, optional
        Memory limit (per GPU for ``pipeline``): bytes, or a string with units (``"90MiB"``).
        Default: the instance's platform memory.
    bandwidth : float or str, optional
        Link bandwidth (bytes/s or ``"12GB/s"``) for ``offload``, ``remat-offload`` and ``pipeline``.
        Default: the instance's platform bandwidth.
    gpus : int, optional
        Number of GPUs for ``pipeline``. Default: the instance's platform, else 1.
    time_limit : float or None
        Seconds for the whole call, every phase included (None: no limit).
    progress : callable, optional
        Receives one line per phase or improvement (``progress=print`` to watch a long solve).
    **options
        The problem's own options (``slots``, ``exact``, ``gap``, ``threads``, ``solver_log``,
        ``periodicity``, ...): see the problem module's ``solve``.

    Returns
    -------
    Solution
        With ``status``, ``objective`` (seconds: makespan, or period for ``pipeline``) and
        ``peak_memory`` as replayed by the problem's simulator, ``bound``, ``times`` and ``schedule``.

    Raises
    ------
    InputError
        A missing limit, an unknown problem, method or option, a value out of range; an instance
        name or file that cannot be read (:class:`InstanceError`, a subclass).

    A limit below what any schedule needs is not an exception: the Solution has status
    ``infeasible`` and ``details["min_memory"]`` where known.

    Examples
    --------
    >>> import memplan
    >>> sol = memplan.solve("paper004_table2", "offload", "dynprog", memory="80MiB", bandwidth="1GB/s")
    >>> sol.success and sol.peak_memory <= 80 * 2**20
    True
    """
    mod = _problem(problem)
    if isinstance(instance, Chain):
        chain, platform = instance, None
    elif isinstance(instance, tuple) and len(instance) == 2 and isinstance(instance[0], Chain):
        chain, platform = instance
    elif isinstance(instance, (str, Path)):
        chain, platform = load_instance(instance)
    else:
        raise InputError(f"solve: expected a Chain, an Instance, an instance file or a shipped instance's "
                         f"name, got {type(instance).__name__}")
    params = inspect.signature(mod.solve).parameters
    given: dict[str, Any] = {"memory": memory, "bandwidth": bandwidth, "gpus": gpus}
    if platform is not None:
        for key in given:
            if given[key] is None and getattr(platform, key, None) is not None and key in params:
                given[key] = getattr(platform, key)
    kwargs: dict[str, Any] = {}
    for key, value in given.items():
        if key in params:
            kwargs[key] = value
        elif value is not None and not (key == "gpus" and value == 1):     # one GPU is every problem's
            raise InputError(f"problem {problem!r} takes no {key} (it has {', '.join(k for k in params if k != 'chain')})")
    unknown = [k for k in options if k not in params]
    if unknown:
        from memplan.models.units import did_you_mean

        hint = did_you_mean(unknown[0], params)
        raise InputError(f"problem {problem!r} has no option {unknown[0]!r}{hint}; its options: "
                         + ", ".join(k for k in params if k not in ("chain",)))
    return mod.solve(chain, method=method, time_limit=time_limit, progress=progress, **kwargs, **options)
