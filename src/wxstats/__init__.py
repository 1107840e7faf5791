"""wxstats: exact, fast, parallel normalization statistics for weather ML datasets."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "compute"]


def compute(path, **options):  # noqa: ANN001, ANN201 - thin lazy wrapper
    """Statistics of the dataset at ``path``; see :func:`wxstats.api.compute`."""
    from wxstats.api import compute as _compute

    return _compute(path, **options)
