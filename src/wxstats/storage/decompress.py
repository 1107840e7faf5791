"""Decoding a chunk object within its declared size: the one home of decompression.

A chunk object is bytes someone else wrote; its decoded size is what the
array's metadata declares (the chunk's shape times the item size), never what
the bytes claim. A zlib stream of 1.5 MiB inflates to 1.5 GiB, and a zstd,
blosc or lz4 header may declare any size it likes: decoded as the codec's
library would, such a chunk allocates gigabytes before anything sees that it
cannot be reshaped (several in flight across the reading threads: an OOM kill
on a shared node). Every decoder here is given the declared size and never
produces, or allocates, more than one byte beyond it:

- zlib, gzip and HDF5's deflate: inflated with an output limit (ISA-L's
  decompressor, or zlib's where its wheels are missing; both as fast as their
  one-shot calls, measured on 4 MiB chunks);
- zstd, blosc and lz4: the size the frame's header declares is checked against
  the declared one first, then decoded into a buffer of the declared size
  (numcodecs refuses to write past it);
- bz2 and lzma: the standard library's decompressors, with an output limit;
- any other numcodecs codec: decoded by its own library, then its size checked
  (its allocation is the codec's, as in zarr's own reading; see
  :func:`_decoded_then_checked`).

A chunk that decodes to more is refused with :class:`TooLarge` ("inflates past
its declared 4096 bytes"), one that decodes to less with a ``ValueError``
naming both sizes; the chunk readers name the file, the variable and the chunk.
``tests/test_architecture.py`` checks that nothing else in the package calls a
decompressor.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

_WBITS = {"zlib": zlib.MAX_WBITS, "gzip": 16 + zlib.MAX_WBITS}


def zlib_inflater(fmt: str) -> Any:
    """zlib's decompressor of a ``zlib`` or ``gzip`` stream (where ISA-L is missing)."""
    return zlib.decompressobj(_WBITS[fmt])


_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
try:  # ISA-L's inflate: the same bytes as zlib's, ~2x its speed here; releases the GIL
    from isal import igzip_lib

    _FLAGS = {"zlib": igzip_lib.DECOMP_ZLIB, "gzip": igzip_lib.DECOMP_GZIP}

    def isal_inflater(fmt: str) -> Any:
        """ISA-L's decompressor of a ``zlib`` or ``gzip`` stream."""
        return igzip_lib.IgzipDecompressor(_FLAGS[fmt])

    _ERRORS += (igzip_lib.IsalError,)
    inflater = isal_inflater
except ImportError:  # a platform without its wheels (see pyproject.toml)
    inflater = zlib_inflater

Decoder = Callable[[Any, int], Any]
"""``decode(data, nbytes)``: the bytes of a chunk object whose declared decoded
size is ``nbytes``, as a bytes-like buffer of exactly that size."""


METADATA_BYTES = 64 * 2**20
"""The most bytes of a metadata object (``zarr.json``, ``.zmetadata``) fetched from
an object store: the consolidated metadata of thousands of arrays is a few MiB."""


class TooLarge(ValueError):
    """A chunk object that decodes past its declared size (or is stored in more
    bytes than any codec would take for it; ``nbytes`` ``None``: a metadata object
    larger than :data:`METADATA_BYTES`); its text follows the chunk's name."""

    def __init__(
        self,
        nbytes: int | None,
        claimed: int | None = None,
        stored: int | None = None,
        partly: bool = False,
    ) -> None:
        if stored is not None:  # ``partly``: a range read stopped one byte past the limit
            size = f"more than {stored - 1}" if partly else f"{stored}"
            if nbytes is None:
                text = f"is stored in {size} bytes, more than a metadata object may be"
                super().__init__(f"{text} ({METADATA_BYTES} bytes)")
                return
            text = f"is stored in {size} bytes, more than any codec takes for its declared "
            super().__init__(f"{text}{nbytes} bytes")
            return
        said = f" (its header says {claimed} bytes)" if claimed is not None else ""
        super().__init__(f"inflates past its declared {nbytes} bytes{said}")


def stored_limit(nbytes: int) -> int:
    """The most bytes any codec here stores a chunk of ``nbytes`` decoded bytes in
    (incompressible data grows by well under 1 %; headers are tens of bytes): a
    larger object (a sparse file of terabytes named as a chunk) is refused before
    it is read."""
    return nbytes + nbytes // 8 + 2**16


def object_limit(nbytes: int | None) -> int:
    """The most stored bytes fetched of an object whose declared decoded size is
    ``nbytes`` (``None``: a metadata object): an object store's answer is read
    no further, so that a store serving terabytes under a chunk's name costs
    no more memory than the chunk."""
    return METADATA_BYTES if nbytes is None else stored_limit(nbytes)


def check_stored(size: int, nbytes: int | None, partly: bool = False) -> None:
    """Refuse an object stored in more than :func:`object_limit` bytes (``partly``:
    ``size`` bytes of it were read, up to one past the limit)."""
    if size > object_limit(nbytes):
        raise TooLarge(nbytes, stored=size, partly=partly)


def _short(got: int, nbytes: int) -> ValueError:
    return ValueError(f"decodes to {got} bytes, not its declared {nbytes}")


def _checked(out: Any, nbytes: int) -> Any:
    got = memoryview(out).nbytes
    if got > nbytes:
        raise TooLarge(nbytes)
    if got < nbytes:
        raise _short(got, nbytes)
    return out


