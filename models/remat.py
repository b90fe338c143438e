"""Re-materialization sequences and their simulator (paper 004, Table 1 and Definitions 3.1-3.4).

A sequence is a list of ``(op, l)`` with ``op`` in ``F_all``, ``F_ck``, ``F_none``, ``B`` and ``l`` in
``1..L+1`` (the loss is stage L+1). The simulator is the single definition of the problem's semantics;
every DP, heuristic and MILP is checked against it.

Memory state. ``chain.resident`` (tensors crossing two or more cuts, see :class:`models.chain.Chain`)
is held for the whole step and added to every memory value, but for the parts whose lifetime the chain
gives: ``chain.resident_grads`` (a gradient, from its last reader's B to its producer's) and
``chain.resident_values`` (a value with a storage of its own, from its producer's forward to its last
reader's forward, :func:`value_drops`, or to its producer's B), charged only while they exist.
For each index l we keep what is stored of the forward value: nothing, ``a^l``, or
``abar^l`` (which contains ``a^l``), and whether ``delta^l`` is stored. The initial state holds ``a^0``
and ``delta^{L+1}`` (the seed gradient, as the DPs of paper 004 count ``omega_delta^{L+1}`` from the
start); a valid sequence ends holding ``delta^0``.

Operations (Table 1; "memory of an operation" = everything stored before it + its outputs + its
overhead, Definitions 3.3 and 3.4):

- ``F_all^l``: needs ``a^{l-1}`` (or ``abar^{l-1}``); produces ``abar^l``, keeps its input.
  Memory during = stored + omega_abar^l + o_f^l.
- ``F_ck^l``: needs ``a^{l-1}``; produces ``a^l``, keeps its input. Memory = stored + omega_a^l + o_f^l.
- ``F_none^l``: needs ``a^{l-1}``; produces ``a^l`` and discards ``a^{l-1}`` (after the operation).
  Memory = stored + omega_a^l + o_f^l. Table 1 defines F_none only on ``a^{l-1}``: applying it
  when ``abar^{l-1}`` is stored is rejected (abar is only released by its backward step, Lemma 4.6).
- ``B^l``: needs ``delta^l``, ``abar^l`` and ``a^{l-1}`` (or ``abar^{l-1}``); produces ``delta^{l-1}``;
  frees ``delta^l`` and ``abar^l``, and frees ``a^{l-1}`` when only ``a^{l-1}`` (not ``abar^{l-1}``)
  is stored (Table 1, second line: ``abar^{l-1}`` stays for ``B^{l-1}``).
  Memory = stored + omega_delta^{l-1} + o_b^l.

Recomputing a value that is already in memory is rejected: ``F_ck^l`` and ``F_none^l`` need a^l
absent (neither a^l nor abar^l stored), ``F_all^l`` needs abar^l absent (over a stored a^l it
computes the rest of abar^l and replaces a^l by abar^l). Our reading of Table 1: an operation
produces its output; without this rule ``F_none^l`` over a stored abar^l would act as a free
"delete a^{l-1}" operation that the model does not have (the paper's only deletions are the
implicit ones of F_none and B), and such sequences beat the optimal DP of Theorem 4.7.

The makespan is the sum of the operations' times (Definition 3.2).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np

from .chain import Chain

OPS = ("F_all", "F_ck", "F_none", "B")


def store_all_ops(L: int) -> list[tuple[str, int]]:
    """The store-all sequence of a chain of L stages (plain autograd: every forward with autograd
    recording, then every backward): ``F_all^1..F_all^{L+1}, B^{L+1}..B^1``."""
    return [("F_all", l) for l in range(1, L + 2)] + [("B", l) for l in range(L + 1, 0, -1)]


def turn_ops(L: int) -> list[tuple[str, int]]:
    """The sequence that calibrates the no-grad forward times and the turn cost (L turns, each stage
    recomputed with a tape right before its backward step):

    - a warm-up sweep without a tape, ``F_ck^1 F_∅^2 .. F_∅^L`` (a recomputation's first run of the step;
      it keeps a^0 and a^L);
    - the no-grad forwards that are timed, ``F_ck^1 .. F_ck^{L-1}`` (each stage's second no-grad run of
      the step, as in a plan's repeated sweeps), then ``F_all^{L+1}, B^{L+1}``;
    - ``F_all^l, B^l`` for l = L..1.

    Why the warm-up: on a CPU a stage's first no-grad run of the step is slower than its repeats (its
    weights and buffers are cold; the previous step's backward touched everything else): on a 2-layer
    Llama of width 96 the first sweep took 1.06-2.5x the second, while a third and fourth sweep took
    what the second did. Rotor's plans at low memory run the early stages without a tape many times
    per step; calibrated on the first run (with a second cause, ``models.runtime.time_in_context``'s
    whole runs on multi-tensor cuts), recompute-all ran 14-22% faster than predicted there
    (``runtime_check --preset cpu-tiny-multi``). Stage L's no-grad time is still a first run, at the
    end of the warm-up sweep (a^L is kept from there: recomputing a stored value is not an operation
    of the model)."""
    if L < 1:
        return [("F_all", 1), ("B", 1)]
    ops = [("F_ck", 1)] + [("F_none", l) for l in range(2, L + 1)]
    ops += [("F_ck", l) for l in range(1, L)] + [("F_all", L + 1), ("B", L + 1)]
    for l in range(L, 0, -1):
        ops += [("F_all", l), ("B", l)]
    return ops


def turn_ops_no_grad(L: int) -> dict[int, int]:
    """``{l: position}``: the operation of :func:`turn_ops` whose time is stage l's no-grad forward
    time: its second run of the step (``F_ck^l``, position L - 1 + l) for l < L; for l = L its only
    one, at the end of the warm-up sweep (position L - 1: ``F_∅^L``, or ``F_ck^1`` when L = 1), a first
    run, so stage L alone keeps the cold calibration. The warm-up sweep's other operations are timed
    but belong to no model term. Empty for L = 0."""
    if L < 1:
        return {}
    return {**{l: L - 1 + l for l in range(1, L)}, L: L - 1}


def turns(ops: Sequence[tuple[str, int]]) -> int:
    """The turns of a sequence: a B followed by a forward (the backward call stops, forwards run, another
    call starts)."""
    return sum(1 for a, b in zip(ops, ops[1:]) if a[0] == "B" and b[0] != "B")


_PRETTY = {"F_all": "F_all", "F_ck": "F_ck", "F_none": "F_∅", "B": "B"}
NONE, A, ABAR = 0, 1, 2


class InvalidSequence(ValueError):
    """The sequence is not valid; ``position`` is the 0-based index of the offending operation."""

    def __init__(self, position: int, op: tuple[str, int] | None, reason: str):
        where = f"operation {position} ({op[0]}^{op[1]})" if op is not None else f"end of sequence"
        super().__init__(f"invalid sequence at {where}: {reason}")
        self.position, self.op, self.reason = position, op, reason


@dataclass
class RematSchedule:
    """A re-materialization sequence in the papers' notation."""

    ops: list[tuple[str, int]]

    def __post_init__(self) -> None:
        self.ops = [(str(op), int(l)) for op, l in self.ops]

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self):
        return iter(self.ops)

    def to_json(self) -> list[list]:
        return [[op, l] for op, l in self.ops]

    @classmethod
    def from_json(cls, data: Iterable[Sequence]) -> "RematSchedule":
        """From ``[[op, stage], ...]``; a stage that is not a whole number (``1.5``, ``true``) raises
        ValueError (``int()`` had cut 1.5 to stage 1 silently)."""
        pairs = []
        for op, l in data:
            if isinstance(l, bool) or not isinstance(l, numbers.Real) or l != int(l):
                raise ValueError(f"stage {l!r} of {op!r} is not a whole number")
            pairs.append((op, int(l)))
        return cls(pairs)

    def notation(self, compress: bool = True) -> str:
        """``F_ck^1 F_∅^2 F_∅^3 F_all^4..F_all^7 B^7..B^4 ...``: runs of the same op on consecutive
        stages are written ``first..last`` when ``compress``."""
        out: list[str] = []
        i = 0
        ops = self.ops
        while i < len(ops):
            op, l = ops[i]
            j = i
            step = -1 if op == "B" else 1
            while compress and j + 1 < len(ops) and ops[j + 1][0] == op and ops[j + 1][1] == ops[j][1] + step:
                j += 1
            name = _PRETTY[op]
            if j - i >= 2:
                out.append(f"{name}^{l}..{name}^{ops[j][1]}")
            else:
                out.extend(f"{_PRETTY[o]}^{k}" for o, k in ops[i:j + 1])
            i = j + 1
        return " ".join(out)

    def count(self, op: str) -> int:
        return sum(1 for o, _ in self.ops if o == op)


