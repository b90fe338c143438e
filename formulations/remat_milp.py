"""``remat-milp``: a MILP that is exact for the re-materialization model of paper 004.

Paper 004 (Beaumont et al., "Optimal re-materialization strategies for heterogeneous chains"),
section 3.1: a chain of stages 1..L plus the loss L+1; operations ``F_all^l``, ``F_ck^l``,
``F_none^l``, ``B^l`` with the inputs/outputs of **Table 1**; the memory of an operation is what is
stored before it + its outputs + its overhead (**Definitions 3.3, 3.4**); the makespan is the sum of
the operations' times (**Definition 3.2**); problem Remat(L, M) is **Definition 3.5**. The executable
definition of those semantics is :func:`models.remat.simulate_remat`; every schedule this module
returns is replayed there.

Formulation: phases with one ascending forward sweep each
---------------------------------------------------------
**Phases (Definition 4.2).** Phase ``t`` (t = L+1, ..., 1) is everything that runs after ``B^{t+1}``
and up to and including ``B^t``. During phase t the only gradient stored is ``delta^t``, and (Table 1,
B^{t+1} frees abar^{t+1} and the plain a^t) nothing with an index above t is stored at its start, and
index t at most as ``abar^t``.

**Sweep.** Inside phase t the forward operations run in increasing stage order, each stage at most
once: binaries ``op[t, j, kind]`` for j = 1..t say whether/how F^j runs in the sweep of phase t.
The four kinds are the operations of Table 1 as ``simulate_remat`` allows them (an operation must
produce its output: recomputing a value already stored is not an operation of the model, except
F_all^j over a stored plain a^j, which completes it into abar^j):

=========  ===================  ============================  ===========================
kind       operation            needs (state of index j)      effect
=========  ===================  ============================  ===========================
``all``    ``F_all^j``          nothing stored at j           abar^j stored
``up``     ``F_all^j``          plain a^j stored              a^j replaced by abar^j
``ck``     ``F_ck^j``           nothing stored at j           a^j stored
``none``   ``F_none^j``         nothing stored at j           a^j stored, a^{j-1} freed
=========  ===================  ============================  ===========================

Every kind needs a^{j-1} or abar^{j-1} stored when it runs; ``none`` needs the *plain* a^{j-1}
(Table 1 defines F_none on a^{j-1} only). F_none^1 is never used (a^0 could not be recomputed, so
B^1 could never run). In phase t, stage t is only ``all`` (B^t needs abar^t; a plain a^t would be
useless once B^{t+1} has run).

**State.** ``x0[t,j]`` / ``xb0[t,j]`` (continuous, integral by the equations) say that a^j / abar^j
is stored at the start of phase t. Along the sweep, the state of index j is ``x0`` before F^j,
``x1 = x0 + ck + none - up`` / ``xb1 = xb0 + all + up`` after F^j, and
``x2 = x1 - none[j+1]`` / ``xb2 = xb1`` after F^{j+1}. B^t needs ``abar^t``
(``xb1[t,t] = 1``) and ``a^{t-1}`` or ``abar^{t-1}`` (``x2 + xb2 >= 1``), frees them (abar^{t-1} stays,
Table 1 second line); the next phase starts from ``x2``/``xb2`` with index t-1 reduced to its abar.

**Memory (Definitions 3.3 and 3.4).** For F^j in phase t:
``wd^t + wa^0 + sum_{k<j-1} size2[k] + size1[j-1] + sum_{k>=j} size0[k] + out_j + o_j <= M``
(stored before the operation + its output + its overhead; the input a^{j-1} is still stored while
F_none^j runs, as in Table 1). The forward overhead is each forward's own: ``o_j = o_f_all^j``
(:attr:`Chain.of_all`) for F_all (kinds ``all`` and ``up``, which store abar^j) and
``o_j = o_f_ng^j`` (:attr:`Chain.of_ng`) for the no-grad F_ck / F_none (kinds ``ck`` and ``none``,
which store a^j), the paper's one ``o_f^j`` when they are equal (the default). At most one kind runs
per (t, j) (``c_t1_one_op``), so ``out_j + o_j`` is linear in the op binaries:
``(wabar^j + o_f_all^j) (all + up) + (wa^j + o_f_ng^j) (ck + none)``, no added variable.
When F^j does not run the same left side without output and overhead is the memory stored between
two operations, which is at most the next operation's memory, so the constraint can be written
without big-M. For B^t:
``wd^t + wa^0 + sum_{k<t} size2[k] + wabar^t + wd^{t-1} + o_b^t <= M``.
With ``cumulative=True`` (the default) the stored memory before F^j is a variable ``P[t,j]`` updated
by the change F^{j-1} made (``c_d34_stored_step``), which gives O(L^2) instead of O(L^3) nonzeros;
on random 30- and 50-stage chains HiGHS then solves about twice as fast
(``benchmarks/bench_remat_milp.py``).

**Objective (Definition 3.2).** ``sum u_f^j * op[t,j,*] + sum_l u_b^l``.

Why this is exact
-----------------
*Every MILP solution is a valid sequence with that makespan and memory.* The equations above replay
Table 1 operation by operation, so reading the sweeps back (``F^j`` for each chosen op, then ``B^t``)
gives a sequence that :func:`simulate_remat` accepts with the same makespan; the replay checks it.

*Some optimal sequence is a feasible MILP solution.* A valid sequence has exactly one B^t per phase
(B^t needs delta^t, which only B^{t+1} produces), so the phases are those of the MILP. What the MILP
restricts is the order of the forward operations inside a phase: increasing stage order, no stage
twice (the sweep may skip stages: it can restart from any stored checkpoint). That some optimal
sequence has this shape is where exactness rests on paper 004: Lemma 4.4 (weak memory persistence:
no recomputation to the left of a materialized activation while it is held; recomputations that do
not serve the current phase can be moved to the next one) and Corollary 4.5 (the floating
activation only moves right), the structural results on which the floating DP (Theorem 4.7) rests.
Operations that do not change the memory state cannot occur (the simulator rejects them);
operations on indices above t in phase t only produce values that nothing consumes, and removing
them keeps the sequence valid and lowers memory.

Checked, not only argued: the MILP optimum equals the exhaustive search of
:mod:`baselines.remat_exhaustive` (which explores every order of operations) and the floating DP on
about 4,000 (instance, memory limit) pairs with L <= 7, including float sizes, chains
without overheads, delta sizes independent of (and up to 40x) the activation sizes, large forward
overheads, and abar^l < a^l (as in paper 004's Table 2); and on paper 004's toy example
(Table 2, 90 MB: 47.42 ms, the paper's sequence). ``tests/test_remat_milp.py`` keeps a sample.
With each forward's own overhead (o_f_all != o_f_ng), paper 004's structural results were not
re-derived here (their rewritings move or remove operations, and an operation that keeps its kind
keeps its own overhead, which is why they are expected to carry over); the exactness was checked the
same way instead: on 120 chains ``random_chain(L, seed, own_overheads=True)`` with
L = 2..6, at 7 limits each from 3 B below the least feasible memory to 80% of the range, with and
without the ``up`` pruning (1,418 solves), the MILP and the exhaustive search agree on every optimum
and every infeasibility; ``tests/test_own_overheads_milp.py`` keeps a sample.
(The floating DP is not exact on every chain with delta sizes unlike the activations':
``benchmarks/counterexample_floating_dp_deltas.py`` has one where the DP gives 106 and this MILP and
the exhaustive search 102; the bound given to this module therefore runs with both sizes lowered to
their minimum, :func:`memplan.baselines.remat_bound.equal_gradient_sizes`.)

Dominance: ``up`` left out where it cannot help
-----------------------------------------------
``up`` (F_all^j over a stored plain a^j) costs one binary per (phase, stage) and slows HiGHS down:
without it the model has a quarter fewer binaries, the root LP bound is the same (measured on the
zoo's ResNet-50 and ResNet-101 chains), and HiGHS's cuts and branching close the gap faster
(``benchmarks/bench_remat_milp.py --zoo --compare-up``). It is left out at every stage j with
``wabar^j >= wa^j`` and ``o_f_all^j <= wd^{j-1} + o_b^j`` (:func:`up_dominated`; all stages but one
on the zoo's ResNets, the DenseNet has none; ``o_f_all^j`` is F_all's own overhead, the paper's
``o_f^j`` when the two forwards' overheads are equal), because then any valid sequence with
``up`` at stage j, in phase t > j, has a rewriting without it of the same makespan in which no operation needs
more memory:

*Rewriting.* Drop the ``up``; keep the plain a^j (instead of abar^j) through phases t, ..., j+1;
B^{j+1} accepts it as its input and frees it (Table 1); run ``F_all^j`` (kind ``all``) at the end
of phase j's sweep, right before B^j.

*Valid.* After the ``up`` nothing runs at stage j before B^j (abar^j is stored), and nothing
needs abar^j rather than a^j before B^j: F^{j+1} and B^{j+1} take either, and F_none^{j+1} (which
needs the plain a^j) is not in the original. The new F_all^j finds index j empty (B^{j+1} freed
a^j) and its input a^{j-1} or abar^{j-1} stored, since B^j needs it and nothing in phase j after
position j-1 frees it.

*Same makespan.* One F^j (u_f^j) removed, one added.

*Memory, operation by operation.* Before the ``up``: unchanged. The ``up`` itself is gone. From
it to B^{j+1} included: index j holds wa^j instead of wabar^j, no more. Phase j before position
j: index j empty instead of wabar^j. The new F_all^j: with S0 the memory stored before B^j in
the original (abar^j included), it needs ``S0 - wabar^j + wabar^j + o_f_all^j = S0 + o_f_all^j``,
at most the original B^j's ``S0 + wd^{j-1} + o_b^j`` (Definition 3.4) by the second condition.
*Own overheads:* the rewriting removes one F_all (the ``up``) and adds one F_all (kind ``all``);
every other operation keeps its kind, so its own overhead (``o_f_all`` or ``o_f_ng``) is unchanged.
The only new overhead is F_all's, hence ``o_f_all^j`` in the condition; ``o_f_ng^j`` does not
enter it.
Each rewriting removes one ``up`` (a stage has at most one: after it, abar^j stays until B^j),
so repeating it removes all of them. The tests compare the optimum with and without ``up``,
and with the exhaustive search, on chains where the conditions hold and where they fail.

Scaling: memory is divided by M and times by the store-all makespan, so the solver sees numbers of
order 1; HiGHS's feasibility tolerances are tightened to 1e-9 so that a schedule at the limit replays
under it.

MIP start, minimum memory and a proven lower bound are arguments (``start=``, ``min_memory=``,
``lower_bound=``): this module imports no baseline. :func:`memplan.remat.solve` computes them (the
persistent DP's sequence, else recompute-all, or the floating DP's own sequence when it is better;
the peak of recompute-all; the floating DP on step functions of
:mod:`memplan.baselines.remat_bound`), skips the MILP when the start already meets the bound within
the gap, and keeps the start when the MILP stops with nothing better. The bound enters the model as
the objective cut ``c_bound_objective_cut``: at tight limits HiGHS's own dual bound stalls (the H200
ResNet-101 at 1.5 GiB: gap 1.59% after 300 s), while the DP's is exact there.
"""
from __future__ import annotations

