"""Instance files: versioned JSON, validated field by field on load (pydantic), never modified in place.

Format ``memplan-instance/1``::

    {
      "format": "memplan-instance/1",
      "name": "paper004-table2",
      "description": "free text",
      "units": {"time": "ms", "memory": "MiB"},      # units of every number in "stages"
      "provenance": {"network": ..., "batch": ..., "device": ..., "torch": ..., "date": ...,
                     "linearization": ..., "source": ...},
      "platform": {"memory": "16GiB", "bandwidth": "12GB/s", "gpus": 4},   # optional
      "stages": [
        {"stage": 0, "name": "input", "a": 7.63, "abar": 7.63, "delta": 7.63},
        {"stage": 1, "name": "fc1", "u_f": 1.6, "u_b": 3.05, "a": 9.54, "abar": 9.54,
         "delta": 9.54, "o_f": 0, "o_b": 20.01, "W": 19.07},
        ...
        {"stage": 7, "name": "loss", "u_f": 0, "u_b": 0, "a": 0}
      ]
    }

Fields (anything else is an error naming the field and the closest valid name, e.g. ``u_bb`` ->
``did you mean 'u_b'?``):

=================  ========  ===================================================================
field              required  meaning, default when left out
=================  ========  ===================================================================
``format``         yes       ``"memplan-instance/1"``
``name``           yes       the chain's name
``units``          yes       ``{"time": T, "memory": M}``, both required: T in s, ms, us, ns, min;
                             M in B, KB, MB, GB, TB (10^3 steps), KiB, MiB, GiB, TiB (2^10 steps)
``stages``         yes       rows 0..L+1 in order, ``"stage"`` numbering them (at least 3 rows: L >= 1)
``description``    no        free text (default "")
``provenance``     no        free-form object (default {}): its keys are not checked
``resident``       no        bytes, in the file's memory unit (default 0), of the tensors that cross
                             two or more stage boundaries and of their gradients, charged once for
                             the whole step (:attr:`Chain.resident`, issue 30); written only when > 0
``resident_grads`` no        ``[[bytes, k, r], ...]``, bytes in the file's memory unit: the gradients
                             inside ``resident``, each made by stage r's backward and freed by stage
                             k's (:attr:`Chain.resident_grads`); written only when there are some
``resident_values`` no       ``[[bytes, k, [r, ...]], ...]``, bytes in the file's memory unit: values
                             inside ``resident`` with a storage of their own, made by stage k and read
                             by the stages r; ``[]`` for one a backward saves (kept until B^k), else
                             let go after its last reader's forward (:attr:`Chain.resident_values`);
                             written only when there are some
``u_turn``         no        seconds per turn, in the file's time unit (default 0): the extra time of a
                             backward step followed by a forward (:attr:`Chain.u_turn`); written only
                             when > 0
``platform``       no        ``memory`` (> 0), ``bandwidth`` (> 0): strings with units
                             ("16GiB", "12GB/s") or numbers in the file's memory unit (bandwidth:
                             memory unit per second), null or left out when unknown; ``gpus``
                             (whole number >= 1, default 1); ``name`` (default "")
=================  ========  ===================================================================

A stage row takes ``stage``, ``name``, ``u_f``, ``u_b``, ``a``, ``abar``, ``delta``, ``o_f``,
``o_b``, ``W`` (numbers in the file's units; JSON numbers, not strings; null is not a number):

- ``stage`` (required): the row's index, 0..L+1 in order;
- ``a`` (required on every row): size of a^l (row 0: the input a^0, row L+1: the loss value);
- ``u_f``, ``u_b``: forward and backward times, **required on rows 1..L** (no default: a missing time
  is an error, not 0); on the loss row L+1 they may be left out and are then 0 (a loss that costs
  nothing, as in paper 004's Table 2 and :meth:`Chain.from_stages`); row 0 (the input) has none
  (left out, or 0);
- ``abar``, ``delta`` default to ``a``; ``o_f``, ``o_b``, ``W`` default to 0 (row 0: left out or 0);
- ``o_f_all``, ``o_f_ng`` (optional, default ``o_f``, at most ``o_f``): F_all's own forward overhead
  and the no-grad forward's (F_ck, F_none), where ``o_f`` is the larger of the two
  (:attr:`Chain.of_all`, :attr:`Chain.of_ng`); written only where one differs from ``o_f``;
- ``u_f_ng`` (optional, default ``u_f``): the no-grad forward's (F_ck, F_none) own time
  (:attr:`Chain.uf_ng`; rows 1..L+1);
- ``name`` defaults to "input", "stage<l>", "loss".

``abar`` should be at least ``a`` (abar^l contains a^l) but measured tables carry rounding noise
(paper 004's Table 2 has abar^4 = 10.66 < a^4 = 10.68), so a smaller abar is accepted as given.

Accepted ranges (after conversion from the file's units; no real network comes near them, so a value
beyond is a unit slip or a corrupted file): every size 0 .. 1 PB (1e15 bytes), every time
0 .. 1e6 s; NaN and infinities are refused; platform memory in (0, 1 PB], bandwidth in
(0, 1 PB/s], GPUs 1 .. 1,000,000. :class:`~memplan.models.chain.Chain` checks the same ranges
when a chain is built in Python.

Every problem is reported as :class:`InstanceError` on one line naming the file and the field, e.g.
``t.json: field 'stages[2].u_bb': unknown field; did you mean 'u_b'?``. The file reads in pandas with
``pd.DataFrame(json.load(f)["stages"])``.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .chain import (MAX_BANDWIDTH, MAX_BYTES, MAX_GPUS, MAX_SECONDS, RANGE_TOLERANCE, Chain, Platform, _resident_grads,
                    _resident_values)
from .solution import InputError
from .units import UnitError, memory_factor, parse_bandwidth, parse_memory, time_factor

FORMAT = "memplan-instance/1"

#: the units an instance file may state (``units.time``, ``units.memory``; case-insensitive)
TIME_UNITS = ("s", "ms", "us", "ns", "min")
MEMORY_UNITS = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")


class InstanceError(InputError):
    """A malformed instance file, or a name that is not one; the message names the file, the field
    and the problem. An :class:`~memplan.models.solution.InputError` (hence a ValueError): bad input,
    as the API's front door documents."""


