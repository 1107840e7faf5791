"""``wxstats update`` and ``wxstats merge`` around :mod:`wxstats.runtime.grow`.

``update`` is a ``compute`` run over the new data with the state's selection
(every option declared with how a state fixes it, :mod:`wxstats.runtime.options`,
and the split name), so this module only builds its options; ``merge`` reads
no data: it joins the states and writes.

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
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import prepare_all
from wxstats.runtime.grow import combine, state_stats
from wxstats.runtime.options import OPTIONS, ComputeOptions, from_state
from wxstats.runtime.preflight import merge_preflight, refuse_merge_options
from wxstats.runtime.set_outputs import DataFacts
from wxstats.runtime.state import State, TimeCoverage
from wxstats.sources.kinds import capabilities_of


def _neurallam(state: State) -> bool:
    """Whether ``state`` is of a neural-lam datastore (its outputs: neural-lam's files)."""
    return capabilities_of(state.identity["kind"]).neurallam_files


def _refuse_output_options(state: State, options: ComputeOptions) -> None:
    """Outputs this state's kind of data does not have, refused as ``compute``'s
    (:func:`wxstats.runtime.preflight.refuse_merge_options`)."""
    refuse_merge_options(state.name, capabilities_of(state.identity["kind"]), options)


def update_options(
    base_state: str | Path, dataset: str, only_new: bool = False, **options: Any
) -> ComputeOptions:
    """The ``compute`` options of ``wxstats update``: the state's selection, every
    option declared with how a state fixes it (:func:`~wxstats.runtime.options.from_state`:
    variables, steps, NaN handling, ``--by``, ``--weights``, ``--pool``...), over
    the new data in the state's split: a datastore's samples not in the state
    (:meth:`Growth.check` leaves out those counted), or for time ranges every time
    step of ``dataset``, or with ``only_new`` those after the state's last time
    (a store appended in place; :meth:`Growth.check` then finds the state's last
    steps unchanged in it). The statistics file defaults to the new state's name
    (else the state's) with ``.stats.nc``."""
    from wxstats.core.times import fmt_time
    from wxstats.runtime.outputs import open_source

    state = State.read(str(base_state))
    given = {k: v for k, v in options.items() if v is not None}
    _refuse_output_options(state, ComputeOptions(dataset=state.name, **given))
    selection = from_state(state)
    fixed = sorted(set(given) & set(selection))
    if fixed:
        flags = ", ".join(OPTIONS[name].flag for name in fixed)
        raise WxstatsError(f"{state.name}: {flags}: taken from the state, not given to update")
    ident = state.identity
    if _neurallam(state):
        return ComputeOptions(
            dataset=dataset,
            splits=(ident["split"],),
            base_state=Path(base_state),
            **selection,
            **options,
        )
    if options.get("output") is None and options.get("summary") is None:
        options["output"] = Path(options.get("state") or base_state).with_suffix(".stats.nc")
        _refuse_the_states_own_statistics(Path(base_state), options)
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
    caps = capabilities_of(first.identity["kind"])
    plan = merge_preflight(first.name, caps, _facts(first), options)
    prepared = prepare_all(dict.fromkeys(plan.files), overwrite)
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
            for target in plan.targets
            if target.writers
            for path, writer in target.writers(plan.data, stats, options).items()
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


def _facts(state: State) -> DataFacts:
    """What the targets' paths and writers know of the data, from the first state:
    its name, split and steps (neural-lam's also the levels of its features)."""
    from wxstats.core.conventions import levels_of

    ident = state.identity
    steps = tuple(int(k) for k in ident["diff_steps"])
    spec = next((s for s in state.specs if s.diff_steps), None)
    neurallam = capabilities_of(ident["kind"]).neurallam_files
    return DataFacts(
        path=state.name,
        splits=(ident["split"],),
        diff_steps=steps,
        step_length=steps[0] if neurallam else None,
        levels=tuple(levels_of(spec.long_names)) if neurallam and spec else (),
    )
