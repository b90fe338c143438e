"""The reports that compare two contenders read the rounds in pairs (models.measure.paired_ratio):
bench_budget's verdict at each PyTorch point and benchmarks/paired_ratios.py on runtime_check's traces."""
import importlib.util
import json
import random
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rounds(n=16, seed=3):
    """per-round slow-down factors shared by every contender of the round (a busy machine)"""
    rng = random.Random(seed)
    return [rng.choice([1.0, 1.0, 1.0, 1.25, 1.6]) for _ in range(n)]


def _ms(ts):
    return " ".join(f"{t * 1e3:.6f}" for t in ts)


@pytest.mark.parametrize("factor, verdict", [(1.03, "SLOWER"), (0.97, "faster")])
def test_budget_summary_judges_memplan_against_pytorch_round_by_round(factor, verdict):
    bb = _script("bench_budget")
    rows = pd.read_csv(ROOT / "benchmarks/results/bench_budget_gpu_gpt2_low_2026-11-27.csv").to_dict("records")
    p = next(r for r in rows if r["method"] == "pytorch")
    m = next(r for r in rows if r["method"] == "memplan" and r["label"].startswith(f"at pytorch {p['fraction']:g}:"))
    slow = _rounds()
    base = 0.2
    pt = [base * s for s in slow]
    mt = [base * factor * s for s in slow]
    p.update(round_times_ms=_ms(pt), objective=sorted(pt)[8], time_low=min(pt), time_high=max(pt))
    m.update(round_times_ms=_ms(mt), objective=sorted(mt)[8], time_low=min(mt), time_high=max(mt))
    # the two intervals apart overlap (each spans the slow rounds): no verdict from them
    assert m["time_low"] <= p["time_high"] and p["time_low"] <= m["time_high"]
    line = next(x for x in bb.summary(rows) if x.strip().startswith(f"fraction {p['fraction']:<4g}"))
    assert f"paired {factor:.3f} [{factor:.3f}, {factor:.3f}]" in line
    assert f"; {verdict})" in line


def test_paired_ratios_script_on_a_traces_file(tmp_path, capsys):
    pr = _script("paired_ratios")
    slow = _rounds(20, seed=9)
    t = lambda base: [base * s for s in slow]          # noqa: E731
    timings = [
        {"network": "net", "contender": "autograd", "times": t(0.100)},
        {"network": "net", "contender": "store-all@1", "times": t(0.101), "also": []},
        {"network": "net", "contender": "checkpoint_sequential:2", "times": t(0.130)},
        {"network": "net", "contender": "sequential:2", "times": t(0.130 * 1.06), "also": []},
        # rotor at that memory is an earlier sequence, timed once under its first tag
        {"network": "net", "contender": "rotor@0.5", "times": t(0.130 * 0.9), "also": ["rotor@sequential:2"]},
    ]
    f = tmp_path / "traces.json"
    f.write_text(json.dumps({"env": {"device": "cpu"}, "timings": timings}))
    assert pr.main([str(f)]) == 0
    out = capsys.readouterr().out
    lines = {ln.split("  ")[1].strip(): ln for ln in out.splitlines() if ln.startswith("  ")}
    assert "1.010 [1.010, 1.010]" in lines["store-all / autograd"] and "shown slower" in lines["store-all / autograd"]
    seq = next(v for k, v in lines.items() if k.startswith("sequential(2)"))
    assert "1.060 [1.060, 1.060]" in seq and "shown slower" in seq
    rot = next(v for k, v in lines.items() if k.startswith("rotor at that memory"))
    assert "0.900 [0.900, 0.900]" in rot and "shown faster" in rot


def test_paired_ratios_script_refuses_a_file_without_rounds(tmp_path, capsys):
    pr = _script("paired_ratios")
    f = tmp_path / "old.json"
    f.write_text(json.dumps({"sequences": []}))
    assert pr.main([str(f)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "old.json" in err and "timings" in err
    # a throughput CSV belongs to one run: two traces files with it are refused, not paired silently
    assert pr.main([str(f), str(f), "--throughput", str(tmp_path / "thr.csv")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("paired_ratios: --throughput")


def test_spike_summary_names_what_the_slow_samples_had():
    sp = _script("gpu_step_spikes")
    rows = []
    for i, w in enumerate([0.020, 0.021, 0.020, 0.030, 0.032]):
        slow = w > 0.022
        rows.append({"contender": "sequential:8", "wall": w, "gc_n": 1 if i == 4 else 0, "gc_gen2": 0,
                     "num_alloc_retries": 0, "num_device_alloc": 0, "one_step_slow": slow and i == 3,
                     "host_late": slow})
    line = sp.summarize(rows, slow=1.1)[0]
    assert "2 of 5 samples over 1.1x the fastest" in line
    assert "any gc 1/2" in line and "one step >1.5x the sample's median step 1/2" in line and "host late 2/2" in line
    assert "mean excess +55.0%" in line                      # (0.030 + 0.032) / 2 / 0.020 - 1


@pytest.mark.parametrize("args", [["--segments", "4,x"], ["--segments", "1"], ["--rounds", "0"]])
def test_spike_script_refuses_bad_options_in_one_line(args, capsys):
    assert _script("gpu_step_spikes").main(["--device", "cpu"] + args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("gpu_step_spikes: --")


def test_spike_pairs_are_read_round_by_round():
    sp = _script("gpu_step_spikes")
    slow = _rounds(8, seed=2)
    rows = [{"round": i, "contender": c, "wall": base * s} for i, s in enumerate(slow)
            for c, base in (("autograd", 0.02), ("store-all", 0.0206))]
    lines = sp.paired_lines(rows, [("store-all", "autograd"), ("missing", "autograd")])
    assert len(lines) == 2 and "store-all / autograd" in lines[1] and "1.030 [1.030, 1.030]" in lines[1]
