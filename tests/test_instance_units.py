import json

import numpy as np
import pytest

from memplan.models.chain import Chain, Platform, random_chain
from memplan.models.instance import InstanceError, chain_from_dict, chain_to_dict, load_instance, save_instance
from memplan.models.units import UnitError, fmt_memory, fmt_time, parse_bandwidth, parse_memory, parse_time

from conftest import ROOT


def test_units_parse_and_print():
    assert parse_memory("90MiB") == 90 * 2**20
    assert parse_memory("1.5GiB") == 1.5 * 2**30
    assert parse_memory("90MB") == 90e6
    assert parse_memory("4096") == 4096
    assert parse_bandwidth("12.5GB/s") == 12.5e9
    assert parse_time("37.4ms") == pytest.approx(0.0374)
    assert fmt_memory(86.75 * 2**20) == "86.8 MiB"
    assert fmt_time(0.04742) == "47.4 ms"
    # more digits where methods differ by 0.1% (the pipeline report)
    assert fmt_memory(1294850918.4, digits=3) == "1.206 GiB" and fmt_memory(1297465088, digits=3) == "1.208 GiB"
    assert fmt_time(0.004115544718390737, digits=6) == "4.11554 ms" and fmt_time(0.0041162766, digits=6) == "4.11628 ms"
    with pytest.raises(UnitError, match="unknown memory unit"):
        parse_memory("90 parsecs")
    with pytest.raises(UnitError, match="cannot read memory"):
        parse_memory("lots")



@pytest.mark.parametrize("text, parse, fixed", [
    ("90Mb", parse_memory, "'MB'"), ("90mb", parse_memory, "'MB'"), ("4kb", parse_memory, "'kB'"),
    ("2Gib", parse_memory, "'GiB'"), ("1Gb/s", parse_bandwidth, "'GB/s'"), ("1Gbps", parse_bandwidth, "'GB/s'"),
    ("10gb/s", parse_bandwidth, "'GB/s'")])
def test_bits_are_refused_not_read_as_bytes(text, parse, fixed):
    """A lowercase b after a prefix is a bit: '1Gbps' was read as 1 GB/s, a link 8 times too fast,
    and '90Mb' as 90 MB. Refused, saying what to write for bytes; the byte spellings still parse."""
    with pytest.raises(UnitError, match=f"reads as bits; memplan counts bytes: write {fixed} for bytes"):
        parse(text)
    assert parse_memory("90kB") == parse_memory("90KB") == 90e3 and parse_memory("2GiB") == 2 * 2**30
    assert parse_bandwidth("1GBps") == parse_bandwidth("1GB/s") == 1e9 and parse_memory("7b") == 7

def test_toy_instance_values(toy_chain):
    c = toy_chain
    assert c.L == 6
    # 7.63 "MB" in paper 004 is 4*1000*2000 bytes = 7.63 MiB
    assert c.wa[0] == pytest.approx(7.63 * 2**20)
    assert c.uf[3] == pytest.approx(2.44e-3) and c.ob[3] == pytest.approx(30.99 * 2**20)
    assert c.store_all_time() == pytest.approx(37.38e-3)
    assert c.wa[7] == 0 and c.uf[7] == 0       # loss stage


def test_round_trip(tmp_path):
    c = random_chain(5, seed=3, integer=False)
    p = save_instance(c, tmp_path / "c.json", memory_unit="B", time_unit="s", digits=12)
    c2, _ = load_instance(p)
    for f in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights"):
        np.testing.assert_allclose(getattr(c2, f), getattr(c, f), rtol=1e-9)
    with pytest.raises(FileExistsError):
        save_instance(c, p)


def _toy_dict():
    return json.loads((ROOT / "instances" / "paper004_table2.json").read_text())


