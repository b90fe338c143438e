"""The import graph of memplan goes one way and has no cycles (issue 17, ARCHITECTURE.md).

    memplan.models  <-  memplan.baselines, memplan.formulations  <-  problem front ends
    (memplan.remat, .offload, .remat_offload, .pipeline and their private memplan._* helpers)
    <-  memplan (the public API)  <-  memplan.experiments (CLI, figure scripts)

baselines and formulations are peers that never import each other (a formulation takes its MIP
start and bounds as arguments); a front end never imports another problem's front end. Every
import counts, those inside functions included, so a cycle cannot hide in a function body.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx
import pytest

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
FRONT_ENDS = {"memplan.remat", "memplan.offload", "memplan.remat_offload", "memplan.pipeline"}


def _modules() -> dict[str, Path]:
    """Every module of the distribution: name -> file (package dirs as pyproject maps them)."""
    out = {}
    for pkg, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg] + parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """memplan modules imported anywhere in the file (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        for t in targets:
            if t == "memplan" or t.startswith("memplan."):
                while t not in MODULES and "." in t:
                    t = t.rpartition(".")[0]
                if t in MODULES and t != name:
                    found.add(t)
    return found


def _layer(mod: str) -> tuple[int, str]:
    """(layer, group): imports go to a lower layer, or stay inside their group."""
    for group, layer in (("memplan.models", 0), ("memplan.baselines", 1), ("memplan.formulations", 1),
                         ("memplan.experiments", 4)):
        if mod == group or mod.startswith(group + "."):
            return layer, group
    if mod == "memplan":
        return 3, "memplan"
    if mod in FRONT_ENDS:
        return 2, mod
    if mod.startswith("memplan._"):
        return 2, "memplan._private"
    raise AssertionError(f"module {mod} has no layer: add it to tests/test_layering.py")


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for name, path in MODULES.items():
        g.add_node(name)
        for t in _imports(name, path):
            g.add_edge(name, t)
    return g


def test_the_package_map_covers_the_design_card_folders():
    assert {"memplan", "memplan.models", "memplan.baselines", "memplan.formulations",
            "memplan.experiments"} <= set(PACKAGE_DIRS)
    assert "memplan.models.chain" in MODULES and "memplan.experiments.cli" in MODULES
    assert len(MODULES) > 40


def test_imports_go_one_way():
    bad = []
    for a, b in _graph().edges:
        (la, ga), (lb, gb) = _layer(a), _layer(b)
        if la == lb == 2 and gb == "memplan._private":
            continue                       # front ends share their private helpers
        if lb > la or (lb == la and ga != gb):
            bad.append(f"{a} (layer {la}) imports {b} (layer {lb})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(_graph()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The walker itself: an import inside a function and a relative import are both found."""
    f = tmp_path / "m.py"
    f.write_text("from .chain import Chain\n\ndef g():\n    from memplan.baselines.offload import greedy\n")
    found = _imports("memplan.models.fake", f)
    assert found == {"memplan.models.chain", "memplan.baselines.offload"}
    (la, _), (lb, _) = _layer("memplan.models.fake"), _layer("memplan.baselines.offload")
    assert lb > la      # so test_imports_go_one_way would flag it
