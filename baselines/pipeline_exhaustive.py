"""Exhaustive search over periodic patterns of paper 003 (tiny chains; a test oracle for the ILP).

A pattern (Definition 1, normalized as the ILP does: every task and communication *ends* within
[0, T]) is described by a finite **structure** plus real start times:

* the allocation of layers to at most P GPUs (F_l and B_l together), up to renaming of GPUs;
* on every GPU, the order of its tasks within the period (by end time), and on every link the order
  of its communications;
* for every communication between two GPUs, the shifts ``v`` (task -> communication) and ``~v``
  (communication -> next task), each in {0, 1, 2}: with ends in [0, T] and starts >= -duration,
  shift 2 always suffices. A communication of zero duration (no bandwidth limit) occupies no link
  and its buffers do not depend on when it happens, so it is put at the end of its producer and the
  edge gets one shift in {0, 1, 2}. On one GPU the shift of an edge T_m -> T_{m+1} follows from the
  order (0 when T_{m+1} comes later in the period, else 1), because tasks of positive duration
  cannot overlap.

For a fixed structure every constraint is linear in (tau, tau_c, T): the order of consecutive items,
the window of each resource (first start + T >= last end), ends in [0, T], and the dependencies
``tau_{m+1} + s T >= tau_m + d_m``. The smallest T of a structure is one small LP; the LPs of many
structures are solved at once as one block-diagonal LP (minimizing the sum of the periods minimizes
each). A structure is skipped without an LP when its shift-0 precedences contain a cycle (then it is
infeasible: every such cycle has positive length).

Memory. On a GPU, what is alive during a task instance depends only on the order of the GPU's tasks
and on the mini-batch offsets of its tasks, and grows with every shift (section 4.2); so the
pattern at the LP optimum of a structure, whose smallest shifts (Lemma 1, as the simulator computes
them) are at most the structure's, needs at most the structure's memory. Hence, scanning structures
by increasing LP period and *replaying each optimum in the simulator* (:mod:`models.pipeline`),
the first whose measured memory fits M has the smallest period of any pattern within M: the optimal
pattern's own structure appears in the scan with no larger period and no larger memory. The search
covers every pattern with ends in [0, T] (it does not impose the ILP's ``tau_1 = 0``).

The argument needs positive task durations (zero durations create ties that the order cannot
describe); :func:`exhaustive_structures` refuses chains without them. Size: with a bandwidth limit,
L = 3 and P = 2, the non-contiguous allocation {1, 3} | {2} has four communications on one link,
24 x 2 x 24 x 3^8 structures, too many; restrict the search with ``allocs`` or drop the bandwidth
limit (then 24 x 2 x 3^4).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from memplan.models.pipeline import Pattern, SimResult, TaskData, simulate_pattern


@dataclass
class Structure:
    """One structure (module docstring). ``gpu[m-1]`` is the GPU of T_m; ``orders`` the task order of
    each GPU; ``link_orders`` the communication order of each link; ``shift[m] = (v, ~v)`` for every
    communication m between two GPUs."""

    gpu: tuple[int, ...]
    orders: tuple[tuple[int, ...], ...]
    link_orders: tuple[tuple[int, ...], ...]
    shift: dict[int, tuple[int, int]]
    direct: dict[int, int]          # communications of zero duration: the shift of the edge


def allocations(L: int, P: int) -> Iterator[tuple[int, ...]]:
    """Every allocation of layers 1..L to at most P GPUs up to renaming (restricted growth strings)."""
    def rec(prefix: list[int], used: int):
        if len(prefix) == L:
            yield tuple(prefix)
            return
        for g in range(min(used + 1, P)):
            yield from rec(prefix + [g], max(used, g + 1))
    yield from rec([0], 1)


def exhaustive_structures(td: TaskData, P: int, allocs: Sequence[Sequence[int]] | None = None
                          ) -> Iterator[Structure]:
    """Every structure of every allocation (or of ``allocs``, layer l's GPU at index l-1)."""
    L, n = td.L, td.n
    if np.any(td.d[1:] <= 0):
        raise ValueError("the exhaustive pattern search needs positive task durations")
    for lg in (allocs if allocs is not None else allocations(L, P)):
        gpu = tuple(int(lg[td.layer(m) - 1]) for m in range(1, n + 1))
        cross = [m for m in range(1, n) if gpu[m - 1] != gpu[m] and td.dc[m] > 0]
        free = [m for m in range(1, n) if gpu[m - 1] != gpu[m] and td.dc[m] <= 0]
        gpus = sorted(set(gpu))
        tasks_on = [[m for m in range(1, n + 1) if gpu[m - 1] == g] for g in gpus]
        links: dict[tuple[int, int], list[int]] = {}
        for m in cross:
            links.setdefault((min(gpu[m - 1], gpu[m]), max(gpu[m - 1], gpu[m])), []).append(m)
        link_items = list(links.values())
        for orders in itertools.product(*(itertools.permutations(t) for t in tasks_on)):
            for lorders in itertools.product(*(itertools.permutations(c) for c in link_items)):
                for sh in itertools.product(range(3), repeat=2 * len(cross) + len(free)):
                    yield Structure(gpu, orders, lorders,
                                    {m: (sh[2 * i], sh[2 * i + 1]) for i, m in enumerate(cross)},
                                    {m: sh[2 * len(cross) + i] for i, m in enumerate(free)})


def _rows(td: TaskData, s: Structure):
    """The LP of a structure as difference rows ``x_a - x_b - k T <= -c`` over local variables
    (tau_1..tau_n, then tau_c of the cross communications, then T; index -1 = constant 0).
    Returns (rows, n_vars, index of tau_c) or None when the shift-0 precedences have a cycle."""
    n = td.n
    cross = sorted(s.shift)
    ci = {m: n + i for i, m in enumerate(cross)}
    Tv = n + len(cross)
    dur = {m - 1: td.d[m] for m in range(1, n + 1)}
    dur.update({ci[m]: td.dc[m] for m in cross})
    rows = []          # (a, b, k, c): x_a + c <= x_b + k T   (a or b may be -1: the constant 0)
    for v, du in dur.items():
        rows.append((-1, v, 0, -du))    # end >= 0:  0 - du <= x_v
        rows.append((v, -1, 1, du))     # end <= T:  x_v + du <= 0 + T
    seqs = [[m - 1 for m in seq] for seq in s.orders] + [[ci[m] for m in seq] for seq in s.link_orders]
    for idx in seqs:
        for p, q in zip(idx, idx[1:]):
            rows.append((p, q, 0, dur[p]))
        rows.append((idx[-1], idx[0], 1, dur[idx[-1]]))     # window of length T
    pos = {m: i for seq in s.orders for i, m in enumerate(seq)}
    for m in range(1, n):
        if m in s.shift:
            v, vt = s.shift[m]
            rows.append((m - 1, ci[m], v, dur[m - 1]))
            rows.append((ci[m], m, vt, dur[ci[m]]))
        elif m in s.direct:
            rows.append((m - 1, m, s.direct[m], dur[m - 1]))
        else:
            rows.append((m - 1, m, 0 if pos[m + 1] > pos[m] else 1, dur[m - 1]))
    # shift-0 precedences must be acyclic (every such cycle has positive length)
    succ: dict[int, list[int]] = {}
    indeg = {v: 0 for v in dur}
    for a, b, k, _ in rows:
        if k == 0 and a >= 0 and b >= 0:
            succ.setdefault(a, []).append(b)
            indeg[b] += 1
    stack = [v for v, d in indeg.items() if d == 0]
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        for w in succ.get(v, ()):
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    if seen < len(dur):
        return None
    return rows, Tv + 1, ci


def solve_structures(td: TaskData, structures: Sequence[Structure], batch: int = 400):
    """The LP optimum of every structure: list of (T, x, ci) or None (infeasible), in input order."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    out: list = [None] * len(structures)
    built = []
    for i, s in enumerate(structures):
        r = _rows(td, s)
        if r is not None:
            built.append((i, *r))
    for b0 in range(0, len(built), batch):
        chunk = built[b0:b0 + batch]
        ri, ci_, val, rhs, cost = [], [], [], [], []
        off, row = 0, 0
        offs = []
        for _, rows, nv, _ in chunk:
            offs.append(off)
            T = off + nv - 1
            for a, b, k, c in rows:
                if a >= 0:
                    ri.append(row); ci_.append(off + a); val.append(1.0)
                if b >= 0:
                    ri.append(row); ci_.append(off + b); val.append(-1.0)
                if k:
                    ri.append(row); ci_.append(T); val.append(-float(k))
                rhs.append(-c)
                row += 1
            c = np.zeros(nv)
            c[-1] = 1.0
            cost.append(c)
            off += nv
        A = coo_matrix((val, (ri, ci_)), shape=(row, off)).tocsr()
        bounds = [(None, None)] * off
        for o, (_, _, nv, _) in zip(offs, chunk):
            bounds[o + nv - 1] = (0, None)
        res = linprog(np.concatenate(cost), A_ub=A, b_ub=np.array(rhs), bounds=bounds, method="highs",
                      options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
        if res.status != 0:
            raise RuntimeError(f"exhaustive pattern search: batch LP failed ({res.message})")
        for o, (i, _, nv, ci) in zip(offs, chunk):
            x = res.x[o:o + nv]
            out[i] = (float(x[-1]), x, ci)
    return out


def to_pattern(td: TaskData, s: Structure, x: np.ndarray, ci: dict[int, int]) -> Pattern:
    n = td.n
    tau = [float(x[m - 1]) for m in range(1, n + 1)]
    tau_c = [float(x[ci[m]]) if m in ci else tau[m - 1] + td.d[m] for m in range(1, n)]
    return Pattern(gpu=list(s.gpu), tau=tau, tau_c=tau_c, T=float(x[-1]), meta={"method": "exhaustive"})


@dataclass
class Exhaustive:
    """All structures of a chain sorted by LP period; :meth:`best` answers memory limits."""

    td: TaskData
    P: int
    candidates: list[tuple[float, Structure, np.ndarray, dict]]
    _memo: dict
    _replays: dict = field(default_factory=dict)    # pattern (gpu, tau, tau_c, T) -> its replay

    def replay(self, i: int) -> SimResult:
        """Candidate i's pattern and its replay. Many structures share their LP optimum (on the
        tests' chains 7344 structures give 900 distinct patterns): a pattern equal to one already
        replayed, float for float, reuses that replay (the simulator is a function of the pattern)."""
        if i not in self._memo:
            T, s, x, ci = self.candidates[i]
            pat = to_pattern(self.td, s, x, ci)
            key = (tuple(pat.gpu), tuple(pat.tau), tuple(pat.tau_c), pat.T)
            if key not in self._replays:
                self._replays[key] = simulate_pattern(pat, self.td, gpus=self.P)
            self._memo[i] = (pat, self._replays[key])
        return self._memo[i]

    def best(self, memory: float | None) -> tuple[Pattern, SimResult] | None:
        """The pattern of smallest period whose replayed memory fits (None: no pattern fits)."""
        for i in range(len(self.candidates)):
            pat, r = self.replay(i)
            if memory is None or r.peak_memory <= memory * (1 + 1e-9):
                return pat, r
        return None


    def front(self) -> list[tuple[float, float]]:
        """The (period, memory) Pareto front: every replayed optimum that needs less memory than all
        structures of smaller period (replays every structure)."""
        out: list[tuple[float, float]] = []
        for i in range(len(self.candidates)):
            pat, r = self.replay(i)
            if not out or r.peak_memory < out[-1][1] * (1 - 1e-12):
                out.append((pat.T, r.peak_memory))
        return out


def exhaustive_search(td: TaskData, P: int, *, allocs: Sequence[Sequence[int]] | None = None) -> Exhaustive:
    """Enumerate and solve every structure (module docstring) of the task data ``td``
    (``task_data(chain, bandwidth)``) on at most P GPUs; returns the sorted candidates.

    Examples
    --------
    Two layers on one GPU: the only pattern runs everything in sequence.

    >>> from memplan.models.chain import Chain
    >>> from memplan.models.pipeline import task_data
    >>> td = task_data(Chain.from_stages(uf=[1.0, 2.0], ub=[3.0, 4.0], wa=[1.0] * 3, weights=[0.0] * 2), 1.0)
    >>> pat, sim = exhaustive_search(td, 1).best(None)
    >>> float(pat.T), float(sim.period)
    (10.0, 10.0)
    """
    structs = list(exhaustive_structures(td, P, allocs))
    sols = solve_structures(td, structs)
    cands = sorted(((sol[0], s, sol[1], sol[2]) for s, sol in zip(structs, sols) if sol is not None),
                   key=lambda c: c[0])
    return Exhaustive(td, P, cands, {})
