"""The budget benchmark's Pareto figure (``memplan plot --figure budget``): one series per compiled-stage
chain's partitioner budget, so that no line joins plans of different chains; the per-stage plans
drawn as their own series."""
from __future__ import annotations

import pandas as pd

from memplan.experiments import figures


def _row(method, peak_mib, ms, **kw):
    return {"problem": "budget", "instance": "toy-b2", "status": "executed", "method": method, "batch": 2,
            "peak_memory": peak_mib * 2**20, "objective": ms / 1e3, "time_low": ms / 1e3 * 0.98,
            "time_high": ms / 1e3 * 1.02, "clock": "cpu", "backend": "aot_eager_decomp_partition",
            "fraction": kw.pop("fraction", float("nan")), **kw}


def test_one_series_per_partitioner_budget(tmp_path, monkeypatch):
    df = pd.DataFrame([
        _row("pytorch", 300, 1200, fraction=1.0), _row("pytorch", 290, 1300, fraction=0.5),
        _row("rotor-compiled", 100, 930, stage_fraction=1.0), _row("rotor-compiled", 150, 800, stage_fraction=1.0),
        _row("rotor-compiled", 295, 1460, stage_fraction=0.5), _row("rotor-compiled", 316, 1320, stage_fraction=0.5),
        _row("rotor-per-stage", 117, 780), _row("memplan", 117, 780),
    ])
    seen = {}

    def keep(fig, path, dpi):
        ax = fig.axes[0]
        seen["labels"] = ax.get_legend_handles_labels()[1]
        # the data of each errorbar series: its line's points
        seen["lines"] = {c.get_label(): c.lines[0].get_xdata().tolist() for c in ax.containers}
        return path

    monkeypatch.setattr(figures, "_save", keep)
    figures.figure_budget(df, tmp_path)
    labels = seen["labels"]
    full = [x for x in labels if x.endswith("partitioner budget 1")]
    half = [x for x in labels if x.endswith("partitioner budget 0.5")]
    assert len(full) == 1 and len(half) == 1
    assert seen["lines"][full[0]] == [100, 150] and seen["lines"][half[0]] == [295, 316]
    assert any("a partitioner budget per stage" in x for x in labels)
