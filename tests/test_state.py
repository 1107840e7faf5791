"""Statistics that grow: ``compute --state``, ``update`` and ``merge`` give the same
bytes as one run over all the data, and refuse what cannot be joined.

The dataset is split into three time ranges (20, 15 and 15 hourly steps, the
last one a netCDF file); every path through the states is compared value by
value (float64 bytes) with a full run, and with an independent float64 numpy
reference.
"""

from __future__ import annotations

import shutil

import netCDF4
import numpy as np
import pytest
import xarray as xr
from distributed_helpers import env
from gridded_data import assert_stream_matches, gridded, reference, write_zarr
from growing import compute_states, grow, merge_states, update_chain, values
from refusals import assert_refused

from wxstats.cli import main
from wxstats.io.formats.wxstate import FORMAT_VERSION
from wxstats.io.read import read_stats
from wxstats.runtime.state import State

STEPS = ["--diff-steps", "1,3,6", "--quiet"]
RANGES = {"a": slice(0, 20), "b": slice(20, 35), "c": slice(35, 50)}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("grow")
    ds, truth = gridded(n_time=50)
    write_zarr(ds, root / "full.zarr")
    write_zarr(ds.isel(time=RANGES["a"]), root / "a.zarr", time_chunk=6)
    write_zarr(ds.isel(time=RANGES["b"]), root / "b.zarr", time_chunk=4)
    ds.isel(time=RANGES["c"]).to_netcdf(root / "c.nc")
    assert (
        main(["compute", str(root / "full.zarr"), "--output", str(root / "full.nc"), *STEPS]) == 0
    )
    # each range on its own, as on three machines: no piece needs another
    for name, data in (("c", "c.nc"), ("b", "b.zarr"), ("a", "a.zarr")):
        args = ["compute", str(root / data), "--state", str(root / f"{name}.wxstate")]
        out = ["--output", str(root / f"{name}.stats.nc")]
        assert main([*args, *out, *STEPS]) == 0
    return root, truth


def matches_reference(path, truth) -> None:
    """Every stream of the statistics file ``path`` against the float64 reference
    over all 50 steps."""
    stats = read_stats(path)
    for var in ("t2m", "z", "msl"):
        assert_stream_matches(
            stats.streams[f"{var}__train"], reference(truth[var], 0, 50, (1, 3, 6))
        )


def test_update_twice_is_the_full_run_byte_for_byte(data, tmp_path):
    root, truth = data
    rest = [root / "b.zarr", root / "c.nc"]
    grown = update_chain(root / "a.wxstate", rest, tmp_path, keep_state=True)
    assert values(grown) == values(root / "full.nc")
    matches_reference(grown, truth)
    # the grown state merges like any other
    out = merge_states([tmp_path / "grown.wxstate"], tmp_path / "again.nc")
    assert values(out) == values(root / "full.nc")
    # states keep what each difference spans on the hourly axis
    for path in (grown, out):
        span = read_stats(path).streams["t2m__train"].diff_span
        assert span == {1: 3600, 3: 3 * 3600, 6: 6 * 3600}


@pytest.mark.parametrize("order", ["cab", "bca", "acb"])
def test_merge_in_any_order_is_the_full_run(data, tmp_path, order):
    root, _ = data
    out = merge_states([root / f"{name}.wxstate" for name in order], tmp_path / "m.nc")
    assert values(out) == values(root / "full.nc")


def test_merge_of_merged_and_updated_states(data, tmp_path):
    root, _ = data
    bc = merge_states([root / "c.wxstate", root / "b.wxstate"], tmp_path / "bc.wxstate")
    out = merge_states([bc, root / "a.wxstate"], tmp_path / "m.nc")
    assert values(out) == values(root / "full.nc")
    update_chain(root / "a.wxstate", [root / "b.zarr"], tmp_path, keep_state=True)
    merge_states([root / "c.wxstate", tmp_path / "grown.wxstate"], out, "--overwrite")
    assert values(out) == values(root / "full.nc")


def test_first_range_alone_matches_its_reference(data):
    root, truth = data
    stats = read_stats(root / "a.stats.nc")
    for var in ("t2m", "z", "msl"):
        assert_stream_matches(
            stats.streams[f"{var}__train"], reference(truth[var], 0, 20, (1, 3, 6))
        )


