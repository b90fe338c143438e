import json

import numpy as np
import pytest

from memplan.models.chain import Chain, random_chain
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
    (lambda d: d["stages"][3].update(u_f=-1.0), "stages[3].u_f", "greater than or equal to 0"),
    (lambda d: d["stages"][2].pop("a"), "stages[2].a", "Field required"),
    (lambda d: d["stages"][2].update(a="big"), "stages[2].a", "valid number"),
    (lambda d: d.update(units={"time": "ms", "memory": "furlongs"}), "units.memory", "unknown memory unit"),
    (lambda d: d["stages"][4].update(stage=9), "stages[4].stage", "numbered 0..L+1"),
    (lambda d: d.update(format="other/2"), "format", "unsupported format"),
    (lambda d: d["stages"][0].update(u_f=3.0), "stages[0].u_f", "row 0 is the input"),
])
def test_bad_instances_name_file_field_problem(mutate, field, problem):
    d = _toy_dict()
    mutate(d)
    with pytest.raises(InstanceError) as e:
        chain_from_dict(d, "bad.json")
    msg = str(e.value)
    assert "bad.json" in msg and problem in msg
    assert field.split("[")[0] in msg


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


def test_chain_to_dict_reads_in_pandas(toy_chain):
    import pandas as pd

    df = pd.DataFrame(chain_to_dict(toy_chain)["stages"])
    assert list(df["stage"]) == list(range(8))
    assert df.loc[5, "o_b"] == pytest.approx(27.64)
