"""Write a float32 vector as a ``.pt`` file that ``torch.load`` reads, without torch.

Importing torch takes seconds (3.5 s here), longer than computing the
statistics of gigabytes of data, only to save five small vectors. A tensor
file from ``torch.save`` is a zip archive (stored, not compressed) holding a
protocol-2 pickle that rebuilds the tensor from storage ``archive/data/0``
(``torch._utils._rebuild_tensor_v2``), plus a few one-line records. This module
writes exactly that for one contiguous 1-D float32 tensor; the tests load the
result with ``torch.load(weights_only=True)`` (and ``mmap=True``) and compare
it with what ``torch.save`` writes.
"""

from __future__ import annotations

import struct
import zipfile
from typing import BinaryIO

import numpy as np

ALIGNMENT = 64
"""torch aligns tensor data in the archive (``.storage_alignment``) for mmap."""

_PADDING_ID = 0x4246  # the "FB" extra-field id torch uses for its padding


def _int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + struct.pack("<B", value)  # BININT1
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)  # BININT2
    return b"J" + struct.pack("<i", value)  # BININT


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def tensor_pickle(numel: int) -> bytes:
    """The pickle of a contiguous 1-D float32 CPU tensor of ``numel`` values
    whose storage is record ``0`` (what ``torch.save`` writes, memo left out)."""
    storage = b"(" + _text("storage") + b"ctorch\nFloatStorage\n"
    storage += _text("0") + _text("cpu") + _int(numel) + b"t" + b"Q"  # TUPLE, BINPERSID
    args = b"(" + storage + _int(0) + _int(numel) + b"\x85" + _int(1) + b"\x85"  # TUPLE1
    args += b"\x89" + b"ccollections\nOrderedDict\n)R" + b"t"  # NEWFALSE, hooks, TUPLE
    return b"\x80\x02" + b"ctorch._utils\n_rebuild_tensor_v2\n" + args + b"R."


def _add(archive: zipfile.ZipFile, name: str, data: bytes, align: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    if align:
        # local header: 30 bytes + name + extra, then the data
        start = archive.fp.tell() + 30 + len(name.encode()) + 4
        pad = (-start) % ALIGNMENT
        info.extra = struct.pack("<HH", _PADDING_ID, pad) + b"Z" * pad
    archive.writestr(info, data)


def save_float32_vector(values: np.ndarray, f: BinaryIO) -> None:
    """Write ``values`` (1-D, converted to float32) to the binary file ``f``
    as ``torch.save(torch.from_numpy(values))`` would."""
    data = np.ascontiguousarray(values, dtype="<f4")
    if data.ndim != 1:
        raise ValueError("only 1-D vectors are written without torch")
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as archive:
        _add(archive, "archive/data.pkl", tensor_pickle(int(data.shape[0])))
        _add(archive, "archive/.format_version", b"1")
        _add(archive, "archive/.storage_alignment", str(ALIGNMENT).encode())
        _add(archive, "archive/byteorder", b"little")
        _add(archive, "archive/data/0", data.tobytes(), align=True)
        _add(archive, "archive/version", b"3\n")