@pytest.mark.slow  # starts ranks
def test_update_with_two_processes(data, tmp_path, monkeypatch):
    root, _ = data
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])  # the ranks run this checkout
    rest = [root / "b.zarr", root / "c.nc"]
    out = update_chain(root / "a.wxstate", rest, tmp_path, last=["--nproc", "2"])
    assert values(out) == values(root / "full.nc")


# -- refused, one line, nothing written ------------------------------------------------


def _update(root, tmp_path, base, data, *more):
    state = str(tmp_path / "new.wxstate")
    return [
        "update",
        str(base),
        str(data),
        "--state",
        state,
        "--output",
        str(tmp_path / "o.nc"),
        *more,
    ]


def test_update_refuses_overlap(data, tmp_path, capsys):
    root, _ = data
    args = _update(root, tmp_path, root / "a.wxstate", root / "full.zarr")
    assert_refused(capsys, tmp_path, args, "full.zarr", "overlaps", "a.wxstate")


def test_update_refuses_a_gap_unless_allowed(data, tmp_path, capsys):
    root, truth = data
    args = _update(root, tmp_path, root / "a.wxstate", root / "c.nc")
    assert_refused(capsys, tmp_path, args, "c.nc", "gap", "2021-01-01T20:00:00", "--allow-gap")
    assert main([*args, "--allow-gap", "--quiet"]) == 0
    stats = read_stats(tmp_path / "o.nc")
    both = np.concatenate([truth["t2m"][:20], truth["t2m"][35:]])
    ref = reference(both, 0, 35, ())
    np.testing.assert_allclose(stats.streams["t2m__train"].mean, ref["mean"], rtol=1e-12)
    with xr.open_dataset(tmp_path / "o.nc") as ds:
        assert "2021-01-01T19:00:00 to 2021-01-02T11:00:00" in ds.attrs["source_gaps"]


def test_update_refuses_other_variables_or_units(data, tmp_path, capsys):
    root, _ = data
    ds = xr.open_dataset(root / "c.nc")
    other = tmp_path / "units.nc"
    changed = ds.copy()
    changed["t2m"].attrs["units"] = "degC"
    changed.to_netcdf(other)
    base = root / "ab.wxstate"
    assert (
        main(
            [
                "update",
                str(root / "a.wxstate"),
                str(root / "b.zarr"),
                "--state",
                str(base),
                "--quiet",
                "--overwrite",
            ]
        )
        == 0
    )
    assert_refused(
        capsys, tmp_path, _update(root, tmp_path, base, other), "units.nc", "t2m", "units", "degC"
    )
    fewer = tmp_path / "fewer.nc"
    ds.drop_vars("msl").to_netcdf(fewer)
    assert_refused(capsys, tmp_path, _update(root, tmp_path, base, fewer), "msl")
    ds.close()


def test_states_computed_apart_merge_to_the_full_run_in_any_order(data, tmp_path, capsys):
    """Three ranges computed independently (no state was given another's
    references, a fourth range has blocks of another size) merge to the full
    run's bytes in every order; overlaps are refused."""
    root, truth = data
    own = tmp_path / "b-own.wxstate"
    args = ["compute", str(root / "b.zarr"), "--state", str(own), "--block-mb", "0.001"]
    assert main([*args, "--output", str(tmp_path / "b.nc"), *STEPS]) == 0
    for order in ((own, root / "a.wxstate", root / "c.wxstate"),
                  (root / "c.wxstate", own, root / "a.wxstate")):  # fmt: skip
        out = merge_states(order, tmp_path / "m.nc", "--overwrite")
        assert values(out) == values(root / "full.nc")
    matches_reference(tmp_path / "m.nc", truth)
    args = [
        "merge",
        str(root / "a.wxstate"),
        str(root / "b.wxstate"),
        str(root / "b.wxstate"),
        "--output",
        str(tmp_path / "m2.nc"),
    ]
    assert_refused(capsys, tmp_path, args, "b.wxstate", "named twice")
    update_chain(root / "a.wxstate", [root / "b.zarr"], tmp_path, keep_state=True)
    ab = tmp_path / "grown.wxstate"
    args = ["merge", str(ab), str(root / "b.wxstate"), "--output", str(tmp_path / "m2.nc")]
    assert_refused(capsys, tmp_path, args, "b.wxstate", "overlaps", "grown.wxstate")


