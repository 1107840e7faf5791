"""Time spans written as anemoi writes them (``6h``, ``12h``, ``1d``, ``30m``).

anemoi names a dataset's ``frequency`` and each tendency by its time span
(``anemoi.utils.dates.frequency_to_string``); the anemoi source reads them and
the anemoi writer and reader name arrays by them, so both use these two.
"""

from __future__ import annotations

import re

_SPAN = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 3600}


def span_seconds(text: object) -> int | None:
    """Seconds of ``6h``, ``1d``, ``30m``, ``45s`` (a bare number: hours); None if not one."""
    match = _SPAN.match(str(text))
    if not match or int(match.group(1)) <= 0:
        return None
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def span_name(seconds: int) -> str:
    """A time span as anemoi names it: whole days ``1d``, else whole hours ``6h``,
    minutes ``30m``, seconds ``45s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def step_text(step: int | None, seconds: int | None = None) -> str:
    """What a difference step spans: its time span (``6h``) whatever the source
    counts steps in, else its steps (``3 steps``: a numeric time axis), ``""``
    when a file says neither."""
    if seconds:
        return span_name(seconds)
    if step is None:
        return ""
    return f"{step} step{'s' if step != 1 else ''}"


def diff_label(step: int | None, seconds: int | None = None) -> str:
    """How every table, message and file names a difference step: ``diff 6h``,
    ``diff 3 steps`` (see :func:`step_text`), ``diff`` when the file says neither."""
    text = step_text(step, seconds)
    return f"diff {text}" if text else "diff"
