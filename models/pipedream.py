"""Importer for PipeDream's per-layer profiles (``graph.txt``, msr-fiddle/pipedream's profiler output).

File format (one line per node, then one tab-indented line per edge)::

    node4 -- Conv2d(64, 64, ...) -- forward_compute_time=3.852, backward_compute_time=9.775, activation_size=205520896.0, parameter_size=147456.0
    \tnode4 -- node5

Times are milliseconds per mini-batch, sizes bytes; ``activation_size`` is the size of the node's output
for the whole mini-batch and may be a list ``[a; b; ...]`` (several outputs: summed here). The node
described as ``Input`` is the network input a^0; its "forward time" is the data loading time and is
ignored.

The DAG is linearized with :func:`models.graph.linearize` (minimal groups with a single boundary
tensor, papers 001/003) and each group becomes one stage l with

- ``u_f^l``, ``u_b^l`` = sums of the group's forward / backward times;
- ``omega_a^l`` = ``omega_delta^l`` = activation size of the group's last node (the separator);
- ``omega_abar^l`` = sum of the activation sizes of all nodes of the group (every intermediate output
  is assumed kept for the backward pass; this over-counts in-place operations such as
  ``ReLU(inplace)``, whose output reuses its input's memory: an upper estimate);
- ``W^l`` = sum of the parameter sizes; ``o_f^l = o_b^l = 0`` (the profile has no peak information);
- the loss stage L+1 costs nothing (the profiles end at the classifier).

Several inputs or outputs (encoder-decoder models, auxiliary classifier heads) are joined through a
virtual source and a virtual sink of zero time and size (:func:`models.graph.join_terminals`), and
every quantity is counted once, so that no time or memory is added or lost:

- several sources: the virtual source is a^0. Its size ``omega_a^0`` is the sum of the output sizes
  of the sources described as ``Input`` (the mini-batch tensors, loaded, not computed: their "forward
  time" is data loading and is ignored, as for a single input). All sources lie in stage 1 (it
  receives every input together); the ``Input`` sources add neither time nor size to stage 1, since
  a^0 already holds them, while a source that computes something (e.g. a learned query table) counts
  in stage 1 like any other node.
- several sinks: the virtual sink is the loss's input. Every real sink lies in stage L and the loss
  sees every output, so ``omega_a^L`` = ``omega_delta^L`` = the **sum** of the sinks' output sizes
  (not the last node's alone); they are part of ``omega_abar^L`` as well, like a single sink.

Hence, with or without virtual nodes, ``omega_a^0 + sum_l omega_abar^l`` is the sum of every node's
``activation_size`` and ``sum_l (u_f^l + u_b^l)`` the sum of every non-``Input`` node's times (times
the batch factor below).

A graph that yields fewer than one stage per ten nodes (several tensors cross every other cut:
NASNet's cells, GNMT's attention) gets a ``linearization_warning`` in the provenance, which ``memplan
import-pipedream`` prints on stderr (:func:`models.cut_report.coarse_chain_warning`).

``batch``: PipeDream measured at a mini-batch of 128 images; another batch size N rescales times and
activation sizes by N/128 (parameters unchanged). This linear model is an approximation (small
batches use the GPU less efficiently) and the provenance says so.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import networkx as nx

from .chain import MAX_BYTES, MAX_SECONDS, Chain
from .cost_graph import CostGraph, chain_of
from .cut_report import coarse_chain_warning, cut_tensors
from .graph import MULTI_MAX_NODES, join_terminals, linearize, multi_cut_groups
from .instance import read_text_file
from .solution import InputError

PROFILE_BATCH = 128
_NODE = re.compile(r"^(\S+) -- (.*) -- forward_compute_time=([^,]+), backward_compute_time=([^,]+), "
                   r"activation_size=(.+), parameter_size=([^,\s]+)\s*$")
_EDGE = re.compile(r"^\t(\S+) -- (\S+)\s*$")
#: a data input's description: ``Input``, or ``Input0``, ``Input1``, ... where the network has several (as
#: PipeDream's profiler names them: its GNMT profile's three inputs); ``Input0`` had been taken for a layer,
#: its loading time counted as stage 1's compute and its bytes left out of a^0
_INPUT_TYPE = re.compile(r"Input\d*$")


def _is_input(G: nx.DiGraph, n) -> bool:
    """Whether node ``n`` is a data input (:data:`_INPUT_TYPE`)."""
    return bool(_INPUT_TYPE.match(G.nodes[n]["type"]))


class PipeDreamFormatError(ValueError):
    """A line of a graph.txt file could not be read; the message names the file and line."""


def _number(text: str, where: str, field: str = "") -> float:
    """The number of a node's ``field`` (a list ``[a; b]`` is summed), or a
    :class:`PipeDreamFormatError` naming the place and the field when it cannot be read or is not a
    time or size: negative, NaN, infinite, or past the chain's ranges (:data:`models.chain.MAX_BYTES`;
    times, in ms, :data:`models.chain.MAX_SECONDS`). Such a value was taken as it was (a negative time)
    or refused only later by the chain without the file or node (``Chain.uf[5] = nan is out of range``)."""
    text = text.strip()
    try:
        if text.startswith("["):
            parts = [float(p) for p in text.strip("[]").replace(",", ";").split(";") if p.strip()]
        else:
            parts = [float(text)]
    except ValueError:
        raise PipeDreamFormatError(f"{where}: cannot read number {text!r}") from None
    if not parts:       # "[]" summed to 0: a time or size left out is not a zero one
        raise PipeDreamFormatError(f"{where}: {field or 'a field'}={text} holds no number")
    if field:
        top = MAX_SECONDS * 1e3 if field.endswith("_time") else MAX_BYTES
        for v in parts:
            if not 0 <= v <= top:      # NaN fails too
                raise PipeDreamFormatError(
                    f"{where}: {field}={text} is not a {'time' if field.endswith('_time') else 'size'}: give a "
                    f"finite number in [0, {top:g}] ({'milliseconds' if field.endswith('_time') else 'bytes'})")
    return float(sum(parts))


def read_graph(path: str | Path) -> nx.DiGraph:
    """Parse a PipeDream ``graph.txt`` into a DiGraph; node attributes ``desc``, ``type``, ``uf``,
    ``ub`` (seconds), ``out_bytes``, ``weight_bytes`` (bytes), in the file's node order."""
    path = Path(path)
    if not path.exists():
        raise PipeDreamFormatError(f"{path}: no such PipeDream graph file")
    G = nx.DiGraph()
    edges = []
    for i, line in enumerate(read_text_file(path, "PipeDream graph file", PipeDreamFormatError).splitlines(),
                             start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        m = _EDGE.match(line)
        if m:
            edges.append((m.group(1), m.group(2), where))
            continue
        m = _NODE.match(line)
        if not m:
            raise PipeDreamFormatError(f"{where}: not a node or edge line: {line[:80]!r}")
        nid, desc = m.group(1), m.group(2).strip()
        at = f"{where}: node {nid}"
        if nid in G:        # the second line silently replaced the first one's times and sizes
            raise PipeDreamFormatError(f"{at}: a second line for node {nid} ({G.nodes[nid]['line']} has the "
                                       "first); each node has one line")
        G.add_node(nid, desc=desc, type=desc.split("(")[0].strip(),
                   uf=_number(m.group(3), at, "forward_compute_time") * 1e-3,
                   ub=_number(m.group(4), at, "backward_compute_time") * 1e-3,
                   out_bytes=_number(m.group(5), at, "activation_size"),
                   weight_bytes=_number(m.group(6), at, "parameter_size"), line=where)
    for u, v, where in edges:
        for n in (u, v):
            if n not in G:
                raise PipeDreamFormatError(f"{where}: edge mentions unknown node {n!r}")
        G.add_edge(u, v)
    if G.number_of_nodes() == 0:
        raise PipeDreamFormatError(f"{path}: no node line; not a PipeDream graph.txt profile")
    if G.number_of_nodes() > 1 and G.number_of_edges() == 0:
        raise PipeDreamFormatError(f"{path}: {G.number_of_nodes()} nodes and no edge line (tab-indented "
                                   "'nodeA -- nodeB'); is the file cut short?")
    # Several inputs may feed separate towers (each piece starts at an Input node), but a piece that no
    # Input feeds cannot be computed: the file was cut short (its edge lines lost) or is not a profile.
    parts = list(nx.weakly_connected_components(G))
    if len(parts) > 1:
        order = {n: k for k, n in enumerate(G)}
        fed = [c for c in parts if any(_is_input(G, n) for n in c)]
        cut = sorted((c for c in parts if c not in fed), key=lambda c: min(order[n] for n in c))
        if cut:
            first = min(cut[0], key=order.get) if cut else next(iter(G))
            raise PipeDreamFormatError(
                f"{path}: the graph falls apart into {len(parts)} pieces ({G.number_of_edges()} edges for "
                f"{G.number_of_nodes()} nodes), {len(cut)} of them fed by no Input node (e.g. the one of node "
                f"{first}); is the file cut short? A profile is one connected graph, or one piece per input")
    return G


def _stage_name(G: nx.DiGraph, group: list[str]) -> str:
    if len(group) == 1:
        return f"{G.nodes[group[0]]['type']}[{group[0]}]"
    return f"{G.nodes[group[0]]['type']}..{G.nodes[group[-1]]['type']}[{group[0]}..{group[-1]}]"


#: cut rules of :func:`import_graph`
CUTS = ("auto", "single", "multi")


def import_graph(path: str | Path, batch: int | None = None, name: str | None = None, cuts: str = "auto") -> Chain:
    """The linearized Chain of a PipeDream profile, optionally rescaled to mini-batch ``batch`` (a whole
    number >= 1; None keeps the profile's 128).

    ``cuts``: ``"single"`` cuts only where a single tensor crosses (:func:`models.graph.linearize`);
    ``"multi"`` cuts where several may (:func:`_multi_chain`); ``"auto"`` (default) is ``"single"``,
    or ``"multi"`` where the single-tensor chain draws the coarse-chain warning (fewer than one stage
    per ten nodes). The provenance's ``cut_rule`` says which was taken.

    Raises :class:`PipeDreamFormatError` naming the file (and line) when it cannot be read, is not a
    profile, or its graph is not one connected piece (a file cut short), and
    :class:`~memplan.models.solution.InputError` for a bad ``batch``."""
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (int, float))
                              or not float(batch).is_integer() or batch < 1):
        raise InputError(f"batch={batch!r}: give a whole number of samples >= 1 to rescale the profile to "
                         f"(PipeDream profiled at batch {PROFILE_BATCH}), or leave it out to keep {PROFILE_BATCH}")
    batch = None if batch is None else int(batch)
    if cuts not in CUTS:
        raise InputError(f"cuts={cuts!r}: choose from {', '.join(CUTS)}")
    path = Path(path)
    G = read_graph(path)
    inner = [n for n in G if _is_input(G, n) and G.in_degree(n) > 0]
    if inner:
        raise PipeDreamFormatError(f"{path}: the Input node {inner[0]} has predecessors; an Input node must "
                                   f"be a source of the graph (no incoming edge)")
    try:
        _, source, sink = join_terminals(G)
        groups = linearize(G)
    except ValueError as e:
        raise PipeDreamFormatError(f"{path}: cannot linearize the graph: {e}") from None
    if not groups:
        raise PipeDreamFormatError(f"{path}: the graph has no node besides its input; nothing to import")
    sources = [n for n in G if G.in_degree(n) == 0]
    sinks = [n for n in G if G.out_degree(n) == 0]
    k = 1.0 if batch is None else batch / PROFILE_BATCH
    used = PROFILE_BATCH if batch is None else batch
    nd = G.nodes
    if source in G:             # one source: it is a^0 (its time, data loading, is ignored)
        if not _is_input(G, source) and (nd[source]["ub"] > 0 or nd[source]["weight_bytes"] > 0):
            # a computing layer (a Conv) as the only source became a^0, its backward time and its
            # parameters dropped without a word
            raise PipeDreamFormatError(f"{path}: node {source} ({nd[source]['type']}) is the only source but not an "
                                       "Input node, and it has a backward time or parameters that a^0 would drop; "
                                       "a PipeDream profile starts at an Input node (the data)")
        data = {source}
    else:                       # several: a^0 = the Input sources (loaded data), which lie in group 1
        data = {n for n in sources if _is_input(G, n)}

    def total(group, key):
        return k * sum(nd[n][key] for n in group if n not in data)

    uf = [total(g, "uf") for g in groups]
    ub = [total(g, "ub") for g in groups]
    wa = ([k * sum(nd[n]["out_bytes"] for n in data)] + [k * nd[g[-1]]["out_bytes"] for g in groups[:-1]]
          + [k * sum(nd[n]["out_bytes"] for n in sinks)])
    wabar = [wa[0]] + [total(g, "out_bytes") for g in groups]
    weights = [sum(nd[n]["weight_bytes"] for n in g) for g in groups]
    stem = path.name.replace(".graph.txt", "").replace("graph.txt", "").strip(".") or path.parent.name
    try:
        shown = os.path.relpath(path)
    except ValueError:  # pragma: no cover - another drive on Windows
        shown = str(path)
    prov: dict[str, Any] = {
        "source": shown, "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "format": "PipeDream profiler graph.txt (msr-fiddle/pipedream, MIT license)",
        "network": stem, "profile_batch": PROFILE_BATCH, "batch": used,
        "device": "GPU used by PipeDream's authors (see the source's README)", "input": [3, 224, 224],
        "linearization": "models.graph.linearize: minimal single-tensor groups (papers 001/003 virtual layers); "
                         "u_f, u_b, W, abar = sums over the group, a = delta = separator's output; o_f = o_b = 0",
        "groups": [list(g) for g in groups],
        "sources": sources, "sinks": sinks,
        "nodes": G.number_of_nodes(),
        "cuts": cut_tensors(G, groups, first=sorted(data, key=list(G).index), last=sinks, scale=k),
    }
    if source not in G:         # several inputs: theirs, not an image's shape (both cut rules)
        prov["input"] = [nd[n]["desc"] for n in sorted(data)]
    warning = coarse_chain_warning(G, groups, what=f"PipeDream profile {path.name}", unit="nodes",
                                   names=[_stage_name(G, g) for g in groups])
    prov["cut_rule"] = "single"
    if cuts == "multi" or (cuts == "auto" and warning):
        multi = _multi_chain(G, data, k, path)
        prov.update(multi.provenance)
        if warning:
            warning = coarse_chain_warning(G, groups, what=f"PipeDream profile {path.name}", unit="nodes",
                                           names=[_stage_name(G, g) for g in groups],
                                           instead=f"cut where several tensors cross instead: {multi.L} stages, "
                                                   f"{len(multi.provenance['resident'])} resident tensor(s)")
            prov["linearization_warning"] = warning
        multi.provenance = prov
        multi.name = name or f"pipedream-{stem}-b{used}"
        return multi
    if warning:
        prov["linearization_warning"] = warning
    if source not in G or sink not in G:
        prov["virtual_nodes"] = (
            (f"{len(sources)} sources joined through a virtual source of zero time and size: a^0 = the Input "
             f"sources {sorted(data)} (not counted again in stage 1); " if source not in G else "")
            + (f"{len(sinks)} sinks joined through a virtual sink of zero time and size: all in stage L, "
               f"a^L = delta^L = the sum of their outputs" if sink not in G else ""))
    if batch is not None and batch != PROFILE_BATCH:
        prov["scaling"] = (f"times and activation sizes scaled linearly by {batch}/{PROFILE_BATCH} from the "
                           f"profile's batch {PROFILE_BATCH} (an approximation); parameters unchanged")
    try:
        return Chain.from_stages(uf=uf, ub=ub, wa=wa, wabar=wabar, wd=wa, weights=weights,
                                 name=name or f"pipedream-{stem}-b{used}",
                                 stage_names=["input"] + [_stage_name(G, g) for g in groups] + ["loss"],
                                 provenance=prov)
    except ValueError as e:
        if batch is None or batch <= PROFILE_BATCH:
            raise
        # --batch 1e20 blamed Chain.uf[1]: the rescaled times or sizes are what is out of range
        raise InputError(f"batch={batch}: rescaling the profile from batch {PROFILE_BATCH} puts it out of range "
                         f"({e}); give a smaller batch") from None


