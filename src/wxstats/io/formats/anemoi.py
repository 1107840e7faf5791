"""anemoi-datasets' statistics: written into the dataset, into a sidecar store, and read back.

anemoi 0.5.47 reads float64 arrays of shape (variables,): ``mean``, ``stdev``,
``minimum``, ``maximum`` and, per tendency delta (``6h``, ``12h``, ``1d``: the
time span of ``k`` steps), ``statistics_tendencies_{delta}_{mean,stdev,minimum,maximum}``;
the group attributes ``statistics_start_date``/``statistics_end_date`` give the
window. Population std (ddof 0), unweighted, as anemoi computes them. A
constant field keeps its true std of 0, as anemoi writes it: anemoi-datasets
never divides by it (the training normaliser chooses what a constant field
gets), so ``--min-std`` does not apply here.

Arrays are written in zarr format 2 (anemoi 0.5.47 needs zarr <= 2.18.7;
zarr 3 writes that format), uncompressed: a few values each.

``--write-into`` the dataset (:func:`write_into_dataset`): every array is
written complete into a staging folder inside the store and flushed, then
the old array folders are moved aside and the new ones renamed in, then the
group attributes (and the consolidated metadata, if the store has it) are
replaced, each in one ``os.replace``; a failure puts everything back, and a
write killed between two renames is refused by readers and repaired by the
next, under the store's lock (:mod:`wxstats.io.zarrstore`). The legacy
``sums``/``squares``/``count``/``has_nans`` arrays of older anemoi versions
(also per tendency) are removed in the same step: anemoi 0.5.47 reads none
of them, and left in place they would describe another window than the new
mean and stdev.

A sidecar (:func:`write_sidecar`, ``--format anemoi --output S.zarr``) is a
small anemoi dataset that ``open_dataset(main, statistics=S,
statistics_tendencies=S)`` accepts: the statistics arrays, the ``variables``
and ``frequency`` attributes, and a ``data`` array of zero dates (anemoi opens
every dataset by its ``data``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import span_seconds
from wxstats.core.errors import InputError, WxstatsError
from wxstats.core.stats import DiffStats, Stats, StreamStats
from wxstats.core.streams import listed_features
from wxstats.core.untrusted import read_json
from wxstats.io.zarrstore import (
    Replacement,
    array_names,
    fsync_tree,
    locked_store,
    replacing,
    settle_zarr,
)

OPS = {"mean": "mean", "stdev": "std", "minimum": "min", "maximum": "max"}
"""anemoi's array name -> the statistic (:meth:`StreamStats.op`)."""
LEGACY = ("sums", "squares", "count", "has_nans")
MARK = "wxstats_statistics"
"""Group attribute of what wxstats wrote (a sidecar is recognised by it)."""


def anemoi_arrays(stats: Stats, stream: str, deltas: dict[int, str]) -> dict[str, np.ndarray]:
    """The float64 arrays anemoi reads, from the run's ``stream`` (see module docstring)."""
    s = stats.streams[stream]
    out = {name: np.asarray(s.op(op), dtype=np.float64) for name, op in OPS.items()}
    for k, delta in deltas.items():
        d = s.diff[k]
        values = {"mean": d.mean, "stdev": d.std, "minimum": d.minimum, "maximum": d.maximum}
        for name, v in values.items():
            out[f"statistics_tendencies_{delta}_{name}"] = np.asarray(v, dtype=np.float64)
    return out


def provenance(stats: Stats, deltas: dict[int, str]) -> dict[str, Any]:
    """The :data:`MARK` attribute: who wrote the statistics, and how."""
    return {
        "written_by": f"wxstats {stats.run.get('wxstats_version', '')}".strip(),
        "method": "exact float64 sums, population std (ddof 0), unweighted, over dates x "
        "ensembles x cells of the statistics window",
        "statistics_window": stats.attrs.get("statistics_window", ""),
        "tendencies": {name: k for k, name in deltas.items()},
    }


