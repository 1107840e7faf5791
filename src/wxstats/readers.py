"""Read a statistics set back into comparable float64 arrays, whoever wrote it.

Three families of files hold normalization statistics:

- wxstats' own ``wxstats_stats.nc`` (and any netCDF/zarr laid out like
  mllam-data-prep output: ``{category}__{split}__{op}`` variables along a
  ``{category}_feature`` dimension), and the ``--summary`` JSON;
- a neural-lam ``static/`` folder: ``parameter_mean.pt``, ``parameter_std.pt``,
  ``diff_mean.pt``, ``diff_std.pt`` (differences already divided by the std),
  ``flux_stats.pt`` (``[mean, std]``), with variable names, units and step
  length taken from the datastore YAML beside the folder when there is one;
- an mllam-data-prep zarr (``state__train__mean``, ``state__train__diff_std``
  with a ``state_feature`` coordinate; its differences are on the raw scale).

Each becomes a :class:`StatsSet`: per category (``state``, ``forcing``,
``static``) the variable names (``None`` when the file has none), units, the
value statistics and, per difference step, the difference statistics on both
the raw and the standardized scale (one derived from the other with the std
when the file holds only one; :attr:`StreamSet.derived` says which).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.errors import InputError

VALUE_OPS = ("count", "mean", "std", "min", "max", "nan_count")
DIFF_OPS = ("count", "mean", "std", "mean_standardized", "std_standardized")
NEURALLAM_FILES = {
    "mean": "parameter_mean.pt",
    "std": "parameter_std.pt",
    "mean_standardized": "diff_mean.pt",
    "std_standardized": "diff_std.pt",
}
FLUX_FILE = "flux_stats.pt"
FLUX_NAME = "toa_downwelling_shortwave_flux"
_VAR_RE = re.compile(r"^(state|forcing|static)__(.+)__([a-z_]+)$")


@dataclass
class StreamSet:
    """The statistics of one category, as float64 arrays of one value per variable."""

    category: str
    names: list[str] | None
    units: list[str] | None
    values: dict[str, np.ndarray] = field(default_factory=dict)
    diff: dict[int | None, dict[str, np.ndarray]] = field(default_factory=dict)
    derived: set[str] = field(default_factory=set)
    """Entries computed here rather than read, e.g. ``"diff3 mean"`` (raw = standardized * std)."""

    def __len__(self) -> int:
        for ops in (self.values, *self.diff.values()):
            for array in ops.values():
                return len(array)
        return len(self.names or [])

    def labels(self) -> list[str]:
        """Variable names, or ``#0, #1, ...`` when the file has none."""
        return list(self.names) if self.names is not None else [f"#{i}" for i in range(len(self))]

    def unit(self, i: int) -> str:
        return self.units[i] if self.units else ""


@dataclass
class StatsSet:
    """A statistics set read from ``path`` (see module docstring)."""

    path: Path
    kind: str
    split: str | None
    streams: dict[str, StreamSet]
    warnings: list[str] = field(default_factory=list)
    """Warnings stored in the file by the run that wrote it."""
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> StreamSet:
        return self.streams["state"]


def _f64(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).reshape(-1)


def _complete_diffs(stream: StreamSet) -> None:
    """Fill the missing scale of the difference statistics from the std."""
    std = stream.values.get("std")
    if std is None:
        return
    safe = np.where(std > 0, std, 1.0)
    for step, ops in stream.diff.items():
        label = f"diff{step if step is not None else ''}"
        for raw, scaled in (("mean", "mean_standardized"), ("std", "std_standardized")):
            if raw in ops and scaled not in ops:
                ops[scaled] = np.where(std > 0, ops[raw] / safe, 0.0)
                stream.derived.add(f"{label} {scaled}")
            elif scaled in ops and raw not in ops:
                ops[raw] = ops[scaled] * std
                stream.derived.add(f"{label} {raw}")


def _check_lengths(stream: StreamSet, where: str) -> None:
    n = len(stream)
    arrays = [(op, a) for op, a in stream.values.items()]
    arrays += [(f"diff{k} {op}", a) for k, ops in stream.diff.items() for op, a in ops.items()]
    for op, array in arrays:
        if len(array) != n:
            raise InputError(
                f"{where}: {stream.category} {op} has {len(array)} values but others have {n}"
            )
    for what, labels in (("names", stream.names), ("units", stream.units)):
        if labels is not None and len(labels) != n:
            raise InputError(
                f"{where}: {len(labels)} variable {what} for {n} {stream.category} statistics"
            )


# -- xarray: wxstats netCDF and mllam-data-prep zarr -------------------------
def _open_xarray(path: Path, engine: str | None):
    import xarray as xr

    try:
        if engine == "zarr":
            return xr.open_zarr(path, consolidated=None, decode_timedelta=False)
        return xr.open_dataset(path, decode_timedelta=False)
    except Exception as exc:  # xarray raises many kinds for unreadable files
        raise InputError(f"{path}: cannot open as {engine or 'netCDF'}: {exc}") from None


