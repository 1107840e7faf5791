"""All-or-nothing outputs (io/atomic.py): nothing half-written, nothing replaced
on failure, and file modes a shared cluster expects."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from distributed_helpers import env

from wxstats.core.errors import WxstatsError
from wxstats.io import atomic


def _text(value: str):
    def write(path):
        path.write_text(value)

    return write


def test_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def bad(p):
        raise OSError(28, "No space left on device")

    with pytest.raises(WxstatsError, match="nothing was replaced"):
        atomic.write_all({target: _text("new"), tmp_path / "b.txt": bad}, overwrite=True)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_unwritable_output_folder_is_reported_up_front(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WxstatsError, match="not writable"):
        atomic.check_writable([blocker / "sub" / "x.pt"], overwrite=False)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_new_outputs_follow_the_umask(tmp_path, umask):
    # in a child process: the umask is process-wide; compare with what open() gives
    code = (
        "import os, sys\nfrom pathlib import Path\nfrom wxstats.io import atomic\n"
        f"os.umask({umask})\nd = Path(sys.argv[1])\n"
        "atomic.write_all({d / 'out.pt': lambda p: p.write_text('x')}, overwrite=False)\n"
        "open(d / 'plain.txt', 'w').close()\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env())
    assert _mode(tmp_path / "out.pt") == 0o666 & ~umask
    assert _mode(tmp_path / "out.pt") == _mode(tmp_path / "plain.txt")


def test_a_replaced_output_keeps_its_mode(tmp_path):
    target = tmp_path / "parameter_mean.pt"
    target.write_text("old")
    os.chmod(target, 0o664)
    atomic.write_all({target: _text("new")}, overwrite=True)
    assert target.read_text() == "new"
    assert _mode(target) == 0o664


def test_the_mode_survives_a_writer_that_recreates_its_file(tmp_path):
    target = tmp_path / "s.nc"
    target.write_text("old")
    os.chmod(target, 0o640)

    def recreate(path):
        path.unlink()
        path.write_text("new")

    atomic.write_all({target: recreate}, overwrite=True)
    assert _mode(target) == 0o640


def test_current_umask_does_not_change_it():
    before = os.umask(0o027)
    try:
        assert atomic.current_umask() == 0o027
        assert atomic.current_umask() == 0o027
    finally:
        os.umask(before)
