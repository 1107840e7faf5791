"""What an xarray source records of itself: the attributes every statistics
file carries, and the source's sections of a run's identity
(:mod:`wxstats.runtime.identity`)."""

from __future__ import annotations

from typing import Any

from wxstats.core.times import fmt_time
from wxstats.sources.xarray.fingerprint import coordinates, stored
from wxstats.sources.xarray.open import GIVEN_DECODING


def attributes(source: Any) -> dict[str, Any]:
    """The statistics' attributes: the dataset, its layout, splits, period,
    climatology, pooling, weights, steps, variables and decoding."""
    options = source.options
    return {
        "source": source.kind,
        "dataset": source.path,
        "layout": "mllam-data-prep" if source.is_mdp else "generic",
        "time_dim": source.time_dim,
        "splits": "; ".join(
            f"{s.name}={s.label} ({s.stop - s.start} steps from {source.time_dim}[{s.start}])"
            for s in source.splits
        ),
        **({"statistics_period": _period_text(source)} if options.period else {}),
        **({"climatology": f"by {options.by}"} if options.by else {}),
        **({"pooled_over": ",".join(options.pool)} if options.pool else {}),
        "weights": source.weight_field.describe() if source.weight_field else "none (unweighted)",
        "diff_steps": ",".join(map(str, source.diff_steps)),
        "variables": ",".join(v.name for v in source.vars),
        "feature_dims": ",".join(sorted({d for v in source.vars for d in v.feature_dims})),
        "reduced_dims": ",".join(sorted({d for v in source.vars for d in v.grid_dims})),
        "decoding": GIVEN_DECODING
        if source.given
        else "packed integers decoded in float64 as raw * scale_factor + add_offset; "
        "_FillValue and missing_value are NaN; netCDF default fills without _FillValue refused",
        "diff_definition": "x[t] - x[t-k] over pairs with both times inside the split",
    }


def _period_text(source: Any) -> str:
    used = "; ".join(
        f"{s.name} {fmt_time(source.times[s.start])} to {fmt_time(source.times[s.stop - 1])}"
        for s in source.splits
    )
    return f"{source.options.period} ({used})"


def identity(source: Any, files: bool = True) -> dict[str, Any]:
    """The source's parts of a run's identity: ``data`` (variables, grid and
    other non-time coordinates, options), ``run`` (the time steps) and ``files``
    (netCDF: each file's size and modification time; a local zarr store: each
    array read, by metadata and chunk objects, see :mod:`.fingerprint`)."""
    names = [s.name for s in source.splits]
    dims = [d for v in source.vars for d in (*v.grid_dims, *v.feature_dims)]
    variables = [
        {
            "name": v.name,
            "features": list(v.features),
            "units": list(v.units),
            "has_time": bool(v.has_time),
            "grid_dims": list(v.grid_dims),
            "grid_points": int(v.n_grid),
            "feature_dims": list(v.feature_dims),
        }
        # sorted: an unconsolidated zarr 3 store lists its arrays in no fixed order
        for v in sorted(source.vars, key=lambda v: v.name)
    ]
    return {
        "data": {
            "kind": source.kind,
            "split": names[0] if len(names) == 1 else names,
            "time_dim": source.time_dim,
            "variables": variables,
            "coords": coordinates(source.time_files[0].ds, dims),
            "diff_steps": list(source.diff_steps),
            "by": source.options.by,
            "pool": sorted(source.options.pool),  # merged outputs never depend on the order
            "weights": source.weights_identity(),
        },
        "run": {
            "times": [fmt_time(source.times[0]), fmt_time(source.times[-1]), source.n_times],
            "splits": [[s.name, s.start, s.stop] for s in source.splits],
        },
        "files": stored(
            [p.path for p in source.time_files], [v.name for v in source.vars] + [source.time_dim]
        )
        if files and not source.given
        else {},
    }
