"""Checks the command line makes before any work: output paths that can be written, whole numbers.

:func:`output_file` and :func:`output_dir` run before a solve or a sweep starts, so that a long MILP's
result is never lost at the end to a path that cannot be written: they create the missing parent
folders, and raise :class:`~memplan.models.solution.InputError` naming the option, the path and what
would work when the path is a folder (for a file), lies under a regular file, or is not writable (a
probe file is created and removed, so a read-only folder or file system is caught even for root).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from memplan.models.instance import InstanceError
from memplan.models.solution import InfeasibleError, InputError
from memplan.models.units import UnitError


class CliError(Exception):
    """An error for the user: printed without a traceback, exit status 2."""


def _stdout_closed() -> int:
    """The reader of our output went away (``memplan show ... | head -1``): stop quietly, as a Unix tool
    killed by SIGPIPE would (status 141), without a traceback at exit either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):   # pragma: no cover - no file descriptor behind sys.stdout
        pass
    return 141


def _warning_line(message, category, filename, lineno, line=None) -> str:
    return f"memplan: warning: {message}\n"


def guarded(call: Callable[[], int | None], prog: str = "memplan") -> int:
    """Run a command's body; an error meant for the user (bad input, an infeasible limit, a file that
    cannot be read or written) is one line on stderr and exit status 2, never a traceback; warnings
    are one line each."""
    warnings.formatwarning = _warning_line
    try:
        rc = int(call() or 0)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        return _stdout_closed()
    except (CliError, InputError, InstanceError, UnitError, InfeasibleError, FileExistsError,
            FileNotFoundError, ValueError) as e:   # models raise ValueError subclasses with messages meant for the user
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:            # a file that cannot be read or written: one line, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"{prog}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:   # an optional dependency the command needs (torch for profile, run, budget)
        top = (e.name or "").split(".")[0]
        if not top or top == "memplan":
            raise                          # memplan's own modules: a bug, keep the traceback
        how = ("pip install -e '.[torch]' (torch==2.13.0, the CPU wheel; an unpinned torch pulls GBs of CUDA)"
               if top in ("torch", "torchvision") else f"pip install {top}")
        print(f"{prog}: error: this command needs the Python package {top!r}, which is not installed; {how}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


#: the seeds torch's generators take (``torch.manual_seed``: an unsigned 64-bit number; a negative one
#: wraps around to the same generator as its value plus 2**64)
SEED_MAX = 2**64 - 1


def seed_arg(text: str) -> int:
    """argparse type of ``--seed`` (``memplan profile`` and ``budget``): a whole number in [0,
    :data:`SEED_MAX`] (99999999999999999999 failed in torch as 'Overflow when unpacking long long';
    ``profile --seed -1`` had been taken)."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"--seed {text!r}: give a whole number from 0 to 2**64 - 1 = {SEED_MAX} "
                                         f"(torch's seeds)")
    return v


class OneLineParser(argparse.ArgumentParser):
    """argparse, with the project's rule for bad input: an error of the command line is one line,
    ``NAME: error: MESSAGE (usage: PROG --help)``, exit status 2, instead of the usage block; and a
    value starting with '-' and a digit is a value, not an option (``--memory -1MiB`` reaches the check
    that says what is wrong with it instead of "expected one argument"; no option of memplan or of its
    scripts starts with a digit). ``name`` starts the line (default ``prog``): a script run as
    ``python -m memplan.experiments.X`` says ``X: error: ...``, as its other errors do
    (:func:`run_script`). Subparsers inherit the class (and name themselves by their ``prog``)."""

    def __init__(self, *a, name: str | None = None, **kw):
        super().__init__(*a, **kw)
        self.name = name or self.prog
        self._negative_number_matcher = re.compile(r"^-\d|^-\.\d")

    def error(self, message: str):
        self.exit(2, f"{self.name}: error: {message} (usage: {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, after refusing an option of this parser given twice: argparse keeps the last
        (``--memory 90MiB --memory 100MiB`` solved at 100 MiB, ``memplan sweep -o A remat ... -o B``
        wrote to B), silently. Options that collect (``--set``, ``--option``) may repeat."""
        argv = list(sys.argv[1:] if args is None else args)
        seen: dict[str, str] = {}
        for tok in argv:
            if tok == "--":
                break
            if not tok.startswith("-") or self._negative_number_matcher.match(tok):
                continue
            flag = tok.split("=", 1)[0]
            act = self._option_string_actions.get(flag)
            if act is None or isinstance(act, (argparse._AppendAction, argparse._AppendConstAction,
                                               argparse._CountAction, argparse._HelpAction, argparse._VersionAction,
                                               argparse._ExtendAction)):
                continue
            if act.dest in seen:
                self.error(f"{flag}: given twice" + ("" if seen[act.dest] == flag else f" (as {seen[act.dest]} too)")
                           + "; give it once (the last one would silently replace the first)")
            seen[act.dest] = flag
        return super().parse_known_args(args, namespace)


def run_script(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], int | None],
               argv: list[str] | None = None) -> int:
    """The ``main(argv)`` of an experiment or benchmark script run directly: ``argv`` parsed by
    ``parser`` (a :class:`OneLineParser`) and ``body(args)`` run under :func:`guarded`, so that bad
    input (an option argparse refuses, an ``InputError``, a file that cannot be read or written) is
    one line ``NAME: error: ...`` and exit status 2, as for ``memplan``, never a traceback. The status
    of an error of the command line (2; ``--help``: 0) is returned, not raised, so that tests call
    ``main(argv)`` in-process."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return guarded(lambda: body(args), getattr(parser, "name", parser.prog))


def _first_existing(p: Path) -> Path:
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _writable_dir(d: Path, flag: str, shown) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".memplan-probe-", dir=d)
    except OSError as e:
        raise InputError(f"{flag} {shown}: cannot write in the folder {d} ({e.strerror or e}); choose another "
                         "place, e.g. under results/") from None
    os.close(fd)
    os.unlink(probe)


def _make_dir(p: Path, flag: str, shown) -> None:
    if p.exists() and not p.is_dir():
        raise InputError(f"{flag} {shown}: {p} is a file, not a folder" + (
            "; give a folder name" if str(shown) == str(p) else ", so nothing can be written under it"))
    base = _first_existing(p)
    if not base.is_dir():
        raise InputError(f"{flag} {shown}: {base} is a file, so no folder can be made under it; choose another place")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{flag} {shown}: cannot create the folder {p} ({e.strerror or e}); choose another place, "
                         "e.g. under results/") from None
    _writable_dir(p, flag, shown)


def output_dir(path: str | Path, flag: str) -> Path:
    """The folder ``path`` (created with its parents) once it is known to be writable."""
    p = Path(path)
    _make_dir(p, flag, path)
    return p


def output_file(path: str | Path, flag: str) -> Path:
    """The file ``path``, its folder created, once it is known that it can be written (an existing file
    is checked by opening it for appending, which leaves it as it is)."""
    if not str(path).strip():
        raise InputError(f"{flag}: an empty file name; give one, e.g. results/out")
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag} {path}: is a folder; give a file name, e.g. {p / 'out'}")
    _make_dir(p.parent, flag, path)
    if p.exists():
        try:
            with open(p, "a"):
                pass
        except OSError as e:
            raise InputError(f"{flag} {path}: cannot write this file ({e.strerror or e})") from None
    return p



@contextmanager
def writing(path: str | Path):
    """Around the writing of an output file (or of the files of an output folder): an error of the
    write (a full disk, ``/dev/full``, a folder in its place, a read-only or vanished folder) becomes
    one line ``cannot write PATH: REASON`` (``memplan: error: ...``, exit status 2). The checks before
    the work (:func:`output_file`) catch what can be seen then; a write still fails later where the
    disk fills up, and the error's own text had no file name (``memplan: error: No space left on
    device``). :class:`FileExistsError` (the ``--force`` rule) passes through as it is."""
    try:
        yield
    except FileExistsError:
        raise
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None


def image_file(path: str | Path, flag: str) -> Path:
    """An image file name whose extension matplotlib can write (``png``, ``pdf``, ``svg``, ...):
    checked before the solve, since the drawing comes after it (``g.xyz`` failed after the report,
    and a name without an extension was silently written as ``g.png``)."""
    from matplotlib.backend_bases import FigureCanvasBase

    p = Path(path)
    kinds = FigureCanvasBase.get_supported_filetypes()
    ext = p.suffix[1:].lower()
    if ext not in kinds:
        what = f"extension {p.suffix!r}" if ext else "no extension"
        raise InputError(f"{flag} {path}: {what}; give an image file name ending in one of "
                         + ", ".join(f".{k}" for k in sorted(kinds)))
    return p

def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (``--workers``, ``--batch``)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one >= 1") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return v


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0 (seconds: ``--time-limit``, ``--budget``); nan, inf, 0 and
    below are refused (a negative time limit had turned every solve into an error row, exit 0)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give one > 0, e.g. 30") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number > 0, e.g. 30")
    return v


def fraction_list(text: str) -> list[float]:
    """argparse type: comma-separated numbers in [0, 1], at least one (``--fractions 0.1,0.5,1``: the
    way from the least memory to the most)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(0 <= v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers between 0 and 1 separated by commas, "
                                         "e.g. 0.1,0.5,1")
    return values


