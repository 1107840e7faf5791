"""Synthetic zarr/netCDF datasets and an independent float64 reference, for the tests.

Nothing here imports wxstats: the datasets are written with xarray from raw
arrays whose decoded values the tests know exactly (packed int16 is written
as raw integers with ``scale_factor``/``add_offset`` attributes), and the
reference applies the textbook definitions with numpy in float64, two-pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from reference import assert_close, two_pass

SCALE = np.float32(0.01)  # float32 attributes: xarray alone would decode to float32
OFFSET = np.float32(1000.0)
FILL = np.int16(-32767)


def hourly(n: int, start: str = "2021-01-01T00") -> np.ndarray:
    return np.datetime64(start, "h") + np.arange(n).astype("timedelta64[h]")


def gridded(n_time: int = 50, ny: int = 6, nx: int = 7, seed: int = 0) -> tuple[xr.Dataset, dict]:
    """A dataset with float32 ``t2m`` (time, y, x), float64 ``z`` on levels
    (time, level, y, x), packed int16 ``msl`` (time, y, x), a static ``orog``
    (y, x); and the decoded float64 values of each (the truth)."""
    rng = np.random.default_rng(seed)
    shape = (n_time, ny, nx)
    trend = np.linspace(0, 3, n_time)[:, None, None]
    t2m = (280 + trend + 4 * rng.standard_normal(shape)).astype(np.float32)
    z = (
        5e4
        + np.array([0.0, 3.7e4])[None, :, None, None]
        + 300 * rng.standard_normal((n_time, 2, ny, nx))
    )
    raw = rng.integers(-20000, 20000, shape).astype(np.int16)
    msl = raw.astype(np.float64) * np.float64(SCALE) + np.float64(OFFSET)
    ds = xr.Dataset(
        {
            "t2m": (("time", "y", "x"), t2m, {"units": "K", "long_name": "2 m temperature"}),
            "z": (("time", "level", "y", "x"), z, {"units": "m2 s-2"}),
            "msl": (
                ("time", "y", "x"),
                raw,
                {"scale_factor": SCALE, "add_offset": OFFSET, "_FillValue": FILL, "units": "hPa"},
            ),
            "orog": (("y", "x"), rng.random((ny, nx)), {"units": "m"}),
        },
        coords={
            "time": hourly(n_time),
            "level": [500, 850],
            "y": np.arange(ny),
            "x": np.arange(nx),
        },
    )
    truth = {
        "t2m": t2m.astype(np.float64)[..., None],
        "z": z.transpose(0, 2, 3, 1),
        "msl": msl[..., None],
    }
    return ds, truth


def write_zarr(ds: xr.Dataset, path: Path, time_chunk: int = 8, zarr_format: int = 3) -> Path:
    encoding = {v: {"chunks": _chunks(ds[v], time_chunk)} for v in ds.data_vars}
    consolidated = zarr_format == 2  # zarr 3 warns that consolidation is not in its spec
    ds.to_zarr(
        path, mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=consolidated
    )
    return path


def _chunks(da: xr.DataArray, time_chunk: int) -> tuple[int, ...]:
    return tuple(min(time_chunk, n) if d == "time" else n for d, n in da.sizes.items())


def reference(values: np.ndarray, start: int, stop: int, steps=(1,)) -> dict:
    """Float64 two-pass statistics of ``values`` (time, ..., feature) over
    times ``start..stop-1``; diffs over pairs with both times inside."""
    v = np.asarray(values, dtype=np.float64)
    n_f = v.shape[-1]
    inside = v[start:stop].reshape(-1, n_f)
    finite = np.isfinite(inside)
    out = {
        "count": finite.sum(axis=0),
        "nan_count": (~finite).sum(axis=0),
        "min": np.array([inside[finite[:, f], f].min() for f in range(n_f)]),
        "max": np.array([inside[finite[:, f], f].max() for f in range(n_f)]),
        "diff": {},
    }
    mean, std = zip(*[two_pass(inside[finite[:, f], f], 0) for f in range(n_f)], strict=True)
    out["mean"], out["std"] = np.array(mean), np.array(std)
    for k in steps:
        if stop - start <= k:
            continue
        d = (v[start + k : stop] - v[start : stop - k]).reshape(-1, n_f)
        ok = np.isfinite(d)
        dm, ds = zip(*[two_pass(d[ok[:, f], f], 0) for f in range(n_f)], strict=True)
        out["diff"][k] = {"count": ok.sum(axis=0), "mean": np.array(dm), "std": np.array(ds)}
    return out


def assert_stream_matches(stream, ref: dict, rtol: float = 1e-10) -> None:
    """Every statistic of a wxstats stream against :func:`reference`."""
    name = stream.name
    assert list(stream.count) == list(ref["count"]), f"{name} count"
    assert list(stream.nan_count) == list(ref["nan_count"]), f"{name} nan_count"
    assert np.array_equal(stream.minimum, ref["min"]), f"{name} min"
    assert np.array_equal(stream.maximum, ref["max"]), f"{name} max"
    assert_close(stream.mean, ref["mean"], rtol, f"{name} mean")
    assert_close(stream.std, ref["std"], rtol, f"{name} std")
    assert sorted(stream.diff) == sorted(ref["diff"]), f"{name} diff steps"
    for k, d in ref["diff"].items():
        assert list(stream.diff[k].count) == list(d["count"]), f"{name} diff{k} count"
        assert_close(stream.diff[k].mean, d["mean"], rtol, f"{name} diff{k} mean")
        assert_close(stream.diff[k].std, d["std"], rtol, f"{name} diff{k} std")


MDP_SPLITS = {
    "train": ("2021-01-01T00:00", "2021-01-01T23:00"),
    "val": ("2021-01-02T00:00", "2021-01-02T11:00"),
    "test": ("2021-01-02T12:00", "2021-01-02T23:00"),
}


def mdp_store(path: Path, n_time: int = 48, nx: int = 5, ny: int = 4, seed: int = 1) -> dict:
    """An mllam-data-prep-shaped zarr (v2, consolidated, like its output):
    ``state`` (time, grid_index, state_feature), ``forcing``, ``static``,
    ``splits``, and train statistics computed the way mllam-data-prep does,
    in float32 with its diff_std bug (the std of a second difference, its
    issue 102). Returns the float64 truth of each category."""
    rng = np.random.default_rng(seed)
    n_grid = nx * ny
    offsets = np.array([280.0, 0.0, 1.0e5])
    spreads = np.array([5.0, 3.0, 800.0])
    walk = np.cumsum(rng.standard_normal((n_time, n_grid, 3)), axis=0)
    state = (offsets + spreads * (0.3 * walk + rng.standard_normal((n_time, n_grid, 3)))).astype(
        np.float32
    )
    hours = np.arange(n_time) % 24
    forcing = (
        np.clip(np.sin(np.pi * (hours - 6) / 12), 0, None)[:, None, None] * 800
        + 0.1 * rng.random((n_time, n_grid, 1))
    ).astype(np.float32)
    static = np.stack([rng.random(n_grid) * 1000, (rng.random(n_grid) > 0.5)], axis=1).astype(
        np.float32
    )
    x, y = np.meshgrid(np.arange(nx) * 2500.0, np.arange(ny) * 2500.0)
    ds = xr.Dataset(
        {
            "state": (("time", "grid_index", "state_feature"), state),
            "forcing": (("time", "grid_index", "forcing_feature"), forcing),
            "static": (("grid_index", "static_feature"), static),
            "splits": (
                ("split_name", "split_part"),
                np.array([list(v) for v in MDP_SPLITS.values()]),
            ),
        },
        coords={
            "time": hourly(n_time),
            "x": ("grid_index", x.ravel()),
            "y": ("grid_index", y.ravel()),
            "state_feature": ["t2m", "u10m", "pres_seasurface"],
            "state_feature_units": ("state_feature", ["K", "m/s", "Pa"]),
            "state_feature_long_name": (
                "state_feature",
                ["2 m temperature", "10 m wind", "sea surface pressure"],
            ),
            "forcing_feature": ["toa_radiation"],
            "forcing_feature_units": ("forcing_feature", ["W/m^2"]),
            "forcing_feature_long_name": ("forcing_feature", ["TOA radiation"]),
            "static_feature": ["orography", "lsm"],
            "static_feature_units": ("static_feature", ["m", "1"]),
            "static_feature_long_name": ("static_feature", ["orography", "land-sea mask"]),
            "split_name": list(MDP_SPLITS),
            "split_part": ["start", "end"],
        },
    )
    start, end = MDP_SPLITS["train"]
    train = ds.sel(time=slice(start, end))
    for cat in ("state", "forcing", "static"):
        dims = [d for d in ("time", "grid_index") if d in train[cat].dims]
        ds[f"{cat}__train__mean"] = train[cat].mean(dims)
        ds[f"{cat}__train__std"] = train[cat].std(dims)
        if "time" in train[cat].dims:
            once = train[cat].diff("time")
            ds[f"{cat}__train__diff_mean"] = once.mean(dims)
            ds[f"{cat}__train__diff_std"] = once.diff("time").std(dims)  # issue 102
    ds = ds.chunk({"time": 1})
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
    return {
        "state": state.astype(np.float64),
        "forcing": forcing.astype(np.float64),
        "static": static.astype(np.float64)[None],
    }


def slab_dataset(n_time: int = 23, seed: int = 5, q_dtype: str = "f4") -> xr.Dataset:
    """Three variables for the chunk readers' slab tests: float32 ``a`` on levels
    (time, level, y, x), int16 ``p`` (time, y, x) and ``q`` with time not first
    (level, time, x), as mllam-data-prep stores forcing (feature, time, grid)."""
    shape = (3, 5, 7)
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "a": (("time", "level", "y", "x"), rng.standard_normal((n_time, *shape), "f4")),
            "p": (("time", "y", "x"), rng.integers(-999, 999, (n_time, *shape[1:]), "i2")),
            "q": (
                ("level", "time", "x"),
                rng.standard_normal((shape[0], n_time, shape[2]), q_dtype),
            ),
        },
        coords={"time": hourly(n_time), "level": [1, 2, 3]},
    )


def summary_text(stats) -> str:
    """Everything of a run's summary that depends on the data (not when or where
    it ran), to compare two runs byte for byte."""
    from wxstats.io.formats.summary import summary_dict

    summary = summary_dict(stats)
    for entry in (summary, *summary["splits"].values()):
        entry.pop("run", None)
    return repr(summary)
