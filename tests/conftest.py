from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def meps_small(tmp_path_factory) -> Path:
    """A small MEPS-layout dataset: 5 analysis times x 2 members = 10 samples
    (and the val split), a 12 x 14 grid, 65 steps. Read-only for tests."""
    from wxstats.tools.example import ExampleSpec, write_example

    root = tmp_path_factory.mktemp("meps_small")
    return write_example(root, ExampleSpec(analysis_times=5, grid=(12, 14)))


@pytest.fixture
def meps_copy(meps_small, tmp_path) -> Path:
    """A private copy of the small dataset that a test may break."""
    import shutil

    shutil.copytree(meps_small.parent, tmp_path / "data")
    return tmp_path / "data" / meps_small.name
