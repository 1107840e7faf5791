"""The readers of bytes someone else may have written: JSON, YAML, ``.pt`` and ``.npy``.

A summary, a checkpoint's manifest, a journal, a state's metadata, a store's
attributes, a neural-lam ``.pt`` or a makani ``.npy`` may come from a colleague
or a shared folder of a cluster, written by anyone. Read through here, such a
file runs no code, takes no more memory than a cap chosen per use, and a problem with it is
one line naming the file (:class:`UntrustedInput`), never a library's traceback:

- JSON: at most ``limit`` bytes are read (64 MiB unless the caller says), and the
  nesting depth is counted in the text before :func:`json.loads` sees it (Python's
  decoder recurses once per ``[``/``{``: 200,000 of them were a ``RecursionError``);
- YAML (a datastore config): ``yaml.safe_load`` with the same cap, its errors in
  one line (PyYAML's own are several) and its recursion on deep nesting caught;
- ``.pt``: ``torch.load(weights_only=True)``, its records' declared sizes checked
  first; a pickle that would run code is refused in one line that does not repeat
  torch's advice to load it with ``weights_only=False``;
- ``.npy``: ``np.load(allow_pickle=False)`` after the header's shape and dtype are
  checked against the file's size, so no allocation is larger than the file.

``tests/test_architecture.py`` fails on any other call of ``json.load(s)``,
``yaml.*load``, ``torch.load``, ``np.load`` or ``pickle.load(s)`` in the package.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wxstats.core.errors import InputError, first_line

if TYPE_CHECKING:
    import numpy as np

JSON_LIMIT = 64 << 20  # bytes: far above any JSON wxstats or a store writes
JSON_DEPTH = 128  # nesting levels: our own files use under 10
TENSOR_LIMIT = 256 << 20  # bytes of a .pt file's records: one value per variable
NPY_LIMIT = 1 << 30  # bytes of a .npy array read whole (makani's are one value per channel)

__all__ = [
    "JSON_DEPTH",
    "JSON_LIMIT",
    "UntrustedInput",
    "check_tensor_file",
    "load_npy",
    "load_tensor",
    "load_yaml",
    "parse_json",
    "read_json",
    "owned_by_user",
    "read_own_json",
]


class UntrustedInput(InputError, ValueError):
    """A file (or text) that is not what it should be: ``why`` is the problem
    without the name, for a caller that words it in its own sentence. A
    ValueError too, so callers that already refused a ValueError still do."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}" if where else why)
        self.why = why


# -- JSON ---------------------------------------------------------------------------
# a string, or an unterminated one to the end: it matches wherever it starts, so no
# start is scanned twice (a pattern that can fail was quadratic on '\\"' repeated)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BLOCK = 1 << 20


