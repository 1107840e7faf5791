"""zarr / netCDF datasets: statistics against an independent float64 reference,
decoding, splits, block-size and world-size independence, bad input, memory."""

from __future__ import annotations

import json
import tracemalloc
import warnings
from fractions import Fraction

import numpy as np
import pytest
import xarray as xr
from gridded_data import FILL, OFFSET, SCALE, assert_stream_matches, gridded, hourly, reference
from gridded_data import write_zarr as write_store

from reference import assert_close
from wxstats.cli import main
from wxstats.core.errors import InputError
from wxstats.core.kernel import step_bytes
from wxstats.io.formats.netcdf import read_stats_file, stats_dataset
from wxstats.io.formats.summary import summary_dict
from wxstats.runtime.engine import accumulate, empty_accumulator
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source
from wxstats.runtime.run import compute, compute_source, partition
from wxstats.sources.kinds import Selection
from wxstats.sources.xarray import XarraySource

SPLITS = ("train=2021-01-01T00:00/2021-01-02T05:00", "val=2021-01-02T06/2021-01-03T01")
TRAIN, VAL = (0, 30), (30, 50)
STEPS = (1, 3, 6)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("gridded")
    ds, truth = gridded()
    write_store(ds, root / "g.zarr")
    ds.to_netcdf(root / "g.nc")
    return root, ds, truth


def _stats(path, block_bytes=None, splits=SPLITS, steps=STEPS, **kw):
    if block_bytes is not None:
        kw["block_mb"] = block_bytes / 2**20
    return compute(path, splits=list(splits), diff_steps=steps, **kw)


def _bytes(stats, source) -> bytes:
    """Everything that depends on the data: the summary JSON and the netCDF values."""
    summary = summary_dict(stats)
    for entry in (summary, *summary["splits"].values()):
        entry.pop("run", None)
        entry.pop("source")  # names the dataset
    ds = stats_dataset(stats)
    arrays = b"".join(ds[v].values.tobytes() for v in sorted(ds.data_vars))
    return json.dumps(summary, sort_keys=True).encode() + arrays


def test_zarr_matches_float64_reference(data):
    root, _, truth = data
    stats = _stats(root / "g.zarr")
    assert sorted(stats.streams) == sorted(
        f"{v}__{s}" for v in ("t2m", "z", "msl") for s in ("train", "val")
    )
    for var in ("t2m", "z", "msl"):
        for split, (a, b) in (("train", TRAIN), ("val", VAL)):
            assert_stream_matches(
                stats.streams[f"{var}__{split}"], reference(truth[var], a, b, STEPS)
            )
    assert stats.streams["z__train"].features == ["z_500", "z_850"]
    assert "orog__train" not in stats.streams  # no time dimension: not selected by default


def _stream_bytes(stats) -> dict[str, bytes]:
    out = {}
    for name, s in stats.streams.items():
        parts = [s.count, s.mean, s.std, s.minimum, s.maximum, s.nan_count]
        parts += [
            x for k in sorted(s.diff) for x in (s.diff[k].count, s.diff[k].mean, s.diff[k].std)
        ]
        out[name] = b"".join(np.asarray(p).tobytes() for p in parts)
    return out