def test_newer_format_version_is_refused(data, tmp_path, capsys):
    root, _ = data
    newer = tmp_path / "newer.wxstate"
    shutil.copy(root / "a.wxstate", newer)
    with netCDF4.Dataset(newer, "a") as nc:
        nc.setncattr("wxstats_state_version", np.int32(FORMAT_VERSION + 1))
    assert_refused(
        capsys,
        tmp_path,
        _update(root, tmp_path, newer, root / "b.zarr"),
        "newer.wxstate",
        f"version {FORMAT_VERSION + 1}",
        "newer wxstats",
    )


@pytest.mark.parametrize("cut", [0.5, 0.98])
def test_truncated_or_altered_state_is_refused(data, tmp_path, capsys, cut):
    root, _ = data
    bad = tmp_path / "bad.wxstate"
    raw = (root / "a.wxstate").read_bytes()
    bad.write_bytes(raw[: int(len(raw) * cut)])
    assert_refused(
        capsys,
        tmp_path,
        _update(root, tmp_path, bad, root / "b.zarr"),
        "bad.wxstate",
        "not a usable wxstats state",
    )


def test_altered_sums_are_refused(data, tmp_path, capsys):
    root, _ = data
    bad = tmp_path / "bad.wxstate"
    shutil.copy(root / "a.wxstate", bad)
    with netCDF4.Dataset(bad, "a") as nc:
        nc["sums"][0] = nc["sums"][0] + 1
    assert_refused(
        capsys,
        tmp_path,
        ["merge", str(bad), str(root / "b.wxstate"), "--output", str(tmp_path / "m.nc")],
        "bad.wxstate",
        "checksum",
    )


def test_state_refuses_several_splits(data, tmp_path, capsys):
    root, _ = data
    two = ["--split", "x=2021-01-01T00/2021-01-01T09", "--split", "y=2021-01-01T10/2021-01-01T19"]
    args = ["compute", str(root / "a.zarr"), "--state", str(tmp_path / "s.wxstate"), *two, *STEPS]
    assert_refused(capsys, tmp_path, args, "one split", "--split")


def test_static_field_counted_once_and_checked(data, tmp_path, capsys):
    """A static field (no time) is the same in every range: kept once, and a
    range whose static field differs is refused."""
    root, _ = data
    pick = ["--variables", "t2m,orog", "--quiet"]
    full, a = tmp_path / "full.nc", tmp_path / "a.wxstate"
    assert main(["compute", str(root / "full.zarr"), "--output", str(full), *pick]) == 0
    assert (
        main(
            [
                "compute",
                str(root / "a.zarr"),
                "--state",
                str(a),
                "--output",
                str(tmp_path / "a.nc"),
                *pick,
            ]
        )
        == 0
    )
    out = tmp_path / "ab.nc"
    assert main(["update", str(a), str(root / "b.zarr"), "--output", str(out), "--quiet"]) == 0
    with xr.open_dataset(full) as f, xr.open_dataset(out) as g:
        assert "orog__train__mean" in f
        full_part = {n: f[n].values.tobytes() for n in f.data_vars if n.startswith("orog")}
        assert full_part == {n: g[n].values.tobytes() for n in g.data_vars if n.startswith("orog")}
    other = tmp_path / "b2.zarr"
    with xr.open_zarr(root / "b.zarr", consolidated=False) as ds:
        changed = ds.load()
    changed["orog"] = changed["orog"] + 1.0
    write_zarr(changed, other)
    args = ["update", str(a), str(other), "--output", str(tmp_path / "x.nc")]
    assert_refused(capsys, tmp_path, args, "b2.zarr", "static variable orog")


def test_ranges_shorter_than_the_largest_step(data, tmp_path):
    """Ranges of 2 and 3 steps (the largest difference step is 6): differences
    reach across a whole range into the one before it, and are still counted
    once, by update and by merge."""
    root, _ = data
    full = xr.open_zarr(root / "full.zarr", consolidated=False).load()
    cuts = {"p": slice(20, 22), "q": slice(22, 25), "r": slice(25, 50)}
    for name, cut in cuts.items():
        write_zarr(full.isel(time=cut), tmp_path / f"{name}.zarr")
    pieces = {name: tmp_path / f"{name}.zarr" for name in cuts}
    states = compute_states(pieces, tmp_path, STEPS)
    order = [states[n] for n in ("r", "q", "p")]
    out = merge_states([*order, root / "a.wxstate"], tmp_path / "m.nc")
    assert values(out) == values(root / "full.nc")
    grown = update_chain(root / "a.wxstate", list(pieces.values()), tmp_path, keep_state=True)
    assert values(grown) == values(root / "full.nc")
    # the 3-step range filling a gap later: the differences from r reach across it into p
    apr = [root / "a.wxstate", states["p"], states["r"]]
    gapped = merge_states(apr, tmp_path / "apr.wxstate", "--allow-gap")
    merge_states([gapped, states["q"]], out, "--overwrite")
    assert values(out) == values(root / "full.nc")