def _multi_chain(G: nx.DiGraph, data: set, k: float, path: Path) -> Chain:
    """The chain of a PipeDream graph cut where several tensors may cross (issue 30): the base chain
    of :func:`_cost_graph` (:func:`models.cost_graph.chain_of` of its base groups).

    The data inputs (``data``: the single source, or the ``Input`` sources) are contracted into one
    source, a^0, of their summed size, as in the single-tensor chain. Several sinks are joined by the
    virtual sink, which becomes a last stage of its own (zero time and size: it hands the sinks'
    outputs to the loss). The groups are :func:`models.graph.multi_cut_groups` (at most
    :data:`models.graph.MULTI_MAX_NODES` nodes per stage, the fewest bytes crossing the cuts) and
    :func:`models.graph.residency` splits what crosses them: ``omega_a^l`` = ``omega_delta^l`` = the
    tensors crossing cut l only; ``omega_abar^l`` = every output of group l but the resident ones;
    ``resident`` = every tensor crossing two or more cuts, with its gradient (the data, without).
    So ``omega_a^0 + sum_l omega_abar^l`` plus the resident tensors' sizes is still the sum of every
    node's activation size, each counted once. Times and weights as in the single-tensor chain."""
    cg = _cost_graph(G, data, k)
    return chain_of(cg, cg.base_groups)