import time
from typing import Sequence

from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat, InvalidSequence
from memplan.models.solution import Solution, Status
from memplan.models.units import fmt_memory

from memplan.formulations.highs_driver import EXACT_TOLERANCES, BuildClock, BuildInterrupted, solve_milp, timed

KINDS = ("all", "up", "ck", "none")   # see the table in the module docstring
_OPNAME = {"all": "F_all", "up": "F_all", "ck": "F_ck", "none": "F_none"}


def _rel(expr, kind: str, rhs: float = 0.0):
    """``expr <= rhs`` / ``== rhs`` / ``>= rhs``, with constant sides turned into Feasible/Infeasible."""
    import pyomo.environ as pyo

    if isinstance(expr, (int, float)):
        ok = {"<=": expr <= rhs + 1e-12, "==": abs(expr - rhs) <= 1e-12, ">=": expr >= rhs - 1e-12}[kind]
        return pyo.Constraint.Feasible if ok else pyo.Constraint.Infeasible
    return {"<=": expr <= rhs, "==": expr == rhs, ">=": expr >= rhs}[kind]


def up_dominated(chain: Chain, j: int) -> bool:
    """Whether ``up`` at stage ``j`` (F_all^j over a stored plain a^j) can be left out of the MILP
    without changing its optimum: ``wabar^j >= wa^j`` and ``o_f_all^j <= wd^{j-1} + o_b^j`` (the proof
    is in the module docstring, "Dominance")."""
    # The rewriting trades the up (an F_all) for an F_all^j right before B^j; every other operation
    # keeps its kind and so its own overhead. The one new overhead is F_all's (of_all, not of_ng), and
    # it must fit under B^j's wd^{j-1} + o_b^j (Definition 3.4). of_all <= of, so this prunes at least
    # the stages the papers' one-overhead condition (of <= wd^{j-1} + o_b^j) pruned.
    return bool(chain.wabar[j] >= chain.wa[j] and chain.of_all[j] <= chain.wd[j - 1] + chain.ob[j])


