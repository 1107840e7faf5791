"""The benchmarks run from a clone and print every row they promise (one of
them imported a module the redesign had removed, and nobody noticed): each
runs here on a tiny dataset, and its figures are checked to be numbers that
agree with each other, not their speed (timings belong to the benchmarks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_helpers import env

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
pytestmark = pytest.mark.slow


def _run(script: str, *args: str, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        env=env(),
        cwd=cwd,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _seconds(text: str, row: str) -> float:
    match = re.search(re.escape(row) + r"\s+([0-9.]+) s", text)
    assert match, f"no row {row!r} in:\n{text}"
    return float(match.group(1))


def test_bench_zarr_prints_the_limit_wxstats_and_start_up(tmp_path):
    text = _run(
        "bench_zarr.py",
        *("--gb", "0.03", "--dir", str(tmp_path), "--repeat", "1"),
        *("--no-dask", "--no-s3", "--no-ranks"),
        cwd=tmp_path,
    )
    for mode in ("warm", "cold"):
        block = text.split(f"zarr, {mode} page cache:")[1]
        limit = _seconds(block, "limit: numcodecs, threads")
        for row in (
            "limit: zarr-python slabs",
            "wxstats (in-process)",
            "wxstats compute (command)",
        ):
            assert _seconds(block, row) > 0
        assert limit > 0
    for title in ("netCDF (one file, warm):", "netCDF, zlib + shuffle (one file, warm):"):
        nc = text.split(title)[1]
        assert _seconds(nc, "limit: netCDF4-python slabs") > 0 and _seconds(nc, "wxstats") > 0
    ours, base, ratio = map(float, re.search(
        r"start-up: wxstats compute tiny.zarr ([0-9.]+) s; import numpy, xarray ([0-9.]+) s; "
        r"ratio ([0-9.]+)", text).groups()[:3])  # fmt: skip
    # the row is consistent (no comparison of two timings: a loaded machine reorders them)
    assert ours > 0 and base > 0 and ratio == pytest.approx(ours / base, rel=0.05, abs=0.01)


def test_bench_zarr_s3_rows_rate_both_clients_against_the_faster_limit(tmp_path):
    """The S3 rows: the batched limits of s3fs and obstore, and wxstats with each
    client; the "x limit" columns are the faster limit's time over each row's."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    pytest.importorskip("obstore")
    args = ("--gb", "0.01", "--dir", str(tmp_path), "--repeat", "2", "--s3-only")
    text = _run("bench_zarr.py", *args, cwd=tmp_path).split("interleaved rounds:")[1]
    number = r"\s+([0-9.]+)"
    rows = {}
    for name in ("limit: batched cat (s3fs)", "limit: batched get (obstore)",
                 "wxstats (obstore)", "wxstats (fsspec cat)"):  # fmt: skip
        match = re.search(re.escape(name) + number * 5, text)
        assert match, text
        rows[name] = [float(x) for x in match.groups()]
    best = min(rows["limit: batched cat (s3fs)"][0], rows["limit: batched get (obstore)"][0])
    assert 1.00 in (rows[name][3] for name in rows if name.startswith("limit")), text
    for low, median, _, ratio, _ in rows.values():  # times printed to 0.01 s, ratios too
        assert 0 < low <= median, text
        assert (best - 0.005) / (low + 0.005) - 0.005 <= ratio, text
        assert ratio <= (best + 0.005) / max(low - 0.005, 1e-3) + 0.005, text


def test_benchmarks_run_prints_throughput_cold_and_memory(tmp_path):
    text = _run(
        "run.py",
        *("--size-gb", "0.02", "--sizes", "0.02", "--peer-gb", "0.01", "--repeat", "1"),
        *("--grid", "30", "40", "--dir", str(tmp_path)),
        cwd=tmp_path,
    )
    raw = _seconds(text, "raw read, np.load(mmap)+float32 sum (the limit)")
    whole = _seconds(text, "wxstats compute --threads 1 (whole command)")
    start = _seconds(text, "wxstats startup+write (same command on a 4 MB dataset)")
    assert raw >= 0 and whole > 0 and start > 0
    assert _seconds(text, "raw read, np.load(mmap)+float32 sum (the cold limit)") >= 0
    assert "steady state, all threads / raw read" in text
    assert re.search(r"--threads 1\s+[0-9]+ MiB", text), text


