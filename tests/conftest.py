from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_under_basetemp(tmp_path_factory):
    """The processes the tests start (torchrun leaves its logs in ``torchelastic_*``,
    torch its compile caches, numba, dask and pip their own folders) write their
    temporary files under pytest's folder, which goes with it (at the end of a run
    that passed, or scripts/test.sh's own folder at its end), never into /tmp."""
    import os
    import tempfile

    folder = tmp_path_factory.getbasetemp() / "tmp"
    folder.mkdir(exist_ok=True)
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    yield
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    tempfile.tempdir = None


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


# Modules that start hosts in network namespaces (fixed addresses, tests/cluster.py) or a
# Slurm (fixed ports): never two at once.
_SHARING_THE_MACHINE = {"test_slurm": "hosts", "test_multinode": "hosts"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """scripts/test.sh runs the suite on two workers (pytest-xdist, ``--dist
    loadgroup``): each module goes whole to one worker, so its module fixtures (a
    cluster, a Slurm, an environment) are made once and its tests keep their order,
    and the modules in :data:`_SHARING_THE_MACHINE` go to the same worker. Without
    xdist the marks do nothing. ``tryfirst``: xdist's worker reads the marks in its
    own hook of this name (it appends the group to each test's id, which is what
    ``loadgroup`` distributes by); run after it, as this conftest's hook did, the
    marks came too late and every test went to either worker on its own."""
    for item in items:
        module = item.module.__name__ if item.module is not None else item.nodeid
        item.add_marker(pytest.mark.xdist_group(_SHARING_THE_MACHINE.get(module, module)))
