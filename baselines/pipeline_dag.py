"""PipeDream's planner over the antichain DAG of a network (issue 30; paper 003 section 5).

:func:`memplan.baselines.pipeline.pipedream_partition` partitions a *chain*: its stages are runs of
consecutive layers, so it can only cut where the chain was cut. PipeDream's own planner (Narayanan
et al., "PipeDream: generalized pipeline parallelism for DNN training", SOSP 2019, section 3.1, and
its public optimizer) reads the profiled network as a DAG of layers and cuts it wherever a set of
layers, possibly on several branches, can be finished before the rest starts. This module does the
same, on a :class:`~memplan.models.cost_graph.CostGraph`.

Our reading of PipeDream's planner
----------------------------------
- **States.** A state is a set of layers closed under predecessors (a *downset*: everything the set
  needs is in it), named by its antichain of maximal layers. PipeDream builds the DAG of these
  states, in which a state leads to another by adding one layer whose predecessors are all in it,
  starting from the network input; every downset is reachable that way. The input is zeroed and
  always belongs to the first stage ("the optimizer should not choose where the input goes").
- **Order and stages.** The states are sorted topologically (here: by the number of layers they
  hold, then by discovery), and the dynamic program runs over that order: a stage is the layers of
  state j that are not in state i, for i before j *and i's downset inside j's* (i a predecessor of
  j in the state DAG). Consecutive stages therefore always meet at an antichain, which several
  tensors may cross.
- **Costs.** Every state carries the cumulative compute time (forward + backward), activation size
  and parameter size of its downset, so a stage's costs are differences of two states' (PipeDream
  takes these differences between any two states of the sorted list); the tensors
  crossing the boundary are the outputs of the state's layers that a later layer reads (its
  "output activation size"). The DP minimizes the slowest stage, ``max(stage compute time, 2 x
  boundary transfer / bandwidth)``, over at most P stages, and a stage that would hold more than the
  memory target is not allowed.
- **What we keep of it.** The accounting is that of :func:`~memplan.baselines.pipeline.
  pipedream_partition` (paper 003's reading: no stage replication, stage s, 0-based, holds ``k_s =
  max(1, NOAM - s)`` mini-batches, each with the stage's activations and weights, ``k_s x
  (activations + weights) <= target``; the transfer is ``2 x`` the bytes crossing the stage's input
  boundary, since a gradient of the same size goes back), lifted from the chain to the DAG under
  the ``autograd`` memory model of :func:`models.pipeline.task_data`: a stage keeps the outputs of
  its layers (``stored_bytes``, PipeDream's profiled activation size; a tensor crossing a cut of the
  base chain C0 counts whole), and a tensor crossing two or more cuts of C0 (kept resident, with its
  gradient when it has one) is kept by every stage from the one computing it to the last one reading
  it. Both parts are differences of per-state sums: a stage from state k to state j keeps
  ``upto[j] - past[k]`` bytes, ``upto`` adding what a downset computes (resident tensors with their
  gradient), ``past`` what it computes but the resident tensors, plus the resident tensors whose
  readers are all in it. The loss stage's costs go with the last stage, as on a chain. So on the
  cuts of C0 the planner *is* :func:`pipedream_partition` on C0 (same partitions, same estimates,
  resident tensors included), and on a path graph it is the chain planner of the path
  (``tests/test_pipeline_dag.py``); PipeDream's own profiles count each layer's output once, in the
  stage computing it, which is the same thing for every tensor crossing at most one cut. The
  paper's memory model (a layer keeps only its input) has no such lifting; the planner keeps this
  accounting whatever model the simulation uses.
- **The sweep.** As paper 003 does with PipeDream (and :func:`~memplan.baselines.pipeline.
  pipedream_points`), the planner runs for a geometric grid of memory targets and every NOAM in
  ``1..2P``, and every distinct (partition, NOAM) is simulated with eager 1F1B; the simulator's
  period and memory are what counts, never the planner's estimate.

Simulating a partition chosen at antichains
-------------------------------------------
The simulator replays chains. A partition into stages ``S_1..S_P`` is simulated on the chain of
:func:`models.cost_graph.refine`: the cost graph's base chain C0 (``base_groups``) cut again at the
partition's antichains, built by :func:`models.cost_graph.chain_of` (tensors crossing several cuts
are resident, charged where they live, :func:`models.pipeline.task_data`). The partition is then
contiguous on that chain, and a partition that was contiguous on C0 is simulated on C0 itself.

Bounds: how many states
-----------------------
A network of width w (its largest antichain) over n atoms can have up to about ``(n/w)^w``
downsets, so the full state DAG explodes on wide graphs (NASNet's cells, GNMT's attention).
:func:`antichain_states` enumerates every downset when there are at most ``max_states`` of them
(``exact``: the planner then searches every partition PipeDream's does). Otherwise it runs a *beam*
through the state DAG, level by level (a level: the downsets of ``m`` atoms): at each level it keeps
the prefix of the base order (so every cut of C0 is a state: the planner sees at least every
partition that is contiguous on C0, and its estimate is never worse than the chain planner's on
C0's cuts) and the ``beam`` other downsets with the fewest bytes crossing (ties: nearest to the base
order), with ``beam = max_states // (n + 1) - 1``; the result says so (``exact`` False, ``beam``).
The planner moves ``atoms`` (by default single nodes; a traced network may use its profiled stages,
whose times are measured as a whole).

Complexity: enumeration O(S (d + r)) set operations for S states (d: the degree of an atom, r: the
atoms ready at a state); the subset relation between states O(S^2 n / 64) word operations (numpy);
one DP for every target at once O(P S^2 T) (T targets; S^2 over the pairs of nested states), run
once per NOAM; one chain (O(V + E)) and one eager simulation (O(n_batches L)) per distinct
(partition, NOAM). ``time_limit`` bounds the whole call: enumeration, DPs and simulations stop when
it runs out and the sweep returns what it has (``complete`` False).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import networkx as nx
import numpy as np

from memplan.baselines.pipeline import Point, Points, _deadline, _expired
from memplan.baselines.pipeline_eager import simulate_eager
from memplan.models.chain import Chain
from memplan.models.cost_graph import CostGraph, chain_of, refine, stage_ranges
from memplan.models.graph import residency
from memplan.models.pipeline import TaskData, task_data

#: default cap on the number of states of :func:`antichain_states`
MAX_STATES = 2000


@dataclass
class AntichainStates:
    """The states of the antichain DAG of a cost graph (:func:`antichain_states`), in topological
    order: state i is the downset ``nodes(i)`` (bitmask ``masks[i]`` over ``atoms``); state 0 is
    empty (the input alone) and the last one holds every atom (and the loss stage's costs).
    ``time``: forward + backward time of the downset (scaled); a stage from state k to state j
    keeps ``upto[j] - past[k]`` bytes per mini-batch in flight, weights included (module docstring,
    "Costs"); ``cross``: the bytes of the tensors crossing from the downset to the rest (scaled). ``exact``: every
    downset is a state; otherwise ``beam`` says how many downsets besides the base order's prefix
    each level kept. ``complete``: the enumeration reached the full state before the time limit."""

    atoms: list[list[Hashable]]
    masks: list[int]
    level: np.ndarray
    time: np.ndarray
    upto: np.ndarray
    past: np.ndarray
    cross: np.ndarray
    exact: bool
    beam: int | None
    complete: bool
    base: list[int]                  # the states that are prefixes of the base order, by level
    cuts: list[int] = field(default_factory=list)   # those that are cuts of the base chain C0 (0 and last included)
    _sub: list[np.ndarray] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.masks)

    def nodes(self, i: int) -> list[Hashable]:
        m = self.masks[i]
        return [v for a, nodes in enumerate(self.atoms) if m >> a & 1 for v in nodes]

    def subsets(self, deadline: float = math.inf) -> list[np.ndarray] | None:
        """``sub[j]``: the states k whose downset is strictly inside j's, in increasing order (numpy
        on the packed bitmasks, O(S^2 n / 64)); None when ``deadline`` came first."""
        if self._sub is not None:
            return self._sub
        n = len(self.atoms)
        nbytes = max(8, ((n + 63) // 64) * 8)
        packed = np.frombuffer(b"".join(m.to_bytes(nbytes, "little") for m in self.masks),
                               dtype=np.uint64).reshape(len(self.masks), nbytes // 8)
        first = np.searchsorted(self.level, self.level, side="left")   # first state of each state's level
        sub = []
        for j in range(len(self.masks)):
            if j % 256 == 0 and _expired(deadline):
                return None
            cand = packed[:first[j]]
            ok = ~np.any(cand & ~packed[j], axis=1)
            sub.append(np.nonzero(ok)[0].astype(np.int64))
        self._sub = sub
        return sub


def _quotient(cg: CostGraph) -> tuple[list[list[Hashable]], dict[Hashable, int], list[set[int]], list[set[int]]]:
    """The atoms in the base order (a topological order of the atoms' quotient DAG that follows the
    base groups, then the base order inside a group), each node's atom, and the atoms' predecessor
    and successor sets. Raises ValueError when the atoms' quotient has a cycle."""
    pos = {cg.source: -1}
    for v in (v for g in cg.base_groups for v in g):
        pos[v] = len(pos)
    atoms = cg.atoms or []
    atom_of = {v: a for a, nodes in enumerate(atoms) for v in nodes}
    Q = nx.DiGraph()
    Q.add_nodes_from(range(len(atoms)))
    for u, v in cg.H.edges:
        if u != cg.source and atom_of[u] != atom_of[v]:
            Q.add_edge(atom_of[u], atom_of[v])
    key = {a: min(pos[v] for v in nodes) for a, nodes in enumerate(atoms)}
    try:
        order = list(nx.lexicographical_topological_sort(Q, key=key.__getitem__))
    except nx.NetworkXUnfeasible:
        raise ValueError("antichain_states: the atoms' quotient graph has a cycle; atoms must be convex "
                         "(a path leaving an atom never comes back to it)") from None
    new = {a: i for i, a in enumerate(order)}
    atoms = [atoms[a] for a in order]
    atom_of = {v: new[a] for v, a in atom_of.items()}
    preds = [set() for _ in atoms]
    succs = [set() for _ in atoms]
    for a, b in Q.edges:
        preds[new[b]].add(new[a])
        succs[new[a]].add(new[b])
    return atoms, atom_of, preds, succs


