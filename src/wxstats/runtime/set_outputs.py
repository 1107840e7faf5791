"""What each output target needs of a run, and its paths and writers
(:mod:`wxstats.runtime.targets` declares them in one table): the sets of files
trainers load whole (neural-lam's ``static/``, ``--format makani``,
``graphcast``, ``ace``; nothing in such a set may be missing) and an
mllam-data-prep store's statistics (``--write-into``).
"""

from __future__ import annotations

from pathlib import Path

from wxstats.core.conventions import MEPS_FLUX
from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.io.read import NETCDF_NAME
from wxstats.runtime.options import ComputeOptions
from wxstats.sources.base import NeuralLamSource, Source, TimeAxisSource, time_axis


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
    """makani's files: one split, fields on one 2-D grid (H, W)."""
    one_split(source, "makani")
    grid_2d(source)
    refuse_short_split(source, "makani", "time_diff_*_dt{k}.npy")


def check_graphcast(source: TimeAxisSource, options: ComputeOptions) -> None:
    """GraphCast's files hold one split and one difference step."""
    one_split_and_step(source, "graphcast", "difference step")
    refuse_short_split(source, "graphcast", "diffs_stddev_by_level.nc")


def check_ace(source: TimeAxisSource, options: ComputeOptions) -> None:
    """ACE's files: one split, one residual step, one field with time per variable name."""
    one_split_and_step(source, "ace", "residual step")
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


def makani_writers(source: TimeAxisSource, stats: Stats, options: ComputeOptions):
    from wxstats.io.formats.makani import makani_outputs

    split = source.splits[0].name
    return makani_outputs(stats, folder(options), split, tuple(source.diff_steps), grid_2d(source))


def graphcast_writers(source: TimeAxisSource, stats: Stats, options: ComputeOptions):
    from wxstats.io.formats.graphcast import graphcast_outputs

    split, step = source.splits[0].name, source.diff_steps[0]
    return graphcast_outputs(stats, folder(options), split, step)


def ace_writers(source: TimeAxisSource, stats: Stats, options: ComputeOptions):
    from wxstats.io.formats.ace import ace_outputs

    grids = {
        v.name: (v.grid_dims, tuple(v.grid_sizes[d] for d in v.grid_dims)) for v in source.vars
    }
    split, step = source.splits[0].name, source.diff_steps[0]
    return ace_outputs(stats, folder(options), split, step, grids)


def one_split(source: TimeAxisSource, fmt: str) -> str:
    """The one split a format's files hold; else refused naming this run's."""
    splits = [s.name for s in source.splits]
    if len(splits) != 1:
        raise WxstatsError(
            f"{source.path}: --format {fmt} writes the statistics of one split (this run has "
            f"{', '.join(splits)}); give one --split"
        )
    return splits[0]


def check_one_split(source: TimeAxisSource, fmt: str) -> None:
    """A format whose file holds one split (Aurora's)."""
    one_split(source, fmt)


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
