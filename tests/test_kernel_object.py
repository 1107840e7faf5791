"""The kernel's machine code, stored once and linked without numba
(wxstats.core.kernel.stored): a later process sums with it without importing
numba, and gets the numpy twin's bits (an independent implementation, itself
checked against the float64 reference in tests/test_kernels_numpy.py); a damaged
or unwritable store costs time, never a wrong number."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import wxstats

_SCRIPT = """
import hashlib, json, sys, numpy as np
import wxstats.core.kernel.choice as choice
from wxstats.core.kernel import Block, block_sums

def digest(s):
    parts = [s.step_sum1, s.step_sum2, s.step_count, s.minimum, s.maximum, s.nan_count]
    parts += [s.diff_step_sum1[1], s.diff_step_sum2[1], s.diff_minimum[1], s.diff_maximum[1]]
    if s.step_weight is not None:
        parts.append(s.step_weight)
    return hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in parts)).hexdigest()

rng = np.random.default_rng(5)
f32 = rng.normal(280.0, 5.0, (5, 700, 3)).astype(np.float32)
f32[2, 9, 1] = np.nan
blocks = {
    "float32": Block(f32, np.arange(3), (0, 5), {1: (1, 5)}),
    "weighted": Block(f32, np.array([0, 2]), (0, 5), {1: (1, 5)},
                      weights=rng.uniform(0.1, 1.0, 700)),
    "float64": Block(rng.normal(1e5, 50.0, (4, 600, 2)), np.arange(2), (0, 4), {1: (1, 4)}),
    "int16": Block(rng.integers(-3000, 3000, (4, 650, 2)).astype(np.int16), np.arange(2),
                   (0, 4), {1: (1, 4)}),
}
out = {}
for kind in ("numba", "numpy"):
    choice.KERNEL = kind
    out[kind] = {name: digest(block_sums(b)) for name, b in blocks.items()}
print(json.dumps({"same": out["numba"] == out["numpy"], "numba": "numba" in sys.modules,
                  "digests": out["numba"]}))
"""


def _run(cache: Path | str) -> dict:
    env = dict(os.environ, WXSTATS_KERNEL_CACHE=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(wxstats.__file__).parents[1]), *sys.path])
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@dataclass(frozen=True)
class _Store:
    cache: Path  # read only: a test that changes a store changes a copy
    doctor_before: str  # ``wxstats doctor`` on the folder before the first process
    first: dict  # what the first process, which compiled and stored, printed


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> _Store:
    """The store one first process compiled (numba: the longest step of this module)
    and filled, made once for the tests that link from it or damage a copy of it."""
    from wxstats.cli import main

    cache = tmp_path_factory.mktemp("store") / "kernels"
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()) as out:
        mp.setenv("WXSTATS_KERNEL_CACHE", str(cache))
        assert main(["doctor"]) == 0
    return _Store(cache, out.getvalue(), _run(cache))


def test_a_stored_kernel_is_linked_without_numba_and_gives_the_twins_bits(
    store, monkeypatch, capsys
):
    """First process: compiles (numba) and stores one object per dtype; second:
    links them alone, never imports numba, and sums float32 with NaN, weighted,
    float64 and int16 blocks to the twin's bits. ``wxstats doctor`` says what the
    store holds for this machine."""
    from wxstats.cli import main

    cache, first = store.cache, store.first
    assert f"compiled kernel stored in {cache} for none yet" in store.doctor_before
    assert first["same"] and first["numba"]
    stored = sorted(p.name.split("-")[1] for p in cache.glob("kernel-*.o"))
    assert stored == ["f4", "f8", "i2"], stored
    second = _run(cache)
    assert second["same"], "the linked kernel's bits differ from the twin's"
    assert not second["numba"], "numba was imported although the kernel was stored"
    assert second["digests"] == first["digests"]
    monkeypatch.setenv("WXSTATS_KERNEL_CACHE", str(cache))
    assert main(["doctor", "--json"]) == 0
    kernel = json.loads(capsys.readouterr().out)["kernel"]
    assert kernel == {"folder": str(cache), "this_machine": ["float32", "float64", "int16"],
                      "files": 3}  # fmt: skip


def test_a_damaged_store_is_compiled_again_never_linked(store, tmp_path):
    """A stored object whose bytes changed (a disk error, a foreign file of that
    name) is not linked (LLVM might abort on it): compiled again, same bits, and
    replaced by a good one."""
    cache = tmp_path / "kernels"
    shutil.copytree(store.cache, cache)  # a copy of the good store, modes kept (private)
    good = store.first
    assert sorted(p.name.split("-")[1] for p in cache.glob("kernel-*.o")) == ["f4", "f8", "i2"]
    assert not _run(cache)["numba"], "the copied store is not linked as it is"
    for path in cache.glob("kernel-*.o"):
        data = bytearray(path.read_bytes())
        data[-100] ^= 0xFF
        path.write_bytes(bytes(data))
    (cache / next(cache.glob("kernel-f8-*.o")).name).write_bytes(b"not an object")
    again = _run(cache)
    assert again["same"] and again["numba"] and again["digests"] == good["digests"]
    assert not _run(cache)["numba"], "the damaged objects were not replaced"


def test_an_unwritable_store_still_computes(tmp_path):
    """Where the cache folder cannot be made, the process computes with the code it
    compiled (the same bits), storing nothing."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _run(blocker / "kernels")
    assert result["same"] and result["numba"]
    assert blocker.is_file()


