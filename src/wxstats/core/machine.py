"""What this machine gives the process: the CPUs it may run on.

A pure question, no setting: kept in the lowest layer because both the sources
(threads that fetch and decompress chunks) and the runtime (threads per rank)
size themselves by it. The settings a process running one command takes live
with the command (:mod:`wxstats.cli.process`).
"""

from __future__ import annotations

import os


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system has one:
    a Slurm or taskset allocation, not the whole node)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
