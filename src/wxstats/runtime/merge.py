"""``wxstats update`` and ``wxstats merge`` around :mod:`wxstats.runtime.grow`.

``update`` is a ``compute`` run over the new data with the state's selection
(variables, steps, NaN handling, split name), so this module only builds its
options; ``merge`` reads no data: it joins the states and writes.

What they write is what ``compute`` writes for the kind of data: a statistics
file (``--output FILE.nc``) for zarr/netCDF states; for neural-lam MEPS states
neural-lam's ``static/`` files and ``wxstats_stats.nc`` in a folder
(``--output-dir``; an update's default is the new datastore's ``static/``, as
compute's). ``--output FILE.nc`` alone is refused for MEPS states: one netCDF
file is not what neural-lam loads, and a training run normalised from stale
``.pt`` files beside a fresh ``.nc`` is the error to avoid.
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import prepare_all
from wxstats.runtime.grow import combine, state_stats
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.set_outputs import check_neurallam
from wxstats.runtime.state import State, TimeCoverage
from wxstats.runtime.targets import Target, chosen, refuse_merge_options
from wxstats.sources.kinds import capabilities_of


def _neurallam(state: State) -> bool:
    """Whether ``state`` is of a neural-lam datastore (its outputs: neural-lam's files)."""
    return capabilities_of(state.identity["kind"]).neurallam_files


def _refuse_output_options(state: State, options: ComputeOptions) -> None:
    """Outputs this state's kind of data does not have, refused as ``compute``'s
    (:func:`wxstats.runtime.targets.refuse_merge_options`)."""
    refuse_merge_options(state.name, capabilities_of(state.identity["kind"]), options)


def update_options(
    base_state: str | Path, dataset: str, only_new: bool = False, **options: Any
) -> ComputeOptions:
    """The ``compute`` options of ``wxstats update``: the state's selection
    (:func:`_sample_update` for a datastore's samples); for time ranges its
    variables, steps and NaN handling, over every time step of ``dataset`` in
    the state's split, or with ``only_new`` those after the state's last time
    (a store appended in place; :meth:`Growth.check` then finds the state's
    last steps unchanged in it). The statistics file defaults to the new
    state's name (else the state's) with ``.stats.nc``."""
    from wxstats.core.times import fmt_time
    from wxstats.runtime.outputs import open_source

    state = State.read(str(base_state))
    given = {k: v for k, v in options.items() if v is not None}
    _refuse_output_options(state, ComputeOptions(dataset=state.name, **given))
    if _neurallam(state):
        return _sample_update(state, Path(base_state), dataset, **options)
    if options.get("output") is None and options.get("summary") is None:
        options["output"] = Path(options.get("state") or base_state).with_suffix(".stats.nc")
        _refuse_the_states_own_statistics(Path(base_state), options)
    ident = state.identity
    selection = {
        # in the streams' order (the identity's is by name): the outputs' order as before
        "variables": tuple(dict.fromkeys(s.layout.variable for s in state.specs if s.layout)),
        "time_dim": ident["time_dim"],
        "diff_steps": tuple(ident["diff_steps"]),
        "feature_dims": tuple(sorted({d for v in ident["variables"] for d in v["feature_dims"]})),
        "skipna": bool(ident["skipna"]),
        "by": ident.get("by"),
        "weights": (ident.get("weights") or {}).get("method"),
        "moments": int(ident.get("moments", 2)),
    }
    storage = options.get("storage_options", ())
    probe = open_source(ComputeOptions(dataset=dataset, storage_options=storage, **selection))
    try:
        times = probe.times
    finally:
        probe.close()
    first = 0
    if only_new:
        cov = state.times
        later = np.flatnonzero(TimeCoverage.values_of(times) > cov.last)
        if later.size == 0:
            raise WxstatsError(
                f"{dataset}: no time after {state.name}'s last time {cov.label(cov.last)}; "
                "nothing to add"
            )
        first = int(later[0])
    split = f"{ident['split']}={fmt_time(times[first])}/{fmt_time(times[-1])}"
    return ComputeOptions(
        dataset=dataset, splits=(split,), base_state=Path(base_state), **selection, **options
    )


def _refuse_the_states_own_statistics(base: Path, options: dict[str, Any]) -> None:
    """An update without ``--state`` defaults to the statistics file ``compute
    --state`` wrote beside the state: refused, like any output that exists
    without ``--overwrite``, but saying how to grow both in place (replacing
    that file alone would leave it describing more data than its state holds)."""
    output = options["output"]
    if options.get("state") is None and output.exists() and not options.get("overwrite"):
        raise WxstatsError(
            f"output exists: {output} (the statistics of {base}); give --state {base} "
            "--overwrite to grow the state and its statistics in place, or --output FILE.nc"
        )


def _sample_update(of: State, base: Path, dataset: str, **options: Any) -> ComputeOptions:
    """``wxstats update`` of a MEPS state: a run over the datastore's samples that
    are not in the state (:meth:`Growth.check` leaves out those counted), with
    the state's split and step length, writing neural-lam's files as ``compute`` does."""
    ident = of.identity
    return ComputeOptions(
        dataset=dataset,
        splits=(ident["split"],),
        step_length=int(ident["diff_steps"][0]),
        skipna=bool(ident["skipna"]),
        base_state=base,
        **options,
    )


def merge_states(
    paths: list[Path],
    *,
    output: Path | None = None,
    summary: Path | None = None,
    state: Path | None = None,
    overwrite: bool = False,
    allow_gap: bool = False,
    output_dir: Path | None = None,
    level_weights: dict[str, float] | None = None,
    min_std: float | None = None,
) -> tuple[Stats, list[Path]]:
    """``wxstats merge``: the statistics (and state) of disjoint states; the
    outputs as ``compute`` writes for their kind of data (module docstring).
    Everything is refused before any file is made."""
    started = time.time()
    states = _read_states(paths)
    first = states[0]
    options = ComputeOptions(
        dataset=first.name,
        output=output,
        summary=summary,
        state=state,
        output_dir=output_dir,
        level_weights=level_weights,
        min_std=min_std,
    )
    _refuse_output_options(first, options)  # as given, before a default output is chosen
    if output is None and summary is None and output_dir is None:
        if state is None:
            what = "--output-dir DIR" if _neurallam(first) else "--output FILE.nc"
            raise WxstatsError(f"merge: give {what}, --summary FILE.json or --state FILE")
        if not _neurallam(first):  # beside the state and named after it
            options = replace(options, output=state.with_suffix(".stats.nc"))
    targets, data = _targets(first, options), _datastore(first)
    planned = [path for target in targets for path in target.paths(data, options)]
    if len({p.resolve() for p in planned}) != len(planned):
        raise WxstatsError("merge: --output, --summary and --state must be different files")
    if output_dir is not None:  # neural-lam's files (refused above for other kinds of data)
        check_neurallam(min_std)
    prepared = prepare_all(dict.fromkeys(planned), overwrite)
    try:
        total = combine(states, allow_gap)
        stats = state_stats(total)
        stats.run = {
            "wxstats_version": __version__,
            "command": "merge",
            "states": [str(p) for p in paths],
            "started": datetime.fromtimestamp(started, timezone.utc).isoformat(),
            "seconds": round(time.time() - started, 3),
            "host": socket.gethostname(),
        }
        writers = {
            path: writer
            for target in targets
            if target.writers
            for path, writer in target.writers(data, stats, options).items()
        }
        if state is not None:
            writers[Path(state)] = total.writer()
        prepared.commit(writers)
    finally:
        prepared.discard()  # a refused merge leaves no temporary file or new folder
    return stats, list(writers)


def _read_states(paths: list[Path]) -> list[State]:
    seen: set[Path] = set()
    for p in paths:
        if Path(p).resolve() in seen:
            raise WxstatsError(f"{p}: named twice; each state may be merged once")
        seen.add(Path(p).resolve())
    return [State.read(str(p)) for p in paths]


def _datastore(state: State) -> Any:
    """What the targets ask of the data (neural-lam's: its step and levels), from the states."""
    from wxstats.core.conventions import levels_of

    spec = next((s for s in state.specs if s.diff_steps), None)
    step = int(state.identity["diff_steps"][0])
    return SimpleNamespace(step_length=step, levels=lambda: levels_of(spec.long_names))


def _targets(first: State, options: ComputeOptions) -> list[Target]:
    """What ``compute`` writes for the states' kind of data, from its table
    (:data:`~wxstats.runtime.targets.TARGETS`; the state file's writer is the
    merged state's), neural-lam's files into a given ``--output-dir`` only (a
    merge has no datastore to write beside)."""
    caps = capabilities_of(first.identity["kind"])
    return [t for t in chosen(caps, options) if options.output_dir or not t.beside_data]
