"""Property-based tests of instance documents (issue 18): random valid documents round-trip through
save/load unchanged; random invalid ones (mutations of valid ones) are refused with an
:class:`InstanceError` on one line naming the field that was broken, never another exception; the
command line prints that line and exits with status 2."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memplan.models.chain import MAX_BANDWIDTH, MAX_BYTES, MAX_GPUS, MAX_SECONDS, Chain
from memplan.models.instance import (FORMAT, MEMORY_UNITS, TIME_UNITS, InstanceError, chain_from_dict,
                                     load_instance, save_instance)
from memplan.models.units import memory_factor, time_factor

from conftest import ROOT

FAST = settings(max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
ARRAYS = ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")
STAGE_KEYS = ("stage", "name", "u_f", "u_b", "a", "abar", "delta", "o_f", "o_b", "W")
TOP_KEYS = ("format", "name", "description", "units", "provenance", "platform", "stages")
UNIT_KEYS = ("time", "memory")
PLATFORM_KEYS = ("memory", "bandwidth", "gpus", "name")
SIZES = ("a", "abar", "delta", "o_f", "o_b", "W")
TIMES = ("u_f", "u_b")


# ------------------------------------------------------------------------------------ valid documents
def _decimal(max_value: float):
    """Numbers ``m * 10^e`` (at most 7 digits, at most 6 decimals) in [0, max_value], from 1e-6 up to
    the largest magnitudes the schema accepts."""
    top = math.floor(math.log10(max_value))

    def with_exponent(e):
        return st.integers(0, min(10**7, math.floor(max_value / 10.0**e))).map(lambda m: float(f"{m}e{e}"))

    return st.integers(-6, top).flatmap(with_exponent).filter(lambda x: x <= max_value)


@st.composite
def valid_documents(draw):
    tu = draw(st.sampled_from(TIME_UNITS))
    mu = draw(st.sampled_from(MEMORY_UNITS))
    tmax, smax = MAX_SECONDS / time_factor(tu), MAX_BYTES / memory_factor(mu)
    L = draw(st.integers(1, 6))
    rows = []
    for l in range(L + 2):
        row = {"stage": l}
        if draw(st.booleans()):
            row["name"] = draw(st.text(max_size=8))
        if 1 <= l <= L or (l == L + 1 and draw(st.booleans())):   # the loss row's times may be left out
            row["u_f"], row["u_b"] = draw(_decimal(tmax)), draw(_decimal(tmax))
        row["a"] = draw(_decimal(smax))
        for key in ("abar", "delta") + (("o_f", "o_b", "W") if l > 0 else ()):
            if draw(st.booleans()):
                row[key] = draw(_decimal(smax))
        rows.append(row)
    doc = {"format": FORMAT, "name": draw(st.text(max_size=12)), "units": {"time": tu, "memory": mu},
           "stages": rows}
    if draw(st.booleans()):
        doc["description"] = draw(st.text(max_size=12))
    if draw(st.booleans()):
        doc["provenance"] = draw(st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=6),
                                                 st.one_of(st.integers(-5, 5), st.text(max_size=5), st.none()),
                                                 max_size=3))
    if draw(st.booleans()):
        plat = {}
        if draw(st.booleans()):
            plat["memory"] = draw(st.one_of(_decimal(smax).filter(lambda x: x > 0),
                                            st.sampled_from(["16GiB", "80GB", "1.5TiB", "512MiB"])))
        if draw(st.booleans()):
            plat["bandwidth"] = draw(st.one_of(_decimal(MAX_BANDWIDTH / memory_factor(mu)).filter(lambda x: x > 0),
                                               st.sampled_from(["12GB/s", "16GiB/s", "1KB/s"])))
        if draw(st.booleans()):
            plat["gpus"] = draw(st.integers(1, MAX_GPUS))
        if draw(st.booleans()):
            plat["name"] = draw(st.text(max_size=8))
        doc["platform"] = plat
    return doc


def _same_chain(c1: Chain, c2: Chain, exact: bool) -> None:
    assert c1.name == c2.name and c1.stage_names == c2.stage_names
    # save_instance stamps the date it wrote the file (provenance "written"), nothing else is added
    assert {k: v for k, v in c2.provenance.items() if k != "written"} == c1.provenance
    for f in ARRAYS:
        a, b = getattr(c1, f), getattr(c2, f)
        if exact:
            assert a.tolist() == b.tolist(), f
        else:       # a division and a multiplication by the unit: within a few rounding errors
            np.testing.assert_allclose(b, a, rtol=1e-15, atol=0, err_msg=f)


@FAST
@given(valid_documents(), st.sampled_from([("s", "B"), None]))
def test_valid_documents_round_trip(doc, units):
    """load -> save (every field written, no rounding) -> load gives the same chain and platform; in
    the file's own units the numbers come back within rounding, in seconds and bytes exactly."""
    c1, p1 = chain_from_dict(copy.deepcopy(doc), "doc.json")
    tu, mu = units or (doc["units"]["time"], doc["units"]["memory"])
    with tempfile.TemporaryDirectory() as tmp:
        path = save_instance(c1, Path(tmp) / "c.json", p1, time_unit=tu, memory_unit=mu, digits=None)
        c2, p2 = load_instance(path)
        saved = json.loads(path.read_text())
    assert p2 == p1
    _same_chain(c1, c2, exact=units is not None)
    # the saved document states every field, with the defaults the schema documents filled in
    for row, orig in zip(saved["stages"], doc["stages"]):
        l = orig["stage"]
        assert set(row) == set(STAGE_KEYS) - ({"u_f", "u_b", "o_f", "o_b", "W"} if l == 0 else set())
        if units is None:
            expect = {"a": orig["a"], "abar": orig.get("abar", orig["a"]), "delta": orig.get("delta", orig["a"])}
            if l > 0:
                expect.update({k: orig.get(k, 0.0) for k in ("o_f", "o_b", "W", "u_f", "u_b")})
            for k, v in expect.items():
                assert row[k] == pytest.approx(v, rel=1e-15, abs=0), (l, k)


