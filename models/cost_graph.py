"""Cost graphs: a network's DAG with per-node costs, and the chain of any sequence of its groups.

PipeDream's planner (paper 003 section 5; Narayanan et al., SOSP 2019) reads the network as a DAG
of profiled layers, not as a chain, and cuts it at *antichains*: sets of layers that several tensors
leave at once (:mod:`memplan.baselines.pipeline_dag`). Whatever it chooses has to be judged by
memplan's simulators, which replay chains; and the ILP of the pipeline problem plans chains too. A
:class:`CostGraph` is what both sides share: the DAG with the costs of its nodes, the chain C0 the
network is normally planned on (``base_groups``) and the units the planner moves (``atoms``); and
:func:`chain_of` turns any sequence of groups of it (a topological order cut into stages) into a
:class:`~memplan.models.chain.Chain` with the same rules, so that chains of different cuts of the
same network are comparable.

The rules of :func:`chain_of` are those of PipeDream's importer for multi-tensor cuts
(:func:`memplan.models.pipedream.import_graph`, ``cuts="multi"``; issue 30), read off the node
attributes (missing ones count 0):

- ``u_f^l``, ``u_b^l``, ``W^l``: sums of the group's ``uf``, ``ub``, ``weight_bytes``;
- what crosses the cuts comes from :func:`models.graph.residency`: a tensor crossing one cut is part
  of ``omega_a^l`` = ``omega_delta^l``; one crossing two or more is *resident*, charged once as
  ``Chain.resident`` (its bytes, twice when it has a gradient: every resident tensor but the input
  and those not in ``grad``) and where it lives in the provenance's ``resident`` list (which the
  pipeline's memory model reads, :func:`models.pipeline.resident_spans`);
- ``omega_abar^l``: the group's ``stored_bytes`` (default ``out_bytes``) over its non-resident
  nodes, where a node crossing a cut counts its whole ``out_bytes`` (``abar^l`` holds ``a^l``);
  ``stored_bytes`` lets a traced graph say that a view keeps nothing of its own;
- ``o_f = o_b = 0``; the loss stage L+1 takes ``loss`` (keys of ``Chain.from_stages``' ``loss``).

Sizes and times are multiplied by ``scale`` (PipeDream's batch rescaling), weights are not.

:func:`refine` gives the chain of a partition into stages chosen elsewhere: the base chain's groups
cut again at the stages' boundaries, so that a partition that is contiguous on C0 gives C0 itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Sequence

import networkx as nx

from .chain import Chain
from .cut_report import multi_cut_tensors
from .graph import residency


@dataclass
class CostGraph:
    """A DAG with per-node costs (see the module docstring), single source and single sink.

    ``H``: the DAG; ``source``: its single source, a^0 (in no group); ``sink``: its single sink
    (``virtual_sink``: a zero-cost node joining several real sinks, alone in the last base group);
    ``base_groups``: the groups of the chain C0 (every node but the source, in a topological order
    cut into stages); ``atoms``: the units a planner moves (default: one per node), each inside one
    base group; ``scale``: factor on times and sizes; ``loss``: the loss stage's costs; ``grad``:
    the nodes whose output has a gradient (default: all but the source); ``names``: a stage name
    from a group (default ``first..last``); ``provenance``: copied into every chain; ``chains``: other
    linearizations of the same network whose PipeDream points :func:`memplan.pipeline.solve_graph`
    also compares (a PipeDream profile's single-tensor chain, :func:`models.pipedream.cost_graph`)."""

    H: nx.DiGraph
    source: Hashable
    sink: Hashable
    base_groups: list[list[Hashable]]
    atoms: list[list[Hashable]] | None = None
    scale: float = 1.0
    virtual_sink: bool = False
    loss: dict[str, float] | None = None
    grad: set | None = None
    names: Callable[[list], str] | None = None
    name: str = "graph"
    provenance: dict[str, Any] = field(default_factory=dict)
    chains: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.base_groups = [list(g) for g in self.base_groups]
        if self.atoms is None:
            self.atoms = [[v] for g in self.base_groups for v in g]
        self.atoms = [list(a) for a in self.atoms]
        where: dict[Hashable, int] = {}
        for i, g in enumerate(self.base_groups):
            for v in g:
                if v in where or v == self.source or v not in self.H:
                    raise ValueError(f"CostGraph: base groups must cover the graph's nodes but the source once "
                                     f"each (node {v!r})")
                where[v] = i
        if len(where) != self.H.number_of_nodes() - 1:
            raise ValueError("CostGraph: the base groups do not cover the graph")
        seen: set = set()
        for a in self.atoms:
            if not a or len({where.get(v, -1) for v in a}) != 1 or -1 in {where.get(v, -1) for v in a}:
                raise ValueError(f"CostGraph: atom {a!r} is empty or spans several base groups")
            if seen & set(a):
                raise ValueError(f"CostGraph: atoms overlap ({sorted(map(str, seen & set(a)))})")
            seen |= set(a)
        if len(seen) != len(where):
            raise ValueError("CostGraph: the atoms do not cover the graph")

    def size(self, v: Hashable) -> float:
        """The bytes of node v's output (scaled)."""
        return self.scale * float(self.H.nodes[v].get("out_bytes", 0.0) or 0.0)

    def stored(self, v: Hashable) -> float:
        """The bytes a stage keeps of node v for the backward pass (``stored_bytes``, default the
        output; scaled): PipeDream's activation size of the node."""
        d = self.H.nodes[v]
        return self.scale * float(d.get("stored_bytes", d.get("out_bytes", 0.0)) or 0.0)

    def has_grad(self, v: Hashable) -> bool:
        return v != self.source and (self.grad is None or v in self.grad)

    def stage_name(self, g: Sequence[Hashable]) -> str:
        if self.virtual_sink and list(g) == [self.sink]:
            return "sinks"
        if self.names is not None:
            return self.names(list(g))
        return str(g[0]) if len(g) == 1 else f"{g[0]}..{g[-1]}"


def chain_of(cg: CostGraph, groups: Sequence[Sequence[Hashable]], *, name: str | None = None,
             provenance: dict[str, Any] | None = None) -> Chain:
    """The chain of ``groups`` (a partition of every node but the source, each edge going from a group
    to itself or a later one) with the rules of the module docstring. Its provenance has ``groups``,
    ``cuts`` (what crosses each cut) and ``resident`` (where each resident tensor lives), after
    ``cg.provenance`` and ``provenance``. O(V + E)."""
    groups = [list(g) for g in groups]
    H, k = cg.H, cg.scale
    hn = H.nodes
    res = residency(H, groups, cg.source)
    rs = set(res.resident)
    crossing = {v for b in res.boundary for v in b}
    uf = [k * sum(hn[n].get("uf", 0.0) for n in g) for g in groups]
    ub = [k * sum(hn[n].get("ub", 0.0) for n in g) for g in groups]
    wa = [sum(cg.size(n) for n in b) for b in res.boundary]
    wabar = [wa[0]] + [sum(cg.size(n) if n in crossing else cg.stored(n) for n in g if n not in rs) for g in groups]
    weights = [float(sum(hn[n].get("weight_bytes", 0.0) for n in g)) for g in groups]
    resident = sum(cg.size(n) * (2 if cg.has_grad(n) else 1) for n in rs)
    cut_info, res_info = multi_cut_tensors(H, res, scale=k, grad={n for n in rs if cg.has_grad(n)})
    prov = {**cg.provenance, **(provenance or {}), "groups": [[str(n) for n in g] for g in groups],
            "cuts": cut_info, "resident": res_info}
    return Chain.from_stages(uf=uf, ub=ub, wa=wa, wabar=wabar, wd=wa, weights=weights, resident=resident,
                             loss=cg.loss, name=name or cg.name,
                             stage_names=["input"] + [cg.stage_name(g) for g in groups] + ["loss"], provenance=prov)


def refine(base_groups: Sequence[Sequence[Hashable]], stages: Sequence[Iterable[Hashable]]) -> list[list[Hashable]]:
    """The base chain's groups cut again at the boundaries of ``stages`` (a partition of the base
    groups' nodes into consecutive stages: node sets ``S_1, ..., S_P`` whose unions ``D_s = S_1 u ...
    u S_s`` are downsets). Stage s gets, for each base group c in order, the group ``c & S_s`` when
    it is not empty. Every cut of the result is a downset: it is ``D_{s-1} u (B_c & D_s)`` with
    ``B_c`` a prefix union of base groups (intersections and unions of downsets are downsets), so the
    groups form a chain partition whose cuts include every ``D_s``; and when every ``D_s`` is itself
    a prefix union of base groups (a partition contiguous on the base chain), the result is the base
    groups themselves. Returns the groups and, per stage, how many of them it holds, as
    ``(groups, counts)``. O(V)."""
    sets = [set(s) for s in stages]
    out: list[list[Hashable]] = []
    counts = []
    for S in sets:
        n = 0
        for g in base_groups:
            part = [v for v in g if v in S]
            if part:
                out.append(part)
                n += 1
        counts.append(n)
    total = sum(len(g) for g in base_groups)
    if sum(len(g) for g in out) != total or sum(len(S) for S in sets) != total:
        raise ValueError("refine: the stages are not a partition of the base groups' nodes")
    return out, counts


def stage_ranges(counts: Sequence[int]) -> list[tuple[int, int]]:
    """The layer ranges ``(first, last)`` (1-based) of consecutive stages holding ``counts`` groups."""
    out, a = [], 1
    for n in counts:
        out.append((a, a + n - 1))
        a += n
    return out


def from_linearized(lm, chain: Chain, *, name: str | None = None) -> CostGraph:
    """The cost graph of a traced network cut into stages (a :class:`models.graph.LinearizedModel`
    with multi-tensor cuts, ``cuts="multi"``) and of its profiled chain ``chain``: the traced DAG
    without the head folded into the loss, the sizes :func:`models.graph.capture` recorded
    (``out_bytes``; a view or shape query, not in :func:`models.graph.counted_operations`, stores
    nothing of its own: ``stored_bytes`` 0), the parameters' bytes, and the profiled times of each
    stage on its last node. The atoms are the stages themselves (their times are measured as a
    whole, so a planner must not split them); the base chain is ``lm.groups``. The loss stage keeps
    the profiled one (head included). Resident tensors have a gradient when they are floating
    point. The chains of this graph (:func:`chain_of`) count memory as PipeDream's importer does
    (the nodes' outputs), not as the profiler measured it: compare them with each other, not with
    ``chain``'s memory."""
    from .graph import counted_operations

    if lm.residency is None:
        raise ValueError("from_linearized: give a linearization with multi-tensor cuts (cuts='multi')")
    cap = lm.captured
    head = set(lm.head_group)
    groups = [list(g) for g in lm.groups]
    if len(groups) != chain.L:
        raise ValueError(f"from_linearized: the chain has L = {chain.L} stages, the linearization {len(groups)}")
    H = cap.graph.subgraph([v for v in cap.graph if v not in head]).copy()
    counted = counted_operations(H)
    for v in H:
        H.nodes[v]["uf"] = H.nodes[v]["ub"] = 0.0
        if v not in counted:
            H.nodes[v]["stored_bytes"] = 0.0
    for l, g in enumerate(groups, start=1):
        H.nodes[g[-1]]["uf"] = float(chain.uf[l])
        H.nodes[g[-1]]["ub"] = float(chain.ub[l])
    meta = {n.name: n.meta.get("tensor_meta") for n in cap.gm.graph.nodes}
    grad = {v for v in H if getattr(getattr(meta.get(v), "dtype", None), "is_floating_point", False)}
    L = chain.L
    loss = {k: float(getattr(chain, k)[L + 1]) for k in ("uf", "ub", "of", "ob", "weights", "wa", "wabar", "wd")}
    names = dict(zip(map(tuple, groups), lm.names))
    return CostGraph(H, cap.source, groups[-1][-1], groups, atoms=[list(g) for g in groups], loss=loss, grad=grad,
                     names=lambda g: names.get(tuple(g), f"{g[0]}..{g[-1]}"), name=name or chain.name,
                     provenance={"network": (chain.provenance or {}).get("network", chain.name),
                                 "cost_graph": "models.cost_graph.from_linearized: traced sizes, profiled stage times"})
