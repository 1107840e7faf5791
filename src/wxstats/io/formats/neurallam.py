"""neural-lam's statistics files in ``static/``: written here, and read back.

``parameter_mean.pt``, ``parameter_std.pt``, ``diff_mean.pt``, ``diff_std.pt``
(differences on the standardized scale), ``flux_stats.pt`` (``[mean, std]``):
float32 tensors, the bytes ``torch.save`` writes, produced without importing
torch (seconds: see :mod:`wxstats.io.formats.ptfile`) and loadable with
``weights_only=True``; ``parameter_weights.npy``: float32, one weight per
variable from its vertical level. :func:`read_neurallam_static` reads such a
folder (names, units and step length from the datastore YAML beside it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import MEPS_FLUX
from wxstats.core.errors import InputError, WxstatsError
from wxstats.core.stats import DiffStats, Stats, StreamStats
from wxstats.core.streams import StreamLayout
from wxstats.core.untrusted import UntrustedInput, check_tensor_file, load_tensor, load_yaml
from wxstats.io.atomic import Writer
from wxstats.io.formats.ptfile import tensor_bytes
from wxstats.io.formats.stored import PT_DTYPE, check_stored, divisor_std

DEFAULT_LEVEL_WEIGHTS: dict[str, float] = {
    "2": 1.0,
    "0": 0.1,
    "65": 0.065,
    "1000": 0.1,
    "850": 0.05,
    "500": 0.03,
}
"""The weights of neural-lam's original ``create_parameter_weights``."""

TENSOR_FILES = {
    "mean": "parameter_mean.pt",
    "std": "parameter_std.pt",
    "mean_standardized": "diff_mean.pt",
    "std_standardized": "diff_std.pt",
}
"""The state statistics and the file each is in (differences on the standardized scale)."""
FLUX_FILE = "flux_stats.pt"
WEIGHTS_FILE = "parameter_weights.npy"
NEURALLAM_FILES = (*TENSOR_FILES.values(), FLUX_FILE, WEIGHTS_FILE)


def parse_level_weights(text: str) -> dict[str, float]:
    """``LEVEL=WEIGHT,...`` as a map; every weight finite, at least 0, within
    float32 (the type of ``parameter_weights.npy``), every level once: neural-lam
    multiplies its loss by these numbers, a NaN or negative one silently
    poisons or inverts the training."""
    weights: dict[str, float] = {}
    for item in text.split(","):
        level, sep, value = (part.strip() for part in item.partition("="))
        try:
            weight = float(value) if sep and level else None
        except ValueError:
            weight = None
        if weight is None:
            raise WxstatsError(f"expects LEVEL=WEIGHT,... (got {item!r})")
        if level in weights:
            raise WxstatsError(f"level {level!r} is given twice")
        weights[level] = _checked_weight(level, weight)
    return weights


def _checked_weight(level: str, weight: float) -> float:
    # a Python float against a Python float: 1e39 must not be cast to float32 (a
    # RuntimeWarning "overflow encountered in cast" before the refusal)
    if not (0.0 <= weight <= float(np.finfo(np.float32).max)):
        raise WxstatsError(
            f"the weight of level {level!r} is {weight}; a loss weight must be a finite number >= 0"
        )
    return weight


def parameter_weights(levels: list[str], names: list[str], weights: dict[str, float]) -> np.ndarray:
    for level, weight in weights.items():
        _checked_weight(level, weight)
    pairs = zip(names, levels, strict=True)
    missing = [f"{n} (level {lv!r})" for n, lv in pairs if lv not in weights]
    if missing:
        raise WxstatsError(
            f"no loss weight for the level of {', '.join(missing)}; "
            "add it with --level-weights LEVEL=WEIGHT,..."
        )
    return np.array([weights[lv] for lv in levels], dtype=np.float32)


def _tensor_writer(values: np.ndarray) -> Writer:
    data = tensor_bytes(np.asarray(values, dtype=np.float32))

    def write(path: Path) -> None:
        with open(path, "wb") as f:
            f.write(data)

    return write


def _npy_writer(values: np.ndarray) -> Writer:
    def write(path: Path) -> None:
        with open(path, "wb") as f:
            np.save(f, values)

    return write


