"""Graph capture (torch.fx -> networkx) and linearization of a DAG into a chain of stages.

Papers 001 (section 6) and 003 (section 6) turn non-sequential networks into chains "by grouping each
non-linear part of the graph in a virtual layer", with "a greedy procedure to obtain minimal groups of
operations. In each group, the set of predecessors outside the group and the set of successors outside
the group are disjoint." Neither paper writes the procedure down; this module reads it as follows.

The rule (what :func:`linearize` computes)
------------------------------------------
Let G be a DAG with a single source s (the network input a^0) and a single sink t (the value handed
to the loss); a DAG with several sources or sinks is first joined as described below. A node v is a
**separator** when

1. every node of G is an ancestor of v, v itself, or a descendant of v, and
2. every edge from {ancestors of v} ∪ {v} to {descendants of v} leaves from v.

Equivalently: in a topological order, when the prefix ending at v has been processed, v is the only
processed node with an unprocessed successor ("the frontier is {v}"); this does not depend on the
topological order chosen. The source s is a separator and so is the sink t. With the separators
s = v_0, v_1, ..., v_L = t in topological order, stage l is the group

    G_l = { u : v_{l-1} < u <= v_l }   (descendants of v_{l-1} that are ancestors of v_l, plus v_l).

Then for every group the only predecessor outside the group is v_{l-1} (whose output is a^{l-1}) and
every successor outside the group lies in G_{l+1}: outside predecessors and outside successors are
disjoint (the papers' condition), consecutive groups exchange exactly one tensor, and the groups are
**minimal**: any finer partition into a sequence of groups would need a boundary that is not a single
node's output. A straight chain gives one group per node; a residual block (skip edge from the block
input to the addition) becomes one group ending at the addition; a dense block written with a list of
all earlier features becomes one group; an Inception module (parallel branches + concatenation) becomes
one group ending at the concatenation.

Several sources or sinks (:func:`join_terminals`)
-------------------------------------------------
An encoder-decoder (source and target tokens) has several sources; a network with an auxiliary
classifier head (Inception v3, GoogLeNet) has several sinks. Such a DAG is linearized as the DAG H that
adds a **virtual source** ``VIRTUAL_SOURCE`` with an edge to every real source, when there are several,
and a **virtual sink** ``VIRTUAL_SINK`` with an edge from every real sink, when there are several. The
virtual nodes carry only the attribute ``virtual=True``: read with a default of 0 (as
:func:`group_costs` does) they have zero time, zero size and zero weights, so they add nothing. The
rule above applied to H gives:

- several sources: the virtual source is a^0 and is in no group; every real source lies in group 1
  (an edge from the separator v_0 only reaches group 1), so stage 1 receives every input together.
  Whoever builds a chain says what a^0 holds (the PipeDream importer: the data inputs, which it then
  does not count a second time inside group 1; see :mod:`models.pipedream`).
- several sinks: the virtual sink is the last separator; no real sink can be a separator (another
  real sink is neither its ancestor nor its descendant), so every real sink lies in the last group.
  The virtual sink is removed from the returned groups: the last group then ends with a real sink,
  and its output a^L is **all the real sinks' outputs together** (the loss reads each of them), whose
  size is the sum of the sinks' output sizes, not the last node's alone. A head that branches off
  early keeps its output alive until the loss, so everything from the branch point on forms one group:
  the coarser chain is the price of passing a single tensor between stages.

The greedy procedure scans a topological order once, keeping for each processed node the number of its
successors not yet processed, and closes the current group at v when the set of processed nodes with
unprocessed successors is exactly {v}. Complexity O(V + E) after the topological sort.

Capture
-------
:func:`capture` traces a module with ``torch.fx.symbolic_trace`` (leaf modules are torch.nn's own:
Conv2d, BatchNorm2d, Linear, ...), runs it once on a sample input to record shapes, and returns a
:class:`Captured` holding the fx GraphModule and a networkx DiGraph whose nodes carry the fx node name,
``op``, ``target``, ``out_bytes`` (bytes of the node's tensor outputs for the sample input) and
``weight_bytes`` (bytes of the parameters the node reads). Nodes that do not depend on the input
(``get_attr`` of parameters or buffers, constants built from them) are left out of the DAG: they are
re-created inside every stage that reads them (see :func:`stage_modules`).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Sequence

import networkx as nx


# ---------------------------------------------------------------------------------------- the rule
class _Virtual:
    """A node that is not in the user's graph (compares equal only to itself, so it never collides)."""

    __slots__ = ("label",)

    def __init__(self, label: str):
        self.label = label

    def __repr__(self) -> str:
        return f"<{self.label}>"


VIRTUAL_SOURCE = _Virtual("virtual source")
VIRTUAL_SINK = _Virtual("virtual sink")


def join_terminals(G: nx.DiGraph) -> tuple[nx.DiGraph, Hashable, Hashable]:
    """``(H, source, sink)``: G itself with its source and sink when it has one of each; otherwise a copy
    of G with ``VIRTUAL_SOURCE`` (an edge to every source of G) when G has several sources and
    ``VIRTUAL_SINK`` (an edge from every sink of G) when G has several sinks. The virtual nodes carry
    only ``virtual=True`` (zero time and size when costs are read with a default of 0). O(V + E).

    >>> H, s, t = join_terminals(nx.DiGraph([("src", "enc"), ("tgt", "dec"), ("enc", "dec")]))
    >>> s, t, sorted(H.successors(s))
    (<virtual source>, 'dec', ['src', 'tgt'])
    """
    sources = [n for n in G if G.in_degree(n) == 0]
    sinks = [n for n in G if G.out_degree(n) == 0]
    if not sources or not sinks:
        raise ValueError("linearize: the graph is empty or has a cycle (no source or no sink)")
    if len(sources) == 1 and len(sinks) == 1:
        return G, sources[0], sinks[0]
    H = nx.DiGraph()
    if len(sources) > 1:
        H.add_node(VIRTUAL_SOURCE, virtual=True)
    H.add_nodes_from(G.nodes(data=True))
    H.add_edges_from(G.edges(data=True))
    source, sink = sources[0], sinks[0]
    if len(sources) > 1:
        source = VIRTUAL_SOURCE
        H.add_edges_from((VIRTUAL_SOURCE, n) for n in sources)
    if len(sinks) > 1:
        sink = VIRTUAL_SINK
        H.add_node(VIRTUAL_SINK, virtual=True)
        H.add_edges_from((n, VIRTUAL_SINK) for n in sinks)
    return H, source, sink


def linearize(G: nx.DiGraph, order: Sequence[Hashable] | None = None) -> list[list[Hashable]]:
    """Minimal groups of a DAG (see the module docstring for the rule and for several sources/sinks).

    Parameters
    ----------
    G : networkx.DiGraph, acyclic. With one source (the input) and one sink (the output) the rule
        applies as is; several sources or sinks are joined through virtual nodes (:func:`join_terminals`).
    order : optional topological order of G to scan (default: a topological order of G that follows node
        insertion order where it can); the result does not depend on it.

    Returns
    -------
    list of groups, each a list of G's nodes in scan order (virtual nodes never appear). With a single
    source, the source is in no group (it is a^0); with several, they all lie in group 1. The last node
    of group l < L is the separator whose output is a^l; the last group ends with the sink, or holds
    every sink when there are several (a^L is then all their outputs together).

    >>> G = nx.DiGraph([("x", "c1"), ("c1", "c2"), ("c2", "add"), ("x", "add"), ("add", "fc")])
    >>> linearize(G)
    [['c1', 'c2', 'add'], ['fc']]
    >>> linearize(nx.DiGraph([("x", "c1"), ("c1", "aux"), ("c1", "c2"), ("c2", "fc")]))  # auxiliary head
    [['c1'], ['aux', 'c2', 'fc']]
    """
    if not nx.is_directed_acyclic_graph(G):
        raise ValueError("linearize: the graph has a cycle")
    H, source, sink = join_terminals(G)
    if order is None:
        index = {n: i for i, n in enumerate(H.nodes)}
        order = list(nx.lexicographical_topological_sort(H, key=lambda n: index[n]))
    else:
        order = list(order)
        pos = {n: i for i, n in enumerate(order)}
        if len(pos) != len(order) or set(pos) != set(G.nodes) or any(pos[u] >= pos[v] for u, v in G.edges):
            raise ValueError("linearize: 'order' is not a topological order of G")
        if source not in G:
            order = [source] + order
        if sink not in G:
            order = order + [sink]
    if order[0] != source:
        raise ValueError("linearize: the scan order must start with the source")
    groups: list[list[Hashable]] = []
    current: list[Hashable] = []
    for v, frontier in frontiers(H, order):
        current.append(v)
        if frontier == {v} or not frontier:
            groups.append(current)
            current = []
    assert not current, "the sink closes the last group"
    if sink not in G:
        assert groups and groups[-1][-1] is sink and len(groups[-1]) > 1, "every real sink is in the last group"
        groups[-1].pop()
    return groups


def frontiers(H: nx.DiGraph, order: Sequence[Hashable]) -> Iterable[tuple[Hashable, set[Hashable]]]:
    """Scan ``order`` (a topological order of H starting with its source) and yield, after each node v
    but the first, ``(v, frontier)``: the processed nodes that still have an unprocessed successor,
    i.e. the tensors crossing the cut right after v. The set is updated in place between yields
    (copy it to keep it). O(V + E) in all."""
    remaining = {n: H.out_degree(n) for n in H}
    frontier: set[Hashable] = {order[0]}
    for v in order[1:]:
        for u in H.predecessors(v):
            remaining[u] -= 1
            if remaining[u] == 0:
                frontier.discard(u)
        if remaining[v] > 0:
            frontier.add(v)
        yield v, frontier


