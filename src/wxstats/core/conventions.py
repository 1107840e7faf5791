"""Words the datasets and the files share: the ecosystem's naming, written once.

Sources (reading MEPS, mllam-data-prep, anemoi) and writers/readers of files
(``wxstats.io``) may not import each other, yet both must spell the same
names: a stream's role, mllam-data-prep's ``{variable}__{split}__{op}`` and
``{role}_feature`` names, MEPS's TOA flux and levels, anemoi's time spans (``6h``, ``1d``)
and the attribute that marks wxstats' own files. They live here, in core,
because both sides may import core; nothing here computes a statistic.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

ROLES = ("state", "forcing", "static")
"""What a stream is to a model (mllam-data-prep's *categories*): evolved, given, constant."""
FEATURE_SUFFIX = "_feature"
"""A dimension ``{role}_feature`` lists named features itself (mllam-data-prep's)."""
RUN_ATTR = "wxstats_run"
"""The global attribute of every statistics file wxstats writes (the run record):
how a dataset glob recognizes an earlier output and leaves it out."""
MEPS_FLUX = "toa_downwelling_shortwave_flux"
"""The forcing of neural-lam's MEPS datastore (its ``[mean, std]`` is ``flux_stats.pt``)."""


def feature_dim(role: str) -> str:
    """The dimension along which the named features of ``role`` lie (``state_feature``)."""
    return f"{role}{FEATURE_SUFFIX}"


def lists_features(dims: tuple[str, ...]) -> bool:
    """Whether a ``{role}_feature`` dimension is among ``dims`` (its values are the
    features' names, not labels to prefix with the variable)."""
    return any(d.endswith(FEATURE_SUFFIX) for d in dims)


def units_coord(dim: str) -> str:
    """The coordinate of each feature's unit along ``dim`` (``state_feature_units``)."""
    return f"{dim}_units"


def long_name_coord(dim: str) -> str:
    """The coordinate of each feature's long name along ``dim``."""
    return f"{dim}_long_name"


def stream_name(variable: str, split: str) -> str:
    """The key of the stream of ``variable`` in ``split`` (``t2m__train``): how
    sources key their blocks and :attr:`Stats.streams` its statistics, the
    prefix of mllam-data-prep's ``{variable}__{split}__{op}`` names."""
    return f"{variable}__{split}"


def has_split_statistics(names: list[str], split: str) -> bool:
    """Whether a store holds mllam-data-prep statistics of ``split`` (a variable
    named ``{variable}__{split}__...``)."""
    pattern = re.compile(rf"^\w+__{re.escape(split)}__")
    return any(pattern.match(n) for n in names)


def coord_label(value: Any) -> str:
    """A coordinate value as text in a feature name (``500.0`` -> ``500``)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (np.floating, float)) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def feature_names(variable: str, labels: list[list[str]], prefixed: bool = True) -> list[str]:
    """The flat feature names of a stream along dimensions whose coordinate
    values read ``labels`` (C order): ``z_500``, ``t2m_1`` (month 1), or the
    bare labels (``prefixed=False``: a ``*_feature`` dimension names its
    features itself); ``variable`` alone without dimensions."""
    if not labels:
        return [variable]
    head = [variable] if prefixed else []
    return [
        "_".join(head + [labels[i][j] for i, j in enumerate(combo)])
        for combo in np.ndindex(*[len(x) for x in labels])
    ]


# -- time spans as anemoi writes them (``6h``, ``12h``, ``1d``, ``30m``) -------------
# anemoi names a dataset's ``frequency`` and each tendency by its time span
# (``anemoi.utils.dates.frequency_to_string``): its source reads them, its writer
# and reader name arrays by them, and every message names a difference by them.
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


def levels_of(long_names: list[str]) -> list[str]:
    """The vertical level of each MEPS long name: its second-last ``_`` field
    (for ``parameter_weights.npy``)."""
    return [p[-2] if len(p) >= 2 else "" for p in (name.split("_") for name in long_names)]