def test_block_size_and_format_never_change_a_bit(data):
    """zarr (chunks of 8 steps) and netCDF (contiguous) read in blocks of one
    chunk, one step, a few steps, or everything: the same bits."""
    root, _, _ = data
    per_step = 6 * 7 * (4 + 2 * 8 + 8)  # t2m float32, z float64 x 2 levels, msl decoded
    parts = 1 + len(STEPS)  # what a step costs the kernel beside its values, per variable
    per_step += sum(step_bytes(f, parts) for f in (1, 2, 1))
    results = []
    for name, budget in (
        ("g.zarr", 1),
        ("g.zarr", 16 * per_step),
        ("g.zarr", 2**30),
        ("g.nc", 1),
        ("g.nc", 7 * per_step),
    ):
        opts = Selection(splits=SPLITS, diff_steps=STEPS, block_bytes=budget)
        source = XarraySource(root / name, opts)
        results.append((len(source), _stream_bytes(compute_source(source))))
    assert [n for n, _ in results] == [7, 4, 1, 50, 8]
    assert all(r == results[0][1] for _, r in results)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_world_sizes_give_identical_bytes(data, world):
    """Simulated ranks: each reduces its contiguous blocks, merged in reverse."""
    root, _, _ = data
    opts = Selection(splits=SPLITS, diff_steps=STEPS, block_bytes=6 * 6 * 7 * 40)
    source = XarraySource(root / "g.zarr", opts)
    whole = compute_source(source)
    total = empty_accumulator(source)
    for rank in reversed(range(world)):
        total.merge(accumulate(source, partition(len(source), rank, world)))
    grouped = total.extract(source.streams, source.kind, source.capabilities.time_splits)
    grouped.attrs, grouped.run = whole.attrs, whole.run
    assert _bytes(grouped, source) == _bytes(whole, source)


def test_packed_int16_decoded_in_float64(data):
    """xarray alone decodes int16 with float32 attributes into float32; wxstats
    uses float64, so min and max equal raw * scale + offset in float64 exactly."""
    root, ds, truth = data
    assert xr.open_dataset(root / "g.nc")["msl"].dtype == np.float32
    stats = _stats(root / "g.nc", splits=())
    msl = stats.streams["msl__train"]
    assert msl.minimum[0] == truth["msl"].min() and msl.maximum[0] == truth["msl"].max()
    raw = ds["msl"].values
    assert msl.maximum[0] == raw.max() * np.float64(SCALE) + np.float64(OFFSET)
    assert msl.minimum[0] != np.float32(raw.min()) * SCALE + OFFSET  # not float32 decoding


def test_fill_values_are_missing(tmp_path):
    ds, truth = gridded(n_time=12)
    raw = ds["msl"].values.copy()
    raw[3, 2, 1] = raw[7, 0, 0] = FILL
    ds["msl"] = (ds["msl"].dims, raw, ds["msl"].attrs)
    ds = ds.drop_vars(["t2m", "z"])
    ds["msl"].attrs["missing_value"] = np.int16(-32000)
    raw[9, 1, 1] = -32000
    ds["msl"].values[9, 1, 1] = -32000
    write_store(ds, tmp_path / "f.zarr")
    with pytest.raises(InputError, match=r"msl: 3 NaN values.*--skipna"):
        _stats(tmp_path / "f.zarr", splits=())
    stats = _stats(tmp_path / "f.zarr", splits=(), skipna=True)
    values = truth["msl"].copy()
    values[raw[..., None] <= -32000] = np.nan
    assert_stream_matches(stats.streams["msl__train"], reference(values, 0, 12, STEPS))
    assert stats.streams["msl__train"].nan_count[0] == 3


def test_glob_of_netcdf_files_each_decoded_with_its_own_packing(tmp_path):
    """ERA5 files from the CDS each have their own scale_factor/add_offset."""
    ds, truth = gridded(n_time=30)
    ds = ds.drop_vars("orog")
    for i, (a, b) in enumerate(((20, 30), (0, 12), (12, 20))):  # written out of order
        part = ds.isel(time=slice(a, b))
        scale, offset = np.float64(0.01 * (i + 1)), np.float64(900.0 + i)
        raw = np.round((truth["msl"][a:b, ..., 0] - offset) / scale).astype(np.int16)
        part["msl"] = (part["msl"].dims, raw, {"scale_factor": scale, "add_offset": offset})
        truth["msl"][a:b, ..., 0] = raw * scale + offset
        part.to_netcdf(tmp_path / f"part{i}.nc")
    stats = _stats(str(tmp_path / "part*.nc"), splits=("all=2021-01-01/2021-01-02T05",))
    for var in ("t2m", "z", "msl"):
        assert_stream_matches(stats.streams[f"{var}__all"], reference(truth[var], 0, 30, STEPS))