def is_chain_partition(G: nx.DiGraph, groups: Sequence[Sequence[Hashable]]) -> bool:
    """True when ``groups`` cover G's nodes (the single source excluded; with several sources, all of
    them included) and every edge stays inside a group or goes from the last node of group l (or the
    source, for l = 0) into group l+1; with several sinks they must all lie in the last group (checked
    on the graph of :func:`join_terminals`, the virtual sink closing the last group)."""
    H, source, sink = join_terminals(G)
    groups = [list(g) for g in groups]
    if sink not in G:
        if not groups:
            return False
        groups[-1].append(sink)
    where = {source: 0}
    for l, g in enumerate(groups, start=1):
        for n in g:
            if n in where or n not in H:
                return False
            where[n] = l
    if len(where) != len(H):
        return False
    last = {0: source, **{l: g[-1] for l, g in enumerate(groups, start=1)}}
    for u, v in H.edges:
        a, b = where[u], where[v]
        if a == b:
            continue
        if b != a + 1 or u != last[a]:
            return False
    return True


#: fx targets that only view or describe a tensor (not counted as operations by counted_operations)
VIEW_OPS = frozenset({"view", "reshape", "transpose", "permute", "getitem", "flatten", "size", "narrow", "expand",
                      "unsqueeze", "squeeze", "contiguous", "split", "chunk", "getattr", "t", "dim", "view_as",
                      "expand_as", "select"})


def _target_name(target: str) -> str:
    t = str(target)
    if t.startswith("<"):          # '<built-in function getitem>', '<function flatten at 0x..>'
        t = t.strip("<>").replace("built-in function ", "").replace("built-in method ", "").replace("function ", "")
        t = t.split(" ")[0]
    return t.rsplit(".", 1)[-1]


def counted_operations(G: nx.DiGraph) -> set[Hashable]:
    """Nodes of a captured graph (:func:`models.graph.capture`) that compute a tensor: module calls,
    and function/method calls that are not in :data:`VIEW_OPS` and output some bytes."""
    out = set()
    for v, d in G.nodes(data=True):
        op = d.get("op")
        if op in ("call_function", "call_method") and _target_name(d.get("target", "")) in VIEW_OPS:
            continue
        if op != "placeholder" and not d.get("out_bytes", 0):
            continue
        out.add(v)
    return out




# ---------------------------------------------------------------------- multi-tensor cuts (issue 30)
def multi_cut_groups(G: nx.DiGraph, *, max_nodes: int = 10, counted: Iterable[Hashable] | None = None,
                     size: str = "out_bytes", inside: Iterable[Hashable] = (),
                     unsaved: Iterable[Hashable] = ()) -> list[list[Hashable]]:
    """Groups of G cut where several tensors may cross (issue 30, item 2).

    The rule. Scan the topological order :func:`linearize` scans (program order where it can). The
    cut after position i of the order is the set of processed nodes with an unprocessed successor
    (:func:`frontiers`): a downset of G, so every sequence of such cuts is a path in PipeDream's
    antichain DAG (its states are the downsets' maximal antichains; it also allows the cuts of
    other topological orders, which this rule does not look at). Among the cuts of this one order,
    choose the sequence that

    1. leaves at most ``max_nodes`` counted nodes (``counted``: default every node; the zoo passes
       :func:`counted_operations`) in every group, or one node where a single node exceeds it —
       enough stages: with the default 10, never fewer than one per ten operations, the threshold
       under which :mod:`models.cut_report` warns; and
    2. among those, first minimizes the bytes of the ``unsaved`` tensors that cross the chosen cuts
       (:func:`saved_outputs`' complement: tensors no backward formula keeps, which plain autograd
       frees in the forward but the executor holds as a^l or a resident tensor until its producer's
       backward: the zoo's Transformer cut at its attention's query projections held 1.5 MiB more
       than autograd in the store-all step, 4.4%, a Llama-style stack 2 MiB, 2.0%, exactly those
       tensors), then the sum over the chosen cuts of the bytes (``size``) of the tensors that
       cross them — small boundaries; a tensor crossing several chosen cuts counts at each, which
       steers the cuts away from long-lived tensors where an equally short stage is possible. The
       two sums are compared in that order (integer weights, so that no float rounding mixes them).

    Where every allowed cut within ``max_nodes`` counted nodes of a cut has an unsaved tensor
    crossing it, the first allowed cut past them is also in reach if none crosses it: between the
    two no cut is allowed (``inside``), so that stretch is one stage in any case, and the longer
    stage is the stretch and at most ``max_nodes`` more. The Transformer's and the Llama stack's
    query projections, cut off from their attention stages (held together by their strided views),
    were the only cuts in reach.

    ``inside``: nodes whose output must cross no chosen cut (:func:`strided_gradients`: autograd hands
    their producer a gradient laid out otherwise than a copy would be, and some kernels' sums depend on
    the layout). A cut that such a tensor crosses is not taken, and a group may then exceed
    ``max_nodes``: from a cut, the next cut is the first allowed one when none is allowed within
    ``max_nodes`` counted nodes.

    It is a shortest path (``networkx.shortest_path``, Dijkstra) in the DAG whose nodes are the
    positions 0..n-1 of the order and whose arcs i -> j join positions with at most ``max_nodes``
    counted nodes in between, weighted by the bytes crossing the cut after j (0 at the sink), the
    unsaved ones weighted above any sum of the others.
    O(V + E) for the frontiers, O(V K log V) for the path, K the widest window (``max_nodes`` plus
    the uncounted nodes inside it). Single-tensor separators are cheap cuts, so the rule takes most of
    them, but it does not have to. G must have a single source (a^0) and a single sink.

    >>> G = nx.DiGraph([("x", "a"), ("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")])
    >>> multi_cut_groups(G, max_nodes=1)
    [['a'], ['b'], ['c'], ['d']]
    """
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"multi_cut_groups: max_nodes={max_nodes!r}; give a whole number >= 1")
    if not nx.is_directed_acyclic_graph(G):
        raise ValueError("multi_cut_groups: the graph has a cycle")
    H, source, sink = join_terminals(G)
    if source not in G or sink not in G:
        raise ValueError("multi_cut_groups: the graph must have a single source and a single sink")
    index = {n: i for i, n in enumerate(H.nodes)}
    order = list(nx.lexicographical_topological_sort(H, key=lambda n: index[n]))
    counted = set(G.nodes) if counted is None else set(counted)
    n = len(order)
    inside = set(inside)
    unsaved = set(unsaved)
    cost = [0] * n
    extra = [0] * n                  # bytes of unsaved tensors crossing the cut
    ok = [True] * n
    for i, (v, frontier) in enumerate(frontiers(H, order), start=1):
        if v != sink:
            sizes = {u: int(G.nodes[u].get(size, 0) or 0) for u in frontier}
            cost[i] = sum(sizes.values())
            extra[i] = sum(b for u, b in sizes.items() if u in unsaved)
        ok[i] = v == sink or not (inside & set(frontier))
    # lexicographic (unsaved bytes, bytes) as one integer: any path's byte sum is below ``scale``
    scale = n * max(cost) + 1
    cost = [e * scale + c for e, c in zip(extra, cost)]
    D = nx.DiGraph()
    D.add_nodes_from(range(n))
    for i in range(n - 1):
        if not ok[i]:
            continue
        k = 0
        found = clean = False         # an allowed cut in reach; one that no unsaved tensor crosses
        for j in range(i + 1, n):
            k += order[j] in counted
            if k > max_nodes and found:
                if clean:
                    break
                if ok[j]:                     # every cut in reach holds an unsaved tensor: the first
                    if extra[j] == 0:         # allowed one past the reach, if it holds none
                        D.add_edge(i, j, w=cost[j])
                    break
                continue
            if ok[j]:
                D.add_edge(i, j, w=cost[j])
                found = True
                clean = clean or extra[j] == 0
    path = nx.shortest_path(D, 0, n - 1, weight="w")
    return [order[a + 1:b + 1] for a, b in zip(path, path[1:])]


@dataclass
class Residency:
    """What crosses the cuts of a chain partition (issue 30, item 1), from :func:`residency`.

    ``boundary[l]`` (cut l = 0..L, between stage l and stage l+1; cut 0 is the input, cut L feeds the
    loss): the tensors that cross cut l and no other chosen cut, in scan order: a^l. ``resident``:
    the tensors that cross two or more cuts. ``producer[v]``: the stage computing resident tensor v
    (0: the input). ``reads[l-1]`` / ``writes[l-1]``: the resident tensors stage l reads / computes.
    """

    boundary: list[list[Hashable]]
    resident: list[Hashable]
    producer: dict[Hashable, int]
    reads: list[list[Hashable]]
    writes: list[list[Hashable]]

    def crossing(self, l: int) -> list[Hashable]:
        """Every tensor crossing cut l: a^l and the resident tensors alive across it."""
        return list(self.boundary[l]) + [v for v in self.resident if self.producer[v] <= l < self._last[v]]

    _last: dict = field(default_factory=dict, repr=False)


