"""Which source a dataset needs, and which files a run over it writes.

The one place that knows both sides: a neural-lam datastore YAML gets a
:class:`~wxstats.sources.meps.MepsSource` and neural-lam's ``static/`` files
plus ``wxstats_stats.nc``; anything else an
:class:`~wxstats.sources.xarray.XarraySource` and a statistics file, and
mllam-data-prep stores ``--write-into``. Every output is checked before any
data is read, and written all-or-nothing.
"""

from __future__ import annotations

from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer, check_writable, write_all
from wxstats.io.formats.netcdf import netcdf_writer
from wxstats.io.formats.summary import summary_writer
from wxstats.io.read import NETCDF_NAME
from wxstats.runtime.anemoi_outputs import (
    check_anemoi_outputs,
    into_or_anemoi,
    sidecar_path,
    write_anemoi_outputs,
)
from wxstats.runtime.options import ComputeOptions
from wxstats.sources.base import Source


def _is_meps(dataset: str) -> bool:
    return dataset.endswith((".yaml", ".yml"))


def open_source(options: ComputeOptions) -> Source:
    """The source for ``options.dataset``: a neural-lam datastore YAML, else
    xarray (zarr store, netCDF file, glob of netCDF files)."""
    if _is_meps(options.dataset):
        from wxstats.sources.meps import MepsSource

        if len(options.splits) > 1:
            raise WxstatsError(
                f"{options.dataset}: a neural-lam datastore takes one --split per run"
            )
        _refuse_xarray_options(options)
        return MepsSource(
            options.dataset,
            split=options.meps_split,
            step_length=options.step_length,
            period=options.period,
        )
    from wxstats.sources.anemoi import is_anemoi

    if is_anemoi(options.dataset):
        from wxstats.runtime.anemoi_outputs import open_anemoi

        return open_anemoi(options)
    if options.output_format == "anemoi":
        raise WxstatsError(f"{options.dataset}: --format anemoi needs an anemoi dataset")
    from wxstats.sources.xarray import DEFAULT_BLOCK_BYTES, XarrayOptions, XarraySource

    if options.step_length is not None:
        raise WxstatsError(
            "--step-length is for neural-lam datastores; for zarr/netCDF give --diff-steps "
            "(in time steps)"
        )
    if options.level_weights is not None:
        raise WxstatsError(
            "--level-weights is for neural-lam datastores (their parameter_weights.npy); "
            "a zarr/netCDF run writes no loss weights"
        )
    if options.min_std is not None and not options.write_into:
        raise WxstatsError(
            "--min-std floors what neural-lam divides by: neural-lam's static files, or an "
            "mllam-data-prep store with --write-into; a statistics file keeps the true std"
        )
    if options.by and (options.write_into or options.output_format != "netcdf"):
        raise WxstatsError(
            f"--by {options.by}: a climatology is written to a statistics file (--output, "
            "--summary), not with --write-into or --format graphcast"
        )
    makani = options.output_format == "makani"
    if options.output_format in FOLDER_FORMATS:
        _refuse_for_folder_format(options)
    if options.weights not in (None, "none") and options.write_into:
        # the store's statistics arrays are rewritten in place with no record of how they
        # were computed, and mllam-data-prep's own statistics are unweighted: a weighted
        # mean there could not be told from an unweighted one
        raise WxstatsError(
            f"--weights {options.weights}: an mllam-data-prep store's statistics are "
            "unweighted and cannot record a weighting; write a statistics file (--output)"
        )
    block = DEFAULT_BLOCK_BYTES if options.block_mb is None else int(options.block_mb * 2**20)
    return XarraySource(
        options.dataset,
        XarrayOptions(
            splits=options.splits,
            period=options.period,
            by=options.by,
            # makani's own statistics are weighted by its quadrature, cos(latitude)
            weights=None
            if options.weights == "none"
            else options.weights or ("coslat" if makani else None),
            time_means=options.output_format in FOLDER_FORMATS,
            variables=options.variables or None,
            time_dim=options.time_dim,
            diff_steps=options.diff_steps or None,
            feature_dims=options.feature_dims,
            block_bytes=block,
            storage_options=options.storage_options,
            io_threads=options.threads or 0,
        ),
    )


