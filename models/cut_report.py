"""Diagnostics of a linearization: how coarse a chain is, and which tensors cross a cut (issue 30).

:func:`models.graph.linearize` cuts a DAG only where a single tensor separates what comes before from
what comes after. In a network whose cells read the outputs of the two previous cells (NASNet), whose
decoder layers all read the encoder's output (Transformer, GNMT), or whose long skips span the whole
network (U-Net), several tensors cross every other cut, and the chain collapses into a few huge
stages: every problem (re-materialization, offloading, pipelining) then loses its freedom.
:func:`coarse_chain_warning` says so, in one line, when a graph yields **fewer than one stage per ten
counted nodes**; ``memplan profile`` and ``memplan import-pipedream`` record the line in the instance's
provenance (``linearization_warning``) and print it on stderr.

What is counted: every node of a PipeDream profile (each is a layer); for a traced zoo network, the
operations that produce a tensor (:func:`counted_operations`: views and shape queries such as
``view``, ``transpose``, ``getitem``, ``size`` are not counted, so that GPT-2, whose attention is
written out op by op and which is cut at every residual addition, is not reported). The stage count
is that of the minimal single-tensor groups (``linearize``), before any merge of cuts that autograd
does not save: the warning is about which cuts exist, not about which are chosen.

The message also names the largest stage, and inside it the cheapest cut met along a topological
order (the same order ``linearize`` scans): the tensors that cross it. Every cut strictly inside a
stage is crossed by at least two tensors (otherwise the node before it would be a separator). O(V + E)
plus the size of the frontiers recorded.
"""
from __future__ import annotations

from typing import Hashable, Iterable, Sequence

import networkx as nx

from .graph import VIEW_OPS, counted_operations, frontiers, join_terminals  # noqa: F401 (re-exported)

#: a chain with fewer stages than (counted nodes) / STAGE_RATIO is reported
STAGE_RATIO = 10


def cheapest_cut(G: nx.DiGraph, group: Sequence[Hashable]) -> list[Hashable]:
    """The smallest set of tensors crossing a cut strictly inside ``group`` (a group of
    :func:`models.graph.linearize` on G), among the cuts after each of the group's nodes but its last
    along the topological order ``linearize`` scans: the nodes processed so far whose output is still
    read later. Empty when the group has a single node."""
    H, source, _ = join_terminals(G)
    index = {n: i for i, n in enumerate(H.nodes)}
    order = list(nx.lexicographical_topological_sort(H, key=lambda n: index[n]))
    inside = set(group[:-1])
    best: list[Hashable] = []
    for v, frontier in frontiers(H, order):
        if v in inside and (not best or len(frontier) < len(best)):
            best = sorted(frontier, key=index.get)
    return best


def coarse_chain_warning(G: nx.DiGraph, groups: Sequence[Sequence[Hashable]], *, what: str,
                         counted: Iterable[Hashable] | None = None, unit: str = "nodes", note: str = "",
                         names: Sequence[str] | None = None, instead: str | None = None) -> str | None:
    """One line saying that ``groups`` (the minimal single-tensor groups of G) are too few, or None.

    ``counted``: the nodes that count (default: all of G's); the line is returned when
    ``STAGE_RATIO * len(groups) < len(counted)``. ``unit``: what is counted (``nodes``, ``operations``),
    ``note``: said once after the count (what is left out). ``names``: the groups' display names.
    ``instead``: what was done about it (the multi-tensor cuts taken), said in place of the line's
    default ending (that the chain leaves the problems little freedom)."""
    counted = set(G.nodes if counted is None else counted)
    n, L = len(counted), len(groups)
    if not groups or STAGE_RATIO * L >= n:
        return None
    sizes = [sum(1 for v in g if v in counted) for g in groups]
    k = max(range(L), key=sizes.__getitem__)
    cut = cheapest_cut(G, groups[k])
    shown = ", ".join(map(str, cut[:4])) + (", ..." if len(cut) > 4 else "")
    label = names[k] if names else f"ending at {groups[k][-1]}"
    tail = instead or ("re-materialization, offloading and pipelining have little freedom on this chain "
                       "(multi-tensor cuts: issue 30)")
    return (f"{what}: {n} {unit}{f' ({note})' if note else ''} linearize into only {L} stage(s), fewer than one per {STAGE_RATIO} {unit}: "
            f"the chain is cut only where a single tensor crosses, and several tensors cross every other cut "
            f"(stage {k + 1}, {label}, holds {sizes[k]} of the {n} {unit}; the cheapest cut found inside it is "
            f"crossed by {len(cut)} tensors: {shown}); {tail}")


