"""Which source a dataset needs, and which files a run over it writes.

The one place that knows both sides: a neural-lam datastore YAML gets a
:class:`~wxstats.sources.meps.MepsSource` and neural-lam's ``static/`` files
plus ``wxstats_stats.nc``; anything else an
:class:`~wxstats.sources.xarray.XarraySource` and a statistics file, and
mllam-data-prep stores ``--write-into``. Every output is checked and
prepared before any data is read (its temporary file written from a template
of the statistics: :func:`prepare_outputs`), and written all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.errors import WxstatsError
from wxstats.core.stats import DiffStats, Stats, StreamLayout, StreamStats
from wxstats.io.atomic import Prepared, Writer, prepare_all
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
from wxstats.runtime.set_outputs import (
    FOLDER_FORMATS,
    ace_set,
    graphcast_set,
    makani_set,
    refuse_for_folder_format,
    split_lengths,
)
from wxstats.sources.base import NeuralLamSource, Source


def _is_meps(dataset: str) -> bool:
    return dataset.endswith((".yaml", ".yml"))


def open_source(options: ComputeOptions, given: Any = None) -> Source:
    """The source for ``options.dataset``: a neural-lam datastore YAML, else
    xarray (zarr store, netCDF file, glob of netCDF files); ``given``: an
    ``xarray.Dataset`` the caller opened, read in place of a path (``wxstats.compute``)."""
    if given is not None:
        pass
    elif _is_meps(options.dataset):
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

    anemoi = given is None and is_anemoi(options.dataset)
    if options.pool and (anemoi or options.write_into or options.by):
        what = "--write-into" if options.write_into else ("--by" if options.by else "")
        what = what or "an anemoi dataset (its statistics are per variable already)"
        raise WxstatsError(
            f"{options.dataset}: --pool {','.join(options.pool)} is written to a statistics "
            f"file (--output, --summary); not with {what}"
        )
    if options.pool and options.output_format != "netcdf":
        raise WxstatsError(
            f"{options.dataset}: --pool {','.join(options.pool)}: --format "
            f"{options.output_format} has no place for pooled statistics; write a statistics "
            "file (--output, --summary)"
        )
    if anemoi:
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
    if options.by == "year" and (options.state or options.base_state):
        raise WxstatsError(  # the layout is this run's years: a state grows with others
            "--by year: its years are this run's, not a state's (--state, update); "
            "compute per-year statistics in one run over every year"
        )
    if options.by and (options.write_into or options.output_format != "netcdf"):
        raise WxstatsError(
            f"--by {options.by}: a climatology is written to a statistics file (--output, "
            "--summary), not with --write-into or --format graphcast"
        )
    makani = options.output_format == "makani"
    if options.output_format in FOLDER_FORMATS:
        refuse_for_folder_format(options)
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
        options.dataset if given is None else given,
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
            pool=options.pool,
            block_bytes=block,
            storage_options=options.storage_options,
            io_threads=options.threads or 0,
        ),
    )


def _placeholder(
    name: str,
    features: list[str],
    units: list[str],
    long_names: list[str],
    layout: StreamLayout | None,
    steps: list[int],
    cells: int = 0,
) -> StreamStats:
    """A stream with placeholder values (std 1, not 0: a divisor a writer would refuse)."""
    n = len(features)
    nan, one, zero = np.full(n, np.nan), np.ones(n), np.zeros(n, np.int64)
    return StreamStats(
        name=name,
        features=list(features),
        units=list(units),
        mean=nan,
        std=one,
        count=zero,
        minimum=nan,
        maximum=nan,
        nan_count=zero,
        diff={k: DiffStats(mean=nan, std=one, count=zero, minimum=nan, maximum=nan) for k in steps},
        long_names=list(long_names),
        layout=layout,
        time_mean=np.full((cells, n), np.nan) if cells else None,
    )


def template_stats(source: Source, skipna: bool) -> Stats:
    """Statistics shaped as the run's will be (streams, features, layouts, the
    difference steps each split can have, pooled streams, attributes), with
    placeholder values: what every output is prepared from before any data is read."""
    lengths = split_lengths(source)
    streams = {}
    for spec in source.streams:
        length = lengths.get(spec.layout.split) if spec.layout is not None else None
        steps = [k for k in spec.diff_steps if length is None or length > k]
        streams[spec.name] = _placeholder(
            spec.name,
            spec.features,
            spec.units,
            spec.long_names,
            spec.layout,
            steps,
            spec.cell_grid_points,
        )
        pool = spec.pooled
        if pool is not None:
            streams[pool.name] = _placeholder(
                pool.name, pool.features, pool.units, pool.long_names, pool.layout, steps
            )
    attrs = {**source.attrs, "skipna": int(skipna)}
    return Stats(source.kind, streams, attrs=attrs, run={"wxstats_version": __version__})


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
        "--pool": options.pool,
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

    if not source.capabilities.mdp_store:
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


def meps_static_dir(source: NeuralLamSource) -> Path:
    """Where a MEPS run writes without ``--output-dir``: ``static/`` for the
    train split, the files neural-lam loads as its normalization; any other
    split in ``static/<split>/``, where they cannot be taken for it."""
    if source.split == "train":
        return source.static_dir
    return source.static_dir / source.split


def neurallam_set(
    static: Path,
    stats: Stats | None,
    step: int,
    flux_name: str,
    levels: list[str],
    level_weights: dict[str, float] | None = None,
    min_std: float | None = None,
) -> dict[Path, Writer | None]:
    """neural-lam's ``static/`` files and ``wxstats_stats.nc`` in ``static`` (of
    a run over a datastore, or of MEPS states merged: ``wxstats merge``)."""
    from wxstats.io.formats.neurallam import (
        DEFAULT_LEVEL_WEIGHTS,
        NEURALLAM_FILES,
        neurallam_outputs,
    )
    from wxstats.io.formats.stored import PT_DTYPE, check_min_std

    check_min_std(min_std, PT_DTYPE, "neural-lam's .pt files")
    outputs: dict[Path, Writer | None] = {}
    if stats is None:
        outputs.update({static / name: None for name in NEURALLAM_FILES})
    else:
        weights = level_weights or DEFAULT_LEVEL_WEIGHTS
        outputs.update(neurallam_outputs(stats, static, step, flux_name, levels, weights, min_std))
    outputs[static / NETCDF_NAME] = netcdf_writer(stats) if stats else None
    return outputs


def planned_outputs(
    source: Source, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """The files a run writes (writers need ``stats``; ``None`` only lists paths)."""
    outputs: dict[Path, Writer | None] = {}
    if source.capabilities.neurallam_files:
        static = options.output_dir or meps_static_dir(source)
        step, flux, levels = source.step_length, source.streams[1].name, source.levels()
        weights, floor = options.level_weights, options.min_std
        outputs.update(neurallam_set(static, stats, step, flux, levels, weights, floor))
    elif options.output_format == "graphcast":
        outputs.update(graphcast_set(source, stats, options))
    elif options.output_format == "makani":
        outputs.update(makani_set(source, stats, options))
    elif options.output_format == "ace":
        outputs.update(ace_set(source, stats, options))
    else:
        from wxstats.sources.xarray import output_stem

        output = options.output if options.output_format != "anemoi" else None  # a store
        if output is None and options.summary is None and not into_or_anemoi(options):
            # with --state, beside the state and named after it, as update's: the
            # dataset's name would make a second state of the same data clash
            output = (
                Path(options.state).with_suffix(".stats.nc")
                if options.state is not None
                else Path(options.output_dir or ".") / f"{output_stem(source.path)}.stats.nc"
            )
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


def prepare_outputs(source: Source, options: ComputeOptions, extra: list[Path] = ()) -> Prepared:
    """Refuse up front (before hours of work) outputs that exist, cannot be
    written, or collide with the inputs or each other (``extra``: a state file),
    and prepare each from the template (see module docstring): a format's
    refusal or a full disk ends the run here."""
    planned = planned_outputs(source, template_stats(source, options.skipna), options)
    paths = list(planned) + list(extra)
    side = sidecar_path(source, options)
    check_collisions(source, paths + ([side] if side else []))
    # the .pt files hold only their values, known at the end (io/formats/ptfile.py)
    templates = {p: (None if p.suffix == ".pt" else w) for p, w in planned.items()}
    prepared = prepare_all({**templates, **dict.fromkeys(extra)}, options.overwrite)
    try:
        if source.capabilities.anemoi_statistics:
            check_anemoi_outputs(source, options)
        elif options.write_into:
            _store_values(source, None, options.min_std)
    except BaseException:
        prepared.discard()
        raise
    return prepared


def write_outputs(
    source: Source,
    stats: Stats,
    options: ComputeOptions,
    extra: dict[Path, Writer] | None = None,
    *,
    prepared: Prepared | None = None,
    before_renames: Callable[[], None] | None = None,
) -> list[Path]:
    """Fill and rename the outputs ``prepared`` before the run (prepared now
    without it); everything that can be refused is refused first.
    ``before_renames`` as :meth:`Prepared.commit`'s."""
    from wxstats.io.formats.mdp import mdp_attrs, write_into_store

    if prepared is None:
        prepared = prepare_outputs(source, options, list(extra or {}))
    outputs = {**planned_outputs(source, stats, options), **(extra or {})}
    mdp_into = options.write_into and not source.capabilities.anemoi_statistics
    into = _store_values(source, stats, options.min_std) if mdp_into else None
    prepared.commit({p: w for p, w in outputs.items() if w is not None}, before_renames)
    if source.capabilities.anemoi_statistics:
        return list(outputs) + write_anemoi_outputs(source, stats, options)
    if into is not None:
        write_into_store(source.path, *into, mdp_attrs(stats))
        return [*outputs, Path(source.path)]
    return list(outputs)
