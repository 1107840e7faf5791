"""Safe memory-mapped loading of ``.npy`` files with clear errors.

``numpy.load`` reports a truncated file, a wrong magic string or a header that
lies about the shape (or silently read only part of the data when the header
understates it) with messages that name neither the file nor the fix. Here the
header is read and checked against the exact file size first, so every
problem becomes one :class:`~wxstats.core.errors.InputError` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from wxstats.core.errors import InputError

NATIVE_DTYPES = (np.dtype("float32"), np.dtype("float64"), np.dtype("int16"))
"""Read as they are by the kernel (converted to float64 exactly, per value)."""

WIDENED_DTYPES = {np.dtype("float16"): np.dtype("float32")}
"""Converted exactly in memory before the kernel (numba has no float16)."""


def npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran_order, data offset) of a ``.npy`` file."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a .npy file")
    try:
        with open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
            except ValueError as exc:
                raise InputError(f"{path}: not a .npy file (bad magic string): {exc}") from None
            try:
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            except (ValueError, EOFError) as exc:
                raise InputError(f"{path}: unreadable .npy header: {exc}") from None
            offset = f.tell()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied; make the file readable") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return tuple(int(s) for s in shape), np.dtype(dtype), bool(fortran), offset


def load_npy(path: Path, expected_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Memory-map a ``.npy`` file after checking its header, size and dtype."""
    shape, dtype, fortran, offset = npy_header(path)
    native = dtype.newbyteorder("=")
    swapped = dtype != native  # big-endian (">f4"): the same values once byte-swapped
    if native not in NATIVE_DTYPES and native not in WIDENED_DTYPES:
        raise InputError(
            f"{path}: data type {dtype} is not supported "
            "(float32, float64, float16 or int16 expected)"
        )
    if expected_shape is not None and shape != tuple(expected_shape):
        raise InputError(f"{path}: shape {shape} differs from the expected {tuple(expected_shape)}")
    needed = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = os.path.getsize(path)
    if actual < needed:
        raise InputError(
            f"{path}: truncated: the header promises shape {shape} ({needed} bytes) "
            f"but the file has {actual} bytes"
        )
    if actual > needed:
        # np.save writes nothing after the data: the header understates it
        raise InputError(
            f"{path}: the header says {dtype} values of shape {shape} ({needed} bytes) but the "
            f"file has {actual} bytes: the header does not describe the data; rewrite the file"
        )
    if int(np.prod(shape)) == 0:
        raise InputError(f"{path}: holds no values (shape {shape})")
    try:
        array = np.memmap(
            path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C"
        )
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot memory-map: {exc}") from None
    array = np.asarray(array)
    if swapped:
        array = array.astype(native)
    if native in WIDENED_DTYPES:
        array = array.astype(WIDENED_DTYPES[native])
    return array