def test_remote_url_through_fsspec(data):
    fsspec = pytest.importorskip("fsspec")
    root, ds, truth = data
    mapper = fsspec.get_mapper("memory://wxstats-test/g.zarr")
    ds[["t2m"]].to_zarr(mapper, mode="w", zarr_format=2, consolidated=True)
    try:
        stats = _stats("memory://wxstats-test/g.zarr", splits=())
        assert_stream_matches(stats.streams["t2m__train"], reference(truth["t2m"], 0, 50, STEPS))
    finally:
        fsspec.filesystem("memory").rm("/wxstats-test", recursive=True)


def test_an_oversized_object_of_a_filesystem_without_async_requests_is_refused(data):
    """fsspec's memory filesystem answers one batch at a time (no async requests):
    it too reads a chunk object no further than one byte past the most any codec
    stores its declared chunk in, and refuses it in one line naming it."""
    fsspec = pytest.importorskip("fsspec")
    _, ds, _ = data
    mapper = fsspec.get_mapper("memory://wxstats-big/g.zarr")
    enc = {"t2m": {"chunks": (10, 6, 7)}}
    ds[["t2m"]].to_zarr(mapper, mode="w", zarr_format=2, consolidated=True, encoding=enc)
    declared = 10 * 6 * 7 * 4  # a chunk of 10 steps of 6 x 7 float32
    mapper["t2m/0.0.0"] = b"\0" * 2**20
    try:
        with pytest.raises(InputError) as err:
            _stats("memory://wxstats-big/g.zarr", splits=())
        limit = declared + declared // 8 + 2**16
        assert str(err.value) == (
            "memory://wxstats-big/g.zarr: cannot read object t2m/0.0.0: is stored in more "
            f"than {limit} bytes, more than any codec takes for its declared {declared} bytes"
        )
    finally:
        fsspec.filesystem("memory").rm("/wxstats-big", recursive=True)


def test_feature_dims_option(data):
    root, _, truth = data
    flat = _stats(root / "g.zarr", splits=(), variables=["z"], feature_dims=[])
    assert flat.streams["z__train"].features == ["z"]
    assert flat.streams["z__train"].count[0] == 50 * 6 * 7 * 2
    with pytest.raises(InputError, match="--feature-dims member"):
        _stats(root / "g.zarr", splits=(), feature_dims=["member"])


# -- the time axis and splits -------------------------------------------------
def _with_times(tmp_path, times) -> str:
    ds, _ = gridded(n_time=len(times))
    ds = ds.assign_coords(time=times)[["t2m"]]
    return str(write_store(ds, tmp_path / "t.zarr"))


def test_unsorted_time_names_first_bad_timestamp(tmp_path):
    times = hourly(10)
    times[6], times[7] = times[7], times[6]
    with pytest.raises(InputError, match=r"not sorted: time\[7\] = 2021-01-01T06:00:00"):
        XarraySource(_with_times(tmp_path, times))


def test_duplicate_time_is_unsorted(tmp_path):
    times = hourly(10)
    times[4] = times[3]
    with pytest.raises(InputError, match=r"time\[4\] = 2021-01-01T03:00:00 does not come after"):
        XarraySource(_with_times(tmp_path, times))


def test_irregular_split_names_first_bad_step(tmp_path):
    times = hourly(12)
    times[8:] += np.timedelta64(2, "h")  # a gap between 07:00 and 10:00
    path = _with_times(tmp_path, times)
    with pytest.raises(InputError, match=r"irregular in split train: time\[8\] = 2021-01-01T10"):
        XarraySource(path)
    # splits on either side of the gap are regular; the gap holds no pair
    splits = ("a=2021-01-01T00/2021-01-01T07", "b=2021-01-01T10/2021-01-02")
    source = XarraySource(path, Selection(splits=splits, diff_steps=(1, 2)))
    assert [(s.start, s.stop) for s in source.splits] == [(0, 8), (8, 12)]
    stats = compute_source(source)
    truth = gridded(n_time=12)[1]["t2m"]
    assert_stream_matches(stats.streams["t2m__a"], reference(truth, 0, 8, (1, 2)))
    assert_stream_matches(stats.streams["t2m__b"], reference(truth, 8, 12, (1, 2)))


