"""Human units at the edges: parse "90MB", "1.5GiB", "12.5GB/s", "37.4ms"; print them back.

Inside the code everything is bytes and seconds (floats). These helpers are used only by the
command line and the instance files.

Conventions (as in the papers and in PyTorch's memory reports):
- ``B``, ``KB``/``kB``, ``MB``, ``GB``, ``TB`` are decimal (10^3 steps);
- ``KiB``, ``MiB``, ``GiB``, ``TiB`` are binary (2^10 steps);
- a bare number is bytes (memory) or seconds (time);
- a lowercase ``b`` after a prefix (``Mb``, ``Gb/s``, ``Gbps``, ``mb``) is refused: it reads as bits,
  and taking it for bytes (as case-insensitive matching did) would make a link 8 times too fast.

Paper 004 writes "MB" for MiB (7.63 MB = 4*1000*2000 bytes); an instance file says which it means
through its ``units`` block, so no guessing is needed there.
"""
from __future__ import annotations

import math
import re

_MEM = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 1e3, "m": 1e6, "g": 1e9,
}
_TIME = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0}

_NUM = r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*"


class UnitError(ValueError):
    """A quantity could not be parsed; the message says what was expected."""


def _split(text: str, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"{what} {text!r} is not a quantity: give a number or a string with a unit, e.g. "
                        + {"memory": "'90MiB'", "time": "'37.4ms'", "bandwidth": "'12.5GB/s'"}[what])
    if isinstance(text, (int, float)):
        return float(text), ""
    m = re.fullmatch(_NUM + r"([A-Za-zµ/]*)\s*", str(text))
    if not m:
        raise UnitError(f"cannot read {what} {text!r}: expected a number with an optional unit, e.g. "
                        + {"memory": "'90MiB' or '1.5GB'", "time": "'37.4ms'",
                           "bandwidth": "'12.5GB/s'"}[what])
    return float(m.group(1)), m.group(2)


def _finite(value: float, text, what: str) -> float:
    if not math.isfinite(value):
        raise UnitError(f"{what} {text!r} is not a finite quantity")
    return value


def _bits(unit: str, what: str, shown, suffix: str = "") -> None:
    """Refuse a unit written with a lowercase ``b`` after a prefix (``Mb``, ``kib``, ``Gbps``): it
    reads as bits; say what to write instead."""
    if len(unit) >= 2 and unit.endswith("b") and unit[:-1].lower() in ("k", "m", "g", "t", "ki", "mi", "gi", "ti"):
        fixed = unit[:-1].upper().replace("I", "i") + "B"
        fixed = "kB" if fixed == "KB" and unit[0] == "k" else fixed
        raise UnitError(f"{what} {shown!r}: {unit + suffix!r} reads as bits; memplan counts bytes: write "
                        f"{fixed + ('/s' if suffix else '')!r} for bytes (a bit is 1/8 byte)")


