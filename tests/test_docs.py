"""Docstring examples run (issue 17: docs that run) and the README's Python example runs as written."""
from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from test_layering import MODULES

# modules whose import needs torch (the network zoo, the profiler, the executor)
_TORCH = ("memplan.models.networks", "memplan.models.profiler", "memplan.models.runtime", "memplan.models.graph")


def _doctest_modules() -> list[str]:
    out = []
    for name, path in sorted(MODULES.items()):
        if name.startswith("memplan.experiments") or ">>>" not in path.read_text():
            continue
        out.append(name)
    return out


DOCTEST_MODULES = _doctest_modules()


def test_the_public_surface_has_examples():
    """memplan's front door and every problem module carry examples that run."""
    for mod in ("memplan", "memplan.remat", "memplan.offload", "memplan.remat_offload", "memplan.pipeline",
                "memplan.models.instance"):
        assert mod in DOCTEST_MODULES, f"{mod} has no docstring example"


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples(name):
    if name.startswith(_TORCH):
        pytest.importorskip("torch")
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert res.attempted > 0
    assert res.failed == 0, f"{res.failed} of {res.attempted} docstring examples of {name} failed (run " \
                            f"python -m doctest -v on it)"


def _readme_python_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the README's Python API section has no ```python block"
    return blocks[0]


def test_readme_python_example_runs_as_written(tmp_path):
    """The README's example runs as written, and the table it prints holds the right makespans:
    paper 004's toy chain (section 3.2) at 84..108 MiB. References: the paper's numbers (47.4 ms at
    90 MiB; 37.4 ms, the sum of all u_f and u_b, once store-all's 107 MiB fit), an exhaustive search
    over all valid sequences for rotor and rotor-floating at every limit (both are optimal on this
    chain; rotor-floating is optimal on any chain, Theorem 4.7), and for sequential the fastest
    checkpoint_sequential cut that fits, tried for every number of segments and replayed."""
    from memplan.baselines.remat_exhaustive import exhaustive_remat
    from memplan.baselines.remat_heuristics import sequential_schedule
    from memplan.models.instance import load_instance
    from memplan.models.remat import simulate_remat

    code = _readme_python_example()
    env = {**os.environ, "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # the script sweeps three methods over memory limits into a DataFrame and plots it
    assert (tmp_path / "remat_sweep.png").stat().st_size > 10_000
    # the printed pivot table: a header "method rotor rotor-floating sequential", then one row per limit
    lines = r.stdout.splitlines()
    header = next(l.split() for l in lines if l.split()[:1] == ["method"])
    assert header[1:] == ["rotor", "rotor-floating", "sequential"], r.stdout
    table = {}
    for l in lines:
        f = l.split()
        if len(f) == 4 and re.fullmatch(r"\d+\.\d+", f[0]):
            table[float(f[0])] = {m: None if v == "NaN" else float(v) for m, v in zip(header[1:], f[1:])}
    assert sorted(table) == [84.0, 90.0, 96.0, 102.0, 108.0], r.stdout

    chain, _ = load_instance("paper004_table2")
    MiB = 2**20
    assert round(table[90.0]["rotor"], 1) == 47.4                   # paper 004, section 3.2
    assert round(table[108.0]["rotor"], 1) == 37.4                  # no re-materialization (107 MB peak)
    assert table[108.0]["rotor"] == round((chain.uf.sum() + chain.ub.sum()) * 1e3, 2)
    seqs = [sequential_schedule(chain, s) for s in range(1, chain.L + 1)]
    for mem, row in table.items():
        opt = exhaustive_remat(chain, mem * MiB)
        assert opt is not None
        assert row["rotor"] == row["rotor-floating"] == round(opt[0] * 1e3, 2), (mem, row)
        fits = [sim.makespan for sim in map(lambda s: simulate_remat(chain, s), seqs)
                if sim.peak_memory <= mem * MiB]
        assert row["sequential"] == (round(min(fits) * 1e3, 2) if fits else None), (mem, row)
    assert table[84.0]["sequential"] is None and table[108.0]["sequential"] is not None
