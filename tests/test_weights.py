"""Area-weighted statistics (``--weights``): against an explicitly weighted float64
numpy reference, byte-identical across block sizes, ranks, states and updates,
recorded in the outputs, and refused clearly where the weights cannot be right.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from distributed_helpers import env
from gridded_data import gridded, write_zarr
from growing import grow, values
from refusals import assert_refused

from wxstats.cli import main
from wxstats.io.read import read_stats

LATS = np.array([-80.0, -45.0, -10.0, 20.0, 55.0, 89.0])
STEPS = ["--diff-steps", "1,3", "--quiet"]
RANGES = {"a": slice(0, 20), "b": slice(20, 33), "c": slice(33, 50)}


def _dataset() -> tuple[xr.Dataset, dict]:
    ds, truth = gridded(n_time=50)  # y (6) x x (7), z on 2 levels, packed msl
    area = np.random.default_rng(5).uniform(0.5, 2.0, (6, 7))
    ds = ds.assign_coords(lat=("y", LATS, {"units": "degrees_north"}))
    return ds.assign(cell_area=(("y", "x"), area, {"units": "m2"})), truth


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    ds, truth = _dataset()
    write_zarr(ds, root / "full.zarr")
    for name, cut in RANGES.items():
        write_zarr(ds.isel(time=cut), root / f"{name}.zarr", time_chunk=5)
    return root, ds, truth


def weighted_reference(x: np.ndarray, w: np.ndarray, steps=(1, 3)) -> dict:
    """Weighted two-pass float64 statistics of ``x`` (time, y, x, feature) with
    weights ``w`` (y, x): sum(w x) / sum(w), sum(w (x - mean)^2) / sum(w)."""

    def moments(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ww = np.broadcast_to(w[None, :, :, None], v.shape)
        total = ww.sum(axis=(0, 1, 2))
        mean = (ww * v).sum(axis=(0, 1, 2)) / total
        var = (ww * (v - mean) ** 2).sum(axis=(0, 1, 2)) / total
        return mean, np.sqrt(var)

    out = {"values": moments(x)}
    for k in steps:
        out[k] = moments(x[k:] - x[:-k])
    return out


def _coslat(n_x: int = 7) -> np.ndarray:
    return np.repeat(np.cos(np.deg2rad(LATS))[:, None], n_x, axis=1)


def _check(stats, truth, weights, split="train", rtol=1e-12):
    for var in ("t2m", "z", "msl"):
        stream = stats.streams[f"{var}__{split}"]
        ref = weighted_reference(truth[var], weights)
        np.testing.assert_allclose(stream.mean, ref["values"][0], rtol=rtol, err_msg=var)
        np.testing.assert_allclose(stream.std, ref["values"][1], rtol=rtol, err_msg=var)
        for k in (1, 3):
            np.testing.assert_allclose(stream.diff[k].mean, ref[k][0], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(stream.diff[k].std, ref[k][1], rtol=rtol, err_msg=var)
        # counts and extremes stay those of the values themselves
        assert list(stream.count) == [50 * 42] * stream.mean.shape[0]


@pytest.mark.parametrize(
    "spec, weights",
    [("coslat", _coslat()), ("cell_area", None)],
    ids=["coslat", "field"],
)
def test_weighted_statistics_match_an_explicit_reference(store, tmp_path, spec, weights):
    root, ds, truth = store
    out = tmp_path / "w.nc"
    args = ["compute", str(root / "full.zarr"), "--weights", spec, "--output", str(out)]
    assert main([*args, "--variables", "t2m,z,msl", *STEPS]) == 0
    w = ds["cell_area"].values if weights is None else weights
    stats = read_stats(out)
    _check(stats, truth, w)
    # unweighted statistics differ: the weighting did something
    plain = weighted_reference(truth["t2m"], np.ones((6, 7)))["values"][0]
    assert abs(stats.streams["t2m__train"].mean[0] - plain[0]) > 1e-3
    with xr.open_dataset(out) as f:
        assert spec in f.attrs["source_weights"]
        assert "weighted by grid point" in f.attrs["method"]


def test_weights_from_another_file(store, tmp_path):
    root, ds, truth = store
    other = tmp_path / "grid.nc"
    ds[["cell_area"]].rename({"cell_area": "area"}).to_netcdf(other)
    out = tmp_path / "w.nc"
    args = ["compute", str(root / "full.zarr"), "--weights", f"{other}:area", "--output", str(out)]
    assert main([*args, *STEPS]) == 0
    _check(read_stats(out), truth, ds["cell_area"].values)


def test_cosines_are_the_c_library_ones(store):
    """The weights are cos(radians(lat)) of Python's math module, bit for bit
    (numpy's SIMD cosines may differ by an ulp between CPUs)."""
    from wxstats.sources.kinds import Selection
    from wxstats.sources.xarray import XarraySource

    root, _, _ = store
    source = XarraySource(root / "full.zarr", Selection(weights="coslat"))
    t2m = next(v for v in source.vars if v.name == "t2m")
    expected = [math.cos(math.radians(lat)) for lat in LATS for _ in range(7)]
    assert t2m.weights.tobytes() == np.array(expected).tobytes()
    source.close()


def test_block_size_and_ranks_never_change_a_bit(store, tmp_path, monkeypatch):
    root, _, _ = store
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])  # the ranks run this checkout
    outputs = []
    for extra in ([], ["--block-mb", "0.001"], ["--nproc", "3", "--block-mb", "0.002"]):
        out = tmp_path / f"w{len(outputs)}.nc"
        args = ["compute", str(root / "full.zarr"), "--weights", "coslat", "--output", str(out)]
        assert main([*args, *extra, *STEPS]) == 0
        outputs.append(values(out))
    assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.parametrize("by", [None, "month"])
