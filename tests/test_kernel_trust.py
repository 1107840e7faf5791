"""Caches of the compiled kernel are code: each is read only where no one else
can write it (:mod:`wxstats.core.private_files`, :mod:`wxstats.core.kernel.cache`).

A store or numba cache folder of another user, or one its group or anyone can
write, is refused in one warning line and numba's kernel is used instead (from
numba's cache where that is private, else compiled: the numpy twin's bits);
a planted object that calls ``system()`` or a planted pickle in numba's index
is never run; temporary files are never written through a link; and a
read-only installation with a read-only ``$HOME`` computes without any cache
(issue 33, cases 2 and 9)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import wxstats
from wxstats.core import private_files
from wxstats.core.kernel import stored

pytestmark = pytest.mark.slow  # starts processes that load (or compile) the kernel

SRC = Path(wxstats.__file__).parents[1]
OTHER = 65534  # nobody / nogroup: another user, a group shared with others

_CHILD = """
import hashlib, json, sys, warnings, numpy as np
warnings.showwarning = lambda message, *rest: print("WARNING", message, file=sys.stderr)
import wxstats.core.kernel.choice as choice
from wxstats.core.kernel import Block, block_sums

def digest(s):
    parts = [s.step_sum1, s.step_sum2, s.step_count, s.minimum, s.maximum, s.nan_count,
             s.diff_step_sum1[1], s.diff_step_sum2[1]]
    return hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in parts)).hexdigest()

rng = np.random.default_rng(7)
a = rng.normal(280.0, 5.0, (5, 700, 3)).astype(np.float32)
a[1, 4, 2] = np.nan
out = {}
for kind in ("numba", "numpy"):
    choice.KERNEL = kind
    out[kind] = digest(block_sums(Block(a, np.arange(3), (0, 5), {1: (1, 5)})))
print(json.dumps({"same": out["numba"] == out["numpy"], "numba": "numba" in sys.modules}))
"""


def _child(env_vars: dict[str, str], cwd: Path) -> tuple[dict, list[str]]:
    """The child's result and its warning lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WXSTATS_", "NUMBA_"))}
    env.update(env_vars, PYTHONPATH=os.pathsep.join([str(SRC), *sys.path]))
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    return json.loads(done.stdout.splitlines()[-1]), warned


def _planted_object(work: Path) -> bytes:
    """A real ELF object whose entry (under the name the store calls, and under
    the name its header gives) runs ``touch MARKER``, with a header whose digest
    is right: all a stranger needs to write the store's format."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler to build the planted object")
    source = work / "planted.c"
    source.write_text(
        "#include <stdlib.h>\n"
        f'void {stored.SYMBOL}(void) {{ system("touch MARKER"); }}\n'
        'void evil(void) { system("touch MARKER"); }\n'
    )
    subprocess.run([cc, "-c", "-fPIC", "-O1", str(source), "-o", str(work / "planted.o")],
                   check=True)  # fmt: skip
    code = (work / "planted.o").read_bytes()
    header = {"symbol": "evil", "undefined": ["system"], "sha256": hashlib.sha256(code).hexdigest()}
    return json.dumps(header).encode() + b"\n" + code


def _shared(path: Path, how: str) -> None:
    """Make ``path`` a folder someone else can change."""
    if how == "group-writable":
        os.chmod(path, 0o770)
        os.chown(path, -1, OTHER)
    else:  # another user's
        os.chown(path, OTHER, OTHER)
        os.chmod(path, 0o755)


@pytest.fixture
def root_only():
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("changing a folder's owner to another user needs root")


@pytest.mark.parametrize("how", ["group-writable", "another user's"])
def test_a_planted_object_in_a_store_others_can_write_is_never_linked(tmp_path, root_only, how):
    """The issue's reproducer: a stranger's object with a right digest, named as
    the store names this machine's kernel, calling ``system()``. The store is
    refused in one warning line, nothing runs, and the numbers are the twin's."""
    store = tmp_path / "store"
    store.mkdir()
    planted = store / stored._name(np.dtype(np.float32))
    planted.write_bytes(_planted_object(tmp_path))
    os.chown(planted, OTHER, OTHER)
    _shared(store, how)
    result, warned = _child({"WXSTATS_KERNEL_CACHE": str(store)}, cwd=tmp_path)
    assert not (tmp_path / "MARKER").exists(), "the planted object ran"
    assert result["same"], "the numbers differ from the numpy twin's"
    assert len(warned) == 1 and "not private to this user" in warned[0], warned
    assert str(store) in warned[0] and ("group" in warned[0] or str(OTHER) in warned[0])
    assert sorted(p.name for p in store.iterdir()) == [planted.name], "the store was written"