def _cost_graph(G: nx.DiGraph, data: set, k: float) -> CostGraph:
    """The :class:`~memplan.models.cost_graph.CostGraph` of a PipeDream graph: the data inputs
    contracted into a^0, several sinks joined by the virtual sink (alone in the last base group),
    base groups :func:`models.graph.multi_cut_groups`, one atom per node (PipeDream's planner moves
    single layers), scale ``k``."""
    nd = G.nodes
    src = next(iter(data)) if len(data) == 1 else "input" if "input" not in G else "input*"
    H = nx.DiGraph()
    H.add_node(src, type="Input", desc=nd[src]["desc"] if src in G else "the data inputs", uf=0.0, ub=0.0,
               out_bytes=float(sum(nd[n]["out_bytes"] for n in data)), weight_bytes=0.0)
    for n in G:
        if n not in data:
            H.add_node(n, **nd[n])
    for u, v in G.edges:
        H.add_edge(src if u in data else u, src if v in data else v)
    H, source, sink = join_terminals(H)
    real = [n for n in H if n != src and not H.nodes[n].get("virtual")]
    groups = multi_cut_groups(H, max_nodes=MULTI_MAX_NODES, counted=real)
    virtual_sink = H.nodes[sink].get("virtual", False)
    if virtual_sink:            # the virtual sink: a stage of its own, the sinks' outputs cross into it
        groups[-1] = [n for n in groups[-1] if n != sink]
        groups = [g for g in groups if g] + [[sink]]
    prov = {"cut_rule": "multi",
            "linearization": "models.graph.multi_cut_groups on the DAG (data inputs contracted into a^0): at most "
                             f"{MULTI_MAX_NODES} nodes per stage, the fewest bytes crossing the cuts; a tensor crossing "
                             "one cut is in a^l (= delta^l), one crossing several is resident (charged once, with its "
                             "gradient, as the chain's resident bytes); abar = the group's other outputs; o_f = o_b = 0"}
    return CostGraph(H, source, sink, groups, scale=k, virtual_sink=virtual_sink,
                     names=lambda g: _stage_name(H, g), provenance=prov)


