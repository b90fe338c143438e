"""The Integer Linear Program of paper 003, constraints (1)-(36), in Pyomo (solved with HiGHS).

Paper 003 (Beaumont, Eyraud-Dubois, Shilova, RR-9452, 2022), section 4. Tasks ``T_1..T_2L`` and the
sizes ``A[m]`` are those of :mod:`models.pipeline` (loss folded into the last layer). Every
constraint carries its equation number: ``c05_order_a``, ``c22_direct_dependencies``, ...

Variables (section 4 and 4.2.5)
-------------------------------
``T``; ``tau[m]`` (start of T_m), ``tauc[m]`` (start of the communication of A[m]); binaries
``z[l,l']`` (same GPU; one variable per unordered pair, ``z_{l,l} = 1``), ``f[m]`` (lowest task of its
GPU), ``w[l,l']`` (ordered pair: T_l before T_l' on a shared GPU), ``zt[l,l']`` (unordered: the two
communications share a link), ``wt[l,l']`` (ordered), ``v, vp, vt, vtp`` (the paper's v, v', ~v, ~v':
mini-batch shifts task -> communication -> task); ``sigma[l,l']``, ``o[l,l']``, ``b[l,l']``.
The paper declares sigma integer and o, b binary. They are only bounded from below ((22), (32), (34),
(35)) and appear with non-negative coefficients in (36) only, so their relaxations to continuous
variables have the same feasible (T, allocation, schedule) set; we declare them continuous (fewer
integers for the solver), and integral values are read back anyway.

How garbled or incomplete parts of the text were read
------------------------------------------------------
* (1) states ``z_{l',l''} >= z_{l,l'} + z_{l,l''} - 1`` for ``l < l' < l''`` only. Alone it allows
  ``z_{12} = z_{23} = 1, z_{13} = 0`` (not an equivalence relation), which Lemma 2's proof needs; we add
  the two other rotations (``c01_transitivity_b/c``).
* The communication of A[m] "has duration 0 if T_m and T_{m+1} are on the same resource"
  (Definition 1), while (18), (23)-(30) use the constant ``~d_m``. We use the effective duration
  ``~d_m (1 - z_{m,m+1})`` (linear: z is binary) everywhere the communication's *end* appears; in (14),
  (15) and (21) the constant is exact because ``~z = 1`` implies a real communication.
* The big constant K of the text ("larger than the period") is replaced by the smallest valid
  constant of each inequality, derived from the bounds ``-d_m <= tau_m <= T - d_m``,
  ``-~d_m <= tauc_m <= T - ~d_m`` and ``T <= Tmax`` (see :func:`build_model`, comments ``K:``).
  ``Tmax`` is the period of the best known feasible pattern (the MIP start) or, without one,
  ``sum d + sum ~d``. The latter loses nothing: for any allocation, the serial pattern (every task
  and transfer one after the other, every shift 0, period at most ``sum d + sum ~d``) holds at every
  instant only what any pattern of that allocation also holds, so if some pattern of an allocation
  fits in M, its serial pattern does too.
* (27)-(30) write ``2K``; the coefficient actually needed is given per inequality.
* (31)-(32) use ``8L``; the largest possible number of stored copies of ``a^{l'-1}`` is
  ``4 (2L - 2l' + 1)`` (at most 4 shifts on each of the ``2L-2l'+1`` edges between F_l' and B_l'),
  which we use.
* Lemma 8's ``M^ACT_l = a_{l-1} + a_l + sum_{l'} (sigma_{l,l'} + w_{l',l} - w_{2L-l'+1,l}) a_{l'-1}``:
  ``w_{l,l}`` (the task itself) is read as 0.
* (22) defines ``o_{l,l'}`` for ``l' = 1..2L``; T_2L has no successor, so ``l' <= 2L-1``. (34)-(35)
  likewise for the buffers of communications ``l' = 1..2L-1``.
* Times are scaled so that ``Tmax = 1000`` and sizes so that ``M = 1000`` inside the model, and
  HiGHS runs with feasibility tolerances of 1e-9 so that the read-back pattern replays in the
  simulator within its relative tolerance (1e-6 of T).

Beyond the paper (all exact reformulations or valid inequalities, see :func:`build_model`): one
allocation variable per pair of *layers* (substituting (4)); ``cut_gpu_load`` / ``cut_link_load``
(the load of a resource is at most T); ``min_memory=True`` turns (36)'s M into the objective.

Memory model (:mod:`models.pipeline`): Lemma 8's stored ``a_{l'-1}`` is ``S[l']`` (``td.S``: a^{l'-1}
in the paper's model, what autograd saves in the autograd model). The autograd model adds ``H[l']``
per stored copy when layer l' is the first layer of its GPU (layer l'-1 elsewhere), an extension of
Lemma 8: a nonnegative variable ``eta[a,l']`` per task a and layer l' with ``H[l'] > 0``,
``eta[a,l'] >= sigma[a,l'] + w_{l',a} - w_{2L-l'+1,a} - K (1 - z_{a,l'} + z_{a,l'-1})`` (``c36h_stage_input``),
adds ``H[l'] eta[a,l']`` to (36). With ``z_{a,l'} = 1, z_{a,l'-1} = 0`` it is at least the number of
copies of Lemma 8; otherwise the right-hand side is at most 0, because the copy count
``sigma + w - w`` is at most ``K = 4 (2L - 2l' + 1) + 1`` ((31) and ``w <= 1``). ``eta`` has a
positive coefficient in (36) only, so at an optimum it equals the count or 0. Where ``H = 0`` (the
paper's model, chains without the profiler's measurements) nothing is added: the model is the
paper's.

The left-hand side of (36) at the start of each task equals the memory the simulator of
:mod:`models.pipeline` measures (``tests/test_pipeline.py::test_ilp_memory_model_equals_simulator``
evaluates every constraint at baseline patterns: satisfied at their measured peak, (36) violated
just below).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from memplan.formulations.highs_driver import EXACT_TOLERANCES, solve_milp, timed
from memplan.models.pipeline import REL_TOL, Pattern, TaskData, memory_lower_bound, simulate_pattern

TIME_SCALE_TARGET = 1000.0
MEM_SCALE_TARGET = 1000.0


@dataclass
class PipelineILP:
    """A built model and what is needed to read it back."""

    model: Any
    td: TaskData
    P: int
    memory: float | None
    Tmax: float           # seconds
    ts: float             # seconds per model time unit
    ms: float             # bytes per model memory unit
    layer_allocation: bool = True

    def z_key(self, a: int, b: int):
        """Index of the variable z for tasks a != b (None: the pair is on one GPU by (4))."""
        if self.layer_allocation:
            la, lb = self.td.layer(a), self.td.layer(b)
            return None if la == lb else (min(la, lb), max(la, lb))
        return (min(a, b), max(a, b))

    def read_pattern(self) -> Pattern:
        """The solution loaded in the model as a :class:`Pattern` (GPUs numbered by first task)."""
        from pyomo.environ import value

        m, td = self.model, self.td
        n = td.n
        gpu = [-1] * n
        nxt = 0
        for a in range(1, n + 1):
            if gpu[a - 1] >= 0:
                continue
            gpu[a - 1] = nxt
            for b in range(a + 1, n + 1):
                k = self.z_key(a, b)
                if gpu[b - 1] < 0 and (k is None or value(m.z[k]) > 0.5):
                    gpu[b - 1] = nxt
            nxt += 1
        tau = [value(m.tau[k]) * self.ts for k in range(1, n + 1)]
        tauc = []
        for k in range(1, n):
            if gpu[k - 1] == gpu[k]:
                tauc.append(tau[k - 1] + td.d[k])
            else:
                tauc.append(value(m.tauc[k]) * self.ts)
        # the order chosen by the ILP (w) breaks ties between tasks that start and end together
        rank = [1 + sum(1 for b in range(1, n + 1) if b != a and gpu[b - 1] == gpu[a - 1]
                        and value(m.w[b, a]) > 0.5) for a in range(1, n + 1)]
        return Pattern(gpu=gpu, tau=tau, tau_c=tauc, T=value(m.T) * self.ts, meta={"method": "ilp"}, rank=rank)


def _pairs(n):
    return [(a, b) for a in range(1, n + 1) for b in range(1, n + 1) if a != b]


def build_model(td: TaskData, P: int, memory: float | None, *, Tmax: float | None = None, Tmin: float = 0.0,
                cuts: bool = True, layer_allocation: bool = True, min_memory: bool = False) -> PipelineILP:
    """Pyomo model of (1)-(36) for the task data ``td`` (``task_data(chain, bandwidth)``) on P GPUs,
    objective min T. ``memory=None`` drops the memory part (22)-(36)
    except the shift variables. ``Tmax`` (seconds) bounds T (see the module docstring);
    ``Tmin`` (seconds) is a known lower bound on the period, added as a bound of T. ``cuts`` adds
    valid inequalities that are not in the paper (implied by (5)-(7), (14)-(16), (20)-(21) for integer
    points, but not by their relaxation): the load of the GPU of every task, and of the link of every
    communication, is at most T (``cut_gpu_load``, ``cut_link_load``).

    ``layer_allocation=True`` (default) substitutes (4): since F_l and B_l share a GPU, and z is an
    equivalence relation, ``z_{a,b}`` only depends on the layers of a and b; one variable per pair of
    layers is used for every task pair, (4) holds by construction (``c04`` is not generated) and (1)
    is written on triples of layers, (L choose 3) x 3 rows instead of (2L choose 3) x 3. With
    ``False`` the model is the paper's literally (task pairs, (1) on task triples, (4) as rows).

    ``min_memory=True``: the memory bound of (36) becomes a variable ``Mv`` and the objective is
    ``min Mv`` (T only bounded by ``Tmax``): the smallest memory of any pattern (``memory`` then only
    sets the scale of sizes)."""
    import pyomo.environ as pyo

    L, n = td.L, td.n
    if Tmax is None:
        Tmax = float(td.d[1:].sum() + td.dc[1:].sum())
    ts = Tmax / TIME_SCALE_TARGET if Tmax > 0 else 1.0
    ms = (memory / MEM_SCALE_TARGET) if memory else max(1.0, float(td.A.max()))
    d = td.d / ts
    dc = td.dc / ts
    A = td.A / ms
    S = td.S / ms          # stored bytes per layer (the memory model: A[l-1] in the paper's)
    W = td.W / ms
    Tm = Tmax / ts
    tasks = list(range(1, n + 1))
    comms = list(range(1, n))
    layers = list(range(1, L + 1))

    mdl = pyo.ConcreteModel(name=f"pipeline_ilp_{td.name}_P{P}")
    mdl.T = pyo.Var(bounds=(max(Tmin / ts * (1 - 1e-9), 0.0), Tm))
    mdl.tau = pyo.Var(tasks, bounds=lambda _, k: (-d[k], Tm - d[k]))
    mdl.tauc = pyo.Var(comms, bounds=lambda _, k: (-dc[k], Tm))
    if layer_allocation:
        mdl.z = pyo.Var([(a, b) for a in layers for b in layers if a < b], domain=pyo.Binary)
    else:
        mdl.z = pyo.Var([(a, b) for a in tasks for b in tasks if a < b], domain=pyo.Binary)
    mdl.f = pyo.Var(tasks, domain=pyo.Binary)
    mdl.w = pyo.Var(_pairs(n), domain=pyo.Binary)
    cupairs = [(a, b) for a in comms for b in comms if a < b]
    mdl.zt = pyo.Var(cupairs, domain=pyo.Binary)
    mdl.wt = pyo.Var([(a, b) for a in comms for b in comms if a != b], domain=pyo.Binary)
    mdl.v = pyo.Var(comms, domain=pyo.Binary)
    mdl.vp = pyo.Var(comms, domain=pyo.Binary)
    mdl.vt = pyo.Var(comms, domain=pyo.Binary)
    mdl.vtp = pyo.Var(comms, domain=pyo.Binary)

    def z(a, b):
        if a == b:
            return 1
        if layer_allocation:
            la, lb = td.layer(a), td.layer(b)
            return 1 if la == lb else mdl.z[min(la, lb), max(la, lb)]
        return mdl.z[min(a, b), max(a, b)]

    def zr(a, b):  # z on the index set of (1): layers or tasks
        return 1 if a == b else mdl.z[min(a, b), max(a, b)]

    def zt(a, b):
        return mdl.zt[min(a, b), max(a, b)]

    def dce(k):  # effective duration of communication k (0 on one GPU)
        return dc[k] * (1 - z(k, k + 1))

    # ---------------------------------------------------------------- 4.1.1 number of resources
    triples = list(itertools.combinations(layers if layer_allocation else tasks, 3))
    mdl.c01_transitivity_a = pyo.Constraint(triples, rule=lambda _, a, b, c: zr(b, c) >= zr(a, b) + zr(a, c) - 1)
    mdl.c01_transitivity_b = pyo.Constraint(triples, rule=lambda _, a, b, c: zr(a, c) >= zr(a, b) + zr(b, c) - 1)
    mdl.c01_transitivity_c = pyo.Constraint(triples, rule=lambda _, a, b, c: zr(a, b) >= zr(a, c) + zr(b, c) - 1)
    mdl.c02_first_task = pyo.Constraint(tasks, rule=lambda _, a: mdl.f[a] >= 1 - sum(z(b, a) for b in tasks if b < a))
    mdl.c03_resources = pyo.Constraint(expr=sum(mdl.f[a] for a in tasks) <= P)
    if not layer_allocation:
        mdl.c04_forward_backward = pyo.Constraint(layers, rule=lambda _, l: z(l, n - l + 1) == 1)

    # ---------------------------------------------------------------- 4.1.2 ordering on a GPU
    # K: (5) needs K >= d_l' + tau_l' - tau_l <= Tmax + d_l; (6) symmetric, Tmax + d_l'.
    P2 = _pairs(n)
    mdl.c05_order_a = pyo.Constraint(P2, rule=lambda _, a, b: mdl.tau[a] - mdl.tau[b]
                                     + (Tm + d[a]) * (1 - z(a, b) + mdl.w[a, b]) >= d[b])
    mdl.c06_order_b = pyo.Constraint(P2, rule=lambda _, a, b: mdl.tau[b] - mdl.tau[a]
                                     + (Tm + d[b]) * (2 - z(a, b) - mdl.w[a, b]) >= d[a])
    mdl.c07_order_same_gpu = pyo.Constraint(P2, rule=lambda _, a, b: mdl.w[a, b] <= z(a, b))

    # ---------------------------------------------------------------- 4.1.3 communications
    CP = [(a, b) for a in comms for b in comms if a != b]
    mdl.c08_same_link_a = pyo.Constraint(CP, rule=lambda _, a, b: zt(a, b) >= z(a, b) + z(a + 1, b + 1) - z(a, a + 1) - 1)
    mdl.c09_same_link_b = pyo.Constraint(CP, rule=lambda _, a, b: zt(a, b) >= z(a, b + 1) + z(a + 1, b) - z(a, a + 1) - 1)
    mdl.c10_real_comm_a = pyo.Constraint(CP, rule=lambda _, a, b: zt(a, b) <= 1 - z(a, a + 1))
    mdl.c11_real_comm_b = pyo.Constraint(CP, rule=lambda _, a, b: zt(a, b) <= 1 - z(b, b + 1))
    mdl.c12_link_end_a = pyo.Constraint(CP, rule=lambda _, a, b: zt(a, b) <= z(a, b) + z(a + 1, b))
    mdl.c13_link_end_b = pyo.Constraint(CP, rule=lambda _, a, b: zt(a, b) <= z(a, b + 1) + z(a + 1, b + 1))
    # K: tauc_l' - tauc_l <= T - dce_l' + dce_l, so (14) needs Tmax + ~d_l + ~d_l' (and (15) the same)
    mdl.c14_comm_order_a = pyo.Constraint(CP, rule=lambda _, a, b: mdl.tauc[a] - mdl.tauc[b]
                                          + (Tm + dc[a] + dc[b]) * (1 - zt(a, b) + mdl.wt[a, b]) >= dc[b])
    mdl.c15_comm_order_b = pyo.Constraint(CP, rule=lambda _, a, b: mdl.tauc[b] - mdl.tauc[a]
                                          + (Tm + dc[a] + dc[b]) * (2 - zt(a, b) - mdl.wt[a, b]) >= dc[a])
    mdl.c16_comm_order_same_link = pyo.Constraint(CP, rule=lambda _, a, b: mdl.wt[a, b] <= zt(a, b))

    # ---------------------------------------------------------------- 4.1.4 period
    mdl.c17_end_in_period_lo = pyo.Constraint(tasks, rule=lambda _, a: mdl.tau[a] + d[a] >= 0)
    mdl.c17_end_in_period_hi = pyo.Constraint(tasks, rule=lambda _, a: mdl.tau[a] + d[a] <= mdl.T)
    mdl.c18_comm_end_in_period_lo = pyo.Constraint(comms, rule=lambda _, k: mdl.tauc[k] + dce(k) >= 0)
    mdl.c18_comm_end_in_period_hi = pyo.Constraint(comms, rule=lambda _, k: mdl.tauc[k] + dce(k) <= mdl.T)
    mdl.c19_origin = pyo.Constraint(expr=mdl.tau[1] == 0)
    # K: tau_l + d_l - tau_l' - T <= d_l' (ends <= T, starts >= -d); for (21) ~d_l + ~d_l' because
    # the constant ~d_l over-states the end of a zero-length communication
    mdl.c20_gpu_window = pyo.Constraint(P2, rule=lambda _, a, b: mdl.T >= mdl.tau[a] + d[a] - mdl.tau[b] - d[b] * (1 - z(a, b)))
    mdl.c21_link_window = pyo.Constraint(CP, rule=lambda _, a, b: mdl.T >= mdl.tauc[a] + dc[a] - mdl.tauc[b] - (dc[a] + dc[b]) * (1 - zt(a, b)))

    if cuts:
        mdl.cut_gpu_load = pyo.Constraint(tasks, rule=lambda _, a: sum(z(a, b) * d[b] for b in tasks) <= mdl.T)
        mdl.cut_link_load = pyo.Constraint(comms, rule=lambda _, a: dce(a) + sum(zt(a, b) * dc[b] for b in comms
                                                                                 if b != a) <= mdl.T)

    # ---------------------------------------------------------------- 4.2.2 shifts (23)-(30)
    def end(k):
        return mdl.tau[k] + d[k]

    def cend(k):
        return mdl.tauc[k] + dce(k)

    # K: (23) tauc - end <= Tmax; (24) end - tauc <= Tmax + ~d; (25) tau_{k+1} - cend <= Tmax - d_{k+1};
    #    (26) cend - tau_{k+1} <= Tmax + d_{k+1}; (27) end - tauc - T <= ~d; (28) tauc + T - end <= 2 Tmax;
    #    (29) cend - tau_{k+1} - T <= d_{k+1}; (30) tau_{k+1} + T - cend <= 2 Tmax - d_{k+1}.
    mdl.c23_shift_v_a = pyo.Constraint(comms, rule=lambda _, k: end(k) - mdl.tauc[k] + Tm * (1 - mdl.v[k]) >= 0)
    mdl.c24_shift_v_b = pyo.Constraint(comms, rule=lambda _, k: mdl.tauc[k] - end(k) + (Tm + dc[k]) * mdl.v[k] >= 0)
    mdl.c25_shift_vt_a = pyo.Constraint(comms, rule=lambda _, k: cend(k) - mdl.tau[k + 1] + (Tm - d[k + 1]) * (1 - mdl.vt[k]) >= 0)
    mdl.c26_shift_vt_b = pyo.Constraint(comms, rule=lambda _, k: mdl.tau[k + 1] - cend(k) + (Tm + d[k + 1]) * mdl.vt[k] >= 0)
    mdl.c27_shift_vp_a = pyo.Constraint(comms, rule=lambda _, k: mdl.tauc[k] + mdl.T - end(k) + dc[k] * mdl.vp[k] >= 0)
    mdl.c28_shift_vp_b = pyo.Constraint(comms, rule=lambda _, k: end(k) - mdl.tauc[k] - mdl.T + 2 * Tm * (1 - mdl.vp[k]) >= 0)
    mdl.c29_shift_vtp_a = pyo.Constraint(comms, rule=lambda _, k: mdl.tau[k + 1] + mdl.T - cend(k) + d[k + 1] * mdl.vtp[k] >= 0)
    mdl.c30_shift_vtp_b = pyo.Constraint(comms, rule=lambda _, k: cend(k) - mdl.tau[k + 1] - mdl.T
                                         + (2 * Tm - d[k + 1]) * (1 - mdl.vtp[k]) >= 0)

    if memory is not None:
        dirpairs = [(a, k) for a in tasks for k in comms if a != k and a != k + 1]
        mdl.o = pyo.Var(dirpairs, bounds=(0, 1))
        mdl.b = pyo.Var([(a, k) for a in tasks for k in comms], bounds=(0, 1))
        mdl.sigma = pyo.Var([(a, l) for a in tasks for l in layers], bounds=(0, None))

        def w(a, b):
            return 0 if a == b else mdl.w[a, b]

        # (22) direct dependencies
        mdl.c22_direct_dependencies = pyo.Constraint(dirpairs, rule=lambda _, a, k: mdl.o[a, k]
                                                     >= w(k, a) + w(a, k + 1) + w(k + 1, k) - 1)

        def nshift(l):  # Lemma 7: stored copies of a^{l-1} at the start of the period
            return sum(mdl.v[k] + mdl.vp[k] + mdl.vt[k] + mdl.vtp[k] for k in range(l, n - l + 1))

        def kact(l):
            return 4 * (n - 2 * l + 1)

        mdl.c31_activations_same_gpu = pyo.Constraint(
            [(a, l) for a in tasks for l in layers],
            rule=lambda _, a, l: mdl.sigma[a, l] <= kact(l) * z(a, l))
        mdl.c32_activations_count = pyo.Constraint(
            [(a, l) for a in tasks for l in layers],
            rule=lambda _, a, l: mdl.sigma[a, l] >= nshift(l) - kact(l) * (1 - z(a, l)))
        mdl.c34_buffer_a = pyo.Constraint([(a, k) for a in tasks for k in comms],
                                          rule=lambda _, a, k: mdl.b[a, k] >= z(a, k) - z(a, k + 1))
        mdl.c35_buffer_b = pyo.Constraint([(a, k) for a in tasks for k in comms],
                                          rule=lambda _, a, k: mdl.b[a, k] >= z(a, k + 1) - z(a, k))

        # Lemma 8 extended (module docstring): the copies of a^{l-1} that layer l keeps on the GPU of
        # task a when it is the first layer of that GPU (z_{a,l} = 1, z_{a,l-1} = 0) cost H[l] more
        # each; one variable per (a, l) with H[l] > 0 only, so the paper's model is unchanged
        H = td.H / ms
        first = [l for l in layers if l >= 2 and td.H[l] > 0]
        if first:
            mdl.eta = pyo.Var([(a, l) for a in tasks for l in first], bounds=(0, None))
            mdl.c36h_stage_input = pyo.Constraint(
                [(a, l) for a in tasks for l in first],
                rule=lambda _, a, l: mdl.eta[a, l] >= mdl.sigma[a, l] + w(l, a) - w(n - l + 1, a)
                - (kact(l) + 1) * (1 - z(a, l) + z(a, l - 1)))

        def mem(_, a):
            mod = 3 * sum(z(a, l) * W[l] for l in layers)                                   # (33)
            act = A[a - 1] + A[a] + sum((mdl.sigma[a, l] + w(l, a) - w(n - l + 1, a)) * S[l]
                                        for l in layers)                                    # Lemma 8
            act = act + sum(mdl.eta[a, l] * H[l] for l in first)                            # extended
            dr = sum(mdl.o[a, k] * A[k] for k in comms if k != a and k + 1 != a)            # Lemma 6
            buf = sum(mdl.b[a, k] * A[k] for k in comms)                                    # Lemma 9
            return mod + act + dr + buf <= (mdl.Mv if min_memory else MEM_SCALE_TARGET)
        if min_memory:
            mdl.Mv = pyo.Var(bounds=(0, None))
        mdl.c36_memory = pyo.Constraint(tasks, rule=mem)

    if min_memory and memory is not None:
        mdl.obj = pyo.Objective(expr=mdl.Mv, sense=pyo.minimize)
    else:
        mdl.obj = pyo.Objective(expr=mdl.T, sense=pyo.minimize)
    return PipelineILP(model=mdl, td=td, P=P, memory=memory, Tmax=Tmax, ts=ts, ms=ms,
                       layer_allocation=layer_allocation)


def start_values(ilp: PipelineILP, pattern: Pattern) -> list[tuple[Any, float]]:
    """Values of every variable of the model for a valid pattern (a MIP start): the allocation, the
    order on every GPU and link, the shifts of Lemma 7 and the memory variables, in model units."""
    m, td = ilp.model, ilp.td
    n = td.n
    ts = ilp.ts
    T = pattern.T
    tol = REL_TOL * T
    g = pattern.gpu
    tau = {k: pattern.tau[k - 1] for k in range(1, n + 1)}
    tauc = {}
    for k in range(1, n):
        tauc[k] = pattern.tau_c[k - 1] if g[k - 1] != g[k] else tau[k] + td.d[k]
    dce = {k: (td.dc[k] if g[k - 1] != g[k] else 0.0) for k in range(1, n)}
    vals: list[tuple[Any, float]] = [(m.T, T / ts)]
    vals += [(m.tau[k], tau[k] / ts) for k in tau]
    vals += [(m.tauc[k], tauc[k] / ts) for k in tauc]
    zz = lambda a, b: 1 if g[a - 1] == g[b - 1] else 0
    vals += [(m.z[a, b], zz(a, b)) for (a, b) in m.z.keys()]   # layer pairs: layer l is task F_l
    seen = set()
    for k in range(1, n + 1):
        vals.append((m.f[k], 0 if g[k - 1] in seen else 1))
        seen.add(g[k - 1])
    # execution order on each GPU, with the simulator's tie rule (start, end, rank)
    rank = pattern.rank if pattern.rank is not None else list(range(1, n + 1))
    q = max(tol, 1e-300)
    key = {k: (round(tau[k] / q), round((tau[k] + td.d[k]) / q), rank[k - 1]) for k in range(1, n + 1)}
    wv = {}
    for (a, b) in m.w.keys():
        wv[a, b] = 1 if zz(a, b) and key[a] < key[b] else 0
        vals.append((m.w[a, b], wv[a, b]))
    link = {k: frozenset((g[k - 1], g[k])) for k in range(1, n) if g[k - 1] != g[k]}
    ztv = lambda a, b: 1 if a in link and b in link and link[a] == link[b] else 0
    vals += [(m.zt[a, b], ztv(a, b)) for (a, b) in m.zt.keys()]
    vals += [(m.wt[a, b], 1 if ztv(a, b) and tauc[a] < tauc[b] else 0) for (a, b) in m.wt.keys()]
    sh = {}
    for k in range(1, n):
        e = tau[k] + td.d[k]
        ce = tauc[k] + dce[k]
        v = 1 if tauc[k] < e - tol else 0
        vp = 1 if tauc[k] + T < e - tol else 0
        vt = 1 if tau[k + 1] < ce - tol else 0
        vtp = 1 if tau[k + 1] + T < ce - tol else 0
        sh[k] = v + vp + vt + vtp
        vals += [(m.v[k], v), (m.vp[k], vp), (m.vt[k], vt), (m.vtp[k], vtp)]
    if ilp.memory is not None:
        w = lambda a, b: 0 if a == b else wv[a, b]
        for (a, k) in m.o.keys():
            vals.append((m.o[a, k], max(0, w(k, a) + w(a, k + 1) + w(k + 1, k) - 1)))
        for (a, k) in m.b.keys():
            vals.append((m.b[a, k], abs(zz(a, k) - zz(a, k + 1))))
        sig = {}
        for (a, l) in m.sigma.keys():
            sig[a, l] = sum(sh[k] for k in range(l, n - l + 1)) if zz(a, l) else 0
            vals.append((m.sigma[a, l], sig[a, l]))
        if hasattr(m, "eta"):          # the extension of Lemma 8 (build_model): its least value
            for (a, l) in m.eta.keys():
                K = 4 * (n - 2 * l + 1) + 1
                vals.append((m.eta[a, l], max(0, sig[a, l] + w(l, a) - w(n - l + 1, a)
                                              - K * (1 - zz(a, l) + zz(a, l - 1)))))
    return vals


def check_values(ilp: PipelineILP, values: list[tuple[Any, float]], tol: float = 1e-6) -> list[str]:
    """Names of the constraints violated by ``values`` (a debugging aid and a test of consistency
    between the model and the simulator)."""
    import pyomo.environ as pyo

    for var, val in values:
        var.set_value(val, skip_validation=True)
    bad = []
    for c in ilp.model.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        if c.has_lb() and body < pyo.value(c.lower) - tol:
            bad.append(f"{c.name}: {body:.6g} < {pyo.value(c.lower):.6g}")
        if c.has_ub() and body > pyo.value(c.upper) + tol:
            bad.append(f"{c.name}: {body:.6g} > {pyo.value(c.upper):.6g}")
    return bad


def solve_ilp(td: TaskData, P: int, memory: float | None, *, start: Pattern | None = None, Tmin: float = 0.0,
              time_limit: float | None = 60, gap: float | None = None, threads: int | None = None, log_file=None,
              verbose: bool = False, layer_allocation: bool = True):
    """Build, solve with :func:`formulations.highs_driver.solve_milp`, read back. ``start`` (a valid
    pattern within ``memory``, e.g. the best baseline pattern) is the MIP start and its period bounds
    T (``Tmax``); ``Tmin`` is a known lower bound on the period.

    Returns ``(pattern or None, MilpResult, PipelineILP, times)``; the MilpResult's objective and
    bound are converted to seconds.

    Examples
    --------
    Four identical layers on two GPUs, free communications, no memory limit: half the work.

    >>> from memplan.models.chain import Chain
    >>> from memplan.models.pipeline import task_data
    >>> td = task_data(Chain.from_stages(uf=[1.0] * 4, ub=[2.0] * 4, wa=[1.0] * 5, weights=[0.0] * 4), None)
    >>> pat, res, ilp, times = solve_ilp(td, 2, None, time_limit=20, threads=1)
    >>> str(res.status), round(pat.T, 6)
    ('optimal', 6.0)
    """
    times: dict[str, float] = {}
    Tmax = None
    if start is not None:
        Tmax = start.T * (1 + 1e-6)
    with timed(times, "build"):
        ilp = build_model(td, P, memory, Tmax=Tmax, Tmin=Tmin, layer_allocation=layer_allocation)
        mip_start = start_values(ilp, start) if start is not None else None
    res = solve_milp(ilp.model, time_limit=time_limit, gap=gap, threads=threads, mip_start=mip_start,
                     log_file=log_file, verbose=verbose, options=EXACT_TOLERANCES, objective_scale=ilp.ts)
    times.update(res.times)
    if res.objective is not None:
        res.objective *= ilp.ts
    if res.bound is not None:
        res.bound *= ilp.ts
    pattern = ilp.read_pattern() if res.has_solution else None
    return pattern, res, ilp, times


def solve_min_memory(td: TaskData, P: int, *, start: Pattern | None = None, time_limit: float | None = 30,
                     threads: int | None = None, Tmax: float | None = None, log_file=None):
    """The smallest memory per GPU of any valid pattern on P GPUs (the ILP with ``min_memory=True``),
    over every allocation, contiguous or not; with ``Tmax`` (seconds), of any pattern of period at
    most Tmax (a ``start`` must then have ``start.T <= Tmax``). Returns ``(pattern or None,
    MilpResult)`` with objective and bound in bytes."""
    scale = memory_lower_bound(td, P)
    ilp = build_model(td, P, scale, min_memory=True, Tmax=Tmax)
    vals = None
    if start is not None:
        vals = start_values(ilp, start) + [(ilp.model.Mv, simulate_pattern(start, td).peak_memory / ilp.ms)]
    res = solve_milp(ilp.model, time_limit=time_limit, threads=threads, mip_start=vals, log_file=log_file,
                     options=EXACT_TOLERANCES)
    if res.objective is not None:
        res.objective *= ilp.ms
    if res.bound is not None:
        res.bound *= ilp.ms
    return (ilp.read_pattern() if res.has_solution else None), res


def solve_fixed_allocation(td: TaskData, P: int, memory: float | None, layer_gpu: list[int], *,
                           Tmax: float | None = None, time_limit: float | None = 10, threads: int | None = None):
    """The ILP with the allocation fixed (every ``z`` fixed from ``layer_gpu``, GPU of layer l at
    index l-1) and ``T <= Tmax`` (default: :func:`build_model`'s ``sum d + sum ~d``): the best
    pattern of a given allocation, e.g. to turn a baseline
    partition whose eager schedule is not 1-periodic into a pattern (MIP start) of no larger period.
    Returns ``(pattern or None, MilpResult)``."""
    ilp = build_model(td, P, memory, Tmax=Tmax)
    for (a, b), var in ilp.model.z.items():
        var.fix(1 if layer_gpu[a - 1] == layer_gpu[b - 1] else 0)
    res = solve_milp(ilp.model, time_limit=time_limit, threads=threads,
                     options=EXACT_TOLERANCES)
    if res.objective is not None:
        res.objective *= ilp.ts
    return (ilp.read_pattern() if res.has_solution else None), res