def test_overlapping_splits_each_count_their_own_times(data):
    root, _, truth = data
    splits = ("all=2021-01-01/2021-01-03", "mid=2021-01-01T10/2021-01-02T03")
    stats = _stats(root / "g.zarr", splits=splits, block_bytes=1)
    assert_stream_matches(stats.streams["z__all"], reference(truth["z"], 0, 50, STEPS))
    assert_stream_matches(stats.streams["z__mid"], reference(truth["z"], 10, 28, STEPS))


def test_split_outside_the_data(data):
    root, _, _ = data
    with pytest.raises(InputError, match=r"split test \(2022-01-01/2022-02-01\) selects no time"):
        _stats(root / "g.zarr", splits=("test=2022-01-01/2022-02-01",))


def test_split_of_one_step_has_no_diff_statistics(data):
    root, _, truth = data
    with pytest.warns(UserWarning, match="split one has one time step.*absent"):
        stats = _stats(root / "g.zarr", splits=("one=2021-01-01T05/2021-01-01T05",))
    stream = stats.streams["t2m__one"]
    assert stream.diff == {} and stream.count[0] == 42
    assert_stream_matches(stream, reference(truth["t2m"], 5, 6, STEPS))


def test_short_split_lists_only_the_steps_it_has(data):
    root, _, truth = data
    splits = ["long=2021-01-01T00/2021-01-01T20", "short=2021-01-02/2021-01-02T03"]
    source = open_source(ComputeOptions(dataset=root / "g.zarr", splits=splits, diff_steps=STEPS))
    stats = compute_source(source)
    assert sorted(stats.streams["t2m__short"].diff) == [1, 3]
    assert any("no pairs of time steps 6 apart" in w for w in stats.warnings)
    ds = stats_dataset(stats)
    assert list(ds["t2m__long__diff_std"].dims) == ["diff_step"]
    assert list(ds["t2m__short__diff_std"].dims) == ["t2m__short__diff_step"]
    assert not np.isnan(ds["t2m__short__diff_std"].values).any()
    assert_stream_matches(stats.streams["t2m__short"], reference(truth["t2m"], 24, 28, (1, 3)))


def test_numeric_time_axis_and_other_time_dim(tmp_path):
    ds, truth = gridded(n_time=6)
    ds = ds[["t2m"]].rename(time="month").assign_coords(month=np.arange(1, 7))
    write_store(ds, tmp_path / "m.zarr")
    with pytest.raises(InputError, match="no dimension 'time'.*--time-dim"):
        XarraySource(tmp_path / "m.zarr")
    stats = _stats(tmp_path / "m.zarr", splits=("a=2/5",), time_dim="month", steps=(1,))
    assert_stream_matches(stats.streams["t2m__a"], reference(truth["t2m"], 1, 5, (1,)))


# -- bad input --------------------------------------------------------------------
def test_a_named_variable_without_time_is_a_static_field(data):
    root, ds, truth = data
    stats = _stats(root / "g.zarr", variables=["t2m", "orog"])
    orog = ds["orog"].values.astype(np.float64)
    for split in ("train", "val"):  # reduced over the grid once, the same in every split
        stream = stats.streams[f"orog__{split}"]
        assert stream.category == "static" and not stream.diff
        assert stream.count[0] == orog.size
        assert_close(stream.mean, [orog.mean()], 1e-15, "orog mean")
        assert_close(stream.std, [orog.std()], 1e-13, "orog std")
    assert_stream_matches(stats.streams["t2m__train"], reference(truth["t2m"], *TRAIN, STEPS))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"variables": ["nope"]}, "no variable 'nope'"),
        ({"splits": ["train"]}, "give the interval as NAME=START/END"),
        ({"splits": ["train=2021-01-01"]}, "expected NAME=START/END"),
        ({"splits": ["a__b=2021-01-01/2021-01-02"]}, "no '__'"),
        ({"splits": ["a=x/y"]}, "cannot read 'x'/'y' as times of time"),
        ({"splits": ["a=2021-01-01/2021-01-02", "a=2021-01-01/2021-01-02"]}, "must differ"),
        ({"diff_steps": (0,)}, "positive"),
    ],
)
def test_bad_options_are_one_line_errors(data, kwargs, message):
    root, _, _ = data
    with pytest.raises(InputError, match=message):
        open_source(ComputeOptions(dataset=root / "g.zarr", **kwargs))