def cost_graph(path: str | Path, batch: int | None = None) -> CostGraph:
    """The cost graph of a PipeDream profile (what PipeDream's own planner reads,
    :mod:`memplan.baselines.pipeline_dag`), rescaled to mini-batch ``batch`` as
    :func:`import_graph` does; its base chain is :func:`import_graph`'s ``cuts="multi"`` chain, and its
    default chain is in ``chains`` (:attr:`~models.cost_graph.CostGraph.chains`).
    Raises :class:`PipeDreamFormatError` as :func:`import_graph` does."""
    chain = import_graph(path, batch=batch, cuts="multi")      # the checks, and the name
    G = read_graph(path)
    _, source, _ = join_terminals(G)
    sources = [n for n in G if G.in_degree(n) == 0]
    data = {source} if source in G else {n for n in sources if _is_input(G, n)}
    k = 1.0 if batch is None else int(batch) / PROFILE_BATCH
    cg = _cost_graph(G, data, k)
    cg.name = chain.name
    cg.provenance = {**chain.provenance, **cg.provenance}
    for key in ("groups", "cuts", "resident"):
        cg.provenance.pop(key, None)
    # the profile's own chain (import_graph's single-tensor cuts, what `memplan import-pipedream` writes):
    # PipeDream's planner on it is a baseline solve_graph is never slower than (its finer cuts reached
    # a shorter period than every point on the multi-cut base chain at ResNet-18's and ResNet-50's least
    # memory)
    cg.chains = [import_graph(path, batch=batch)]
    return cg
