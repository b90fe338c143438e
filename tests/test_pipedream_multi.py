"""PipeDream profiles with several inputs or outputs (issue 18): joined through virtual source/sink nodes.

Checked three ways: hand-computed chains of two small graphs (an encoder-decoder, an auxiliary head),
conservation laws on random multi-terminal graphs (times and sizes of the real nodes, each counted
once), and a second method: the same graph joined by hand through real zero-cost nodes, which goes
through the single-source single-sink path of the importer, must give the same chain.
"""
import random

import networkx as nx
import pytest

import memplan
from memplan.models.graph import VIRTUAL_SINK, VIRTUAL_SOURCE, is_chain_partition, linearize
from memplan.models.pipedream import PipeDreamFormatError, import_graph, read_graph


def _write(path, nodes, edges):
    """nodes: id -> (type, uf_ms, ub_ms, out_bytes, weight_bytes)."""
    lines = [f"{n} -- {t}(x) -- forward_compute_time={f:.3f}, backward_compute_time={b:.3f}, "
             f"activation_size={a:.1f}, parameter_size={w:.1f}" for n, (t, f, b, a, w) in nodes.items()]
    lines += [f"\t{u} -- {v}" for u, v in edges]
    path.write_text("\n".join(lines) + "\n")
    return path


ENC_DEC = {
    "node1": ("Input", 5, 0, 100, 0),          # source tokens (loading time: ignored)
    "node2": ("Embedding", 1, 2, 40, 10),
    "node3": ("Linear", 3, 4, 40, 20),
    "node4": ("Input", 7, 0, 60, 0),           # target tokens, enter at the decoder
    "node5": ("Embedding", 1, 1, 30, 5),
    "node6": ("Attention", 2, 3, 30, 0),       # cross-attention: encoder output + decoder embedding
    "node7": ("Linear", 1, 2, 10, 7),
}
ENC_DEC_EDGES = [("node1", "node2"), ("node2", "node3"), ("node4", "node5"), ("node3", "node6"),
                 ("node5", "node6"), ("node6", "node7")]

AUX_HEAD = {
    "node1": ("Input", 9, 0, 50, 0),
    "node2": ("Conv2d", 2, 3, 20, 1),
    "node3": ("Conv2d", 2, 4, 20, 1),
    "node4": ("Linear", 1, 1, 4, 2),           # auxiliary classifier on node3's features
    "node5": ("Conv2d", 3, 5, 16, 1),
    "node6": ("Linear", 1, 2, 8, 2),           # main classifier
}
AUX_HEAD_EDGES = [("node1", "node2"), ("node2", "node3"), ("node3", "node4"), ("node3", "node5"),
                  ("node5", "node6")]


def test_encoder_decoder_two_inputs_by_hand(tmp_path):
    c = import_graph(_write(tmp_path / "encdec.graph.txt", ENC_DEC, ENC_DEC_EDGES))
    groups = c.provenance["groups"]
    # both inputs travel together in stage 1 up to the cross-attention, then the output layer
    assert [set(g) for g in groups] == [{"node1", "node2", "node3", "node4", "node5", "node6"}, {"node7"}]
    assert c.L == 2
    assert c.wa[0] == 100 + 60                                  # a^0 = both inputs (the virtual source's output)
    assert c.uf[1:3].tolist() == pytest.approx([(1 + 3 + 1 + 2) * 1e-3, 1e-3])   # inputs' time ignored
    assert c.ub[1:3].tolist() == pytest.approx([(2 + 4 + 1 + 3) * 1e-3, 2e-3])
    assert c.wabar[1:3].tolist() == [40 + 40 + 30 + 30, 10]     # inputs not counted twice
    assert c.wa[1:3].tolist() == [30, 10] and c.wd[1:3].tolist() == [30, 10]
    assert c.weights[1:3].tolist() == [35, 7]
    assert c.wa[0] + c.wabar[1:3].sum() == sum(v[3] for v in ENC_DEC.values())
    assert "virtual source" in c.provenance["virtual_nodes"]


def test_auxiliary_head_two_outputs_by_hand(tmp_path):
    c = import_graph(_write(tmp_path / "aux.graph.txt", AUX_HEAD, AUX_HEAD_EDGES), batch=64)
    groups = c.provenance["groups"]
    assert groups[:2] == [["node2"], ["node3"]] and set(groups[2]) == {"node4", "node5", "node6"}
    h = 0.5                                                      # batch 64 of the profile's 128
    assert c.wa.tolist() == [h * 50, h * 20, h * 20, h * (4 + 8), 0]   # a^L: the loss sees both outputs
    assert c.wd.tolist() == c.wa.tolist()
    assert c.wabar[1:4].tolist() == [h * 20, h * 20, h * (4 + 16 + 8)]
    assert c.uf[1:4].tolist() == pytest.approx([h * 2e-3, h * 2e-3, h * 5e-3])
    assert c.ub[1:4].tolist() == pytest.approx([h * 3e-3, h * 4e-3, h * 8e-3])
    assert "virtual sink" in c.provenance["virtual_nodes"] and c.provenance["sinks"] == ["node4", "node6"]


