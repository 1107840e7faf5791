"""The statistics state file (``.wxstate``): a run's exact accumulator, kept to grow it.

Why a file of its own: statistics that were rounded cannot be updated
exactly, but the exact integer sums behind them can. A state holds those sums
and everything needed to add more data later with the same bytes as a full
run (``wxstats update``, ``wxstats merge``): the identity of the data, the
time range covered and its edge time steps.

The format is a small netCDF4 file, readable by any netCDF tool (the layout is
documented in ``docs/state-format.md``):

* global attributes ``wxstats_state_format`` (``"wxstats-state"``),
  ``wxstats_state_version`` (an integer, :data:`FORMAT_VERSION`),
  ``wxstats_version``, ``meta`` (JSON: identity, coverage, streams) and
  ``checksum`` (SHA-256 of ``meta`` and every array, to refuse a damaged file);
* ``sums`` (int64, dimension ``word``): the packed exact sums of
  :meth:`wxstats.core.accumulator.RunMoments.pack`;
* ``minimum``, ``maximum`` (float64, dimension ``part_feature``): the extremes of
  every (stream, part, feature), in the same order;
* ``{variable}__head`` / ``{variable}__tail``: the decoded first and last time
  steps of each variable with time (``(step, grid, feature)``, the decoded dtype);
* ``{variable}__weights`` (float64, ``(grid,)``): a weighted state's grid-point
  weights (``--weights``), for the differences across a seam.

Version 3 holds the exact sums of ``x`` and ``x²`` (each time step summed with its
own reference); versions 1 and 2 held sums relative to one run-wide reference
and are refused in one line (recompute them).

The same codec holds a checkpoint's part files (:mod:`wxstats.runtime.checkpoint`:
``meta`` says which time steps the sums are of, there are no edges), so a
partial result has one format on disk.

This module only encodes and decodes; what the contents mean and when two
states may be combined is :mod:`wxstats.runtime.state`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.errors import WxstatsError
from wxstats.core.untrusted import parse_json
from wxstats.io.atomic import Writer
from wxstats.io.formats.ncwrite import write_netcdf

FORMAT_NAME = "wxstats-state"
FORMAT_VERSION = 3
SUFFIX = ".wxstate"
PART_ARRAYS = ("minimum", "maximum")


@dataclass
class StateFile:
    """The decoded contents of a state file (see module docstring)."""

    meta: dict[str, Any]
    sums: np.ndarray  # int64 (words,)
    minimum: np.ndarray  # float64 (parts,)
    maximum: np.ndarray
    edges: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Variable name -> (head, tail), each ``(step, grid, feature)``."""
    wxstats_version: str = ""
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    """Variable name -> float64 ``(grid,)`` weights (a weighted state only)."""


def _checksum(meta_text: str, arrays: list[np.ndarray]) -> str:
    digest = hashlib.sha256(meta_text.encode())
    for array in arrays:
        a = np.ascontiguousarray(array)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def _arrays(state: StateFile) -> list[np.ndarray]:
    out = [state.sums] + [getattr(state, n) for n in PART_ARRAYS]
    for name in sorted(state.edges):
        out += list(state.edges[name])
    return out + [state.weights[name] for name in sorted(state.weights)]


def _storable(array: np.ndarray) -> np.ndarray:
    """netCDF has no float16: such edges are stored as float32 (exactly)."""
    return array.astype(np.float32) if array.dtype == np.float16 else array


def state_writer(state: StateFile, wxstats_version: str) -> Writer:
    """A writer of ``state`` for :func:`wxstats.io.atomic.write_all`."""

    def write(path: Path) -> None:
        meta_text = json.dumps(state.meta, sort_keys=True)
        data: dict[str, tuple[tuple[str, ...], Any, dict[str, Any]]] = {
            "sums": (("word",), state.sums, {"long_name": "packed exact sums (int64 limbs)"}),
        }
        for name in PART_ARRAYS:
            data[name] = (("part_feature",), getattr(state, name), {})
        for var, (head, tail) in sorted(state.edges.items()):
            dims = (f"{var}__grid", f"{var}__feature")
            for which, array in (("head", head), ("tail", tail)):
                data[f"{var}__{which}"] = (
                    (f"{var}__{which}_step", *dims),
                    _storable(array),
                    {"dtype": array.dtype.str},
                )
        for var, weights in sorted(state.weights.items()):
            data[f"{var}__weights"] = ((f"{var}__grid",), weights, {})
        attrs = {
            "wxstats_state_format": FORMAT_NAME,
            "wxstats_state_version": np.int32(FORMAT_VERSION),
            "wxstats_version": wxstats_version,
            "meta": meta_text,
            "checksum": _checksum(meta_text, _arrays(state)),
        }
        write_netcdf(path, data, {}, attrs)

    return write