def test_missing_or_unreadable_dataset(tmp_path):
    with pytest.raises(InputError, match="dataset not found"):
        XarraySource(tmp_path / "none.zarr")
    (tmp_path / "folder").mkdir()
    with pytest.raises(InputError, match="not a zarr store"):
        XarraySource(tmp_path / "folder")
    (tmp_path / "bad.nc").write_text("not netCDF")
    with pytest.raises(InputError, match="bad.nc: cannot open with xarray"):
        XarraySource(tmp_path / "bad.nc")
    with pytest.raises(InputError, match="no files match"):
        XarraySource(str(tmp_path / "x*.nc"))


def test_infinite_value_names_the_time_range(tmp_path):
    ds, _ = gridded(n_time=20)
    ds["t2m"][13, 1, 1] = np.inf
    write_store(ds[["t2m"]], tmp_path / "i.zarr")
    with pytest.raises(InputError, match=r"2021-01-01T08:00:00 to .*variable t2m: 1 infinite"):
        _stats(tmp_path / "i.zarr", splits=(), block_bytes=8 * 6 * 7 * 4)


# -- memory -------------------------------------------------------------------------
def test_memory_stays_within_a_few_blocks(tmp_path):
    """A 24 MB dataset with a 1 MB block budget: peak allocations stay a few
    blocks, not the dataset."""
    rng = np.random.default_rng(3)
    n_time, grid = 384, (64, 128)
    ds = xr.Dataset(
        {"t2m": (("time", "y", "x"), (280 + rng.standard_normal((n_time, *grid))).astype("f4"))},
        coords={"time": hourly(n_time)},
    )
    ds["u"] = ds["t2m"] - 280
    ds["v"] = ds["t2m"] * 2
    write_store(ds, tmp_path / "big.zarr", time_chunk=4)
    dataset_bytes = 3 * ds["t2m"].nbytes
    block = 2**20
    source = XarraySource(tmp_path / "big.zarr", Selection(block_bytes=block))
    assert len(source) == 384 // 8 and dataset_bytes > 20 * block
    compute_source(source, threads=1)  # compile the kernel outside the measurement
    tracemalloc.start()
    try:
        compute_source(source, threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * block, f"peak {peak / 2**20:.1f} MB for 1 MB blocks"


def test_warnings_are_user_warnings(data):
    root, _, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _stats(root / "g.zarr")  # a normal run warns about nothing


def test_unsigned_bytes_and_float16(tmp_path):
    """netCDF-3 style unsigned bytes (``_Unsigned``) and float16: decoded exactly."""
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, (10, 3, 4)).astype(np.uint8)
    half = rng.standard_normal((10, 3, 4)).astype(np.float16)
    ds = xr.Dataset(
        {
            "cloud": (("time", "y", "x"), raw.view(np.int8), {"_Unsigned": "true"}),
            "half": (("time", "y", "x"), half),
        },
        coords={"time": hourly(10)},
    )
    write_store(ds, tmp_path / "u.zarr")
    stats = _stats(tmp_path / "u.zarr", splits=())
    expected = {"cloud": raw.astype(np.float64), "half": half.astype(np.float64)}
    for name, values in expected.items():
        assert_stream_matches(
            stats.streams[f"{name}__train"], reference(values[..., None], 0, 10, STEPS)
        )


def _int64_store(tmp_path, values, attrs=None):
    ds = xr.Dataset(
        {"n": (("time", "x"), values, attrs or {})}, coords={"time": hourly(values.shape[0])}
    )
    ds.to_zarr(tmp_path / "i.zarr", zarr_format=3)
    return tmp_path / "i.zarr"