def test_single_steps_joined_across_gaps_merge_again(data, tmp_path):
    """States of one time step each have no time step of their own: joined
    across gaps, the result holds several such ranges; merged with one more it
    must place every range (it raised ValueError), and equal merging all three
    at once, with the values' statistics of those steps (no difference spans a gap)."""
    root, truth = data
    full = xr.open_zarr(root / "full.zarr", consolidated=False).load()
    pieces = {}
    for k in (0, 3, 7):
        pieces[f"s{k}"] = write_zarr(full.isel(time=slice(k, k + 1)), tmp_path / f"s{k}.zarr")
    states = compute_states(pieces, tmp_path, STEPS)
    pair = merge_states([states["s0"], states["s3"]], tmp_path / "p.wxstate", "--allow-gap")
    later = merge_states([pair, states["s7"]], tmp_path / "later.nc", "--allow-gap")
    at_once = merge_states(list(states.values()), tmp_path / "once.nc", "--allow-gap")
    assert values(later) == values(at_once)
    stats = read_stats(later)
    for var in ("t2m", "z", "msl"):
        x = np.asarray(truth[var], dtype=np.float64)[[0, 3, 7]]  # (time, y, x, feature)
        x = x.reshape(3, -1, x.shape[-1])
        got = stats.streams[f"{var}__train"]
        np.testing.assert_allclose(got.mean, x.mean(axis=(0, 1)), rtol=1e-12)
        np.testing.assert_allclose(got.std, x.std(axis=(0, 1)), rtol=1e-10)


def test_state_refused_for_an_anemoi_dataset(tmp_path, capsys):
    """An anemoi dataset's statistics are rewritten whole, over its window: no state."""
    from test_anemoi import make_dataset

    make_dataset(tmp_path / "an.zarr")
    args = ["compute", str(tmp_path / "an.zarr"), "--state", str(tmp_path / "a.wxstate")]
    assert_refused(capsys, tmp_path, [*args, "--quiet"], "an.zarr", "anemoi", "rewritten whole")


def test_update_refuses_another_kind_of_time_axis(data, tmp_path, capsys):
    root, _ = data
    with xr.open_dataset(root / "c.nc") as ds:
        numeric = ds.assign_coords(time=np.arange(20, 35)).load()
    numeric.to_netcdf(tmp_path / "numeric.nc")
    args = _update(root, tmp_path, root / "a.wxstate", tmp_path / "numeric.nc")
    assert_refused(capsys, tmp_path, args, "numeric.nc", "time axis", "datetime64[ns]")


def test_update_takes_earlier_data_as_merge_does(data, tmp_path):
    """Data just before the state's: an update is a merge of the state with the
    new data's (which takes any order); grown with the rest, the full run's bytes."""
    root, _ = data
    grown = update_chain(root / "b.wxstate", [root / "a.zarr", root / "c.nc"], tmp_path)
    assert values(grown) == values(root / "full.nc")


def test_update_fills_the_gap_of_a_state(data, tmp_path):
    """A state with a gap (--allow-gap) updated with the data of the gap: the
    seams on both sides are counted, giving the full run's bytes, as a merge of
    the same pieces does."""
    root, truth = data
    ac = merge_states(
        [root / "a.wxstate", root / "c.wxstate"], tmp_path / "ac.wxstate", "--allow-gap"
    )
    grown = update_chain(ac, [root / "b.zarr"], tmp_path)
    assert values(grown) == values(root / "full.nc")
    matches_reference(grown, truth)


