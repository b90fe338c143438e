"""benchmarks/held_vs_free_peaks.py refuses a network it does not know, in one line, exit status 2."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_unknown_network_exits_2(capsys):
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("held_vs_free_peaks", ROOT / "benchmarks" / "held_vs_free_peaks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--models", "resnet18,vgg99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'vgg99'" in err[0] and "densenet121" in err[0]