def neurallam_outputs(
    stats: Stats,
    static_dir: Path,
    step: int,
    flux_name: str,
    levels: list[str],
    level_weights: dict[str, float],
    min_std: float | None = None,
) -> dict[Path, Writer]:
    """Writers of the six neural-lam files, keyed by final path. Every std
    neural-lam divides by goes through :func:`divisor_std`; the standardized
    differences are on the scale of the std written."""
    state = stats.state
    if step not in state.diff:
        raise WxstatsError(f"no difference statistics for step {step}: cannot write diff_*.pt")
    names = state.features
    std = divisor_std(state.std, names, min_std, str(static_dir / TENSOR_FILES["std"]))
    diff_mean, diff_std = state.standardized_diff(step)
    floored = std != state.std
    if floored.any():
        d = state.diff[step]
        diff_mean = np.where(floored, d.mean / std, diff_mean)
        diff_std = np.where(floored, d.std / std, diff_std)
    where = str(static_dir / TENSOR_FILES["std_standardized"])
    diff_std = divisor_std(diff_std, names, min_std, f"{where} (differences over step {step})")
    flux = stats.streams[flux_name]
    flux_std = divisor_std(flux.std[:1], [flux_name], min_std, str(static_dir / FLUX_FILE))
    weights = parameter_weights(levels, state.features, level_weights)
    values = {"mean": state.mean, "std": std}
    values.update(mean_standardized=diff_mean, std_standardized=diff_std)
    for op, name in TENSOR_FILES.items():
        check_stored(values[op], PT_DTYPE, names, str(static_dir / name))
    flux_values = np.array([flux.mean[0], flux_std[0]])
    check_stored(flux_values, PT_DTYPE, ["mean", "std"], f"{static_dir / FLUX_FILE} {flux_name}")
    outputs = {static_dir / name: _tensor_writer(values[op]) for op, name in TENSOR_FILES.items()}
    outputs[static_dir / FLUX_FILE] = _tensor_writer(flux_values)
    outputs[static_dir / WEIGHTS_FILE] = _npy_writer(weights)
    return outputs


# -- reading ------------------------------------------------------------------------
def _load_pt(path: Path) -> np.ndarray:
    """A 1-D tensor file's values: read without torch where
    :func:`~wxstats.io.formats.ptfile.tensor_values` knows the file (ours, and
    neural-lam's own), else by ``torch.load`` (weights only), which is refused
    in one line where torch is not installed (an extra)."""
    from wxstats.io.formats.ptfile import CallsCode, NotATensor, tensor_values

    check_tensor_file(path)  # its size and records, before any of it is read
    try:
        return tensor_values(path.read_bytes())
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    except CallsCode as exc:  # no torch.load either: say so, and never advise one
        raise InputError(f"{path}: refused: {exc} (wxstats runs no file's code)") from None
    except NotATensor as exc:
        unknown = exc
    try:
        import torch
    except ImportError:
        raise InputError(
            f"{path}: not a 1-D tensor file wxstats reads without torch ({unknown}); "
            "pip install 'wxstats[torch]' to read it with torch.load"
        ) from None
    tensor = load_tensor(path)
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != 1:
        raise InputError(f"{path}: expected a 1-D tensor (one value per variable)")
    return tensor.detach().to(torch.float64).numpy()


def _datastore_config(static: Path, n_vars: int) -> dict[str, Any] | None:
    """The ``dataset`` section of a datastore YAML beside ``static/`` listing n_vars names."""
    for candidate in sorted(static.parent.glob("*.y*ml")):
        try:
            config = load_yaml(candidate)
        except (OSError, UntrustedInput):
            continue
        dataset = (config or {}).get("dataset") if isinstance(config, dict) else None
        if isinstance(dataset, dict) and len(dataset.get("var_names") or []) == n_vars:
            return dataset
    return None


def is_neurallam_static(folder: Path) -> bool:
    """Any of neural-lam's statistics files is there: the folder is one, and
    :func:`read_neurallam_static` names what it lacks (another file in it, such
    as ``wxstats_stats.nc``, must not be read in its place)."""
    return any((folder / name).is_file() for name in (*TENSOR_FILES.values(), FLUX_FILE))