@FAST
@given(valid_documents())
def test_rounded_files_of_decimal_documents_are_unchanged(doc):
    """A document whose numbers have at most 6 decimals of its units is written back (digits=6, the
    default) with the very same numbers."""
    c1, _ = chain_from_dict(copy.deepcopy(doc))
    with tempfile.TemporaryDirectory() as tmp:
        path = save_instance(c1, Path(tmp) / "c.json", time_unit=doc["units"]["time"],
                             memory_unit=doc["units"]["memory"])
        saved = json.loads(path.read_text())
    for row, orig in zip(saved["stages"], doc["stages"]):
        for k, v in orig.items():
            if k in SIZES + TIMES and abs(v) < 1e9:     # 6 decimals are exact below 2^53 / 1e6
                assert row[k] == v, (orig["stage"], k)


# ---------------------------------------------------------------------------------- invalid documents
def _ident(max_size=10):
    return st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", min_size=1, max_size=max_size)


def _numeric_paths(doc):
    rows = doc["stages"]
    L = len(rows) - 2
    out = []
    for i in range(L + 2):
        keys = ("a", "abar", "delta") + ((TIMES + ("o_f", "o_b", "W")) if i > 0 else ())
        out += [("stages", i, k) for k in keys]
    return out


def _set(doc, path, value):
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _delete(doc, path):
    node = doc
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]


