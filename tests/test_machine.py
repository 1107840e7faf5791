"""core/machine.py: the CPUs a process may use."""

from __future__ import annotations

import os

from wxstats.core.machine import available_cpus


def test_available_cpus_is_this_process_affinity():
    if hasattr(os, "sched_getaffinity"):
        assert available_cpus() == len(os.sched_getaffinity(0))
    assert available_cpus() >= 1
