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
from wxstats.sources.base import Source


def open_anemoi(options: ComputeOptions) -> AnemoiSource:
    """The source of an anemoi dataset, refusing options that do not apply to it."""
    given = {
        "--split": options.splits,
        "--variables": options.variables,
        "--time-dim": options.time_dim != "time",
        "--feature-dims": options.feature_dims is not None,
        "--by": options.by,
        "--weights": options.weights,  # anemoi's statistics are unweighted
        "--storage-option": options.storage_options,
        "--step-length": options.step_length is not None,
        "--level-weights": options.level_weights is not None,
        "--min-std": options.min_std is not None,  # anemoi keeps the true std (0 if constant)
        f"--format {options.output_format}": options.output_format not in ("netcdf", "anemoi"),
    }
    flags = [flag for flag, value in given.items() if value]
    if flags:
        raise WxstatsError(
            f"{options.dataset}: {', '.join(flags)}: not for an anemoi dataset (its "
            "statistics are over every variable of one window, unweighted, std as computed; "
            "choose the window with --period START/END)"
        )
    if options.write_into and options.output_format == "anemoi":
        raise WxstatsError(
            "--write-into writes into the anemoi dataset, --format anemoi into a separate "
            "store (--output S.zarr): give one of them"
        )
    if options.output_format == "anemoi" and options.output is None:
        raise WxstatsError(
            f"{options.dataset}: --format anemoi writes a statistics store: give --output S.zarr"
        )
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


def sidecar_path(source: Source, options: ComputeOptions) -> Path | None:
    """The sidecar store of this run (None: none)."""
    if source.capabilities.anemoi_statistics and options.output_format == "anemoi":
        return Path(options.output)
    return None


def check_anemoi_outputs(source: AnemoiSource, options: ComputeOptions) -> None:
    """Refuse up front what the anemoi outputs could not write."""
    if options.write_into:
        fmt.check_dataset(source.path)
        stale = sorted(set(source.stored_tendencies()) - set(source.deltas.values()))
        if stale:
            computed = ", ".join(f"{k} step(s): {name}" for k, name in source.deltas.items())
            raise WxstatsError(
                f"{source.path}: holds tendency statistics {', '.join(stale)} that this run "
                f"does not compute ({computed}); --write-into would leave them for another "
                "window: include their steps in --diff-steps"
            )
    side = sidecar_path(source, options)
    if side is not None:
        fmt.check_sidecar(side, options.overwrite)


def write_anemoi_outputs(source: AnemoiSource, stats: Stats, options: ComputeOptions) -> list[Path]:
    """Write the statistics anemoi reads (into the dataset, or a sidecar)."""
    arrays = fmt.anemoi_arrays(stats, STREAM, source.deltas)
    attrs = {
        "statistics_start_date": source.attrs["statistics_start_date"],
        "statistics_end_date": source.attrs["statistics_end_date"],
        fmt.MARK: fmt.provenance(stats, source.deltas),
    }
    written = []
    if options.write_into:
        fmt.write_into_dataset(source.path, arrays, attrs)
        written.append(Path(source.path))
    side = sidecar_path(source, options)
    if side is not None:
        group = source.group.attrs.asdict()
        attrs |= {"variables": source.variables, "frequency": group.get("frequency")}
        fmt.write_sidecar(side, arrays, attrs, source.dtype, options.overwrite)
        written.append(side)
    return written


def into_or_anemoi(options: ComputeOptions) -> bool:
    """Whether the run writes into a store or an anemoi sidecar (then no default
    statistics file is written beside it)."""
    return options.write_into or options.output_format == "anemoi"