def test_bench_kernel_prints_each_difference_setting(tmp_path):
    text = _run(
        "bench_kernel.py", *("--steps", "4", "--grid", "20", "30", "--repeat", "1"), cwd=tmp_path
    )
    assert re.search(r"float32 numpy sum [0-9.]+ ms", text), text
    for lags in ("()", "(1,)", "(1, 2)"):
        row = rf"difference steps {re.escape(lags)}: [0-9.]+ ms .*x the float32 sum"
        assert re.search(row, text), text


def test_ab_command_alternates_two_trees(tmp_path):
    import numpy as np
    import xarray as xr
    from gridded_data import hourly

    store = tmp_path / "tiny.zarr"
    data = np.random.default_rng(0).random((12, 4, 5)).astype(np.float32)
    xr.Dataset({"t": (("time", "y", "x"), data)}, coords={"time": hourly(12)}).to_zarr(store)
    root = str(BENCHMARKS.parent)
    text = _run(
        "ab_command.py",
        *(root, root + "/.", "--rounds", "1", "--"),  # the same tree under two names
        *("compute", str(store), "--quiet", "--output", str(tmp_path / "o.nc"), "--overwrite"),
        cwd=tmp_path,
    )
    rows = re.findall(r"wall best ([0-9.]+) s median ([0-9.]+) s  CPU median ([0-9.]+) s", text)
    assert len(rows) == 2 and all(float(w) > 0 for w, _, _ in rows), text
    assert (tmp_path / "o.nc").exists()


def test_bench_startup_prints_each_command_against_the_baseline(tmp_path):
    import shutil

    work = tmp_path / "work"
    work.mkdir()
    # two trees (this one and a copy): every row for each, in the same rounds
    copy = shutil.copytree(BENCHMARKS.parent / "src", tmp_path / "copy" / "src")
    trees = ("--src", str(BENCHMARKS.parent / "src"), "--src", str(copy))
    text = _run("bench_startup.py", "--repeat", "1", *trees, "--dir", str(work), cwd=tmp_path)
    base = re.search(r"baseline: python -c 'import numpy, xarray'\s+([0-9.]+)", text)
    assert base and float(base.group(1)) > 0, text
    rows = ["wxstats --help", "compute tiny zarr", "compute tiny netCDF"]
    rows += ["compute zarr, 5000 chunks", "compute tiny MEPS (.pt files)"]
    for row in rows:
        found = re.findall(re.escape(row) + r" \[[^]]+\]\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+x", text)
        assert len(found) == 2 and all(float(t) > 0 for t in found), text
    assert len(re.findall(r"compiled kernel load, stored .* [0-9.]+ s best", text)) == 2, text
    assert list(work.iterdir()) == []  # the work folder is removed


def test_bench_xarray_prints_each_row_with_errors_against_float64(tmp_path):
    missing = tmp_path / "not" / "yet"  # --dir is created when it does not exist
    text = _run(
        "bench_xarray.py",
        *("--gb", "0.002", "--grid", "10", "12", "--chunk", "4", "--dir", str(missing)),
        cwd=tmp_path,
    )
    for row in ("wxstats (exact, + diff stats)", "xarray+dask float32"):
        match = re.search(re.escape(row) + r"\s+[0-9.]+\s+[0-9.]+\s+t2m: ([0-9.e+-]+) / ", text)
        assert match, text
    # wxstats' exact mean agrees with the float64 dask reference far below float32's precision
    ours = re.search(r"wxstats \(exact, \+ diff stats\)\s+\S+\s+\S+\s+t2m: (\S+) / (\S+)", text)
    assert float(ours.group(1)) < 1e-12 and float(ours.group(2)) < 1e-12, text
    assert missing.is_dir() and not list(missing.iterdir())  # the store was removed


