"""``wxstats update`` and ``wxstats merge`` around :mod:`wxstats.runtime.grow`.

``update`` is a ``compute`` run over the new data with the state's selection
(variables, steps, NaN handling, split name), so this module only builds its
options; ``merge`` reads no data: it joins the states and writes.
"""

from __future__ import annotations

import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer, prepare_all
from wxstats.runtime.grow import combine, state_stats
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.state import Coverage, State


def update_options(
    base_state: str | Path, dataset: str, only_new: bool = False, **options: Any
) -> ComputeOptions:
    """The ``compute`` options of ``wxstats update``: the state's variables,
    steps and NaN handling, over every time step of ``dataset`` in the state's
    split, or with ``only_new`` those after the state's last time (a store
    appended in place; :meth:`Growth.check` then finds the state's last steps
    unchanged in it)."""
    from wxstats.runtime.outputs import open_source
    from wxstats.sources.xarray.timeaxis import fmt_time

    state = State.read(str(base_state))
    ident = state.identity
    selection = {
        # in the streams' order (the identity's is by name): the outputs' order as before
        "variables": tuple(dict.fromkeys(s.layout.prefix for s in state.specs if s.layout)),
        "time_dim": ident["time_dim"],
        "diff_steps": tuple(ident["diff_steps"]),
        "feature_dims": tuple(sorted({d for v in ident["variables"] for d in v["feature_dims"]})),
        "skipna": bool(ident["skipna"]),
        "by": ident.get("by"),
        "weights": (ident.get("weights") or {}).get("method"),
    }
    storage = options.get("storage_options", ())
    probe = open_source(ComputeOptions(dataset=dataset, storage_options=storage, **selection))
    try:
        times = probe.times
    finally:
        probe.close()
    first = 0
    if only_new:
        cov = state.coverage
        later = np.flatnonzero(Coverage.values_of(times) > cov.last)
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


def merge_states(
    paths: list[Path],
    *,
    output: Path | None,
    summary: Path | None = None,
    state: Path | None = None,
    overwrite: bool = False,
    allow_gap: bool = False,
) -> tuple[Stats, list[Path]]:
    """``wxstats merge``: the statistics (and state) of disjoint states."""
    started = time.time()
    planned = [Path(p) for p in (output, summary, state) if p is not None]
    if len({p.resolve() for p in planned}) != len(planned):
        raise WxstatsError("merge: --output, --summary and --state must be different files")
    prepared = prepare_all(dict.fromkeys(planned), overwrite)
    try:
        stats, writers = _merged(paths, output, summary, state, allow_gap, started)
        prepared.commit(writers)
    finally:
        prepared.discard()  # a refused merge leaves no temporary file or new folder
    return stats, list(writers)


def _merged(
    paths: list[Path],
    output: Path | None,
    summary: Path | None,
    state: Path | None,
    allow_gap: bool,
    started: float,
) -> tuple[Stats, dict[Path, Writer]]:
    """The merged statistics and the writers of the outputs asked for."""
    from wxstats.io.formats.netcdf import netcdf_writer
    from wxstats.io.formats.summary import summary_writer

    states = [State.read(str(p)) for p in paths]
    seen: set[Path] = set()
    for p in paths:
        if Path(p).resolve() in seen:
            raise WxstatsError(f"{p}: named twice; each state may be merged once")
        seen.add(Path(p).resolve())
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
    writers: dict[Path, Writer] = {}
    if output is not None:
        writers[Path(output)] = netcdf_writer(stats)
    if summary is not None:
        writers[Path(summary)] = summary_writer(stats)
    if state is not None:
        writers[Path(state)] = total.writer()
    return stats, writers