def _size(text, what: str, shown, suffix: str = "") -> float:
    value, unit = _split(text, what)
    _bits(unit, what, shown, suffix)
    key = unit.lower()
    if key not in _MEM:
        per = "/s" if what == "bandwidth" else ""
        units = ", ".join(u + per for u in ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"))
        raise UnitError(f"unknown {what} unit {unit + suffix!r} in {shown!r} (use {units})")
    if value < 0:
        raise UnitError(f"{what} {shown!r} is negative")
    return _finite(value * _MEM[key], shown, what)


def parse_memory(text: str | float) -> float:
    """Bytes from ``"90MB"``, ``"1.5GiB"``, ``"4096"``; raises :class:`UnitError` otherwise."""
    return _size(text, "memory", text)


def parse_time(text: str | float) -> float:
    """Seconds from ``"37.4ms"``, ``"2s"``, ``"0.5"``."""
    value, unit = _split(text, "time")
    key = unit.lower()
    if key not in _TIME:
        raise UnitError(f"unknown time unit {unit!r} in {text!r} (use s, ms, us)")
    return _finite(value * _TIME[key], text, "time")


#: How a user spells free links (a pipeline's communications taking no time): ``--bandwidth inf``.
#: ``parse_bandwidth`` itself refuses them (an offloading link cannot be free); the pipeline front end
#: and the sweeps read them as ``math.inf``.
FREE_LINKS = ("inf", "+inf", "infinity", "infinite")


def is_free_link(value) -> bool:
    """``math.inf`` or one of :data:`FREE_LINKS` (any case, spaces around)."""
    if isinstance(value, str):
        return value.strip().lower() in FREE_LINKS
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == math.inf


def parse_bandwidth(text: str | float) -> float:
    """Bytes per second from ``"12.5GB/s"``, ``"16GiB/s"``, or a bare number of bytes/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if isinstance(text, bool):
        return _size(text, "bandwidth", text)
    s = str(text).strip()
    suffix = ""
    if s.lower().endswith("/s"):
        s, suffix = s[:-2], "/s"
    elif s.lower().endswith("ps"):  # "GBps"
        s, suffix = s[:-2], "ps"
    else:
        _, unit = _split(s, "bandwidth")
        if unit:      # "1GB" is a size: read as 1 GB/s it would silently change the answer
            raise UnitError(f"bandwidth {text!r} has a size unit but no '/s': write e.g. {s + '/s'!r} "
                            "(bytes per second), or a bare number of bytes/s")
    return _size(s, "bandwidth", text, suffix)


def memory_factor(unit: str) -> float:
    """Bytes in one ``unit`` (``"MiB"`` -> 1048576)."""
    _bits(unit, "memory unit", unit)
    key = unit.lower()
    if key not in _MEM:
        raise UnitError(f"unknown memory unit {unit!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    return _MEM[key]


def time_factor(unit: str) -> float:
    """Seconds in one ``unit`` (``"ms"`` -> 0.001)."""
    key = unit.lower()
    if key not in _TIME:
        raise UnitError(f"unknown time unit {unit!r} (use s, ms, us, ns, min)")
    return _TIME[key]


def fmt_memory(nbytes: float | None, binary: bool = True, digits: int = 1) -> str:
    """``fmt_memory(91_000_000) == '86.8 MiB'``; ``digits`` decimals (none for a whole number of bytes)."""
    if nbytes is None:
        return "-"
    units = ["B", "KiB", "MiB", "GiB", "TiB"] if binary else ["B", "KB", "MB", "GB", "TB"]
    base = 1024.0 if binary else 1000.0
    x = float(nbytes)
    for u in units:
        if abs(x) < base or u == units[-1]:
            if u == "B":     # whole bytes as such; a fractional size (a toy chain's) keeps its decimals
                if x != 0 and abs(x) < 0.5 * 10.0 ** -max(1, digits):
                    return f"{x:.3g} B"      # a limit of 1e-300 B read "0.0 B"
                return f"{x:.0f} B" if float(x).is_integer() else f"{x:.{max(1, digits)}f} B"
            return f"{x:.{digits}f} {u}"
        x /= base
    return f"{x:.{digits}f} {units[-1]}"  # pragma: no cover


def fmt_bytes(nbytes: float) -> str:
    """A byte count for a message a user may copy into a limit: whole bytes in full (``9792808``), a
    fractional one to 12 significant digits (``78108426.24``, within 5e-12 of the value, inside every
    solver's 1e-9 tolerance): six (``9.79281e+06``) rounded a stated minimum up or down by bytes."""
    x = float(nbytes)
    if x.is_integer() and abs(x) < 1e18:
        return f"{x:.0f}"
    return f"{x:.12g}"


def fmt_time(seconds: float | None, digits: int = 3) -> str:
    """``fmt_time(0.0474) == '47.4 ms'``; ``digits`` significant digits below 100 of the unit."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s == 0:
        return "0 s"
    if abs(s) >= 1:
        return f"{s:.{digits}g} s" if abs(s) < 100 else f"{s:.1f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.{digits}g} ms" if abs(s) < 0.1 else f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.{digits}g} us"


def fmt_bandwidth(bps: float | None) -> str:
    if bps is None:
        return "-"
    if bps == math.inf:
        return "inf (free links)"
    return fmt_memory(bps, binary=False).replace(" ", " ") + "/s"


def did_you_mean(word, choices) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word`` (difflib's), or ``""`` where none is
    close: the hint of every "unknown name" error (problems, methods, keywords, keys)."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