def multi_cut_tensors(G: nx.DiGraph, res, *, scale: float = 1.0, first: Sequence[Hashable] | None = None,
                      grad: Iterable[Hashable] | None = None) -> tuple[list[dict], list[dict]]:
    """What crosses each cut of a multi-tensor linearization (:func:`models.graph.residency`), for an
    instance's provenance: ``(cuts, resident)``. ``cuts``: one entry per cut l = 0..L, ``{"cut": l,
    "tensors": [{"node", "bytes"}, ...], "resident": [{"node", "bytes"}, ...]}``: a^l's tensors (the
    ones crossing this cut only), then the resident tensors alive across it. ``resident``: one entry
    per resident tensor, ``{"node", "bytes", "stage", "last_stage", "charged"}``: the stage computing
    it (0: the input), the last stage reading it (L+1: the loss) and what ``Chain.resident`` charges
    for it (its bytes, twice when it has a gradient: ``grad``, default every tensor). ``first``:
    the nodes forming a^0 when a^0 is not ``res.boundary[0]`` (several sources). Bytes: the nodes'
    ``out_bytes`` times ``scale``."""
    size = lambda v: float(G.nodes[v].get("out_bytes", 0) or 0) * scale  # noqa: E731
    grad = None if grad is None else set(grad)
    L = len(res.boundary) - 1
    cuts = []
    for l in range(L + 1):
        a = list(first) if (l == 0 and first is not None) else res.boundary[l]
        crossing = [v for v in res.resident if res.producer[v] <= l < res._last[v]]
        cuts.append({"cut": l, "tensors": [{"node": str(v), "bytes": size(v)} for v in a],
                     "resident": [{"node": str(v), "bytes": size(v)} for v in crossing]})
    resident = [{"node": str(v), "bytes": size(v), "stage": int(res.producer[v]), "last_stage": int(res._last[v]),
                 "charged": size(v) * (2 if grad is None or v in grad else 1)} for v in res.resident]
    return cuts, resident


def cut_tensors(G: nx.DiGraph, groups: Sequence[Sequence[Hashable]], *, first: Sequence[Hashable] | None = None,
                last: Sequence[Hashable] | None = None, scale: float = 1.0) -> list[dict]:
    """What crosses each cut of the chain, for an instance's provenance (``cuts``): one entry per
    cut l = 0..L (cut l lies between stage l and stage l+1; stage L+1 is the loss), each
    ``{"cut": l, "tensors": [{"node": name, "bytes": size}, ...]}``. With today's single-tensor
    linearization each cut 1 <= l < L carries one tensor, the output of the separator ending group l;
    ``first`` lists the nodes whose outputs form a^0 (default: G's source), ``last`` those forming a^L
    (default: the last group's last node). ``bytes``: the nodes' ``out_bytes`` times ``scale``.
    A multi-tensor linearization writes several tensors per cut here."""
    H, source, _ = join_terminals(G)
    first = [source] if first is None else list(first)
    last = [groups[-1][-1]] if last is None else list(last)
    ends = [first] + [[g[-1]] for g in groups[:-1]] + [last]
    return [{"cut": l, "tensors": [{"node": str(v), "bytes": float(G.nodes[v].get("out_bytes", 0) or 0) * scale}
                                   for v in nodes]}
            for l, nodes in enumerate(ends)]
