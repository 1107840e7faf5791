"""``--format aurora``: Microsoft Aurora's normalisation dicts, keyed as
``aurora/normalisation.py`` looks them up (``name``, ``f"{name}_{level}"``),
checked against a float64 two-pass reference, and read back by ``report``/``compare``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from gridded_data import hourly
from refusals import assert_refused

from reference import assert_close, two_pass
from wxstats.cli import main
from wxstats.io.read import read_stats

FILE = "aurora_normalisation.json"


def _era5_like(path, levels=(50, 500, 1000), dtype=np.int64):
    rng = np.random.default_rng(3)
    n, ny, nx = 10, 3, 4
    z = 5e4 + 1e3 * np.arange(len(levels))[None, :, None, None]
    z = z + rng.standard_normal((n, len(levels), ny, nx)) * 300
    t2m = (280 + 5 * rng.standard_normal((n, ny, nx))).astype(np.float32)
    ds = xr.Dataset(
        {
            "z": (("time", "level", "lat", "lon"), z, {"units": "m2 s-2"}),
            "2t": (("time", "lat", "lon"), t2m, {"units": "K"}),
        },
        coords={"time": hourly(n), "level": ("level", np.asarray(levels, dtype=dtype))},
    )
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    return ds


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_locations_and_scales_are_aurora_keys_and_exact(tmp_path, dtype):
    ds = _era5_like(tmp_path / "era5.zarr", dtype=dtype)
    out = tmp_path / "stats"
    args = ["compute", str(tmp_path / "era5.zarr"), "--format", "aurora", "--output-dir", str(out)]
    assert main([*args, "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [FILE]
    data = json.loads((out / FILE).read_text())
    # Aurora's own lookup: locations[f"{name}_{level}"] for each of its atmos_levels (ints)
    z = ds["z"].values.astype(np.float64)
    mean, std = two_pass(z.transpose(1, 0, 2, 3).reshape(3, -1), 1)  # per level
    for i, level in enumerate((50, 500, 1000)):
        assert_close(data["locations"][f"z_{level}"], mean[i], 1e-12, f"z_{level} location")
        assert_close(data["scales"][f"z_{level}"], std[i], 1e-12, f"z_{level} scale")
    mean, std = two_pass(ds["2t"].values.ravel(), 0)
    assert_close(data["locations"]["2t"], mean, 1e-12, "2t location")
    assert_close(data["scales"]["2t"], std, 1e-12, "2t scale")
    assert set(data["locations"]) == set(data["scales"]) == {"z_50", "z_500", "z_1000", "2t"}
    assert data["wxstats_run"]["split"] == "train"


def test_read_back_by_report_and_compare(tmp_path, capsys):
    _era5_like(tmp_path / "era5.zarr")
    out, summary = tmp_path / "stats", tmp_path / "s.json"
    args = ["compute", str(tmp_path / "era5.zarr"), "--format", "aurora", "--output-dir", str(out)]
    assert main([*args, "--summary", str(summary), "--quiet"]) == 0
    stats = read_stats(out)
    with open(out / FILE) as f:
        data = json.load(f)
    state = stats.streams["state"]
    assert state.features == list(data["locations"])
    assert state.mean.tolist() == list(data["locations"].values())  # repr floats: exact
    assert main(["compare", str(out / FILE), str(summary)]) == 0  # the same floats
    assert "Traceback" not in capsys.readouterr().err
    assert main(["report", str(out), "-o", str(tmp_path / "r")]) == 0


def test_refused_before_reading(tmp_path, capsys):
    _era5_like(tmp_path / "era5.zarr")
    base = ["compute", str(tmp_path / "era5.zarr"), "--format", "aurora", "--quiet"]
    out = ["--output-dir", str(tmp_path / "o")]
    two = ["--split", "a=2021-01-01T00/2021-01-01T04", "--split", "b=2021-01-01T05/2021-01-01T09"]
    assert_refused(capsys, tmp_path, [*base, *out, *two], "one split", "a, b")
    assert_refused(capsys, tmp_path, [*base, "--output", str(tmp_path / "x.nc")], "--output-dir")
    assert_refused(capsys, tmp_path, [*base, *out, "--by", "month"], "--by month", "aurora")
