"""The zoo against torchvision (issue 20, item 4). torchvision is not installed here (the GPU machine
has it): the real comparison skips with that reason; the comparison itself is checked here with the
zoo standing in for torchvision (equal where the same network is built, different where not)."""
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from memplan.models.networks import get_model  # noqa: E402
from memplan.models.networks import torchvision_check as tc  # noqa: E402


def test_zoo_matches_torchvision():
    pytest.importorskip("torchvision", reason="torchvision is not installed here; the GPU machine has it and the "
                                               "campaign (benchmarks/gpu_campaign.sh profile) runs this test there")
    rows = tc.torchvision_table()
    assert {r["network"] for r in rows} >= set(tc.TORCHVISION)
    for r in rows:
        assert r["zoo_params"] == r["reference_params"], r
        assert r["param_shapes_equal"] and r["output_equal"], r


def test_missing_torchvision_is_said():
    try:
        import torchvision  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="torchvision cannot be imported"):
            tc.torchvision_table()
    else:
        pytest.skip("torchvision is installed here")


def test_comparison_tells_equal_from_different():
    x = torch.rand(2, 3, 64, 64)
    same = tc._compare("resnet18", "zoo", lambda: get_model("resnet18"), lambda: get_model("resnet18"), x)
    assert same["equal"] and same["zoo_params"] == 11_689_512 and same["zoo_output"] == "2x1000"
    other = tc._compare("resnet18", "zoo", lambda: get_model("resnet18"), lambda: get_model("resnet34"), x)
    assert not other["params_equal"] and not other["param_shapes_equal"] and other["output_equal"]
    assert not other["equal"]
    classes = tc._compare("resnet50", "zoo", lambda: get_model("resnet50"),
                          lambda: get_model("resnet50", num_classes=10), x)
    assert not classes["output_equal"] and classes["reference_output"] == "2x10" and not classes["equal"]


def _fake_torchvision(monkeypatch, swap=None):
    """A stand-in ``torchvision.models`` whose constructors build the zoo's networks (``swap`` maps a
    name to another network, to plant a difference)."""
    models = types.ModuleType("torchvision.models")
    for name, (ctor, _) in tc.TORCHVISION.items():
        def build(weights=None, aux_logits=False, init_weights=None, transform_input=None, n=name):
            assert weights is None
            kw = {"aux_logits": aux_logits} if n == "inception_v3" else {}
            return get_model((swap or {}).get(n, n), **kw)
        setattr(models, ctor, build)
    pkg = types.ModuleType("torchvision")
    pkg.models = models
    monkeypatch.setitem(sys.modules, "torchvision", pkg)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)


def test_table_with_a_stand_in(monkeypatch):
    names = ["resnet18", "densenet121", "inception_v3", "vgg16"]
    _fake_torchvision(monkeypatch)
    rows = tc.torchvision_table(names)
    assert [r["network"] for r in rows] == names and all(r["equal"] for r in rows)
    assert rows[2]["reference"] == "torchvision.models.inception_v3" and rows[2]["input"] == "2x3x299x299"
    _fake_torchvision(monkeypatch, swap={"vgg16": "vgg19"})
    rows = tc.torchvision_table(["vgg16"])
    assert not rows[0]["equal"] and rows[0]["reference_params"] == 143_667_240
    with pytest.raises(ValueError, match="no torchvision counterpart"):
        tc.torchvision_table(["gpt2"])


def test_write_table(tmp_path):
    import csv

    x = torch.rand(1, 3, 32, 32)
    row = tc._compare("resnet18", "zoo", lambda: get_model("resnet18"), lambda: get_model("resnet18"), x)
    p = tc.write_table([row], tmp_path / "t.csv")
    with open(p, newline="") as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == tc.COLUMNS and got[0]["equal"] == "True"