def test_weighted_states_grow_into_the_full_run(store, tmp_path, by):
    """State on the first range, updated twice, or merged in another order:
    the bytes of one weighted run over everything (also as a climatology)."""
    root, _, truth = store
    opts = ["--weights", "coslat", *STEPS, *(["--by", by] if by else [])]
    pieces = {name: root / f"{name}.zarr" for name in RANGES}
    grown = grow(root / "full.zarr", pieces, tmp_path, opts, merge_order="cab")
    grown.assert_same_bytes()
    if by is None:
        _check(read_stats(grown.full), truth, _coslat())


# -- refused, one line, nothing written ------------------------------------------------


def _write(ds: xr.Dataset, path):
    write_zarr(ds, path)
    return str(path)


def test_bad_weights_are_refused(store, tmp_path, capsys):
    root, ds, _ = store
    out = ["--output", str(tmp_path / "o.nc"), "--quiet"]
    no_lat = _write(ds.drop_vars("lat"), tmp_path / "nolat.zarr")
    assert_refused(
        capsys,
        tmp_path,
        ["compute", no_lat, "--weights", "coslat", *out],
        "nolat.zarr",
        "latitude coordinate",
    )
    bad_lat = _write(ds.assign_coords(lat=("y", LATS + 5)), tmp_path / "badlat.zarr")
    assert_refused(
        capsys,
        tmp_path,
        ["compute", bad_lat, "--weights", "coslat", *out],
        "badlat.zarr",
        "variable lat",
        "-90..90",
    )
    negative = _write(ds.assign(cell_area=-ds.cell_area), tmp_path / "neg.zarr")
    assert_refused(
        capsys,
        tmp_path,
        ["compute", negative, "--weights", "cell_area", *out],
        "neg.zarr",
        "cell_area",
        "negative",
    )
    for name, bad, words in [
        ("nan.zarr", np.nan, ("NaN, inf or < 0",)),
        ("inf.zarr", np.inf, ("NaN, inf or < 0",)),
        ("zero.zarr", 0.0, ("every weight is 0",)),
    ]:
        area = ds.cell_area.values.copy()
        area[0 if name != "zero.zarr" else slice(None)] = bad
        path = _write(ds.assign(cell_area=(("y", "x"), area)), tmp_path / name)
        cmd = ["compute", path, "--weights", "cell_area", *out]
        assert_refused(capsys, tmp_path, cmd, name, "variable cell_area", *words)
    full = str(root / "full.zarr")
    assert_refused(
        capsys,
        tmp_path,
        ["compute", full, "--weights", "area", *out],
        "full.zarr",
        "no variable 'area'",
    )
    on_level = _write(ds.assign(lw=("level", [1.0, 2.0])), tmp_path / "lvl.zarr")
    assert_refused(
        capsys,
        tmp_path,
        ["compute", on_level, "--weights", "lw", "--variables", "t2m", *out],
        "variable lw",
        "level",
        "t2m",
    )


