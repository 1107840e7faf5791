"""Declared sizes checked against the memory there is, before anything is allocated.

An array's metadata (a zarr ``.zarray``/``zarr.json``, an HDF5 dataset's
header) is someone else's file: ``shape: [24, 6, 10**12]`` costs nothing to
write, and read as an instruction it lists ~1.4e11 chunk keys or allocates a
slab of 5.8e14 bytes. Before a reader plans or allocates anything from a
declared size it asks here: one decoded chunk per reading thread, a block's
slab (at least one chunk along time, every other index), a dimension
coordinate that xarray loads whole when it opens a store, and the chunk objects
one block reads, each within :func:`memory_bytes`. Anything larger is refused
in one line naming the store, the variable and the declared shape: no real
dataset needs one block larger than the machine.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
from typing import Any

from wxstats.core.errors import InputError

MAX_CHUNKS_PER_BLOCK = 1_000_000
"""Chunk objects one block may read: its plan holds ~750 bytes per chunk (a
chunk grid of a million per time step is no real dataset's)."""


def memory_bytes() -> int:
    """The memory this process may use: the machine's, or less where an
    address-space limit (``ulimit -v``) or the cgroup (a Slurm job, a container)
    allows less."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            text = f.read().strip()
        if text.isdigit():
            limits.append(int(text))
    except OSError:
        pass
    return min(limits) if limits else 2**63


def _size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def declared(where: str, shape: Any, dtype: Any) -> str:
    """``{where}: declared shape (24, 6, 1000000000000) of float32`` (the one-line
    errors' start)."""
    return f"{where}: declared shape {tuple(int(n) for n in shape)} of {dtype}"


def check_chunks(
    where: str, shape: Any, chunks: Any, itemsize: int, dtype: Any, threads: int
) -> None:
    """Refuse an array whose decoded chunks, one per reading thread, exceed the
    memory (``where``: ``STORE: variable NAME``)."""
    if any(int(c) < 1 for c in chunks) or any(int(n) < 0 for n in shape):
        raise InputError(f"{declared(where, shape, dtype)}: chunks {tuple(chunks)} are not sizes")
    each = math.prod(int(c) for c in chunks) * itemsize
    if each * max(1, threads) > memory_bytes():
        raise InputError(
            f"{declared(where, shape, dtype)}: chunks {tuple(int(c) for c in chunks)} are "
            f"{_size(each)} each decoded, {threads} decoded at once: more than the "
            f"{_size(memory_bytes())} of memory this process has"
        )


def check_slab(
    where: str, shape: Any, chunks: Any, itemsize: int, dtype: Any, axis: int, steps: int
) -> None:
    """Refuse a slab of ``steps`` indices along ``axis`` (a block: every other
    index) that exceeds the memory, or whose chunk objects exceed
    :data:`MAX_CHUNKS_PER_BLOCK`: checked before its chunk keys are listed."""
    others = math.prod(int(n) for d, n in enumerate(shape) if d != axis)
    nbytes = steps * others * itemsize
    if nbytes > memory_bytes():
        raise InputError(
            f"{declared(where, shape, dtype)}: {steps} step(s) along axis {axis} are "
            f"{_size(nbytes)}, more than the {_size(memory_bytes())} of memory this "
            "process has (is the metadata right?)"
        )
    if chunks is None:
        return
    sizes = [steps if d == axis else int(n) for d, n in enumerate(shape)]
    count = math.prod(-(-n // int(c)) for n, c in zip(sizes, chunks, strict=True))
    if count > MAX_CHUNKS_PER_BLOCK:
        raise InputError(
            f"{declared(where, shape, dtype)}: chunks {tuple(int(c) for c in chunks)}: "
            f"{steps} step(s) along axis {axis} are {count} chunk objects, more than "
            f"{MAX_CHUNKS_PER_BLOCK} a block may read"
        )


def check_zarr_metadata(path: str) -> None:
    """Refuse a local zarr store whose metadata declares a dimension coordinate
    that xarray, which loads it whole when it opens the store, could not hold:
    larger than half the memory, or in chunks larger than it. Read from the
    metadata alone (zarr parses it; nothing is allocated from it); the data
    variables are checked when a block reads them (:class:`.chunks.ChunkReader`)."""
    import zarr

    try:
        group = zarr.open_group(path, mode="r")
        arrays = list(group.arrays())
    except Exception:  # noqa: BLE001 - not openable here: xarray says why in one line
        return
    limit = memory_bytes()
    for name, arr in arrays:
        dims = getattr(arr.metadata, "dimension_names", None) or arr.attrs.get("_ARRAY_DIMENSIONS")
        if len(arr.shape) != 1 or list(dims or []) != [name.rsplit("/", 1)[-1]]:
            continue  # read when a block needs it, and checked then (ChunkReader)
        itemsize = getattr(arr.dtype, "itemsize", None) or 8
        where = f"{path}: variable {name}"
        check_chunks(where, arr.shape, arr.chunks, itemsize, arr.dtype, 1)
        nbytes = int(arr.shape[0]) * itemsize
        if nbytes > limit // 2:
            raise InputError(
                f"{declared(where, arr.shape, arr.dtype)}: a coordinate of {_size(nbytes)}, "
                f"loaded whole when the store is opened, more than half the {_size(limit)} "
                "of memory this process has"
            )
