"""What each output target needs of a run, and its paths and writers
(:mod:`wxstats.runtime.targets` declares them in one table): the sets of files
trainers load whole (neural-lam's ``static/``, ``--format makani``,
``graphcast``, ``ace``; nothing in such a set may be missing) and an
mllam-data-prep store's statistics (``--write-into``).

Paths and writers see the data only as :class:`DataFacts`, a frozen value
made once by the pre-flight (from the source, or from the states a merge
joins): what a file layout needs to know, never the source itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wxstats.core.conventions import MEPS_FLUX
from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.io.read import NETCDF_NAME
from wxstats.runtime.options import ComputeOptions
from wxstats.sources.base import NeuralLamSource, Source, TimeAxisSource, time_axis

Grid = tuple[tuple[str, ...], tuple[int, ...]]
"""A field's grid: its dimensions and their sizes."""


@dataclass(frozen=True)
class DataFacts:
    """What the targets' paths and writers know of the data (module docstring)."""

    path: str
    """The dataset (an output's name stem; the store ``--write-into`` changes)."""
    splits: tuple[str, ...] = ()
    diff_steps: tuple[int, ...] = ()
    grids: Mapping[str, Grid] = field(default_factory=dict)
    """Each field with time, on its grid (makani's and ACE's files)."""
    step_length: int | None = None
    """A neural-lam datastore's step length in hours."""
    levels: tuple[str, ...] = ()
    """A neural-lam datastore's level of each feature."""
    static_dir: Path | None = None
    """Where neural-lam's files go without ``--output-dir``."""
    inputs: tuple[str, ...] = ()
    """The files read, which no output may replace."""

    @staticmethod
    def of_source(source: Source) -> DataFacts:
        axis = time_axis(source)
        meps: NeuralLamSource | None = source if source.capabilities.neurallam_files else None  # type: ignore[assignment]
        splits = tuple(s.name for s in axis.splits) if axis else ((meps.split,) if meps else ())
        return DataFacts(
            path=str(source.path),
            splits=splits,
            diff_steps=tuple(axis.diff_steps) if axis else (),
            grids={
                v.name: (tuple(v.grid_dims), tuple(v.grid_sizes[d] for d in v.grid_dims))
                for v in axis.vars
                if v.has_time
            }
            if axis
            else {},
            step_length=meps.step_length if meps else None,
            levels=tuple(meps.levels()) if meps else (),
            static_dir=meps_static_dir(meps) if meps else None,
            inputs=tuple(source.inputs()),
        )


# -- neural-lam's static/ files -----------------------------------------------------------
def meps_static_dir(source: NeuralLamSource) -> Path:
    """Where a MEPS run writes without ``--output-dir``: ``static/`` for the
    train split, the files neural-lam loads as its normalization; any other
    split in ``static/<split>/``, where they cannot be taken for it."""
    if source.split == "train":
        return source.static_dir
    return source.static_dir / source.split


def neurallam_paths(static: Path) -> list[Path]:
    """neural-lam's ``static/`` files and ``wxstats_stats.nc`` in ``static``."""
    from wxstats.io.formats.neurallam import NEURALLAM_FILES

    return [static / name for name in (*NEURALLAM_FILES, NETCDF_NAME)]


def check_neurallam(min_std: float | None) -> None:
    from wxstats.io.formats.stored import PT_DTYPE, check_min_std

    check_min_std(min_std, PT_DTYPE, "neural-lam's .pt files")


def neurallam_set(
    static: Path,
    stats: Stats,
    step: int,
    levels: list[str],
    level_weights: dict[str, float] | None = None,
    min_std: float | None = None,
) -> dict[Path, Writer]:
    """Writers of neural-lam's files and ``wxstats_stats.nc`` in ``static`` (of a
    run over a datastore, or of MEPS states merged: ``wxstats merge``)."""
    from wxstats.io.formats.netcdf import netcdf_writer
    from wxstats.io.formats.neurallam import DEFAULT_LEVEL_WEIGHTS, neurallam_outputs

    weights = level_weights or DEFAULT_LEVEL_WEIGHTS
    outputs = dict(neurallam_outputs(stats, static, step, MEPS_FLUX, levels, weights, min_std))
    outputs[static / NETCDF_NAME] = netcdf_writer(stats)
    return outputs


# -- the table's rows: statistics file, summary, state, Aurora's file ---------------------
def static_dir(data: DataFacts, options: ComputeOptions) -> Path:
    return Path(options.output_dir or data.static_dir or ".")


def stats_file(data: DataFacts, options: ComputeOptions) -> list[Path]:
    """``--output``; else beside a ``--state`` and named after it (the dataset's name
    would make a second state of the same data clash), else the dataset's name."""
    if options.output is not None:
        return [Path(options.output)]
    if options.state is not None:
        return [Path(options.state).with_suffix(".stats.nc")]
    from wxstats.sources.factory import output_stem

    return [Path(options.output_dir or ".") / f"{output_stem(data.path)}.stats.nc"]


def netcdf_writers(data: DataFacts, stats: Stats, options: ComputeOptions) -> dict[Path, Writer]:
    from wxstats.io.formats.netcdf import netcdf_writer

    return dict.fromkeys(stats_file(data, options), netcdf_writer(stats))


