"""Chunks and metadata someone else wrote (issue 33, cases 4 and 5): a chunk
object is decoded within the size its array's metadata declares, whatever the
codec and whatever its header claims (storage/decompress.py); a real zlib bomb
in a zarr store and in a netCDF4 file ends a command in one line, within a
memory limit, never a MemoryError."""

from __future__ import annotations

import bz2
import lzma
import resource
import struct
import subprocess
import sys
import zlib

import h5py
import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from distributed_helpers import env

from wxstats.storage.decompress import TooLarge, bounded, inflate, zstd_content_size

MIB = 2**20
CODECS = {
    "zlib": numcodecs.Zlib(1),
    "gzip": numcodecs.GZip(1),
    "zstd": numcodecs.Zstd(1),
    "blosc": numcodecs.Blosc(),
    "lz4": numcodecs.LZ4(),
    "bz2": numcodecs.BZ2(1),
    "lzma": numcodecs.LZMA(),
    "shuffle (any other codec)": numcodecs.Shuffle(4),
}


def zlib_bomb(mib: int) -> bytes:
    """A zlib stream of ``mib`` MiB of zeros in ~1 KiB per MiB, made in
    milliseconds: one MiB compressed after a full flush (no reference to what came
    before), repeated, then the end of the stream with the right Adler-32."""
    c = zlib.compressobj(9)
    zeros = bytes(MIB)
    first = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()[:-4]
    return first + again * (mib - 1) + end + struct.pack(">I", ((mib * MIB) % 65521) << 16 | 1)