_STRICT = ConfigDict(extra="forbid", strict=True)


class _Units(BaseModel):
    model_config = _STRICT
    time: str
    memory: str

    @field_validator("time")
    @classmethod
    def _t(cls, v: str) -> str:
        if v.lower() not in {u.lower() for u in TIME_UNITS} and v != "µs":
            raise ValueError(f"unknown time unit {v!r} (use one of {', '.join(TIME_UNITS)})")
        try:
            time_factor(v)
        except UnitError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("memory")
    @classmethod
    def _m(cls, v: str) -> str:
        if v.lower() not in {u.lower() for u in MEMORY_UNITS}:
            raise ValueError(f"unknown memory unit {v!r} (use one of {', '.join(MEMORY_UNITS)})")
        try:              # 'Mb' passes the case-insensitive test and means bits: said here, with the field
            memory_factor(v)
        except UnitError as e:
            raise ValueError(str(e)) from None
        return v


_NUMBER = dict(allow_inf_nan=False)


class _Stage(BaseModel):
    model_config = _STRICT
    stage: int
    name: str = ""
    u_f: float | None = Field(None, **_NUMBER)      # required on rows 1..L: checked in chain_from_dict
    u_b: float | None = Field(None, **_NUMBER)
    a: float = Field(**_NUMBER)
    abar: float | None = Field(None, **_NUMBER)     # default: a
    delta: float | None = Field(None, **_NUMBER)    # default: a
    o_f: float = Field(0.0, **_NUMBER)
    o_f_all: float | None = Field(None, **_NUMBER)  # default: o_f
    o_f_ng: float | None = Field(None, **_NUMBER)   # default: o_f
    u_f_ng: float | None = Field(None, **_NUMBER)   # default: u_f
    o_b: float = Field(0.0, **_NUMBER)
    W: float = Field(0.0, **_NUMBER)

    @field_validator("u_f", "u_b", "abar", "delta", "o_f_all", "o_f_ng", "u_f_ng", mode="before")
    @classmethod
    def _no_null(cls, v: Any) -> Any:
        # None stands for "left out"; an explicit null in the file is not a number
        if v is None:
            raise ValueError("null is not a number (give a number, or leave the field out where it "
                             "has a default)")
        return v


class _Platform(BaseModel):
    model_config = _STRICT
    memory: str | float | None = None          # finiteness and range: checked in _platform
    bandwidth: str | float | None = None
    gpus: int = 1
    name: str = ""