def _random_profile(rng):
    """A random profile DAG with 1-3 Input sources (sometimes a computing source too) and 1-3 sinks."""
    while True:
        n_in = rng.randint(1, 3)
        n = rng.randint(n_in + 3, 14)
        G = nx.DiGraph()
        G.add_nodes_from(range(n))
        for v in range(n_in, n):
            for _ in range(rng.randint(1, 2)):
                G.add_edge(rng.randrange(v), v)
        computing_source = rng.random() < 0.3
        if computing_source:                     # e.g. a learned query table: no input, but computed
            G.add_edge(n, rng.randrange(n_in, n))
        srcs = [v for v in G if G.in_degree(v) == 0]
        snks = [v for v in G if G.out_degree(v) == 0]
        if set(srcs) & set(snks) or len(srcs) + len(snks) == 2:
            continue
        nodes = {}
        for v in G:
            typ = "Input" if v < n_in else ("Embedding" if v == n else "Linear")
            nodes[f"node{v + 1}"] = (typ, rng.randint(0, 9), rng.randint(0, 9) if typ != "Input" else 0,
                                     rng.randint(1, 50) * 8, rng.randint(0, 5) * 4 if typ != "Input" else 0)
        return nodes, [(f"node{u + 1}", f"node{v + 1}") for u, v in G.edges]


def test_random_profiles_count_every_real_node_once(tmp_path):
    rng = random.Random(1818)
    kinds = set()
    for trial in range(60):
        nodes, edges = _random_profile(rng)
        path = _write(tmp_path / f"r{trial}.graph.txt", nodes, edges)
        G = read_graph(path)
        c = import_graph(path, batch=8, cuts="single")
        k = 8 / 128
        groups = c.provenance["groups"]
        srcs, snks = c.provenance["sources"], c.provenance["sinks"]
        kinds.add((len(srcs) > 1, len(snks) > 1))
        assert groups == [list(g) for g in linearize(G)] and is_chain_partition(G, groups)
        assert all(VIRTUAL_SOURCE not in g and VIRTUAL_SINK not in g for g in groups)
        data = {n for n in srcs if nodes[n][0] == "Input"}
        real = [n for n in nodes if n not in data]
        # time: every node but the loaded inputs, once
        assert c.store_all_time() == pytest.approx(k * 1e-3 * sum(nodes[n][1] + nodes[n][2] for n in real))
        # memory: a^0 + sum abar = every node's output, once; weights likewise
        assert c.wa[0] == pytest.approx(k * sum(nodes[n][3] for n in data))
        assert c.wa[0] + c.wabar[1:c.L + 1].sum() == pytest.approx(k * sum(v[3] for v in nodes.values()))
        assert c.total_weights() == sum(v[4] for v in nodes.values())
        # stage memories consistent with the graph
        for l, g in enumerate(groups, start=1):
            assert c.wabar[l] == pytest.approx(k * sum(nodes[n][3] for n in g if n not in data))
            out = [g[-1]] if l < c.L else snks
            assert c.wa[l] == pytest.approx(k * sum(nodes[n][3] for n in out)) and c.wd[l] == c.wa[l]
            assert c.wa[l] <= c.wabar[l]
    assert kinds >= {(True, False), (False, True), (True, True)}


def _joined_by_hand(nodes, edges):
    """Second method: the same network with real zero-cost join nodes, so that it has one source and one
    sink and goes through the importer's single-source single-sink path. The inputs become views
    (zero size, zero time) of one Input node holding them all; the outputs feed a zero-size node."""
    srcs = {u for u, _ in edges} - {v for _, v in edges}
    snks = {v for _, v in edges} - {u for u, _ in edges}
    nodes = dict(nodes)
    edges = list(edges)
    if len(srcs) > 1:
        data = sorted(n for n in srcs if nodes[n][0] == "Input")
        nodes = {"nodeS": ("Input", 0, 0, sum(nodes[n][3] for n in data), 0),
                 **{n: (("View", 0, 0, 0, 0) if n in data else v) for n, v in nodes.items()}}
        edges = [("nodeS", n) for n in sorted(srcs)] + edges
    if len(snks) > 1:
        nodes["nodeT"] = ("Identity", 0, 0, 0, 0)
        edges += [(n, "nodeT") for n in sorted(snks)]
    return nodes, edges