def _write_group(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    """Arrays of shape (variables,) in a new zarr format 2 group at ``folder``."""
    import zarr

    group = zarr.open_group(str(folder), mode="w", zarr_format=2)
    for name, values in arrays.items():
        array = group.create_array(
            name,
            shape=values.shape,
            dtype=values.dtype,
            chunks=values.shape or (1,),
            compressors=None,
            fill_value=np.nan if values.dtype.kind == "f" else None,
            attributes={"_ARRAY_DIMENSIONS": ["variable"]},
        )
        array[...] = values


def _group_format(root: Path) -> int | None:
    if (root / ".zgroup").is_file():
        return 2
    return 3 if (root / "zarr.json").is_file() else None


def check_dataset(root: str | Path) -> None:
    """Refuse, before any work, a dataset ``--write-into`` cannot write into."""
    root = Path(root)
    if "://" in str(root) or not root.is_dir():
        raise InputError(f"{root}: --write-into needs a local anemoi dataset folder")
    if not os.access(root, os.W_OK):
        raise InputError(f"{root}: the dataset is not writable")
    if _group_format(root) != 2:
        raise InputError(
            f"{root}: --write-into writes zarr format 2 datasets (anemoi 0.5.47's); this "
            "store is not one; write a sidecar with --format anemoi --output S.zarr"
        )


def _stale(root: Path, arrays: dict[str, np.ndarray]) -> list[str]:
    """Arrays to remove: the legacy ones (see module docstring)."""
    names = {p.name for p in root.iterdir() if (p / ".zarray").is_file()}
    legacy = {n for n in names if n in LEGACY}
    legacy |= {
        n
        for n in names
        if n.startswith("statistics_tendencies_") and n.rsplit("_", 1)[-1] in LEGACY
    }
    legacy |= {n for n in names if n.startswith("statistics_tendencies_") and n.endswith("_nans")}
    return sorted(legacy - set(arrays))


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=4, sort_keys=True, ensure_ascii=True, allow_nan=True)


def write_into_dataset(
    root: str | Path, arrays: dict[str, np.ndarray], attrs: dict[str, Any]
) -> list[str]:
    """Replace (or add) the statistics arrays and attributes: all or nothing."""
    root = Path(root)
    with locked_store(root):
        check_dataset(root)
        with replacing(
            root, f"{root}: writing the statistics failed, the dataset was left as it was"
        ) as rep:
            _write_into(rep, arrays, attrs)
    return sorted(arrays)


def _write_into(rep: Replacement, arrays: dict[str, np.ndarray], attrs: dict[str, Any]) -> None:
    root, tmp = rep.root, rep.tmp
    removed = _stale(root, arrays)
    stage, aside = tmp / "new", tmp / "old"
    # 1. everything that takes space, under tmp: a full disk stops here
    _write_group(stage, arrays)
    group_attrs = read_json(root / ".zattrs") if (root / ".zattrs").exists() else {}
    group_attrs.update(attrs)
    (tmp / "zattrs").write_text(_json(group_attrs))
    meta = None
    if (root / ".zmetadata").is_file():
        meta = read_json(root / ".zmetadata")
        entries = meta["metadata"]
        for name in [*removed, *arrays]:
            for key in (f"{name}/.zarray", f"{name}/.zattrs"):
                entries.pop(key, None)
        for name in arrays:
            for file in (".zarray", ".zattrs"):
                entries[f"{name}/{file}"] = read_json(stage / name / file)
        entries[".zattrs"] = group_attrs
        (tmp / "zmetadata").write_text(_json(meta))
    aside.mkdir()
    for file in (".zattrs", ".zmetadata"):
        if (root / file).exists():
            os.link(root / file, aside / file)
    fsync_tree(tmp)
    # 2. renames only (the store marked first), each undone if a later one fails
    for name in [*arrays, *removed]:
        if (root / name).exists():
            rep.aside(root / name, aside / name)
        if name in arrays:
            rep.move_in(root / name, stage / name)
    old = aside / ".zattrs"
    rep.file(root / ".zattrs", tmp / "zattrs", old if old.exists() else None)
    if meta is not None:  # last: consolidated readers
        rep.file(root / ".zmetadata", tmp / "zmetadata", aside / ".zmetadata")
    rep.apply()


def is_sidecar(path: str | Path) -> bool:
    """A statistics store wxstats wrote (:func:`write_sidecar`)."""
    try:
        return MARK in read_json(Path(path) / ".zattrs")
    except (OSError, ValueError, TypeError):
        return False


def check_sidecar(path: str | Path, overwrite: bool) -> None:
    """Refuse, before any work, a sidecar path that exists (without ``--overwrite``,
    or when it is not a sidecar: never replace someone's folder) or is not a ``.zarr``."""
    path = Path(path)
    if path.suffix != ".zarr":
        raise InputError(
            f"{path}: --format anemoi writes a zarr store that anemoi's open_dataset opens "
            "by its name ending in .zarr; name it S.zarr"
        )
    if path.exists() and not overwrite:
        raise InputError(f"output exists: {path}; pass --overwrite to replace it")
    if path.exists() and not is_sidecar(path):
        raise InputError(
            f"{path}: exists and is not a statistics store written by wxstats; not replacing it"
        )
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise InputError(f"{parent}: output folder is not writable")


