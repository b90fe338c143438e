import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def toy_chain():
    """The toy chain of paper 004, Table 2 (V100, MiB, ms)."""
    from models.instance import load_chain

    return load_chain(ROOT / "instances" / "paper004_table2.json")


MiB = 2**20