def test_update_joins_a_short_range_across_a_gap(data, tmp_path):
    """A range of 2 steps (shorter than the largest difference step, 6) after a
    gap, then the gap and the rest: the full run's bytes, as merge gives them."""
    root, _ = data
    full = xr.open_zarr(root / "full.zarr", consolidated=False).load()
    cuts = {"gap": slice(20, 30), "short": slice(30, 32), "rest": slice(32, 50)}
    for name, cut in cuts.items():
        write_zarr(full.isel(time=cut), tmp_path / f"{name}.zarr")
    gapped = tmp_path / "gapped.wxstate"
    args = ["update", str(root / "a.wxstate"), str(tmp_path / "short.zarr"), "--state"]
    assert main([*args, str(gapped), "--allow-gap", "--quiet"]) == 0
    grown = update_chain(gapped, [tmp_path / "gap.zarr", tmp_path / "rest.zarr"], tmp_path)
    assert values(grown) == values(root / "full.nc")


def test_update_and_merge_refuse_an_overlap_with_the_same_line(data, tmp_path, capsys):
    """The update's check before reading is the merge's rule: the same line, the
    new data named where the merge names its state."""
    root, _ = data
    full = tmp_path / "full.wxstate"
    args = ["compute", str(root / "full.zarr"), "--state", str(full)]
    assert main([*args, "--output", str(tmp_path / "full.stats.nc"), *STEPS]) == 0
    ac = merge_states(
        [root / "a.wxstate", root / "c.wxstate"], tmp_path / "ac.wxstate", "--allow-gap"
    )
    for base in (root / "a.wxstate", ac):
        update = _update(root, tmp_path, base, root / "full.zarr")
        by_update = assert_refused(capsys, tmp_path, update, "full.zarr", "overlaps", base.name)
        merge = ["merge", str(base), str(full), "--output", str(tmp_path / "m.nc")]
        by_merge = assert_refused(capsys, tmp_path, merge, "full.wxstate", "overlaps", base.name)
        assert by_update.replace(str(root / "full.zarr"), str(full)) == by_merge


def test_missing_values_across_the_seams(tmp_path):
    """--skipna: NaNs next to the boundaries leave out the same values and
    differences as in one run over everything."""
    ds, truth = gridded(n_time=30, seed=3)
    t2m = ds["t2m"].values.copy()
    t2m[9, 1, 2] = t2m[10, 0, 0] = t2m[12, 3, 3] = np.nan
    ds["t2m"] = (ds["t2m"].dims, t2m, ds["t2m"].attrs)
    write_zarr(ds, tmp_path / "all.zarr")
    write_zarr(ds.isel(time=slice(0, 10)), tmp_path / "p.zarr")
    write_zarr(ds.isel(time=slice(10, 30)), tmp_path / "q.zarr")
    opts = ["--diff-steps", "1,2", "--skipna", "--quiet"]
    pieces = {"p": tmp_path / "p.zarr", "q": tmp_path / "q.zarr"}
    grown = grow(tmp_path / "all.zarr", pieces, tmp_path, opts)
    grown.assert_same_bytes()
    stats = read_stats(grown.grown).streams["t2m__train"]
    ref = reference(t2m.astype(np.float64)[..., None], 0, 30, (1, 2))
    assert_stream_matches(stats, ref)
    assert list(stats.diff[1].count) == [29 * 42 - 6]  # each NaN leaves out two pairs


def test_float_time_axis_joins_despite_rounding(tmp_path):
    """Hours as floats of 0.1 steps: 2.2 + 0.1 is not 2.3 in float64, yet the
    ranges are adjacent."""
    ds, _ = gridded(n_time=30, seed=5)
    ds = ds.assign_coords(time=np.round(np.arange(30) * 0.1, 10))
    write_zarr(ds, tmp_path / "all.zarr")
    write_zarr(ds.isel(time=slice(0, 23)), tmp_path / "p.zarr")
    write_zarr(ds.isel(time=slice(23, 30)), tmp_path / "q.zarr")
    times = ds["time"].values
    assert times[22] + (times[1] - times[0]) != times[23]
    opts = ["--variables", "t2m", "--quiet"]
    pieces = {"p": tmp_path / "p.zarr", "q": tmp_path / "q.zarr"}
    grow(tmp_path / "all.zarr", pieces, tmp_path, opts).assert_same_bytes()