@pytest.mark.parametrize("mutate, field, problem", [
    (lambda d: d["stages"][3].update(u_f=-1.0), "stages[3].u_f", "-1 ms is out of range; times must be between 0"),
    (lambda d: d["stages"][2].pop("a"), "stages[2].a", "required field is missing"),
    (lambda d: d["stages"][2].pop("u_b"), "stages[2].u_b", "required field is missing"),
    (lambda d: d["stages"][2].update(a="big"), "stages[2].a", "must be a valid number"),
    (lambda d: d["stages"][2].update(a=True), "stages[2].a", "must be a valid number"),
    (lambda d: d["stages"][2].update(a=1e300), "stages[2].a", "1e+300 MiB is out of range; sizes must be between "
                                                              "0 and 1e+15 bytes (1 PB) = 9.53674e+08 MiB"),
    (lambda d: d["stages"][2].update(u_b=1e30), "stages[2].u_b", "out of range; times must be between 0 and 1e+06 s"),
    (lambda d: d["stages"][2].update(o_b=float("nan")), "stages[2].o_b", "must be a finite number"),
    (lambda d: d["stages"][2].update(abar=None), "stages[2].abar", "null is not a number"),
    (lambda d: d.update(units={"time": "ms", "memory": "furlongs"}), "units.memory", "unknown memory unit"),
    (lambda d: d.update(units={"time": "ms"}), "units.memory", "required field is missing"),
    # case-insensitive units let 'Mb' (bits) through; its refusal named neither the file nor the field
    (lambda d: d.update(units={"time": "ms", "memory": "Mb"}), "units.memory", "'Mb' reads as bits"),
    (lambda d: d.pop("units"), "units", "required field is missing"),
    (lambda d: d["stages"][4].update(stage=9), "stages[4].stage", "numbered 0..L+1"),
    (lambda d: d.update(format="other/2"), "format", "unsupported format"),
    (lambda d: d["stages"][0].update(u_f=3.0), "stages[0].u_f", "row 0 is the input"),
    (lambda d: d["stages"][2].update(u_bb=d["stages"][2].pop("u_b")), "stages[2].u_bb",
     "unknown field; did you mean 'u_b'?"),
    (lambda d: d.update(stagse=d.pop("stages")), "stagse", "unknown field; did you mean 'stages'?"),
    (lambda d: d["units"].update(tiem="ms"), "units.tiem", "unknown field; did you mean 'time'?"),
    (lambda d: d["platform"].update(gpu=2), "platform.gpu", "unknown field; did you mean 'gpus'?"),
    (lambda d: d["platform"].update(gpus=0), "platform.gpus", "0 is out of range; give a whole number between 1"),
    (lambda d: d["platform"].update(bandwidth="0GB/s"), "platform.bandwidth", "out of range; give a positive"),
    (lambda d: d["platform"].update(memory="2000TB"), "platform.memory", "out of range; give a positive memory"),
])
def test_bad_instances_name_file_field_problem(mutate, field, problem):
    d = _toy_dict()
    mutate(d)
    with pytest.raises(InstanceError) as e:
        chain_from_dict(d, "bad.json")
    msg = str(e.value)
    assert msg.startswith(f"bad.json: field '{field}': ") and problem in msg
    assert "\n" not in msg


def test_typo_is_refused_not_zero(toy_chain):
    """Issue 18: ``u_bb`` for ``u_b`` used to load with u_b = 0 (store-all 32.9 ms instead of 37.4 ms)."""
    d = _toy_dict()
    d["stages"][2]["u_bb"] = d["stages"][2].pop("u_b")
    with pytest.raises(InstanceError, match=r"stages\[2\]\.u_bb': unknown field; did you mean 'u_b'"):
        chain_from_dict(d, "typo.json")
    # without the typo: Table 2's times sum to 37.38 ms (the typo gave 37.38 - u_b^2 = 32.9 ms)
    assert toy_chain.store_all_time() * 1e3 == pytest.approx(37.38)