class _Instance(BaseModel):
    model_config = _STRICT
    format: Literal["memplan-instance/1"]
    name: str
    description: str = ""
    units: _Units
    provenance: dict[str, Any] = {}
    resident: float = Field(0.0, **_NUMBER)
    resident_grads: list[list[float]] = []
    resident_values: list[Any] = []
    u_turn: float = Field(0.0, **_NUMBER)
    platform: _Platform | None = None
    stages: list[_Stage] = Field(min_length=3)


#: the schema's object at the head of an error location (for the names an unknown field is compared to)
_MODELS_AT = {"units": _Units, "platform": _Platform, "stages": _Stage}

_ROW_WORD = {_Instance: "an instance file", _Units: "units", _Platform: "platform", _Stage: "a stage row"}


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _edits(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment), case-insensitive."""
    a, b = a.lower(), b.lower()
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def closest_name(name: str, valid: list[str]) -> str | None:
    """The valid name a typo most likely meant: fewest edits (at most 2, and fewer than the typo's
    length), else difflib's closest match, else None.

    >>> closest_name("u_bb", ["u_f", "u_b", "a", "abar"]), closest_name("aa", ["a", "abar"])
    ('u_b', 'a')
    """
    if len(name) > 100:
        name = name[:100]
    scored = sorted((_edits(name, v), i, v) for i, v in enumerate(valid))
    if scored and scored[0][0] <= min(2, max(len(name), len(scored[0][2])) - 1):
        return scored[0][2]
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return close[0] if close else None


def _error_text(err: dict) -> str:
    """One pydantic error as ``field '...': what is wrong`` (unknown fields get the closest valid name)."""
    loc, kind = tuple(err["loc"]), err["type"]
    where = f"field '{_loc(loc)}'"
    if kind == "extra_forbidden":
        model = _Instance if len(loc) == 1 else _MODELS_AT.get(loc[0], _Instance)
        valid = list(model.model_fields)
        close = closest_name(str(loc[-1]), valid)
        hint = f"; did you mean {close!r}?" if close else ""
        return f"{where}: unknown field{hint} ({_ROW_WORD[model]} takes: {', '.join(valid)})"
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "model_type" or kind == "dict_type":
        return f"{where}: must be a JSON object (got {type(err['input']).__name__})"
    if kind == "list_type":
        return f"{where}: must be a JSON list (got {type(err['input']).__name__})"
    msg = str(err["msg"]).replace("Value error, ", "").replace("Input should be", "must be")
    if kind == "literal_error":
        msg = f"must be {FORMAT!r}"
    got = err.get("input")
    if not isinstance(got, (dict, list)) and kind not in ("too_short", "value_error"):
        msg += f" (got {_short(got)})"
    return f"{where}: {msg}"


def _one_line(source: str, problems: list[str]) -> str:
    head = f"{source}: {problems[0]}"
    if len(problems) > 1:
        more = "; ".join(problems[1:4])
        head += f"; also {more}" + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
    return head.replace("\r", " ").replace("\n", " ")


def _fmt_range(limit: float, factor: float, unit: str, base: str, note: str) -> str:
    return f"{limit:g} {base} ({note})" + ("" if factor == 1 else f" = {limit / factor:.6g} {unit}")


def _check_rows(inst: _Instance, tf: float, mf: float) -> list[str]:
    """The checks the schema cannot express: row numbering, row 0, required times, ranges."""
    problems: list[str] = []
    rows = inst.stages
    L = len(rows) - 2
    tu, mu = inst.units.time, inst.units.memory
    for i, row in enumerate(rows):
        if row.stage != i:
            problems.append(f"field 'stages[{i}].stage': is {row.stage}; rows must be numbered 0..L+1 in order "
                            f"(row {i} must have \"stage\": {i})")
            break
    for key in ("u_f", "u_b", "u_f_ng", "o_f", "o_f_all", "o_f_ng", "o_b", "W"):
        if getattr(rows[0], key):
            problems.append(f"field 'stages[0].{key}': row 0 is the input a^0 and has no {key} "
                            "(leave it out or give 0)")
    for i in range(1, L + 1):
        for key in ("u_f", "u_b"):
            if getattr(rows[i], key) is None:
                problems.append(f"field 'stages[{i}].{key}': required field is missing (every stage 1..L "
                                "gives its forward and backward times u_f and u_b; only the loss row may "
                                "leave them out)")
    if not (0 <= inst.resident * mf <= MAX_BYTES * RANGE_TOLERANCE):
        problems.append(f"field 'resident': {inst.resident:g} {mu} is out of range; sizes must be "
                        f"between 0 and {_fmt_range(MAX_BYTES, mf, mu, 'bytes', '1 PB')}")
    for i, e in enumerate(inst.resident_grads):
        if len(e) != 3 or not (float(e[1]).is_integer() and float(e[2]).is_integer()):
            problems.append(f"field 'resident_grads[{i}]': {e} is not [bytes, k, r] with integer stages k and r")
            break
    else:
        try:
            _resident_grads(_grad_spans(inst.resident_grads, mf), len(rows) - 2, inst.resident * mf)
        except ValueError as e:
            problems.append(f"field 'resident_grads': {str(e).split(': ', 1)[-1]}")
    try:
        _resident_values(_value_spans(inst.resident_values, mf), len(rows) - 2, inst.resident * mf,
                         _grad_spans(inst.resident_grads, mf) if not any("resident_grads" in p for p in problems) else ())
    except ValueError as e:
        m = re.match(r"Chain\.(resident_values(?:\[\d+\])*)(?: = |: )(.*)", str(e))
        problems.append(f"field '{m.group(1)}': {m.group(2)}" if m else f"field 'resident_values': {e}")
    if not (0 <= inst.u_turn * tf <= MAX_SECONDS * RANGE_TOLERANCE):
        problems.append(f"field 'u_turn': {inst.u_turn:g} {tu} is out of range; times must be "
                        f"between 0 and {_fmt_range(MAX_SECONDS, tf, tu, 's', '11.6 days')}")
    for i, row in enumerate(rows):
        for key in ("u_f", "u_b", "u_f_ng"):
            v = getattr(row, key)
            if v is not None and not (0 <= v * tf <= MAX_SECONDS * RANGE_TOLERANCE):
                problems.append(f"field 'stages[{i}].{key}': {v:g} {tu} is out of range; times must be "
                                f"between 0 and {_fmt_range(MAX_SECONDS, tf, tu, 's', '11.6 days')}")
        for key in ("a", "abar", "delta", "o_f", "o_f_all", "o_f_ng", "o_b", "W"):
            v = getattr(row, key)
            if v is not None and not (0 <= v * mf <= MAX_BYTES * RANGE_TOLERANCE):
                problems.append(f"field 'stages[{i}].{key}': {v:g} {mu} is out of range; sizes must be "
                                f"between 0 and {_fmt_range(MAX_BYTES, mf, mu, 'bytes', '1 PB')}")
        for key in ("o_f_all", "o_f_ng"):
            v = getattr(row, key)
            if v is not None and v > row.o_f:
                problems.append(f"field 'stages[{i}].{key}': {v:g} {mu} is more than o_f ({row.o_f:g} {mu}); o_f is "
                                f"the larger of the two forwards' overheads, so give {key} <= o_f (or leave it out)")
    return problems


def _platform(p: _Platform, mf: float, mu: str) -> tuple[Platform, list[str]]:
    problems: list[str] = []
    values: dict[str, float | None] = {}
    for key, parse, limit, base, unit in (("memory", parse_memory, MAX_BYTES, "bytes", mu),
                                          ("bandwidth", parse_bandwidth, MAX_BANDWIDTH, "bytes/s", mu + "/s")):
        raw = getattr(p, key)
        if raw is None:
            values[key] = None
            continue
        try:
            v = raw * mf if isinstance(raw, (int, float)) else parse(raw)
        except UnitError as e:
            problems.append(f"field 'platform.{key}': {e}")
            continue
        if not (math.isfinite(v) and 0 < v <= limit * RANGE_TOLERANCE):
            shown = f"{raw:g} {unit}" if isinstance(raw, (int, float)) else repr(raw)
            problems.append(f"field 'platform.{key}': {shown} is out of range; give a positive {key} of at "
                            f"most {limit:g} {base} (1 PB{'/s' if key == 'bandwidth' else ''})")
        values[key] = v
    if not 1 <= p.gpus <= MAX_GPUS:
        problems.append(f"field 'platform.gpus': {p.gpus} is out of range; give a whole number between 1 and "
                        f"{MAX_GPUS}")
    if problems:
        return None, problems  # type: ignore[return-value]
    return Platform(memory=values["memory"], bandwidth=values["bandwidth"], gpus=p.gpus, name=p.name), []


def _grad_spans(rows: list, mf: float) -> list:
    """An instance file's ``resident_grads`` rows as :attr:`Chain.resident_grads` (bytes, k, r)."""
    return [(float(g) * mf, int(k), int(r)) for g, k, r in rows]


