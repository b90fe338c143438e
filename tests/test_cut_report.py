"""Issue 30, item 3: a graph that linearizes into fewer than one stage per ten nodes is reported
(PipeDream import and zoo profiles), naming the tensors that cross the cheapest cut inside the largest
stage."""
import json
import re
from pathlib import Path

import networkx as nx
import pytest

from memplan.models.cut_report import cheapest_cut, coarse_chain_warning
from memplan.models.graph import linearize
from memplan.models.pipedream import import_graph

ROOT = Path(__file__).resolve().parents[1]


def _graph_txt(path, n, skips=()):
    """A PipeDream profile: Input node0, then node1..node{n-1} in a line, plus the given skip edges."""
    lines = ["node0 -- Input -- forward_compute_time=0.0, backward_compute_time=0.0, activation_size=64.0, "
             "parameter_size=0.0"]
    for i in range(1, n):
        lines.append(f"node{i} -- Conv2d(4, 4) -- forward_compute_time=1.0, backward_compute_time=2.0, "
                     f"activation_size=64.0, parameter_size=16.0")
    edges = [(i - 1, i) for i in range(1, n)] + list(skips)
    lines += [f"\tnode{a} -- node{b}" for a, b in edges]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_long_skip_is_reported_with_the_tensors_that_cross(tmp_path, capsys):
    from memplan.experiments.cli import main

    # 31 nodes; the skip node1 -> node30 leaves a single cut (after node1): stages [node1], [node2..30]
    g = _graph_txt(tmp_path / "skip.graph.txt", 31, skips=[(1, 30)])
    chain = import_graph(g, cuts="single")
    assert chain.L == 2 and chain.provenance["cut_rule"] == "single"
    text = chain.provenance["linearization_warning"]
    assert "31 nodes linearize into only 2 stage(s)" in text
    # inside stage 2 every cut is crossed by node1's output (the skip) and the last node's output
    assert "holds 29 of the 31 nodes" in text and "crossed by 2 tensors: node1, node2" in text
    out = tmp_path / "skip.json"
    assert main(["import-pipedream", str(g), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: PipeDream profile skip.graph.txt: 31 nodes") and err.count("\n") == 1
    # the import cuts where several tensors cross instead (cuts="auto") and the line says so
    auto = json.loads(out.read_text())["provenance"]
    assert auto["cut_rule"] == "multi" and auto["linearization_warning"] in err
    assert auto["linearization_warning"].startswith(text[:text.index("; re-materialization")])
    assert "cut where several tensors cross instead: 5 stages, 1 resident tensor(s)" in err
    # what crosses each cut: the input, the skip's source node1, the sink (64 bytes each at batch 128)
    assert chain.provenance["cuts"] == [{"cut": 0, "tensors": [{"node": "node0", "bytes": 64.0}]},
                                        {"cut": 1, "tensors": [{"node": "node1", "bytes": 64.0}]},
                                        {"cut": 2, "tensors": [{"node": "node30", "bytes": 64.0}]}]
    assert import_graph(g, batch=32, cuts="single").provenance["cuts"][1]["tensors"][0]["bytes"] == 16.0


def test_pipedream_multi_cuts_count_every_tensor_once(tmp_path):
    """The multi-cut import of a line of 31 layers with a skip node1 -> node30: at most 6 nodes per
    stage; node1 crosses every cut until stage 5 and is resident (64 bytes and its gradient), the other
    cuts carry one tensor each; every node's time and activation is counted once (against the
    single-tensor import: same total time, sum of abar plus the resident values the same bytes)."""
    g = _graph_txt(tmp_path / "skip.graph.txt", 31, skips=[(1, 30)])
    single, multi = import_graph(g, cuts="single"), import_graph(g)
    assert multi.provenance["cut_rule"] == "multi" and multi.L == 5
    assert multi.provenance["groups"] == [[f"node{i}" for i in range(j, j + 6)] for j in range(1, 31, 6)]
    assert multi.resident == 128.0 and multi.provenance["resident"] == [
        {"node": "node1", "bytes": 64.0, "stage": 1, "last_stage": 5, "charged": 128.0}]
    assert [c["tensors"] for c in multi.provenance["cuts"]] == (
        [[{"node": "node0", "bytes": 64.0}]] + [[{"node": f"node{j}", "bytes": 64.0}] for j in (6, 12, 18, 24, 30)])
    assert [len(c["resident"]) for c in multi.provenance["cuts"]] == [0, 1, 1, 1, 1, 0]
    assert sum(multi.uf) + sum(multi.ub) == pytest.approx(sum(single.uf) + sum(single.ub))
    assert sum(multi.wabar[:multi.L + 1]) + multi.resident / 2 == sum(single.wabar[:single.L + 1]) == 31 * 64.0
    assert import_graph(g, batch=32).resident == 32.0
    # several inputs and outputs: the data inputs form a^0, the virtual sink a last stage of its own
    two = tmp_path / "two.graph.txt"
    lines = _graph_txt(tmp_path / "x.graph.txt", 25).read_text().splitlines()
    lines.insert(1, lines[0].replace("node0", "nodeB"))
    lines += ["\tnodeB -- node20", "\tnode12 -- node24", "\tnode12 -- nodeS"]
    lines.insert(2, lines[2].replace("node1 ", "nodeS ", 1))
    two.write_text("\n".join(lines) + "\n")
    m2, s2 = import_graph(two, cuts="multi"), import_graph(two, cuts="single")
    L = m2.L
    assert m2.stage_names[-2] == "sinks" and m2.uf[L] == m2.ub[L] == m2.wa[L] == m2.wabar[L] == 0
    res = {r["node"]: r for r in m2.provenance["resident"]}
    # nodeB is read by node20: a^0 (both inputs, 128 bytes) crosses several cuts, without a gradient
    assert m2.wa[0] == 0 and res["input"]["bytes"] == res["input"]["charged"] == s2.wa[0] == 128.0
    assert res["nodeS"]["last_stage"] == L and res["nodeS"]["charged"] == 128.0     # a sink before the last stage
    assert sum(m2.wabar[1:L + 1]) + sum(r["bytes"] for r in res.values()) + m2.wa[0] == pytest.approx(sum(s2.wabar[:s2.L + 1]))
    assert m2.resident == sum(r["charged"] for r in res.values())
    assert sum(m2.uf) == pytest.approx(sum(s2.uf))


def test_threshold_is_one_stage_per_ten_nodes(tmp_path):
    # 21 nodes, skip node1 -> node20: stages [node1], [node2..node20]: 2 < 21 / 10, reported
    assert "linearization_warning" in import_graph(_graph_txt(tmp_path / "a.graph.txt", 21, [(1, 20)])).provenance
    # 20 nodes, skip node1 -> node19: 2 stages = 20 / 10, not reported; a plain line never is
    assert "linearization_warning" not in import_graph(_graph_txt(tmp_path / "b.graph.txt", 20, [(1, 19)])).provenance
    assert "linearization_warning" not in import_graph(_graph_txt(tmp_path / "c.graph.txt", 40)).provenance


def test_shipped_pipedream_resnets_are_not_reported(capsys):
    for name in ("resnet18", "resnet50"):
        assert "linearization_warning" not in import_graph(ROOT / "instances" / "pipedream" / f"{name}.graph.txt").provenance


def test_cheapest_cut_by_brute_force():
    # two cells reading the two previous outputs: h2 = f(h0, h1), h3 = f(h1, h2), ...; each cell is a -> b
    G = nx.DiGraph([("x", "h0"), ("h0", "a1"), ("x", "a1"), ("a1", "h1")])
    prev2, prev1 = "h0", "h1"
    for i in range(2, 6):
        G.add_edges_from([(prev1, f"a{i}"), (prev2, f"a{i}"), (f"a{i}", f"h{i}")])
        prev2, prev1 = prev1, f"h{i}"
    G.add_edge(prev1, "fc")
    G.add_edge(prev2, "fc")
    groups = linearize(G)
    assert len(groups) == 1 and len(groups[0]) == 12            # x is a^0; no single tensor separates
    big = groups[0]
    cut = cheapest_cut(G, big)
    # brute force over every predecessor-closed set S holding x and splitting the group: fewest crossing
    nodes = list(G)
    best = None
    for mask in range(1 << len(nodes)):
        S = {v for i, v in enumerate(nodes) if mask >> i & 1}
        if "x" not in S or not (S & set(big)) or set(big) <= S:
            continue
        if any(u not in S for v in S for u in G.predecessors(v)):
            continue
        crossing = {u for u, v in G.edges if u in S and v not in S}
        best = crossing if best is None or len(crossing) < len(best) else best
    assert len(cut) == len(best) == 2
    assert all(any(w not in set(cut) for w in G.successors(u)) for u in cut)   # each is read after the cut
    text = coarse_chain_warning(G, groups, what="cells")
    assert "13 nodes linearize into only 1 stage(s)" in text and "crossed by 2 tensors" in text
    # the same cells followed by a straight tail of 7 nodes: 20 nodes, 8 stages, not reported
    for i in range(7):
        G.add_edge("fc" if i == 0 else f"t{i - 1}", f"t{i}")
    assert len(linearize(G)) == 8 and coarse_chain_warning(G, linearize(G), what="cells") is None


def test_zoo_nasnet_and_transformer_reported_gpt2_not(one_torch_thread):
    torch = pytest.importorskip("torch")
    from memplan.models.cut_report import counted_operations
    from memplan.models.graph import capture
    from memplan.models.networks import example_input, get_model

    def warning(name, kw, shape):
        m = get_model(name, **kw)
        cap = capture(m, example_input(name, 2, shape, vocab=kw.get("vocab")))
        return coarse_chain_warning(cap.graph, cap.groups(), what=name, counted=counted_operations(cap.graph))

    text = warning("nasnet_a", dict(channels=4, cells=2), (3, 8, 8))
    assert text is not None and "crossed by 2 tensors" in text           # the outputs of the last two cells
    assert warning("transformer", dict(vocab=20, d_model=8, n_head=2, d_ff=16, n_enc=2, n_dec=2, src_len=4,
                                       n_ctx=8), (7,)) is not None
    # GPT-2 (12 layers) is cut at every residual addition: not reported though its attention has many ops
    assert warning("gpt2", dict(n_layer=12, n_embd=16, n_head=2, vocab=20, n_ctx=8), (4,)) is None
    assert torch.get_num_threads() == 1


def test_cli_profile_prints_the_warning(tmp_path, capsys, one_torch_thread):
    pytest.importorskip("torch")
    from memplan.experiments.cli import main

    out = tmp_path / "t.json"
    args = ["profile", "--model", "transformer", "--set", "vocab=20", "--set", "d_model=8", "--set", "n_head=2",
            "--set", "d_ff=16", "--set", "n_enc=2", "--set", "n_dec=2", "--set", "src_len=4", "--set", "n_ctx=8",
            "--batch", "2", "--input", "7", "--repeats", "1", "--threads", "1", "-o", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    prov = json.loads(out.read_text())["provenance"]
    assert err.startswith("warning: transformer: ") and prov["linearization_warning"] in err
    # the warning applies, so the multi-tensor cuts are taken (cuts="auto") and the line says so
    assert prov["cut_rule"] == "multi" and "cut where several tensors cross instead" in err
    assert 10 * len(prov["groups"]) >= prov["operations"]
    from memplan.models.instance import load_chain

    c = load_chain(out)
    cuts = prov["cuts"]
    assert [x["cut"] for x in cuts] == list(range(c.L + 1)) and cuts[0]["tensors"] == [{"node": "ids", "bytes": 112.0}]
    # a^l is the tensors crossing cut l only, what the profiler measured as a^l (MiB with 9 digits)
    assert [sum(t["bytes"] for t in x["tensors"]) for x in cuts] == pytest.approx(list(c.wa[:c.L + 1]), abs=0.01)
    # the resident tensors: each crosses two or more cuts, is listed at every cut it crosses, and is
    # charged with its gradient when it is a float tensor (the encoder's output), once when not (the
    # target token ids, a slice of the input ids)
    res = {r["node"]: r for r in prov["resident"]}
    assert res and all(r["last_stage"] - r["stage"] >= 2 for r in res.values())
    for x in cuts:
        assert {r["node"] for r in x["resident"]} == {v for v, r in res.items() if r["stage"] <= x["cut"] < r["last_stage"]}
    assert res["src_drop"]["charged"] == 2 * res["src_drop"]["bytes"] and res["getitem_1"]["charged"] == 48.0
    assert c.resident > 0
    # memplan run rebuilds the multi-cut stages from the recorded groups and executes them
    assert main(["run", str(out), "--check-grads", "--time-budget", "1"]) == 0
    text = capsys.readouterr().out
    assert "gradients    bit-identical to plain autograd" in text
    measured, simulated = re.search(r"peak memory\s+measured ([\d.]+) KiB\s+simulated ([\d.]+) KiB", text).groups()
    assert 0.99 * float(simulated) <= float(measured) <= float(simulated) * 1.0001      # KiB with one decimal
