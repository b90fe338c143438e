"""Multi-tensor cuts (issue 30): the resident model against a brute-force replay of the graph's tensors,
the front ends' charge of Chain.resident, and the executor on a small U-Net.

Reference of the first test: a tensor-level replay written from the graph alone (which node outputs
are alive after each operation, by the executor's rules), not from the chain's arrays.
"""
from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule
from memplan.models.chain import Chain
from memplan.models.graph import is_chain_partition, multi_cut_groups, residency
from memplan.models.remat import simulate_remat


def _random_dag(seed: int, n: int = 7) -> nx.DiGraph:
    """Source 0, sink n-1, each node reading 1-3 earlier nodes (long edges make tensors cross several cuts)."""
    rng = np.random.default_rng(seed)
    G = nx.DiGraph()
    G.add_node(0, out_bytes=int(rng.integers(1, 9)))
    for v in range(1, n):
        G.add_node(v, out_bytes=int(rng.integers(1, 9)))
        preds = {v - 1} | set(rng.choice(v, size=min(v, int(rng.integers(0, 3))), replace=False).tolist())
        G.add_edges_from((u, v) for u in preds)
    for v in range(n - 1):                     # every node is read by someone: a single sink
        if G.out_degree(v) == 0:
            G.add_edge(v, n - 1)
    return G


def _chain(G, groups, res, free=()) -> Chain:
    """The chain the resident model gives: F_all^l keeps every output of stage l (the resident ones
    in the resident charge), a^l its single-cut tensors, delta^l their gradients, value + gradient of
    each resident tensor in ``resident``. ``free``: resident tensors no backward saves, charged while
    they live (``resident_values``: producer, readers) and, inside their producer's forwards, in its
    ``o_f`` (as the profiler measures it)."""
    s = lambda vs: float(sum(G.nodes[v]["out_bytes"] for v in vs))  # noqa: E731
    rs = set(res.resident)
    wa = [s(b) for b in res.boundary]
    wabar = [wa[0]] + [s(v for v in g if v not in rs) for g in groups]
    L = len(groups)
    of = [s(v for v in free if res.producer[v] == l) for l in range(1, L + 1)]
    values = [(s([v]), res.producer[v], [l for l in range(1, L + 1) if v in res.reads[l - 1]]) for v in free]
    return Chain.from_stages(uf=[1.0] * L, ub=[1.0] * L, wa=wa, wabar=wabar, wd=wa, of=of, resident=2 * s(rs),
                             resident_values=values)


