"""An anemoi dataset's run: missing dates refused; the statistics anemoi reads, where they go.

``--write-into`` puts them into the dataset itself, ``--format anemoi
--output S.zarr`` into a sidecar store (:mod:`wxstats.io.formats.anemoi`);
a statistics file (``--output x.nc``) and ``--summary`` work as for any
dataset. Options that select data another way (splits, variables, weights,
climatologies) are refused: anemoi's statistics are over every variable of
one window, unweighted.
"""

from __future__ import annotations

from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.formats import anemoi as fmt
from wxstats.runtime.options import ComputeOptions
from wxstats.sources.base import AnemoiStatisticsSource, Source, anemoi_statistics


def check_missing(source: Source, options: ComputeOptions) -> None:
    """Refuse an anemoi dataset with missing dates in its window unless ``--skipna``
    (anemoi leaves them out; without it they would make every statistic NaN)."""
    anemoi = anemoi_statistics(source)
    if anemoi is None or not anemoi.missing or options.skipna:
        return
    missing = anemoi.missing
    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    raise WxstatsError(
        f"{options.dataset}: {len(missing)} missing date(s) in the statistics window "
        f"({shown}), stored as NaN; give --skipna to leave them out as anemoi does"
    )


def check_into_dataset(source: AnemoiStatisticsSource, options: ComputeOptions) -> None:
    """Refuse up front what ``--write-into`` could not write into the dataset."""
    fmt.check_dataset(source.path)
    stale = sorted(set(source.stored_tendencies()) - set(source.deltas.values()))
    if stale:
        computed = ", ".join(f"{k} step(s): {name}" for k, name in source.deltas.items())
        raise WxstatsError(
            f"{source.path}: holds tendency statistics {', '.join(stale)} that this run "
            f"does not compute ({computed}); --write-into would leave them for another "
            "window: include their steps in --diff-steps"
        )


def check_sidecar(source: AnemoiStatisticsSource, options: ComputeOptions) -> None:
    """Refuse up front a sidecar store that could not be written."""
    if options.output is None:
        raise WxstatsError(
            f"{options.dataset}: --format anemoi writes a statistics store: give --output S.zarr"
        )
    fmt.check_sidecar(Path(options.output), options.overwrite)


def _attrs(source: AnemoiStatisticsSource, stats: Stats) -> dict:
    return {
        "statistics_start_date": source.attrs["statistics_start_date"],
        "statistics_end_date": source.attrs["statistics_end_date"],
        fmt.MARK: fmt.provenance(stats, source.deltas),
    }


def write_into_dataset(source: AnemoiStatisticsSource, stats: Stats, options: ComputeOptions):
    """The write of the statistics anemoi reads into the dataset itself."""
    arrays = fmt.anemoi_arrays(stats, source.stream, source.deltas)

    def into() -> list[Path]:
        fmt.write_into_dataset(source.path, arrays, _attrs(source, stats))
        return [Path(source.path)]

    return into


def write_sidecar(source: AnemoiStatisticsSource, stats: Stats, options: ComputeOptions):
    """The write of the statistics anemoi reads into a store of their own."""
    arrays = fmt.anemoi_arrays(stats, source.stream, source.deltas)
    attrs = _attrs(source, stats) | {
        "variables": source.variables,
        "frequency": source.frequency,
    }

    def into() -> list[Path]:
        side = Path(options.output)
        fmt.write_sidecar(side, arrays, attrs, source.dtype, options.overwrite)
        return [side]

    return into