def _depth(data: bytes) -> int:
    """The deepest nesting of ``[``/``{`` outside strings, without recursion, in
    time linear in the text (an unterminated string runs to the end: the decoder
    stops there, and brackets inside it nest nothing)."""
    if data.count(b"[") + data.count(b"{") <= JSON_DEPTH:
        return 0  # cannot be deeper: the common case, no scan
    # with no backslash every quote opens or closes a string, and what lies outside
    # strings is every other piece between quotes (a split is faster than the pattern)
    outside = _STRING.sub(b"", data) if b"\\" in data else b"".join(data.split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    import numpy as np  # here: the command's parser reads JSON options before numpy is tuned

    deepest, level = 0, 0
    for start in range(0, len(brackets), _BLOCK):  # bounded memory, numpy's speed
        codes = np.frombuffer(brackets, np.uint8, min(_BLOCK, len(brackets) - start), start)
        steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
        levels = np.cumsum(steps) + level
        deepest, level = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def parse_json(text: str | bytes, where: str, limit: int = JSON_LIMIT) -> Any:
    """``text`` (JSON someone else may have written) as Python objects, or
    :class:`UntrustedInput` naming ``where``: larger than ``limit`` bytes, nested
    deeper than :data:`JSON_DEPTH`, not UTF-8, not JSON."""
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogatepass")
    elif isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
    else:
        raise UntrustedInput(where, f"not JSON text but {type(text).__name__}")
    if len(data) > limit:
        raise UntrustedInput(where, f"larger than {_size(limit)} of JSON, refused")
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedInput(where, f"not UTF-8 text (byte {exc.start})") from None
    depth = _depth(data)
    if depth > JSON_DEPTH:
        raise UntrustedInput(
            where, f"JSON nested {depth} levels deep, refused (at most {JSON_DEPTH})"
        )
    try:
        return json.loads(decoded)
    except ValueError as exc:  # JSONDecodeError, an integer of over 4300 digits
        raise UntrustedInput(where, f"not valid JSON: {first_line(exc)}") from None
    except RecursionError:  # the depth check makes this unreachable; one line if not
        raise UntrustedInput(where, "JSON nested too deeply, refused") from None


def read_json(path: str | Path, limit: int = JSON_LIMIT) -> Any:
    """The JSON file ``path``, reading at most ``limit`` bytes of it
    (:func:`parse_json`). A file that cannot be opened raises ``OSError`` as
    ``open`` does: callers word a missing or unreadable file their own way."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return parse_json(data, str(path), limit)


def owned_by_user(st: os.stat_result) -> bool:
    """Whether a file (its ``stat``) belongs to the running user (effective uid):
    the one test of "ours" for the files wxstats leaves in folders others can
    write. Without POSIX ownership (Windows) every file counts as the user's."""
    return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()


def read_own_json(path: str | Path, limit: int) -> Any:
    """The JSON file ``path`` if it may be one wxstats itself wrote into a folder
    others can write (a journal, a store's marker): opened without following a
    link and checked on the open descriptor, a regular file of the running user's
    (on POSIX) with one link (a hard link would let another file be replaced
    through it) and at most ``limit`` bytes; else :class:`UntrustedInput` whose
    ``why`` says what it is instead."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else str(exc.strerror)
        raise UntrustedInput(str(path), why) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedInput(str(path), "it is not a regular file")
        if not owned_by_user(st):
            raise UntrustedInput(
                str(path), f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
            )
        if st.st_nlink != 1:
            raise UntrustedInput(str(path), f"it has {st.st_nlink} links (wxstats writes one)")
        if st.st_size > limit:
            raise UntrustedInput(
                str(path), f"it holds {st.st_size} bytes, more than wxstats writes"
            )
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return parse_json(b"".join(chunks), str(path), limit)


def load_yaml(path: str | Path, limit: int = JSON_LIMIT) -> Any:
    """The YAML file ``path`` (a datastore config) by ``yaml.safe_load``, which builds
    plain objects only, reading at most ``limit`` bytes; one line naming the file for
    YAML that is not valid, not UTF-8, larger, or nested past Python's recursion
    limit (PyYAML's parser recurses once per level). ``OSError`` as ``open`` raises it."""
    import yaml

    where = str(path)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UntrustedInput(where, f"larger than {_size(limit)} of YAML, refused")
    try:
        return yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UntrustedInput(where, f"not UTF-8 text (byte {exc.start})") from None
    except yaml.MarkedYAMLError as exc:  # its text is several lines: the problem and where
        mark = exc.problem_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UntrustedInput(where, f"not valid YAML: {exc.problem or exc.context}{at}") from None
    except yaml.YAMLError as exc:
        raise UntrustedInput(where, f"not valid YAML: {first_line(exc)}") from None
    except RecursionError:
        raise UntrustedInput(where, "YAML nested too deeply, refused") from None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


# -- torch's .pt --------------------------------------------------------------------


def load_tensor(path: str | Path, limit: int = TENSOR_LIMIT) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, or one line: a file
    whose records would take more than ``limit`` bytes, one whose pickle would
    build anything but tensors and plain containers (code it would run is
    named, never run), one torch cannot read."""
    import torch

    where = str(path)
    check_tensor_file(path, limit)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
        text = str(exc)
        if "weights_only" in text or "Weights only" in text:
            # torch's message advises weights_only=False, the one thing that would run
            # the file's code: only its line saying what it met is kept
            detail = next(iter(_plain_lines(text)), "")
            called = re.search(r"GLOBAL\s+([\w.]+)", text)
            if called:  # a function or class the pickle would call
                why = (
                    f"refused: its pickle would call {called[1]}; wxstats runs no code from a file"
                )
            else:  # not a pickle at all, or one torch's safe reader does not know
                why = f"not a readable torch tensor file ({detail or 'not a pickle of tensors'})"
            raise UntrustedInput(where, why) from None
        raise UntrustedInput(
            where, f"not a readable torch tensor file: {first_line(exc)}"
        ) from None


_ADVICE = ("weights_only", "weights only", "trusted", "documentation", "file an issue")


def _plain_lines(text: str) -> list[str]:
    """torch's lines that say what it met, without its advice and links."""
    lines = [line.strip().rstrip(".") for line in text.splitlines()]
    return [line for line in lines if line and not any(a in line.lower() for a in _ADVICE)]


def check_tensor_file(path: str | Path, limit: int = TENSOR_LIMIT) -> None:
    """A zip ``.pt`` (torch >= 1.6) whose records declare more than ``limit``
    bytes, or hold compressed ones (torch writes none: a deflated record could
    inflate a thousandfold), is refused before torch reads any of it."""
    import zipfile

    where = str(path)
    try:
        size = os.path.getsize(path)
        if not zipfile.is_zipfile(path):
            if size > limit:
                raise UntrustedInput(where, f"larger than {_size(limit)}, refused")
            return  # torch's legacy format: read as it comes, no larger than the file
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
    except UntrustedInput:
        raise
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise UntrustedInput(
            where, f"not a readable torch tensor file: {first_line(exc)}"
        ) from None
    if any(r.compress_type != zipfile.ZIP_STORED for r in records):
        raise UntrustedInput(
            where, "holds compressed records, which torch.save never writes; refused"
        )
    declared = sum(r.file_size for r in records)
    if declared > limit:
        raise UntrustedInput(where, f"its records declare {_size(declared)}, refused")


# -- numpy's .npy -------------------------------------------------------------------
def load_npy(path: str | Path, limit: int = NPY_LIMIT) -> np.ndarray:
    """``np.load(path, allow_pickle=False)``, its header checked first: a known
    version, a dtype without objects, a shape whose bytes are exactly what follows
    the header and at most ``limit``; else one line naming the file."""
    where = str(path)
    import numpy as np

    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            read_header = {
                (1, 0): fmt.read_array_header_1_0,
                (2, 0): fmt.read_array_header_2_0,
            }.get(version)
            if read_header is None:
                raise UntrustedInput(where, f"a .npy format version {version} this reader refuses")
            shape, _, dtype = read_header(f, max_header_size=1 << 16)
            offset = f.tell()
            size = os.fstat(f.fileno()).st_size
    except UntrustedInput:
        raise
    except (OSError, ValueError, TypeError, SyntaxError) as exc:
        raise UntrustedInput(where, f"not a readable .npy file ({first_line(exc)})") from None
    if dtype.hasobject:
        raise UntrustedInput(
            where, f"a .npy of Python objects ({dtype}), refused: they are pickles"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes != size - offset:
        raise UntrustedInput(
            where,
            f"its header declares {nbytes} bytes of data (shape {shape}), it holds {size - offset}",
        )
    if nbytes > limit:
        raise UntrustedInput(
            where, f"an array of {_size(nbytes)}, more than the {_size(limit)} read whole"
        )
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UntrustedInput(where, f"not a readable .npy file ({first_line(exc)})") from None
