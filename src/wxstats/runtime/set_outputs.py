"""The sets of files trainers load whole (``--format makani``, ``graphcast``,
``ace``): what each needs of a run, refused before any data is read, and their
writers. Nothing in such a set may be missing.
"""

from __future__ import annotations

from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.runtime.options import ComputeOptions
from wxstats.sources.base import Source, TimeAxisSource, time_axis

FOLDER_FORMATS = {"makani": ".npy files", "ace": "netCDF files"}
"""Formats writing a folder with per-grid-point time means: what their files are."""


def refuse_for_folder_format(options: ComputeOptions) -> None:
    """What makani's or ACE's files cannot hold, refused before any data is read."""
    fmt = options.output_format
    given = {
        "--output (give --output-dir)": options.output is not None,
        "--write-into": options.write_into,
        "--state": options.state is not None or options.base_state is not None,
        f"--skipna ({fmt}'s time means keep a NaN)": options.skipna,
    }
    flags = [flag for flag, value in given.items() if value]
    if flags:
        raise WxstatsError(
            f"--format {fmt} writes a folder of {FOLDER_FORMATS[fmt]}; not with {', '.join(flags)}"
        )


def makani_set(
    source: TimeAxisSource, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """makani's files: one split, fields on one 2-D grid (H, W)."""
    from wxstats.io.formats.makani import makani_files, makani_outputs

    splits = [s.name for s in source.splits]
    if len(splits) != 1:
        raise WxstatsError(
            f"{source.path}: --format makani writes the statistics of one split (this run has "
            f"{', '.join(splits)}); give one --split"
        )
    grids = {(v.grid_dims, tuple(v.grid_sizes[d] for d in v.grid_dims)) for v in source.vars}
    static = [v.name for v in source.vars if not v.has_time]
    if static or len(grids) != 1 or len(next(iter(grids))[0]) != 2:
        what = (
            f"static {', '.join(static)}"
            if static
            else "grids " + "; ".join(f"{v.name}: {', '.join(v.grid_dims)}" for v in source.vars)
        )
        raise WxstatsError(
            f"{source.path}: --format makani needs fields with time on one 2-D grid "
            f"(latitude, longitude) besides their levels; found {what}"
        )
    folder = Path(options.output_dir or ".")
    steps = tuple(source.diff_steps)
    refuse_short_split(source, "makani", "time_diff_*_dt{k}.npy")
    if stats is None:
        return {folder / name: None for name in makani_files(steps)}
    ((_, shape),) = grids
    return dict(makani_outputs(stats, folder, splits[0], steps, shape))


def graphcast_set(
    source: TimeAxisSource, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """GraphCast's files hold one split and one difference step: refuse other runs
    up front, naming what to change."""
    from wxstats.io.formats.graphcast import GRAPHCAST_FILES, graphcast_outputs

    if options.output is not None or options.write_into:
        raise WxstatsError(
            "--format graphcast writes a set of files: give --output-dir, not --output or "
            "--write-into"
        )
    split, step = one_split_and_step(source, "graphcast", "difference step")
    folder = Path(options.output_dir or ".")
    refuse_short_split(source, "graphcast", "diffs_stddev_by_level.nc")
    if stats is None:
        return {folder / name: None for name in GRAPHCAST_FILES}
    return dict(graphcast_outputs(stats, folder, split, step))


def ace_set(
    source: TimeAxisSource, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """ACE's files: one split, one residual step, one field with time per variable name."""
    from wxstats.io.formats.ace import ACE_FILES, ace_outputs

    split, step = one_split_and_step(source, "ace", "residual step")
    bad = [
        f"{v.name}: {'no time' if not v.has_time else ', '.join(v.feature_dims)}"
        for v in source.vars
        if not v.has_time or v.feature_dims
    ]
    if bad:
        raise WxstatsError(
            f"{source.path}: --format ace needs one field with time per variable (ACE reads a "
            f"scalar per name; choose others with --variables); found {'; '.join(bad)}"
        )
    folder = Path(options.output_dir or ".")
    refuse_short_split(source, "ace", "scaling-residual.nc")
    if stats is None:
        return {folder / name: None for name in ACE_FILES}
    grids = {
        v.name: (v.grid_dims, tuple(v.grid_sizes[d] for d in v.grid_dims)) for v in source.vars
    }
    return dict(ace_outputs(stats, folder, split, step, grids))


def one_split_and_step(source: TimeAxisSource, fmt: str, step_word: str) -> tuple[str, int]:
    """The one split and one difference step a format's set of files holds; else
    refused in one line saying what this run has."""
    splits, steps = [s.name for s in source.splits], source.diff_steps
    if len(splits) != 1 or len(steps) != 1:
        raise WxstatsError(
            f"{source.path}: --format {fmt} writes the statistics of one split and one "
            f"{step_word} (this run has splits {', '.join(splits)} and steps "
            f"{', '.join(map(str, steps))}); give one --split and one --diff-steps"
        )
    return splits[0], steps[0]


def split_lengths(source: Source) -> dict[str, int]:
    """Time steps per split, where the source's splits are time ranges."""
    axis = time_axis(source)
    return {s.name: s.stop - s.start for s in axis.splits} if axis is not None else {}


def refuse_short_split(source: TimeAxisSource, fmt: str, files: str) -> None:
    """A set of files that a trainer loads whole (makani's, GraphCast's) needs
    the difference statistics: a split too short to have any pair of time steps
    that far apart would leave them out (makani's writer failed after the run,
    GraphCast's wrote a file without variables), so it is refused up front."""
    for split, n in split_lengths(source).items():
        short = [k for k in source.diff_steps if n <= k]
        if short:
            raise WxstatsError(
                f"{source.path}: split {split} has {n} time step{'s' * (n != 1)}, too few for "
                f"differences over {short[0]} step{'s' * (short[0] != 1)}; --format {fmt} "
                f"needs them ({files}): give a longer --split or a smaller --diff-steps"
            )