def _same_lengths(static: Path, arrays: dict[str, np.ndarray]) -> int:
    """The number of variables, when every state file holds one value each; else
    refused naming the files that disagree with the most of the others."""
    by_length: dict[int, list[str]] = {}
    for op, array in arrays.items():
        by_length.setdefault(len(array), []).append(TENSOR_FILES[op])
    if len(by_length) == 1:
        return next(iter(by_length))
    groups = sorted(by_length.items(), key=lambda item: -len(item[1]))
    (n_most, most), others = groups[0], groups[1:]

    def have(names: list[str]) -> str:
        return f"{', '.join(names)} {'has' if len(names) == 1 else 'have'}"

    odd = "; ".join(f"{have(names)} {n} values" for n, names in others)
    raise InputError(
        f"{static}: {odd} where {have(most)} {n_most}: each file holds one value per variable"
    )


def _recorded_step(static: Path) -> int | None:
    """The difference step (hours) recorded in the ``wxstats_stats.nc`` a MEPS
    run writes beside the ``.pt`` files; None without one."""
    path = static / "wxstats_stats.nc"
    if not path.is_file():
        return None
    import xarray as xr

    try:
        with xr.open_dataset(path) as ds:
            steps = np.asarray(ds["diff_step"].values) if "diff_step" in ds.coords else []
    except (OSError, ValueError):
        return None  # read on its own (wxstats report), it says what is wrong
    return int(steps[0]) if len(steps) == 1 else None


def read_neurallam_static(static: Path) -> Stats:
    """A neural-lam ``static/`` folder (float32 ``.pt`` files, widened exactly)."""
    missing = [n for n in TENSOR_FILES.values() if not (static / n).is_file()]
    if missing:
        raise InputError(
            f"{static / missing[0]}: missing: a neural-lam static folder has "
            f"{', '.join(TENSOR_FILES.values())} (missing: {', '.join(missing)})"
        )
    arrays = {op: _load_pt(static / name) for op, name in TENSOR_FILES.items()}
    n_vars = _same_lengths(static, arrays)
    dataset = _datastore_config(static, n_vars)
    names: list[str] | None = None
    units = [""] * n_vars
    step: int | None = None
    if dataset is not None:
        names = [str(v) for v in dataset["var_names"]]
        if dataset.get("var_units") and len(dataset["var_units"]) == n_vars:
            units = [str(u) if u is not None else "" for u in dataset["var_units"]]
        match = re.fullmatch(r"(?:PT)?(\d+)\s*[hH]?", str(dataset.get("step_length", "")))
        step = int(match.group(1)) if match else None
    # the step of the run that wrote the folder (--step-length may differ from the YAML's)
    step = _recorded_step(static) or step
    std = arrays["std"]
    tag = f"diff{step if step is not None else ''}"
    state = StreamStats(
        name="state",
        features=names if names is not None else [f"#{i}" for i in range(n_vars)],
        units=units,
        mean=arrays["mean"],
        std=std,
        diff={
            step: DiffStats(
                mean=arrays["mean_standardized"] * std,
                std=arrays["std_standardized"] * std,
                mean_standardized=arrays["mean_standardized"],
                std_standardized=arrays["std_standardized"],
            )
        },
        layout=StreamLayout(variable="state", split="", role="state"),
        named=names is not None,
        derived={f"{tag} mean", f"{tag} std"},
        diff_span={step: step * 3600} if step is not None else {},  # MEPS steps are hours
    )
    streams = {"state": state}
    if (static / FLUX_FILE).is_file():
        flux = _load_pt(static / FLUX_FILE)
        if len(flux) != 2:
            raise InputError(f"{static / FLUX_FILE}: expected [mean, std], got {len(flux)} values")
        streams["forcing"] = StreamStats(
            name="forcing",
            features=[MEPS_FLUX],
            units=[""],
            mean=flux[:1],
            std=flux[1:],
            layout=StreamLayout(variable="forcing", split="", role="forcing"),
        )
    return Stats("neural-lam-static", streams, origin=str(static))
