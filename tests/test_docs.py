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
    code = _readme_python_example()
    env = {**os.environ, "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # the script sweeps three methods over memory limits into a DataFrame and plots it
    assert (tmp_path / "remat_sweep.png").stat().st_size > 10_000
    rows = [l for l in r.stdout.splitlines() if l.strip()]
    assert any("rotor" in l for l in rows) and any("sequential" in l for l in rows)