def test_loss_times_may_be_left_out_stage_times_may_not():
    d = _toy_dict()
    for key in ("u_f", "u_b"):
        d["stages"][7].pop(key)          # the loss row: 0 when left out (documented)
    c, _ = chain_from_dict(d, "t.json")
    assert c.uf[7] == 0 and c.ub[7] == 0
    d["stages"][6].pop("u_f")
    with pytest.raises(InstanceError, match=r"t.json: field 'stages\[6\].u_f': required field is missing"):
        chain_from_dict(d, "t.json")


def test_defaults_are_the_documented_ones():
    d = {"format": "memplan-instance/1", "name": "t", "units": {"time": "s", "memory": "B"},
         "stages": [{"stage": 0, "a": 3}, {"stage": 1, "u_f": 1, "u_b": 2, "a": 5}, {"stage": 2, "a": 0}]}
    c, p = chain_from_dict(d)
    assert p is None and c.name == "t" and c.stage_names == ["input", "stage1", "loss"]
    assert c.wabar.tolist() == c.wa.tolist() == c.wd.tolist() == [3, 5, 0]
    assert c.of.tolist() == c.ob.tolist() == c.weights.tolist() == [0, 0, 0]
    assert c.uf.tolist() == [0, 1, 0] and c.ub.tolist() == [0, 2, 0]
    d["platform"] = {"memory": 100}
    _, p = chain_from_dict(d)
    assert p.memory == 100 and p.bandwidth is None and p.gpus == 1 and p.name == ""


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "instances").glob("*.json")))
def test_shipped_instances_load_and_round_trip(name, tmp_path):
    """Every shipped file loads; what save_instance writes loads back to the same chain."""
    chain, platform = load_instance(ROOT / "instances" / f"{name}.json")
    for units, digits, exact in ((("s", "B"), None, True), (("ms", "MiB"), None, False), (("ms", "MiB"), 9, False)):
        p = save_instance(chain, tmp_path / f"{units[0]}-{digits}.json", platform, time_unit=units[0],
                          memory_unit=units[1], digits=digits)
        c2, p2 = load_instance(p)
        assert p2 == platform and c2.name == chain.name and c2.stage_names == chain.stage_names
        for f in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights"):
            if exact:
                assert getattr(c2, f).tolist() == getattr(chain, f).tolist()
            else:       # 9 decimals of a ms / MiB: 1e-12 s, 1e-3 B
                np.testing.assert_allclose(getattr(c2, f), getattr(chain, f), rtol=1e-12,
                                           atol=1e-12 if f in ("uf", "ub") else 2e-3)


@pytest.mark.parametrize("kw, message", [
    (dict(wa=[1, 2e300, 0]), r"Chain.wa\[1\] = 2e\+300 is out of range: sizes must be between 0 and 1e\+15 bytes"),
    (dict(wa=[1, float("nan"), 0]), r"Chain.wa\[1\] = nan is out of range"),
    (dict(uf=[0, 2e6, 0]), r"Chain.uf\[1\] = 2e\+06 is out of range: times must be between 0 and 1e\+06 s"),
    (dict(ob=[0, -1, 0]), r"Chain.ob\[1\] = -1 is out of range"),
    (dict(weights=[0, 1, float("inf")]), r"Chain.weights\[2\] = inf is out of range"),
])
def test_chain_in_python_checks_ranges(kw, message):
    base = dict(uf=[0, 1, 0], ub=[0, 1, 0], wa=[1, 1, 0], wabar=[1, 1, 0], wd=[1, 1, 0], of=[0, 0, 0],
                ob=[0, 0, 0], weights=[0, 0, 0])
    Chain(**base)                                   # the base chain is valid
    with pytest.raises(ValueError, match=message):
        Chain(**{**base, **kw})


