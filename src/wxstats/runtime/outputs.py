"""A run's source opened from its options, and how its outputs are prepared and written.

Which source a dataset needs is :mod:`wxstats.sources.factory`'s to say (a
neural-lam datastore YAML, an anemoi dataset, else zarr/netCDF). What a run writes, and
every option refused, is declared in :mod:`wxstats.runtime.targets`. Every
output is checked and prepared before any data is read (its temporary file
written from a template of the statistics: :func:`prepare_outputs`), and
written all-or-nothing. A store changed in place (``--write-into``) is
locked from the preparation to the end of the run, and a write into it that
was interrupted is repaired first; any other run refuses such a store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.stats import DiffStats, Stats, StreamStats
from wxstats.core.streams import StreamLayout
from wxstats.io.atomic import Prepared, Writer, prepare_all
from wxstats.io.storemarker import refuse_interrupted
from wxstats.io.zarrstore import hold_store
from wxstats.runtime.anemoi_outputs import check_missing
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.preflight import OutputPlan, preflight, refuse_options
from wxstats.runtime.set_outputs import split_lengths
from wxstats.runtime.targets import source_needs
from wxstats.sources import factory
from wxstats.sources.base import Source
from wxstats.sources.kinds import Selection


def open_source(options: ComputeOptions, given: Any = None) -> Source:
    """The source for ``options.dataset`` (:func:`wxstats.sources.factory.open_source`);
    ``given``: an ``xarray.Dataset`` the caller opened, read in place of a path
    (``wxstats.compute``). Options it or the outputs cannot take are refused
    before it is opened."""
    if given is None and not options.write_into:  # --write-into repairs it (prepare_outputs)
        refuse_interrupted(options.dataset)
    kind = factory.kind_of(options.dataset, given)  # found once: it may open the zarr group
    refuse_options(options, kind.capabilities)
    weights, time_means = source_needs(options)
    selection = Selection(
        splits=options.splits,
        period=options.period,
        by=options.by,
        weights=None if options.weights == "none" else options.weights or weights,
        time_means=time_means,
        variables=options.variables or None,
        time_dim=options.time_dim,
        diff_steps=options.diff_steps or None,
        feature_dims=options.feature_dims,
        pool=options.pool,
        block_bytes=None if options.block_mb is None else int(options.block_mb * 2**20),
        storage_options=options.storage_options,
        io_threads=options.threads or 0,
        step_length=options.step_length,
    )
    source = factory.open_source(options.dataset, selection, given=given, kind=kind)
    check_missing(source, options)
    if options.moments != 2:  # the higher powers: every stream sums them (--moments)
        source.streams = [replace(s, order=options.moments) for s in source.streams]
    return source


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
    return Stats(
        source.kind,
        streams,
        attrs=attrs,
        run={"wxstats_version": __version__},
        time_splits=source.capabilities.time_splits,
    )


def plan_outputs(source: Source, options: ComputeOptions) -> OutputPlan:
    """The pre-flight of a run (:func:`wxstats.runtime.preflight.preflight`), its
    writers made from the template: what ``compute``, ``update`` and ``inspect`` refuse."""
    return preflight(source, options, template_stats(source, options.skipna))


def prepare_outputs(
    source: Source, options: ComputeOptions, plan: OutputPlan | None = None
) -> Prepared:
    """Refuse up front (before hours of work) outputs that exist, cannot be
    written, or collide with the inputs or each other, and prepare each from
    the template (see module docstring): a format's refusal or a full disk
    ends the run here."""
    plan = plan or plan_outputs(source, options)
    # the .pt files hold only their values, known at the end (io/formats/ptfile.py)
    templates = {p: (None if p.suffix == ".pt" else w) for p, w in plan.files.items()}
    prepared = prepare_all(templates, options.overwrite)
    try:  # a store changed in place: locked until the run ends, repaired first
        for store in plan.rewritten:
            prepared.held.append(hold_store(store))
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
    plan: OutputPlan | None = None,
    before_renames: Callable[[], None] | None = None,
) -> list[Path]:
    """Fill and rename the outputs ``prepared`` before the run by ``plan`` (both
    made now without them), then write the stores in place; everything that can
    be refused is refused first. ``extra``: writers of files another part
    planned (a state). ``before_renames`` as :meth:`Prepared.commit`'s."""
    own = prepared is None
    if plan is None:
        plan = plan_outputs(source, options) if own else preflight(source, options)
    if prepared is None:
        prepared = prepare_outputs(source, options, plan)
    try:
        outputs: dict[Path, Writer] = {}
        into = []
        for target in plan.targets:
            if target.writers is not None:
                outputs.update(target.writers(plan.data, stats, options))
            if target.into is not None:
                into.append(target.into(source, stats, options))  # the values checked now
        outputs.update(extra or {})
        prepared.commit(outputs, before_renames)
        written = list(outputs)
        for write in into:
            written += write()
        return written
    finally:
        if own:  # else the caller's, when its run ends
            prepared.discard()
