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
from test_layering import MODULES, PACKAGE_DIRS

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


# the design card's folders that install under memplan (pyproject's package-dir), and benchmarks/,
# which does not install at all
_FOLDERS = {folder for folder in PACKAGE_DIRS.values() if folder != "memplan"} | {"benchmarks"}


def test_examples_import_the_installed_name():
    """An example imports ``memplan.models...``, never the folder ``models...``: the folder name only
    resolves when the repository root happens to be on ``sys.path`` (``python -m pytest`` from the
    root), not for a user of the installed package (the zoo's example did, and failed in one process)."""
    pat = re.compile(r"^\s*(?:>>>|\.\.\.)\s+(?:from|import)\s+(\w+)", re.M)
    bad = [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for name, path in sorted(MODULES.items())
           for m in pat.finditer(path.read_text()) if m.group(1) in _FOLDERS]
    assert not bad, bad


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
    assert (tmp_path / "results" / "remat_sweep.png").stat().st_size > 10_000
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


# ----------------------------------------------------------------------------- the README's quick tour
#: quick-tour commands this test leaves out (each still under 2 minutes on 2 cores, measured by hand):
#: the sweeps (a Dask cluster each, 15-80 s), the pipeline ILP (its 60 s limit), profiling and running a
#: network and a step under a byte budget (torch; tests/test_cli_budget.py runs the latter at a smaller size),
#: and the commands reading their outputs; every other command runs below, as written
_TOUR_SLOW = ("memplan sweep ", "--method ilp ", "memplan profile ", "memplan run ", "memplan budget ")


def _quick_tour() -> list[tuple[str, bool]]:
    """``(command, meant to fail)`` for each command of the README's "Quick tour" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick tour", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        if line.startswith("    ") and line.strip().split(" ", 1)[0] in ("memplan", "python"):
            cmd, _, comment = line.strip().partition("  #")
            out.append((cmd.strip(), comment.strip().startswith("error")))
    return out


def test_quick_tour_commands_are_found_and_parse():
    """Every command of the tour parses as written, and every path it reads is in the repository."""
    import shlex

    from memplan.experiments.cli import build_parser

    tour = _quick_tour()
    assert len(tour) >= 15
    parser = build_parser()
    made = set()
    for cmd, _ in tour:
        argv = shlex.split(cmd)
        assert argv[0] == "memplan", cmd
        parser.parse_args(argv[1:])
        for k, a in enumerate(argv):
            if a.startswith(("instances/", "results/")) and not (k and argv[k - 1] in ("-o", "--json", "--gantt")):
                assert a.startswith("results/") and a in made or (ROOT / a).exists(), f"{cmd}: {a} is missing"
            if k and argv[k - 1] in ("-o", "--json", "--gantt"):
                assert a.startswith("results/"), f"{cmd}: writes {a} outside results/"
                assert a not in made, f"{cmd}: overwrites {a}, written by an earlier command"
                made.add(a)


def test_quick_tour_runs_as_written(tmp_path, monkeypatch, capsys):
    """The quick tour's fast commands, in a folder laid out as a clone (instances/ beside them): each
    exits 0 (2 for the one meant to show an error) and writes what it says under results/."""
    import shlex

    from memplan.experiments.cli import main

    (tmp_path / "instances").symlink_to(ROOT / "instances")
    monkeypatch.chdir(tmp_path)
    ran = 0
    not_made: set[str] = set()            # outputs of the commands left out
    for cmd, fails in _quick_tour():
        argv = shlex.split(cmd)
        if any(s in cmd + " " for s in _TOUR_SLOW) or not_made & set(argv):
            not_made |= {a for k, a in enumerate(argv) if k and argv[k - 1] in ("-o", "--json", "--gantt")}
            continue
        rc = main(shlex.split(cmd)[1:])
        out, err = capsys.readouterr()
        assert rc == (2 if fails else 0), f"{cmd}: exit {rc}\n{err[-1500:]}"
        if fails:
            assert "minimum feasible memory" in err
        ran += 1
    assert ran >= 10
    written = {str(p.relative_to(tmp_path)) for p in (tmp_path / "results").rglob("*") if p.is_file()}
    assert {"results/toy-rotor-floating.json", "results/offload-milp.png", "results/remat-offload.png",
            "results/pd50.json"} <= written
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ("instances", "results")]
