"""Millions of chunks: a block's plan makes the keys of its own chunks only, never
the store's (issue 36: planning and memory do not grow with the chunk count)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from wxstats.storage.chunks import SlabRequest
from wxstats.storage.zarrchunks import ZarrChunkReader


def test_a_block_of_a_million_chunk_store_makes_only_its_own_keys(tmp_path):
    store = tmp_path / "million.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    root.create_array(
        "t", shape=(1_000_000, 4, 5), chunks=(1, 4, 5), dtype="float32", compressors=None
    )  # metadata only: no chunk object is written, none is listed
    reader = ZarrChunkReader(str(store), {}, threads=1)
    try:
        arr = reader._array("t")
        made = []
        key = arr.key
        object.__setattr__(arr, "key", lambda coords: made.append(coords) or key(coords))
        req = SlabRequest("t", 500_000, 500_010, (0, 1, 2), missing_ok=True)
        keys = reader.keys(req)
        assert keys == [f"t/{i}.0.0" for i in range(500_000, 500_010)]
        assert len(made) == 10  # the block's ten chunks, not the store's million
        # the block reads: its missing chunks as the fill value, said once
        with pytest.warns(UserWarning, match="t/500000.0.0 is missing"):
            slab = reader.read([req])["t"]
        assert slab.shape == (10, 4, 5) and np.all(slab == arr.fill_value)
    finally:
        reader.close()