def _op_index(L: int, up_stages=None):
    """(t, j, kind) for the op binaries: phase t = 1..L+1, stage j = 1..t.

    Stage t in phase t is only ``all`` (the abar^t that B^t needs; a plain a^t is never used once
    B^{t+1} has run, and nothing is stored at index t except abar^t). F_none^1 never occurs.
    ``up`` only at the stages in ``up_stages`` (None: every stage)."""
    idx = []
    for t in range(1, L + 2):
        for j in range(1, t + 1):
            for kind in KINDS:
                if j == t and kind != "all":
                    continue
                if j == 1 and kind == "none":
                    continue
                if kind == "up" and up_stages is not None and j not in up_stages:
                    continue
                idx.append((t, j, kind))
    return idx


def build_remat_milp(chain: Chain, memory: float, *, cumulative: bool = True, prune_up: bool = True,
                     lower_bound: float | None = None, clock: BuildClock | None = None):
    """The Pyomo model of the phase/sweep formulation (see the module docstring).

    ``prune_up``: leave out ``up`` at the stages where it is dominated (:func:`up_dominated`; the
    optimum is the same, the model smaller). ``lower_bound`` (seconds): a proven lower bound on the
    optimum of paper 004's model (e.g. the floating DP's, :mod:`memplan.baselines.remat_bound`),
    added as the cut ``makespan >= lower_bound`` (``c_bound_objective_cut``): it removes no optimal
    solution, and HiGHS's dual bound starts from it, so the gap closes as soon as an incumbent
    reaches it. Returns the ``ConcreteModel``;
    ``model.time_scale`` converts its objective to seconds, ``model.up_stages`` lists the stages that
    keep ``up``. ``clock`` (a :class:`formulations.highs_driver.BuildClock`): once its deadline has
    passed, the rules add no more rows and :class:`~formulations.highs_driver.BuildInterrupted` is
    raised at the end of the family being built.
    """
    import pyomo.environ as pyo

    def guard(rule):
        """``rule``, adding nothing once the clock's deadline has passed."""
        if clock is None:
            return rule
        return lambda *a: pyo.Constraint.Skip if clock.out() else rule(*a)

    def check():
        if clock is not None:
            clock.check()

    L = chain.L
    M = float(memory)
    ms = 1.0 / M
    wa = [float(x) * ms for x in chain.wa]
    wab = [float(x) * ms for x in chain.wabar]
    wd = [float(x) * ms for x in chain.wd]
    ofa = [float(x) * ms for x in chain.of_all]   # F_all's own forward overhead (kinds all, up)
    ofn = [float(x) * ms for x in chain.of_ng]    # the no-grad forwards' (kinds ck, none)
    ob = [float(x) * ms for x in chain.ob]
    ts = chain.store_all_time() or 1.0
    uf = [float(x) / ts for x in chain.uf]
    ub = [float(x) / ts for x in chain.ub]

    m = pyo.ConcreteModel(name=f"remat-milp[{chain.name}]")
    m.time_scale = ts
    m.L = L
    up_stages = [j for j in range(1, L + 1) if not (prune_up and up_dominated(chain, j))]
    m.up_stages = up_stages
    op_idx = _op_index(L, set(up_stages))
    m.op = pyo.Var(op_idx, domain=pyo.Binary)
    # state at the start of phase t (t <= L; phase L+1 starts with a^0 only)
    x_idx = [(t, j) for t in range(1, L + 1) for j in range(1, t)]       # plain a^j, j < t
    xb_idx = [(t, j) for t in range(1, L + 1) for j in range(1, t + 1)]  # abar^j, j <= t
    m.x0 = pyo.Var(x_idx, bounds=(0, 1))
    m.xb0 = pyo.Var(xb_idx, bounds=(0, 1))
    ops = m.op
    has = set(op_idx)

    def o(t, j, kind):
        return ops[t, j, kind] if (t, j, kind) in has else 0

    def x0(t, j):
        return m.x0[t, j] if (t <= L and 1 <= j < t) else 0

    def xb0(t, j):
        return m.xb0[t, j] if (t <= L and 1 <= j <= t) else 0

    def x1(t, j):
        return x0(t, j) + o(t, j, "ck") + o(t, j, "none") - o(t, j, "up")

    def xb1(t, j):
        return xb0(t, j) + o(t, j, "all") + o(t, j, "up")

    def x2(t, j):
        return x1(t, j) - o(t, j + 1, "none")

    def anyop(t, j):
        return sum(o(t, j, k) for k in KINDS)

    # --- Table 1: which operation may run in which state -------------------------------------
    pair_idx = [(t, j) for t in range(1, L + 2) for j in range(1, t + 1)]
    m.c_t1_one_op = pyo.Constraint(pair_idx, rule=guard(lambda m_, t, j: anyop(t, j) <= 1))
    check()
    # all / ck / none produce a^j or abar^j into an empty slot; up needs a plain a^j
    m.c_t1_fresh = pyo.Constraint(
        pair_idx,
        rule=guard(lambda m_, t, j: o(t, j, "all") + o(t, j, "ck") + o(t, j, "none") + x0(t, j) + xb0(t, j) <= 1))
    check()
    up_idx = [(t, j) for (t, j, k) in op_idx if k == "up"]
    m.c_t1_upgrade = pyo.Constraint(up_idx, rule=guard(lambda m_, t, j: o(t, j, "up") <= x0(t, j)))
    check()
    # input a^{j-1} (or abar^{j-1}) present when F^j runs (a^0 always is)
    in_idx = [(t, j) for (t, j) in pair_idx if j >= 2]
    m.c_t1_input = pyo.Constraint(in_idx, rule=guard(lambda m_, t, j: anyop(t, j) <= x1(t, j - 1) + xb1(t, j - 1)))
    check()
    # F_none^j discards the plain a^{j-1} only (Table 1 has no F_none row for abar^{j-1})
    m.c_t1_none_plain = pyo.Constraint(
        [(t, j) for (t, j) in in_idx if (t, j, "none") in has],
        rule=guard(lambda m_, t, j: o(t, j, "none") <= x1(t, j - 1)))
    check()
    # B^t needs delta^t (phase structure), abar^t and a^{t-1}/abar^{t-1}
    ph = list(range(1, L + 2))
    m.c_t1_backward_abar = pyo.Constraint(ph, rule=guard(lambda m_, t: _rel(xb1(t, t), "==", 1)))
    check()
    m.c_t1_backward_input = pyo.Constraint(
        [t for t in ph if t >= 2], rule=guard(lambda m_, t: _rel(x2(t, t - 1) + xb1(t, t - 1), ">=", 1)))
    check()
    # --- phase transition: B^t frees abar^t and the plain a^{t-1} (Table 1, B^l rows) -----------
    m.c_t1_carry_a = pyo.Constraint(x_idx, rule=guard(lambda m_, t, j: m.x0[t, j] == x2(t + 1, j)))
    check()
    m.c_t1_carry_abar = pyo.Constraint(xb_idx, rule=guard(lambda m_, t, j: m.xb0[t, j] == xb1(t + 1, j)))
    check()

    # --- Definitions 3.3 / 3.4: memory of every operation <= M (= 1 after scaling) -----------
    def size0(t, k):
        return wa[k] * x0(t, k) + wab[k] * xb0(t, k)

    def size1(t, k):
        return wa[k] * x1(t, k) + wab[k] * xb1(t, k)

    def size2(t, k):
        return wa[k] * x2(t, k) + wab[k] * xb1(t, k)

    def out(t, j):
        return wab[j] * (o(t, j, "all") + o(t, j, "up")) + wa[j] * (o(t, j, "ck") + o(t, j, "none"))

    def over(t, j):   # the running forward's own overhead: F_all's (all, up), the no-grad one's (ck, none)
        return ofa[j] * (o(t, j, "all") + o(t, j, "up")) + ofn[j] * (o(t, j, "ck") + o(t, j, "none"))

    if not cumulative:
        def stored(t, j):   # memory stored just before F^j of phase t (j = t+1: before B^t)
            e = wd[t] + wa[0] + sum(size2(t, k) for k in range(1, j - 1))
            if j >= 2:
                e = e + size1(t, j - 1)
            return e + sum(size0(t, k) for k in range(j, t + 1))
    else:
        # the same quantity as a variable per (t, j), updated by the change that F^{j-1} made:
        # O(1) terms per constraint instead of O(t) (O(L^2) nonzeros instead of O(L^3))
        m.P = pyo.Var([(t, j) for t in ph for j in range(1, t + 2)], bounds=(None, None))
        m.c_d34_stored_init = pyo.Constraint(
            ph, rule=guard(lambda m_, t: m.P[t, 1] == wd[t] + wa[0] + sum(size0(t, k) for k in range(1, t + 1))))
        check()

        def step(m_, t, j):   # P[t, j] - P[t, j-1] = change of index j-2 (by F^{j-1}) and j-1
            e = size1(t, j - 1) - size0(t, j - 1)
            if j >= 3:
                e = e + size2(t, j - 2) - size1(t, j - 2)
            return m.P[t, j] == m.P[t, j - 1] + e

        m.c_d34_stored_step = pyo.Constraint([(t, j) for t in ph for j in range(2, t + 2)], rule=guard(step))
        check()

        def stored(t, j):
            return m.P[t, j]

    # F^j: stored before it + its output + its own overhead (Definitions 3.3 / 3.4; o_f_all for F_all,
    # o_f_ng for F_ck / F_none, the paper's o_f when equal; one kind at most runs, c_t1_one_op)
    m.c_d34_memory_forward = pyo.Constraint(
        pair_idx, rule=guard(lambda m_, t, j: _rel(stored(t, j) + out(t, j) + over(t, j), "<=", 1.0)))
    check()
    # B^t: stored before it (everything of the sweep, abar^t included) + delta^{t-1} + o_b^t
    m.c_d34_memory_backward = pyo.Constraint(
        ph, rule=guard(lambda m_, t: _rel(stored(t, t + 1) + wd[t - 1] + ob[t], "<=", 1.0)))
    check()

    # --- Definition 3.2: makespan ----------------------------------------------------------------
    obj = sum(uf[j] * ops[t, j, k] for (t, j, k) in op_idx) + sum(ub[1:L + 2])
    m.makespan = pyo.Objective(expr=obj)
    if lower_bound is not None and lower_bound > 0:
        # a proven bound, relaxed by 1e-9 so that rounding never cuts off an optimal solution
        m.c_bound_objective_cut = pyo.Constraint(expr=obj >= float(lower_bound) / ts * (1 - 1e-9))
    return m


