"""``memplan plot`` on tables a figure cannot draw as they are: a column missing, rows of two runs or of
two chains of one name in one folder, nothing solved, an offloading table without its ``lb`` rows, the
parts folder given. Each was a traceback, a curve mixing two runs or two chains, an empty figure
written with exit status 0, or a PNG among the parts; now one line (exit status 2) naming the file,
column or instance and what would work, a curve per run and per chain, or the figure in the sweep
folder.

Most tables are built here row by row (:func:`_row`, every column of a sweep's table); two tiny real
sweeps give a folder holding two runs at other time limits."""
from __future__ import annotations

import itertools
import warnings

import pandas as pd
import pytest

from memplan.experiments import figures
from memplan.experiments.cli import main
from memplan.experiments.sweep_engine import COLUMN_NAMES
from memplan.models.solution import InputError

from conftest import ROOT

pytest.importorskip("pyarrow")

TOY = str(ROOT / "instances" / "paper004_table2.json")
MiB = 2**20
_keys = itertools.count()


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _row(problem="remat", method="rotor", mem=90.0, status="optimal", objective=None, **kw) -> dict:
    """One row of a results table, every column of a sweep's present: a limit of ``mem`` MiB, solved
    (an objective shrinking with the limit) unless ``status`` says otherwise."""
    r = dict.fromkeys(COLUMN_NAMES)
    solved = status not in ("error", "infeasible", "no_solution")
    r.update(key=f"k{next(_keys):06d}", instance="toy", instance_id="toy.json@0123456789abcdef",
             problem=problem, method=method, memory_limit=mem * MiB, options="{}", time_limit=10.0, batch=8.0,
             status=status, objective=(objective if objective is not None else 10.0 / mem) if solved else None,
             peak_memory=mem * MiB * 0.95, message="", wall_time=0.01, error="boom" if status == "error" else None)
    r.update(kw)
    return r


def _csv(rows, path, drop=()):
    pd.DataFrame(rows).drop(columns=list(drop)).to_csv(path, index=False)
    return path


def _remat(n=3, **kw):
    return [_row(mem=80.0 + 10 * k, **kw) for k in range(n)]


def _offload(lb=True, status="feasible"):
    rows = [_row("offload", m, 80.0 + 10 * k, status=status, bandwidth=1e9) for m in ("greedy", "vdnn")
            for k in range(3)]
    if lb:
        rows += [_row("offload", "lb", 80.0 + 10 * k, status="feasible", objective=None, bound=0.05, bandwidth=1e9)
                 for k in range(3)]
    return rows


def _pipeline(status="optimal"):
    return [_row("pipeline", m, 2000.0 + 500 * k, status=status, gpus=2, bandwidth=1e9)
            for m in ("pipedream", "ilp") for k in range(2)]


def _remat_offload(status="optimal", time_limits=(10.0,)):
    rows = [_row("remat", m, 80.0 + 10 * k, status=status) for m in ("store-all", "rotor") for k in range(2)]
    rows += [_row("remat-offload", "dp", 80.0 + 10 * k, status=status, bandwidth=1e9, options='{"slots": 50}',
                  time_limit=t) for k in range(2) for t in time_limits]
    return rows


def _budget(status="executed"):
    return [_row("budget", m, 100.0, status=status, objective=0.5, fraction=f, instance_id=None)
            for m, f in (("pytorch", 1.0), ("pytorch", 0.5), ("eager", None))]


class _Figures:
    """``figures._save`` replaced: each figure's path, and its curves as ``label -> x data``."""

    def __init__(self, monkeypatch):
        self.saved = {}
        monkeypatch.setattr(figures, "_save", self)

    def __call__(self, fig, path, dpi):
        self.saved[path.name] = {line.get_label(): list(line.get_xdata()) for ax in fig.axes for line in ax.lines
                                 if not line.get_label().startswith("_")}
        figures._plt().close(fig)
        return path