def test_bench_grow_and_bench_parallel_print_their_rows(tmp_path):
    text = _run("bench_grow.py", *("--gb", "0.01", "--repeat", "1", "--work", str(tmp_path / "g")),
                cwd=tmp_path)  # fmt: skip
    assert _seconds(text, "full run") > 0 and _seconds(text, "update (+10 %)") > 0
    assert "update byte-identical to the full run: True" in text, text
    text = _run("bench_parallel.py", str(tmp_path / "p"), *("--times", "2", "--grid", "20", "30"),
                *("--nproc", "1", "2", "--repeat", "1"), cwd=tmp_path)  # fmt: skip
    rows = re.findall(r"^\s+([12])\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", text, re.M)
    assert [r[0] for r in rows] == ["1", "2"] and all(float(r[1]) > 0 for r in rows), text


def test_bench_threads_prints_a_row_per_format_and_thread_count(tmp_path):
    import json

    out = tmp_path / "rows.json"
    text = _run("bench_threads.py", *("--meps-gb", "0.003", "--zarr-gb", "0.003"),
                *("--grid", "20", "30", "--threads", "1", "2", "--repeat", "1"),
                *("--dir", str(tmp_path / "data"), "--json", str(out)), cwd=tmp_path)  # fmt: skip
    number = r"\s+([0-9.]+)"
    rows = re.findall(r"^\s+([12]) \|" + 2 * number + r" \|" + 2 * number + r" \|"
                      + 2 * number + r" \|\s+(\S+)$", text, re.M)  # fmt: skip
    assert [r[0] for r in rows] == ["1", "2", "1", "2"], text  # MEPS, then zarr
    assert all(float(x) > 0 for r in rows for x in r[1:7]), text
    assert [r[7] for r in rows] == ["-", rows[1][7], "-", rows[3][7]] and float(rows[3][7]) > 0
    saved = json.loads(out.read_text())["rows"]
    assert [(r["format"].split()[0], r["threads"]) for r in saved] == [
        ("MEPS", 1), ("MEPS", 2), ("ERA5-like", 1), ("ERA5-like", 2)
    ]  # fmt: skip
    for printed, row in zip(rows, saved, strict=True):
        assert float(printed[1]) == pytest.approx(row["limit_s"], abs=6e-4)
        assert float(printed[3]) == pytest.approx(row["in_process_s"], abs=6e-4)
        assert float(printed[5]) == pytest.approx(row["command_s"], abs=6e-4)
        assert (printed[7] == "-") == (row["nproc_s"] is None)
    assert not list((tmp_path / "data").iterdir())  # what it wrote is removed without --keep


def test_bench_cold_prints_limit_cold_and_warm_for_each_format(tmp_path):
    text = _run("bench_cold.py", *("--gb", "0.01", "--grid", "20", "30", "--repeat", "2"),
                "--dir", str(tmp_path / "data"), cwd=tmp_path)  # fmt: skip
    for title in ("MEPS (npy):", "zarr (zstd):", "netCDF4 (uncompressed):"):
        block = text.split(title)[1].split("overlap")[0]
        for row in ("cold limit (pread + decompress)", "wxstats cold (in-process)",
                    "wxstats warm (the compute bound)"):  # fmt: skip
            match = re.search(re.escape(row) + r"\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) s", block)
            assert match, text
            low, mid, high = map(float, match.groups())
            assert 0 <= low <= mid <= high, text
        assert re.search(r"wxstats cold / cold limit: [0-9.]+ \(medians\)", block), text