def schedule_from_model(m) -> RematSchedule:
    """Read the sweeps back: phase L+1, ..., 1, each its chosen F^j in increasing j, then B^t."""
    L = m.L
    chosen = {key for key in m.op if m.op[key].value is not None and m.op[key].value > 0.5}
    seq: list[tuple[str, int]] = []
    for t in range(L + 1, 0, -1):
        for j in range(1, t + 1):
            for kind in KINDS:
                if (t, j, kind) in chosen:
                    seq.append((_OPNAME[kind], j))
        seq.append(("B", t))
    return RematSchedule(seq)


def start_from_schedule(m, chain: Chain, schedule: RematSchedule | Sequence) -> list | None:
    """MIP start ``[(var, value), ...]`` for a sequence of this module's shape (one ascending
    sweep per phase; e.g. the persistent DP's), or None when the sequence does not fit it."""
    ops = schedule.ops if isinstance(schedule, RematSchedule) else list(schedule)
    L = chain.L
    act = [0] * (L + 2)   # 0 none, 1 a, 2 abar
    act[0] = 1
    t = L + 1
    last_j = 0
    values = {key: 0.0 for key in m.op}
    state_vals = []
    for op, l in ops:
        if op == "B":
            if l != t:
                return None
            if act[l - 1] == 1:
                act[l - 1] = 0
            act[l] = 0
            t -= 1
            last_j = 0
            if t >= 1:
                for j in range(1, t + 1):
                    if j < t:
                        state_vals.append((m.x0[t, j], 1.0 if act[j] == 1 else 0.0))
                    state_vals.append((m.xb0[t, j], 1.0 if act[j] == 2 else 0.0))
            continue
        if l <= last_j or l > t:
            return None
        last_j = l
        cur = act[l]
        if op == "F_all":
            kind = "all" if cur == 0 else "up" if cur == 1 else None
            act[l] = 2
        elif op == "F_ck":
            kind = "ck" if cur == 0 else None
            act[l] = 1
        else:
            kind = "none" if cur == 0 else None
            act[l] = max(cur, 1)
            act[l - 1] = 0
        if kind is None or (t, l, kind) not in values:
            return None
        values[t, l, kind] = 1.0
    if t != 0:
        return None
    return [(m.op[key], v) for key, v in values.items()] + state_vals