@dataclass
class RematReplay:
    """What the simulator measured: makespan (s), peak memory (bytes), and per-operation traces."""

    makespan: float
    peak_memory: float
    peak_position: int
    recompute_time: float
    memory_during: list[float] = field(default_factory=list)
    memory_after: list[float] = field(default_factory=list)


def free_backward_model(chain: Chain) -> dict:
    """The keywords of :func:`simulate_remat` that replay ``chain`` as the executor runs without its
    holds (``models.runtime.execute(..., hold=False)``, what autograd frees), from the profile's
    ``free_backward`` record (:func:`models.profiler.profile_chain` with ``free_backward=True``):
    ``b_overhead`` and ``release``. Empty for a chain without it: paper 004's replay."""
    chain = getattr(chain, "chain", chain)       # an Instance (memplan.load_instance) as its chain
    rec = chain.provenance.get("free_backward") if isinstance(chain.provenance, dict) else None
    if not rec:
        return {}
    if not isinstance(rec, dict) or not isinstance(rec.get("ob"), list):
        raise ValueError(f"free_backward: {rec!r:.40} is not a record with a list 'ob' (one overhead per stage)")
    ob = [float(v) for v in rec["ob"]]
    if len(ob) != chain.L + 2:
        raise ValueError(f"free_backward: {len(ob)} backward overheads for a chain of L + 2 = {chain.L + 2} entries")
    if not all(np.isfinite(ob)):
        raise ValueError(f"free_backward.ob: {[v for v in ob if not np.isfinite(v)][0]} is not a number of bytes")
    release = rec.get("release", [])
    # stages 1..L+1, each once: an edited -5 had indexed a^{L-3} from the end and 99 raised IndexError
    if not isinstance(release, list) or not all(isinstance(l, int) and not isinstance(l, bool) for l in release):
        raise ValueError(f"free_backward.release = {release!r:.40}: not a list of stage numbers")
    bad = [l for l in release if not 1 <= l <= chain.L + 1]
    if bad or len(set(release)) != len(release):
        what = (f"stage {bad[0]} is outside 1..{chain.L + 1} (L = {chain.L})" if bad else
                f"stage {next(l for l in release if release.count(l) > 1)} is given twice")
        raise ValueError(f"free_backward.release = {release!r:.40}: {what}")
    return {"b_overhead": ob, "release": list(release)}