def test_cold_limit_reads_every_byte_and_decodes_every_chunk(tmp_path, monkeypatch):
    """The limit reads each byte once: its pieces tile every file of the dataset
    (what ``os.stat`` says), and a zarr store's chunks decode to the array's
    values (zarr's own reading)."""
    import numpy as np
    import zarr

    monkeypatch.setattr("sys.path", [str(BENCHMARKS), *sys.path])
    import bench_cold

    store = tmp_path / "s.zarr"
    values = np.arange(6 * 5 * 4, dtype=np.float32).reshape(6, 5, 4)
    arr = zarr.create_array(store, name="t", shape=values.shape, chunks=(1, 5, 4), dtype="f4")
    arr[:] = values
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * ((2 * bench_cold.PIECE + 1000) // 256))
    for root in (store, big):
        pieces = bench_cold.pieces_of(root)
        for path in bench_cold.all_files(root):
            spans = sorted((off, n) for p, off, n, _ in pieces if p == path)
            assert [o for o, _ in spans] == [
                sum(n for _, n in spans[:i]) for i in range(len(spans))
            ]
            assert sum(n for _, n in spans) == path.stat().st_size
    decoded = [
        np.frombuffer(codec.decode(p.read_bytes()), "f4")
        for p, _, _, codec in bench_cold.pieces_of(store)
        if codec is not None
    ]
    assert len(decoded) == 6
    assert sorted(float(d.sum()) for d in decoded) == sorted(values.sum(axis=(1, 2)).tolist())
    assert bench_cold.cold_limit(store, 2) > 0


def test_bench_large_prints_steady_throughput_and_peak_memory(tmp_path):
    text = _run("bench_large.py", *("--sizes", "0.01", "0.02", "--base-times", "1"),
                *("--grid", "20", "30", "--repeat", "1", "--dir", str(tmp_path)),
                cwd=tmp_path)  # fmt: skip
    rows = re.findall(
        r"^\s+([0-9.]+)\s+(\d+) \|\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) s \|\s+(\S+)\s+(\S+) \|"
        r"\s+(\d+)\s+(\S+)$",
        text,
        re.M,
    )
    assert len(rows) == 3, text  # the tiny datastore, then each size
    assert [r[5] for r in rows][0] == "-" and rows[1][8] == "1.00x", text
    assert int(rows[2][1]) > int(rows[1][1]) and float(rows[2][0]) > float(rows[1][0]), text
    assert all(int(r[7]) > 0 for r in rows), text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("wxstats-large-")]


def test_bench_blocks_prints_each_block_size_with_the_same_statistics(tmp_path):
    text = _run("bench_blocks.py", *("--mb", "0.5", "--grid", "6", "8", "--repeat", "1"),
                *("--block-mb", "0.01", "1", "--dir", str(tmp_path)), cwd=tmp_path)  # fmt: skip
    rows = re.findall(r"^\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)x\s+(\w+)$", text, re.M)
    assert [r[0] for r in rows] == ["0.01", "1"], text
    assert min(float(r[3]) for r in rows) == 1.0 and len({r[4] for r in rows}) == 1, text
    assert "the same statistics for every block size: yes" in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("wxstats-blocks-")]


def test_bench_dask_prints_each_row_with_errors_against_the_reference(tmp_path):
    pytest.importorskip("distributed")
    text = _run(
        "bench_dask.py",
        *("--gb", "0.001", "--grid", "10", "12", "--chunk", "100", "--dir", str(tmp_path / "d")),
        cwd=tmp_path,
    )
    rows = {}
    for row in ("wxstats on the cluster (exact)", "xarray+dask float32", "xarray+dask float64"):
        match = re.search(re.escape(row) + r"\s+[0-9.]+\s+[0-9.]+\s+t2m: (\S+) / (\S+)", text)
        assert match, text
        rows[row] = (float(match.group(1)), float(match.group(2)))
    assert "reference: numpy float64 2-pass" in text
    # the exact sums round to the two-pass float64 reference, to its own precision
    assert max(rows["wxstats on the cluster (exact)"]) < 1e-12, text
    assert not list((tmp_path / "d").iterdir())  # the store was removed