def zstd_rle_frame(blocks: int, content_size: int | None = None) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB (4 bytes each), with or
    without a declared content size (RFC 8878)."""
    if content_size is None:
        head = struct.pack("<IBB", 0xFD2FB528, 0, (17 - 10) << 3)  # a window, no size
    else:
        head = struct.pack("<IBQ", 0xFD2FB528, 3 << 6 | 1 << 5, content_size)
    body = b"".join(
        struct.pack("<I", (i == blocks - 1) | 1 << 1 | (128 * 1024) << 3)[:3] + b"\x07"
        for i in range(blocks)
    )
    return head + body


@pytest.mark.parametrize("name", list(CODECS))
def test_each_codec_decodes_exactly_its_declared_size(name):
    codec = CODECS[name]
    values = (np.arange(50_000, dtype="f4") % 97).astype("f4")
    stored = codec.encode(values)
    decoded = bounded(codec)(stored, values.nbytes)
    np.testing.assert_array_equal(np.frombuffer(decoded, "f4"), values)
    with pytest.raises(ValueError, match="decodes to|not its declared|small|past"):
        bounded(codec)(stored, values.nbytes + 4)  # metadata declaring more: no silent tail


@pytest.mark.parametrize("name", [n for n in CODECS if "other" not in n])
def test_a_bomb_of_each_codec_is_refused_at_its_declared_size(name):
    codec = CODECS[name]
    stored = codec.encode(np.zeros(4 * MIB, dtype="u1"))
    with pytest.raises(TooLarge, match="inflates past its declared 4096 bytes"):
        bounded(codec)(stored, 4096)


def test_zstd_frames_that_lie_or_say_nothing_are_bounded():
    decode = bounded(numcodecs.Zstd())
    assert zstd_content_size(zstd_rle_frame(2)) is None
    assert zstd_content_size(zstd_rle_frame(2, 2**40)) == 2**40
    assert zstd_content_size(numcodecs.Zstd().encode(np.zeros(1000, "u1"))) == 1000
    assert bytes(decode(zstd_rle_frame(2), 256 * 1024)) == b"\x07" * (256 * 1024)
    # no declared size: streamed into the declared buffer and no further (1.5 GiB)
    with pytest.raises(TooLarge, match="past its declared 4096 bytes"):
        decode(zstd_rle_frame(12288), 4096)
    # a header claiming a terabyte is refused before anything is allocated
    with pytest.raises(TooLarge, match=r"header says 1099511627776 bytes"):
        decode(zstd_rle_frame(2, 2**40), 4096)


def test_headers_of_blosc_and_lz4_are_believed_only_up_to_the_declared_size():
    blosc = bytearray(numcodecs.Blosc().encode(np.zeros(4096, "u1")))
    blosc[4:8] = struct.pack("<I", 2**31)  # the header's decoded size
    with pytest.raises(TooLarge, match=r"header says 2147483648"):
        bounded(numcodecs.Blosc())(bytes(blosc), 4096)
    lz4 = bytearray(numcodecs.LZ4().encode(np.zeros(4096, "u1")))
    lz4[:4] = struct.pack("<i", 2**31 - 1)
    with pytest.raises(TooLarge, match=r"header says 2147483647"):
        bounded(numcodecs.LZ4())(bytes(lz4), 4096)


def test_inflate_reads_every_gzip_member_ignores_zlib_trailers_and_refuses_truncation():
    import gzip

    two = gzip.compress(b"a" * 100) + gzip.compress(b"b" * 100)
    assert inflate(two, 200, "gzip") == b"a" * 100 + b"b" * 100
    with pytest.raises(TooLarge):
        inflate(two, 150, "gzip")
    assert inflate(zlib.compress(b"x" * 64) + b"\0" * 10, 64) == b"x" * 64  # HDF5 padding
    with pytest.raises(ValueError, match="truncated"):
        inflate(zlib.compress(bytes(range(256)) * 64)[:-100], 256 * 64)
    with pytest.raises(TooLarge, match="past its declared 4096"):
        inflate(zlib_bomb(64), 4096)
    assert bz2.decompress(bz2.compress(b"z")) == b"z"  # (the standard library's own)
    assert lzma.decompress(lzma.compress(b"z")) == b"z"


def _limited(gib: float):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (int(gib * 2**30), int(gib * 2**30)))

    return limit


def _run_limited(args: list[str], gib: float = 2.0) -> subprocess.CompletedProcess:
    """``wxstats ARGS`` with at most ``gib`` GiB of address space."""
    return subprocess.run(
        [sys.executable, "-m", "wxstats", *args],
        preexec_fn=_limited(gib),
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, result.stderr
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def _zarr_store(path, chunk: tuple[int, int, int]) -> None:
    shape = (4, 2 * chunk[1], chunk[2])
    values = np.random.default_rng(0).random(shape, dtype="f4")
    ds = xr.Dataset(
        {"t2m": (("time", "y", "x"), values)},
        coords={"time": pd.date_range("2020-01-01", periods=shape[0], freq="6h")},
    )
    enc = {"t2m": {"chunks": chunk, "compressors": numcodecs.Zlib(1)}}
    ds.to_zarr(path, zarr_format=2, encoding=enc, consolidated=True)


def test_a_zlib_bomb_in_a_zarr_store_is_one_line_within_memory(tmp_path):
    """A chunk of 1 MiB declared whose 1 MiB object inflates to 1 GiB (main: the
    whole GiB allocated, then "cannot reshape"; several threads: an OOM kill), and
    a chunk of 4 KiB whose object is larger than any codec would store it in."""
    store = tmp_path / "bomb.zarr"
    _zarr_store(store, (1, 512, 512))
    (store / "t2m" / "0.1.0").write_bytes(zlib_bomb(1024))
    line = _one_line(_run_limited(["compute", str(store), "--output", str(tmp_path / "o.nc")]))
    assert line.endswith(
        "bomb.zarr: variable t2m: chunk object t2m/0.1.0 inflates past its declared 1048576 bytes"
    ), line
    small = tmp_path / "small.zarr"
    _zarr_store(small, (1, 32, 32))
    (small / "t2m" / "0.0.0").write_bytes(zlib_bomb(1536))
    line = _one_line(_run_limited(["compute", str(small), "--output", str(tmp_path / "s.nc")]))
    assert "chunk object t2m/0.0.0 is stored in" in line and "declared 4096 bytes" in line, line
    assert not (tmp_path / "o.nc").exists() and not (tmp_path / "s.nc").exists()


def test_a_zlib_bomb_in_a_netcdf4_file_is_one_line_within_memory(tmp_path):
    """The same bomb in a deflated netCDF4 variable (the HDF5 chunk reader): its
    stream fits the chunk's stored bytes, padded, and inflates to 1 GiB."""
    path = tmp_path / "bomb.nc"
    values = np.random.default_rng(1).random((4, 512, 512))  # f8: 2 MiB chunks, ~1.9 MiB stored
    ds = xr.Dataset(
        {"t2m": (("time", "y", "x"), values)},
        coords={"time": pd.date_range("2020-01-01", periods=4, freq="6h")},
    )
    enc = {"t2m": {"zlib": True, "complevel": 1, "chunksizes": (1, 512, 512)}}
    ds.to_netcdf(path, engine="netcdf4", encoding=enc)
    bomb = zlib_bomb(1024)
    with h5py.File(path, "r") as f:
        info = f["t2m"].id.get_chunk_info_by_coord((1, 0, 0))
    assert len(bomb) <= info.size
    with open(path, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(bomb + b"\0" * (info.size - len(bomb)))
    line = _one_line(_run_limited(["compute", str(path), "--output", str(tmp_path / "o.nc")]))
    assert line.endswith(
        "bomb.nc: variable t2m: chunk object t2m/1.0.0 inflates past its declared 2097152 bytes"
    ), line


def _edit_zarray(store, name: str, **changes) -> None:
    """Change ``name``'s zarr 2 metadata, in its ``.zarray`` and the consolidated copy."""
    import json

    path = store / name / ".zarray"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))
    consolidated = store / ".zmetadata"
    if consolidated.exists():
        whole = json.loads(consolidated.read_text())
        whole["metadata"][f"{name}/.zarray"].update(changes)
        consolidated.write_text(json.dumps(whole))


