"""cli/process.py: the settings a process that runs one command takes (memory
kept for reuse, the collector paused during start-up). Each setting is checked
in a fresh interpreter: it is process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest
from distributed_helpers import env

_FAULTS = """
import resource, sys
import numpy as np
from wxstats.cli import process
if sys.argv[1] == "tuned":
    process.tune_for_one_command()
a = np.empty(12 << 20, np.uint8); a[:] = 1; del a  # a block's slab, freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.empty(12 << 20, np.uint8); a[:] = 1; del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True, env=env()
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_slabs_are_reused_not_faulted_in_again():
    """Untuned, each new 12 MB slab is mapped afresh (page faults, zeroing);
    tuned, the freed one is reused: no page faults at all."""
    assert _faults("plain") > 100
    assert _faults("tuned") < 10


def test_the_collector_waits_for_the_end_of_start_up():
    code = """
import gc
from wxstats.cli import process
default = gc.get_threshold()
process.tune_for_one_command()
paused = gc.get_threshold()
objects = [[] for _ in range(1000)]
process.end_of_start_up()
print(paused[0] > 50 * default[0], gc.get_threshold() == default, gc.get_freeze_count() >= 1000)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env()
    )
    assert out.stdout.split() == ["True", "True", "True"]


def test_end_of_start_up_leaves_a_library_callers_collector_alone():
    import gc

    from wxstats.cli import process

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.set_threshold(12345, 10, 10)  # a caller's own setting
    try:
        process.end_of_start_up()  # never tuned in this process
        assert gc.get_threshold() == (12345, 10, 10) and gc.get_freeze_count() == frozen
    finally:
        gc.set_threshold(*before)
