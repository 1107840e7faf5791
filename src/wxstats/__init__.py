"""wxstats: exact, fast, parallel normalization statistics for weather ML datasets."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "compute", "read"]


def compute(path, **options):  # noqa: ANN001, ANN201 - thin lazy wrapper
    """Statistics of the dataset at ``path``; see :func:`wxstats.runtime.run.compute`."""
    from wxstats.runtime.run import compute as _compute

    return _compute(path, **options)


def read(path, split=None):  # noqa: ANN001, ANN201 - thin lazy wrapper
    """Statistics stored at ``path`` (any format wxstats writes or reads); see
    :func:`wxstats.io.read.read_stats`."""
    from wxstats.io.read import read_stats

    return read_stats(path, split)
