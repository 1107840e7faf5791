"""Times in words and in groups: pure functions of numpy (or cftime) time values.

Sources check and select time axes; a statistics state names its coverage and
a seam's steps belong to climatology groups: both sides spell a time, a step
and a group the same way, so the functions live here, in core.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def fmt_time(value: Any) -> str:
    """A time as messages and states write it (ISO 8601; a number as itself)."""
    if isinstance(value, np.datetime64):
        import pandas as pd

        return pd.Timestamp(value).isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return repr(float(value)) if isinstance(value, (np.floating, float)) else str(value)


def fmt_delta(delta: Any) -> str:
    """A time step in words (``0 days 06:00:00``; a number as itself)."""
    if isinstance(delta, np.timedelta64):
        import pandas as pd

        return str(pd.Timedelta(delta))
    return str(delta)


GROUPINGS = ("month", "hour", "year")
"""What ``--by`` groups time steps by."""


def group_values(by: str, times: np.ndarray | None = None) -> list[int]:
    """The groups of a climatology: months 1..12, or hours 0..23 (all of them,
    so that files and states of any period share one layout); for ``year`` the
    years that ``times`` (the steps the splits use) hold, known before reading."""
    if by == "year":  # times are needed (None: pandas refuses)
        return sorted({int(y) for y in _fields(by, times)})
    return list(range(1, 13)) if by == "month" else list(range(24))


def _fields(by: str, times: np.ndarray | None) -> np.ndarray:
    """The month, hour or year of each datetime64 time."""
    import pandas as pd

    index = pd.DatetimeIndex(times)
    return np.asarray(getattr(index, by), dtype=np.int64)


def group_index(by: str, times: np.ndarray, values: list[int] | None = None) -> np.ndarray:
    """The group (an index into :func:`group_values`, ``values`` for ``year``)
    of each datetime64 time; -1 for a year not in ``values`` (a step outside
    every split, never counted)."""
    fields = _fields(by, times)
    if by == "month":
        return fields - 1
    if by == "hour":
        return fields
    known = np.asarray(values if values is not None else group_values(by, times), dtype=np.int64)
    at = np.minimum(np.searchsorted(known, fields), max(len(known) - 1, 0))
    return np.where(known[at] == fields, at, -1) if len(known) else np.full(len(fields), -1)
