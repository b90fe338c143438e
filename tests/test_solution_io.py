"""Solutions read back from their JSON (``memplan.load_solution``, ``Solution.from_dict``): every field as
written, the schedule made again as its problem's object, which the problem's simulator replays to the
objective and peak the file records; a file that is not a solution is refused naming it."""
from __future__ import annotations

import json

import pytest

import memplan
from memplan import random_chain
from memplan.models.offload import validate_offload
from memplan.models.pipeline import CyclicSchedule, Pattern
from memplan.models.remat import RematSchedule, simulate_remat
from memplan.models.remat_offload import RematOffloadSchedule, simulate_remat_offload

CHAIN = random_chain(6, 3)
LO, HI = memplan.remat.memory_range(CHAIN)
MID = LO + 0.5 * (HI - LO)


def _round_trip(sol, tmp_path):
    path = tmp_path / "sol.json"
    sol.write_json(path)
    back = memplan.load_solution(path)
    # every field as written: the dict written again is the same
    assert json.dumps(back.to_dict(), sort_keys=True) == json.dumps(sol.to_dict(), sort_keys=True)
    assert back.status == sol.status and back.objective == sol.objective
    return back


def test_remat_solution_round_trip_replays(tmp_path):
    sol = memplan.remat.solve(CHAIN, memory=MID, method="rotor")
    back = _round_trip(sol, tmp_path)
    assert isinstance(back.schedule, RematSchedule)
    rep = simulate_remat(CHAIN, back.schedule, memory_limit=MID)
    assert rep.makespan == back.objective and rep.peak_memory == back.peak_memory
    assert memplan.remat.report(back, CHAIN).splitlines()[2].startswith("makespan")


def test_offload_and_joint_solutions_round_trip_replay(tmp_path):
    off = memplan.offload.solve(CHAIN, memory=MID, bandwidth=1e6, method="dynprog")
    back = _round_trip(off, tmp_path)
    assert type(back.schedule) is type(off.schedule)
    rep = validate_offload(CHAIN, back.schedule, MID, 1e6)
    assert rep.makespan == pytest.approx(back.objective, rel=1e-12)
    joint = memplan.remat_offload.solve(CHAIN, memory=MID, bandwidth=1e6)
    back = _round_trip(joint, tmp_path)
    assert isinstance(back.schedule, RematOffloadSchedule)
    rep = simulate_remat_offload(CHAIN, back.schedule, 1e6)
    assert rep.makespan == pytest.approx(back.objective, rel=1e-12)


@pytest.mark.parametrize("method, kind", [("pipedream", Pattern), ("cyclic", CyclicSchedule)])
def test_pipeline_solutions_round_trip(tmp_path, method, kind):
    sol = memplan.pipeline.solve(CHAIN, memory=10**12, gpus=2, bandwidth=1e9, method=method, time_limit=20)
    back = _round_trip(sol, tmp_path)
    assert isinstance(back.schedule, kind) and back.schedule.to_json() == sol.schedule.to_json()


def test_a_file_that_is_not_a_solution_is_refused_naming_it(tmp_path):
    bad = tmp_path / "bad.json"
    for text, want in (("{", "not JSON"), ("[1, 2]", "a solution is a JSON object"),
                       ('{"problem": "remat", "method": "rotor"}', "a solution needs status"),
                       ('{"problem": "remat", "method": "rotor", "status": "great"}', "status 'great' is not one of"),
                       ('{"problem": "remat", "method": "rotor", "status": "optimal", "objective": "fast"}',
                        "objective = 'fast' is not a number"),
                       ('{"problem": "remat", "method": "rotor", "status": "optimal", "schedule": [["F_all"]]}',
                        "schedule: not a remat schedule")):
        bad.write_text(text)
        with pytest.raises(memplan.InputError, match=f"{bad}: {want}"):
            memplan.load_solution(bad)
    with pytest.raises(memplan.InputError, match="cannot read"):
        memplan.load_solution(tmp_path / "missing.json")
    bad.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(memplan.InputError, match=f"{bad}: JSON nested too deeply"):
        memplan.load_solution(bad)