def test_weights_must_match_to_grow(store, tmp_path, capsys):
    """An update takes the state's weights; other latitudes (named, with their
    range), or a state summed without weights, are refused."""
    root, ds, _ = store
    a = tmp_path / "a.wxstate"
    args = ["compute", str(root / "a.zarr"), "--weights", "coslat", "--state", str(a)]
    assert main([*args, "--output", str(tmp_path / "a.nc"), *STEPS]) == 0
    moved = _write(
        ds.isel(time=RANGES["b"]).assign_coords(lat=("y", LATS - 1)), tmp_path / "moved.zarr"
    )
    assert_refused(
        capsys,
        tmp_path,
        ["update", str(a), moved, "--state", str(tmp_path / "ab.wxstate"), "--quiet"],
        "moved.zarr",
        "lat differs: ascending -81..88 (6 values) in",
    )
    plain = tmp_path / "plain.wxstate"
    args = [
        "compute",
        str(root / "b.zarr"),
        "--state",
        str(plain),
        "--output",
        str(tmp_path / "p.nc"),
    ]
    assert main([*args, *STEPS]) == 0
    args = ["merge", str(a), str(plain), "--output", str(tmp_path / "m.nc")]
    assert_refused(capsys, tmp_path, args, "plain.wxstate", "--weights none in")


def test_weights_are_for_gridded_data(meps_small, tmp_path, capsys):
    assert_refused(
        capsys,
        tmp_path,
        ["compute", str(meps_small), "--weights", "coslat", "--quiet"],
        "--weights",
        "zarr/netCDF",
    )


def test_weights_are_not_written_into_a_data_prep_store(tmp_path, capsys):
    from gridded_data import mdp_store

    mdp_store(tmp_path / "s.zarr")
    assert_refused(
        capsys,
        tmp_path,
        ["compute", str(tmp_path / "s.zarr"), "--write-into", "--weights", "coslat", "--quiet"],
        "--weights coslat",
        "--output",
    )


# -- weights meet the data by coordinate values ------------------------------------------


def test_a_weights_file_is_placed_by_its_coordinates(store, tmp_path):
    """A cell-area file with its latitudes in the other order (and its dimensions
    transposed) weighs each point by its own area, as the reference does."""
    root, ds, truth = store
    other = tmp_path / "run:1" / "grid.nc"  # a ':' in the path: split at the last one
    other.parent.mkdir()
    flipped = ds[["cell_area"]].isel(y=slice(None, None, -1)).transpose("x", "y")
    flipped.to_netcdf(other)
    out = tmp_path / "w.nc"
    args = ["compute", str(root / "full.zarr"), "--weights", f"{other}:cell_area"]
    assert main([*args, "--output", str(out), *STEPS]) == 0
    _check(read_stats(out), truth, ds["cell_area"].values)


def test_unlabelled_dimensions_are_taken_by_position(tmp_path):
    """Where neither the data nor the weights file has a coordinate along a
    dimension, there is nothing but positions to go by."""
    ds, truth = gridded(n_time=10)
    ds = ds.drop_vars(["y", "x"])
    path = _write(ds, tmp_path / "d.zarr")
    area = np.random.default_rng(7).uniform(0.5, 2.0, (6, 7))
    xr.Dataset({"a": (("y", "x"), area)}).to_netcdf(tmp_path / "area.nc")
    out = tmp_path / "w.nc"
    args = ["compute", path, "--weights", f"{tmp_path / 'area.nc'}:a", "--variables", "t2m"]
    assert main([*args, "--output", str(out), "--diff-steps", "1", "--quiet"]) == 0
    ref = weighted_reference(truth["t2m"], area, steps=(1,))
    stream = read_stats(out).streams["t2m__train"]
    np.testing.assert_allclose(stream.mean, ref["values"][0], rtol=1e-12)
    np.testing.assert_allclose(stream.std, ref["values"][1], rtol=1e-12)


