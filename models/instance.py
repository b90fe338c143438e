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

``abar`` should be at least ``a`` (abar^l contains a^l) but measured tables carry rounding noise
(paper 004's Table 2 has abar^4 = 10.66 < a^4 = 10.68), so a smaller abar is accepted as given.

``stages`` lists rows 0..L+1 in order: row 0 is the input a^0, rows 1..L the stages, row L+1 the
loss. ``abar`` and ``delta`` default to ``a``; ``o_f``, ``o_b``, ``W``, ``u_f``, ``u_b`` default to 0.
Platform quantities are strings with units ("16GiB", "12GB/s") or numbers in the file's memory unit
(bandwidth: memory unit per second). The file reads in pandas with
``pd.DataFrame(json.load(f)["stages"])``.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .chain import Chain, Platform
from .units import UnitError, memory_factor, parse_bandwidth, parse_memory, time_factor

FORMAT = "memplan-instance/1"


class InstanceError(ValueError):
    """A malformed instance file; the message names the file, the field and the problem."""


class _Units(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time: str = "s"
    memory: str = "B"

    @field_validator("time")
    @classmethod
    def _t(cls, v: str) -> str:
        time_factor(v)
        return v

    @field_validator("memory")
    @classmethod
    def _m(cls, v: str) -> str:
        memory_factor(v)
        return v


class _Stage(BaseModel):
    model_config = ConfigDict(extra="allow")
    stage: int = Field(ge=0)
    name: str = ""
    u_f: float = Field(0.0, ge=0, allow_inf_nan=False)
    u_b: float = Field(0.0, ge=0, allow_inf_nan=False)
    a: float = Field(ge=0, allow_inf_nan=False)
    abar: float | None = Field(None, ge=0, allow_inf_nan=False)
    delta: float | None = Field(None, ge=0, allow_inf_nan=False)
    o_f: float = Field(0.0, ge=0, allow_inf_nan=False)
    o_b: float = Field(0.0, ge=0, allow_inf_nan=False)
    W: float = Field(0.0, ge=0, allow_inf_nan=False)


class _Platform(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memory: str | float | None = None
    bandwidth: str | float | None = None
    gpus: int = Field(1, ge=1)
    name: str = ""


class _Instance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["memplan-instance/1"]
    name: str
    description: str = ""
    units: _Units = _Units()
    provenance: dict[str, Any] = {}
    platform: _Platform | None = None
    stages: list[_Stage] = Field(min_length=2)

    @model_validator(mode="after")
    def _order(self) -> "_Instance":
        for i, row in enumerate(self.stages):
            if row.stage != i:
                raise ValueError(f"stages[{i}].stage is {row.stage}; rows must be numbered 0..L+1 in order")
        return self


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "(top level)"


def chain_from_dict(data: dict[str, Any], source: str = "<dict>") -> tuple[Chain, Platform | None]:
    """Validate an instance dictionary and build the Chain (bytes, seconds) and its Platform."""
    if isinstance(data, dict) and "format" in data and data["format"] != FORMAT:
        raise InstanceError(f"{source}: field 'format': unsupported format {data['format']!r} "
                            f"(this memplan reads {FORMAT!r})")
    try:
        inst = _Instance.model_validate(data)
    except ValidationError as e:
        lines = [f"{source}: field '{_loc(err['loc'])}': {err['msg']}"
                 + (f" (got {err['input']!r})" if not isinstance(err.get("input"), (dict, list)) else "")
                 for err in e.errors()]
        raise InstanceError("invalid instance file\n  " + "\n  ".join(lines)) from None
    except UnitError as e:  # pragma: no cover - pydantic wraps validator errors
        raise InstanceError(f"{source}: field 'units': {e}") from None
    tf = time_factor(inst.units.time)
    mf = memory_factor(inst.units.memory)
    rows = inst.stages
    L = len(rows) - 2
    col = lambda key: np.array([getattr(r, key) for r in rows], dtype=float)  # noqa: E731
    a = col("a")
    abar = np.array([r.abar if r.abar is not None else r.a for r in rows], dtype=float)
    delta = np.array([r.delta if r.delta is not None else r.a for r in rows], dtype=float)
    for key in ("u_f", "u_b", "o_f", "o_b", "W"):
        if getattr(rows[0], key):
            raise InstanceError(f"{source}: field 'stages[0].{key}': row 0 is the input a^0 and has no {key}")
    chain = Chain(
        uf=col("u_f") * tf, ub=col("u_b") * tf, of=col("o_f") * mf, ob=col("o_b") * mf,
        weights=col("W") * mf, wa=a * mf, wabar=abar * mf, wd=delta * mf,
        name=inst.name, stage_names=[r.name or ("input" if i == 0 else "loss" if i == L + 1 else f"stage{i}")
                                     for i, r in enumerate(rows)],
        provenance={**inst.provenance, "description": inst.description} if inst.description
        else dict(inst.provenance),
    )
    platform = None
    if inst.platform is not None:
        p = inst.platform
        try:
            mem = None if p.memory is None else (p.memory * mf if isinstance(p.memory, (int, float))
                                                  else parse_memory(p.memory))
            bw = None if p.bandwidth is None else (p.bandwidth * mf if isinstance(p.bandwidth, (int, float))
                                                    else parse_bandwidth(p.bandwidth))
        except UnitError as e:
            raise InstanceError(f"{source}: field 'platform': {e}") from None
        platform = Platform(memory=mem, bandwidth=bw, gpus=p.gpus, name=p.name)
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
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InstanceError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise InstanceError(f"{path}: the top level must be a JSON object")
    return Instance(*chain_from_dict(data, str(path)))


def load_chain(path: str | Path) -> Chain:
    return load_instance(path)[0]


def chain_to_dict(chain: Chain, platform: Platform | None = None, *, time_unit: str = "ms",
                  memory_unit: str = "MiB", description: str = "", digits: int = 6) -> dict[str, Any]:
    """The instance dictionary of a chain, numbers expressed in the given units."""
    tf, mf = time_factor(time_unit), memory_factor(memory_unit)
    r = lambda x: float(round(float(x), digits))  # noqa: E731
    L = chain.L
    stages = []
    for l in range(L + 2):
        row: dict[str, Any] = {"stage": l, "name": chain.stage_names[l]}
        if l > 0:
            row.update(u_f=r(chain.uf[l] / tf), u_b=r(chain.ub[l] / tf))
        row.update(a=r(chain.wa[l] / mf), abar=r(chain.wabar[l] / mf), delta=r(chain.wd[l] / mf))
        if l > 0:
            row.update(o_f=r(chain.of[l] / mf), o_b=r(chain.ob[l] / mf), W=r(chain.weights[l] / mf))
        stages.append(row)
    prov = dict(chain.provenance)
    desc = description or prov.pop("description", "")
    out: dict[str, Any] = {"format": FORMAT, "name": chain.name, "description": desc,
                           "units": {"time": time_unit, "memory": memory_unit}, "provenance": prov}
    if platform is not None:
        out["platform"] = {"memory": None if platform.memory is None else f"{platform.memory:.0f}B",
                           "bandwidth": None if platform.bandwidth is None else f"{platform.bandwidth:.0f}B/s",
                           "gpus": platform.gpus, "name": platform.name}
    out["stages"] = stages
    return out


def save_instance(chain: Chain, path: str | Path, platform: Platform | None = None, *,
                  overwrite: bool = False, **kw) -> Path:
    """Write an instance file (refuses to overwrite an existing file unless ``overwrite=True``)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (or --force) to replace it")
    data = chain_to_dict(chain, platform, **kw)
    data["provenance"].setdefault("written", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path
