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
from wxstats.io.formats.neurallam import NEURALLAM_FILES


def _text(value: str):
    def write(path):
        path.write_text(value)

    return write


def test_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def bad(p):
        raise OSError(28, "No space left on device")

    with pytest.raises(WxstatsError, match="b.txt: no space left on .*Nothing was written or"):
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


# -- a set of files: all new or all previous ---------------------------------------------------

SET = [*NEURALLAM_FILES, "wxstats_stats.nc"]  # what a MEPS run writes into static/


def _old_set(folder):
    folder.mkdir(exist_ok=True)
    for name in SET:
        (folder / name).write_text(f"old {name}")
    return {name: f"old {name}" for name in SET}


def _contents(folder):
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("previous", [True, False])
def test_a_failed_rename_puts_the_previous_set_back(tmp_path, monkeypatch, previous):
    static = tmp_path / "static"
    static.mkdir()
    before = _old_set(static) if previous else {}
    real, renamed = os.replace, []

    def failing(src, dst):
        if os.path.basename(dst) in SET and str(src).endswith(".tmp"):  # a new file moving in
            if len(renamed) == 2:
                raise OSError(5, "Input/output error")
            renamed.append(dst)
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    outputs = {static / name: _text(f"new {name}") for name in SET}
    with pytest.raises(WxstatsError, match="nothing was replaced.*Input/output error"):
        atomic.write_all(outputs, overwrite=True)
    assert len(renamed) == 2  # two new files were in place when the third failed
    assert _contents(static) == before  # and no temporary file, link or journal is left


_KILLER = """
import os, signal, sys
from pathlib import Path
from wxstats.io import atomic
from wxstats.io.formats.neurallam import NEURALLAM_FILES
static, after = Path(sys.argv[1]), int(sys.argv[2])
real, moved = os.replace, []
def replace(src, dst):
    real(src, dst)
    if Path(dst).parent == static and not Path(dst).name.startswith("."):
        moved.append(dst)
        if len(moved) == after:
            os.kill(os.getpid(), signal.SIGKILL)
atomic.os.replace = replace
names = sys.argv[3:]
atomic.write_all({static / n: (lambda p, n=n: p.write_text("new " + n)) for n in names}, True)
"""


@pytest.mark.parametrize("killed_after", [1, 4, 7])
def test_a_writer_killed_between_renames_leaves_a_set_that_is_put_right(tmp_path, killed_after):
    from wxstats.core.errors import InputError
    from wxstats.io.read import read_stats

    static = tmp_path / "static"
    old = _old_set(static)
    new = {name: f"new {name}" for name in SET}
    cmd = [sys.executable, "-c", _KILLER, str(static), str(killed_after), *SET]
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    on_disk = {n: (static / n).read_text() for n in SET}
    assert sum(on_disk[n] == new[n] for n in SET) == killed_after  # killed half-way: a mix
    # wxstats' readers refuse the folder, naming what happened
    with pytest.raises(InputError, match="write of these files was interrupted"):
        read_stats(static)
    # the next write there (here: its up-front check) finishes the job first
    expected = new if killed_after == len(SET) else old
    with pytest.warns(UserWarning, match="interrupted between renames"):
        atomic.check_writable([static / n for n in SET], overwrite=True)
    assert _contents(static) == expected  # every file of one set, nothing else left


def test_an_existing_folder_as_output_is_refused_even_with_overwrite(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(WxstatsError, match="output is an existing folder"):
        atomic.check_writable([tmp_path / "out.json"], overwrite=True)


def test_an_output_folder_under_a_file_names_the_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(WxstatsError, match=f"{tmp_path / 'f'} is a file"):
        atomic.check_writable([tmp_path / "f" / "sub" / "x.pt"], overwrite=False)


def test_a_prepared_output_holds_its_template_until_discarded_with_its_folders(tmp_path):
    """Prepared before the data is read: the template in a temporary file in the final
    folder; a run that fails removes it and every folder made for it."""
    out = tmp_path / "new" / "sub" / "a.txt"
    prepared = atomic.prepare_all({out: _text("template")}, overwrite=False)
    (temp,) = prepared.temps.values()
    assert temp.parent == out.parent and temp.read_text() == "template" and not out.exists()
    prepared.discard()
    assert list(tmp_path.iterdir()) == []


def test_a_commit_writes_the_values_over_the_template_and_renames(tmp_path):
    out, unused = tmp_path / "new" / "a.txt", tmp_path / "new" / "b.txt"
    prepared = atomic.prepare_all({out: _text("template"), unused: None}, overwrite=False)
    prepared.commit({out: _text("values")})
    assert prepared.committed and out.read_text() == "values"
    assert sorted(p.name for p in out.parent.iterdir()) == ["a.txt"]  # no temporary left
    prepared.discard()  # after the commit: nothing to remove
    assert out.read_text() == "values"
