"""benchmarks/time_model_turns.py: how it counts turns and classifies each operation's context (the
columns of its report), on sequences written out by hand, and its refusal of an unknown size."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("time_model_turns", ROOT / "benchmarks" / "time_model_turns.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# L = 3: F_ck^1, then stages 2..4 kept, their backward, one turn, stage 1 again and its backward
SEQ = [("F_ck", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2),
       ("F_all", 1), ("B", 1)]
STORE_ALL = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2), ("B", 1)]


def test_turns_count_backward_calls_after_the_first():
    m = _script()
    assert m.turns(SEQ) == 1 and m.turns(STORE_ALL) == 0
    two = SEQ[:7] + [("F_none", 1), ("F_all", 2)] + [("B", 2)] + [("F_all", 1), ("B", 1)]
    assert m.turns(two) == 2


def test_each_operation_gets_its_context():
    m = _script()
    kinds = [m.kind(SEQ, p) for p in range(len(SEQ))]
    assert kinds == ["F_ck/F_none", "F_all", "F_all", "F_all", "other B", "other B", "other B", "F after B",
                     "first B"]
    assert {m.kind(STORE_ALL, p) for p in range(len(STORE_ALL))} == {"F_all", "other B"}


def test_unknown_size_exits_2(capsys):
    m = _script()
    assert m.main(["--sizes", "gpt2-huge"]) == 2
    err = capsys.readouterr().err
    assert "--sizes" in err and "gpt2-tiny" in err and "\n" == err[-1] and err.count("\n") == 1