@pytest.mark.parametrize("names, message", [
    (["in", "a"], r"Chain.stage_names has 2 names, expected L\+2 = 3 \(input, stages 1..L, loss\)"),
    (["input", "fc", "loss", "extra"], r"Chain.stage_names has 4 names, expected L\+2 = 3"),
    ([0, 1, 2], r"Chain.stage_names\[0\] = 0 is not a string"),
    ("abc", r"Chain.stage_names = 'abc' must be a list of L\+2 = 3 names"),
])
def test_chain_stage_names_are_one_string_per_row(names, message, tmp_path):
    """One name per row 0..L+1: a short list passed, then save_instance raised a bare IndexError; numbers
    were saved and the file refused on load ('stages[0].name': must be a valid string)."""
    base = dict(uf=[0, 1, 0], ub=[0, 1, 0], wa=[1, 1, 0], wabar=[1, 1, 0], wd=[1, 1, 0], of=[0, 0, 0],
                ob=[0, 0, 0], weights=[0, 0, 0])
    with pytest.raises(ValueError, match=message):
        Chain(**base, stage_names=names)
    good = Chain(**base, stage_names=("x", "fc", "y"))
    assert good.stage_names == ["x", "fc", "y"]
    assert load_instance(save_instance(good, tmp_path / "c.json"))[0].stage_names == ["x", "fc", "y"]


def test_platform_in_python_checks_ranges():
    assert Platform(memory=16 * 2**30, bandwidth=12e9, gpus=4).gpus == 4
    for kw, name in ((dict(memory=0), "memory"), (dict(bandwidth=-1.0), "bandwidth"), (dict(memory=1e300), "memory"),
                     (dict(gpus=0), "gpus"), (dict(gpus=2.5), "gpus"), (dict(bandwidth=float("nan")), "bandwidth")):
        with pytest.raises(ValueError, match=rf"Platform.{name} = .* is out of range"):
            Platform(**kw)


def test_not_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{oops")
    with pytest.raises(InstanceError, match=r"x.json: not valid JSON \(line 1"):
        load_instance(p)


def test_from_stages_shapes():
    c = Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], loss={"wd": 1})
    assert c.L == 2 and c.wd.tolist() == [5, 6, 7, 1]
    with pytest.raises(ValueError, match="wa needs L\\+1"):
        Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6])



def test_from_stages_refuses_a_loss_key_it_does_not_know():
    """A misspelt loss key was ignored: the loss stage then cost nothing (store-all 10 s, not 10 + 3 s)."""
    c = Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], loss={"uf": 1, "ub": 2, "weights": 4})
    assert c.store_all_time() == 1 + 2 + 3 + 4 + 1 + 2 and c.weights[3] == 4
    with pytest.raises(ValueError, match=r"^Chain.from_stages: loss has no key 'uff' \(did you mean 'uf'\?\); its "
                                         r"keys: uf, ub, of, ob, wa, wabar, wd, of_all, of_ng, uf_ng, weights$"):
        Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], loss={"uff": 1})
    with pytest.raises(ValueError, match=r"^Chain.from_stages: loss\['ub'\] = '2ms' must be a number"):
        Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], loss={"ub": "2ms"})
    with pytest.raises(ValueError, match=r"^Chain.from_stages: loss = 0.5 must be a dict"):
        Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], loss=0.5)
    with pytest.raises(ValueError, match=r"^Chain.from_stages: uf = None must be a list of numbers"):
        Chain.from_stages(uf=None, ub=[3, 4], wa=[5, 6, 7])

def test_chain_to_dict_reads_in_pandas(toy_chain):
    import pandas as pd

    df = pd.DataFrame(chain_to_dict(toy_chain)["stages"])
    assert list(df["stage"]) == list(range(8))
    assert df.loc[5, "o_b"] == pytest.approx(27.64)


def test_byte_counts_in_messages_are_exact_enough_to_copy():
    """A stated minimum of 9792808 B read '9.79281e+06 B' (six digits: 2 B above it here, and below
    the minimum where it rounds down): whole bytes in full, fractions to 12 digits."""
    from memplan.models.units import fmt_bytes

    assert fmt_bytes(9792808.0) == "9792808" and fmt_bytes(9792801) == "9792801"
    assert fmt_bytes(78108426.24000001) == "78108426.24" and fmt_bytes(41.5) == "41.5"
    assert abs(float(fmt_bytes(86109061.11999999)) / 86109061.11999999 - 1) < 1e-11
