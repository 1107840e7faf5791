"""wxstats: exact, fast, parallel normalization statistics for weather ML datasets."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "compute", "read"]


def compute(path, **options):  # noqa: ANN001, ANN201 - thin lazy wrapper
    """Statistics of the dataset at ``path``, as ``wxstats compute`` computes them,
    in this process, nothing written; returns a :class:`wxstats.io.result.Result`
    (:class:`wxstats.core.stats.Stats` with ``to_xarray()`` and ``to_summary()``).

    ``path``: a neural-lam MEPS datastore YAML, a zarr store (folder or URL), a
    netCDF file or a quoted glob of them, an anemoi dataset, or an
    ``xarray.Dataset`` already open (``open_mfdataset`` with ``preprocess``,
    dask-backed or in memory; its values taken as xarray decoded them). Keyword options
    (the command's flags; each one only where it applies):

    - ``split``: a MEPS split folder (default ``train``), or ``"NAME=START/END"``;
      ``splits``: several ``NAME=START/END`` intervals (zarr/netCDF)
    - ``step_length``: MEPS: hours between the differenced steps (default: the config's)
    - ``diff_steps``: zarr/netCDF: difference steps in time steps, e.g. ``(1, 6)``
    - ``period``: ``"START/END"``: only these times (every split cut to them)
    - ``variables``: zarr/netCDF variables (default: every numeric one with time)
    - ``time_dim``: the time dimension (default ``time``)
    - ``feature_dims``: dimensions whose entries become features (default: levels)
    - ``by``: ``"month"`` or ``"hour"``: a climatology; ``"year"``: per-year statistics
    - ``pool``: feature dimensions (``"level"``) to also pool, exactly: joint statistics
    - ``weights``: ``"coslat"``, ``"VAR"`` or ``"FILE:VAR"``: area-weighted statistics
    - ``skipna``: leave NaN out (they are counted) instead of refusing them
    - ``moments``: ``4`` also gives the skewness and excess kurtosis (default ``2``)
    - ``block_mb``: memory per block of time steps (the bits never depend on it)
    - ``storage_options``: fsspec options for a URL (``endpoint_url``, ``anon``, ...)
    - ``threads``: threads (default: the available CPUs, at most 8)
    - ``client``: a ``distributed.Client``: compute on its Dask cluster, each block on
      a worker, the exact partials merged there (the same bytes; docs/dask.md)
    - ``engine``: ``"auto"`` (default: the current ``distributed.Client`` for a
      dask-backed Dataset, else this process), ``"dask"`` (the current client) or
      ``"threads"`` (this process)

    >>> stats = wxstats.compute("meps.datastore.yaml", split="train")
    >>> stats.state.mean, stats.state.std, stats.state.diff[3].std
    """
    from wxstats.runtime.run import compute as _compute

    return _compute(path, **options)


def read(path, split=None):  # noqa: ANN001, ANN201 - thin lazy wrapper
    """Statistics stored at ``path`` (any format wxstats writes or reads), as the
    one result model; a neural-lam ``static/`` folder is read from the float64
    ``wxstats_stats.nc`` written beside its float32 ``.pt`` files when it is
    there. See :func:`wxstats.io.read.read_stats`. Its ``to_xarray()`` (and each
    stream's) gives the statistics along the labels the format keeps: a
    statistics file's levels, ``month``/``hour`` and ``diff_step``; flat
    features along ``{category}_feature`` where a format keeps only names."""
    from wxstats.io.read import read_stats
    from wxstats.io.result import Result

    return Result.of(read_stats(path, split, exact=True))