def _value_spans(rows: list, mf: float) -> list:
    """An instance file's ``resident_values`` rows as :attr:`Chain.resident_values` (bytes, k, readers)."""
    return [(float(e[0]) * mf, e[1], e[2])
            if isinstance(e, list) and len(e) == 3 and isinstance(e[0], (int, float)) and not isinstance(e[0], bool)
            else e for e in rows]


def chain_from_dict(data: dict[str, Any], source: str = "<dict>") -> tuple[Chain, Platform | None]:
    """Validate an instance dictionary and build the Chain (bytes, seconds) and its Platform.

    Raises :class:`InstanceError` (one line naming ``source`` and the field) for anything the module
    docstring does not allow.

    >>> chain_from_dict({"format": FORMAT, "name": "t", "units": {"time": "s", "memory": "B"},
    ...                  "stages": [{"stage": 0, "a": 1}, {"stage": 1, "u_f": 1, "u_bb": 2, "a": 1},
    ...                             {"stage": 2, "a": 0}]}, "t.json")
    Traceback (most recent call last):
    ...
    memplan.models.instance.InstanceError: t.json: field 'stages[1].u_bb': unknown field; did you mean 'u_b'? ...
    """
    if not isinstance(data, dict):
        raise InstanceError(f"{source}: field '(top level)': must be a JSON object (got {type(data).__name__})")
    if "format" in data and data["format"] != FORMAT:
        raise InstanceError(f"{source}: field 'format': unsupported format {_short(data['format'])} "
                            f"(this memplan reads {FORMAT!r})")
    try:
        inst = _Instance.model_validate(data)
    except ValidationError as e:
        errors = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")  # a typo explains a "missing"
        raise InstanceError(_one_line(source, [_error_text(err) for err in errors])) from None
    tf = time_factor(inst.units.time)
    mf = memory_factor(inst.units.memory)
    problems = _check_rows(inst, tf, mf)
    platform = None
    if inst.platform is not None:
        platform, more = _platform(inst.platform, mf, inst.units.memory)
        problems += more
    if problems:
        raise InstanceError(_one_line(source, problems))
    rows = inst.stages
    L = len(rows) - 2
    col = lambda key: np.array([getattr(r, key) or 0.0 for r in rows], dtype=float)  # noqa: E731
    a = col("a")
    abar = np.array([r.abar if r.abar is not None else r.a for r in rows], dtype=float)
    delta = np.array([r.delta if r.delta is not None else r.a for r in rows], dtype=float)
    own = {key: np.array([getattr(r, key) if getattr(r, key) is not None else r.o_f for r in rows], dtype=float) * mf
           for key in ("o_f_all", "o_f_ng")}
    try:
        chain = Chain(
            uf=col("u_f") * tf, ub=col("u_b") * tf, of=col("o_f") * mf, ob=col("o_b") * mf,
            weights=col("W") * mf, wa=a * mf, wabar=abar * mf, wd=delta * mf,
            name=inst.name,
            stage_names=[r.name or ("input" if i == 0 else "loss" if i == L + 1 else f"stage{i}")
                         for i, r in enumerate(rows)],
            provenance={**inst.provenance, "description": inst.description} if inst.description
            else dict(inst.provenance), resident=inst.resident * mf,
            resident_grads=_grad_spans(inst.resident_grads, mf),
            resident_values=_value_spans(inst.resident_values, mf),
            of_all=own["o_f_all"], of_ng=own["o_f_ng"],
            uf_ng=(np.array([r.u_f_ng if r.u_f_ng is not None else (r.u_f or 0.0) for r in rows], dtype=float) * tf
                   if any(r.u_f_ng is not None for r in rows) else None),
            u_turn=inst.u_turn * tf,
        )
    except ValueError as e:   # pragma: no cover - the checks above cover the Chain's
        raise InstanceError(f"{source}: field 'stages': {e}") from None
    return chain, platform