class StateFileError(WxstatsError):
    """A file :func:`read_state_file` refuses; ``why`` says why in a few words and
    ``version`` is the file's format version where that is the reason, so that
    another user of the codec (a checkpoint's part files) can phrase its own line."""

    def __init__(self, message: str, why: str, version: int | None = None) -> None:
        super().__init__(message)
        self.why, self.version = why, version


def _damaged(path: Path, why: str) -> WxstatsError:
    return StateFileError(
        f"{path}: not a usable wxstats state file ({why}); nothing was written. "
        "Use the state file as written by 'wxstats compute --state', or recompute it",
        why,
    )


def read_state_file(path: str | Path) -> StateFile:
    """The contents of the state file at ``path``; a missing, foreign,
    newer-versioned, truncated or altered file is refused in one line."""
    import netCDF4

    path = Path(path)
    if not path.is_file():
        raise StateFileError(f"{path}: no such state file", "no such file")
    try:
        nc = netCDF4.Dataset(path, "r")
    except OSError as exc:
        raise _damaged(path, f"truncated or not netCDF: {exc.strerror or exc}") from None
    try:
        nc.set_auto_mask(False)
        attrs = {k: nc.getncattr(k) for k in nc.ncattrs()}
        if attrs.get("wxstats_state_format") != FORMAT_NAME:
            raise StateFileError(
                f"{path}: not a wxstats state file (no wxstats_state_format attribute); "
                "a state is written by 'wxstats compute --state FILE'",
                "no wxstats_state_format attribute",
            )
        version = int(attrs.get("wxstats_state_version", -1))
        if version > FORMAT_VERSION:
            raise StateFileError(
                f"{path}: state format version {version} was written by a newer wxstats "
                f"({attrs.get('wxstats_version', '?')}); this wxstats reads version "
                f"{FORMAT_VERSION}: upgrade wxstats",
                "a newer format",
                version,
            )
        if version in (1, 2):
            raise StateFileError(
                f"{path}: state format version {version}, written by wxstats "
                f"{attrs.get('wxstats_version', '?')}, holds sums relative to one run-wide "
                f"reference; this wxstats reads version {FORMAT_VERSION} (every time step its "
                "own reference): recompute the state with this wxstats",
                "an older format",
                version,
            )
        if version != FORMAT_VERSION:
            raise _damaged(path, f"unknown state format version {version}")
        meta_text = str(attrs["meta"])
        arrays = {name: np.asarray(var[...]) for name, var in nc.variables.items()}
        edge_dtypes = {
            name: var.getncattr("dtype")
            for name, var in nc.variables.items()
            if "dtype" in var.ncattrs()
        }
    except (KeyError, ValueError, RuntimeError, OSError) as exc:
        raise _damaged(path, f"cannot read it: {exc}") from None
    finally:
        nc.close()
    try:
        meta = parse_json(meta_text, "its metadata")
        edges = {}
        for name in arrays:
            if name.endswith("__head"):
                var = name[: -len("__head")]
                edges[var] = tuple(
                    arrays[f"{var}__{w}"].astype(np.dtype(edge_dtypes[f"{var}__{w}"]))
                    for w in ("head", "tail")
                )
        state = StateFile(
            meta=meta,
            sums=arrays["sums"].astype(np.int64),
            **{n: arrays[n].astype(np.float64) for n in PART_ARRAYS},
            edges=edges,
            wxstats_version=str(attrs.get("wxstats_version", "")),
            weights={
                name[: -len("__weights")]: arrays[name].astype(np.float64)
                for name in arrays
                if name.endswith("__weights")
            },
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise _damaged(path, f"missing or malformed content: {exc}") from None
    if _checksum(meta_text, _arrays(state)) != attrs.get("checksum"):
        raise _damaged(path, "its checksum does not match: the file was altered or damaged")
    return state