def inflate(data: Any, nbytes: int, fmt: str = "zlib") -> bytes:
    """A zlib (HDF5's deflate, numcodecs' ``zlib``) or gzip stream inflated to at
    most ``nbytes`` bytes (gzip: every member, as ``gzip.decompress`` reads them)."""
    pieces, left = [], nbytes
    while True:
        stream = inflater(fmt)
        try:
            piece = stream.decompress(data, left + 1)
        except _ERRORS as exc:
            raise ValueError(f"cannot inflate: {exc}") from None
        if len(piece) > left:
            raise TooLarge(nbytes)
        if not stream.eof:
            raise ValueError("the compressed stream is truncated")
        pieces.append(piece)
        left -= len(piece)
        data = stream.unused_data
        if fmt != "gzip" or not data.lstrip(b"\0"):  # zlib ignores trailing bytes too
            break
    out = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    return _checked(out, nbytes)


def _buffer(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, dtype=np.uint8)


def zstd_content_size(data: Any) -> int | None:
    """The content size a zstd frame's header declares (RFC 8878, 3.1.1.1);
    ``None`` where it declares none (or the bytes are not a zstd frame: then
    decoding them fails)."""
    head = bytes(memoryview(data)[:18])
    if len(head) < 5 or struct.unpack_from("<I", head)[0] != 0xFD2FB528:
        return None
    descriptor = head[4]
    single = (descriptor >> 5) & 1
    field = (0 if not single else 1, 2, 4, 8)[descriptor >> 6]
    if field == 0:
        return None
    start = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
    raw = head[start : start + field]
    if len(raw) < field:
        return None
    value = int.from_bytes(raw, "little")
    return value + 256 if field == 2 else value


def _zstd(codec: Any) -> Decoder:
    def decode(data: Any, nbytes: int) -> Any:
        claimed = zstd_content_size(data)
        if claimed is not None and claimed > nbytes:
            raise TooLarge(nbytes, claimed)
        if claimed is not None and claimed < nbytes:
            raise _short(claimed, nbytes)
        try:  # a frame without a declared size is streamed into the buffer, no further
            return codec.decode(data, out=_buffer(nbytes))
        except (RuntimeError, ValueError) as exc:
            if "too small" in str(exc):
                raise TooLarge(nbytes) from None
            raise ValueError(str(exc)) from None

    return decode


def _blosc(codec: Any) -> Decoder:
    def decode(data: Any, nbytes: int) -> Any:
        head = bytes(memoryview(data)[:16])
        if len(head) < 16:
            raise ValueError(f"a blosc header is 16 bytes, the object has {len(head)}")
        claimed, _block, stored = struct.unpack_from("<III", head, 4)
        if claimed > nbytes:
            raise TooLarge(nbytes, claimed)
        if claimed < nbytes:
            raise _short(claimed, nbytes)
        if stored != memoryview(data).nbytes:
            raise ValueError(f"its blosc header says {stored} bytes, the object has {len(data)}")
        return codec.decode(data, out=_buffer(nbytes))

    return decode


def _lz4(codec: Any) -> Decoder:
    def decode(data: Any, nbytes: int) -> Any:
        head = bytes(memoryview(data)[:4])
        if len(head) < 4:
            raise ValueError("an lz4 object starts with its 4-byte size")
        claimed = struct.unpack("<i", head)[0]
        if claimed > nbytes:
            raise TooLarge(nbytes, claimed)
        if claimed != nbytes:
            raise _short(claimed, nbytes)
        return codec.decode(data, out=_buffer(nbytes))

    return decode


def _stream(make: Callable[[], Any]) -> Decoder:
    """bz2 and lzma: the standard library's decompressors, with an output limit."""

    def decode(data: Any, nbytes: int) -> Any:
        stream = make()
        try:
            out = stream.decompress(bytes(data), nbytes + 1)
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise ValueError(str(exc)) from None
        if len(out) > nbytes:
            raise TooLarge(nbytes)
        return _checked(out, nbytes)

    return decode


def _decoded_then_checked(codec: Any) -> Decoder:
    """Any other codec (zfpy, pcodec, imagecodecs'...): decoded by its own library,
    then its size checked. Decoding into a buffer of the declared size (``out=``)
    would bound the allocation, but a codec that decodes to less leaves the rest
    of the buffer unwritten and says nothing: silent wrong numbers. These codecs
    allocate what they decode as zarr's own reading would."""

    def decode(data: Any, nbytes: int) -> Any:
        return _checked(codec.decode(data), nbytes)

    return decode


def bounded(codec: Any) -> Decoder:
    """The bounded decoder (see module docstring) of a numcodecs codec."""
    kind = getattr(codec, "codec_id", None)
    if kind in ("zlib", "gzip"):
        return lambda data, nbytes: inflate(data, nbytes, kind)
    if kind == "zstd":
        return _zstd(codec)
    if kind == "blosc":
        return _blosc(codec)
    if kind == "lz4":
        return _lz4(codec)
    if kind == "bz2":
        return _stream(bz2.BZ2Decompressor)
    if kind == "lzma":
        fmt = getattr(codec, "format", lzma.FORMAT_AUTO)
        filters = codec.filters if fmt == lzma.FORMAT_RAW else None
        return _stream(lambda: lzma.LZMADecompressor(fmt, filters=filters))
    return _decoded_then_checked(codec)