def test_virtual_nodes_equal_real_zero_cost_joins(tmp_path):
    rng = random.Random(2024)
    for trial in range(40):
        nodes, edges = _random_profile(rng)
        c = import_graph(_write(tmp_path / f"v{trial}.graph.txt", nodes, edges), cuts="single")
        hn, he = _joined_by_hand(nodes, edges)
        ref = import_graph(_write(tmp_path / f"h{trial}.graph.txt", hn, he), cuts="single")
        assert ref.provenance["sources"] == [("nodeS" if len(c.provenance["sources"]) > 1 else
                                              c.provenance["sources"][0])]
        assert c.L == ref.L
        assert [set(g) for g in c.provenance["groups"]] == [set(g) - {"nodeT"} for g in ref.provenance["groups"]]
        assert c.uf == pytest.approx(ref.uf) and c.ub == pytest.approx(ref.ub)
        assert c.wabar == pytest.approx(ref.wabar) and c.weights == pytest.approx(ref.weights)
        # only a^L differs: the hand-made join node has size 0, while the loss reads every output
        assert c.wa[:c.L] == pytest.approx(ref.wa[:c.L])
        if len(c.provenance["sinks"]) > 1:
            assert ref.wa[c.L] == 0 and c.wa[c.L] == sum(nodes[n][3] for n in c.provenance["sinks"])


def test_cli_imports_and_the_chain_solves(tmp_path):
    from memplan.experiments.cli import main
    from memplan.models.instance import load_chain

    MiB = 2 ** 20                                                # the instance file stores MiB with 9 digits
    nodes = {n: (t, f, b, a * MiB, w * MiB) for n, (t, f, b, a, w) in
             {**ENC_DEC, "node8": ("Linear", 1, 1, 6, 3)}.items()}  # encoder-decoder with an auxiliary head too
    path = _write(tmp_path / "both.graph.txt", nodes, ENC_DEC_EDGES + [("node3", "node8")])
    out = tmp_path / "both.json"
    assert main(["import-pipedream", str(path), "--batch", "8", "-o", str(out)]) == 0
    c = load_chain(out)
    ref = import_graph(path, batch=8, cuts="single")
    assert c.L == ref.L == 1                                     # node8 branches off before the join
    assert c.wa[1] == pytest.approx(8 / 128 * (10 + 6) * MiB)
    assert c.wa[0] == pytest.approx(8 / 128 * (100 + 60) * MiB)
    assert c.store_all_time() == pytest.approx(8 / 128 * 1e-3 * sum(f + b for t, f, b, a, w in nodes.values()
                                                                    if t != "Input"))
    sol = memplan.remat.solve(c, memory=1e9, method="rotor")
    assert sol.objective == pytest.approx(c.store_all_time(), rel=1e-9)


def test_input_with_predecessors_is_refused_with_the_file_named(tmp_path):
    bad = _write(tmp_path / "bad.graph.txt", {"node1": ("Linear", 1, 1, 4, 0), "node2": ("Input", 0, 0, 4, 0),
                                              "node3": ("Linear", 1, 1, 4, 0)},
                 [("node1", "node2"), ("node2", "node3")])
    with pytest.raises(PipeDreamFormatError, match=r"bad.graph.txt: the Input node node2 has predecessors"):
        import_graph(bad)
    from memplan.experiments.cli import main
    assert main(["import-pipedream", str(bad), "-o", str(tmp_path / "o.json")]) == 2


def test_random_profiles_multi_cuts_count_every_node_once(tmp_path):
    """The multi-cut import (issue 30) of the same random profiles (several inputs and outputs among
    them): every node's time once, every activation once (a^0, the groups' non-resident outputs, the
    resident tensors), the resident charge their values plus the gradients of the computed ones, and
    each stage at most MULTI_MAX_NODES real nodes (a node alone may be a stage)."""
    from memplan.models.graph import MULTI_MAX_NODES

    rng = random.Random(1818)
    for trial in range(60):
        nodes, edges = _random_profile(rng)
        path = _write(tmp_path / f"r{trial}.graph.txt", nodes, edges)
        s, m = import_graph(path, batch=8, cuts="single"), import_graph(path, batch=8, cuts="multi")
        assert m.provenance["cut_rule"] == "multi"
        assert sum(m.uf) + sum(m.ub) == pytest.approx(sum(s.uf) + sum(s.ub))
        res = m.provenance["resident"]
        assert m.wa[0] + sum(m.wabar[1:m.L + 1]) + sum(r["bytes"] for r in res) == pytest.approx(
            s.wa[0] + sum(s.wabar[1:s.L + 1]))
        assert m.resident == pytest.approx(sum(r["charged"] for r in res))
        srcs = s.provenance["sources"]
        data = {"input"} | ({srcs[0]} if len(srcs) == 1 else set())     # loaded, not computed: no gradient
        assert all(r["charged"] == r["bytes"] * (1 if r["node"] in data else 2) for r in res)
        real = [[v for v in g if v != "<virtual sink>" and v != "input"] for g in m.provenance["groups"]]
        assert all(len(g) <= MULTI_MAX_NODES for g in real if len(g) > 1)
        assert sum(len(g) for g in real) + 1 >= len(nodes) - len(s.provenance["sources"]) + 1