def residency(G: nx.DiGraph, groups: Sequence[Sequence[Hashable]], source: Hashable | None = None) -> Residency:
    """The boundaries and resident tensors of ``groups`` (a partition of G's nodes but its single
    source into groups such that every edge goes from a group to itself or a later one, e.g.
    :func:`multi_cut_groups`). O(V + E).

    The model (issue 30). Tensor v, computed in stage p (0 for the input) and last read in stage q
    (L+1 for the value handed to the loss), crosses the cuts p, ..., q-1. A tensor crossing one cut
    (q = p+1) is part of a^p, as in the single-tensor chains: the chain keeps it exactly as it keeps
    a^p. A tensor crossing two or more cuts is **resident**: the executor (:func:`models.runtime.
    execute`) keeps one copy of it and of its gradient (allocated with it, zeros, in which every
    reader's backward accumulates) from the first time it is computed until the backward step of
    its producer, and a recomputation of the producer hands the same storage on (no second copy). It
    is charged once, for the whole step (``Chain.resident`` = its bytes plus its gradient's), and is
    in no ``wa``/``wabar``/``wd``: an upper bound of what the executor holds at any time (from its
    creation on it holds exactly that; before, less), which the DPs and MILPs of every problem take
    by planning under ``memory - resident``. Why not exact: keeping it per boundary (in every
    a^l it crosses) would count it once per checkpoint holding it, and an exact model (tensors living
    across stages) would change every DP and MILP; the resident charge is what all of them can use.
    The test ``tests/test_multi_cut.py`` checks the chain's simulator against a brute-force replay of
    the graph's tensors for every sequence of small random graphs. Since 2026-11-29 the gradient is
    made by the last reader's backward (``Chain.resident_grads``), and a value with a storage of its
    own lives, in the executor and in :func:`models.remat.simulate_remat`, from its producer's forward
    to its last reader's forward where no backward saves it, else to its producer's backward
    (:func:`resident_lifetimes`, ``Chain.resident_values``); the solvers still plan with the whole
    charge, and the re-materialization front end replays their plans and the baselines with the spans.
    """
    where: dict[Hashable, int] = {}
    if source is None:
        sources = [n for n in G if G.in_degree(n) == 0]
        if len(sources) != 1:
            raise ValueError("residency: the graph must have a single source")
        source = sources[0]
    where[source] = 0
    for l, g in enumerate(groups, start=1):
        for v in g:
            if v in where:
                raise ValueError(f"residency: node {v!r} is in two groups (or is the source)")
            where[v] = l
    if len(where) != G.number_of_nodes():
        raise ValueError("residency: the groups do not cover the graph")
    L = len(groups)
    last: dict[Hashable, int] = {}
    for v in G:
        succ = [where[w] for w in G.successors(v)]
        if any(s < where[v] for s in succ):
            raise ValueError(f"residency: an edge goes back from node {v!r} to an earlier group")
        last[v] = max(succ) if succ else (L + 1 if where[v] == L else where[v])
    pos = {v: i for i, v in enumerate([source] + [v for g in groups for v in g])}
    boundary: list[list[Hashable]] = [[] for _ in range(L + 1)]
    resident: list[Hashable] = []
    for v in sorted(G, key=pos.__getitem__):
        crossed = last[v] - where[v]
        if crossed == 1:
            boundary[where[v]].append(v)
        elif crossed >= 2:
            resident.append(v)
    producer = {v: where[v] for v in resident}
    reads = [[v for v in resident if producer[v] < l and any(where[w] == l for w in G.successors(v))]
             for l in range(1, L + 1)]
    writes = [[v for v in resident if producer[v] == l] for l in range(1, L + 1)]
    return Residency(boundary, resident, producer, reads, writes, _last={v: last[v] for v in resident})


# ------------------------------------------------------------------------------------- capture
@dataclass
class Captured:
    """A traced model: the fx GraphModule, the networkx DAG of input-dependent nodes, the sample output."""

    gm: Any                     # torch.fx.GraphModule
    graph: nx.DiGraph
    source: str                 # name of the input placeholder node
    sink: str                   # name of the node whose value the model returns
    free: set[str] = field(default_factory=set)   # fx nodes that do not depend on the input
    output: "OutputStructure | None" = None   # the model returns its tensor inside a structure (a dict...)
    context: "ContextInputs | None" = None    # the model's inputs after the first, read inside the stages

    def groups(self) -> list[list[str]]:
        return linearize(self.graph)


def _tensor_bytes(meta) -> int:
    if meta is None:
        return 0
    if hasattr(meta, "shape") and hasattr(meta, "dtype"):
        import torch

        n = 1
        for s in meta.shape:
            n *= int(s)
        return n * torch.empty((), dtype=meta.dtype).element_size()
    if isinstance(meta, (list, tuple)):
        return sum(_tensor_bytes(m) for m in meta)
    if isinstance(meta, dict):
        return sum(_tensor_bytes(m) for m in meta.values())
    return 0


_SLOT = object()      # where the chain's output goes in an OutputStructure's template


class OutputStructure:
    """How a model returns the one tensor its chain ends in: inside a dict, a (named) tuple or a list,
    beside constants (``{"logits": t}``, ``(t, None)``), as models written for a training loop often
    do. The chain ends in the tensor itself; the structure is made again around it where the user's
    code sees the output: the loss (:meth:`LinearizedModel.loss_stage`, and the loss
    :func:`linearize_model` decides the cuts with) and :meth:`LinearizedModel.__call__`. ``kind``
    names the structure in messages."""

    def __init__(self, template, kind: str) -> None:
        self.template = template
        self.kind = kind

    def __call__(self, t):
        return _fill(self.template, t)

    def loss(self, loss_fn: Callable) -> Callable:
        """``loss_fn`` of the model's output, as a function of the chain's last tensor (a module where
        ``loss_fn`` is one, so that its parameters stay visible to the executor, as a folded head's)."""
        import torch

        rebuild = self

        class _StructuredLoss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.loss_fn = loss_fn if isinstance(loss_fn, torch.nn.Module) else None
                self._loss = loss_fn

            def forward(self, x, *rest):
                return self._loss(rebuild(x), *rest)

        return _StructuredLoss()


def _template(ret, found: list, value):
    """``ret`` (an fx output argument) with every fx node whose value (``value``, the same structure on
    the example) is a tensor replaced by :data:`_SLOT`, those nodes appended to ``found``, and every
    other node by its value on the example; fx's immutable containers become plain lists and dicts."""
    import torch
    from torch import fx

    if isinstance(ret, fx.Node):
        if isinstance(value, torch.Tensor):
            found.append(ret)
            return _SLOT
        return value
    if isinstance(ret, tuple):
        vals = [_template(r, found, v) for r, v in zip(ret, value)]
        return type(ret)(*vals) if hasattr(ret, "_fields") else tuple(vals)
    if isinstance(ret, list):
        return [_template(r, found, v) for r, v in zip(ret, value)]
    if isinstance(ret, dict):
        return {k: _template(r, found, value[k]) for k, r in ret.items()}
    return ret


def _fill(tpl, t):
    if tpl is _SLOT:
        return t
    if isinstance(tpl, tuple):
        vals = [_fill(v, t) for v in tpl]
        return type(tpl)(*vals) if hasattr(tpl, "_fields") else tuple(vals)
    if isinstance(tpl, list):
        return [_fill(v, t) for v in tpl]
    if isinstance(tpl, dict):
        return {k: _fill(v, t) for k, v in tpl.items()}
    return tpl


def _kind(ret) -> str:
    if isinstance(ret, dict):
        return "dict"
    if isinstance(ret, list):
        return "list"
    if isinstance(ret, tuple):
        return type(ret).__name__ if hasattr(ret, "_fields") else "tuple"
    return type(ret).__name__


def _named_tuple_node(ret):
    """The named tuple an fx node builds (``Out(logits, aux)`` is traced as a call of the class): the
    tuple of its arguments, or None for any other node."""
    from torch import fx

    if (isinstance(ret, fx.Node) and ret.op == "call_function" and isinstance(ret.target, type)
            and issubclass(ret.target, tuple) and hasattr(ret.target, "_fields")):
        try:
            return ret.target(*ret.args, **ret.kwargs)
        except TypeError:
            return None
    return None


class ContextInputs:
    """The inputs of a model after its first (an attention mask, position ids), for a chain whose
    stages take the first one only: each stage that reads one gets it from here (:class:`_ContextInput`
    nodes, computed inside the stage as a model's buffers are), so the chain's stages, the executor
    and the profiler see a one-input model. ``values`` holds the example's until a step sets its own
    (``compile_under_budget``'s chain steps do, before each run). Like parameters, they are held by
    the caller through the whole step and are not the chain's memory: what a stage computes from them
    is its own. No gradient flows to them."""

    def __init__(self, values: Sequence) -> None:
        self.values = tuple(values)
        import torch

        # inputs that are not tensors (a flag, a count) were fixed at these values when the model was
        # traced: a step must bring the same ones
        self.constants = {i: v for i, v in enumerate(self.values) if not isinstance(v, torch.Tensor)}

    def __len__(self) -> int:
        return len(self.values)

    def set(self, values: Sequence) -> None:
        """The inputs of the next step; one that is not a tensor must equal the traced model's (a
        ``ValueError`` naming its position and both values: the chain was traced for that value)."""
        values = tuple(values)
        for i, v in self.constants.items():
            w = values[i] if i < len(values) else None
            if not (type(w) is type(v) and w == v):
                raise ValueError(f"input {i + 2} is {w!r}, and the chain was traced with {v!r} (an input that is "
                                 "not a tensor is a constant of the traced model): search again with it")
        self.values = values