def repeated(flag: str, text: str, values, expected: str, noun: str) -> str | None:
    """Why a list option whose values must be distinct is refused (one line naming ``flag``, the text
    given, what was expected and the values given more than once), or None when no value repeats:
    ``--fractions 0.5,0.5`` had planned, compiled and measured the same limits twice. The one check of
    ``memplan budget --fractions`` and ``runtime_check --fractions``; the caller raises the error its
    place needs (``argparse.ArgumentTypeError`` in a type, :class:`CliError` in a body)."""
    values = list(values)
    twice = sorted({v for v in values if values.count(v) > 1})
    if not twice:
        return None
    return (f"{flag} {text!r}: expected {expected}, and {', '.join(f'{v:g}' for v in twice)} is given more than "
            f"once; give each {noun} once")


def input_shape(text: str) -> tuple[int, ...]:
    """argparse type: a per-sample input shape, ``3x224x224`` or ``512`` (``--input``)."""
    try:
        dims = tuple(int(p) for p in text.lower().replace("×", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"input shape {text!r}: expected e.g. 3x224x224 (or 512 for gpt2)")
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"input shape {text!r}: dimensions must be positive")
    return dims


def key_value(text: str) -> tuple[str, object]:
    """argparse type: ``KEY=VALUE`` with VALUE read as an int, a float, true/false or text (``--set``)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE, e.g. n_layer=6")
    k, v = text.split("=", 1)
    for conv in (int, float):
        try:
            return k, conv(v)
        except ValueError:
            pass
    return k, {"true": True, "false": False}.get(v.lower(), v)


def model_kwargs(pairs, flag: str = "--set") -> dict:
    """``--set KEY=VALUE`` pairs (:func:`key_value`'s) as the model's keyword arguments; a key given
    twice is refused, naming both values (the last one had won silently: ``memplan profile --set
    n_layer=1 --set n_layer=2`` profiled a model of 2 layers). The one check of ``memplan profile``
    and ``memplan budget``."""
    pairs = list(pairs or [])
    keys = [k for k, _ in pairs]
    for k in dict.fromkeys(keys):
        if keys.count(k) > 1:
            given = " ".join(f"{flag} {kk}={v}" for kk, v in pairs if kk == k)
            raise InputError(f"{flag} {k}: given {keys.count(k)} times ({given}); give each key once")
    return dict(pairs)


def device_problem(device: str) -> str | None:
    """Why ``--device`` cannot be used here (one line naming it and what would work), or None: cpu,
    or cuda[:n] where this torch sees a CUDA device."""
    import torch

    if device == "cpu":
        return None
    if not (device == "cuda" or device.startswith("cuda:")):
        return f"--device {device!r}: use cpu or cuda"
    if not torch.cuda.is_available():
        return f"--device {device}: this torch ({torch.__version__}) sees no CUDA device; use --device cpu"
    index = device.partition(":")[2]
    count = torch.cuda.device_count()
    if device.startswith("cuda:") and not (index.isdigit() and int(index) < count):
        # cuda:7 on a one-GPU machine, cuda:x: torch's own error came later, in a traceback
        return (f"--device {device}: this machine has {count} CUDA device(s), cuda:0"
                + (f" to cuda:{count - 1}" if count > 1 else "") + "; use one of them, or cuda")
    return None


__all__ = ["CliError", "OneLineParser", "device_problem", "fraction_list", "guarded", "input_shape", "key_value",
           "model_kwargs", "output_file", "output_dir", "positive_int", "positive_number", "repeated", "run_script",
           "writing"]


def batch_fits(key: str, batch: int, input_shape, device: str, model_kw: dict, seed: int = 0) -> None:
    """``--batch`` refused, in one line with the estimate, where a training step of zoo model ``key`` at
    it cannot fit in the memory available now (:func:`models.profiler.available_memory`): the batch's
    input and a store-all step's tensors scaled from batches 2 and 4
    (:func:`models.profiler.step_memory_estimate`, a lower estimate; the input alone where the model
    fails at those batches, the command's own check then naming why). ``memplan profile --batch
    1000000`` had allocated until the OOM killer ended it (or, where its input alone could not be
    allocated, ended in a traceback); ``memplan budget`` checks the same before its search."""
    from memplan.models.networks import DEFAULT_INPUT
    from memplan.models.profiler import available_memory, step_memory_estimate
    from memplan.models.units import fmt_bytes, fmt_memory

    avail = available_memory(device)
    if avail is None:
        return
    kw = dict(model_kw=model_kw, seed=seed)
    try:
        est = step_memory_estimate(key, batch, input_shape, **kw)
    except (RuntimeError, ValueError, IndexError, TypeError):
        est = step_memory_estimate(key, batch, input_shape, small=None, **kw)    # nothing run
    need = est["input"] + est["step"]
    if need <= avail:
        return
    most = int(avail // est["per_sample"]) if est["per_sample"] > 0 else 0
    what = f"{fmt_bytes(est['input'])} B of input"
    if est["batches"]:
        what += (f" and {fmt_memory(est['step'])} for a store-all step's tensors, scaled from batches "
                 f"{est['batches'][0]} and {est['batches'][1]}")
    how = (("give --batch {} or less" if est["batches"] else "give a smaller --batch (the input alone fits up to "
            "batch {})").format(most) if most >= 1 else "give a smaller --input")
    raise InputError(f"--batch {batch}: a training step of {key} on input "
                     f"{'x'.join(map(str, input_shape or DEFAULT_INPUT[key]))} needs at least {fmt_memory(need)} "
                     f"({what}), more than the {fmt_memory(avail)} of memory available "
                     f"{'on the host' if device == 'cpu' else 'on ' + device}; {how}")