def _step_hours(ds) -> int | None:
    """The time step of a zarr dataset (mllam-data-prep differences are one step)."""
    if "time" not in ds.coords or ds.sizes.get("time", 0) < 2:
        return None
    times = ds["time"].values[:2]
    try:
        hours = (times[1] - times[0]) / np.timedelta64(1, "h")
    except TypeError:
        return None
    return int(hours) if float(hours).is_integer() and hours > 0 else None


def _pick_split(splits: set[str], wanted: str | None, where: str) -> str:
    if wanted is not None:
        if wanted not in splits:
            raise InputError(f"{where}: no statistics for split {wanted!r} (has {sorted(splits)})")
        return wanted
    if "train" in splits or len(splits) == 1:
        return "train" if "train" in splits else next(iter(splits))
    raise InputError(f"{where}: statistics for several splits {sorted(splits)}; choose one")


def _labels(ds, name: str) -> list[str] | None:
    if name not in ds.coords and name not in ds.variables:
        return None
    return [str(v) for v in np.asarray(ds[name].values).reshape(-1)]


def read_xarray(path: Path, split: str | None = None, engine: str | None = None) -> StatsSet:
    """wxstats netCDF, or any dataset with mllam-data-prep ``{cat}__{split}__{op}`` names."""
    ds = _open_xarray(path, engine)
    try:
        found: dict[tuple[str, str], dict[str, str]] = {}
        for var in ds.data_vars:
            match = _VAR_RE.match(str(var))
            if match:
                category, var_split, op = match.groups()
                found.setdefault((category, var_split), {})[op] = str(var)
        if not found:
            raise InputError(
                f"{path}: no statistics variables named like state__train__mean "
                "(is this a statistics file?)"
            )
        chosen = _pick_split({s for _, s in found}, split, str(path))
        is_wxstats = str(ds.attrs.get("title", "")).startswith("wxstats")
        zarr_step = _step_hours(ds) if engine == "zarr" else None
        streams: dict[str, StreamSet] = {}
        for (category, var_split), ops in sorted(found.items()):
            if var_split != chosen:
                continue
            dim = f"{category}_feature"
            stream = StreamSet(category, _labels(ds, dim), _labels(ds, f"{dim}_units"))
            for op in VALUE_OPS:
                if op in ops:
                    stream.values[op] = _f64(ds[ops[op]].values)
            diff_vars = {op[5:]: v for op, v in ops.items() if op.startswith("diff_")}
            if diff_vars:
                some = ds[next(iter(diff_vars.values()))]
                if "diff_step" in some.dims:
                    steps = [int(s) for s in ds["diff_step"].values]
                    for i, step in enumerate(steps):
                        stream.diff[step] = {
                            op: _f64(ds[v].isel(diff_step=i).values)
                            for op, v in diff_vars.items()
                            if op in DIFF_OPS
                        }
                else:
                    stream.diff[zarr_step] = {
                        op: _f64(ds[v].values) for op, v in diff_vars.items() if op in DIFF_OPS
                    }
            _check_lengths(stream, str(path))
            _complete_diffs(stream)
            streams[category] = stream
        try:
            stored = json.loads(ds.attrs.get("warnings", "[]"))
        except (TypeError, ValueError):
            stored = []
        order = ("state", "forcing", "static")
        streams = {c: streams[c] for c in sorted(streams, key=order.index)}
        kind = "wxstats-netcdf" if is_wxstats else ("mllam-zarr" if engine == "zarr" else "netcdf")
        attrs = {k: ds.attrs[k] for k in ds.attrs if isinstance(ds.attrs[k], (str, int, float))}
        return StatsSet(Path(path), kind, chosen, streams, list(stored), attrs)
    finally:
        ds.close()


# -- the JSON summary --------------------------------------------------------
def _floats(values: list, where: str, what: str) -> np.ndarray:
    try:
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {what} is not a list of numbers") from None