def _name(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "(top level)"


@st.composite
def unknown_key(draw, doc):
    rows = doc["stages"]
    level = draw(st.sampled_from(["top", "units", "platform", "stage"]))
    valid, where = {"top": (TOP_KEYS, ()), "units": (UNIT_KEYS, ("units",)), "platform": (PLATFORM_KEYS, ("platform",)),
                    "stage": (STAGE_KEYS, ("stages", draw(st.integers(0, len(rows) - 1))))}[level]
    if level == "platform" and "platform" not in doc:
        doc["platform"] = {}
    if draw(st.booleans()):     # a typo of a valid name: one character doubled
        base = draw(st.sampled_from(valid))
        k = draw(st.integers(0, len(base) - 1))
        key = base[:k + 1] + base[k:]
    else:
        key = draw(_ident().filter(lambda s: s not in valid))
    _set(doc, where + (key,), draw(st.one_of(st.integers(0, 9), st.text(max_size=3))))
    return where + (key,), "unknown field"


_WRONG = st.one_of(st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2), st.booleans(), st.none(),
                   st.dictionaries(_ident(3), st.integers(), max_size=1))


@st.composite
def wrong_type(draw, doc):
    rows = doc["stages"]
    kind = draw(st.sampled_from(["number", "stage", "string", "units", "top-object", "stages", "gpus"]))
    if kind == "number":
        path = draw(st.sampled_from(_numeric_paths(doc)))
        value = draw(_WRONG.filter(lambda v: not isinstance(v, (int, float)) or isinstance(v, bool)))
    elif kind == "stage":
        path = ("stages", draw(st.integers(0, len(rows) - 1)), "stage")
        value = draw(st.one_of(st.floats(0.5, 9.5).filter(lambda x: not x.is_integer()), _WRONG.filter(
            lambda v: not isinstance(v, int) or isinstance(v, bool))))
    elif kind == "string":
        path = draw(st.sampled_from([("name",), ("description",), ("stages", 0, "name")]))
        value = draw(st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(),
                               st.lists(st.text(), max_size=1)))
    elif kind == "units":
        path = draw(st.sampled_from([("units",), ("units", "time"), ("units", "memory")]))
        value = draw(st.one_of(st.integers(), st.lists(st.text(), max_size=1), st.booleans()))
    elif kind == "top-object":
        path = draw(st.sampled_from([("provenance",), ("platform",)]))
        value = draw(st.one_of(st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2)))
    elif kind == "stages":
        path = ("stages",)
        value = draw(st.one_of(st.integers(), st.text(max_size=3),
                               st.dictionaries(_ident(3), st.integers(), max_size=1)))
    else:
        doc.setdefault("platform", {})
        path = ("platform", "gpus")
        value = draw(st.one_of(st.floats(0.5, 9.5).filter(lambda x: not x.is_integer()), st.text(max_size=3),
                               st.booleans(), st.none()))
    _set(doc, path, value)
    return path, ""


@st.composite
def missing_field(draw, doc):
    L = len(doc["stages"]) - 2
    choices = [("format",), ("name",), ("units",), ("units", "time"), ("units", "memory"), ("stages",)]
    choices += [("stages", i, "a") for i in range(L + 2)] + [("stages", i, "stage") for i in range(L + 2)]
    choices += [("stages", i, k) for i in range(1, L + 1) for k in TIMES]
    path = draw(st.sampled_from(choices))
    _delete(doc, path)
    return path, "required field is missing"


@st.composite
def out_of_range(draw, doc):
    mf, tf = memory_factor(doc["units"]["memory"]), time_factor(doc["units"]["time"])
    kind = draw(st.sampled_from(["stage", "row0", "platform", "gpus"]))
    if kind == "stage":
        path = draw(st.sampled_from(_numeric_paths(doc)))
        limit = (MAX_SECONDS / tf) if path[-1] in TIMES else (MAX_BYTES / mf)
        value = draw(st.one_of(st.floats(max_value=-1e-9, allow_infinity=True), st.just(math.nan),
                               st.just(math.inf), st.floats(min_value=limit * 1.0001, allow_infinity=False),
                               st.just(1e300)))
        _set(doc, path, value)
        return path, ""
    if kind == "row0":
        key = draw(st.sampled_from(("u_f", "u_b", "o_f", "o_b", "W")))
        _set(doc, ("stages", 0, key), draw(st.floats(1e-6, 1e3)))
        return ("stages", 0, key), "row 0 is the input"
    if kind == "platform":
        doc.setdefault("platform", {})
        key = draw(st.sampled_from(("memory", "bandwidth")))
        limit = (MAX_BYTES if key == "memory" else MAX_BANDWIDTH) / mf
        value = draw(st.one_of(st.floats(max_value=0.0), st.just(math.nan), st.just(math.inf),
                               st.floats(min_value=limit * 1.0001, allow_infinity=False),
                               st.sampled_from(["0GB", "-3MiB", "2000TB", "1e300B"] if key == "memory"
                                               else ["0GB/s", "-1MB/s", "2000TB/s", "1e300B/s"])))
        _set(doc, ("platform", key), value)
        return ("platform", key), ""
    doc.setdefault("platform", {})
    _set(doc, ("platform", "gpus"), draw(st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_GPUS + 1))))
    return ("platform", "gpus"), "out of range"


