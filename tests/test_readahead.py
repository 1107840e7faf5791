"""Read-ahead asks the kernel for every byte the next block reads: Linux honours
one ``POSIX_FADV_WILLNEED`` only up to its read-ahead size (8 MiB of a 285 MiB
sample), so the advice goes in pieces that tile the range, and a memory-mapped
netCDF4 variable's coming steps are named by their place in the file."""

from __future__ import annotations

import os

import numpy as np
import pytest

from wxstats.storage import readahead
from wxstats.storage.chunks import SlabRequest
from wxstats.storage.hdf5chunks import Hdf5ChunkReader

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")


def _record(monkeypatch) -> list[tuple[int, int, int]]:
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(
        os, "posix_fadvise", lambda fd, off, n, advice: calls.append((off, n, advice))
    )
    return calls


@pytest.mark.parametrize("offset,length", [(0, 1), (100, 3 * readahead.WILLNEED_PIECE + 7)])
def test_will_need_tiles_the_range_in_pieces_the_kernel_honours(monkeypatch, offset, length):
    calls = _record(monkeypatch)
    readahead.will_need(3, offset, length)
    assert all(advice == os.POSIX_FADV_WILLNEED for *_, advice in calls)
    assert all(0 < n <= readahead.WILLNEED_PIECE for _, n, _ in calls)
    starts = [off for off, _, _ in calls]
    assert starts == [offset + sum(n for _, n, _ in calls[:i]) for i in range(len(calls))]
    assert sum(n for _, n, _ in calls) == length


def test_a_contiguous_netcdf_variable_is_read_ahead_by_its_steps_bytes(tmp_path):
    """The spans announced for steps 3..7 are exactly those steps' bytes in the
    file (read back with ``pread`` and compared with xarray's decoding)."""
    import xarray as xr

    values = np.random.default_rng(0).random((10, 4, 5)).astype(np.float32)
    path = tmp_path / "c.nc"
    xr.Dataset({"t": (("time", "y", "x"), values)}).to_netcdf(path, engine="netcdf4")
    reader = Hdf5ChunkReader(str(path), threads=1)
    try:
        ((offset, length),) = reader._plain_spans([SlabRequest("t", 3, 7, (0, 1, 2), False)])
        assert reader._plain_spans([SlabRequest("t", 3, 7, (1, 0, 2), False)]) == []
    finally:
        reader.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    with xr.open_dataset(path, engine="netcdf4") as ds:
        expected = ds["t"].values[3:7]
    np.testing.assert_array_equal(
        np.frombuffer(raw, dtype=expected.dtype).reshape(4, 4, 5), expected
    )