def _tensor_replay(G, groups, res, ops, free=(), after: list | None = None) -> float:
    """Peak bytes of node outputs and gradients alive during each operation, by the executor's rules
    (models.runtime.execute): F_all^l keeps every output of stage l until B^l; F_ck/F_none keep
    a^l's tensors (F_none drops a^{l-1}'s); a resident tensor and its gradient live from the first
    computation of its producer to the producer's B; B^l makes delta^{l-1} (gradients of a^{l-1}'s
    tensors) and drops delta^l, abar^l and a^{l-1} when only a^{l-1} was kept. Every operation checks
    that the tensors it reads are alive. A resident tensor of ``free`` (no backward saves it) is alive
    after an operation while a forward of one of its readers comes before its producer's next forward
    (its gradient as the others'). ``after``: receives the bytes alive after each operation."""
    size = {v: G.nodes[v]["out_bytes"] for v in G}
    L = len(groups)
    src = [v for v in G if G.in_degree(v) == 0][0]
    stage = {src: 0, **{v: l for l, g in enumerate(groups, 1) for v in g}}
    rs = set(res.resident)
    kept_a = {0}                         # l with a^l kept without graph
    kept_abar: set[int] = set()
    deltas = {L + 1}
    resident: set = {src} if src in rs else set()

    free = set(free)
    fwd = [(p, l) for p, (op, l) in enumerate(ops) if op != "B"]

    def needed_after(v, pos: int) -> bool:
        readers = {l for l in range(1, L + 1) if v in res.reads[l - 1]}
        for _, l in (f for f in fwd if f[0] > pos):
            if l == res.producer[v]:
                return False
            if l in readers:
                return True
        return False

    live_free: set = set()

    def alive_values() -> set:
        out = (set(resident) - free) | live_free
        for l in kept_a:
            out |= set(res.boundary[l]) if l <= L else set()
        for l in kept_abar:
            out |= set(groups[l - 1]) - free if l <= L else set()
        return out

    def mem(extra=()) -> float:
        vals = alive_values() | set(extra)
        grads = {("g", v) for l in deltas if l <= L for v in res.boundary[l]} | {("g", v) for v in resident}
        return float(sum(size[v] for v in vals) + sum(size[v] for _, v in grads))

    peak = mem()
    for pos, (op, l) in enumerate(ops):
        if op == "B":
            assert l in kept_abar and l in deltas
            during = mem() + sum(size[v] for v in res.boundary[l - 1])
            kept_abar.discard(l)
            deltas.discard(l)
            deltas.add(l - 1)
            kept_a.discard(l - 1) if l - 1 not in kept_abar else None
            resident -= {v for v in rs if stage[v] == l}
        else:
            if l <= L:                   # stage l reads a^{l-1} and its resident inputs
                alive = alive_values()
                assert set(res.boundary[l - 1]) <= alive and set(res.reads[l - 1]) <= alive
            new = set(groups[l - 1]) if (op == "F_all" and l <= L) else set(res.boundary[l]) if l <= L else set()
            during = mem(new | {v for v in rs if stage.get(v) == l})
            resident |= {v for v in rs if stage.get(v) == l}
            live_free |= {v for v in free if stage.get(v) == l}
            live_free = {v for v in live_free if needed_after(v, pos)}
            if op == "F_all":
                kept_abar.add(l)
                kept_a.discard(l)
            elif l not in kept_abar:
                kept_a.add(l)
            if op == "F_none":
                kept_a.discard(l - 1)
        peak = max(peak, during)
        if after is not None:
            after.append(mem())
    return peak


@pytest.mark.parametrize("seed", range(12))
def test_resident_model_bounds_the_tensor_replay(seed):
    """For every sequence tried (store-all, sequential, every optimal rotor sequence between the
    minimum and store-all), the chain's simulated peak is at least the brute-force replay's, equal for
    store-all (every resident tensor is alive at the end of the forward), and equal for every
    sequence when no tensor crosses two cuts."""
    from memplan import remat

    G = _random_dag(seed)
    for max_nodes in (1, 2):
        groups = multi_cut_groups(G, max_nodes=max_nodes)
        assert is_chain_partition(G, groups) or len(groups) >= 1
        res = residency(G, groups)
        chain = _chain(G, groups, res)
        lo, hi = remat.memory_range(chain)
        seqs = [store_all_schedule(chain), sequential_schedule(chain, 2)]
        for m in sorted({round(v) for v in np.linspace(lo, hi, 4)}):
            sol = remat.solve(chain, memory=float(m), method="rotor", exact=True, time_limit=10)
            assert sol.peak_memory <= m + 1e-9
            seqs.append(sol.schedule)
        for i, seq in enumerate(seqs):
            sim = simulate_remat(chain, seq).peak_memory
            brute = _tensor_replay(G, groups, res, seq.ops)
            assert brute <= sim + 1e-9, (seed, max_nodes, i)
            if i == 0 or not res.resident:
                assert brute == sim, (seed, max_nodes, i)


def test_residency_classifies_by_cuts_crossed():
    """x -> a -> b -> c -> d with a also read by c: one stage per node makes a cross cuts 1 and 2."""
    G = nx.DiGraph([("x", "a"), ("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")])
    res = residency(G, [["a"], ["b"], ["c"], ["d"]])
    assert res.resident == ["a"] and res.producer == {"a": 1}
    assert res.boundary == [["x"], [], ["b"], ["c"], ["d"]]
    assert res.reads == [[], ["a"], ["a"], []] and res.writes == [["a"], [], [], []]
    assert res.crossing(2) == ["b", "a"]
    # cutting only after b: a crosses one cut, as in a single-tensor chain's a^l
    res2 = residency(G, [["a", "b"], ["c", "d"]])
    assert res2.resident == [] and res2.boundary[1] == ["a", "b"]