def test_int64_beyond_2_53_is_refused_naming_the_value(tmp_path, capsys):
    rng = np.random.default_rng(3)
    values = 2**60 + rng.integers(0, 1000, (6, 5), dtype=np.int64)
    path = _int64_store(tmp_path, values)
    assert main(["compute", str(path), "--output", str(tmp_path / "s.nc"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"variable n: the int64 value {values[0, 0]} is beyond 2**53" in err
    assert str(path) in err and not (tmp_path / "s.nc").exists()


def test_int64_up_to_2_53_is_exact_and_a_big_fill_is_missing(tmp_path):
    rng = np.random.default_rng(4)
    values = 2**53 - rng.integers(0, 2**20, (6, 5), dtype=np.int64)
    fill = np.int64(-(2**62))
    values[2, 3] = fill
    path = _int64_store(tmp_path, values, {"_FillValue": fill})
    stats = compute(path, skipna=True)
    got = stats.streams["n__train"]
    kept = [int(v) for v in values.ravel() if v != fill]
    mean = Fraction(sum(kept), len(kept))
    assert got.count[0] == len(kept) and got.nan_count[0] == 1
    assert got.mean[0] == float(mean)  # the correctly rounded mean of the integers
    assert got.maximum[0] == float(max(kept))


@pytest.mark.parametrize(
    "interval, steps",
    [
        ("2021-01-01T00:00Z/2021-01-01T10:00+01:00", (0, 10)),  # UTC offsets: as UTC
        ("2021-01-01T05/", (5, 50)),  # open on the right: to the last step
        ("/2021-01-01T03", (0, 4)),  # open on the left
        ("2021-01-02T01:00:00+00:00/2021-01-02", (25, 48)),  # a whole day at the end
    ],
)
def test_split_bounds_with_utc_offsets_or_open_ends(data, interval, steps):
    root, _, truth = data
    stats = _stats(root / "g.zarr", splits=(f"s={interval}",), steps=(1,))
    assert_stream_matches(stats.streams["t2m__s"], reference(truth["t2m"], *steps, (1,)))


@pytest.mark.parametrize(("hours", "spans"), [(1, ["1h", "3h", "6h"]), (6, ["6h", "18h", "36h"])])
def test_differences_are_named_by_their_time_span(tmp_path, hours, spans):
    """A difference of k steps spans k time steps of the axis: the table, the
    summary and the statistics file say ``6h``, not the step count."""
    from wxstats.io.formats.netcdf import netcdf_writer
    from wxstats.io.formats.summary import read_summary, summary_writer
    from wxstats.tools.report import format_table

    ds, _ = gridded(n_time=12)
    times = np.datetime64("2021-01-01T00", "h") + np.arange(12) * np.timedelta64(hours, "h")
    write_store(ds.assign_coords(time=times)[["t2m"]], tmp_path / "t.zarr")
    stats = compute(tmp_path / "t.zarr", diff_steps=STEPS)
    table = format_table(stats)  # headers wrap: "diff 6h" above "std/std"
    assert [span for span in spans if f"diff {span} " in table] == spans
    summary = stats.to_summary()
    assert [summary["diff"][str(k)]["span"] for k in STEPS] == spans
    netcdf_writer(stats)(tmp_path / "s.nc")
    with xr.open_dataset(tmp_path / "s.nc") as written:
        assert list(written["diff_span"].values) == spans
        assert list(written["diff_step"].values) == list(STEPS)
    summary_writer(stats)(tmp_path / "s.json")
    for read in (read_summary(tmp_path / "s.json"), read_stats_file(tmp_path / "s.nc")):
        assert [read.state.diff_label(k) for k in STEPS] == [f"diff {s}" for s in spans]


def test_a_numeric_time_axis_names_differences_by_steps(tmp_path):
    ds, _ = gridded(n_time=6)
    ds = ds[["t2m"]].rename(time="month").assign_coords(month=np.arange(1, 7))
    write_store(ds, tmp_path / "m.zarr")
    stats = _stats(tmp_path / "m.zarr", splits=(), time_dim="month", steps=(1, 2))
    assert [stats.state.diff_label(k) for k in (1, 2)] == ["diff 1 step", "diff 2 steps"]
    assert "span" not in stats.to_summary()["diff"]["2"]
