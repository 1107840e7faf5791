"""A store ``--write-into`` changes in place, as others may hand it over: a planted
marker of an interrupted write moves nothing, and two runs never write one store
at once (io/storemarker.py, io/zarrstore.py, io/locks.py).

Journals of file sets are tested with the sets (tests/test_atomic.py), a write
killed between renames with each store (tests/test_mdp.py, tests/test_anemoi.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_helpers import env
from gridded_data import mdp_store

from wxstats.cli import main

MARKER = ".wxstats-replacing.json"
STAGING = ".wxstats-abcdefgh"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("mdp") / "danra.zarr"
    mdp_store(path)
    return path


@pytest.fixture
def world(pristine, tmp_path):
    """A copy of the store, a stand-in for ~/.bashrc and a folder outside the store."""
    store = tmp_path / "store.zarr"
    shutil.copytree(pristine, store)
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    (home / ".bashrc").write_text("the user's shell")
    (elsewhere / "keep.txt").write_text("someone's data")
    return store, home / ".bashrc", elsewhere


def _everything(root: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _plant(kind: str, store: Path, bashrc: Path, elsewhere: Path) -> None:
    """A marker of kind ``kind`` in ``store``, with a staging folder of wxstats' name."""
    staging = store / STAGING
    staging.mkdir()
    (staging / "planted").write_text("echo pwned")
    chunk = "state__train__mean/0"

    def doc(*steps, staging_name=STAGING):
        return {"wxstats_store_replacement": 1, "staging": staging_name, "steps": list(steps)}

    plain = doc(["file", chunk, f"{STAGING}/planted", None])
    docs = {
        "absolute target": doc(["file", str(bashrc), f"{STAGING}/planted", None]),
        "parent target": doc(["file", "../home/.bashrc", f"{STAGING}/planted", None]),
        "source outside": doc(["file", chunk, "../home/.bashrc", None]),
        "removal outside": doc(["remove", "../elsewhere/keep.txt", f"{STAGING}/planted"]),
        "staging elsewhere": doc(["in", "x", "../elsewhere/x", None], staging_name="../elsewhere"),
        "target the lock": doc(["file", ".wxstats-outputs.lock", f"{STAGING}/planted", None]),
        "through a link": doc(["file", "linked/keep.txt", f"{STAGING}/planted", None]),
    }
    marker = store / MARKER
    if kind == "deep":
        marker.write_text("[" * 200_000)
    elif kind == "link":
        (elsewhere / "marker.json").write_text(json.dumps(plain))
        marker.symlink_to(elsewhere / "marker.json")
    elif kind == "staging a link":
        shutil.rmtree(staging)
        staging.symlink_to(elsewhere)
        marker.write_text(json.dumps(doc(["remove", "x", f"{STAGING}/keep.txt"])))
    elif kind == "not owned":
        marker.write_text(json.dumps(plain))
        os.chown(marker, 65534, -1)
    else:
        if kind == "through a link":
            (store / "linked").symlink_to(elsewhere)
        marker.write_text(json.dumps(docs[kind]))


KINDS = [
    "absolute target", "parent target", "source outside", "removal outside",
    "staging elsewhere", "target the lock", "through a link", "deep", "link",
    "staging a link", "not owned",
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_marker_is_refused_and_nothing_is_touched(world, capsys, kind):
    """A marker names renames inside the store and its own staging folder, is the
    user's and a regular file, or the next --write-into refuses it in one line and
    moves nothing; readers refuse the store as interrupted whatever the marker says."""
    store, bashrc, elsewhere = world
    if kind == "not owned" and os.geteuid() != 0:
        pytest.skip("cannot give a file to another uid here (not root)")
    _plant(kind, store, bashrc, elsewhere)
    before, outside = _everything(store), _everything(elsewhere)
    assert main(["compute", str(store), "--write-into", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{store / MARKER}: not honoured" in err[0], err
    assert _everything(store) == before and _everything(elsewhere) == outside
    assert bashrc.read_text() == "the user's shell"
    assert main(["report", str(store)]) == 2
    assert "write into this store was interrupted" in capsys.readouterr().err


_FIRST_RUN = """
import sys
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, prepare_outputs, write_outputs
from wxstats.runtime.run import compute_source
options = ComputeOptions(dataset=sys.argv[1], write_into=True, splits=["val"])
source = open_source(options)
prepared = prepare_outputs(source, options)  # the store is locked from here
print("locked", flush=True)
sys.stdin.readline()  # until the test has tried a second run
write_outputs(source, compute_source(source), options, prepared=prepared)
prepared.discard()
print("written", flush=True)
"""


def test_a_second_write_into_one_store_is_refused_while_the_first_runs(world, capsys):
    """The decision: refuse, not wait (a waiting run would compute, then replace the
    first run's statistics with its own). Synchronized on the first run's output and
    input, never on time."""
    store, _, _ = world
    first = subprocess.Popen(
        [sys.executable, "-c", _FIRST_RUN, str(store)],
        env=env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout.readline().strip() == "locked"
        before = _everything(store)
        assert main(["compute", str(store), "--write-into", "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another wxstats run is writing into this store" in err[0], err
        assert f"(its lock file says: pid {first.pid} on " in err[0], err  # who holds it
        assert _everything(store) == before
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "written"
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert "state__val__mean" in {p.name for p in store.iterdir()}
    assert not [p.name for p in store.iterdir() if p.name.startswith(".wxstats")]
    assert main(["compute", str(store), "--write-into", "--quiet"]) == 0  # now its turn
