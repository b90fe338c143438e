"""What `pip install .` puts in site-packages (issue 17): one import name, the instances as package data,
and a user's own `models/` package that neither shadows nor mixes with ours."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built from a copy of the source: setuptools builds in the source's ``build/``, and
    pytest-xdist can give this module's two tests to two workers, whose builds there collided
    ("File exists: build/bdist.../memplan-0.2.0.dist-info")."""
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("source") / "memplan"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".venv",
                                                            ".whl", ".pytest_cache", ".hypothesis", "gpu_out"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"pip wheel failed: {r.stderr[-1500:]}")
    (whl,) = out.glob("memplan-*.whl")
    return whl


def test_the_wheel_installs_only_memplan(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"memplan"}
    for sub in ("models", "baselines", "formulations", "experiments", "instances"):
        assert f"memplan/{sub}/__init__.py" in names
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("memplan/instances/") and n.endswith(".json")}
    assert shipped == {p.name for p in (ROOT / "instances").glob("*.json")}
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "memplan = memplan.experiments.cli:main" in entry


def test_installed_wheel_beside_a_users_models_package(wheel, tmp_path):
    """The acceptance command of issue 17, run against the unpacked wheel from a folder that has a
    `models/` package of its own."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "project"
    (work / "models").mkdir(parents=True)
    (work / "models" / "__init__.py").write_text("raise ImportError('the user models package was imported')\n")
    code = ("import memplan; s = memplan.solve(memplan.load_instance('paper004_table2'), 'remat', "
            "method='rotor', memory='90MiB'); print(s.objective, s.peak_memory); print(memplan.__file__)")
    # the DP kernels run as plain Python here: compiling them again for this copy of the package (its
    # numba cache is its own) took 9 of this test's 11 s, and the kernels are tested everywhere else
    env = {**os.environ, "PYTHONPATH": str(site), "NUMBA_DISABLE_JIT": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    objective, peak = map(float, r.stdout.split("\n")[0].split())
    assert objective == pytest.approx(0.04742, rel=1e-9)
    assert peak <= 90 * 2**20
    assert r.stdout.split("\n")[1].startswith(str(site))
