import pytest

from memplan.models.remat import InvalidSequence, RematSchedule, simulate_remat

from conftest import MiB

OPT90 = ([("F_ck", 1), ("F_none", 2), ("F_none", 3)] + [("F_all", l) for l in range(4, 8)]
         + [("B", l) for l in range(7, 3, -1)]
         + [("F_ck", 1), ("F_none", 2), ("F_all", 3), ("B", 3), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1)])


def test_paper_section_3_2_sequence(toy_chain):
    """Paper 004, section 3.2: 47.4 ms at a peak of 86.8 MB, reached at B^5."""
    r = simulate_remat(toy_chain, OPT90, memory_limit=90 * MiB)
    assert r.makespan == pytest.approx(47.42e-3)
    assert r.peak_memory / MiB == pytest.approx(86.75)
    assert OPT90[r.peak_position] == ("B", 5)
    assert r.recompute_time == pytest.approx((1.6 + 2.2 + 1.6 + 2.2 + 2.44) * 1e-3)


def test_store_all_107mb(toy_chain):
    """No re-materialization: 37.4 ms, 107 MB = 79.35 stored + o_b^5 at B^5."""
    seq = [("F_all", l) for l in range(1, 8)] + [("B", l) for l in range(7, 0, -1)]
    r = simulate_remat(toy_chain, seq)
    assert r.makespan == pytest.approx(37.38e-3)
    assert r.peak_memory / MiB == pytest.approx(79.35 + 27.64)
    assert seq[r.peak_position] == ("B", 5)


@pytest.mark.parametrize("seq, pos, reason", [
    ([("B", 7)], 0, "abar^7 is not in memory"),
    ([("F_ck", 1), ("F_none", 2), ("F_all", 2)], 2, "a^1 is not in memory (discarded by F_∅^2"),
    ([("F_all", 1), ("B", 1)], 1, "delta^1 is not in memory"),
    ([("F_ck", 1), ("F_ck", 1)], 1, "already in memory"),
    ([("F_all", 1), ("F_none", 2)], 1, "would discard abar^1"),
    ([("F_jump", 1)], 0, "unknown operation"),
    ([("F_all", 9)], 0, "outside 1..7"),
])
def test_invalid_sequences_position_and_reason(toy_chain, seq, pos, reason):
    with pytest.raises(InvalidSequence) as e:
        simulate_remat(toy_chain, seq)
    assert e.value.position == pos and reason in str(e.value)


def test_discarded_input_is_explained(toy_chain):
    seq = [("F_none", 1)] + [("F_all", l) for l in range(2, 8)] + [("B", l) for l in range(7, 1, -1)] + [("F_all", 1)]
    with pytest.raises(InvalidSequence, match=r"a\^0 is not in memory \(discarded by F_∅\^1 at operation 0\)") as e:
        simulate_remat(toy_chain, seq)
    assert e.value.position == 13


def test_memory_limit_and_unfinished(toy_chain):
    with pytest.raises(InvalidSequence, match="exceeds the limit"):
        simulate_remat(toy_chain, OPT90, memory_limit=86 * MiB)
    with pytest.raises(InvalidSequence, match="delta\\^0 was never computed"):
        simulate_remat(toy_chain, OPT90[:-1])


def test_notation():
    s = RematSchedule(OPT90)
    assert s.notation() == ("F_ck^1 F_∅^2 F_∅^3 F_all^4..F_all^7 B^7..B^4 F_ck^1 F_∅^2 F_all^3 B^3 "
                            "F_all^1 F_all^2 B^2 B^1")
    assert RematSchedule.from_json(s.to_json()).ops == s.ops