def test_shipped_gnmt_profile_cuts_where_several_tensors_cross():
    """PipeDream's published GNMT profile (shipped in instances/pipedream/, issue 30's encoder-decoder):
    cut only where one tensor crosses it is one stage holding all 48 nodes; the default (auto) cuts
    where several cross, with at least one stage per ten nodes, every node's times counted once (the
    sums read from the file here with a regular expression, not through the importer), the tensors
    that cross several cuts resident, and PipeDream's planner on 4 GPUs gives each GPU work."""
    import re

    from memplan.models.instance import shipped_dir

    path = shipped_dir() / "pipedream" / "gnmt.graph.txt"
    text = path.read_text()
    nodes = re.findall(r"^(node\d+) -- (.*?) -- forward_compute_time=([\d.]+), backward_compute_time=([\d.]+)",
                       text, flags=re.M)
    assert len(nodes) == 48
    real = [(float(f), float(b)) for _, desc, f, b in nodes if not desc.startswith("Input")]
    k = 32 / 128                                    # batch 32 from the profile's 128
    single = import_graph(path, batch=32, cuts="single")
    assert single.L == 1 and "linearization_warning" in single.provenance
    chain = import_graph(path, batch=32)
    assert chain.provenance["cut_rule"] == "multi"
    assert chain.L >= 48 // 10
    ms = 1e-3                                       # the profile's times are milliseconds
    assert sum(chain.uf) == pytest.approx(k * ms * sum(f for f, _ in real))
    assert sum(chain.ub) == pytest.approx(k * ms * sum(b for _, b in real))
    resident = {r["node"] for r in chain.provenance["resident"]}
    assert "node26" in resident                     # the attention context, read by three later LSTMs
    assert chain.resident > 0
    sol = memplan.pipeline.solve(chain, memory=2 * sum(chain.weights) + 4 * sum(chain.wabar), gpus=4,
                                 bandwidth="12GB/s", method="pipedream", time_limit=20)
    assert sol.success
    sch = sol.schedule
    used = (set(sch.layer_gpus()) if hasattr(sch, "layer_gpus")
            else {s for s, (a, b) in enumerate(sch.stages) if a <= b})      # an eager 1F1B run
    assert len(used) == 4


def test_numbered_inputs_are_data_inputs_as_pipedream_names_them(tmp_path):
    """PipeDream's profiler names a network's several inputs ``Input0``, ``Input1``, ... (its GNMT
    profile's three); only ``Input`` was read as data, so ``Input0`` was a layer of stage 1: its
    loading time (5 and 7 ms here) counted as compute and its bytes were missing from a^0. The
    encoder-decoder by hand again (test_encoder_decoder_two_inputs_by_hand), its inputs numbered:
    the same chain as with inputs named ``Input``."""
    numbered = dict(ENC_DEC, node1=("Input0",) + ENC_DEC["node1"][1:], node4=("Input1",) + ENC_DEC["node4"][1:])
    for cuts in ("single", "multi"):
        c = import_graph(_write(tmp_path / f"numbered-{cuts}.graph.txt", numbered, ENC_DEC_EDGES), cuts=cuts)
        assert c.wa[0] == 100 + 60                                        # a^0 = both inputs
        assert sum(c.uf) == pytest.approx((1 + 3 + 1 + 2 + 1) * 1e-3)     # their loading time ignored
        assert sum(c.ub) == pytest.approx((2 + 4 + 1 + 3 + 2) * 1e-3)
        named = import_graph(_write(tmp_path / f"named-{cuts}.graph.txt", ENC_DEC, ENC_DEC_EDGES), cuts=cuts)
        for attr in ("uf", "ub", "wa", "wabar", "wd", "weights"):
            assert getattr(c, attr).tolist() == getattr(named, attr).tolist(), attr


def test_a_profile_of_several_inputs_names_them_in_its_provenance():
    """``memplan show`` on the imported GNMT profile said ``input: [3, 224, 224]`` (an image's shape, the
    default for PipeDream's single-input CNN profiles) under the default cut rule; the single-tensor
    rule already named the inputs."""
    from memplan.models.instance import shipped_dir

    path = shipped_dir() / "pipedream" / "gnmt.graph.txt"
    for cuts in ("auto", "single"):
        assert import_graph(path, cuts=cuts).provenance["input"] == ["Input0", "Input1", "Input2"], cuts
