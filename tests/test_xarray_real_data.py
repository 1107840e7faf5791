"""Real ERA5 / ERA-Interim extracts (../shared/data) against an independent
float64 xarray reference; skipped where the shared folder is absent."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from conftest import SHARED_DATA

from reference import assert_close
from wxstats.runtime.run import compute

ERA5 = SHARED_DATA / "era5_t2m_2019-03_uk.nc"
ERAINT = SHARED_DATA / "eraint_uvz.nc"
SPLITS = {"train": ("2019-03-01T00:00", "2019-03-20T23:00"), "val": ("2019-03-21", "2019-03-31")}


def _xarray_reference(da: xr.DataArray, time: str, steps, reduce: list[str]) -> dict:
    """float64 xarray statistics: two-pass mean/std, diffs of steps k apart."""
    x = da.astype(np.float64)
    out = {
        "count": x.count(reduce).values,
        "mean": x.mean(reduce).values,
        "std": x.std(reduce, ddof=0).values,
        "min": x.min(reduce).values,
        "max": x.max(reduce).values,
    }
    for k in steps:
        n = x.sizes[time]
        later = x.isel({time: slice(k, n)}).values
        earlier = x.isel({time: slice(0, n - k)}).values
        d = xr.DataArray(later - earlier, dims=x.dims)
        out[k] = (d.count(reduce).values, d.mean(reduce).values, d.std(reduce, ddof=0).values)
    return out


def _check(stream, ref, steps) -> None:
    assert np.array_equal(stream.count, np.atleast_1d(ref["count"]))
    assert np.array_equal(stream.minimum, np.atleast_1d(ref["min"]))
    assert np.array_equal(stream.maximum, np.atleast_1d(ref["max"]))
    assert_close(stream.mean, np.atleast_1d(ref["mean"]), 1e-10, f"{stream.name} mean")
    assert_close(stream.std, np.atleast_1d(ref["std"]), 1e-10, f"{stream.name} std")
    for k in steps:
        count, mean, std = ref[k]
        assert np.array_equal(stream.diff[k].count, np.atleast_1d(count))
        assert_close(stream.diff[k].mean, np.atleast_1d(mean), 1e-10, f"{stream.name} d{k} mean")
        assert_close(stream.diff[k].std, np.atleast_1d(std), 1e-10, f"{stream.name} d{k} std")


@pytest.mark.skipif(not ERA5.exists(), reason="../shared/data is absent")
def test_era5_t2m_two_splits_diff_steps_1_3_6():
    steps = (1, 3, 6)
    stats = compute(ERA5, splits=[f"{n}={a}/{b}" for n, (a, b) in SPLITS.items()], diff_steps=steps)
    ds = xr.open_dataset(ERA5)
    for name, (start, end) in SPLITS.items():
        ref = _xarray_reference(
            ds["t2m"].sel(time=slice(start, end)), "time", steps, ["time", "latitude", "longitude"]
        )
        _check(stats.streams[f"t2m__{name}"], ref, steps)
    assert stats.streams["t2m__train"].count[0] == 480 * 33 * 49
    assert stats.streams["t2m__val"].diff[6].count[0] == (264 - 6) * 33 * 49


@pytest.mark.skipif(not ERAINT.exists(), reason="../shared/data is absent")
@pytest.mark.filterwarnings("ignore:variable .* has non-conforming '_FillValue'")
def test_eraint_packed_int16_per_variable_and_level():
    stats = compute(ERAINT, time_dim="month", feature_dims=["level"])
    ds = xr.open_dataset(ERAINT)  # float64 scale_factor: xarray decodes in float64 too
    for var in ("u", "v", "z"):
        assert ds[var].encoding["dtype"] == np.int16
        stream = stats.streams[f"{var}__train"]
        assert stream.features == [f"{var}_200", f"{var}_500", f"{var}_850"]
        ref = _xarray_reference(ds[var], "month", (1,), ["month", "latitude", "longitude"])
        _check(stream, ref, (1,))