def test_a_planted_pickle_in_a_shared_numba_cache_is_never_loaded(tmp_path, root_only):
    """``NUMBA_CACHE_DIR`` on a group-writable folder (HPC sites point it at shared
    space): an index file of numba's cache is a pickle, run when read. Planted
    under the names numba would read for the kernel's functions, it is never
    loaded: numba caches nothing there, the kernel is compiled in the process
    (the twin's bits), and one warning line says so. The store, beside it, is
    refused too (one line for both)."""
    from numba.core.caching import UserProvidedCacheLocator

    from wxstats.core.kernel import compiled

    shared = tmp_path / "numba-cache"
    marker = tmp_path / "MARKER"
    py_file = compiled.__file__
    folder = shared / UserProvidedCacheLocator.get_suitable_cache_subpath(py_file)
    folder.mkdir(parents=True)
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."  # pickle: os.system
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    functions = ("fold", "fold_extremes", "_reset", "kernel", "compiled_from")
    for name in functions:
        line = getattr(compiled, name).py_func.__code__.co_firstlineno
        (folder / f"compiled.{name}-{line}.{version}.nbi").write_bytes(payload)
    for path in (shared, folder):
        _shared(path, "group-writable")
    result, warned = _child({"NUMBA_CACHE_DIR": str(shared)}, cwd=tmp_path)
    assert not marker.exists(), "a planted numba index was unpickled"
    assert result["same"] and result["numba"]
    assert len(warned) == 1 and "not private to this user" in warned[0], warned
    assert not list(shared.rglob("*.o")), "the store was written in the shared folder"


def test_temporary_files_are_never_written_through_a_link(tmp_path, monkeypatch):
    """The store's temporary file is new (``O_EXCL``, a random name): a link
    planted under its name, to a file of the victim's, is not followed and the
    victim's file is untouched; a link under the stored name itself, or a file
    others can write, is refused when read."""
    store = tmp_path / "store"
    fd = private_files.open_folder(store, create=True)
    try:
        assert os.stat(store).st_mode & 0o777 == 0o700
        victim = tmp_path / "bashrc"
        victim.write_text("mine\n")
        monkeypatch.setattr(private_files.secrets, "token_hex", lambda n: "guessed")
        (store / ".kernel.o.guessed.tmp").symlink_to(victim)
        with pytest.raises(FileExistsError):
            private_files.write(fd, "kernel.o", b"code")
        assert victim.read_text() == "mine\n" and not (store / "kernel.o").exists()
        (store / ".kernel.o.guessed.tmp").unlink()
        private_files.write(fd, "kernel.o", b"code")
        assert os.stat(store / "kernel.o").st_mode & 0o777 == 0o600
        assert private_files.read(fd, "kernel.o") == b"code"
        assert private_files.read(fd, "absent.o") is None
        (store / "linked.o").symlink_to(store / "kernel.o")
        with pytest.raises(private_files.NotPrivate):
            private_files.read(fd, "linked.o")
        os.chmod(store / "kernel.o", 0o666)
        with pytest.raises(private_files.NotPrivate, match="anyone can write"):
            private_files.read(fd, "kernel.o")
    finally:
        os.close(fd)


def test_a_folder_is_private_only_if_every_folder_above_it_is(tmp_path, root_only):
    """A private folder inside one its group can write (not this user's own group)
    can be swapped by that group: refused, and so is a link to it. ``/tmp``'s
    sticky bit keeps others from renaming what is ours: accepted."""
    parent = tmp_path / "project"
    inner = parent / "me" / "kernels"
    inner.mkdir(parents=True, mode=0o700)
    assert private_files.folder_problem(inner) is None
    _shared(parent, "group-writable")
    assert "above" in private_files.folder_problem(inner)
    link = tmp_path / "link"
    link.symlink_to(inner)
    assert "above" in private_files.folder_problem(link)
    with pytest.raises(private_files.NotPrivate):
        private_files.open_folder(link, create=False)
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    assert private_files.folder_problem(sticky / "mine") is None
    os.chmod(sticky / "mine", 0o1777)  # but a sticky folder of ours lets others in
    assert "anyone can write" in private_files.folder_problem(sticky / "mine")