def write_sidecar(
    path: str | Path,
    arrays: dict[str, np.ndarray],
    attrs: dict[str, Any],
    data_dtype: np.dtype,
    overwrite: bool,
) -> None:
    """The statistics as a store of their own (see module docstring), renamed into place."""
    path = Path(path)
    check_sidecar(path, overwrite)
    n = len(next(iter(arrays.values())))
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = None
    try:
        _write_group(tmp / "store", arrays)
        import zarr

        group = zarr.open_group(str(tmp / "store"), mode="r+", zarr_format=2)
        group.create_array("data", shape=(0, n, 1, 1), dtype=data_dtype, compressors=None)
        group.create_array("dates", shape=(0,), dtype="datetime64[s]", compressors=None)
        group.attrs.update(attrs)
        fsync_tree(tmp)
        if path.exists():
            old = tmp / "old"
            os.rename(path, old)
        os.rename(tmp / "store", path)
    except BaseException as exc:
        settle_zarr()
        if old is not None and old.exists() and not path.exists():
            os.rename(old, path)
        if isinstance(exc, Exception):
            raise WxstatsError(f"{path}: writing the statistics store failed: {exc}") from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def is_anemoi_statistics(path: str | Path) -> bool:
    """A zarr group with anemoi's statistics (a dataset or a sidecar)."""
    path = Path(path)
    return (path / "mean" / ".zarray").is_file() and (path / "stdev" / ".zarray").is_file()


def read_anemoi_stats(path: str | Path) -> Stats:
    """anemoi's statistics of a dataset or a sidecar as a :class:`Stats`: one stream
    of the ``variables``; tendencies keyed by their number of steps (from the
    ``frequency``), or by their span in seconds when the frequency is unknown."""
    import zarr

    path = Path(path)
    try:
        group = zarr.open_group(str(path), mode="r")
        attrs = group.attrs.asdict()
        arrays = array_names(group)

        def values(name: str) -> np.ndarray:
            return np.asarray(group[name][:], dtype=np.float64)

        stats = {name: values(name) for name in OPS}
    except Exception as exc:  # noqa: BLE001 - any zarr error, in one line
        raise InputError(f"{path}: cannot read anemoi statistics: {exc}") from None
    n = len(stats["mean"])
    names = [str(v) for v in attrs.get("variables") or [f"#{i}" for i in range(n)]]
    if len(names) != n:
        raise InputError(f"{path}: {len(names)} variables but {n} values in mean")
    step = span_seconds(attrs.get("frequency"))
    diff: dict[int | None, DiffStats] = {}
    spans: dict[int | None, int] = {}
    for key in sorted(arrays):
        if not (key.startswith("statistics_tendencies_") and key.endswith("_mean")):
            continue
        delta = key[len("statistics_tendencies_") : -len("_mean")]
        seconds = span_seconds(delta)
        if seconds is None:
            continue
        k = seconds // step if step and seconds % step == 0 else seconds
        prefix = f"statistics_tendencies_{delta}_"
        try:
            diff[k] = DiffStats(
                values(prefix + "mean"),
                values(prefix + "stdev"),
                minimum=values(prefix + "minimum"),
                maximum=values(prefix + "maximum"),
            )
        except Exception as exc:  # noqa: BLE001 - a partial set of tendency arrays
            raise InputError(f"{path}: tendency {delta}: {exc}") from None
        spans[k] = seconds  # anemoi names each tendency by its span
    units = [""] * n
    stream = StreamStats(
        name="data",
        features=names,
        units=units,
        mean=stats["mean"],
        std=stats["stdev"],
        minimum=stats["minimum"],
        maximum=stats["maximum"],
        diff=diff,
        diff_span=spans,
        long_names=list(names),
        layout=listed_features("state", "train", names),
        named="variables" in attrs,
    )
    keep = ("statistics_start_date", "statistics_end_date", "frequency")
    return Stats(
        "anemoi",
        {"data": stream},
        attrs={k: attrs[k] for k in keep if k in attrs},
        origin=f"{path} (anemoi statistics)",
    )