@pytest.mark.slow
def test_state_from_three_processes_is_the_same_state(data, tmp_path, monkeypatch):
    """The state a 3-rank run writes holds the same sums as the 1-process one,
    and grows into the full run's bytes."""
    root, _ = data
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])
    three = tmp_path / "a3.wxstate"
    args = ["compute", str(root / "a.zarr"), "--state", str(three), "--nproc", "3"]
    assert main([*args, "--output", str(tmp_path / "a3.nc"), "--block-mb", "0.001", *STEPS]) == 0
    one, many = State.read(str(root / "a.wxstate")), State.read(str(three))
    assert all(
        np.array_equal(x, y)
        for x, y in zip(one.partial.sums.pack(), many.partial.sums.pack(), strict=True)
    )
    rest = [root / "b.zarr", root / "c.nc"]
    abc = update_chain(three, rest, tmp_path, last=["--nproc", "3"])
    assert values(abc) == values(root / "full.nc")


def test_update_only_new_of_a_store_appended_in_place(data, tmp_path, capsys):
    """--only-new: the store holds the state's times and more (appended in place);
    only the later times are read, after finding the state's last steps unchanged."""
    root, _ = data
    out = tmp_path / "u.nc"
    args = ["update", str(root / "a.wxstate"), str(root / "full.zarr"), "--only-new"]
    assert main([*args, "--output", str(out), "--quiet"]) == 0
    assert values(out) == values(root / "full.nc")
    with xr.open_zarr(root / "full.zarr", consolidated=False) as ds:
        changed = ds.load()
    changed["t2m"][18, 0, 0] = changed["t2m"][18, 0, 0] + 1  # inside the state's tail
    write_zarr(changed, tmp_path / "changed.zarr")
    args = ["update", str(root / "a.wxstate"), str(tmp_path / "changed.zarr"), "--only-new"]
    assert_refused(capsys, tmp_path, [*args, "--output", str(tmp_path / "x.nc")], "t2m", "changed")
    args = ["update", str(root / "a.wxstate"), str(root / "a.zarr"), "--only-new"]
    assert_refused(capsys, tmp_path, [*args, "--output", str(tmp_path / "x.nc")], "nothing to add")


@pytest.mark.parametrize("weights", [[], ["--weights", "coslat"]])
def test_new_data_on_another_grid_of_the_same_shape_is_refused(tmp_path, capsys, weights):
    """Labels, not positions: latitudes flipped (ERA5's descending order against
    an ascending store: symmetric, so even cos(latitude) weights are the same
    numbers) or shifted by a degree are another grid; update and merge refuse
    them naming the coordinate."""
    ds, _ = gridded(n_time=30, seed=7)
    ds = ds.rename(y="latitude", x="longitude").assign_coords(
        latitude=np.linspace(-75.0, 75.0, 6), longitude=np.arange(7.0) * 10
    )
    write_zarr(ds.isel(time=slice(0, 15)), tmp_path / "a.zarr")
    later = ds.isel(time=slice(15, 30))
    write_zarr(later.isel(latitude=slice(None, None, -1)), tmp_path / "flipped.zarr")
    write_zarr(later.assign_coords(latitude=later.latitude + 1), tmp_path / "shifted.zarr")
    a = tmp_path / "a.wxstate"
    run = ["--output", str(tmp_path / "a.nc"), *weights, *STEPS]
    assert main(["compute", str(tmp_path / "a.zarr"), "--state", str(a), *run]) == 0
    out = ["--state", str(tmp_path / "ab.wxstate"), "--output", str(tmp_path / "ab.nc")]
    for name, text in (
        ("flipped", "descending 75..-75 (6 values)"),
        ("shifted", "ascending -74..76 (6 values)"),
    ):
        line = assert_refused(
            capsys,
            tmp_path,
            ["update", str(a), str(tmp_path / f"{name}.zarr"), *out],
            f"{name}.zarr: cannot update",
            f"latitude differs: {text} in",
            "ascending -75..75 (6 values) in",
        )
        assert "a.wxstate" in line
    # a state of the other grid, computed on its own: merge refuses it on the grid first
    own = tmp_path / "flipped.wxstate"
    args = ["compute", str(tmp_path / "flipped.zarr"), "--state", str(own)]
    assert main([*args, "--output", str(tmp_path / "f.nc"), *weights, *STEPS]) == 0
    args = ["merge", str(own), str(a), "--output", str(tmp_path / "m.nc")]
    assert_refused(capsys, tmp_path, args, "flipped.wxstate", "latitude differs: descending")
    shifted = tmp_path / "shifted.wxstate"
    args = ["compute", str(tmp_path / "shifted.zarr"), "--state", str(shifted)]
    assert main([*args, "--output", str(tmp_path / "s.nc"), *weights, *STEPS]) == 0
    args = ["merge", str(a), str(shifted), "--output", str(tmp_path / "m.nc")]
    assert_refused(capsys, tmp_path, args, "shifted.wxstate", "latitude differs: ascending -74..76")