def _context_module(holder: ContextInputs, i: int):
    import torch

    class _ContextInput(torch.nn.Module):
        """The model's input ``i + 2`` (the first is the chain's a^0), read from ``holder``."""

        def __init__(self):
            super().__init__()
            self.holder, self.i = holder, i

        def forward(self):
            return self.holder.values[self.i]

    return _ContextInput()


def _grad_mode_tracer():
    """A ``torch.fx.Tracer`` that records, on each node it creates, whether autograd was on
    (``node.meta["grad_enabled"]``): the model's own ``with torch.no_grad():`` blocks run while it
    traces, but fx records no grad mode in the graph."""
    import torch
    from torch import fx

    class _Tracer(fx.Tracer):
        grad_at_start = True

        def trace(self, root, concrete_args=None):
            self.grad_at_start = torch.is_grad_enabled()
            return super().trace(root, concrete_args)

        def create_node(self, *args, **kwargs):
            node = super().create_node(*args, **kwargs)
            node.meta["grad_enabled"] = torch.is_grad_enabled()
            node.meta["autocast"] = _autocast_state()
            return node

    return _Tracer()


def _autocast_state() -> tuple:
    """``torch.autocast``'s dtype on the CPU and CUDA (None where off), as a node records it."""
    from .runtime import autocast_dtype

    return tuple(autocast_dtype(kind) for kind in ("cpu", "cuda"))


def _check_autocast_regions(gm) -> None:
    """Refuse a model that switches ``torch.autocast`` inside its forward (``with
    torch.autocast("cuda", enabled=False):`` around a softmax): fx records no autocast state, so the
    stages would run those operations in the step's precision, not the model's."""
    first = None
    for node in gm.graph.nodes:
        st = node.meta.get("autocast")
        if st is None or node.op in ("placeholder", "output"):
            continue
        if first is None:
            first = st
        elif st != first:
            raise ValueError(f"capture: the model switches torch.autocast inside its forward (at node {node.name}), "
                             "which torch.fx does not record: its chain would run those operations in another "
                             "precision; move the autocast block out of the model, or train it without a chain")


def _detach_no_grad_regions(gm, grad_at_start: bool) -> int:
    """Where the model computed a value inside ``torch.no_grad()`` (a target network, a stop-gradient
    branch) and a node outside the block reads it, that node reads a ``detach()`` of it instead. The
    traced graph runs every operation with autograd on (fx records no grad mode): without this a
    stage's backward sent gradients into the block, to parameters eager autograd leaves without one
    and through the block's inputs (silently other gradients than the model's). Detached where it
    leaves the block, nothing reaches back into it: the same values and gradients as eager; the
    block's own operations record a graph that lives only until its outputs are read. Returns how many
    detaches were inserted."""
    if not grad_at_start:
        return 0
    count = 0
    for node in list(gm.graph.nodes):
        if node.op in ("placeholder", "output", "get_attr") or node.meta.get("grad_enabled", True):
            continue
        outside = [u for u in node.users if u.op == "output" or u.meta.get("grad_enabled", True)]
        if not outside:
            continue
        with gm.graph.inserting_after(node):
            d = gm.graph.call_method("detach", (node,))
        d.meta["grad_enabled"] = True
        for u in outside:
            u.replace_input_with(node, d)
        count += 1
    if count:
        gm.recompile()
    return count


#: fx targets that write their first argument (besides methods ``name_``, and ``operator.i*``)
_WRITES = frozenset({"setitem", "copy_", "fill_", "zero_", "index_put_"})


def _written(value, write):
    """``value`` after ``write`` (a node of the traced graph that wrote ``value``, or a view of it, in
    place): :func:`_order_writes` makes the graph's later readers of ``value`` read it through this, so
    that they depend on the write."""
    return value


def _writes(node, modules: dict) -> bool:
    """Whether an fx node writes its first argument in place: a method or function ``name_``, one of
    :data:`_WRITES`, ``operator.iadd`` and the like, ``inplace=True`` (``F.relu(x, inplace=True)``), or a
    module whose ``inplace`` is true (``nn.ReLU(inplace=True)``)."""
    import operator

    if node.op == "call_module":
        return getattr(modules.get(node.target), "inplace", False) is True
    if node.op not in ("call_method", "call_function"):
        return False
    if node.kwargs.get("inplace") is True:
        return True
    name = _target_name(node.target)
    return (name in _WRITES or (name.endswith("_") and not name.endswith("__"))
            or node.target in {getattr(operator, f"i{o}") for o in ("add", "sub", "mul", "truediv", "floordiv", "mod",
                                                                      "pow", "and", "or", "xor", "lshift", "rshift",
                                                                      "matmul")})


def _written_root(node, modules: dict):
    """The node whose value ``node`` is, through views, writes and :func:`_written`."""
    from torch import fx

    while (node.op in ("call_method", "call_function", "call_module") and node.args
           and isinstance(node.args[0], fx.Node)
           and (_writes(node, modules) or node.target is _written or _target_name(node.target) in VIEW_OPS)):
        node = node.args[0]
    return node


def _buffer_writes(gm) -> list[str]:
    """The targets of the buffers (or parameters) that a node of ``gm``'s graph writes in place: an
    in-place method or function (``add_``, ``copy_``, ``operator.iadd``, ``operator.setitem``) whose first
    argument is a ``get_attr``, directly or through views and other in-place results of one
    (``self.ema.mul_(0.9).add_(h.mean(0))``, ``self.buf[0] += 1``)."""
    from torch import fx

    modules = dict(gm.named_modules())
    written = []
    for node in gm.graph.nodes:
        if _writes(node, modules) and node.args and isinstance(node.args[0], fx.Node):
            r = _written_root(node.args[0], modules)
            if r.op == "get_attr" and str(r.target) not in written:
                written.append(str(r.target))
    return written


def _order_writes(gm) -> int:
    """Make the traced graph's in-place writes part of its data flow: the readers of a value after a
    node that wrote it in place (``k.mul_(0.5)`` whose result is not used, ``h[:, 0] = 0``,
    ``F.relu(h, inplace=True)``) read the write's result (or :func:`_written` of the value and the write)
    instead of the value. fx records the reads of ``k`` as reads of the node before the write: dead-code
    elimination then dropped the write, and a stage order could run a reader before it (silently
    other values and gradients than the model's). A view of the value taken before the write and read
    after it is refused (ValueError): nothing in the graph orders its reader after the write. Returns
    how many writes were ordered."""
    from torch import fx

    modules = dict(gm.named_modules())
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    latest: dict = {}                   # a written value's node -> the node its later readers read
    count = 0
    for n in nodes:
        if not (_writes(n, modules) and n.args and isinstance(n.args[0], fx.Node)):
            continue
        base = _written_root(n.args[0], modules)
        if base.op == "get_attr":
            continue                     # a buffer written in the forward: refused by _trace
        cur = latest.get(base, base)
        later = [u for u in cur.users if u is not n and pos.get(u, len(nodes)) > pos[n]]
        chain = set()                    # the views and writes from the value to n's argument
        a = n.args[0]
        while a is not base and a is not cur and isinstance(a, fx.Node) and a.args:
            chain.add(a)
            a = a.args[0]
        for v in (base, cur):
            for view in v.users:
                if (view in chain or view is n or pos.get(view, len(nodes)) > pos[n]
                        or _target_name(view.target) not in VIEW_OPS):
                    continue
                if any(pos.get(u, len(nodes)) > pos[n] for u in view.users):
                    raise ValueError(f"capture: node {n.name} writes {base.name} in place and {view.name}, a view "
                                     f"of it taken before, is read after it, which a chain cannot order; write "
                                     f"it out of place (e.g. x = x * 2 instead of x.mul_(2))")
        if not later:                    # nothing reads the value after the write
            continue
        if n.args[0] is cur and _target_name(n.target) != "setitem":
            new = n                       # it returns the value itself
        else:
            with gm.graph.inserting_after(n):
                new = gm.graph.call_function(_written, (cur, n))
            new.meta.update({k: v for k, v in n.meta.items() if k in ("grad_enabled", "autocast")})
        for u in later:
            u.replace_input_with(cur, new)
        latest[base] = new
        count += 1
    if count:
        gm.recompile()
    return count


def _python_draws() -> Callable[[], str]:
    """Python's and NumPy's random states now; the function returned puts them back and names the
    generator that was drawn from since ("" if none): the forward's Python code runs once during the
    trace, and a draw there (``if random.random() < p: continue``) becomes a constant of the graph."""
    import random
    import sys

    np = sys.modules.get("numpy")
    py, npst = random.getstate(), (np.random.get_state() if np is not None else None)

    def drawn() -> str:
        names = []
        if random.getstate() != py:
            random.setstate(py)
            names.append("Python's random module")
        if np is not None:
            now = np.random.get_state()
            if now[2] != npst[2] or now[1].tobytes() != npst[1].tobytes():
                np.random.set_state(npst)
                names.append("numpy.random")
        return " and ".join(names)
    return drawn