def summary_writers(data: DataFacts, stats: Stats, options: ComputeOptions) -> dict[Path, Writer]:
    from wxstats.io.formats.summary import summary_writer

    return {Path(options.summary): summary_writer(stats)}


def neurallam_writers(data: DataFacts, stats: Stats, options: ComputeOptions) -> dict[Path, Writer]:
    static, floor, levels = static_dir(data, options), options.min_std, list(data.levels)
    return neurallam_set(static, stats, data.step_length, levels, options.level_weights, floor)


def check_state(source: Source, options: ComputeOptions) -> None:
    from wxstats.runtime.state import coverage_of

    coverage_of(source)  # now, not after the run: a cftime axis


def graphcast_files(data: DataFacts, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.graphcast import GRAPHCAST_FILES

    return list(GRAPHCAST_FILES)


def makani_files(data: DataFacts, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.makani import makani_files as files

    return list(files(data.diff_steps))


def ace_files(data: DataFacts, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.ace import ACE_FILES

    return list(ACE_FILES)


def aurora_writers(data: DataFacts, stats: Stats, options: ComputeOptions) -> Mapping[Path, Writer]:
    from wxstats.io.formats.aurora import aurora_outputs

    return aurora_outputs(stats, folder(options), data.splits[0])


def aurora_files(data: DataFacts, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.aurora import FILE

    return [FILE]


# -- the sets of one split: makani, GraphCast, ACE, ... -------------------------------------
def folder(options: ComputeOptions) -> Path:
    """Where a set of files goes: ``--output-dir`` (default: here)."""
    return Path(options.output_dir or ".")


def grid_2d(source: TimeAxisSource) -> tuple[int, int]:
    """The one 2-D grid (H, W) of makani's fields with time; else refused."""
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
    ((_, shape),) = grids
    return shape


def check_makani(source: TimeAxisSource, options: ComputeOptions) -> None:
    """makani's files: fields on one 2-D grid (H, W) (one split: the target's)."""
    grid_2d(source)
    refuse_short_split(source, "makani", "time_diff_*_dt{k}.npy")


def check_graphcast(source: TimeAxisSource, options: ComputeOptions) -> None:
    """GraphCast's files need differences (one split, one step: the target's)."""
    refuse_short_split(source, "graphcast", "diffs_stddev_by_level.nc")


def check_ace(source: TimeAxisSource, options: ComputeOptions) -> None:
    """ACE's files: one field with time per variable name (one split, one residual
    step: the target's)."""
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
    refuse_short_split(source, "ace", "scaling-residual.nc")


def makani_writers(data: DataFacts, stats: Stats, options: ComputeOptions):
    from wxstats.io.formats.makani import makani_outputs

    ((_, shape),) = set(data.grids.values())  # one 2-D grid: check_makani
    return makani_outputs(stats, folder(options), data.splits[0], data.diff_steps, shape)


def graphcast_writers(data: DataFacts, stats: Stats, options: ComputeOptions):
    from wxstats.io.formats.graphcast import graphcast_outputs

    return graphcast_outputs(stats, folder(options), data.splits[0], data.diff_steps[0])


def ace_writers(data: DataFacts, stats: Stats, options: ComputeOptions):
    from wxstats.io.formats.ace import ace_outputs

    split, step = data.splits[0], data.diff_steps[0]
    return ace_outputs(stats, folder(options), split, step, dict(data.grids))


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


# -- an mllam-data-prep store's statistics (--write-into) ------------------------------
def check_store(source: Source, options: ComputeOptions) -> None:
    """The store can take the arrays ``--write-into`` writes (dims, dtypes, ``--min-std``)."""
    from wxstats.io.formats.mdp import check_store as check
    from wxstats.io.formats.mdp import planned_variables

    check(source.path, planned_variables(source.streams), options.min_std)


def store_values(source: Source, stats: Stats, min_std: float | None):
    """The values ``--write-into`` puts into the store, with their plan.

    neural-lam divides by the store's ``std`` and ``diff_std``, so a 0 there (as
    stored, in the variable's dtype) is refused or floored as in the neural-lam
    files; a value the dtype cannot hold is refused before anything is written."""
    from wxstats.io.formats.mdp import DIVISORS, mdp_values, planned_variables, store_dtypes
    from wxstats.io.formats.stored import check_stored, divisor_std

    planned = planned_variables(source.streams)
    values = mdp_values(stats, planned)
    dtypes = store_dtypes(source.path, planned)
    for name, plan in planned.items():
        if name not in values:
            continue
        features, where = stats.streams[plan.stream].features, f"{source.path}: {name}"
        if plan.op in DIVISORS:
            values[name] = divisor_std(values[name], features, min_std, where, dtypes[name])
        check_stored(values[name], dtypes[name], features, where)
    return values, planned


def write_into_store(source: Source, stats: Stats, options: ComputeOptions):
    """Checks the values now; returns the write into the store (after the files)."""
    from wxstats.io.formats.mdp import mdp_attrs
    from wxstats.io.formats.mdp import write_into_store as write

    values, planned = store_values(source, stats, options.min_std)

    def into() -> list[Path]:
        write(source.path, values, planned, mdp_attrs(stats))
        return [Path(source.path)]

    return into