# ------------------------------------------------------------------------------------ 1. a column missing
@pytest.mark.parametrize("figure, rows, column", [
    ("remat", _remat(), "instance"),
    ("remat", _remat(), "batch"),
    ("remat", _remat(), "options"),
    ("offload", _offload(), "bound"),
    ("offload", _offload(), "bandwidth"),
    ("pipeline", _pipeline(), "gpus"),        # read_results makes a missing gpus column one of missing values
    ("remat-offload", _remat_offload(), "wall_time"),
    ("budget", _budget(), "peak_memory"),
])
def test_a_missing_column_is_one_line_naming_the_file_the_column_and_the_figure(figure, rows, column, tmp_path,
                                                                                capsys):
    """Was a ``KeyError`` traceback (exit status 1) from pandas, deep in the figure."""
    bad = _csv(rows, tmp_path / "cut.csv", drop=[column])
    assert main(["plot", str(bad), "--figure", figure, "-o", str(tmp_path / "fig")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(bad) in line and repr(column) in line and f"--figure {figure}" in line, line
    assert not list((tmp_path / "fig").glob("*.png"))
    # the whole table draws
    assert main(["plot", str(_csv(rows, tmp_path / "whole.csv")), "--figure", figure, "-o",
                 str(tmp_path / "fig")]) == 0


def test_options_that_are_not_a_json_object_name_the_column():
    """``json.loads`` of a value that is not an object's was an ``AttributeError`` traceback
    (``'list' object has no attribute 'items'``), of one that is not JSON its own words."""
    for value in ("[1, 2]", "not json"):
        df = pd.DataFrame(_remat(options=value))
        with pytest.raises(InputError, match=r"column 'options' holds .*, not the JSON object"):
            figures.curve_labels(df)
        with pytest.raises(InputError, match=r"t.csv: column 'options' holds .*\(the row of key k"):
            figures.draw(df, "remat", "unused", source="t.csv")


# ------------------------------------------------------------------- 2. two runs at other time limits
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One folder, two runs of the same grid at time limits 2 s and 3 s: 12 rows."""
    out = tmp_path_factory.mktemp("runs")
    for t in ("2", "3"):
        assert main(["sweep", "remat", "--instance", TOY, "--methods", "rotor,revolve", "--points", "3",
                     "--time-limit", t, "--workers", "1", "--no-plot", "-q", "-o", str(out)]) == 0
    return out


def test_runs_at_two_time_limits_in_one_folder_are_a_curve_each(two_runs, monkeypatch):
    """``curve_labels`` split on options only: rotor's 6 rows of both runs were one zigzagging curve."""
    from memplan.experiments.sweep_engine import read_results

    df = read_results(two_runs)
    assert len(df) == 12
    labels = figures.curve_labels(df)
    assert labels.value_counts().to_dict() == {f"{m} (time limit {t} s)": 3 for m in ("rotor", "revolve")
                                               for t in (2, 3)}
    for lab, t in (("rotor (time limit 2 s)", 2.0), ("rotor (time limit 3 s)", 3.0)):
        assert (df.time_limit[labels == lab] == t).all()
    seen = _Figures(monkeypatch)
    figures.draw(df, "remat", two_runs)
    curves = seen.saved["remat_paper004-table2.png"]
    assert {lab: len(x) for lab, x in curves.items()} == {f"{m} (time limit {t} s)": 3
                                                         for m in ("rotor", "revolve") for t in (2, 3)}
    # one run alone: the method's name, as before
    assert set(figures.curve_labels(df[df.time_limit == 2.0])) == {"rotor", "revolve"}


def test_one_time_limit_per_instance_does_not_split_a_curve():
    """Two instances each at its own time limit are one run each: no time limit in the labels."""
    df = pd.DataFrame(_remat(time_limit=2.0) + _remat(time_limit=3.0, instance="other",
                                                      instance_id="other.json@fedcba9876543210"))
    assert set(figures.curve_labels(df)) == {"rotor"}


# --------------------------------------------------------------------- 3. two chains of the same name
def test_two_chains_of_one_name_are_two_figures(tmp_path, monkeypatch):
    """Grouped by name, two instance files whose chains share a name were one curve in one PNG."""
    a = _remat(instance="chain", instance_id="a.json@aaaaaaaa11111111")
    b = _remat(instance="chain", instance_id="b.json@bbbbbbbb22222222", batch=4.0)
    seen = _Figures(monkeypatch)
    paths = figures.draw(pd.DataFrame(a + b), "remat", tmp_path)
    assert sorted(p.name for p in paths) == ["remat_chain_aaaaaaaa.png", "remat_chain_bbbbbbbb.png"]
    for name in ("remat_chain_aaaaaaaa.png", "remat_chain_bbbbbbbb.png"):
        assert {lab: len(x) for lab, x in seen.saved[name].items()} == {"rotor": 3}
    # an instance of its own name keeps its plain file name
    c = _remat(instance="solo", instance_id="solo.json@cccccccc33333333")
    paths = figures.draw(pd.DataFrame(a + c), "remat", tmp_path)
    assert sorted(p.name for p in paths) == ["remat_chain.png", "remat_solo.png"]


def test_two_chains_of_one_name_are_two_pipeline_rows_in_the_summary():
    a = _pipeline()
    b = [dict(r, instance_id="b.json@bbbbbbbb22222222", objective=r["objective"] * 2) for r in _pipeline()]
    s = figures.pipeline_summary(pd.DataFrame(a + b))
    assert len(s) == 4 and set(s.instance_id) == {"toy.json@0123456789abcdef", "b.json@bbbbbbbb22222222"}


# ----------------------------------------------------------------------------------- 4. nothing to draw
@pytest.mark.parametrize("figure, rows, needles", [
    ("remat", _remat(status="error") + _remat(status="infeasible"), ["no solved rows", "toy", "3 error",
                                                                     "3 infeasible"]),
    ("pipeline", _pipeline(status="error"), ["no solved rows", "toy on 2 GPUs", "4 error"]),
    ("remat-offload", _remat_offload(status="error"), ["no solved rows", "toy"]),
    ("budget", _budget(status="error"), ["no executed rows", "toy", "3 error"]),
    ("offload", _offload(lb=False, status="error"), ["no 'lb' rows", "add method lb", "Figure 3", "no solved rows"]),
])
def test_a_figure_with_nothing_to_draw_is_one_line_saying_why_and_no_file(figure, rows, needles, tmp_path, capsys):
    """Was a figure of empty axes, written with exit status 0 (and matplotlib's "No artists with labels
    found" warning)."""
    table = _csv(rows, tmp_path / "t.csv")
    out = tmp_path / "fig"
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # matplotlib's legend warning among them
        assert main(["plot", str(table), "--figure", figure, "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--figure {figure}: nothing to draw" in line and all(n in line for n in needles), line
    assert not list(out.glob("*.png"))


def test_offload_without_lb_rows_draws_figure_3_only_and_says_why_not_figure_2(tmp_path):
    """Figure 2 is makespan / LB: without ``lb`` rows (a config grid) its axes were empty."""
    table = _csv(_offload(lb=False), tmp_path / "t.csv")
    with pytest.warns(UserWarning, match=r"Figure 2 of toy not drawn: no 'lb' rows.*add method lb"):
        assert main(["plot", str(table), "--figure", "offload", "-o", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["offload_toy_figure3.png"]
    # with them, both
    assert main(["plot", str(_csv(_offload(), tmp_path / "lb.csv")), "--figure", "offload", "-o",
                 str(tmp_path / "lb")]) == 0
    assert sorted(p.name for p in (tmp_path / "lb").glob("*.png")) == ["offload_toy_figure2.png",
                                                                      "offload_toy_figure3.png"]


def test_an_instance_with_nothing_to_draw_beside_one_drawn_is_a_warning(tmp_path):
    rows = _remat() + _remat(status="error", instance="broken", instance_id="broken.json@dddddddd44444444")
    with pytest.warns(UserWarning, match="--figure remat: no solved rows for broken"):
        paths = figures.draw(pd.DataFrame(rows), "remat", tmp_path)
    assert [p.name for p in paths] == ["remat_toy.png"]


def test_remat_offload_rows_of_two_runs_are_a_curve_each(tmp_path, monkeypatch, capsys):
    """Its curves name the method and slots: two runs' rows at one point zigzagged in one curve, and
    such a table was then refused. Now each run is a curve, its time limit in the label, as the other
    figures split theirs, ``joint`` is the best of each run's own joint-N, and the experiment's summary
    compares each run with its own curves. Here the 2 s run's joint DP is twice rotor's makespan, the
    3 s run's half of it."""
    from memplan.experiments import remat_offload_figures

    rows = [dict(r, key=f"r{next(_keys):06d}", time_limit=t) for t in (2.0, 3.0) for r in _remat_offload()]
    for r in rows:
        if r["problem"] == "remat-offload":
            r["objective"] = (20.0 if r["time_limit"] == 2.0 else 5.0) / r["memory_limit"] * MiB
    seen = _Figures(monkeypatch)
    paths = figures.draw(pd.DataFrame(rows), "remat-offload", tmp_path)
    assert sorted(p.name for p in paths) == ["remat_offload_toy.csv", "remat_offload_toy.png"]
    assert {lab: len(x) for lab, x in seen.saved["remat_offload_toy.png"].items()} == {
        f"{m} (time limit {t} s)": 2 for m in ("store-all", "rotor", "joint", "joint-50") for t in (2, 3)}
    cur = pd.read_csv(tmp_path / "remat_offload_toy.csv")
    joint = cur[cur.method == "joint"].set_index(["curve", "memory"]).makespan
    for mem in (80.0, 90.0):
        assert joint["joint (time limit 2 s)", mem * MiB] == pytest.approx(20.0 / mem)
        assert joint["joint (time limit 3 s)", mem * MiB] == pytest.approx(5.0 / mem)
    # one run alone: the curves' plain names, as before
    figures.draw(pd.DataFrame([r for r in rows if r["time_limit"] == 2.0]), "remat-offload", tmp_path)
    assert set(seen.saved["remat_offload_toy.png"]) == {"store-all", "rotor", "joint", "joint-50"}
    remat_offload_figures.summary(pd.DataFrame(rows), None)
    assert capsys.readouterr().out.splitlines() == [
        "(time limit 2 s) joint DP worse than rotor (same slots) at 2 points",
        "(time limit 3 s) joint DP worse than rotor (same slots) at 0 points"]
    # through the command line, from the table
    table = _csv(rows, tmp_path / "t.csv")
    assert main(["plot", str(table), "--figure", "remat-offload", "-o", str(tmp_path / "fig")]) == 0


def test_remat_offload_rows_of_one_curve_twice_in_one_run_are_still_refused(tmp_path, capsys):
    """Two runs at the same time limit whose options differ where the curves do not name them (a gap)
    would still zigzag in one curve: one line saying so."""
    rows = _remat_offload()
    rows += [dict(r, key=f"g{next(_keys):06d}", options='{"slots": 50, "gap": 0.01}') for r in rows
             if r["problem"] == "remat-offload"]
    table = _csv(rows, tmp_path / "t.csv")
    assert main(["plot", str(table), "--figure", "remat-offload", "-o", str(tmp_path / "fig")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "several runs" in line and "joint-50 twice at one memory limit, at the same time limit" in line, line
    assert "-o" in line and not list((tmp_path / "fig").glob("*.png"))


# ------------------------------------------------------------------------ 5. the parts folder given
def test_plot_of_a_sweeps_results_folder_writes_beside_it_not_among_the_parts(two_runs):
    for p in two_runs.glob("*.png"):
        p.unlink()
    assert main(["plot", str(two_runs / "results"), "--figure", "remat"]) == 0
    assert (two_runs / "remat_paper004-table2.png").exists()
    assert not list((two_runs / "results").glob("*.png"))
    assert figures.default_out(two_runs) == two_runs
    assert figures.default_out(two_runs / "results.csv") == two_runs


def test_a_figure_that_cannot_be_written_names_the_file(tmp_path, capsys):
    """A write that fails after the checks (here a folder where the figure's file goes; a full disk
    alike) is one line naming the file, exit 2: it was a traceback of matplotlib's."""
    table = _csv(_remat(), tmp_path / "t.csv")
    out = tmp_path / "fig"
    assert main(["plot", str(table), "--figure", "remat", "-o", str(out)]) == 0
    pngs = sorted(out.glob("*.png"))
    assert pngs
    for p in pngs:
        p.unlink()
        p.mkdir()                    # the figure's file cannot be written: a folder is in its place
    capsys.readouterr()
    assert main(["plot", str(table), "--figure", "remat", "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert any(line.startswith(f"memplan: error: cannot write {p}: ") for p in pngs), line


def test_plot_of_a_folder_that_is_no_sweeps_names_the_sweep_folders_inside(tmp_path, capsys):
    """``memplan plot results --figure remat`` (the folder above the sweeps) said "the table has no rows
    this figure draws (problems in it: none)", as for a sweep that solved nothing: it names the
    folder and the sweep folders in it. A sweep's own parts folder, before its first row, is still one."""
    top = tmp_path / "results"
    for name in ("remat", "offload"):
        (top / name / "results").mkdir(parents=True)
        (top / name / "sweep.log").write_text("")
    assert main(["plot", str(top), "--figure", "remat"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{top}: not a sweep folder" in line and str(top / "remat") in line and str(top / "offload") in line
    assert main(["plot", str(top / "remat" / "results"), "--figure", "remat"]) == 2
    assert "no rows this figure draws" in _one_line(capsys.readouterr().err)
