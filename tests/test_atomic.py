"""All-or-nothing outputs (io/atomic.py): nothing half-written, nothing replaced
on failure, and file modes a shared cluster expects."""

from __future__ import annotations

import json
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


# -- a journal is data from a folder others may write: confined, or refused ---------------------

TAG = "0123456789abcdef0123456789abcdef"
JOURNAL_GLOB = ".wxstats-replacing-*.json"


def _victims(tmp_path):
    """A stand-in for ~/.bashrc, a file in another folder, and a planted file in ``out``."""
    home, elsewhere, out = tmp_path / "home", tmp_path / "elsewhere", tmp_path / "out"
    for folder in (home, elsewhere, out):
        folder.mkdir()
    (home / ".bashrc").write_text("the user's shell")
    (elsewhere / "keep.txt").write_text("someone's data")
    (out / "planted.txt").write_text("echo pwned")
    return home / ".bashrc", elsewhere / "keep.txt", out


def _everything(tmp_path):
    """Every file under ``tmp_path`` (links as their target's name), to see nothing moved."""
    return {
        str(p.relative_to(tmp_path)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
        for p in sorted(tmp_path.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _hostile(kind, tmp_path, bashrc, keep, out):
    """A journal planted in ``out`` (its path), of kind ``kind``."""
    journal = out / f".wxstats-replacing-{TAG}.json"
    v2 = {"wxstats_journal": 2, "tag": TAG, "folders": []}
    docs = {
        # what wxstats wrote before: absolute paths, obeyed as they came
        "absolute": {
            "files": [[str(bashrc), str(out / "planted.txt"), None], [str(keep), "x.tmp", None]],
            "journals": [str(journal)],
        },
        "absolute names": {**v2, "files": [[str(bashrc), ".x.abcdefgh.tmp", None]]},
        "parent names": {**v2, "files": [["../home/.bashrc", "../out/planted.txt", None]]},
        "temp not ours": {**v2, "files": [["a.pt", "planted.txt", None]]},
        "link not ours": {**v2, "files": [["a.pt", ".a.pt.abcdefgh.tmp", "planted.txt"]]},
        "other tag": {**v2, "tag": "f" * 32, "files": []},
        "other folder": {**v2, "files": [], "folders": ["../elsewhere"]},
    }
    if kind == "deep":
        journal.write_text("[" * 200_000)
    elif kind == "symlink":
        target = tmp_path / "elsewhere" / "journal.json"
        target.write_text(json.dumps({**v2, "files": [["a.pt", ".a.pt.abcdefgh.tmp", None]]}))
        journal.symlink_to(target)
    elif kind == "hard link":
        journal.write_text(json.dumps({**v2, "files": [["a.pt", ".a.pt.abcdefgh.tmp", None]]}))
        os.link(journal, tmp_path / "elsewhere" / "second-name")
    elif kind == "other folder":
        # a journal of the same name there, but not naming this folder back
        journal.write_text(json.dumps(docs[kind]))
        theirs = tmp_path / "elsewhere" / journal.name
        theirs.write_text(
            json.dumps({**v2, "files": [["keep.txt", ".keep.txt.abcdefgh.tmp", None]]})
        )
    else:
        journal.write_text(json.dumps(docs[kind]))
    return journal


HOSTILE = [
    "absolute", "absolute names", "parent names", "temp not ours", "link not ours",
    "other tag", "other folder", "deep", "symlink", "hard link",
]  # fmt: skip


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_planted_journal_is_refused_and_nothing_is_touched(tmp_path, kind):
    """Before: a journal naming absolute paths moved the planted file over ~/.bashrc and
    removed a file of another folder. Now a journal names files of its own folder by
    wxstats' own patterns, or it is refused in one line, naming it and why."""
    bashrc, keep, out = _victims(tmp_path)
    journal = _hostile(kind, tmp_path, bashrc, keep, out)
    before = _everything(tmp_path)
    with pytest.raises(WxstatsError, match="not honoured") as refused:
        atomic.check_writable([out / "a.pt", out / "b.pt"], overwrite=True)
    assert str(journal) in str(refused.value) and "\n" not in str(refused.value)
    assert _everything(tmp_path) == before  # nothing moved, removed or created
    assert bashrc.read_text() == "the user's shell" and keep.is_file()


def test_the_cli_refuses_a_planted_journal_in_one_line(tmp_path, capsys):
    from gridded_data import gridded, write_zarr

    from wxstats.cli import main

    (tmp_path / "w").mkdir()
    bashrc, keep, out = _victims(tmp_path / "w")
    _hostile("absolute", tmp_path / "w", bashrc, keep, out)
    ds, _ = gridded(n_time=6)
    write_zarr(ds[["t2m"]], tmp_path / "g.zarr")
    before = _everything(tmp_path / "w")
    args = ["compute", str(tmp_path / "g.zarr"), "--output", str(out / "s.nc")]
    assert main([*args, "--summary", str(out / "s.json"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not honoured" in err[0] and ".wxstats-replacing-" in err[0], err
    assert _everything(tmp_path / "w") == before
    assert bashrc.read_text() == "the user's shell" and keep.read_text() == "someone's data"


def _killed_mid_set(static, killed_after=3):
    cmd = [sys.executable, "-c", _KILLER, str(static), str(killed_after), *SET]
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    (journal,) = static.glob(JOURNAL_GLOB)
    return journal


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="ownership is POSIX's")
def test_a_journal_not_owned_by_the_user_is_refused(tmp_path):
    """Owned means st_uid == the effective uid, root included (root may read every
    file, but a journal another user made is still that user's instruction)."""
    static = tmp_path / "static"
    old = _old_set(static)
    journal = _killed_mid_set(static)
    (static / ".wxstats-outputs.lock").unlink()  # the killed run's lock (the kernel let go of it)
    mixed = _contents(static)
    try:
        os.chown(journal, 65534, -1)
    except PermissionError:
        pytest.skip("cannot give a file to another uid here (not root)")
    with pytest.raises(WxstatsError, match=r"not honoured, it is owned by uid 65534, not by you"):
        atomic.check_writable([static / n for n in SET], overwrite=True)
    assert _contents(static) == mixed  # nothing put back, nothing removed
    os.chown(journal, os.geteuid(), -1)  # the user's own: honoured
    with pytest.warns(UserWarning, match="put the previous files back"):
        atomic.check_writable([static / n for n in SET], overwrite=True)
    assert _contents(static) == old


_KILLER_TWO_FOLDERS = """
import os, signal, sys
from pathlib import Path
from wxstats.io import atomic
a, b, after = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
real, moved = os.replace, []
def replace(src, dst):
    real(src, dst)
    if not Path(dst).name.startswith("."):
        moved.append(dst)
        if len(moved) == after:
            os.kill(os.getpid(), signal.SIGKILL)
atomic.os.replace = replace
outputs = [a / "x.pt", a / "y.pt", b / "s.json", b / "t.json"]
atomic.write_all({p: (lambda q, p=p: q.write_text("new " + p.name)) for p in outputs}, True)
"""


@pytest.mark.parametrize("killed_after", [1, 3])
@pytest.mark.parametrize("recovered_from", ["a", "b"])
def test_a_set_over_two_folders_comes_back_whole_from_either(
    tmp_path, killed_after, recovered_from
):
    """Each folder's journal names its own files and the other folder; the set comes
    back whole in both folders, whichever folder's next write finds it."""
    a, b = tmp_path / "static", tmp_path / "summary"
    a.mkdir(), b.mkdir()
    for p in (a / "x.pt", a / "y.pt", b / "s.json", b / "t.json"):
        p.write_text("old " + p.name)
    old = {**_contents(a), **_contents(b)}
    cmd = [sys.executable, "-c", _KILLER_TWO_FOLDERS, str(a), str(b), str(killed_after)]
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    journals = [*a.glob(JOURNAL_GLOB), *b.glob(JOURNAL_GLOB)]
    assert len(journals) == 2
    doc = json.loads(journals[0].read_text())
    assert all("/" not in name for entry in doc["files"] for name in entry if name)
    # the next write of a set into either folder puts it back, in both
    outputs = [a / "x.pt", a / "y.pt"] if recovered_from == "a" else [b / "s.json", b / "t.json"]
    with pytest.warns(UserWarning, match="put the previous files back"):
        atomic.check_writable(outputs, overwrite=True)
    assert {**_contents(a), **_contents(b)} == old  # both folders, nothing else left


def test_temporary_files_a_killed_run_left_are_removed_by_the_next(tmp_path):
    """Only wxstats' own names for these outputs, only regular files of the user."""
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    outside.write_text("keep")
    code = (
        "import os, signal, sys\nfrom pathlib import Path\nfrom wxstats.io import atomic\n"
        "out = Path(sys.argv[1])\n"
        "atomic.prepare_all({out / 'a.nc': lambda p: p.write_text('t'), out / 'b.json': None},"
        " overwrite=False)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(out)], env=env(), timeout=120)
    assert done.returncode == -9
    left = sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp"))
    assert len(left) == 2  # and the folder's lock, which the next run removes
    (out / ".a.nc.zzzzzzzz.tmp").symlink_to(outside)  # not a regular file
    (out / ".other.txt.abcdefgh.tmp").write_text("another program's")  # not our output
    (out / "a.nc.tmp").write_text("not our pattern")
    foreign = out / ".b.json.yyyyyyyy.tmp"
    foreign.write_text("another user's")
    try:
        os.chown(foreign, 65534, -1)
    except PermissionError:
        foreign.unlink()
    atomic.write_all({out / "a.nc": _text("a"), out / "b.json": _text("b")}, overwrite=False)
    kept = {".a.nc.zzzzzzzz.tmp", ".other.txt.abcdefgh.tmp", "a.nc.tmp", "a.nc", "b.json"}
    if foreign.exists():
        kept.add(foreign.name)
    assert {p.name for p in out.iterdir()} == kept
    assert outside.read_text() == "keep"


def test_a_live_runs_temporary_files_are_not_taken_for_a_dead_ones(tmp_path):
    """A run writing into the folder holds its lock: the next one leaves its files."""
    out = tmp_path / "out"
    first = atomic.prepare_all({out / "a.nc": _text("template")}, overwrite=False)
    second = atomic.prepare_all({out / "a.nc": _text("template")}, overwrite=False)
    assert all(t.exists() for t in [*first.temps.values(), *second.temps.values()])
    first.commit({out / "a.nc": _text("first")})
    assert (out / "a.nc").read_text() == "first"
    second.discard()
    assert sorted(p.name for p in out.iterdir()) == ["a.nc"]


def test_a_planted_lock_link_is_refused(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("keep")
    (out / ".wxstats-outputs.lock").symlink_to(outside)
    with pytest.raises(WxstatsError, match="symbolic link"):
        atomic.write_all({out / "a.nc": _text("a")}, overwrite=False)
    assert outside.read_text() == "keep" and not (out / "a.nc").exists()


@pytest.mark.parametrize("theirs", [False, True], ids=["writable", "another user's"])
def test_a_planted_lock_fifo_is_refused_without_blocking(tmp_path, monkeypatch, theirs):
    """A FIFO planted as the folder's lock is refused in one line, and its open
    never blocks (``O_NONBLOCK``): not even the read-only open of a lock file that
    is not the user's, which without it would wait for a writer forever. Another
    user's file is simulated (root may open anything read-write)."""
    import signal

    from wxstats.io import locks

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / locks.LOCK_NAME, 0o444 if theirs else 0o644)
    if theirs:
        real = os.open

        def not_yours(path, flags, *args, **kwargs):
            if os.path.basename(path) == locks.LOCK_NAME and flags & os.O_RDWR:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, flags, *args, **kwargs)

        monkeypatch.setattr(locks.os, "open", not_yours)

    def hung(signum, frame):
        raise TimeoutError("the open of the planted FIFO blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(WxstatsError, match="not a regular file") as refused:
            atomic.write_all({out / "a.nc": _text("a")}, overwrite=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "\n" not in str(refused.value)
    assert stat.S_ISFIFO(os.lstat(out / locks.LOCK_NAME).st_mode)
    assert not (out / "a.nc").exists()
