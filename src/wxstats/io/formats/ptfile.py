"""The bytes ``torch.save`` writes for a 1-D float32 CPU tensor, without torch,
and the values of such a file read back without torch.

Importing torch costs seconds (more than the rest of a small MEPS run), and
neural-lam's ``.pt`` statistics files are only 1-D float32 tensors, so they are
written here, byte for byte as torch 2.x's ``torch.save(tensor, file_object)``
writes them (``tests/test_ptfile.py`` compares the bytes with torch's and loads
them back with ``torch.load(..., weights_only=True)``).

The format (torch's ``PyTorchStreamWriter``, miniz underneath): a zip archive of
stored (uncompressed) records under ``archive/``, each record's data aligned to
64 bytes by an ``FB`` extra field of ``Z`` padding in its local header, sizes and
CRC in a data descriptor after the data, a zip64 end of central directory. The
records: ``data.pkl`` (a protocol-2 pickle calling
``torch._utils._rebuild_tensor_v2`` on a persistent storage ``0``),
``.format_version``, ``.storage_alignment``, ``byteorder``, ``data/0`` (the
values, little-endian), ``version``, and ``.data/serialization_id``: 20 digits
of a hash of the record names (a constant for these six names) and 20 of
``c10::hash_combine`` folded over the records' CRC-32s.

:func:`tensor_values` reads a 1-D tensor from such an archive (ours, or
neural-lam's own ``torch.save`` of a 1-D tensor), so that ``report``,
``compare`` and ``wxstats.read`` need no torch: the pickle is unpickled with
only what a tensor's rebuild names (``torch._utils._rebuild_tensor_v2``, a
storage class, ``OrderedDict``), as ``torch.load(weights_only=True)`` restricts
it, the values taken from the storage's record; anything else is refused
(:class:`NotATensor`) and left to ``torch.load`` where torch is installed.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

ALIGNMENT = 64
NAMES_HASH = 15728199511854643026
"""``c10::hash_combine`` over ``std::hash`` of the six record names (without the
``archive/`` prefix) in the order torch's ``unordered_set`` holds them: the same
for every file written here, since the names are."""
_MASK = (1 << 64) - 1


def _hash_combine(seed: int, value: int) -> int:
    """``c10::hash_combine`` on 64-bit ``size_t``."""
    return (seed ^ ((value + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & _MASK)) & _MASK


def _pickle_int(n: int) -> bytes:
    """An int as Python's protocol-2 pickler writes it (non-negative, < 2**31)."""
    if n <= 0xFF:
        return b"K" + struct.pack("<B", n)
    if n <= 0xFFFF:
        return b"M" + struct.pack("<H", n)
    return b"J" + struct.pack("<i", n)


def _unicode(text: str, memo: int) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw + b"q" + bytes([memo])


def _data_pkl(numel: int) -> bytes:
    """``pickle.dumps`` (protocol 2) of a contiguous 1-D float32 tensor, as torch's
    pickler writes it: ``_rebuild_tensor_v2(storage, 0, (n,), (1,), False, OrderedDict())``."""
    return b"".join(
        [
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00((",
            _unicode("storage", 1),
            b"ctorch\nFloatStorage\nq\x02",
            _unicode("0", 3),
            _unicode("cpu", 4),
            _pickle_int(numel),
            b"tq\x05QK\x00",
            _pickle_int(numel),
            b"\x85q\x06K\x01\x85q\x07\x89ccollections\nOrderedDict\nq\x08)Rq\ttq\nRq\x0b.",
        ]
    )


def tensor_bytes(values: np.ndarray) -> bytes:
    """The file ``torch.save(torch.from_numpy(values), f)`` writes, for 1-D float32 ``values``."""
    values = np.asarray(values)
    if values.dtype != np.float32 or values.ndim != 1 or values.size == 0:
        # torch lays out an empty tensor's file differently; wxstats never writes one
        raise TypeError(f"only non-empty 1-D float32 arrays, not {values.dtype} {values.shape}")
    records = [
        ("data.pkl", _data_pkl(values.size)),
        (".format_version", b"1"),
        (".storage_alignment", str(ALIGNMENT).encode()),
        ("byteorder", b"little"),
        ("data/0", values.astype("<f4").tobytes()),
        ("version", b"3\n"),
    ]
    crcs = 0
    for _, data in records:
        crcs = _hash_combine(crcs, zlib.crc32(data))
    records.append((".data/serialization_id", f"{NAMES_HASH:020d}{crcs:020d}".encode()))

    out = bytearray()
    central = bytearray()
    for name, data in records:
        path = f"archive/{name}".encode()
        offset = len(out)
        start = offset + 30 + len(path) + 4  # the data after the local header and "FB" + size
        pad = -start % ALIGNMENT
        crc = zlib.crc32(data)
        # version needed 0, flags: data descriptor (bit 3) + UTF-8 names (bit 11), stored
        head = (0x04034B50, 0, 0x0808, 0, 0, 0, 0, 0, 0, len(path), pad + 4)
        out += struct.pack("<IHHHHHIIIHH", *head)
        out += path + b"FB" + struct.pack("<H", pad) + b"Z" * pad + data
        out += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            *(0x02014B50, 0, 0, 0x0808, 0, 0, 0, crc, len(data), len(data), len(path)),
            *(0, 0, 0, 0, 0, offset),
        )
        central += path
    cd_offset = len(out)
    out += central
    eocd64 = len(out)
    n = len(records)
    # zip64 end record (44 bytes; made by 3.0 on Unix, needs 4.5), its locator, the end
    end64 = (0x06064B50, 44, 0x031E, 45, 0, 0, n, n, len(central), cd_offset)
    out += struct.pack("<IQHHIIQQQQ", *end64)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), cd_offset, 0)
    return bytes(out)


