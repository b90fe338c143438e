"""Bad input to ``memplan sweep`` and ``memplan plot``: exit status 2 and one line naming the option,
field or file, before any task runs (no ``error`` row per task, no empty figure), never a traceback
or a silent default that changes the answer."""
from __future__ import annotations

import pandas as pd
import pytest

from memplan.experiments.cli import main
from memplan.experiments.sweep_engine import Grid, expand, read_results
from memplan.models.solution import InputError

from conftest import ROOT

pytest.importorskip("pyarrow")

TOY = str(ROOT / "instances" / "paper004_table2.json")      # its platform gives no bandwidth


def _rc(argv) -> int:
    """The exit status of ``memplan ARGV`` (argparse's own errors exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("argv, needles", [
    # option values the front ends refuse: checked once, up front, not by every task after the grid ran
    (["remat", "--slots", "0"], ["slots=0"]),
    (["remat", "--option", "slots=abc"], ["slots='abc'"]),
    (["remat", "--methods", "remat-milp", "--gap", "3"], ["gap=3"]),
    # a flag none of the sweep's methods reads (the default ones: no MILP): it was dropped from every task
    (["remat", "--gap", "0.5"], ["--gap", "read by none of the methods"]),
    (["offload", "--bandwidth", "1GB/s", "--methods", "greedy", "--slots", "50"], ["--slots", "read by none"]),
    # Figure 3 draws the heuristics: --methods milp alone had been refused as "methods: an empty list"
    (["offload", "--bandwidth", "1GB/s", "--methods", "milp"], ["--methods milp", "--figures 2"]),
    (["pipeline", "--bandwidth", "1GB/s", "--gpus", "0"], ["--gpus"]),
    (["offload", "--bandwidth", "0GB/s"], ["--bandwidth", "0GB/s"]),
    (["pipeline", "--bandwidth", "1GB/s", "--gpus", "2", "--periodicity", "0"], ["--periodicity"]),
    # grids that silently did something else
    (["remat", "--methods", ""], ["--methods"]),
    (["remat", "--memory", "90MiB", "--points", "3"], ["--points", "--memory"]),
    (["remat", "--points", "100000"], ["--points", "1000"]),
    (["remat", "--methods", "rotor,remat-milp", "--option", "gap=0.5"], ["--option gap"]),   # --gap's default would replace it
    # no bandwidth given and none in the instance's platform: no made-up link
    (["offload"], ["--bandwidth"]),
    (["remat-offload"], ["--bandwidth"]),
    (["pipeline", "--gpus", "2"], ["--bandwidth"]),
    (["remat", "--memory", "80MiB,abc"], ["--memory", "abc"]),
    # found by a probe of session 37: an error row per task (exact), a message naming no option
    (["remat", "--option", "exact=no"], ["exact='no'"]),
    (["remat", "--time-limit", "inf"], ["--time-limit inf", "e.g. --time-limit 60"]),
    # named the grid's field (time_limit), not the option given
    (["remat", "--time-limit", "0"], ["--time-limit 0", "positive"]),
    (["offload", "--bandwidth", "1GB/s", "--time-limit", "-1"], ["--time-limit -1", "positive"]),
    (["remat-offload", "--bandwidth", "1GB/s", "--time-limit", "0"], ["--time-limit 0", "positive"]),
    (["remat", "--scheduler", "foo"], ["--scheduler foo", "address"]),
    # a factor 0 is bandwidth 0, which remat-offload reads as no link: it solved re-materialization alone,
    # then failed to draw (no panel); --low 0 was refused as "memory=0.0", naming no option
    (["remat-offload", "--bandwidth", "1GB/s", "--factors", "0", "--no-offload"], ["--factors", "positive"]),
    (["remat-offload", "--bandwidth", "1GB/s", "--factors", "1,-2"], ["--factors", "-2"]),
    (["remat-offload", "--bandwidth", "1GB/s", "--low", "0"], ["--low 0"]),
    # a CLI fuzz: --low was ignored with --memory, and above store-all it made a grid running downwards;
    # pipeline's --seed was ignored without --random
    (["remat-offload", "--bandwidth", "1GB/s", "--memory", "85MiB", "--low", "0.5"], ["--low 0.5", "--memory"]),
    (["remat-offload", "--bandwidth", "1GB/s", "--low", "5"], ["--low 5", "above the highest"]),
    (["pipeline", "--bandwidth", "1GB/s", "--gpus", "2", "--seed", "5"], ["--seed 5", "no --random"]),
    (["offload", "--bandwidth", "1GB/s:2GB/s"], ["--bandwidth 1GB/s:2GB/s", "one bandwidth per value"]),
    # every --slots value too large for the chain's joint DP tables: N = 50 was swept instead, unsaid,
    # whose tables are larger still (an error row per task)
    (["remat-offload", "--instance", "random:1500:0", "--bandwidth", "1GB/s", "--slots", "20"],
     ["--slots 20", "L = 1500", "N <= 13"]),
])
def test_sweep_refuses_bad_arguments_before_any_task(argv, needles, tmp_path, capsys):
    out = tmp_path / "o"
    args = ["sweep", argv[0], "--instance", TOY] + argv[1:]
    if "--memory" not in argv and "--points" not in argv:
        args += ["--points", "2"]
    assert _rc(args + ["--workers", "1", "-q", "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert all(n in line for n in needles), line
    assert not (out / "results").exists()          # no task ran, no error rows, no figure
    assert not list(out.glob("*.png"))


def test_config_that_cannot_be_read_names_the_option_and_file(tmp_path, capsys):
    missing = tmp_path / "nope.toml"
    assert main(["sweep", "--config", str(missing)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--config" in line and str(missing) in line and "Errno" not in line


@pytest.mark.parametrize("grid, needles", [
    (Grid("remat", [TOY], memory=["90MiB"], options={"slots": [200, 0]}), ["options", "slots=0"]),
    (Grid("remat", [TOY], memory=["90MiB", "abc"]), ["memory", "'abc'"]),
    (Grid("remat", [TOY], memory=["90MiB"], methods=[]), ["methods"]),
    (Grid("remat", [TOY], memory=["90MiB"], points=3), ["memory", "points"]),
    (Grid("remat", [TOY], points=5000), ["points", "1000"]),
    (Grid("offload", [TOY], memory=["90MiB"], bandwidth=["0GB/s"]), ["bandwidth"]),
    (Grid("pipeline", [TOY], memory=["1GiB"], bandwidth=["1GB/s"], gpus=[0]), ["gpus=0"]),
    (Grid("pipeline", [TOY], memory=["1GiB"], bandwidth=["1GB/s"], options={"periodicity": 0}), ["periodicity=0"]),
    # session 37's probe: tracebacks, or grids that silently ran something else
    (Grid("remat", [TOY], points=2, methods=[5]), ["methods", "list of method names"]),
    (Grid("remat", [TOY], points=2, methods="rotor"), ["methods", "list of method names"]),  # was r, o, t, ...
    (Grid("remat", [TOY], points=4, fractions=[0.5]), ["points and fractions"]),        # points were dropped
    (Grid("remat", [TOY], memory=[]), ["memory = []", "non-empty"]),                    # 0 tasks, then a plot error
    (Grid("remat", [TOY], fractions=[]), ["fractions = []", "non-empty"]),
    (Grid("remat", [TOY], points=2, options={"slots": []}), ["options.slots", "empty list"]),  # ran the default
    (Grid("remat", [TOY], fractions=[2.0]), ["fractions", "[0, 1]"]),
    (Grid("remat", [TOY], points=2.5), ["points", "whole number"]),
    (Grid("remat", [TOY], points=2, time_limit="3"), ["time_limit"]),
    (Grid("remat", [TOY], points=2, options={"exact": "no"}), ["exact='no'"]),
])
def test_a_grid_is_checked_before_anything_is_computed(grid, needles):
    """The same checks for --config grids and the Python API: every grid is refused before the first
    grid's work (a pipeline grid's baseline points) starts."""
    ok = Grid("pipeline", ["random:6:1"], memory=["1GiB"], bandwidth=["1GB/s"], gpus=[2])
    with pytest.raises(InputError) as e:
        expand([ok, grid])
    assert all(n in str(e.value) for n in needles), str(e.value)


def test_every_bandwidth_given_is_swept(tmp_path, capsys):
    """--bandwidth 1GB/s --bandwidth 5GB/s (or 1GB/s,5GB/s) sweeps both, as the help says; it kept
    only the first. Offloading's lower bound (Proposition 3) cannot grow with the bandwidth."""
    out = tmp_path / "off"
    assert main(["sweep", "offload", "--instance", TOY, "--bandwidth", "1GB/s", "--bandwidth", "5GB/s",
                 "--methods", "greedy", "--points", "2", "--workers", "1", "-q", "--no-plot", "-o", str(out)]) == 0
    df = read_results(out)
    lb = df[df.method == "lb"].pivot_table(index="memory_limit", columns="bandwidth", values="bound")
    assert list(lb.columns) == [1e9, 5e9] and len(lb) == 2
    assert (lb[5e9] <= lb[1e9] * (1 + 1e-12)).all()
    greedy = set(df[df.method == "greedy"].bandwidth)      # Figure 3: 1x, 2x and 3x of each
    assert greedy == {k * b for b in (1e9, 5e9) for k in (1, 2, 3)}

    out = tmp_path / "ro"
    assert main(["sweep", "remat-offload", "--instance", TOY, "--bandwidth", "1GB/s,5GB/s", "--factors", "1",
                 "--slots", "20", "--no-offload", "--points", "2", "--workers", "1", "-q", "--no-plot",
                 "-o", str(out)]) == 0
    df = read_results(out)
    assert set(df[df.problem == "remat-offload"].bandwidth) == {1e9, 5e9}


