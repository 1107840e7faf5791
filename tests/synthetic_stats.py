"""Statistics sets made up on the spot (not computed from data), for the report,
reader and compare tests: many variables, some of them deliberately suspicious."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wxstats.core.stats import DiffStats, Stats, StreamStats
from wxstats.core.streams import listed_features
from wxstats.io.formats.netcdf import netcdf_writer

SUSPICIOUS = {
    "const_3": "constant",
    "t_neg": "negative minimum",
    "fill_7": "std above the mean",
    "nan_9": "NaN",
    "pres_tiny": "float32 data resolve",
    "noise_11": "uncorrelated",
}


def synthetic_stats(n_vars: int = 100, seed: int = 0) -> Stats:
    """``n_vars`` state variables of wildly different magnitudes, two diff steps,
    plus the six suspicious ones named in ``SUSPICIOUS`` (when n_vars >= 12)."""
    rng = np.random.default_rng(seed)
    names = [f"var_{i:03d}" for i in range(n_vars)]
    units = [("K", "Pa", "m/s", "kg/m**2", "")[i % 5] for i in range(n_vars)]
    mean = rng.uniform(1, 3, n_vars) * 10.0 ** rng.integers(-2, 6, n_vars)
    std = mean * rng.uniform(0.01, 0.5, n_vars)
    lo, hi = mean - 3 * std, mean + 3.5 * std
    lo = np.where(np.isin(units, ["K", "Pa"]), np.maximum(lo, 0.5 * mean), lo)
    count = np.full(n_vars, 1_000_000, dtype=np.int64)
    nan_count = np.zeros(n_vars, dtype=np.int64)
    ratios = {1: rng.uniform(0.05, 0.4, n_vars), 3: rng.uniform(0.2, 0.9, n_vars)}
    if n_vars >= 12:
        for i, name in ((3, "const_3"), (5, "t_neg"), (7, "fill_7"), (9, "nan_9")):
            names[i] = name
        names[10], names[11] = "pres_tiny", "noise_11"
        std[3], lo[3], hi[3] = 0.0, mean[3], mean[3]
        units[5], lo[5] = "K", -3.0
        hi[7] = mean[7] + 9999 * std[7]
        nan_count[9] = 1234
        units[10], mean[10], std[10] = "Pa", 101325.0, 1e-4
        lo[10], hi[10] = mean[10] - 3e-4, mean[10] + 3e-4
        ratios[1][11] = ratios[3][11] = 1.9
        for r in ratios.values():
            r[3] = 0.0
    diff = {
        k: DiffStats(count=count - k, mean=0.01 * r * std, std=r * std) for k, r in ratios.items()
    }
    state = StreamStats(
        name="state",
        features=names,
        units=units,
        mean=mean,
        std=std,
        count=count,
        minimum=lo,
        maximum=hi,
        nan_count=nan_count,
        diff=diff,
        long_names=list(names),
        layout=listed_features("state", "train", names),
    )
    flux = StreamStats(
        name="toa_flux",
        features=["toa_flux"],
        units=["W/m**2"],
        mean=np.array([250.0]),
        std=np.array([280.0]),
        count=np.array([500_000]),
        minimum=np.array([0.0]),
        maximum=np.array([1300.0]),
        nan_count=np.array([0]),
        layout=listed_features("forcing", "train", ["toa_flux"]),
    )
    return Stats("synthetic", {"state": state, "toa_flux": flux})


def write_synthetic(path: Path, n_vars: int = 100, seed: int = 0) -> Stats:
    stats = synthetic_stats(n_vars, seed)
    netcdf_writer(stats)(path)
    return stats
