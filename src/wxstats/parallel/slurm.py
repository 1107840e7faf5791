"""What Slurm's environment says about a job step: node lists (``node[01-03,07]``,
expanded here, no ``scontrol``), tasks per node (``2(x3),1``) and the port a
step's ranks meet on."""

from __future__ import annotations

import re

SLURM_PORT_BASE = 20000


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in {text!r}")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_range(spec: str, whole: str) -> list[str]:
    values = []
    for part in spec.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"bad range {part!r} in {whole!r}")
        width = len(low)  # "01-03" keeps its zero padding
        for n in range(int(low), int(high if sep else low) + 1):
            values.append(str(n).zfill(width))
    return values


def expand_nodelist(text: str) -> list[str]:
    """Host names of a Slurm node list, in order: ``node[01-03,07]`` →
    node01 node02 node03 node07; ``a1,b[2-4]``; ``r[1-2]-n[1-2]`` (products)."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        match = re.search(r"\[([^\[\]]*)\]", item)
        if match is None:
            if "]" in item:
                raise ValueError(f"unbalanced ']' in {text!r}")
            hosts.append(item)
            continue
        head, tail = item[: match.start()], item[match.end() :]
        for value in _expand_range(match.group(1), text):
            hosts.extend(expand_nodelist(head + value + tail))
    return hosts


def tasks_per_node(text: str) -> list[int]:
    """``SLURM_STEP_TASKS_PER_NODE`` such as ``2(x3),1`` → [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise ValueError(f"bad tasks-per-node list {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def slurm_port(job_id: int, step_id: int) -> int:
    """A port for the job's store, from 20000 to 59999: two jobs whose ids
    differ by less than 5000 never share one, nor do 8 consecutive steps."""
    return SLURM_PORT_BASE + (job_id % 5000) * 8 + step_id % 8