def _level_store(path) -> None:
    values = np.random.default_rng(2).random((24, 6, 10), dtype="f4")
    ds = xr.Dataset(
        {"t2m": (("time", "level", "x"), values)},
        coords={"time": pd.date_range("2020-01-01", periods=24, freq="h"), "level": np.arange(6)},
    )
    ds.to_zarr(path, zarr_format=2, encoding={"t2m": {"chunks": (24, 6, 10)}}, consolidated=True)


def test_a_shape_of_a_trillion_is_refused_in_one_line_before_any_chunk_key(tmp_path):
    """Issue 33, case 5: main listed ~1.4e11 chunk keys, then an unexpected
    MemoryError and its 32-line traceback."""
    store = tmp_path / "huge.zarr"
    _level_store(store)
    _edit_zarray(store, "t2m", shape=[24, 6, 10**12])
    line = _one_line(_run_limited(["compute", str(store), "--output", str(tmp_path / "o.nc")]))
    assert "huge.zarr: variable t2m: declared shape (24, 6, 1000000000000) of float32" in line
    assert "more than the 2 GiB of memory this process has" in line, line


def test_chunks_or_a_coordinate_larger_than_memory_are_refused_in_one_line(tmp_path):
    store = tmp_path / "chunk.zarr"
    _level_store(store)
    _edit_zarray(store, "t2m", chunks=[24, 6, 10**11])  # main: "cannot reshape"
    line = _one_line(_run_limited(["compute", str(store), "--output", str(tmp_path / "o.nc")]))
    assert "variable t2m: declared shape (24, 6, 10) of float32: chunks (24, 6, 100000000000)" in (
        line
    )
    store = tmp_path / "coord.zarr"
    _level_store(store)
    _edit_zarray(store, "level", shape=[10**12])  # loaded whole by xarray as it opens the store
    _edit_zarray(store, "t2m", shape=[24, 10**12, 10])
    line = _one_line(_run_limited(["compute", str(store), "--output", str(tmp_path / "o.nc")]))
    assert "coord.zarr: variable level: declared shape (1000000000000,) of int64" in line, line


def test_an_anemoi_dataset_of_a_trillion_cells_is_refused_in_one_line(tmp_path):
    from test_anemoi import make_dataset

    store = tmp_path / "an.zarr"
    make_dataset(store)
    _edit_zarray(store, "data", shape=[23, 3, 2, 10**12])
    line = _one_line(_run_limited(["compute", str(store), "--output", str(tmp_path / "o.nc")]))
    assert "an.zarr: variable data: declared shape (23, 3, 2, 1000000000000) of float32" in line


def test_planning_memory_does_not_grow_with_the_number_of_chunks():
    """Chunk boundaries along time are ranges, never a set of every boundary: two
    million chunks plan in the memory of a few (main: a set of 2e6 ints, ~100 MiB)."""
    import tracemalloc

    from wxstats.sources.xarray.blocks import plan_blocks
    from wxstats.sources.xarray.timeaxis import Split
    from wxstats.storage.chunks import CHUNKS_PER_BLOCK

    n = 2_000_000
    tracemalloc.start()
    blocks = plan_blocks([Split("train", 0, n, "all")], [range(0, n, 1)], 16, 2**40, 1, 1.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(blocks) == -(-n // CHUNKS_PER_BLOCK)  # cut by chunk objects, not bytes
    assert peak < 8 * 2**20 + len(blocks) * 512, peak


def test_a_blocks_plan_is_cut_at_its_chunk_count_and_taken_by_its_read(tmp_path, monkeypatch):
    """Blocks of tiny chunks hold at most CHUNKS_PER_BLOCK chunk objects, and the
    reader keeps no plan of a block once read (main kept 256 blocks' plans)."""
    import wxstats.sources.xarray.blocks as blocks

    monkeypatch.setattr(blocks, "CHUNKS_PER_BLOCK", 40)
    values = np.random.default_rng(3).random((30, 20), dtype="f4")
    ds = xr.Dataset(
        {"t2m": (("time", "x"), values)},
        coords={"time": pd.date_range("2020-01-01", periods=30, freq="6h")},
    )
    store = tmp_path / "tiny.zarr"
    ds.to_zarr(store, zarr_format=2, encoding={"t2m": {"chunks": (1, 2)}}, consolidated=True)
    from wxstats.runtime.run import compute, compute_source
    from wxstats.sources.kinds import Selection
    from wxstats.sources.xarray import XarraySource

    source = XarraySource(str(store), Selection(io_threads=2))
    assert [b.stop - b.start for b in source.blocks] == [4] * 7 + [2]  # 10 chunks a step
    got = compute_source(source, threads=2).streams["t2m__train"]
    assert source._chunks._plans == {}  # every plan made for a read-ahead was taken
    want = values.astype(np.float64)
    np.testing.assert_allclose(got.mean, [want.mean()], rtol=1e-12)
    whole = compute(str(store)).streams["t2m__train"]
    np.testing.assert_array_equal(got.std, whole.std)