class Instance(NamedTuple):
    """A chain and the platform it is planned for (None when the file names none).

    A plain pair, so ``chain, platform = load_instance(...)`` works.
    """

    chain: Chain
    platform: Platform | None = None


def shipped_dir() -> Path:
    """The folder of the instance files shipped with memplan (package data ``memplan.instances``)."""
    from importlib import resources

    return Path(str(resources.files("memplan.instances")))


def shipped_instances() -> list[str]:
    """Names of the shipped instance files (``load_instance(name)`` finds them)."""
    return sorted(p.stem for p in shipped_dir().glob("*.json"))


def _resolve(path: str | Path) -> Path:
    """A path as given, else a shipped instance of that name (with or without ``.json``)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"an instance is a file path or a shipped instance's name (str or path), not "
                        f"{type(path).__name__} {path!r:.40}")
    if not str(path).strip():
        raise InstanceError("no instance given: name a file (instances/*.json) or a shipped instance "
                            f"({', '.join(shipped_instances())})")
    p = Path(path)
    if p.exists():
        return p
    if p.parent == Path(".") and p.name:
        cand = shipped_dir() / (p.name if p.suffix == ".json" else p.name + ".json")
        if cand.exists():
            return cand
        names = shipped_instances()
        import difflib

        close = difflib.get_close_matches(p.stem, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InstanceError(f"{path}: no such instance file, and no shipped instance of that name{hint} "
                            f"(shipped: {', '.join(names)})")
    raise InstanceError(f"{path}: no such instance file")


def read_text_file(path: str | Path, what: str, error=None) -> str:
    """The text of a UTF-8 file, or ``error`` (default :class:`InstanceError`) naming the file and
    what is wrong: a folder, a file that cannot be read (permissions, ...), or bytes that are not UTF-8."""
    error = error or InstanceError
    p = Path(path)
    if p.is_dir():
        raise error(f"{path}: is a folder, not an {what}" if what[0] in "aeiou" else
                    f"{path}: is a folder, not a {what}")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise error(f"{path}: cannot read this {what} ({e.strerror or e})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not a text {what} in UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start} is not "
                    "UTF-8; save it as UTF-8 text)") from None


def load_instance(path: str | Path) -> Instance:
    """Read and validate an instance file, or a shipped instance by name.

    Parameters
    ----------
    path : str or Path
        A file (``instances/paper004_table2.json``) or the name of a shipped instance
        (``"paper004_table2"``; see :func:`shipped_instances`).

    Returns
    -------
    Instance
        ``(chain, platform)``; sizes in bytes, times in seconds.

    Raises
    ------
    InstanceError
        The message names the file, the field and what is wrong.

    Examples
    --------
    >>> chain, platform = load_instance("paper004_table2")
    >>> chain.L, round(chain.store_all_time() * 1e3, 2)
    (6, 37.38)
    """
    path = _resolve(path)
    try:
        data = json.loads(read_text_file(path, "instance file"))
    except json.JSONDecodeError as e:
        raise InstanceError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise InstanceError(f"{path}: not an instance: its JSON is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise InstanceError(f"{path}: the top level must be a JSON object")
    return Instance(*chain_from_dict(data, str(path)))


def load_chain(path: str | Path) -> Chain:
    return load_instance(path)[0]


def _plain(x: float) -> str:
    """A number as text that reads back exactly: whole numbers without decimals, others as repr."""
    x = float(x)
    return f"{x:.0f}" if x.is_integer() and abs(x) < 1e17 else repr(x)


def chain_to_dict(chain: Chain, platform: Platform | None = None, *, time_unit: str = "ms",
                  memory_unit: str = "MiB", description: str = "", digits: int | None = 6) -> dict[str, Any]:
    """The instance dictionary of a chain, numbers expressed in the given units.

    ``digits`` rounds every number to that many decimals of its unit where the rounded number loads
    back to the very same value (a ResNet's byte counts in MiB, a time of 1.5 ms), and writes the
    number unrounded otherwise (``None``: never rounded): a file saved and loaded again gives the same
    chain, sizes to the byte (the memory units are powers of two or of ten, exact or within one
    rounding error), not sizes rounded to 1e-6 MiB (a 9-byte chain came back 5% larger, integer
    chains came back fractional and exhaustive searches refused them).
    Every field is written, so the file does not depend on the defaults (``o_f_all`` and ``o_f_ng``
    where some stage's differs from its ``o_f``, their default).
    """
    tf, mf = time_factor(time_unit), memory_factor(memory_unit)

    def r(v: float, f: float) -> float:
        """``v`` (seconds or bytes) in the unit of factor ``f``, which the loader multiplies back:
        rounded to ``digits`` decimals only where the rounded number loads back to ``v`` itself."""
        v = float(v)
        x = v / f
        if digits is None:
            return x
        short = float(round(x, digits))
        if short * f == v:
            return short
        # a decimal unit (MB, ms) may miss v by one rounding: the neighbour that loads back to v, if any
        for y in (x, float(np.nextafter(x, np.inf)), float(np.nextafter(x, -np.inf))):
            if y * f == v:
                return y
        return x

    L = chain.L
    # each forward's own overhead, where some stage's differs from o_f (else the files stay as they were)
    own = {"o_f_all": bool(np.any(chain.of_all != chain.of)), "o_f_ng": bool(np.any(chain.of_ng != chain.of))}
    stages = []
    for l in range(L + 2):
        row: dict[str, Any] = {"stage": l, "name": chain.stage_names[l]}
        if l > 0:
            row.update(u_f=r(chain.uf[l], tf), u_b=r(chain.ub[l], tf))
        row.update(a=r(chain.wa[l], mf), abar=r(chain.wabar[l], mf), delta=r(chain.wd[l], mf))
        if l > 0:
            row.update(o_f=r(chain.of[l], mf), o_b=r(chain.ob[l], mf), W=r(chain.weights[l], mf))
            for key, arr in (("o_f_all", chain.of_all), ("o_f_ng", chain.of_ng)):
                if own[key]:
                    row[key] = r(arr[l], mf)
            if chain.uf_ng is not None:
                row["u_f_ng"] = r(chain.uf_ng[l], tf)
        stages.append(row)
    prov = dict(chain.provenance)
    desc = description or prov.pop("description", "")
    out: dict[str, Any] = {"format": FORMAT, "name": chain.name, "description": desc,
                           "units": {"time": time_unit, "memory": memory_unit}, "provenance": prov}
    if chain.resident:
        out["resident"] = r(chain.resident, mf)
    if chain.resident_grads:
        out["resident_grads"] = [[r(g, mf), k, rr] for g, k, rr in chain.resident_grads]
    if chain.resident_values:
        out["resident_values"] = [[r(b, mf), k, list(rs)] for b, k, rs in chain.resident_values]
    if chain.u_turn:
        out["u_turn"] = r(chain.u_turn, tf)
    if platform is not None:
        out["platform"] = {"memory": None if platform.memory is None else f"{_plain(platform.memory)}B",
                           "bandwidth": None if platform.bandwidth is None else f"{_plain(platform.bandwidth)}B/s",
                           "gpus": platform.gpus, "name": platform.name}
    out["stages"] = stages
    return out


def save_instance(chain: Chain, path: str | Path, platform: Platform | None = None, *,
                  overwrite: bool = False, **kw) -> Path:
    """Write an instance file (refuses to overwrite an existing file unless ``overwrite=True``).
    ``chain``: a :class:`Chain`, or an :class:`Instance` (its platform is written unless ``platform``
    is given)."""
    if isinstance(chain, Instance):
        chain, platform = chain.chain, platform if platform is not None else chain.platform
    if not isinstance(chain, Chain):
        raise TypeError(f"save_instance: chain must be a Chain or an Instance, not {type(chain).__name__}")
    if platform is not None and not isinstance(platform, Platform):
        # (was a bare AttributeError from deep inside: 'str' object has no attribute 'memory')
        raise TypeError(f"save_instance: platform must be a Platform (e.g. memplan.Platform(memory='16GiB', "
                        f"bandwidth='12GB/s')) or None, not {type(platform).__name__} {platform!r:.40}")
    path = Path(path)
    if path.is_dir():           # overwrite=True raised a bare IsADirectoryError
        raise IsADirectoryError(f"{path}: is a folder; give a file name, e.g. {path / 'instance.json'}")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (or --force) to replace it")
    data = chain_to_dict(chain, platform, **kw)
    data["provenance"].setdefault("written", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    text = json.dumps(data, indent=1, default=_provenance_value) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _provenance_value(x: Any) -> Any:
    """What JSON writes for a provenance value it has no type for: a numpy number or array as the number or
    list (a researcher's ``provenance={"lr": np.float32(0.1)}``), a path as its text; anything else is a
    TypeError naming the provenance (json's own named only the type)."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    raise TypeError(f"save_instance: Chain.provenance holds a {type(x).__name__} ({x!r:.40}), which an instance file "
                    "cannot hold: give numbers, strings, lists and dicts")