def test_bench_latency_prints_the_limit_wxstats_and_the_curve(tmp_path):
    """The delayed-S3 rows: wxstats and the fetch+decode limit at each delay, their
    ratios consistent with the seconds printed, and a curve row per requests in flight."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    args = ("--steps", "2", "--delays", "5", "--in-flight", "4", "16", "--repeat", "1")
    text = _run("bench_latency.py", *args, "--no-peers", "--dir", str(tmp_path), cwd=tmp_path)

    def best(row: str) -> float:  # the "min s" column
        match = re.search(re.escape(row) + r"\s+([0-9.]+)\s+[0-9.]+", text)
        assert match, f"no row {row!r} in:\n{text}"
        return float(match.group(1))

    ours, limit = best("wxstats (in flight: chosen)"), best("limit (same in flight)")
    ratio = float(re.search(r"wxstats / limit at 5 ms: ([0-9.]+) whole run", text).group(1))
    assert ours > 0 and limit > 0 and ratio == pytest.approx(limit / ours, rel=0.1, abs=0.02)
    rows = re.findall(r"^\s+5\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", text, re.M)
    assert [int(r[0]) for r in rows] == [4, 16], text
    for _, ref, wx, r in rows:
        assert float(r) == pytest.approx(float(ref) / float(wx), rel=0.1, abs=0.02), text


def test_bench_scale_prints_per_item_overhead_and_memory(tmp_path):
    args = ("--chunks", "20", "60", "--samples", "4", "8", "--plan-samples", "4", "8",
            "--list-samples", "4", "8")  # fmt: skip
    text = _run("bench_scale.py", *args, "--dir", str(tmp_path), cwd=tmp_path)
    for title, smallest, larger in (
        ("zarr store of N chunks", "20", "60"),
        ("MEPS datastore of N samples", "4", "8"),
        ("the same, planned only", "4", "8"),
        ("the same, listed only", "4", "8"),
    ):
        block = text.split(title)[1]
        assert re.search(rf"\n\s+{smallest}\s+[0-9.]+\s+-\s+[0-9]+\s+1\.00x", block), block
        row = re.search(rf"\n\s+{larger}\s+([0-9.]+)\s+(-?[0-9.]+)\s+([0-9]+)\s+", block)
        assert row and float(row.group(1)) > 0 and int(row.group(3)) > 0, block


def test_bench_cpu_breaks_the_run_down_into_stages_that_add_up(tmp_path):
    text = _run("bench_cpu.py", "--gb", "0.01", "--repeat", "1", "--dir", str(tmp_path),
                cwd=tmp_path)  # fmt: skip
    total = float(re.search(r"the whole compute\s+([0-9.]+) CPU-s", text).group(1))
    stages = [float(re.search(rf"{s}\s+(-?[0-9.]+) CPU-s", text).group(1))
              for s in ("decode", "copy", "kernel", "exact sums", "other")]  # fmt: skip
    assert total > 0 and stages[0] > 0 and abs(sum(stages) - total) <= 0.011 * len(stages)
    rows = ("floor: float64 sums alone", "floor, in cache", "memory pass: float32 sum")
    floors = [float(re.search(rf"{re.escape(r)}\s+([0-9.]+) CPU-s", text).group(1)) for r in rows]
    assert all(f >= 0 for f in floors), text
    with_read = float(re.search(r"numcodecs read \+ decode\s+([0-9.]+) CPU-s", text).group(1))
    for name, first in (("decode inside wxstats", stages[0]), (r"read \+ decode", with_read)):
        line = re.search(rf"{name} \+ floor = ([0-9.]+) \+ ([0-9.]+) = ([0-9.]+) CPU-s", text)
        decode, added, least = map(float, line.groups())
        assert decode == first and added == floors[0] and abs(decode + added - least) <= 0.011


def test_bench_cpu_floor_sums_are_the_four_sums_of_each_feature(monkeypatch):
    """The floor sums what the kernel must at the least: per feature, the values,
    their squares, the step-1 differences and their squares (numpy float64 here)."""
    import numpy as np

    monkeypatch.setattr("sys.path", [str(BENCHMARKS), *sys.path])
    import bench_cpu

    x = np.random.default_rng(1).standard_normal((7, 3, 101), dtype=np.float32)  # a tail too
    out = np.zeros((3, 4))
    bench_cpu.floor_sums(x, out)
    v = x.astype(np.float64)
    d = np.diff(v, axis=0)
    want = np.stack([v.sum((0, 2)), (v * v).sum((0, 2)), d.sum((0, 2)), (d * d).sum((0, 2))], 1)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-9)
    assert bench_cpu.read_once(x) == pytest.approx(float(v.sum()), abs=1e-3)
