"""The helpers that let the interoperability environments share their files
(scripts/share-files.py, scripts/link-torch.py; scripts/cached-env.sh runs them):
only identical files become one, a module's source never without its bytecode, and
an environment changed afterwards never changes another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _env(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir()
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = root / "lib" / "python3.11" / "site-packages"
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    return site


def _share(env: Path, cache: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "share-files.py"), str(env), str(cache)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stderr


def test_identical_files_become_one_and_different_ones_stay_apart(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    common = {
        "numpy/core.so": b"\x7fELF" + bytes(5000),
        "numpy/__init__.py": b"x = 1\n",
        "numpy/__pycache__/__init__.cpython-311.pyc": b"pyc of a",
        "pandas/__init__.py": b"y = 2\n",  # bytecode only in the new environment
        "six.py": b"old\n",
    }
    a = _env(cache / "a", common)
    b = _env(
        cache / "b",
        common
        | {
            "numpy/__pycache__/__init__.cpython-311.pyc": b"pyc of b",
            "pandas/__pycache__/__init__.cpython-311.pyc": b"pyc of b",
            "six.py": b"new\n",
            "only_b.py": b"z = 3\n",
        },
    )
    said = _share(cache / "b", cache)
    assert "MB shared" in said

    def one(rel: str) -> bool:
        return (a / rel).stat().st_ino == (b / rel).stat().st_ino

    assert one("numpy/core.so")
    # a source goes with its bytecode, which records the source's time: both the twin's
    assert one("numpy/__init__.py") and one("numpy/__pycache__/__init__.cpython-311.pyc")
    # the twin has no bytecode for it: the source stays this environment's own
    assert not one("pandas/__init__.py")
    assert (b / "pandas/__pycache__/__init__.cpython-311.pyc").read_bytes() == b"pyc of b"
    assert not one("six.py") and (b / "six.py").read_bytes() == b"new\n"
    assert (b / "only_b.py").stat().st_nlink == 1
    # pip replaces a file, never writes it in place: the other environment keeps its own
    (b / "numpy/core.so").unlink()
    (b / "numpy/core.so").write_bytes(b"upgraded")
    assert (a / "numpy/core.so").read_bytes().startswith(b"\x7fELF")
    assert not list(cache.rglob("*.wxstats-link"))


@pytest.mark.slow  # copies torch (~750 MB) where its temporary folder is another file system
def test_this_interpreters_torch_is_linked_when_it_satisfies_the_pin(tmp_path):
    import torch

    version = torch.__version__.split("+")[0]
    target = tmp_path / "torch"
    script = str(SCRIPTS / "link-torch.py")
    done = subprocess.run([sys.executable, script, str(target), f"torch=={version}"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    init = target / "torch" / "__init__.py"
    assert init.read_bytes() == Path(torch.__file__).read_bytes()
    assert list(target.glob("torch-*.dist-info/RECORD"))
    assert not (target / ".." / "bin" / "torchrun").exists()
    other = subprocess.run([sys.executable, script, str(tmp_path / "no"), "torch==1.0.0"],
                           capture_output=True, text=True)  # fmt: skip
    assert other.returncode == 3 and not (tmp_path / "no").exists()