def test_merge_fills_the_gap_of_a_state(data, tmp_path, capsys):
    """A state merged across a gap (--allow-gap) keeps each range's edge steps:
    the state of the missing range fills the gap later, seams on both sides,
    and gives the full run's bytes (coverage is a set of ranges, not first/last)."""
    root, truth = data
    pair = [root / "a.wxstate", root / "c.wxstate"]
    ac = merge_states(pair, tmp_path / "ac.wxstate", "--allow-gap")
    with xr.open_dataset(merge_states([ac], tmp_path / "ac.nc")) as ds:
        assert "2021-01-01T19:00:00 to 2021-01-02T11:00:00" in ds.attrs["source_gaps"]
    out = merge_states([root / "b.wxstate", ac], tmp_path / "abc.nc")
    assert values(out) == values(root / "full.nc")
    matches_reference(out, truth)
    with xr.open_dataset(out) as ds:
        assert "source_gaps" not in ds.attrs
    # what overlaps a range of the gapped state is still refused
    args = ["merge", str(ac), str(root / "a.wxstate"), "--output", str(tmp_path / "x.nc")]
    assert_refused(capsys, tmp_path, args, "overlaps", "a.wxstate")


def test_a_state_without_the_grids_coordinates_is_refused(data, tmp_path, capsys):
    """States written before the identity held the coordinates cannot be checked
    against new data's grid: refused in one line, saying to recompute."""
    root, _ = data
    old = State.read(str(root / "a.wxstate"))
    for key in ("version", "coords"):
        old.identity.pop(key)
    old.writer()(tmp_path / "old.wxstate")
    line = assert_refused(
        capsys, tmp_path, _update(root, tmp_path, tmp_path / "old.wxstate", root / "b.zarr")
    )
    assert "old.wxstate: a state written by wxstats" in line and "recompute it" in line


def test_merge_refuses_times_between_the_steps_of_another_state(data, tmp_path, capsys):
    """A state of the hourly data shifted by half an hour holds no time step of
    the others' grid: merged, even across an allowed gap, it is refused naming it."""
    root, _ = data
    with xr.open_dataset(root / "c.nc") as ds:
        shifted = ds.assign_coords(time=ds["time"].values + np.timedelta64(30, "m")).load()
    shifted.to_netcdf(tmp_path / "shifted.nc")
    state = tmp_path / "shifted.wxstate"
    args = ["compute", str(tmp_path / "shifted.nc"), "--state", str(state), *STEPS]
    assert main([*args, "--output", str(tmp_path / "s.nc")]) == 0
    merge = ["merge", str(root / "a.wxstate"), str(state), "--allow-gap"]
    assert_refused(
        capsys, tmp_path, [*merge, "--output", str(tmp_path / "m.nc")],
        "shifted.wxstate", "not on the time steps", "a.wxstate",
    )  # fmt: skip


def test_update_only_new_in_place_as_docs_growing_shows(data, tmp_path, capsys):
    """docs/growing.md's store appended in place: ``compute --state run.wxstate``
    writes ``run.stats.nc``; a later ``update run.wxstate STORE --only-new``
    without ``--state`` would replace it while the state stays behind: refused
    naming the command that grows both, which then gives the full run's bytes
    and a state that updates again."""
    root, _ = data
    run, stats = tmp_path / "run.wxstate", tmp_path / "run.stats.nc"
    assert main(["compute", str(root / "a.zarr"), "--state", str(run), *STEPS]) == 0
    assert stats.is_file()  # beside the state, named after it
    update = ["update", str(run), str(root / "full.zarr"), "--only-new", "--quiet"]
    assert main(update) == 2
    err = capsys.readouterr().err
    assert f"--state {run} --overwrite" in err and "output exists" in err, err
    assert main([*update, "--state", str(run), "--overwrite"]) == 0
    assert values(stats) == values(root / "full.nc")
    assert State.read(str(run)).times.n == 50