def free_backward_chain(chain: Chain) -> Chain:
    """``chain`` for the solvers to plan the executor without its holds: every B^l's overhead is what
    :func:`free_backward_model`'s replay charges it, ``b_overhead[l]`` less ``a^l`` where stage l does
    not save its output (``release``), at least 0 (a chain's overheads are not negative; where the free
    replay's is, B^l costs less than the planning chain says). Every operation's memory in this chain's
    replay is then at least the free replay's (equal where no overhead was raised to 0), so a plan
    that fits a limit here fits it executed without holds; its exact peak is the free replay's. The
    chain itself where it has no ``free_backward`` record."""
    chain = getattr(chain, "chain", chain)       # an Instance (memplan.load_instance) as its chain
    free = free_backward_model(chain)
    if not free:
        return chain
    ob = np.asarray(free["b_overhead"], dtype=float).copy()
    for l in free["release"]:
        ob[l] -= chain.wa[l]
    ob[0] = 0.0
    raised = int(np.sum(ob < 0))
    return replace(chain, ob=np.maximum(ob, 0.0), provenance={
        **chain.provenance, "planned_free_backward": (
            "ob: the free replay's backward overheads (models.remat.free_backward_chain), "
            f"{raised} raised to 0")})


def value_drops(ops: Sequence[tuple[str, int]], k: int, readers: Iterable[int]) -> frozenset[int]:
    """The positions in ``ops`` after which a resident value made by stage ``k`` and read by the stages
    ``readers`` (:attr:`models.chain.Chain.resident_values`) is let go: a forward of stage k or of a
    reader after which no reader runs a forward before stage k's next forward (or before the end).
    Nothing needs the value then: no backward saves it, and the next reader's forward, if any, comes
    after stage k has made it again. The executor (:func:`models.runtime.execute`) and
    :func:`simulate_remat` both follow it. O(len(ops)).

    >>> sorted(value_drops([("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)], 1, [3]))
    [2]
    >>> sorted(value_drops([("F_ck", 1), ("F_none", 2), ("F_all", 3), ("F_all", 1), ("F_all", 2)], 1, [3]))
    [2, 3]
    """
    rs = set(readers)
    touch = [p for p, (op, l) in enumerate(ops) if op != "B" and (l == k or l in rs)]
    return frozenset(p for p, q in zip(touch, touch[1:] + [None]) if q is None or ops[q][1] == k)