@st.composite
def bad_unit(draw, doc):
    key = draw(st.sampled_from(["time", "memory", "platform-memory", "platform-bandwidth"]))
    valid = {"time": TIME_UNITS + ("µs",), "memory": MEMORY_UNITS}.get(key, ())
    unit = draw(st.one_of(st.sampled_from(["", "furlongs", "MiB/s", "ms", "GB/s", "h", "bytes", "Mib "]),
                          st.text(max_size=6)).filter(lambda u: u.lower() not in {v.lower() for v in valid}))
    if key in ("time", "memory"):
        _set(doc, ("units", key), unit)
        return ("units", key), ""
    doc.setdefault("platform", {})
    name = key.split("-")[1]
    text = "16" + draw(st.sampled_from(["parsecs", "GB/h", "G B", "GiBs", "x"]))
    if name == "bandwidth":
        text = "12" + draw(st.sampled_from(["parsecs/s", "GB/h", "G B/s", "xB/s"]))
    _set(doc, ("platform", name), text)
    return ("platform", name), ""


@st.composite
def rows_out_of_order(draw, doc):
    rows = doc["stages"]
    n = len(rows)
    kind = draw(st.sampled_from(["swap", "renumber", "delete", "duplicate", "too-few"]))
    if kind == "swap":
        i = draw(st.integers(0, n - 2))
        j = draw(st.integers(i + 1, n - 1))
        rows[i], rows[j] = rows[j], rows[i]
        return ("stages", i, "stage"), "numbered 0..L+1 in order"
    if kind == "renumber":
        i = draw(st.integers(0, n - 1))
        rows[i]["stage"] = draw(st.integers(-3, 20).filter(lambda k: k != i))
        return ("stages", i, "stage"), "numbered 0..L+1 in order"
    if kind == "delete":          # any row but the last: the rows after it are misnumbered
        i = draw(st.integers(0, n - 2))
        del rows[i]
        return (("stages", i, "stage"), "numbered 0..L+1 in order") if len(rows) >= 3 else (("stages",), "at least 3")
    if kind == "duplicate":
        i = draw(st.integers(0, n - 1))
        rows.insert(i, copy.deepcopy(rows[i]))
        return ("stages", i + 1, "stage"), "numbered 0..L+1 in order"
    del rows[2:]                  # the input and the loss alone: L = 0, nothing to schedule
    return ("stages",), "at least 3"


MUTATIONS = [unknown_key, wrong_type, missing_field, out_of_range, bad_unit, rows_out_of_order]


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(valid_documents(), st.sampled_from(MUTATIONS), st.data())
def test_invalid_documents_name_the_field(doc, mutation, data):
    bad = copy.deepcopy(doc)
    path, words = data.draw(mutation(bad))
    with pytest.raises(InstanceError) as e:
        chain_from_dict(bad, "bad.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("bad.json: field '")
    assert f"field '{_name(path)}'" in msg, msg
    assert words in msg, msg


@FAST
@given(st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3), st.none()))
def test_a_document_that_is_not_an_object(value):
    with pytest.raises(InstanceError, match=r"^x.json: field '\(top level\)': must be a JSON object"):
        chain_from_dict(value, "x.json")