def solve_remat_milp(chain: Chain, memory: float, *, time_limit: float | None = 60, gap: float | None = 1e-4,
                     threads: int | None = None, start: RematSchedule | Sequence | None = None,
                     start_source: str = "the given sequence", min_memory: float | None = None,
                     log_file=None, verbose: bool = False, cumulative: bool = True,
                     prune_up: bool = True, lower_bound: float | None = None) -> Solution:
    """Optimal re-materialization sequence for paper 004's model by MILP (see the module docstring).

    Parameters
    ----------
    chain : Chain
    memory : float
        Memory limit (bytes).
    time_limit, gap, threads, log_file, verbose
        For HiGHS (:func:`formulations.highs_driver.solve_milp`; inside a ``memplan.remat.solve`` call
        the time limit is also clamped to what the call has left).
    start : RematSchedule, optional
        A valid sequence to start HiGHS from (e.g. the persistent DP's, which :mod:`memplan.remat`
        computes); it must have this formulation's shape (one ascending sweep per phase), otherwise
        it is skipped. ``details["mip_start"]`` says what happened, naming ``start_source``.
    min_memory : float, optional
        The minimum feasible memory, quoted in the message when the MILP is infeasible.
    cumulative : bool
        Memory rows through the running stored-memory variables (O(L^2) nonzeros) or written out.
    prune_up : bool
        Leave out the dominated ``up`` operations (module docstring, "Dominance"); same optimum.
    lower_bound : float, optional
        A proven lower bound (seconds) on the optimum, added as an objective cut
        (:func:`build_remat_milp`); the returned ``bound`` is then at least this value.

    Returns
    -------
    Solution
        Objective and peak memory from :func:`simulate_remat`; the MILP objective is ``predicted``,
        its dual bound ``bound``. Status OPTIMAL means proven within ``gap``; TIME_LIMIT /
        NO_SOLUTION when stopped with / without an incumbent. Inside a ``solve`` call whose time runs
        out while the model is built, or before it could be compiled (which HiGHS's limit does not
        bound: :func:`formulations.highs_driver.solve_milp`'s ``build_seconds``), NO_SOLUTION, saying
        so (``details["interrupted"] = "build"`` for the first).

    Examples
    --------
    Paper 004's toy chain at 90 MiB: the MILP proves 47.42 ms optimal.

    >>> from memplan.models.instance import load_instance
    >>> chain, _ = load_instance("paper004_table2")
    >>> sol = solve_remat_milp(chain, 90 * 2**20, threads=1, time_limit=30)
    >>> str(sol.status), round(sol.objective * 1e3, 2), round(sol.bound * 1e3, 2)
    ('optimal', 47.42, 47.42)
    """
    chain.check_papers_times("remat-milp")
    times: dict[str, float] = {}
    t_all = time.perf_counter()
    t_import = time.perf_counter()
    try:
        with timed(times, "build"):
            import pyomo.environ  # noqa: F401   (timed apart: the compilation is estimated from the rest)
            t_import = time.perf_counter() - t_import
            model = build_remat_milp(chain, memory, cumulative=cumulative, prune_up=prune_up,
                                     lower_bound=lower_bound, clock=BuildClock())
    except BuildInterrupted as e:
        times["total"] = time.perf_counter() - t_all
        return Solution("remat", "remat-milp", Status.NO_SOLUTION, memory_limit=memory, message=f"not solved: {e}",
                        times=times, details={"interrupted": "build", "time_limit": time_limit, "gap_target": gap})
    mip_start = None
    start_note = "no MIP start"
    if start is not None:
        with timed(times, "start"):
            mip_start = start_from_schedule(model, chain, start)
        start_note = ("MIP start from " + start_source if mip_start
                      else "MIP start skipped (sequence not of the sweep shape)")
    res = solve_milp(model, time_limit=time_limit, gap=gap, threads=threads, mip_start=mip_start,
                     log_file=log_file, verbose=verbose, options=EXACT_TOLERANCES,
                     objective_scale=model.time_scale, build_seconds=times["build"] - t_import)
    times.update(res.times)
    ts = model.time_scale
    details = {"model_size": res.size, "mip_start": start_note, "start_accepted": res.start_accepted,
               "up_stages": list(model.up_stages),
               "milp_status": str(res.status), "milp_message": res.message,
               "time_limit": time_limit, "gap_target": gap}
    pred = None if res.objective is None else res.objective * ts
    bound = None if res.bound is None else res.bound * ts
    if res.status == Status.INFEASIBLE:
        need = min_memory
        msg = f"no valid sequence fits in {fmt_memory(memory)}"
        if need is not None:
            msg += f": the minimum feasible memory is {fmt_memory(need)} ({need:.0f} B)"
            details["min_memory"] = need
        times["total"] = time.perf_counter() - t_all
        return Solution("remat", "remat-milp", Status.INFEASIBLE, memory_limit=memory, message=msg,
                        times=times, details=details)
    if not res.has_solution:
        times["total"] = time.perf_counter() - t_all
        return Solution("remat", "remat-milp", res.status, memory_limit=memory, bound=bound,
                        message=res.message, times=times, details=details)
    sched = schedule_from_model(model)
    status = res.status
    msg = res.message
    try:
        rep = simulate_remat(chain, sched, memory_limit=memory)
    except InvalidSequence as e:   # should not happen: the formulation replays Table 1
        try:
            rep = simulate_remat(chain, sched)
            details["limit_exceeded"] = rep.peak_memory > memory
            status = Status.LIMIT_EXCEEDED if details["limit_exceeded"] else Status.FEASIBLE
            msg = f"the MILP schedule does not replay under the limit ({e})"
        except InvalidSequence as e2:
            times["total"] = time.perf_counter() - t_all
            return Solution("remat", "remat-milp", Status.ERROR, memory_limit=memory, predicted=pred,
                            bound=bound, schedule=sched, message=f"MILP schedule is invalid: {e2}",
                            times=times, details=details)
    if status == Status.OPTIMAL:
        msg = f"optimal for paper 004's model (MILP {res.message})"
    times["total"] = time.perf_counter() - t_all
    details["recompute_time"] = rep.recompute_time
    return Solution("remat", "remat-milp", status, objective=rep.makespan, peak_memory=rep.peak_memory,
                    schedule=sched, bound=bound, memory_limit=memory, predicted=pred, message=msg,
                    times=times, details=details)