def antichain_states(cg: CostGraph, *, max_states: int = MAX_STATES, time_limit: float | None = None,
                     deadline: float | None = None) -> AntichainStates:
    """The states of PipeDream's antichain DAG over ``cg``'s atoms: every downset when there are at
    most ``max_states``, else a beam (see the module docstring, "Bounds"). ``time_limit`` (seconds)
    or ``deadline`` (a :func:`time.monotonic` time) stops the enumeration (``complete`` False)."""
    if isinstance(max_states, bool) or not isinstance(max_states, int) or max_states < 1:
        raise ValueError(f"antichain_states: max_states={max_states!r}; give a whole number >= 1")
    dl = deadline if deadline is not None else _deadline(time_limit)
    atoms, atom_of, preds, succs = _quotient(cg)
    n = len(atoms)
    H = cg.H
    pmask = [sum(1 << b for b in preds[a]) for a in range(n)]
    t_atom = [cg.scale * sum(float(H.nodes[v].get("uf", 0.0) or 0.0) + float(H.nodes[v].get("ub", 0.0) or 0.0)
                             for v in nodes) for nodes in atoms]
    # the base chain's tensors: crossing one of its cuts (kept whole, in a^l), or several (resident:
    # value and gradient on every stage of its span; models.pipeline.task_data)
    res0 = residency(H, cg.base_groups, cg.source)
    resident = set(res0.resident)
    boundary = {v for b in res0.boundary for v in b}
    val2 = {v: cg.size(v) * (2 if cg.has_grad(v) else 1) for v in resident}
    w_atom = [float(sum(H.nodes[v].get("weight_bytes", 0.0) or 0.0 for v in nodes)) for nodes in atoms]
    a_plain = [sum(cg.size(v) if v in boundary else cg.stored(v) for v in nodes if v not in resident) + w_atom[a]
               for a, nodes in enumerate(atoms)]
    a_res = [sum(val2[v] for v in nodes if v in resident) for nodes in atoms]
    # tensors: producer atom (-1: the input) and the mask of the other atoms reading them
    readers: dict[Hashable, int] = {}
    for v in H:
        own = atom_of.get(v, -1)
        r = 0
        for w in H.successors(v):
            if atom_of[w] != own:
                r |= 1 << atom_of[w]
        if r:
            readers[v] = r
    outs = [[] for _ in range(n)]     # tensors of atom a read by other atoms
    ins = [[] for _ in range(n)]      # tensors read by atom a from other atoms (or the input)
    for v, r in readers.items():
        if v != cg.source:
            outs[atom_of[v]].append(v)
        a = r
        while a:
            b = (a & -a).bit_length() - 1
            ins[b].append(v)
            a &= a - 1
    size = {v: cg.size(v) for v in readers}
    full = (1 << n) - 1
    cross0 = sum(size[v] for v in readers if v == cg.source)

    src_res = sum(val2[v] for v in resident if v == cg.source)

    def step(mask: int, a: int, cross: float) -> float:
        new = mask | 1 << a
        c = cross + sum(size[v] for v in outs[a] if readers[v] & ~new)
        return c - sum(size[v] for v in ins[a] if not readers[v] & ~new)

    def done(mask: int, a: int) -> float:
        """The resident bytes whose last reader is atom a, added to ``mask``."""
        new = mask | 1 << a
        return sum(val2[v] for v in ins[a] if v in resident and not readers[v] & ~new)

    def run(beam: int | None):
        # per state: mask, level, time, upto, past, cross; per state of the current level its ready
        # atoms (bitmask) and its order key
        masks, level, tim, upto, past, cross = [0], [0], [0.0], [0.0], [0.0], [cross0]
        ready0 = sum(1 << a for a in range(n) if pmask[a] == 0)
        cur = {0: (0, ready0, 0)}      # mask -> (state index, ready mask, position sum)
        base, prefix = [0], 0
        for lev in range(1, n + 1):
            if _expired(dl):
                return masks, level, tim, upto, past, cross, base, False
            nxt: dict[int, tuple] = {}
            for mask, (i, ready, psum) in cur.items():
                r = ready
                while r:
                    a = (r & -r).bit_length() - 1
                    r &= r - 1
                    new = mask | 1 << a
                    if new in nxt:
                        continue
                    nr = ready & ~(1 << a)
                    for b in succs[a]:
                        if not pmask[b] & ~new:
                            nr |= 1 << b
                    nxt[new] = (i, a, nr, psum + a)
            prefix |= 1 << (lev - 1)
            keys = list(nxt)
            if beam is not None and len(keys) > beam + 1:
                scored = sorted((step(m, nxt[m][1], cross[nxt[m][0]]), nxt[m][3], m) for m in keys if m != prefix)
                keys = [prefix] + [m for _, _, m in scored[:beam]]
            elif beam is None and len(masks) + len(keys) > max_states:
                return None
            cur = {}
            for m in sorted(keys, key=lambda m: (m != prefix, nxt[m][3], m)):
                i, a, nr, psum = nxt[m]
                masks.append(m)
                level.append(lev)
                tim.append(tim[i] + t_atom[a])
                upto.append(upto[i] + a_plain[a] + a_res[a] + (src_res if i == 0 else 0.0))
                past.append(past[i] + a_plain[a] + done(masks[i], a))
                cross.append(step(masks[i], a, cross[i]))
                cur[m] = (len(masks) - 1, nr, psum)
            base.append(cur[prefix][0])
        return masks, level, tim, upto, past, cross, base, True

    beam = None
    out = run(None)
    if out is None:
        beam = max(0, max_states // (n + 1) - 1)
        out = run(beam)
    masks, level, tim, upto, past, cross, base, complete = out
    complete = complete and masks[-1] == full
    if complete and cg.loss:                 # the loss stage runs with the last stage (models.pipeline)
        loss = cg.loss
        tim[-1] += float(loss.get("uf", 0.0)) + float(loss.get("ub", 0.0))
        extra = float(loss.get("wabar", 0.0)) + float(loss.get("weights", 0.0))
        upto[-1] += extra
        past[-1] += extra
    group_of = {v: c for c, g in enumerate(cg.base_groups) for v in g}
    ends = np.cumsum(np.bincount([group_of[nodes[0]] for nodes in atoms], minlength=len(cg.base_groups)))
    cuts = [base[0]] + [base[int(e)] for e in ends if int(e) < len(base)]
    return AntichainStates(atoms, masks, np.asarray(level), np.asarray(tim), np.asarray(upto), np.asarray(past),
                           np.asarray(cross), exact=beam is None, beam=beam, complete=complete, base=base, cuts=cuts)


def dag_partitions(st: AntichainStates, P: int, targets: Sequence[float], noam: int, bandwidth: float | None,
                   *, deadline: float = math.inf, states: Sequence[int] | None = None
                   ) -> list[tuple[float, tuple[int, ...]] | None]:
    """PipeDream's DP over the states ``st`` (module docstring) for every memory target of
    ``targets`` at once: for each target, ``(estimate, (0, i_1, ..., last))``, the slowest stage's
    estimated time and the states that bound the stages (the first is the empty state, the last
    the full one), or None when no partition into at most P stages satisfies the target. ``states``
    restricts the DP to those states (e.g. ``st.cuts``: the chain planner on the base chain's cuts).
    Ties go to fewer stages, then to the earliest states. O(P S^2 T); None for every target when
    ``deadline`` comes first."""
    T = np.asarray(targets, dtype=float)
    nt = len(T)
    S = len(st)
    if not st.complete:
        return [None] * nt
    sub = st.subsets(deadline)
    if sub is None:
        return [None] * nt
    allowed = np.ones(S, dtype=bool)
    if states is not None:
        allowed[:] = False
        allowed[list(states)] = True
        allowed[0] = allowed[S - 1] = True
    comm = np.zeros(S) if not bandwidth else 2.0 * st.cross / float(bandwidth)
    comm[0] = 0.0
    INF = math.inf
    best = np.full((P + 1, S, nt), INF)
    arg = np.full((P + 1, S, nt), -1, dtype=np.int64)
    best[0, 0, :] = 0.0
    for s in range(1, P + 1):
        inflight = max(1, noam - (s - 1))
        js = [S - 1] if s == P else [j for j in range(1, S) if allowed[j]]
        for j in js:
            if _expired(deadline):
                return [None] * nt
            ks = sub[j]
            ks = ks[allowed[ks]]
            prev = best[s - 1, ks, :]
            live = np.isfinite(prev).any(axis=1)
            if not live.any():
                continue
            ks, prev = ks[live], prev[live]
            v = np.maximum(prev, np.maximum(st.time[j] - st.time[ks], comm[ks])[:, None])
            mem = inflight * (st.upto[j] - st.past[ks])
            v[mem[:, None] > T[None, :]] = INF
            i = np.argmin(v, axis=0)
            best[s, j, :] = v[i, np.arange(nt)]
            arg[s, j, :] = np.where(np.isfinite(best[s, j, :]), ks[i], -1)
    out: list[tuple[float, tuple[int, ...]] | None] = []
    for t in range(nt):
        ks = [s for s in range(1, P + 1) if best[s, S - 1, t] < INF]
        if not ks:
            out.append(None)
            continue
        s = min(ks, key=lambda s: (best[s, S - 1, t], s))
        value = float(best[s, S - 1, t])
        path, j = [S - 1], S - 1
        while s > 0:
            j = int(arg[s, j, t])
            path.append(j)
            s -= 1
        out.append((value, tuple(reversed(path))))
    return out


@dataclass
class DagPoint(Point):
    """A simulated point of the antichain planner: ``stages`` are layer ranges of ``chain`` (the base
    chain cut again at the partition's antichains, :func:`models.cost_graph.refine`), ``groups``
    its groups, ``cuts`` the partition's boundaries as state indices of the sweep's states."""

    chain: Chain | None = None
    groups: list[list[Hashable]] | None = None
    cuts: tuple[int, ...] = ()
    estimate: float | None = None


class DagPoints(Points):
    """The points of :func:`dag_points`, with ``states`` (the :class:`AntichainStates` planned over)."""

    states: AntichainStates | None = None


def dag_chain(cg: CostGraph, st: AntichainStates, cuts: Sequence[int]) -> tuple[Chain, list[list[Hashable]],
                                                                                 list[tuple[int, int]]]:
    """The chain on which the partition bounded by the states ``cuts`` (0, ..., last) is simulated,
    its groups, and the partition's layer ranges on it (:func:`models.cost_graph.refine`)."""
    stages = []
    for i, j in zip(cuts, cuts[1:]):
        inner = st.masks[j] & ~st.masks[i]
        stages.append([v for a, nodes in enumerate(st.atoms) if inner >> a & 1 for v in nodes])
    groups, counts = refine(cg.base_groups, stages)
    chain = chain_of(cg, groups)
    return chain, groups, stage_ranges(counts)


def dag_points(cg: CostGraph, P: int, *, bandwidth: float | None = None, memory_model: str = "autograd",
               n_targets: int = 24, noams: Sequence[int] | None = None, n_batches: int = 500,
               max_states: int = MAX_STATES, time_limit: float | None = None,
               states: AntichainStates | None = None) -> DagPoints:
    """Paper 003's "exhaustive" PipeDream approach over the antichain DAG: for a geometric grid of
    ``n_targets`` memory targets (from the smallest atom's activations + weights to all of them
    times the largest NOAM, as :func:`~memplan.baselines.pipeline.pipedream_points`) and every NOAM
    of ``noams`` (default 1..2P), PipeDream's partition (:func:`dag_partitions`), simulated with
    eager 1F1B (``n_batches`` mini-batches) on its chain (:func:`dag_chain`) under
    ``memory_model``. ``states``: computed beforehand (else :func:`antichain_states` with
    ``max_states``). ``time_limit`` bounds the whole call (``complete`` False when it ran out)."""
    deadline = _deadline(time_limit)
    st = states if states is not None else antichain_states(cg, max_states=max_states, deadline=deadline)
    noams = list(noams) if noams is not None else list(range(1, 2 * P + 1))
    per_atom = list(np.diff(st.upto[st.base]))
    lo = max(min(per_atom), 1e-12) if per_atom else 1e-12
    hi = max(float(st.upto[-1]) * max(noams), lo * 2)
    targets = np.geomspace(lo, hi, n_targets)
    cands: list[tuple[tuple[int, ...], int, float, float, int, int]] = []
    stopped = not st.complete
    for a, noam in enumerate(noams):
        if stopped or _expired(deadline):
            stopped = True
            break
        res = dag_partitions(st, P, targets, noam, bandwidth, deadline=deadline)
        if _expired(deadline):
            stopped = True
            break
        for b, r in enumerate(res):
            if r is not None:
                cands.append((r[1], noam, float(targets[b]), r[0], b, a))
    first: dict[tuple, int] = {}
    for i, (cuts, noam, *_rest) in enumerate(cands):
        first.setdefault((cuts, noam), i)
    keep = sorted(first.values())
    order = sorted(keep, key=lambda i: (-cands[i][4], cands[i][5]))
    built: dict[tuple[int, ...], tuple[Chain, list, list, TaskData]] = {}
    done: dict[int, DagPoint] = {}
    for i in order:
        if _expired(deadline):
            break
        cuts, noam, target, est, _, _ = cands[i]
        if cuts not in built:
            chain, groups, ranges = dag_chain(cg, st, cuts)
            built[cuts] = (chain, groups, ranges, task_data(chain, bandwidth, memory_model))
        chain, groups, ranges, td = built[cuts]
        r = simulate_eager(td, ranges, noam, n_batches)
        done[i] = DagPoint("pipedream-dag", list(ranges), noam, r.period, r.peak_memory, r, target, memory_model,
                           chain=chain, groups=groups, cuts=cuts, estimate=est)
    out = DagPoints(done[i] for i in keep if i in done)
    out.complete = not stopped and len(done) == len(keep)
    out.candidates = len(keep)
    out.states = st
    return out