# -- reading ------------------------------------------------------------------------
STORAGE_DTYPES = {
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "HalfStorage": "<f2",
    "LongStorage": "<i8",
    "IntStorage": "<i4",
}
"""The storages a 1-D statistics tensor may have, by the class its pickle names."""


class NotATensor(ValueError):
    """A file :func:`tensor_values` does not read (not a zip archive of one 1-D
    tensor of a storage in :data:`STORAGE_DTYPES`)."""


class CallsCode(NotATensor):
    """A pickle naming a function or class outside torch (``os.system``): code that
    unpickling would run, refused before anything is called."""


class _Storage:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def _rebuild(storage: Any, offset: int, size: tuple, stride: tuple, *_: Any) -> Any:
    if not isinstance(storage, np.ndarray) or len(size) != 1 or len(stride) != 1:
        raise NotATensor(f"a tensor of shape {tuple(size)}, not 1-D")
    n, step = int(size[0]), int(stride[0])
    stop = offset + step * (n - 1) + 1 if n else offset
    if offset < 0 or (step < 1 and n > 1) or stop > storage.size:
        raise NotATensor("a tensor outside its storage")
    return storage[offset:stop:step] if n else storage[:0]


class _Unpickler(pickle.Unpickler):
    """Only what a tensor's rebuild names; storages read from the archive's records."""

    def __init__(self, data: bytes, records: dict[str, bytes]) -> None:
        super().__init__(io.BytesIO(data))
        self.records = records

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild
        if module == "torch" and name in STORAGE_DTYPES:
            return _Storage(STORAGE_DTYPES[name])
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module.split(".")[0] != "torch":  # torch.load would refuse it as well
            raise CallsCode(f"its pickle would call {module}.{name}")
        raise NotATensor(f"the pickle names {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise NotATensor("a persistent object that is not a storage")
        kind, key, numel = pid[1], str(pid[2]), int(pid[4])
        if not isinstance(kind, _Storage) or key not in self.records:
            raise NotATensor(f"storage {key} of an unknown type or missing")
        raw = self.records[key]
        width = np.dtype(kind.dtype).itemsize
        if len(raw) < numel * width:
            raise NotATensor(f"storage {key} holds {len(raw)} bytes, not {numel * width}")
        return np.frombuffer(raw[: numel * width], dtype=kind.dtype)


def tensor_values(data: bytes) -> np.ndarray:
    """The values (float64) of the 1-D tensor a ``torch.save`` archive ``data``
    holds, without torch (see module docstring); :class:`NotATensor` otherwise."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise NotATensor("no data.pkl record")
        prefix = pkl[0][: -len("data.pkl")]
        # torch.save stores its records uncompressed: a compressed one is refused unread,
        # so a record cannot inflate past the archive's own size (a zip bomb)
        if any(i.compress_type != zipfile.ZIP_STORED for i in archive.infolist()):
            raise NotATensor("a compressed record (torch.save stores them uncompressed)")
        records = {
            n[len(prefix) + len("data/") :]: archive.read(n)
            for n in names
            if n.startswith(prefix + "data/")
        }
        order = prefix + "byteorder"  # absent in files of torch before 2.1: little-endian
        if order in names and archive.read(order).strip() != b"little":
            raise NotATensor("big-endian storages")
        values = _Unpickler(archive.read(pkl[0]), records).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, KeyError) as exc:
        raise NotATensor(f"not a torch.save archive ({exc})") from None
    except (TypeError, AttributeError, IndexError) as exc:
        raise NotATensor(f"not a tensor ({exc})") from None
    if not isinstance(values, np.ndarray):
        raise NotATensor(f"holds a {type(values).__name__}, not a tensor")
    return values.astype(np.float64)