FOLDER_FORMATS = {"makani": ".npy files", "ace": "netCDF files"}
"""Formats writing a folder with per-grid-point time means: what their files are."""


def _refuse_for_folder_format(options: ComputeOptions) -> None:
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


def _makani_outputs(
    source: Source, stats: Stats | None, options: ComputeOptions
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
    if stats is None:
        return {folder / name: None for name in makani_files(steps)}
    ((_, shape),) = grids
    return dict(makani_outputs(stats, folder, splits[0], steps, shape))


def _ace_outputs(
    source: Source, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """ACE's files: one split, one residual step, one field with time per variable name."""
    from wxstats.io.formats.ace import ACE_FILES, ace_outputs

    splits, steps = [s.name for s in source.splits], source.diff_steps
    if len(splits) != 1 or len(steps) != 1:
        raise WxstatsError(
            f"{source.path}: --format ace writes the statistics of one split and one residual "
            f"step (this run has splits {', '.join(splits)} and steps "
            f"{', '.join(map(str, steps))}); give one --split and one --diff-steps"
        )
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
    if stats is None:
        return {folder / name: None for name in ACE_FILES}
    grids = {
        v.name: (v.grid_dims, tuple(v.grid_sizes[d] for d in v.grid_dims)) for v in source.vars
    }
    return dict(ace_outputs(stats, folder, splits[0], steps[0], grids))


def _refuse_xarray_options(options: ComputeOptions) -> None:
    given = {
        "--variables": options.variables,
        "--time-dim": options.time_dim != "time",
        "--diff-steps": options.diff_steps,
        "--feature-dims": options.feature_dims is not None,
        "--output": options.output,
        "--write-into": options.write_into,
        "--format": options.output_format != "netcdf",
        "--by": options.by,
        "--weights": options.weights,
        "--block-mb": options.block_mb,
        "--storage-option": options.storage_options,
    }
    flags = [flag for flag, value in given.items() if value]
    if flags:
        raise WxstatsError(
            f"{options.dataset}: {', '.join(flags)} apply to zarr/netCDF datasets only"
        )


def _store_values(source: Source, stats: Stats | None, min_std: float | None = None):
    """Check the store (``stats`` None), or the values ``--write-into`` puts into it.

    neural-lam divides by the store's ``std`` and ``diff_std``, so a 0 there (as
    stored, in the variable's dtype) is refused or floored as in the neural-lam
    files; a value the dtype cannot hold is refused before anything is written."""
    from wxstats.io.formats.mdp import (
        DIVISORS,
        check_store,
        mdp_values,
        planned_variables,
        store_dtypes,
    )
    from wxstats.io.formats.stored import check_stored, divisor_std

    if not getattr(source, "is_mdp", False):
        raise WxstatsError(f"{source.path}: --write-into needs an mllam-data-prep zarr store")
    planned = planned_variables(source.streams)
    if stats is None:
        check_store(source.path, planned, min_std)
        return None
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


def meps_static_dir(source: Source) -> Path:
    """Where a MEPS run writes without ``--output-dir``: ``static/`` for the
    train split, the files neural-lam loads as its normalization; any other
    split in ``static/<split>/``, where they cannot be taken for it."""
    if source.split == "train":
        return source.static_dir
    return source.static_dir / source.split


def _graphcast_outputs(
    source: Source, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """GraphCast's files hold one split and one difference step: refuse other runs
    up front, naming what to change."""
    from wxstats.io.formats.graphcast import GRAPHCAST_FILES, graphcast_outputs

    if options.output is not None or options.write_into:
        raise WxstatsError(
            "--format graphcast writes a set of files: give --output-dir, not --output or "
            "--write-into"
        )
    splits, steps = [s.name for s in source.splits], source.diff_steps
    if len(splits) != 1 or len(steps) != 1:
        raise WxstatsError(
            f"{source.path}: --format graphcast writes the statistics of one split and one "
            f"difference step (this run has splits {', '.join(splits)} and steps "
            f"{', '.join(map(str, steps))}); give one --split and one --diff-steps"
        )
    folder = Path(options.output_dir or ".")
    if stats is None:
        return {folder / name: None for name in GRAPHCAST_FILES}
    return dict(graphcast_outputs(stats, folder, splits[0], steps[0]))


def planned_outputs(
    source: Source, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """The files a run writes (writers need ``stats``; ``None`` only lists paths)."""
    from wxstats.io.formats.neurallam import (
        DEFAULT_LEVEL_WEIGHTS,
        NEURALLAM_FILES,
        neurallam_outputs,
    )
    from wxstats.io.formats.stored import PT_DTYPE, check_min_std

    outputs: dict[Path, Writer | None] = {}
    if source.kind == "npyfilesmeps":
        static = options.output_dir or meps_static_dir(source)
        if stats is None:
            check_min_std(options.min_std, PT_DTYPE, "neural-lam's .pt files")
            outputs.update({static / name: None for name in NEURALLAM_FILES})
        else:
            outputs.update(
                neurallam_outputs(
                    stats,
                    static,
                    source.step_length,
                    source.streams[1].name,
                    source.levels(),
                    options.level_weights or DEFAULT_LEVEL_WEIGHTS,
                    options.min_std,
                )
            )
        outputs[static / NETCDF_NAME] = netcdf_writer(stats) if stats else None
    elif options.output_format == "graphcast":
        outputs.update(_graphcast_outputs(source, stats, options))
    elif options.output_format == "makani":
        outputs.update(_makani_outputs(source, stats, options))
    elif options.output_format == "ace":
        outputs.update(_ace_outputs(source, stats, options))
    else:
        from wxstats.sources.xarray import output_stem

        output = options.output if options.output_format != "anemoi" else None  # a store
        if output is None and options.summary is None and not into_or_anemoi(options):
            output = Path(options.output_dir or ".") / f"{output_stem(source.path)}.stats.nc"
        if output is not None:
            outputs[Path(output)] = netcdf_writer(stats) if stats else None
    if options.summary is not None:
        summary = Path(options.summary)
        same = [p for p in outputs if p.resolve() == summary.resolve()]
        if same:  # --output x.nc --summary x.nc kept only the JSON
            raise WxstatsError(
                f"{summary}: two outputs of this run are the same file ({same[0]} and the "
                "--summary); give each its own name"
            )
        outputs[summary] = summary_writer(stats) if stats else None
    return outputs


def check_collisions(source: Source, paths: list[Path]) -> None:
    """Refuse outputs that would destroy an input: ``--output d.nc`` for the
    dataset ``d.nc`` (with ``--overwrite`` it replaced the data with its
    statistics), or a file inside an input folder (a zarr store)."""
    resolved = {path.resolve(): path for path in paths}
    for name in source.inputs():
        data = Path(name).resolve()
        for real, path in resolved.items():
            if real == data or data in real.parents:
                what = "is" if real == data else "is inside"
                raise WxstatsError(
                    f"{path}: this output {what} the input {name} of this run; writing it "
                    "would destroy the data. Choose another output location"
                )


def check_outputs(source: Source, options: ComputeOptions, extra: list[Path] = ()) -> None:
    """Refuse up front (before hours of work) outputs that exist, cannot be
    written, or collide with the inputs or each other (``extra``: a state file)."""
    paths = list(planned_outputs(source, None, options)) + list(extra)
    side = sidecar_path(source, options)
    check_collisions(source, paths + ([side] if side else []))
    check_writable(paths, options.overwrite)
    if source.kind == "anemoi":
        check_anemoi_outputs(source, options)
    elif options.write_into:
        _store_values(source, None, options.min_std)


def write_outputs(
    source: Source, stats: Stats, options: ComputeOptions, extra: dict[Path, Writer] | None = None
) -> list[Path]:
    """Write every output (everything that can be refused is refused first)."""
    from wxstats.io.formats.mdp import mdp_attrs, write_into_store

    outputs = {**planned_outputs(source, stats, options), **(extra or {})}
    mdp_into = options.write_into and source.kind != "anemoi"
    into = _store_values(source, stats, options.min_std) if mdp_into else None
    write_all({p: w for p, w in outputs.items() if w is not None}, options.overwrite)
    if source.kind == "anemoi":
        return list(outputs) + write_anemoi_outputs(source, stats, options)
    if into is not None:
        write_into_store(source.path, *into, mdp_attrs(stats))
        return [*outputs, Path(source.path)]
    return list(outputs)