@FAST
@given(st.integers(1, 5), st.sampled_from(ARRAYS), st.data())
def test_chains_built_in_python_name_array_and_index(L, array, data):
    """Chain(...) refuses NaN, infinities, negative values and absurd magnitudes, naming array[index]."""
    i = data.draw(st.integers(0 if array in ("wa", "wabar", "wd") else 1, L + 1))
    limit = MAX_SECONDS if array in ("uf", "ub") else MAX_BYTES
    value = data.draw(st.one_of(st.floats(max_value=-1e-300), st.just(math.nan), st.just(math.inf),
                                st.floats(min_value=limit * 1.0001)))
    arrays = {f: np.ones(L + 2) for f in ARRAYS}
    Chain(**{f: a.copy() for f, a in arrays.items()})            # valid before the change
    arrays[array][i] = value
    with pytest.raises(ValueError, match=rf"^Chain\.{array}\[{i}\] = .* is out of range: "
                                         rf"{'times' if array in ('uf', 'ub') else 'sizes'} must be between 0 and"):
        Chain(**arrays)


# ------------------------------------------------------------------------------------- command line
@settings(max_examples=15, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(STAGE_KEYS[2:]), st.integers(1, 6), st.integers(0, 9), st.data())
def test_cli_typo_in_a_stage_field_exits_2_with_one_line(key, row, k, data):
    """``memplan solve FILE`` with a typo'd stage field: exit status 2, one line naming file and field."""
    from memplan.experiments.cli import main

    doc = json.loads((ROOT / "instances" / "paper004_table2.json").read_text())
    k = k % len(key)
    typo = key[:k + 1] + key[k:]
    doc["stages"][row][typo] = doc["stages"][row].pop(key)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "typo.json"
        path.write_text(json.dumps(doc))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["solve", str(path), "--memory", "90MiB", "--quiet"])
    lines = err.getvalue().strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"memplan: error: {path}: field 'stages[{row}].{typo}': unknown field; "
                               f"did you mean '{key}'?")


@FAST
@given(st.integers(1, 12), st.integers(0, 10_000), st.booleans(), st.sampled_from(["MiB", "MB", "KiB", "GB"]),
       st.sampled_from(["ms", "s", "us"]), st.floats(0.5, 3.0))
def test_a_saved_chain_loads_back_the_same(L, seed, integer, mu, tu, ng):
    """save_instance then load_instance gives the chain back: sizes in a binary unit (MiB, the
    default) exactly, an integer chain still integer; in a decimal unit within one rounding (x ->
    x * 1e6 skips some doubles: 65218092.438730344 B has no MB value that loads back to it, 15 B none
    in GB). The files had rounded to
    1e-6 of the unit: a 9-byte chain came back 9.437 bytes and fractional, and exhaustive searches
    refused it."""
    from memplan.models.chain import random_chain
    from memplan.models.instance import load_instance, save_instance

    c = random_chain(L, seed, integer=integer)
    c = Chain(**{**{f: getattr(c, f) for f in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")},
                 "uf_ng": c.uf * ng, "u_turn": float(c.uf[1]) * ng, "name": c.name})
    with tempfile.TemporaryDirectory() as d:
        c2 = load_instance(save_instance(c, Path(d) / "c.json", memory_unit=mu, time_unit=tu)).chain
    for f in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights", "of_all", "of_ng", "uf_ng"):
        x, y = getattr(c, f), getattr(c2, f)
        sizes = f not in ("uf", "ub", "uf_ng")
        if sizes and mu.endswith("iB"):
            assert np.array_equal(x, y), (f, (x - y).tolist())
        else:
            assert np.allclose(x, y, rtol=4e-16, atol=0), (f, (x - y).tolist())
    assert c2.u_turn == pytest.approx(c.u_turn, rel=4e-16)
    assert c2.is_integer == c.is_integer or not mu.endswith("iB")