def _trace(model, n_given: int, constants: dict[int, Any] | None = None):
    """``torch.fx.symbolic_trace(model)`` with the forward's parameters after the ``n_given`` given
    inputs fixed at their defaults (``mask=None``: traced as a proxy, ``if mask is not None`` would take
    the masked branch), then removed from the graph; one without a default is refused. ``constants``:
    given inputs (by position) fixed at these values too (the values of a model's inputs that are not
    tensors: a loop count, a flag, which a proxy cannot stand for in Python's control flow)."""
    import inspect

    import torch
    from torch import fx

    fwd = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = [q for q in inspect.signature(fwd).parameters.values()
                  if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        params = []
    rest = params[n_given:]
    missing = [q.name for q in rest if q.default is inspect.Parameter.empty]
    if missing:
        raise ValueError(f"capture: the model's forward takes {len(params)} inputs and {n_given} were given: "
                         f"give {', '.join(missing)} too (those with a default may be left out)")
    fixed = {q.name: q.default for q in rest}
    fixed.update({params[j].name: v for j, v in (constants or {}).items() if j < len(params)})
    tracer = _grad_mode_tracer()
    state = ([(n, b, b._version, b.detach().clone()) for n, b in model.named_buffers()]
             if isinstance(model, torch.nn.Module) else [])
    drawn = _python_draws()
    try:
        graph = tracer.trace(model, concrete_args=fixed or None)
    finally:
        drawn = drawn()
    if drawn:
        raise ValueError(f"capture: the forward draws from {drawn}, which a traced chain fixes at one draw for "
                         f"every step (a layer drop); draw with torch (torch.rand), or train without a chain")
    written = [n for n, b, v, _ in state if b._version != v]
    if written:
        # the Python code of the forward ran on the real buffer during the trace (``self.count += 1``):
        # put it back, and refuse the model (the graph reads the buffer, it does not write it)
        with torch.no_grad():
            for _, b, _, value in state:
                b.copy_(value)
    del state
    gm = fx.GraphModule(tracer.root, graph, type(tracer.root).__name__)
    written += _buffer_writes(gm)
    if not written:
        _order_writes(gm)
    if written:
        raise ValueError(f"capture: the forward writes buffer {written[0]!r} in place, which chain stages do not "
                         "replay; move the update out of forward (torch.nn's layers, batch norm included, are fine)")
    _check_autocast_regions(gm)
    _detach_no_grad_regions(gm, tracer.grad_at_start)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]     # one per parameter, in order
    for ph, q in zip(placeholders, params):
        if q.name not in fixed:
            continue
        value = fixed[q.name]
        for user in list(ph.users):
            user.args = fx.node.map_arg(user.args, lambda a, ph=ph, value=value: value if a is ph else a)
            user.kwargs = fx.node.map_arg(user.kwargs, lambda a, ph=ph, value=value: value if a is ph else a)
        gm.graph.erase_node(ph)
    return gm


def capture(model, example_input, context: Sequence = ()) -> Captured:
    """Trace ``model`` with torch.fx, record tensor sizes on ``example_input``, build the DAG.

    The model must take one tensor and return one tensor, alone or inside a structure (a dict, a
    tuple, a named tuple or a list, beside constants: :class:`OutputStructure`, ``Captured.output``; the
    traced graph then returns the tensor alone). Its forward's inputs after the first are ``context``
    (their example values: :class:`ContextInputs`, ``Captured.context``, read inside the stages) or,
    where not given, their defaults. Parameters are shared with ``model``.
    """
    import torch
    from torch import fx
    from torch.fx.passes.shape_prop import ShapeProp

    context = tuple(context)
    # inputs that are not tensors are constants of the chain (ContextInputs.check guards them)
    tensors = [i for i, v in enumerate(context) if isinstance(v, torch.Tensor)]
    gm = _trace(model, 1 + len(context), {1 + i: v for i, v in enumerate(context) if i not in tensors})
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1 + len(tensors):
        raise ValueError(f"capture: the model must take exactly {1 + len(context)} input(s), it takes "
                         f"{len(placeholders) + len(context) - len(tensors)}")
    holder = ContextInputs(context) if context else None
    for i, ph in zip(tensors, placeholders[1:]):
        name = f"memplan_context_{i}"
        gm.add_submodule(name, _context_module(holder, i))
        with gm.graph.inserting_after(ph):
            node = gm.graph.call_module(name, ())
        ph.replace_all_uses_with(node)
        gm.graph.erase_node(ph)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    ret = out_node.args[0]
    # one forward pass to record shapes; it must leave no trace: RNG state and buffers (BatchNorm
    # running statistics) are put back as they were
    with torch.no_grad():
        rng = torch.get_rng_state()
        saved = {name: b.clone() for name, b in gm.named_buffers()}
        value = ShapeProp(gm).propagate(example_input)
        for name, b in gm.named_buffers():
            b.copy_(saved[name])
        torch.set_rng_state(rng)
    output = None
    built = _named_tuple_node(ret)
    if built is not None:
        ret = built
    if not isinstance(ret, fx.Node):
        # the tensor inside the structure; what else it holds is a constant of the example's shapes
        # (``x.shape[1]``, traced as a node, is an int on every input of this shape)
        found: list = []
        template = _template(ret, found, value)
        nodes = list(dict.fromkeys(found))
        kind = _kind(ret)
        if len(nodes) != 1:
            raise ValueError(f"capture: the model returns {len(nodes)} tensors (in a {kind}); a chain ends in "
                             "one tensor, the one the loss reads: return only it (e.g. switch off Inception's "
                             "auxiliary head)")
        ret = nodes[0]
        out_node.args = (ret,)
        gm.graph.eliminate_dead_code()         # a named tuple's construction, the shape reads, now unused
        gm.recompile()
        output = OutputStructure(template, kind)
    source = placeholders[0]
    dependent: set[fx.Node] = {source}
    for n in gm.graph.nodes:
        if n.op not in ("placeholder", "output") and any(a in dependent for a in n.all_input_nodes):
            dependent.add(n)
    free = {n.name for n in gm.graph.nodes if n not in dependent and n.op != "output"}
    modules = dict(gm.named_modules())
    G = nx.DiGraph()
    for n in gm.graph.nodes:
        if n not in dependent:
            continue
        params = []
        if n.op == "call_module":
            params = list(modules[n.target].parameters())
        for a in n.all_input_nodes:
            if a.op == "get_attr":
                obj = gm
                for part in str(a.target).split("."):
                    obj = getattr(obj, part)
                if isinstance(obj, torch.nn.Parameter):
                    params.append(obj)
        wbytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in params}.values())
        G.add_node(n.name, op=n.op, target=str(n.target), out_bytes=_tensor_bytes(n.meta.get("tensor_meta")),
                   weight_bytes=wbytes)
        for a in n.all_input_nodes:
            if a in dependent:
                G.add_edge(a.name, n.name)
    return Captured(gm=gm, graph=G, source=source.name, sink=ret.name, free=free, output=output, context=holder)


def _copier(cap: Captured, graph, env: dict, refusal: Callable) -> Callable:
    """The argument mapping of ``graph.node_copy`` while building one stage: a node already in
    ``env`` (a placeholder or a copied node) maps to its copy; a node that does not depend on the
    input (``cap.free``: ``get_attr``, constants) is copied into the stage on first use; any other
    node crosses the stage's boundary, and ``ValueError(refusal(node))`` is raised."""
    def lookup(a):
        if a not in env:
            if a.name not in cap.free:
                raise ValueError(refusal(a))
            env[a] = graph.node_copy(a, lookup)
        return env[a]
    return lookup


def _stage_module(root, graph):
    """The GraphModule of one stage, its modules and attributes under flat names (``layer1_0_conv1``
    for ``layer1.0.conv1``): the same objects (parameters shared with the traced model), reached in
    the generated code by one attribute lookup instead of a chain (``getattr(self.layer1, "0").conv1``
    costs two ``nn.Module.__getattr__`` calls more per operation, about 0.5 us on the CPU of the tests:
    every microsecond of host time is step time on a GPU whose host paces the step)."""
    from torch import fx

    flat: dict[str, Any] = {}
    names: dict[str, str] = {}
    for n in graph.nodes:
        if n.op in ("call_module", "get_attr") and "." in n.target:
            if n.target not in names:
                name = base = n.target.replace(".", "_")
                k = 1
                while name in flat or hasattr(root, name):
                    name, k = f"{base}_{k}", k + 1
                names[n.target] = name
                obj = root
                for part in n.target.split("."):
                    obj = getattr(obj, part)
                flat[name] = obj
            n.target = names[n.target]
        elif n.op in ("call_module", "get_attr"):
            flat.setdefault(n.target, getattr(root, n.target))
    return fx.GraphModule(flat, graph, class_name="Stage")


def stage_modules(cap: Captured, groups: Sequence[Sequence[str]] | None = None) -> list:
    """One fx GraphModule per group: it takes a^{l-1} (the previous separator's value, or the model
    input) and returns a^l (the group's last node). Parameters are shared with the traced model, so
    running the stages one after the other computes the model and fills the same ``.grad`` fields.
    Nodes that do not depend on the input (``get_attr``, constants) are copied into each stage that
    reads them.
    """
    from torch import fx

    groups = cap.groups() if groups is None else groups
    nodes = {n.name: n for n in cap.gm.graph.nodes}
    stages = []
    prev = cap.source
    for g in groups:
        graph = fx.Graph()
        env: dict[fx.Node, fx.Node] = {nodes[prev]: graph.placeholder("x")}

        lookup = _copier(cap, graph, env, lambda a: f"stage_modules: node {a.name} crosses a stage boundary; "
                         "the groups are not a chain partition of the graph")

        for name in g:
            n = nodes[name]
            env[n] = graph.node_copy(n, lookup)
        graph.output(env[nodes[g[-1]]])
        stages.append(_stage_module(cap.gm, graph))
        prev = g[-1]
    return stages