def test_weights_on_other_coordinates_are_refused(store, tmp_path, capsys):
    root, ds, _ = store
    full, out = str(root / "full.zarr"), ["--output", str(tmp_path / "o.nc"), "--quiet"]
    area = ds[["cell_area"]]
    cases = {
        "lat.nc": (area.assign_coords(lat=("y", LATS + 1)), "coordinate lat", "-79.0"),
        "y.nc": (area.assign_coords(y=area.y + 10), "coordinate y", "not among"),
        "bare.nc": (xr.Dataset({"cell_area": area.cell_area.drop_vars(["y", "lat"])}), "along y"),
    }
    for name, (data, *words) in cases.items():
        data.to_netcdf(tmp_path / name)
        spec = f"{tmp_path / name}:cell_area"
        before = tmp_path / "keep"
        before.mkdir(exist_ok=True)
        assert_refused(capsys, before, ["compute", full, "--weights", spec, *out], name, *words)
        assert not (tmp_path / "o.nc").exists()


def test_a_missing_weights_file_is_named(store, tmp_path, capsys):
    root, _, _ = store
    spec = f"{tmp_path / 'moved' / 'area.nc'}:cell_area"
    assert_refused(
        capsys,
        tmp_path,
        ["compute", str(root / "full.zarr"), "--weights", spec, "--quiet"],
        "weights file",
        "area.nc not found",
    )


def test_coslat_honours_latitudes_in_radians(store, tmp_path, capsys):
    root, ds, truth = store
    radians = ds.assign_coords(lat=("y", np.deg2rad(LATS), {"units": "radians"}))
    path = _write(radians, tmp_path / "rad.zarr")
    out = tmp_path / "w.nc"
    args = ["compute", path, "--weights", "coslat", "--variables", "t2m,z,msl"]
    assert main([*args, "--output", str(out), *STEPS]) == 0
    _check(read_stats(out), truth, _coslat())
    folder = tmp_path / "refused"
    folder.mkdir()
    for name, lat, words in [
        ("m.zarr", ("y", LATS, {"units": "m"}), ("latitude units 'm'",)),
        ("big.zarr", ("y", LATS / 45, {"units": "rad"}), ("-pi/2..pi/2", "-1.777")),
    ]:
        bad = _write(ds.assign_coords(lat=lat), tmp_path / name)
        cmd = ["compute", bad, "--weights", "coslat", "--output", str(folder / "o.nc")]
        assert_refused(capsys, folder, [*cmd, "--quiet"], name, "variable lat", *words)


def test_finite_values_only_where_the_weight_is_0_are_refused(store, tmp_path, capsys):
    """As an all-NaN feature is unweighted: there is nothing to divide by."""
    _, ds, _ = store
    area = ds.cell_area.values.copy()
    area[0] = 0.0
    t2m = ds.t2m.values.copy()
    t2m[:, 1:] = np.nan
    data = ds.assign(cell_area=(("y", "x"), area), t2m=(ds.t2m.dims, t2m, ds.t2m.attrs))
    path = _write(data, tmp_path / "zero.zarr")
    folder = tmp_path / "out"
    folder.mkdir()
    args = ["compute", path, "--skipna", "--variables", "t2m", "--output", str(folder / "o.nc")]
    assert_refused(
        capsys,
        folder,
        [*args, "--weights", "cell_area", "--quiet"],
        "variable t2m",
        "no finite values with a weight above 0",
        "nothing to standardize with",
    )
    assert main([*args, "--quiet"]) == 0  # unweighted, the same values are usable


def test_flipped_latitudes_are_other_weights(tmp_path, capsys):
    """Latitudes symmetric about the equator give the same cosines reversed; a
    state must still not grow with data on the flipped grid."""
    ds, _ = gridded(n_time=20)
    lats = np.array([-75.0, -45.0, -15.0, 15.0, 45.0, 75.0])
    ds = ds.assign_coords(lat=("y", lats, {"units": "degrees_north"}))
    a = _write(ds.isel(time=slice(0, 10)), tmp_path / "a.zarr")
    flipped = ds.isel(time=slice(10, 20)).assign_coords(lat=("y", lats[::-1]))
    b = _write(flipped, tmp_path / "b.zarr")
    state = tmp_path / "a.wxstate"
    args = ["compute", a, "--weights", "coslat", "--state", str(state)]
    assert main([*args, "--output", str(tmp_path / "a.nc"), *STEPS]) == 0
    assert_refused(
        capsys,
        tmp_path,
        ["update", str(state), b, "--state", str(tmp_path / "ab.wxstate"), "--quiet"],
        "b.zarr",
        "lat differs: descending 75..-75 (6 values) in",  # the run identity's grid, first
    )