def test_memory_alone_still_takes_the_default_points(tmp_path, capsys):
    """--points has a default: only a --points given together with --memory is refused."""
    out = tmp_path / "m"
    assert main(["sweep", "remat", "--instance", TOY, "--methods", "store-all", "--memory", "100MiB,120MiB",
                 "--workers", "1", "-q", "--no-plot", "-o", str(out)]) == 0
    assert sorted(read_results(out).memory_limit) == [100 * 2**20, 120 * 2**20]


# ---------------------------------------------------------------------------------- memplan plot
@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A real results table: store-all on the toy chain at two limits."""
    out = tmp_path_factory.mktemp("t")
    assert main(["sweep", "remat", "--instance", TOY, "--methods", "store-all", "--memory", "100MiB,120MiB",
                 "--workers", "1", "-q", "--no-plot", "-o", str(out)]) == 0
    return out / "results.csv"


def _damaged(kind: str, good, path):
    text = good.read_text()
    header, first = text.splitlines()[:2]
    if kind == "partial row":                 # a copy cut short in its first row
        path.write_text(header + "\n" + first[:40] + "\n")
    elif kind in ("objective not a number", "gpus not a number", "options not JSON"):
        col, val = {"objective not a number": ("objective", "fast"), "gpus not a number": ("gpus", "x"),
                    "options not JSON": ("options", "not json")}[kind]
        df = pd.read_csv(good)
        df[col] = df[col].astype(object)
        df.loc[1, col] = val
        df.to_csv(path, index=False)
    else:
        path.write_text("")
    return path


@pytest.mark.parametrize("kind, needles", [
    ("partial row", ["row 1", "problem"]),
    ("objective not a number", ["'objective'", "'fast'", "row 2"]),
    ("gpus not a number", ["'gpus'", "'x'", "row 2"]),          # pyarrow's message named no file or column
    ("options not JSON", ["'options'", "'not json'", "row 2"]),  # json's message named no file or column
    ("empty", ["empty"]),
])
def test_plot_of_a_damaged_table_is_one_line_naming_the_file(kind, needles, table, tmp_path, capsys):
    bad = _damaged(kind, table, tmp_path / "bad.csv")
    assert main(["plot", str(bad), "--figure", "remat", "-o", str(tmp_path / "fig")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(bad) in line and all(n in line for n in needles), line
    # the intact table still draws
    assert main(["plot", str(table), "--figure", "remat", "-o", str(tmp_path / "fig")]) == 0


@pytest.mark.parametrize("body, needles", [
    ('points = "two"', ["grid[0].points", "whole number"]),
    ("points = 2.5", ["grid[0].points"]),
    ("points = true", ["grid[0].points"]),               # was one point, silently
    ('time_limit = "10"', ["grid[0].time_limit", "seconds"]),
    ("options = [1, 2]", ["grid[0].options", "table"]),
    ('fractions = ["a"]', ["grid[0].fractions", "[0, 1]"]),
    ("points = 2\nbatch = 8", ["grid[0].batch", "PipeDream"]),        # silently ignored with an instance file
    # the grid's own checks named neither the file nor the grid ("problem: unknown 'offlaod'"), and
    # points = 0 was "give ... a number of points (--points N)"
    ("points = 0", ["grid[0]", "points", "got 0"]),
    (f'points = 2\n[[grid]]\nproblem = "offlaod"\ninstances = ["{TOY}"]\npoints = 2', ["grid[1]", "'offlaod'"]),
    ("points = 2\n[grid.options]\nslot = 3", ["grid[0]", "'slot'"]),
])
def test_config_values_of_the_wrong_type_name_the_key(body, needles, tmp_path, capsys):
    """A TOML value of the wrong type was a traceback (``'<=' not supported between 'int' and 'str'``)
    or, for ``points = true``, one point: one line naming the file, the grid and the key."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[[grid]]\nproblem = "remat"\ninstances = ["{TOY}"]\n{body}\n')
    assert main(["sweep", "--config", str(cfg), "--workers", "1", "--no-plot", "-q", "-o", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(cfg) in line and all(n in line for n in needles), line
    assert not (tmp_path / "o" / "results").exists()


@pytest.mark.parametrize("top, needles", [
    ("grid = 5", ["grid = 5", "[[grid]]"]),
    ('out = 5\n[[grid]]\nproblem = "remat"', ["out = 5", "folder"]),
    ('figures = ["nope"]\n[[grid]]\nproblem = "remat"', ["figures", "'nope'"]),    # was found after the sweep
    ('figures = "remat"\n[[grid]]\nproblem = "remat"', ["figures", "give a list"]),  # said unknown 'remat'
    (f'scheduler = 5\n[[grid]]\nproblem = "remat"\ninstances = ["{TOY}"]\npoints = 2', ["scheduler = 5"]),  # traceback
    # a figure of a problem no grid sweeps: every grid ran, then "the table has no rows this figure draws"
    (f'figures = ["offload"]\n[[grid]]\nproblem = "remat"\ninstances = ["{TOY}"]\npoints = 2',
     ["figures", "'offload'", "no grid"]),
])
def test_config_top_level_values_are_checked_first(top, needles, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(top + "\n")
    assert main(["sweep", "--config", str(cfg), "--workers", "1", "--no-plot", "-q", "-o", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert all(n in line for n in needles), line
    assert not (tmp_path / "o" / "results").exists()


def test_batch_without_a_pipedream_profile_and_config_with_an_experiment_are_refused(tmp_path, capsys):
    """``--batch`` rescales a PipeDream profile only: with an instance file it was silently ignored;
    ``--config`` beside an experiment's options silently ignored the file."""
    assert main(["sweep", "remat", "--instance", TOY, "--batch", "4", "-o", str(tmp_path / "a")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--batch 4" in line and "--pipedream" in line
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[[grid]]\nproblem = "remat"\ninstances = ["{TOY}"]\n')
    assert main(["sweep", "--config", str(cfg), "remat", "--instance", TOY, "-o", str(tmp_path / "b")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--config" in line and "give one" in line


def test_a_pipedream_profile_given_as_instance_takes_the_batch():
    """``sweep remat --instance X.graph.txt --batch 8`` ran at the profile's batch (128) silently: the
    profile is rescaled to the batch asked for, as with --pipedream."""
    import argparse

    from memplan.experiments.sweeps import sources

    graph = str(ROOT / "instances" / "pipedream" / "resnet18.graph.txt")
    got = sources(argparse.Namespace(instance=[graph], pipedream=None, batch=8))
    assert [(s.spec, s.batch) for s in got] == [(graph, 8)]
    c8, c128 = got[0].load()[0], sources(argparse.Namespace(instance=[graph], pipedream=None, batch=None))[0].load()[0]
    assert c8.wa[1] == pytest.approx(c128.wa[1] * 8 / 128)


def test_a_remat_offload_grid_without_a_link_is_refused():
    """A remat-offload grid with no bandwidth, on an instance with no platform bandwidth, ran
    re-materialization alone; 0 still asks for that."""
    with pytest.raises(InputError, match="bandwidth.*no platform bandwidth"):
        expand([Grid("remat-offload", [TOY], memory=["90MiB"])])
    assert expand([Grid("remat-offload", [TOY], memory=["90MiB"], bandwidth=[0])])


def test_remat_summary_prints_byte_scale_chains_in_their_units(capsys):
    """The remat sweep's summary printed a random chain's least peak as 0.0 MiB and its throughput
    rounded to 0.01: now in units that fit (49 B) and four significant digits."""
    from memplan.experiments import remat_sweep

    df = pd.DataFrame({"problem": "remat", "method": ["rotor", "rotor", "sequential"], "status": "optimal",
                       "objective": [104.0, 120.0, 130.0], "peak_memory": [49.0, 45.0, 61.0],
                       "memory_limit": [50.0, 46.0, 61.0], "batch": 1.0, "options": "{}", "instance": "r"})
    remat_sweep.summary(df, None)
    out = capsys.readouterr().out
    assert "45 B" in out and "61 B" in out and "0.009615/s" in out and "0.0 " not in out, out


def test_remat_offload_leaves_out_a_rotor_curve_whose_tables_do_not_fit(capsys):
    """The remat-offload experiment adds rotor at 500 slots itself; on a chain of 1500 stages its tables
    need 8.4 GiB (rotor refuses more than 4 GB), and every one of its tasks was an error row."""
    import argparse

    from memplan.experiments import remat_offload_figures as rof

    p = argparse.ArgumentParser()
    rof.add_arguments(p)
    args = p.parse_args(["--instance", "random:1500:0", "--bandwidth", "1GB/s", "--memory", "1GB", "--slots", "10"])
    grids = rof.grids(args)
    rotor = [g for g in grids if g.problem == "remat" and g.methods == ["rotor"]]
    assert [g.options["slots"] for g in rotor] == [[10]]
    assert "rotor with 500 slots skipped" in capsys.readouterr().err
    joint = [g for g in grids if g.problem == "remat-offload"]
    assert [g.options["slots"] for g in joint] == [[10]]


def test_offload_figure_3_takes_the_rotor_slots_whose_tables_fit(capsys):
    """Figure 3's re-materialization curve is rotor at 500 slots; on 1100 stages its tables would need
    more than the 4 GB rotor takes (410 slots fit): every remat task was an error row."""
    import argparse

    from memplan.baselines import remat_rotor
    from memplan.experiments import offload_figures as of

    p = argparse.ArgumentParser()
    of.add_arguments(p)
    args = p.parse_args(["--instance", "random:1100:0", "--bandwidth", "1GB/s", "--points", "2", "--methods", "greedy",
                         "--figures", "3"])
    rotor = [g for g in of.grids(args) if g.problem == "remat"]
    assert [g.options["slots"] for g in rotor] == [410]
    remat_rotor.check_tables("persistent", 1100, 410)             # fits
    with pytest.raises(remat_rotor.TableTooLarge):
        remat_rotor.check_tables("persistent", 1100, 411)
    assert "rotor with 410 slots" in capsys.readouterr().err
    args = p.parse_args(["--instance", TOY, "--bandwidth", "1GB/s", "--points", "2", "--methods", "greedy",
                         "--figures", "3"])
    assert [g.options["slots"] for g in of.grids(args) if g.problem == "remat"] == [500]     # the paper's
