"""What every source provides: an ordered list of samples and how to read one.

Sources know nothing of ranks, accumulators or output files: they list
samples, read one into :class:`~wxstats.kernels.Block` views (one per
stream), and describe a sample for error messages.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

from wxstats.kernels import Block


@dataclass(frozen=True)
class StreamSpec:
    """One group of features reduced together ("state", or a forcing field)."""

    name: str
    features: list[str]
    units: list[str]
    diff_steps: tuple[int, ...] = ()
    long_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StreamLayout:
    """Where a stream's statistics go in a ``{prefix}__{split}__{op}`` file.

    ``features`` are the C-order product of ``feature_dims`` (none: one
    scalar feature); ``coords`` are written along them (name -> (dims,
    values)). ``category`` groups streams in the JSON summary ("state",
    "forcing" or "static").
    """

    prefix: str
    split: str
    feature_dims: tuple[str, ...] = ()
    feature_shape: tuple[int, ...] = ()
    coords: dict[str, tuple[tuple[str, ...], Any]] = field(default_factory=dict)
    category: str = "state"


class Source(Protocol):
    """An ordered list of samples (see module docstring).

    Optional: ``exact_per_step = True`` and ``reference_blocks()`` for
    sources whose samples are arbitrary groups of time steps (see
    :mod:`wxstats.engine`); ``layout`` (a :class:`StreamLayout` per stream)
    for ``{prefix}__{split}__{op}`` outputs.
    """

    kind: str
    streams: list[StreamSpec]
    attrs: dict[str, Any]

    def __len__(self) -> int: ...

    def read(self, index: int) -> dict[str, Block]:
        """The blocks of sample ``index``, keyed by stream name."""
        ...

    def describe(self, index: int) -> str:
        """Where sample ``index`` comes from, for messages (a file name...)."""
        ...

    def nbytes(self, index: int) -> int:
        """Bytes read for sample ``index`` (progress and estimates)."""
        ...

    # Optional: ``prefetch(index) -> None`` starts reading a sample in the
    # background (a hint; the engine calls it a few samples ahead if present).

    def identity(self) -> dict[str, Any]:
        """What the data is (files, sizes, times): to refuse a stale resume."""
        ...


_SIZES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sample_sizes(source: Source) -> list[int]:
    """``source.nbytes(i)`` of every sample, asked once per source.

    A MEPS source answers by stat-ing two files per sample; progress, the run
    record, the checkpoint fingerprint and the ranks' layout check all need
    the sizes, so they share this one list instead of stat-ing again.
    """
    try:
        return _SIZES[source]
    except (KeyError, TypeError):
        sizes = [int(source.nbytes(i)) for i in range(len(source))]
    with contextlib.suppress(TypeError):  # a source that cannot be weakly referenced
        _SIZES[source] = sizes
    return sizes