def multi_stage_modules(cap: Captured, groups: Sequence[Sequence[str]], res: Residency,
                        free: Iterable[Hashable] = (), kept: Iterable[Hashable] = ()) -> list:
    """One fx GraphModule per group of a multi-tensor linearization: stage l takes the tensors of
    a^{l-1} (``res.boundary[l-1]``) then the resident tensors it reads (``res.reads[l-1]``) as
    separate arguments, and returns the tuple of a^l's tensors (``res.boundary[l]``) followed by the
    resident tensors it computes (``res.writes[l-1]``). Each module carries ``resident_in`` and
    ``resident_out`` (those names) for the executor and the profiler (:func:`models.runtime.execute`).
    Parameters are shared with the traced model; input-free nodes are copied as in
    :func:`stage_modules`. ``free`` and ``kept`` (:func:`resident_lifetimes`): resident tensors the executor
    lets go after their last forward reader, and those it keeps until their producer's backward that
    share their storage with no other tensor; each module carries those it computes as
    ``resident_free`` and ``resident_kept`` (the profiler records their lifetimes,
    :attr:`models.chain.Chain.resident_values`)."""
    from torch import fx

    from .resident import resident_use

    free, kept = set(free), set(kept)
    nodes = {n.name: n for n in cap.gm.graph.nodes}
    stages = []
    for l, g in enumerate(groups, start=1):
        graph = fx.Graph()
        ins = list(res.boundary[l - 1]) + list(res.reads[l - 1])
        env: dict[fx.Node, fx.Node] = {nodes[v]: graph.placeholder(f"in{i}") for i, v in enumerate(ins)}

        lookup = _copier(cap, graph, env, lambda a, l=l: f"multi_stage_modules: node {a.name} is read by stage "
                         f"{l} but is neither in a^{{l-1}} nor resident")

        resident_ph = {env[nodes[v]] for v in res.reads[l - 1]}
        for name in g:
            node = nodes[name]
            # every occurrence of a resident input in the node's arguments goes through its own
            # resident_use call, created last-occurrence first: the engine then reaches them in the
            # order autograd delivers the node's input gradients (models.resident)
            occ: list = []
            fx.node.map_arg((node.args, node.kwargs), lambda a: occ.append(a) or a)
            uses = [a for a in occ if env.get(a) in resident_ph]
            taps = [graph.call_function(resident_use, (env[a],)) for a in reversed(uses)][::-1]

            def use(a: fx.Node) -> fx.Node:
                return taps.pop(0) if env.get(a) in resident_ph else lookup(a)

            env[node] = graph.node_copy(node, use)
        outs = list(res.boundary[l]) + list(res.writes[l - 1])
        graph.output(tuple(env[nodes[v]] for v in outs))
        mod = _stage_module(cap.gm, graph)
        mod.resident_in = list(res.reads[l - 1])
        mod.resident_out = list(res.writes[l - 1])
        mod.resident_free = [v for v in res.writes[l - 1] if v in free]
        mod.resident_kept = [v for v in res.writes[l - 1] if v in kept]
        stages.append(mod)
    return stages


def resident_lifetimes(res: Residency, saved: set, storages: dict, source: Hashable) -> tuple[set, set]:
    """``(free, kept)``: the resident tensors of ``res`` whose storage no other node of the graph
    shares (no view, alias or in-place result of them; ``storages``, :func:`saved_and_storages`), the
    input aside (its caller holds it), split by whether a backward saves them (``saved``).

    ``free``: no backward keeps them. Plain autograd frees such a tensor once its last reader's forward
    has run (a NASNet cell's output, read by the next two cells' ReLUs, which save their own outputs);
    so does the executor, which keeps only its gradient for the producer's backward
    (:func:`models.runtime.execute`). ``kept``: the executor holds them from their producer's first
    forward to the end of its backward, and nothing else holds their storage longer. The chain
    charges both only while they live (:attr:`models.chain.Chain.resident_values`); a tensor sharing
    its storage (a batch norm's output that an in-place ReLU overwrites and hands on) stays charged for
    the whole step: one storage held under two names, whose lifetime the chain does not follow. O(V)."""
    count: dict = {}
    for key in storages.values():
        count[key] = count.get(key, 0) + 1
    own = {v for v in res.resident if v != source and v in storages and count[storages[v]] == 1}
    return {v for v in own if v not in saved}, {v for v in own if v in saved}


def group_name(cap: Captured, group: Sequence[str]) -> str:
    """A readable stage name: the longest common module path of the group's module calls
    (``layer1.0`` for a residual block), else the separator's fx name."""
    targets = [cap.graph.nodes[n]["target"].split(".") for n in group
               if cap.graph.nodes[n]["op"] == "call_module"]
    if targets:
        common = []
        for parts in zip(*targets):
            if len(set(parts)) != 1:
                break
            common.append(parts[0])
        if common and (len(targets) > 1 or len(group) == 1):
            return ".".join(common)
        if len(group) == 1:
            return ".".join(targets[0])
    return str(group[-1])


class HeadLoss:
    """The loss stage L+1 of a chain whose last group was folded into it (see :func:`linearize_model`):
    ``loss_fn(head(x))``. An ``nn.Module`` (built by :func:`_head_loss`) so that the head's parameters
    are the stage's parameters for the profiler (``W^{L+1}``) and for the executor."""


def _head_loss(head, loss_fn):
    import torch

    class _HeadLoss(torch.nn.Module, HeadLoss):
        def __init__(self):
            super().__init__()
            self.head = head
            self.loss_fn = loss_fn if isinstance(loss_fn, torch.nn.Module) else None
            self._loss = loss_fn

        def forward(self, x):
            return self._loss(self.head(x))

    return _HeadLoss()


@contextmanager
def _probe_run(cap: Captured, example_input, keep_grads: bool = False):
    """A probing run of the traced model (:func:`saved_outputs`, :func:`strided_gradients`): yields a
    detached copy of ``example_input`` (requiring grad when it is a float tensor) with autograd on,
    then puts back the model's RNG state and buffers (batch norm's running statistics) and, with
    ``keep_grads``, its parameters' gradients, whatever the run did."""
    import torch

    x = example_input.detach()
    if x.is_floating_point():
        x.requires_grad_(True)
    rng = torch.get_rng_state()
    buffers = {name: b.clone() for name, b in cap.gm.named_buffers()}
    grads = {name: p.grad for name, p in cap.gm.named_parameters()} if keep_grads else None
    try:
        with torch.enable_grad():
            yield x
    finally:
        with torch.no_grad():
            for name, b in cap.gm.named_buffers():
                b.copy_(buffers[name])
        if grads is not None:
            for name, p in cap.gm.named_parameters():
                p.grad = grads[name]
        torch.set_rng_state(rng)


def saved_outputs(cap: Captured, example_input, loss_fn: Callable | None = None) -> set[str]:
    """Names of the DAG's nodes whose output storage autograd saves for the backward pass, in one
    forward of the traced model (and of ``loss_fn`` on its output) with saved-tensor hooks
    (:func:`saved_and_storages`, without the storages)."""
    return saved_and_storages(cap, example_input, loss_fn)[0]