def test_multi_cut_groups_keeps_inside_tensors_inside():
    """x -> a -> b -> c -> d with a also read by c: with a kept inside (``inside``), the cuts after a
    and after b (both crossed by a) are not taken, and the group grows past max_nodes to the next
    allowed cut; without it every node is a stage."""
    G = nx.DiGraph([("x", "a"), ("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")])
    assert multi_cut_groups(G, max_nodes=1) == [["a"], ["b"], ["c"], ["d"]]
    assert multi_cut_groups(G, max_nodes=1, inside={"a"}) == [["a", "b", "c"], ["d"]]
    assert multi_cut_groups(G, max_nodes=1, inside={"b"}) == [["a"], ["b", "c"], ["d"]]


@pytest.mark.parametrize("problem", ["remat", "offload"])
def test_front_ends_charge_resident_once(problem):
    """A chain with resident bytes r plans as the same chain without them under memory - r: the same
    schedule and makespan, a peak larger by r, and the simulator replaying on the chain agrees."""
    import memplan
    from memplan.models.chain import random_chain

    base = random_chain(5, seed=3)
    r = 7.0
    chain = Chain(**{k: getattr(base, k) for k in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")}, resident=r)
    mod = getattr(memplan, problem)
    lo = memplan.remat.memory_range(base)[0]
    kw = {} if problem == "remat" else {"bandwidth": 1.0}
    plain = mod.solve(base, memory=lo + 5, time_limit=20, **kw)
    res = mod.solve(chain, memory=lo + 5 + r, time_limit=20, **kw)
    assert res.status == plain.status and res.objective == pytest.approx(plain.objective)
    assert res.peak_memory == pytest.approx(plain.peak_memory + r)
    assert res.details["resident_bytes"] == r and res.memory_limit == lo + 5 + r
    if problem == "remat":
        assert simulate_remat(chain, res.schedule).peak_memory == pytest.approx(res.peak_memory)
        low = mod.solve(chain, memory=lo + r - 1, time_limit=20)
        assert str(low.status) == "infeasible" and low.details["min_memory"] == pytest.approx(lo + r)


@pytest.mark.parametrize("name,kw,shape,max_nodes", [
    ("unet", dict(base=8, depth=2), (3, 32, 32), 4),
    # the encoder's output is resident and read twice (keys and values) in every cross-attention
    pytest.param("transformer", dict(n_enc=2, n_dec=2, d_model=32, d_ff=64, src_len=8), (16,), 6,
                 marks=pytest.mark.long),
    # the cell states get slices of the cell's cat gradient: they stay inside a stage (strided_gradients)
    pytest.param("nasnet_a", dict(channels=4, cells=1), (3, 8, 8), 6, marks=pytest.mark.long),
])
def test_executor_on_multi_cuts(name, kw, shape, max_nodes, one_torch_thread):
    """Small multi-branch networks with multi-tensor cuts: parameter gradients bit-identical to
    autograd's (resident inputs read by several nodes of a stage, NASNet's cell states); the executed
    peaks of store-all and of rotor at two limits the simulator's, to the byte (the resident values
    with a storage of their own charged only while they live, the others whole)."""
    torch = pytest.importorskip("torch")
    import memplan
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    model = get_model(name, **kw).train()
    x = example_input(name, 2, shape)
    loss = classification_loss(seed=0)
    lm = linearize_model(model, x, loss, cuts="multi", max_nodes=max_nodes)
    assert lm.residency.resident and lm.L >= 5          # tensors cross several cuts
    chain = profile_chain(lm.stages, x, lm.loss_stage(loss), repeats=1, names=lm.names)
    assert chain.resident > 0
    if name == "transformer":
        used = [sum(1 for n in s.graph.nodes if n.op == "call_function" and n.target.__name__ == "resident_use")
                for s in lm.stages]
        assert max(used) >= 2

    def grads(fn):
        torch.manual_seed(1)                            # dropout: the same masks in both runs
        for p in model.parameters():
            p.grad = None
        fn()
        return [p.grad.clone() for p in model.parameters()]

    ref = grads(lambda: loss(model(x)).backward())
    lo, hi = memplan.remat.memory_range(chain)
    seqs = [store_all_schedule(chain)] + [memplan.remat.solve(chain, memory=lo + f * (hi - lo), method="rotor",
                                                              time_limit=10).schedule for f in (0.25, 0.75)]
    for k, seq in enumerate(seqs):
        out = {}
        g = grads(lambda: out.setdefault("r", execute(lm.stages, lm.loss_stage(loss), x, seq, measure_memory=True)))
        assert all(torch.equal(a, b) for a, b in zip(ref, g))
        sim = simulate_remat(chain, seq).peak_memory
        # to the byte since the resident values are charged while they live (Chain.resident_values);
        # the Transformer's target ids, a view of the input, are counted in a^0 and a^1 (1 KiB here)
        assert 0 <= sim - out["r"].peak_memory <= (1024 if name == "transformer" else 0), (k, sim, out["r"].peak_memory)


def test_pipeline_charges_each_resident_tensor_where_it_lives():
    """The pipeline's task data with resident spans (provenance ``resident``): for every contiguous
    partition of 7 layers on up to 3 GPUs, the resident bytes a GPU holds per mini-batch (its layers'
    S plus its first layer's H, against the same chain without resident tensors) are, by brute force,
    the sum over the tensors whose span [max(p, 1), min(q, L)] meets its layers, each once; a link at
    cut l carries the tensors with p <= l < q forward and their gradients back. Without spans every
    GPU and link is charged all of them."""
    import itertools as it

    from memplan.models.pipeline import task_data

    L = 7
    spans = [(0, 3, 5.0, 0.0), (1, 4, 7.0, 7.0), (2, 8, 11.0, 11.0), (4, 6, 13.0, 13.0), (5, 8, 17.0, 17.0)]
    base = Chain.from_stages(uf=[1.0] * L, ub=[2.0] * L, wa=[3.0] * (L + 1), wabar=[4.0] * (L + 1), wd=[3.0] * (L + 1))
    total = sum(v + g for *_, v, g in spans)
    prov = {"resident": [{"node": f"t{i}", "stage": p, "last_stage": q, "bytes": v, "charged": v + g}
                         for i, (p, q, v, g) in enumerate(spans)]}
    chain = Chain(**{k: getattr(base, k) for k in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")},
                  resident=total, provenance=prov)
    blind = Chain(**{k: getattr(base, k) for k in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")},
                  resident=total)
    for model in ("paper", "autograd"):
        t0, t1, t2 = task_data(base, 1.0, model), task_data(chain, 1.0, model), task_data(blind, 1.0, model)
        for P in (1, 2, 3):
            for cuts in it.combinations(range(1, L), P - 1):
                bounds = [0, *cuts, L]
                for a, b in zip(bounds, bounds[1:]):
                    a += 1
                    held = (t1.S[a:b + 1].sum() + t1.H[a]) - (t0.S[a:b + 1].sum() + t0.H[a])
                    want = sum(v + g for p, q, v, g in spans if max(p, 1) <= b and a <= min(q, L))
                    assert held == pytest.approx(want), (model, cuts, a, b)
                    blind_held = (t2.S[a:b + 1].sum() + t2.H[a]) - (t0.S[a:b + 1].sum() + t0.H[a])
                    assert blind_held == pytest.approx(total)
        n = 2 * L
        for l in range(1, L):
            assert t1.A[l] - t0.A[l] == sum(v for p, q, v, g in spans if p <= l < q)
            assert t1.A[n - l] - t0.A[n - l] == sum(g for p, q, v, g in spans if p <= l < q)
            assert t2.A[l] - t0.A[l] == total


def test_auto_cuts_take_multi_only_for_coarse_single_tensor_chains(one_torch_thread):
    """``cuts="auto"`` (the default of ``memplan profile``) takes multi-tensor cuts for the U-Net, whose
    single-tensor linearization holds the whole U in one stage, and keeps the single-tensor chains of
    the earlier zoo networks (here small ResNet-18, DenseNet-121 and GPT-2): same groups as
    ``cuts="saved"``. The rule's two reasons are checked on hand-made group sizes."""
    pytest.importorskip("torch")
    from memplan.models.graph import MULTI_MAX_NODES, capture, coarse_single_cuts, counted_operations, linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    ops = list(range(40))
    assert coarse_single_cuts([ops[:30], ops[30:35], ops[35:]], ops) == ("3 single-tensor stage(s) for 40 operations, "
                                                                       "fewer than one per 10")
    assert coarse_single_cuts([ops[i:i + 2] for i in range(0, 14, 2)] + [ops[14:]], ops) == \
        "one single-tensor stage holds 26 of the 40 operations"
    assert coarse_single_cuts([ops[i:i + 2] for i in range(0, 20, 2)] + [ops[20:]], ops) is None   # 20 of 40: not most
    assert coarse_single_cuts([[0], [1], list(range(2, 12))], range(12)) is None       # 10 operations: a small net

    loss_fn = classification_loss(seed=0)
    for name, kw, shape, want in [("unet", dict(base=4, depth=2), (3, 8, 8), "multi"),
                                  ("resnet18", {}, (3, 32, 32), "saved"),
                                  ("densenet121", {}, (3, 32, 32), "saved"),
                                  ("gpt2", dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16), (8,), "saved")]:
        m = get_model(name, **kw).train()
        x = example_input(name, 2, shape, vocab=kw.get("vocab"))
        cap = capture(m, x)
        assert (coarse_single_cuts(cap.groups(), counted_operations(cap.graph)) is not None) == (want == "multi")
        if name in ("unet", "resnet18"):
            auto = linearize_model(m, x, loss_fn, cuts="auto")
            assert auto.cuts == want
            if want == "saved":
                assert auto.groups == linearize_model(m, x, loss_fn, cuts="saved").groups
            else:       # no stage holds most of the U any more: at most MULTI_MAX_NODES operations each
                counted = counted_operations(cap.graph)
                sizes = [sum(v in counted for v in g) for g in auto.groups]
                assert max(sizes) <= MULTI_MAX_NODES < max(sum(v in counted for v in g) for g in cap.groups())
                assert auto.residency.resident


def test_multi_cut_groups_steers_clear_of_unsaved_tensors():
    """x -> a -> q -> v -> m -> r, with a also read by m and v kept inside (a strided view, as the
    Transformer's query projection q and its view): one counted node a stage cuts after q, which
    then crosses the cut. With q unsaved (no backward keeps it, so the cut would hold it where
    autograd frees it) the stage [q, v, m] is taken instead: the cut after q was the only one in
    reach, and no cut is allowed between it and the one after m."""
    G = nx.DiGraph([("x", "a"), ("a", "q"), ("q", "v"), ("v", "m"), ("a", "m"), ("m", "r")])
    for v in G:
        G.nodes[v]["out_bytes"] = 4
    counted = {"a", "q", "m", "r"}
    assert multi_cut_groups(G, max_nodes=1, counted=counted, inside={"v"}) == [["a"], ["q"], ["v", "m"], ["r"]]
    assert multi_cut_groups(G, max_nodes=1, counted=counted, inside={"v"},
                            unsaved={"q"}) == [["a"], ["q", "v", "m"], ["r"]]
    # without the view kept inside, the cut after v is in reach and q does not cross it
    assert multi_cut_groups(G, max_nodes=1, counted=counted, unsaved={"q"}) == [["a"], ["q", "v"], ["m"], ["r"]]


def _unsaved_crossing(G, groups, unsaved) -> int:
    where = {v: i for i, g in enumerate(groups) for v in g}
    total = 0
    for c in range(len(groups) - 1):           # the cut after group c
        total += sum(G.nodes[u]["out_bytes"] for u in G if u in unsaved and where.get(u, -1) <= c
                     and any(where[w] > c for w in G.successors(u)))
    return total


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(4, 12), max_nodes=st.integers(1, 3),
       picks=st.lists(st.booleans(), min_size=12, max_size=12))
def test_unsaved_preference_never_costs_unsaved_bytes(seed, n, max_nodes, picks):
    """On random DAGs with random unsaved tensors: the groups partition the graph with every edge
    going forward (:func:`residency` accepts them), and the unsaved
    bytes crossing the chosen cuts are never more than those of the cuts chosen without the
    preference (every arc of that choice is still in the search, and unsaved bytes come first)."""
    G = _random_dag(seed, n)
    unsaved = {v for v, p in zip(range(1, n - 1), picks) if p}
    plain = multi_cut_groups(G, max_nodes=max_nodes)
    steered = multi_cut_groups(G, max_nodes=max_nodes, unsaved=unsaved)
    residency(G, steered)                      # raises on a backward edge or a missing node
    assert sorted(v for g in steered for v in g) == list(range(1, n))
    assert _unsaved_crossing(G, steered, unsaved) <= _unsaved_crossing(G, plain, unsaved)


@pytest.mark.parametrize("seed", range(12))
def test_unsaved_resident_values_follow_the_tensor_replay(seed):
    """Resident tensors no backward saves (``Chain.resident_values``), charged while they live, by
    :func:`models.remat.value_drops`: the chain's simulated peak is at least the brute-force replay's
    (which asks, after each operation, whether a reader's forward comes before the producer's next
    forward) for every sequence, and equal for store-all; and it is below the whole charge's where a
    value goes before the peak."""
    from memplan import remat

    G = _random_dag(seed, n=9)
    rng = np.random.default_rng(seed)
    for max_nodes in (1, 2):
        groups = multi_cut_groups(G, max_nodes=max_nodes)
        res = residency(G, groups)
        cand = [v for v in res.resident if res.producer[v] >= 1]
        if not cand:
            continue
        for free in (set(cand), {v for v in cand if rng.random() < 0.5}):
            chain = _chain(G, groups, res, free)
            whole = _chain(G, groups, res)
            lo, hi = remat.memory_range(chain)
            seqs = [store_all_schedule(chain), sequential_schedule(chain, 2), sequential_schedule(chain, 3)]
            for m in sorted({round(v) for v in np.linspace(lo, hi, 4)}):
                seqs.append(remat.solve(chain, memory=float(m), method="rotor", exact=True, time_limit=10).schedule)
            for i, seq in enumerate(seqs):
                rep_ = simulate_remat(chain, seq)
                sim = rep_.peak_memory
                after: list = []
                brute = _tensor_replay(G, groups, res, seq.ops, free, after)
                assert brute <= sim + 1e-9, (seed, max_nodes, i)
                assert sim <= simulate_remat(whole, seq).peak_memory + max(chain.of)
                if i == 0:
                    assert brute == sim, (seed, max_nodes, i, brute, sim)
                # after every operation, the chain holds what the replay holds but for what it charges
                # whole: every gradient, and every value not in ``free``, also before the producer's
                # first forward and after its backward (the replay: only in between)
                made, done = set(), set()
                for pos, (op, l) in enumerate(seq.ops):
                    (done if op == "B" else made).add(l)
                    outside = sum(G.nodes[v]["out_bytes"] * (1 if v in free else 2) for v in res.resident
                                  if res.producer[v] >= 1 and (res.producer[v] not in made or res.producer[v] in done))
                    assert rep_.memory_after[pos] == after[pos] + outside, (seed, max_nodes, i, pos)