def test_the_stored_name_carries_the_cpu_and_numbas_settings(monkeypatch):
    """Nodes of other CPUs sharing a home folder keep their own objects."""
    import numpy as np

    from wxstats.core.kernel import stored

    plain = stored._key(np.dtype(np.float32))
    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")
    assert stored._key(np.dtype(np.float32)) != plain
    monkeypatch.delenv("NUMBA_CPU_NAME")
    assert stored._key(np.dtype(np.float32)) == plain
    assert stored._key(np.dtype(np.float64)) != plain


def test_the_symbols_an_object_needs_are_read_as_nm_reads_them(store, tmp_path):
    """The loader refuses an object whose symbols this process lacks (LLVM would
    abort the process instead): its ELF reader agrees with binutils' ``nm -u``."""
    from wxstats.core.kernel import elf

    blob = next(store.cache.glob("kernel-f4-*.o")).read_bytes()
    head, _, code = blob.partition(b"\n")
    assert set(json.loads(head)) == {"sha256"}, "the header names nothing to link or call"
    listed = elf.undefined_symbols(code)
    assert "memset" in listed or "PyErr_Clear" in listed
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("binutils' nm is not installed: the reader's own list was checked above")
    obj = tmp_path / "k.o"
    obj.write_bytes(code)
    lines = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True)
    assert sorted(listed) == sorted(line.split()[-1] for line in lines.stdout.splitlines())
    with pytest.raises(ValueError, match="ELF"):
        elf.undefined_symbols(b"MZ" + code[2:])
    for cut in (0x30, 0x40, len(code) // 2):  # truncated: refused, never an IndexError
        with pytest.raises(ValueError):
            elf.undefined_symbols(code[:cut])


def test_where_no_object_can_be_linked_numbas_kernel_gives_the_same_bits(monkeypatch):
    """On a platform without ELF objects (macOS, Windows) the kernel is numba's own
    function, from numba's cache, on the same arrays: the twin's bits."""
    import numpy as np

    import wxstats.core.kernel.choice as choice
    from wxstats.core.kernel import Block, block_sums, stored

    rng = np.random.default_rng(2)
    a = rng.normal(5.0, 2.0, (4, 300, 3)).astype(np.float32)
    a[1, 7, 2] = np.inf
    block = Block(a, np.arange(3), (0, 4), {1: (1, 4)}, weights=rng.uniform(0.5, 1.0, 300))
    monkeypatch.setattr(stored, "_FUNCTIONS", {})
    monkeypatch.setattr(stored.sys, "platform", "darwin")
    monkeypatch.setattr(stored, "_link", lambda blob: pytest.fail("linked on darwin"))
    monkeypatch.setattr(choice, "KERNEL", "numba")
    compiled = block_sums(block)
    assert stored._FUNCTIONS["<f4"].__name__ == "call"  # numba's, not a linked object
    monkeypatch.setattr(choice, "KERNEL", "numpy")
    twin = block_sums(block)
    for name in ("step_sum1", "step_sum2", "step_weight", "minimum", "maximum", "inf_count"):
        assert getattr(compiled, name).tobytes() == getattr(twin, name).tobytes(), name
    assert compiled.diff_step_sum2[1].tobytes() == twin.diff_step_sum2[1].tobytes()