def read_summary(path: Path) -> StatsSet:
    """The JSON written by ``wxstats compute --summary``."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON summary: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
        raise InputError(f"{path}: not a wxstats JSON summary (no 'state' section)")
    state = StreamSet("state", data.get("variables"), data.get("units"))
    for op in VALUE_OPS:
        if op in data["state"]:
            state.values[op] = _floats(data["state"][op], where, f"state.{op}")
    for step, ops in (data.get("diff") or {}).items():
        try:
            key = int(step)
        except ValueError:
            raise InputError(f"{path}: diff step {step!r} is not an integer") from None
        state.diff[key] = {
            op: _floats(v, where, f"diff.{step}.{op}") for op, v in ops.items() if op in DIFF_OPS
        }
    _check_lengths(state, where)
    _complete_diffs(state)
    streams = {"state": state}
    forcing = data.get("forcing") or {}
    if forcing:
        names = list(forcing)
        stream = StreamSet("forcing", names, None)
        for op in VALUE_OPS:
            if all(op in forcing[n] for n in names):
                stream.values[op] = _floats([forcing[n][op] for n in names], where, op)
        streams["forcing"] = stream
    source = data.get("source") or {}
    return StatsSet(
        Path(path), "wxstats-summary", source.get("split"), streams, list(data.get("warnings", []))
    )


# -- neural-lam static/ -----------------------------------------------------
def _load_pt(path: Path) -> np.ndarray:
    import torch

    try:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for bad files
        raise InputError(f"{path}: not a readable torch tensor file: {exc}") from None
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != 1:
        raise InputError(f"{path}: expected a 1-D tensor (one value per variable)")
    return tensor.detach().to(torch.float64).numpy()


def _datastore_config(static: Path, n_vars: int) -> dict[str, Any] | None:
    """The ``dataset`` section of a datastore YAML beside ``static/`` listing n_vars names."""
    import yaml

    for candidate in sorted(static.parent.glob("*.y*ml")):
        try:
            config = yaml.safe_load(candidate.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        dataset = (config or {}).get("dataset") if isinstance(config, dict) else None
        if isinstance(dataset, dict) and len(dataset.get("var_names") or []) == n_vars:
            return dataset
    return None


def read_neurallam_static(static: Path) -> StatsSet:
    """A neural-lam ``static/`` folder (float32 ``.pt`` files, widened exactly)."""
    missing = [n for n in NEURALLAM_FILES.values() if not (static / n).is_file()]
    if missing:
        raise InputError(f"{static}: not a neural-lam static folder: missing {', '.join(missing)}")
    arrays = {op: _load_pt(static / name) for op, name in NEURALLAM_FILES.items()}
    n_vars = len(arrays["mean"])
    dataset = _datastore_config(static, n_vars)
    names = units = None
    step: int | None = None
    if dataset is not None:
        names = [str(v) for v in dataset["var_names"]]
        if dataset.get("var_units") and len(dataset["var_units"]) == n_vars:
            units = [str(u) if u is not None else "" for u in dataset["var_units"]]
        match = re.fullmatch(r"(?:PT)?(\d+)\s*[hH]?", str(dataset.get("step_length", "")))
        step = int(match.group(1)) if match else None
    state = StreamSet("state", names, units)
    state.values = {"mean": arrays["mean"], "std": arrays["std"]}
    state.diff[step] = {
        "mean_standardized": arrays["mean_standardized"],
        "std_standardized": arrays["std_standardized"],
    }
    _check_lengths(state, str(static))
    _complete_diffs(state)
    streams = {"state": state}
    if (static / FLUX_FILE).is_file():
        flux = _load_pt(static / FLUX_FILE)
        if len(flux) != 2:
            raise InputError(f"{static / FLUX_FILE}: expected [mean, std], got {len(flux)} values")
        streams["forcing"] = StreamSet(
            "forcing", [FLUX_NAME], None, {"mean": flux[:1], "std": flux[1:]}
        )
    return StatsSet(static, "neural-lam-static", None, streams)


# -- dispatch ----------------------------------------------------------------
def _is_zarr(path: Path) -> bool:
    return path.suffix == ".zarr" or any(
        (path / marker).exists() for marker in ("zarr.json", ".zgroup", ".zmetadata")
    )


def read_stats(path: str | Path, split: str | None = None) -> StatsSet:
    """Read any supported statistics set (see module docstring); a clear error otherwise.

    ``path`` may be a ``.nc`` file, a ``.json`` summary, a ``.zarr`` store, a
    neural-lam ``static/`` folder, the datastore folder holding it, or the
    datastore YAML itself.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_dir():
        if _is_zarr(path):
            return read_xarray(path, split, engine="zarr")
        if (path / NEURALLAM_FILES["mean"]).exists():
            return read_neurallam_static(path)
        if (path / "static" / NEURALLAM_FILES["mean"]).exists():
            return read_neurallam_static(path / "static")
        if (path / "wxstats_stats.nc").exists():
            return read_xarray(path / "wxstats_stats.nc", split)
        raise InputError(
            f"{path}: no statistics here (expected a zarr store, a neural-lam static/ "
            "folder with parameter_mean.pt, or wxstats_stats.nc)"
        )
    if path.suffix == ".json":
        return read_summary(path)
    if path.suffix in (".yaml", ".yml"):
        static = path.parent / "static"
        if (static / NEURALLAM_FILES["mean"]).exists():
            return read_neurallam_static(static)
        raise InputError(f"{path}: no neural-lam statistics in {static} (run wxstats compute)")
    return read_xarray(path, split)