def saved_and_storages(cap: Captured, example_input,
                       loss_fn: Callable | None = None) -> tuple[set[str], dict[str, int]]:
    """(:func:`saved_outputs`, ``{node: key of its output's storage}`` for the nodes whose output is a
    tensor), from one forward of the traced model (and of ``loss_fn`` on its output) with saved-tensor
    hooks. Two nodes with one key share a storage: a view, an operation that returns its input
    (dropout with p = 0 in training, an identity), an in-place one.

    Every node's output is kept alive until the end of the run (an ``fx.Interpreter`` that does not
    free values), so storage addresses are unique among the tensors compared; a saved tensor is matched
    to a node by its storage (a view saved by a later operation, e.g. a flattened feature map saved by
    a linear layer, counts for the node that created the storage). The model's RNG state and buffers
    (batch-norm running statistics) are put back as they were, as :func:`capture` does. Cost: one
    forward with autograd recording, every intermediate output kept (store-all's memory)."""
    import torch
    from torch import fx

    from .memory import _key, saved_storages

    outs: dict[str, Any] = {}

    class _Keep(fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            outs[n.name] = out
            return out

    with _probe_run(cap, example_input) as x:
        def step():
            y = _Keep(cap.gm, garbage_collect_values=False).run(x)
            return y if loss_fn is None else (y, loss_fn(y))

        _, saved = saved_storages(step)
    result = set()
    storages = {}
    for name, out in outs.items():
        if name in cap.graph and isinstance(out, torch.Tensor):
            storages[name] = _key(out)
            if storages[name] in saved:
                result.add(name)
    return result, storages


def written_in_place(cap: Captured) -> set[str]:
    """Names of the DAG's nodes whose output a later node writes in place (``F.relu(h, inplace=True)``,
    ``h.mul_(2)``, ``h[:, 0] = 0``), and the views through which it is written. :func:`linearize_model`
    keeps them inside a stage (``inside`` of :func:`multi_cut_groups`), as ``cuts="saved"`` merges a
    cut whose tensor the next stage hands on in place (:func:`merge_unsaved_cuts`' ``storages``): a
    stage's input is a leaf (an F_all's input with a gradient, or a resident tensor), which an
    in-place write refuses (every multi-cut U-Net with ``nn.ReLU(inplace=True)`` raised in
    ``profile_chain``), and a no-grad forward would overwrite the a^{l-1} its recomputation reads.
    The graph's input (held by the caller) is not included."""
    from torch import fx

    modules = dict(cap.gm.named_modules())
    out: set[str] = set()
    for n in cap.gm.graph.nodes:
        if not (_writes(n, modules) and n.args and isinstance(n.args[0], fx.Node)):
            continue
        a = n.args[0]
        while True:
            if a.name in cap.graph and a.name != cap.source:
                out.add(a.name)
            if not (a.op in ("call_method", "call_function", "call_module") and a.args
                    and isinstance(a.args[0], fx.Node)
                    and (_writes(a, modules) or a.target is _written or _target_name(a.target) in VIEW_OPS)):
                break
            a = a.args[0]
    return out


def strided_gradients(cap: Captured, example_input, loss_fn: Callable | None = None) -> set[str]:
    """Names of the DAG's nodes whose output gets, in one backward of the traced model (and of
    ``loss_fn`` on its output), a gradient whose strides differ from the output's own (dimensions of
    size 1 aside): a slice of a concatenation's gradient (NASNet's cell states, read by the cell's
    ``cat`` only), a transposed view. Autograd hands such a gradient to the producer's backward as it
    is; an executor holding the gradient across a cut holds a copy laid out as the value (a leaf's
    ``.grad``, :mod:`models.resident`), and some CPU kernels sum in another order on another layout
    (batch norm's backward: 1e-6 apart on a 16-channel slice). :func:`linearize_model` keeps these
    tensors inside a stage (``inside`` of :func:`multi_cut_groups`), so that the executed gradients
    stay bit-identical to autograd's. Cost: one forward and backward, every output kept; the model's
    RNG state, buffers and parameter gradients are put back."""
    import torch
    from torch import fx

    outs: dict[str, Any] = {}
    hooked: dict[str, Any] = {}

    class _Keep(fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n.name in cap.graph and isinstance(out, torch.Tensor) and out.requires_grad:
                outs[n.name] = out

                def hook(g, name=n.name):
                    hooked[name] = g.stride(), g.shape
                out.register_hook(hook)
            return out

    with _probe_run(cap, example_input, keep_grads=True) as x:
        y = _Keep(cap.gm, garbage_collect_values=False).run(x)
        (loss_fn or _cross_entropy)(y).backward()

    def strides(shape, stride) -> tuple:
        return tuple(st for d, st in zip(shape, stride) if d != 1)

    result = set()
    for name, (stride, shape) in hooked.items():
        want = torch.empty_like(outs[name]).stride()     # a copy laid out as the value (preserve_format)
        if strides(shape, stride) != strides(shape, want):
            result.add(name)
    return result


def merge_unsaved_cuts(groups: Sequence[Sequence[Hashable]], saved: set,
                       storages: dict | None = None) -> tuple[list[list[Hashable]], list[Hashable]]:
    """Coarsen the minimal groups so that every boundary tensor is one autograd keeps anyway.

    The runtime executor (:mod:`models.runtime`) and the chain model keep a^l, the output of stage l,
    as part of abar^l until B^l (paper 004, Table 1). Plain autograd keeps a tensor only where a
    backward formula saved it: a batch norm's output that a ReLU reads, a residual sum before its
    ReLU, the logits read by a cross-entropy are freed as soon as the next operation has run. A cut
    at such a tensor makes every executed plan hold it in vain (ResNet-50: +28% over plain autograd).
    So group l is merged into group l+1 wherever its last node (the separator whose output is a^l) is
    not in ``saved`` (:func:`saved_outputs`); after the merge each a^l is saved by stage l or stage
    l+1, and holding it costs the executor nothing that autograd would not hold.

    ``storages`` (``{separator: storage key}``, :func:`saved_and_storages`): group l is also merged
    into the stage after it where its separator's output shares one storage with that stage's output
    (the stage would return its input: GPT-2's embedding dropout with p = 0, which returns its input
    tensor in training; a flatten's view; an in-place operation). The model counts a^l and a^{l+1}
    apart where the executor holds one storage (a GPT-2 chain's store-all replay was one activation,
    32 KB of 2 MB, above the measured peak), and a recomputation of an in-place stage would read its
    input overwritten. The cuts are decided from the right, each against the next cut kept; not against
    a last group folded into the loss (the loss stage's sizes are measured as a whole).

    The last group's output a^L is read by the loss only. Where neither the last group nor the loss
    saves it, the last group is returned apart as the ``head``: it is folded into the loss stage L+1
    (:class:`HeadLoss`), whose input a^{L-1} is then saved (a classifier's features, the input of a
    language model's head). With a single group nothing is folded. O(number of groups).

    Returns ``(groups, head)``; ``head`` is empty when nothing is folded.

    >>> merge_unsaved_cuts([["conv"], ["bn"], ["relu"], ["fc"]], saved={"conv", "relu"})
    ([['conv'], ['bn', 'relu']], ['fc'])
    >>> merge_unsaved_cuts([["conv"], ["pool"], ["flatten"], ["fc"]], saved={"conv", "pool", "flatten"},
    ...                    storages={"conv": 1, "pool": 2, "flatten": 2, "fc": 3})
    ([['conv'], ['pool', 'flatten']], ['fc'])
    """
    # which cuts stay, from the right: a saved separator whose storage is not the next stage's output
    # (the next kept cut's separator; the last group's, unless it is folded into the loss)
    n = len(groups)
    keep = [False] * n
    last = groups[-1][-1] if groups else None
    nxt = storages.get(last) if storages and last in saved else None
    for l in range(n - 2, -1, -1):
        sep = groups[l][-1]
        s = storages.get(sep) if storages else None
        keep[l] = sep in saved and (s is None or s != nxt)
        if keep[l]:
            nxt = s
    out: list[list[Hashable]] = []
    current: list[Hashable] = []
    for l, g in enumerate(groups):
        current = current + list(g)
        if l == n - 1 or keep[l]:
            out.append(current)
            current = []
    head: list[Hashable] = []
    if len(out) > 1 and out[-1][-1] not in saved:
        head = out.pop()
    return out, head


@dataclass
class LinearizedModel:
    """A model cut into chain stages: ``stages[l-1]`` computes a^l from a^{l-1}; ``head`` (or None) is
    the last group when it is folded into the loss stage (:func:`merge_unsaved_cuts`)."""

    captured: Captured
    groups: list[list[str]]
    stages: list
    names: list[str]
    head: Any = None
    head_group: list[str] = field(default_factory=list)
    cuts: str = "saved"
    residency: Residency | None = None        # multi-tensor cuts: what crosses each cut

    @property
    def resident_input(self) -> bool:
        """Whether the network input itself crosses two or more cuts (then a^0 is empty)."""
        return self.residency is not None and self.captured.source in self.residency.producer

    @property
    def L(self) -> int:
        return len(self.stages)

    def loss_stage(self, loss_fn: Callable, chunks: int = 1, targets: Callable[[], tuple] | None = None,
                   backend: str | None = None, tag: str = "") -> Callable:
        """Stage L+1 of the chain: ``loss_fn`` itself, or ``loss_fn`` after the folded head. ``chunks`` > 1:
        the head and the loss over that many slices of the tokens
        (:class:`models.chunked_loss.ChunkedHeadLoss`; ``loss_fn`` a :class:`models.chunked_loss.TokenLoss`,
        ``targets`` returns its targets of the step; ``backend``: each chunk's head and loss compiled
        by ``torch.compile`` with it)."""
        out = self.captured.output
        if chunks != 1:
            if self.head is None:
                raise ValueError("linearize_model: no head is folded into the loss: there is nothing to chunk")
            if out is not None:
                raise ValueError(f"linearize_model: the model returns its output in a {out.kind}: a loss over "
                                 "chunks of tokens takes the logits tensor itself")
            from .chunked_loss import ChunkedHeadLoss

            return ChunkedHeadLoss(self.head, loss_fn, chunks, targets, backend=backend, tag=tag)
        if out is not None:          # the user's loss reads the model's structure around the last tensor
            loss_fn = out.loss(loss_fn)
        return loss_fn if self.head is None else _head_loss(self.head, loss_fn)

    @property
    def loss_name(self) -> str:
        return "loss" if self.head is None else f"{group_name(self.captured, self.head_group)}+loss"

    def fold_frozen_prefix(self) -> "LinearizedModel":
        """The chain with its frozen first stages (no parameter that requires grad:
        :func:`models.runtime.frozen_prefix`) folded into the first trained one, for a step that asks no
        gradient of the network input (``execute(..., input_grad=False)``, as
        :func:`memplan.compile_under_budget` runs it). Nothing needs a gradient below the first trained
        stage, so plain autograd records no graph there and frees each frozen activation once the next
        layer has read it; as stages of their own, each a^l would be held until its (empty) B^l, the
        chain's and the executor's model (a 6-block MLP with 4 blocks frozen: store-all 1.48x autograd's
        peak, predicted and measured alike). Folded, the first stage's forward runs the frozen layers
        without a graph, their activations transient (its o_f), and rotor can still recompute it.
        Unchanged without a frozen prefix, and for multi-tensor cuts."""
        from .runtime import frozen_prefix

        k = frozen_prefix(self.stages)
        if self.residency is not None or k == 0 or self.L < 2:
            return self
        k = min(k, self.L - 1)              # every stage frozen (a trained head in the loss): one stage
        groups = [[n for g in self.groups[:k + 1] for n in g]] + [list(g) for g in self.groups[k + 1:]]
        mods = stage_modules(self.captured, groups + ([self.head_group] if self.head_group else []))
        stages = mods[:len(groups)]
        names = _unique_names([group_name(self.captured, g) for g in groups])
        return LinearizedModel(self.captured, groups, stages, names, head=self.head, head_group=list(self.head_group),
                               cuts=self.cuts, residency=None)

    def __call__(self, x):
        if self.residency is not None:
            res = self.residency
            store = {self.captured.source: x}
            a = () if self.resident_input else (x,)
            for l, s in enumerate(self.stages, start=1):
                out = s(*a, *[store[v] for v in res.reads[l - 1]])
                nb = len(res.boundary[l])
                store.update(zip(res.writes[l - 1], out[nb:]))
                a = tuple(out[:nb])
            y = a[0] if self.head is None else self.head(a[0])
        else:
            for s in self.stages:
                x = s(x)
            y = x if self.head is None else self.head(x)
        return y if self.captured.output is None else self.captured.output(y)


def _FirstOutput(mod):
    """``mod``'s first output alone (a folded head of a multi-tensor linearization returns a tuple)."""
    import torch

    class _First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mod = mod

        def forward(self, x):
            return self.mod(x)[0]

    return _First()


#: cuts="auto" switches to multi-tensor cuts below one single-tensor stage per this many operations
#: (models.cut_report.STAGE_RATIO, the threshold of its warning)
STAGE_RATIO_AUTO = 10


def coarse_single_cuts(groups: Sequence[Sequence[Hashable]], counted: Iterable[Hashable]) -> str | None:
    """Why the single-tensor groups ``groups`` of a network are too coarse to plan on, or None: fewer
    than one group per :data:`STAGE_RATIO_AUTO` counted operations (the graphs whose every other
    cut several tensors cross: NASNet's cells, an encoder-decoder's attention), or one group holding
    more than half of the counted operations, and more than :data:`STAGE_RATIO_AUTO` of them (a long
    skip spanning most of the network: U-Net's encoder feature maps, read by the decoder). The
    second rule leaves every earlier zoo network alone: their largest single-tensor group holds at
    most 17% of their operations (ResNets 2-12%, DenseNets 1-2%, Inception v3 10%, VGG 3%, GPT-2 6%,
    LLaMA 17%), U-Net's 63-79%. O(V)."""
    counted = set(counted)
    n = len(counted)
    sizes = [sum(1 for v in g if v in counted) for g in groups]
    if STAGE_RATIO_AUTO * len(groups) < n:
        return f"{len(groups)} single-tensor stage(s) for {n} operations, fewer than one per {STAGE_RATIO_AUTO}"
    big = max(sizes, default=0)
    if 2 * big > n and big > STAGE_RATIO_AUTO:
        return f"one single-tensor stage holds {big} of the {n} operations"
    return None


def _unique_names(raw: Sequence[str]) -> list[str]:
    names: list[str] = []
    for name in raw:
        k = 2
        while (name if k == 2 else f"{name}#{k - 1}") in names:
            k += 1
        names.append(name if k == 2 else f"{name}#{k - 1}")
    return names


def _cross_entropy(logits):
    """The loss :func:`linearize_model` assumes when given none: cross-entropy over the last dimension
    (what it saves does not depend on the labels, so they are all 0)."""
    import torch

    flat = logits.reshape(-1, logits.shape[-1])
    return torch.nn.functional.cross_entropy(flat, torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device))


#: cut rules of :func:`linearize_model`
CUTS = ("saved", "minimal", "multi", "auto")
#: the most counted operations in a stage of a multi-tensor linearization (``cuts="multi"``)
MULTI_MAX_NODES = 6


def linearize_model(model, example_input, loss_fn: Callable | None = None, *, cuts: str = "saved",
                    groups: Sequence[Sequence[str]] | None = None,
                    head_group: Sequence[str] | None = None, max_nodes: int = MULTI_MAX_NODES,
                    context: Sequence = ()) -> LinearizedModel:
    """Trace, linearize and cut ``model`` (see :func:`capture`, :func:`linearize`, :func:`stage_modules`).

    ``cuts``: ``"saved"`` (default) cuts only where autograd keeps the boundary tensor anyway, and not
    where the next cut's tensor is the same storage (a flatten's view, a dropout of rate 0), and folds
    an unsaved last group into the loss (:func:`merge_unsaved_cuts`, decided on one forward of
    ``example_input`` through the model and ``loss_fn``; a cross-entropy by default);
    ``"minimal"`` keeps the minimal single-tensor groups of :func:`linearize`; ``"multi"`` cuts
    where several tensors may cross (:func:`multi_cut_groups` with at most ``max_nodes`` counted
    operations per stage, :func:`residency`, :func:`multi_stage_modules`; no head is folded);
    ``"auto"`` is ``"saved"``, or ``"multi"`` where the single-tensor groups are too coarse
    (:func:`coarse_single_cuts`: fewer than one per ten counted operations, the networks
    :mod:`models.cut_report` warns about, or one of them holding most of the network, U-Net). ``groups`` and
    ``head_group`` (an instance's recorded ``groups`` and ``loss_group``) rebuild given stages instead.
    ``context``: the model's inputs after ``example_input`` (read inside the stages, :class:`ContextInputs`:
    set ``lm.captured.context.values`` before a step with other ones).
    Use ``lm.stages`` and ``lm.loss_stage(loss_fn)`` as the chain's stages 1..L and L+1."""
    if cuts not in CUTS:
        raise ValueError(f"linearize_model: cuts={cuts!r}; choose from {', '.join(CUTS)}")
    given = groups is not None
    cap = capture(model, example_input, context)
    if cap.output is not None and loss_fn is not None:
        loss_fn = cap.output.loss(loss_fn)          # the user's loss reads the model's structure
    head: list[str] = list(head_group or [])
    if cuts == "auto":
        cuts = "multi" if coarse_single_cuts(cap.groups(), counted_operations(cap.graph)) else "saved"
    if cuts == "multi":
        saved, storages = saved_and_storages(cap, example_input, loss_fn or _cross_entropy)
        if given and head:          # an instance's recorded groups: its loss group is folded again
            groups = [list(g) for g in groups] + [list(head)]
        if groups is None:
            # the head cuts="saved" folds into the loss (after the last single-tensor cut whose tensor
            # autograd saves: U-Net's 1x1 convolution and permute) is cut off first, so that the
            # multi cuts do not fold a whole stage of full-resolution layers into the loss
            _, tail = merge_unsaved_cuts(cap.groups(), saved)
            G = cap.graph.subgraph([v for v in cap.graph if v not in set(tail)]) if tail else cap.graph
            groups = multi_cut_groups(G, max_nodes=max_nodes, counted=counted_operations(G),
                                      inside=(strided_gradients(cap, example_input, loss_fn)
                                              | written_in_place(cap)),
                                      # the input is held by the caller in any case
                                      unsaved=set(G) - saved - {cap.source})
            groups = groups + ([list(tail)] if tail else [])
        groups = [list(g) for g in groups]
        res = residency(cap.graph, groups, cap.source)
        head_mod = None
        if (given and head) or (not given and len(groups) > 1 and len(res.boundary[-2]) == 1 and not res.reads[-1]
                                and groups[-1][-1] not in saved):
            if len(res.boundary[-2]) != 1 or res.reads[-1]:
                raise ValueError("linearize_model: the given loss group does not start at a single-tensor cut")
            # as merge_unsaved_cuts: the loss does not save a^L, so the last group is folded into it
            # (also keeps the gradient reaching a^L in autograd's layout: bit-identical gradients)
            head = groups.pop()
            last = Residency([res.boundary[-2], [head[-1]]], [], {}, [[]], [[]])
            head_mod = _FirstOutput(multi_stage_modules(cap, [head], last)[0])
            res = Residency(res.boundary[:-1], res.resident, res.producer, res.reads[:-1], res.writes[:-1],
                            _last=res._last)
        names = _unique_names([group_name(cap, g) for g in groups])
        free, kept = resident_lifetimes(res, saved, storages, cap.source)
        return LinearizedModel(cap, groups, multi_stage_modules(cap, groups, res, free, kept), names, head=head_mod,
                               head_group=head, cuts="given" if given else "multi", residency=res)
    if groups is not None:
        groups = [list(g) for g in groups]
        if not is_chain_partition(cap.graph, groups + ([head] if head else [])):
            raise ValueError("linearize_model: the given groups are not a chain partition of the model's graph")
    else:
        groups = cap.groups()
        if cuts == "saved":
            groups, head = merge_unsaved_cuts(groups, *saved_and_storages(cap, example_input, loss_fn or _cross_entropy))
    names = _unique_names([group_name(cap, g) for g in groups])
    mods = stage_modules(cap, groups + ([head] if head else []))
    stages, head_mod = (mods[:-1], mods[-1]) if head else (mods, None)
    return LinearizedModel(cap, groups, stages, names, head=head_mod, head_group=head,
                           cuts="given" if given else cuts)


def group_costs(G: nx.DiGraph, groups: Sequence[Sequence[Hashable]], attrs: Iterable[str]) -> list[dict]:
    """Per-group sums of node attributes (missing attributes count 0), plus ``last`` (the separator)."""
    attrs = list(attrs)
    out = []
    for g in groups:
        row = {a: float(sum(G.nodes[n].get(a, 0.0) or 0.0 for n in g)) for a in attrs}
        row["last"] = g[-1]
        out.append(row)
    return out