def _b_overheads(values: Sequence[float], L: int) -> np.ndarray:
    """``simulate_remat``'s ``b_overhead`` as an array of L + 2 finite numbers (a ValueError otherwise)."""
    arr = np.asarray(values, dtype=float)
    if arr.shape != (L + 2,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"b_overhead: give L + 2 = {L + 2} finite numbers (bytes; index 0 unused)")
    return arr


def simulate_remat(chain: Chain, schedule: RematSchedule | Sequence[tuple[str, int]],
                   memory_limit: float | None = None, *, tol: float = 1e-9, one_overhead: bool = False,
                   b_overhead: Sequence[float] | None = None, release: Iterable[int] | None = None) -> RematReplay:
    """Replay a sequence; return makespan and peak memory, or raise :class:`InvalidSequence`.

    With ``memory_limit``, an operation whose memory exceeds it is rejected (relative tolerance
    ``tol`` for float sizes). The sequence must end with ``delta^0`` computed. Times and sizes in
    the result are Python floats (seconds, bytes).

    Each forward is charged its own overhead (``chain.of_all`` for F_all, ``chain.of_ng`` for F_ck and
    F_none), what the executors hold and what the solvers plan with. ``one_overhead=True`` charges the
    papers' one ``o_f`` (``chain.of``, the larger of the two) for every forward instead: the replay of
    papers 002/004 exactly, an upper bound of the default's peak.

    Times: F_all^l takes ``chain.uf[l]``, F_ck^l and F_none^l ``chain.ufn[l]`` (the no-grad forward's
    own time, ``uf`` unless the chain gives ``uf_ng``), B^l ``chain.ub[l]``, and a forward right after a
    B (a turn) ``chain.u_turn`` more (0 unless given; see :mod:`memplan.models.chain`). A chain without
    them is timed as in the papers.

    The executor without its holds (``b_overhead`` and ``release``, both from
    :func:`free_backward_model`; :func:`free_backward_chain` plans with it): paper 004's B^l keeps
    delta^l and abar^l until it ends, and ``chain.ob[l]`` is measured so; autograd lets them go inside
    B^l once its first operations have used them. ``b_overhead[l]`` is B^l's peak above everything
    before it, less delta^{l-1}, measured with nothing else holding them (below zero where they go
    before the peak); ``release``: the stages l whose output their own backward does not need (a
    concatenation, a sum; the next stage saves it): the executor holds a^l, with abar^l, until B^l
    starts and hands it to B^l's root, which keeps it only through the graph, so B^l is charged without
    it (``b_overhead[l]`` was measured so). Where B^{l+1} and B^l run in one call a^l goes inside
    B^{l+1}, once stage l+1's backward has used it, after B^{l+1}'s peak on every network measured.
    Checked against the executor without holds (``benchmarks/held_vs_free_peaks.py``, 48 plans of six
    networks, sequential and rotor): every peak within 8 bytes (the loss scalar). (Until 2026-11-29 a^l
    was released at the end of B^{l+1} only: a stage recomputed after B^{l+1}, the top of a segment,
    kept it in B^l, 0.4-2.7% over the run on 5 of the 48.)

    Examples
    --------
    Paper 004, section 3.2: the toy chain's optimal sequence at 90 MiB takes 47.42 ms and peaks at
    86.75 MiB, during B^5.

    >>> from memplan.models.instance import load_instance
    >>> chain, _ = load_instance("paper004_table2")
    >>> seq = RematSchedule.from_json([["F_ck", 1], ["F_none", 2], ["F_none", 3], ["F_all", 4], ["F_all", 5],
    ...     ["F_all", 6], ["F_all", 7], ["B", 7], ["B", 6], ["B", 5], ["B", 4], ["F_ck", 1], ["F_none", 2],
    ...     ["F_all", 3], ["B", 3], ["F_all", 1], ["F_all", 2], ["B", 2], ["B", 1]])
    >>> rep = simulate_remat(chain, seq, memory_limit=90 * 2**20)
    >>> round(rep.makespan * 1e3, 2), round(rep.peak_memory / 2**20, 2), seq.ops[rep.peak_position]
    (47.42, 86.75, ('B', 5))
    """
    ops = schedule.ops if isinstance(schedule, RematSchedule) else [(str(o), int(l)) for o, l in schedule]
    L = chain.L
    wa, wab, wd = chain.wa, chain.wabar, chain.wd
    # each forward's own overhead, or (one_overhead) the papers' one o_f for both
    of_all, of_ng = (chain.of, chain.of) if one_overhead else (chain.of_all, chain.of_ng)
    ufn, u_turn = chain.ufn, chain.u_turn
    prev_b = False                  # the operation before was a B: a forward now is a turn
    act = [NONE] * (L + 2)
    delta = [False] * (L + 2)
    gone: dict[int, tuple[int, str]] = {}   # index -> (position, op) that discarded a^index
    ob = chain.ob if b_overhead is None else _b_overheads(b_overhead, L)
    early = frozenset(int(l) for l in release or ())     # a^l not charged in B^l (see above)
    act[0] = A
    delta[L + 1] = True
    # resident tensors: charged for the whole step, but their gradients (chain.resident_grads) only from
    # the end of B^r (the first contribution, made inside B^r: in ob[r] where B^r's peak follows it)
    # to the end of B^k (their producer's backward)
    grads_from: dict[int, float] = {}
    grads_until: dict[int, float] = {}
    for g, k, r in chain.resident_grads:
        grads_from[r] = grads_from.get(r, 0.0) + g
        if k >= 1:
            grads_until[k] = grads_until.get(k, 0.0) + g
    # resident values with a storage of their own (chain.resident_values): only while they live, from
    # the end of a forward of their producer that makes them (inside it, they are in its o_f) to
    # value_drops (no backward saves them) or to the end of the producer's B (readers ())
    vals = chain.resident_values
    alive = [False] * len(vals)
    made: dict[int, list[int]] = {}
    dropped: dict[int, list[int]] = {}
    for i, (_, k, rs) in enumerate(vals):
        made.setdefault(k, []).append(i)
        ends = value_drops(ops, k, rs) if rs else [p for p, o in enumerate(ops) if o[0] == "B" and o[1] == k]
        for p in ends:
            dropped.setdefault(p, []).append(i)
    mem = wa[0] + wd[L + 1] + chain.resident - sum(grads_from.values()) - sum(b for b, _, _ in vals)
    peak, peak_pos = mem, -1
    makespan = 0.0
    computed_once = [False] * (L + 2)
    recompute = 0.0
    during, after = [], []
    limit = None if memory_limit is None else memory_limit * (1 + tol) + tol

    def size(l: int) -> float:
        return wab[l] if act[l] == ABAR else wa[l] if act[l] == A else 0.0

    def need_input(pos: int, op: tuple[str, int], l: int) -> None:
        if act[l - 1] == NONE:
            why = f"a^{l - 1} is not in memory"
            if l - 1 in gone:
                p, o = gone[l - 1]
                why += f" (discarded by {o} at operation {p})"
            raise InvalidSequence(pos, op, why)

    for pos, (op, l) in enumerate(ops):
        if op not in OPS:
            raise InvalidSequence(pos, (op, l), f"unknown operation {op!r} (expected one of {', '.join(OPS)})")
        if not 1 <= l <= L + 1:
            raise InvalidSequence(pos, (op, l), f"stage {l} is outside 1..{L + 1} (L = {L}, loss = L+1)")
        if delta[0]:
            raise InvalidSequence(pos, (op, l), "delta^0 is already computed; the sequence should have ended")
        if op == "B":
            if not delta[l]:
                raise InvalidSequence(pos, (op, l), f"delta^{l} is not in memory (B^{l + 1} has not run)"
                                      if l <= L else f"delta^{l} is not in memory")
            if act[l] != ABAR:
                raise InvalidSequence(pos, (op, l), f"abar^{l} is not in memory (needs F_all^{l} first)")
            need_input(pos, (op, l), l)
            # a^l of a stage that does not save it (release): the free executor hands it to B^l's root,
            # which keeps it only through the graph; B^l's overhead was measured with it gone
            cur = mem - (wa[l] if l in early else 0.0) + wd[l - 1] + ob[l]
            mem_after = mem - wd[l] - size(l) + wd[l - 1] + grads_from.get(l, 0.0) - grads_until.get(l, 0.0)
            act[l] = NONE
            delta[l] = False
            delta[l - 1] = True
            if act[l - 1] == A:
                mem_after -= wa[l - 1]
                act[l - 1] = NONE
                gone[l - 1] = (pos, f"B^{l}")
            dt = chain.ub[l]
        else:
            need_input(pos, (op, l), l)
            if op == "F_none" and act[l - 1] == ABAR:
                raise InvalidSequence(pos, (op, l), f"F_∅^{l} would discard abar^{l - 1}, which only "
                                      f"B^{l - 1} may release (Table 1 defines F_∅ on a^{l - 1} only)")
            if (op == "F_all" and act[l] == ABAR) or (op != "F_all" and act[l] != NONE):
                what = "abar" if act[l] == ABAR else "a"
                raise InvalidSequence(pos, (op, l), f"{what}^{l} is already in memory; recomputing a stored "
                                      f"value is not an operation of the model")
            out = wab[l] if op == "F_all" else wa[l]
            cur = mem + out + (of_all[l] if op == "F_all" else of_ng[l])
            old = size(l)
            new_state = ABAR if op == "F_all" else max(act[l], A)
            act[l] = new_state
            mem_after = mem - old + size(l)
            if op == "F_none":
                mem_after -= wa[l - 1]
                act[l - 1] = NONE
                gone[l - 1] = (pos, f"F_∅^{l}")
            dt = chain.uf[l] if op == "F_all" else ufn[l]
            if computed_once[l]:
                recompute += dt
            computed_once[l] = True
            if prev_b:              # only a re-materialization makes a turn: counted as recompute time
                dt += u_turn
                recompute += u_turn
            for i in made.get(l, ()):
                if not alive[i]:
                    alive[i] = True
                    mem_after += vals[i][0]
        for i in dropped.get(pos, ()):      # after a reader's or the producer's forward, or its B
            if alive[i]:
                alive[i] = False
                mem_after -= vals[i][0]
        if limit is not None and cur > limit:
            raise InvalidSequence(pos, (op, l), f"memory {cur:.6g} B exceeds the limit {memory_limit:.6g} B")
        if cur > peak:
            peak, peak_pos = cur, pos
        during.append(cur)
        mem = mem_after
        after.append(mem)
        makespan += dt
        prev_b = op == "B"
    if not delta[0]:
        last_b = min((l for o, l in ops if o == "B"), default=None)
        raise InvalidSequence(len(ops), None, "delta^0 was never computed"
                              + (f" (last backward step was B^{last_b})" if last_b else " (no backward step)"))
    return RematReplay(makespan=float(makespan), peak_memory=float(peak), peak_position=peak_pos,
                       recompute_time=float(recompute), memory_during=[float(x) for x in during],
                       memory_after=[float(x) for x in after])
