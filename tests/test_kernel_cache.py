"""Neither cache of the kernel can serve machine code compiled from another
reduction table or lane template (the table's slots are compile-time constants):
a stale cache would put sums in the wrong slots, so wrong numbers. numba's
cache watches only ``kernel/compiled.py``'s stamp (hence its guard,
``refresh_stale_cache``); the stored objects of :mod:`wxstats.core.kernel.stored`
are named by a digest of every source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import wxstats

_SCRIPT = """
import hashlib, numpy as np
import wxstats.core.kernel.choice as choice
import wxstats.core.kernel as kernels
assert kernels.__file__.startswith({root!r}), kernels.__file__
out = []
for kernel in ("numba", "numpy"):
    choice.KERNEL = kernel
    rng = np.random.default_rng(3)
    a = rng.normal(280.0, 5.0, (6, 900, 3)).astype(np.float32)
    s = kernels.block_sums(kernels.Block(a, np.arange(3), (0, 6), {{1: (1, 6)}}))
    parts = [s.step_sum1, s.step_sum2, s.minimum, s.maximum, s.diff_step_sum1[1],
             s.diff_step_sum2[1]]
    out.append(hashlib.sha256(b"".join(p.tobytes() for p in parts)).hexdigest())
print(out[0] == out[1], *out)
"""


def test_a_changed_reduction_table_is_not_served_from_a_stale_cache(tmp_path):
    """The package copied (file times kept), the kernel compiled into a cache, then
    two quantities of the reduction table swapped (their slots change): the next
    process must compute with the new slots, as the numpy twin does."""
    package = Path(wxstats.__file__).parent
    root = tmp_path / "src"
    shutil.copytree(package, root / "wxstats", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("WXSTATS_KERNEL_CACHE", None)  # the stored objects go beside numba's cache

    def same_as_twin() -> str:
        script = _SCRIPT.format(root=str(root))
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        return done.stdout.split()[0]

    assert same_as_twin() == "True"
    table = root / "wxstats" / "core" / "reduction.py"
    text = table.read_text()
    sum1 = '    Quantity("sum1", np.float64, 0.0, "sum", per_step=True, power=1),\n'
    sum2 = '    Quantity("sum2", np.float64, 0.0, "sum", per_step=True, power=2),\n'
    assert sum1 + sum2 in text
    table.write_text(text.replace(sum1 + sum2, sum2 + sum1))
    assert any((tmp_path / "cache").rglob("*.nbi")), "the first run left no cache"
    assert same_as_twin() == "True"
    objects = list((tmp_path / "cache").rglob("kernel-f4-*.o"))
    assert len(objects) == 2, f"the new table's kernel was not stored apart: {objects}"