def test_a_numba_outside_the_checked_releases_uses_numbas_kernel(tmp_path, monkeypatch):
    """The store uses numba's internals: on a release it was not checked with it
    is left alone (nothing stored, nothing linked) and numba's kernel gives the
    twin's bits. The installed numba is one it was checked with: when this fails
    after an upgrade, run this file on the new numba and widen NUMBA_CHECKED."""
    import wxstats.core.kernel.choice as choice
    from wxstats.core.kernel import Block, block_sums

    assert stored.supported_numba(), (
        f"numba {stored._numba_release()[1]} is outside {stored.NUMBA_CHECKED}"
    )
    monkeypatch.setenv("WXSTATS_KERNEL_CACHE", str(tmp_path / "store"))
    monkeypatch.setattr(stored, "NUMBA_CHECKED", ((0, 1), (0, 2)))
    monkeypatch.setattr(stored, "_FUNCTIONS", {})
    monkeypatch.setattr(stored, "_link", lambda blob: pytest.fail("linked"))
    rng = np.random.default_rng(4)
    block = Block(rng.normal(0.0, 3.0, (4, 500, 2)), np.arange(2), (0, 4), {1: (1, 4)})
    monkeypatch.setattr(choice, "KERNEL", "numba")
    compiled = block_sums(block)
    monkeypatch.setattr(choice, "KERNEL", "numpy")
    twin = block_sums(block)
    assert compiled.step_sum2.tobytes() == twin.step_sum2.tobytes()
    assert compiled.diff_step_sum1[1].tobytes() == twin.diff_step_sum1[1].tobytes()
    assert not (tmp_path / "store").exists()


def _mount_namespace_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    probe = subprocess.run([unshare, "-m", "--propagation", "private", "true"],
                           capture_output=True)  # fmt: skip
    return probe.returncode == 0


@pytest.mark.skipif(not _mount_namespace_works(), reason="needs root and unshare -m")
def test_a_read_only_installation_and_home_compute_without_a_cache(tmp_path):
    """An HPC module or a container image: the installation and ``$HOME`` are
    read-only (mounted so, in a mount namespace of the test: root's writes are
    refused too) and nothing says where to cache. ``wxstats example`` computes
    with a kernel compiled in the process (at most one warning line) and writes
    the twin's numbers."""
    import wxstats.core.kernel.choice as choice
    from wxstats.cli import main

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    install = tmp_path / "install"
    shutil.copytree(SRC / "wxstats", install / "wxstats",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WXSTATS_", "NUMBA_", "XDG_", "PYTHONPYCACHE"))}  # fmt: skip
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(install), *sys.path]))
    script = (
        f"mount -t tmpfs -o ro tmpfs {home} && mount --bind -o ro {install} {install} && "
        f"{sys.executable} -m wxstats example {work / 'ex'}"
    )
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1 and "numba finds no folder it can write" in warned[0], done.stderr
    assert "Traceback" not in done.stderr and "no locator" not in done.stderr
    assert not list(home.iterdir()) and not list(install.rglob("*.nbi"))
    static = work / "ex" / "static"
    written = {p.name: p.read_bytes() for p in static.glob("*.pt")}
    assert len(written) >= 4, sorted(written)
    saved = choice.KERNEL
    try:  # the same outputs again, by the numpy twin, in this process
        choice.KERNEL = "numpy"
        config = next((work / "ex").glob("*.yaml"))
        assert main(["compute", str(config), "--quiet", "--overwrite"]) == 0
    finally:
        choice.KERNEL = saved
    assert {name: (static / name).read_bytes() for name in written} == written


def test_doctor_says_when_the_store_is_refused(tmp_path, monkeypatch, capsys, root_only):
    """``wxstats doctor`` names the store and why it is not used."""
    from wxstats.cli import main

    store = tmp_path / "store"
    store.mkdir()
    _shared(store, "group-writable")
    monkeypatch.setenv("WXSTATS_KERNEL_CACHE", str(store))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"not used, someone else can change it: {store}: its group (id {OTHER})" in out
