"""The JSON summary: the statistics as float64 numbers that round-trip exactly.

Python's ``json`` writes floats with ``repr``, the shortest string that reads
back to the same float64. Only ``"run"`` describes the run; everything else
depends on the data alone, so two runs over the same data compare equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.atomic import Writer
from wxstats.stats import Stats


def _floats(values: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=np.float64)]


def _ints(values: np.ndarray) -> list[int]:
    return [int(v) for v in values]


def summary_dict(stats: Stats) -> dict[str, Any]:
    state = stats.state
    forcing = {}
    for name, stream in stats.forcing.items():
        single = len(stream.features) == 1
        for f, feature in enumerate(stream.features):
            key = name if single else feature
            forcing[key] = {
                "count": int(stream.count[f]),
                "mean": float(stream.mean[f]),
                "std": float(stream.std[f]),
                "min": float(stream.minimum[f]),
                "max": float(stream.maximum[f]),
            }
    return {
        "variables": list(state.features),
        "units": list(state.units),
        "state": {
            "count": _ints(state.count),
            "mean": _floats(state.mean),
            "std": _floats(state.std),
            "min": _floats(state.minimum),
            "max": _floats(state.maximum),
            "nan_count": _ints(state.nan_count),
        },
        "diff": {
            str(k): {"count": _ints(d.count), "mean": _floats(d.mean), "std": _floats(d.std)}
            for k, d in sorted(state.diff.items())
        },
        "forcing": forcing,
        "source": {k: v for k, v in stats.attrs.items()},
        "warnings": list(stats.warnings),
        "run": dict(stats.run),
    }


def summary_writer(stats: Stats) -> Writer:
    def write(path: Path) -> None:
        path.write_text(json.dumps(summary_dict(stats), indent=1) + "\n")

    return write
