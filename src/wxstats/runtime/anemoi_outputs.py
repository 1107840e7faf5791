"""An anemoi dataset's run: its source, and the statistics anemoi reads, where they go.

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
from wxstats.sources.anemoi import DEFAULT_BLOCK_BYTES, STREAM, AnemoiSource


def open_anemoi(options: ComputeOptions) -> AnemoiSource:
    """The source of an anemoi dataset (its options refused by :mod:`wxstats.runtime.targets`)."""
    block = DEFAULT_BLOCK_BYTES if options.block_mb is None else int(options.block_mb * 2**20)
    source = AnemoiSource(
        options.dataset,
        period=options.period,
        diff_steps=options.diff_steps or None,
        block_bytes=block,
        io_threads=options.threads or 0,
    )
    if source.missing and not options.skipna:
        shown = ", ".join(source.missing[:3]) + (", ..." if len(source.missing) > 3 else "")
        raise WxstatsError(
            f"{options.dataset}: {len(source.missing)} missing date(s) in the statistics window "
            f"({shown}), stored as NaN; give --skipna to leave them out as anemoi does"
        )
    return source


def check_into_dataset(source: AnemoiSource, options: ComputeOptions) -> None:
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


def check_sidecar(source: AnemoiSource, options: ComputeOptions) -> None:
    """Refuse up front a sidecar store that could not be written."""
    if options.output is None:
        raise WxstatsError(
            f"{options.dataset}: --format anemoi writes a statistics store: give --output S.zarr"
        )
    fmt.check_sidecar(Path(options.output), options.overwrite)


def _attrs(source: AnemoiSource, stats: Stats) -> dict:
    return {
        "statistics_start_date": source.attrs["statistics_start_date"],
        "statistics_end_date": source.attrs["statistics_end_date"],
        fmt.MARK: fmt.provenance(stats, source.deltas),
    }


def write_into_dataset(source: AnemoiSource, stats: Stats, options: ComputeOptions):
    """The write of the statistics anemoi reads into the dataset itself."""
    arrays = fmt.anemoi_arrays(stats, STREAM, source.deltas)

    def into() -> list[Path]:
        fmt.write_into_dataset(source.path, arrays, _attrs(source, stats))
        return [Path(source.path)]

    return into


def write_sidecar(source: AnemoiSource, stats: Stats, options: ComputeOptions):
    """The write of the statistics anemoi reads into a store of their own."""
    arrays = fmt.anemoi_arrays(stats, STREAM, source.deltas)
    group = source.group.attrs.asdict()
    attrs = _attrs(source, stats) | {
        "variables": source.variables,
        "frequency": group.get("frequency"),
    }

    def into() -> list[Path]:
        side = Path(options.output)
        fmt.write_sidecar(side, arrays, attrs, source.dtype, options.overwrite)
        return [side]

    return into
