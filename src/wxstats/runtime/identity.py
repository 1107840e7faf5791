"""The one identity of a run, and the one line that says how two differ.

Every participant that joins sums computed apart (the ranks of a job, a
checkpoint resumed, a state updated or merged) compares a :func:`run_identity`
and refuses with :func:`first_difference`. It has three sections:

- ``data``: everything that changes a sum whatever the time steps: the kind
  of data, split name, variables with their features (in order), units and
  grid, the values and order of the grid's and every other non-time
  dimension's coordinates, difference steps, ``--skipna``, ``--by``,
  ``--weights``, a MEPS datastore's channels read and config file. A state
  keeps this section: it grows only with data that matches it.
- ``run``: which time steps (times, splits, ``--period``, a MEPS split's
  file names and sizes). The ranks of a job and a checkpoint must match it too.
- ``job``: how the steps are cut into samples (their number and a digest of
  their sizes, which the block size makes) and the version of the code: the
  ranks of a job only, which share out samples by index. A checkpoint records
  the time steps it holds, not samples, so a resume may use another block
  size, or a newer wxstats that reads the same checkpoint format.
- ``files``: where the inputs are and when they changed (paths, sizes,
  modification times, chunk listings): a checkpoint only, as ranks may read
  copies of the data staged on each node.

``--threads``, ``--nproc`` and the block size are in none of the sections a
checkpoint compares: they change no bit.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.errors import WxstatsError
from wxstats.sources.base import Source, sample_sizes
from wxstats.sources.factory import describe_array_changes

VERSION = 2
"""Of the identity's layout (1: before the grid's coordinates were in it)."""

SECTIONS = {
    "state": ("data",),
    "ranks": ("data", "run", "job"),
    "checkpoint": ("data", "run", "files"),
}
"""Which sections each participant compares."""

_SECTION_NAMES = {s for sections in SECTIONS.values() for s in sections}

_ORDER = (
    "data", "run", "job", "version", "kind", "split", "time_dim", "variables", "features", "units",
    "grid", "coords", "channels", "config", "diff_steps", "skipna", "by", "weights", "moments",
    "times", "splits", "period", "window", "inputs", "samples", "wxstats_version",
    "files", "arrays",
)  # fmt: skip
"""The order keys are compared in: the first difference named is the most telling."""

_NAMES = {
    "version": "identity version",
    "kind": "kind of data",
    "time_dim": "time dimension",
    "grid": "grid shape",
    "channels": "channels read (remove_state_features_with_index)",
    "config": "datastore config file content",
    "diff_steps": "difference steps",
    "skipna": "--skipna",
    "moments": "--moments",
    "by": "--by",
    "times": "time axis (first, last, steps)",
    "splits": "splits (name, first and end step; --split, --period)",
    "period": "--period",
    "window": "statistics window",
    "samples": "samples (number; digest of their sizes, --block-mb)",
    "wxstats_version": "wxstats version",
}


def run_identity(source: Source, skipna: bool, who: str = "checkpoint") -> dict[str, Any]:
    """The sections of a run's identity over ``source`` that ``who`` compares (a
    key of :data:`SECTIONS`; see module docstring)."""
    files = "files" in SECTIONS[who]
    own = source.identity(files=files)
    order = max((s.order for s in source.streams), default=2)
    whole = {
        "data": {
            "version": VERSION,
            **own.get("data", {}),
            "skipna": bool(skipna),
            **({"moments": order} if order != 2 else {}),  # absent: 2, as before --moments
        },
        "run": own.get("run", {}),
        "files": own.get("files", {}) if files else {},
    }
    if "job" in SECTIONS[who]:
        sizes = np.array(sample_sizes(source), dtype=np.int64)
        whole["job"] = {
            "samples": [len(source), hashlib.sha256(sizes.tobytes()).hexdigest()[:16]],
            "wxstats_version": __version__,
        }
    return {p: whole[p] for p in SECTIONS[who]}


def _keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    known = [k for k in _ORDER if k in a or k in b]
    return known + sorted((set(a) | set(b)) - set(known))


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_text(v) for v in value) if value else "none"
    return "none" if value is None else str(value)


def _named_lists(key: str, a: list, b: list, here: str, there: str) -> str:
    """Lists of ``[name, size, ...]`` (files): which were added, removed or changed."""
    old = {str(f[0]): f[1:] for f in a or []}
    new = {str(f[0]): f[1:] for f in b or []}
    changed = sorted(n for n in old if n in new and old[n] != new[n])
    for label, names in (
        (f"only in {here}", sorted(set(old) - set(new))),
        (f"only in {there}", sorted(set(new) - set(old))),
        ("modified", changed),
    ):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return f"files {label}: {shown}"
    return f"{key}: the order of the files differs"


def _variables(a: list, b: list, here: str, there: str) -> str | None:
    va = {v["name"]: v for v in a or []}
    vb = {v["name"]: v for v in b or []}
    if set(va) != set(vb):
        return (
            f"variables {', '.join(sorted(va)) or 'none'} in {here}, "
            f"{', '.join(sorted(vb)) or 'none'} in {there}"
        )
    for name in sorted(va):
        x, y = va[name], vb[name]
        for key in _keys(x, y):
            if x.get(key) != y.get(key):
                what = key.replace("_", " ")
                return (
                    f"variable {name}: {what} {_text(x.get(key))} in {here}, "
                    f"{_text(y.get(key))} in {there}"
                )
    return None


def _coords(a: dict, b: dict, here: str, there: str) -> str | None:
    for name in _keys(a or {}, b or {}):
        x, y = (a or {}).get(name), (b or {}).get(name)
        if x == y:
            continue
        if x is None or y is None:
            return f"coordinate {name}: only in {there if x is None else here}"
        if x.get("text") == y.get("text"):
            return f"{name} differs: other values, both {x.get('text')}"
        return f"{name} differs: {x.get('text')} in {here}, {y.get('text')} in {there}"
    return None


def _weights(a: Any, b: Any, here: str, there: str) -> str:
    ma, mb = (a or {}).get("method"), (b or {}).get("method")
    if ma != mb:
        return f"--weights {ma or 'none'} in {here}, {mb or 'none'} in {there}"
    return f"--weights {ma}: other weights (another grid or latitudes)"


def _differ(key: str, x: Any, y: Any, here: str, there: str) -> str | None:
    if x == y:
        return None
    if key == "variables":
        return _variables(x, y, here, there)
    if key == "coords":
        return _coords(x, y, here, there)
    if key == "weights":
        return _weights(x, y, here, there)
    if key in ("files", "inputs"):
        return _named_lists(key, x, y, here, there)
    if key == "arrays":
        return "; ".join(describe_array_changes(x or {}, y or {})) or None
    if isinstance(x, dict) and isinstance(y, dict):
        found = _first(x, y, here, there)
        return f"{_NAMES.get(key, key)} {found}" if found else None
    name = _NAMES.get(key, key.replace("_", " "))
    return f"{name}: {_text(x)} in {here}, {_text(y)} in {there}"


def _first(x: dict[str, Any], y: dict[str, Any], here: str, there: str) -> str | None:
    """The first key of ``x`` or ``y`` whose values differ, described."""
    found = (_differ(k, x.get(k), y.get(k), here, there) for k in _keys(x, y))
    return next((f for f in found if f), None)


def refuse_other_rank(mine: dict[str, Any], rank0: dict[str, Any], rank: int) -> None:
    """A rank's run identity must be rank 0's (a job sums one run)."""
    change = first_difference(mine, rank0, f"rank {rank}", "rank 0")
    if change:
        raise WxstatsError(
            f"this rank's run differs from rank 0's: {change}; start every rank with the same "
            "command on the same data"
        )


def first_difference(
    a: dict[str, Any], b: dict[str, Any], here: str = "one", there: str = "the other"
) -> str | None:
    """The first difference between two identities (or sections of them), in one
    phrase naming what differs and how, with ``a`` called ``here`` and ``b``
    ``there``; None when they are the same."""
    a, b = json.loads(json.dumps(a, default=str)), json.loads(json.dumps(b, default=str))
    for p in _keys(a, b):
        x, y = a.get(p), b.get(p)
        section = p in _SECTION_NAMES and isinstance(x, dict) and isinstance(y, dict)
        found = _first(x, y, here, there) if section else _differ(p, x, y, here, there)
        if found:
            return found
    return None
