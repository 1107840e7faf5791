"""makani / PhysicsNeMo / earth2studio statistics: ``global_means.npy`` and friends
(``--format makani``).

makani's ``data_process/get_stats.py`` writes float32 arrays over channels ``C``
(the dataset's fields in its channel order): ``global_means.npy``,
``global_stds.npy``, ``mins.npy``, ``maxs.npy`` of shape ``(1, C, 1, 1)``,
``time_means.npy`` ``(1, C, H, W)`` (the mean over time of every grid point) and
``time_diff_means_dt{k}.npy`` / ``time_diff_stds_dt{k}.npy`` ``(1, C, 1, 1)`` for
the differences ``x[t+k] - x[t]``. Its global statistics are averages weighted
by a spherical quadrature (the default, ``naive``, is cos(latitude) on an
equiangular grid with both poles), population std (ddof 0): a run writing these
files weights by ``coslat`` unless ``--weights`` says otherwise.

The channels are the run's variables in the order given (``--variables``), each
with its features (levels) in order; ``wxstats_makani.json`` beside the arrays
names them (with units, weights and the run), which makani does not read but
:func:`read_makani` and ``wxstats compare`` do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.errors import InputError
from wxstats.core.stats import DiffStats, Stats, StreamStats, weighting
from wxstats.core.streams import listed_features
from wxstats.core.untrusted import load_npy, read_json
from wxstats.io.atomic import Writer
from wxstats.io.formats.netcdf import recorded_split

VALUE_FILES = {
    "global_means.npy": "mean",
    "global_stds.npy": "std",
    "mins.npy": "minimum",
    "maxs.npy": "maximum",
}
TIME_MEANS = "time_means.npy"
SIDECAR = "wxstats_makani.json"


def diff_files(step: int) -> tuple[str, str]:
    return f"time_diff_means_dt{step}.npy", f"time_diff_stds_dt{step}.npy"


def makani_files(steps: tuple[int, ...]) -> list[str]:
    """Every file a run with these difference steps writes."""
    names = [*VALUE_FILES, TIME_MEANS]
    for k in steps:
        names += diff_files(k)
    return [*names, SIDECAR]


def _npy_writer(array: np.ndarray) -> Writer:
    def write(path: Path) -> None:
        with open(path, "wb") as f:  # a file object: np.save would add .npy to a name
            np.save(f, array)

    return write


def _channels(values: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(values).astype(np.float32).reshape(1, -1, 1, 1)


def makani_outputs(
    stats: Stats, folder: Path, split: str, steps: tuple[int, ...], grid: tuple[int, int]
) -> dict[Path, Writer]:
    """Writers of the makani files of ``split`` (see module docstring); ``grid``
    is ``(H, W)``, the shape the grid points of every field flatten from."""
    streams = [s for s in stats.streams.values() if s.layout and s.layout.split == split]
    out: dict[Path, Writer] = {}
    for name, attr in VALUE_FILES.items():
        out[folder / name] = _npy_writer(_channels([getattr(s, attr) for s in streams]))
    means = [s.time_mean for s in streams]
    if any(m is None for m in means):
        raise InputError("makani's time_means need the per-grid-point sums of the run")
    cube = np.concatenate([m.T for m in means]).astype(np.float32)  # (C, G)
    out[folder / TIME_MEANS] = _npy_writer(cube.reshape(1, -1, *grid))
    for k in steps:
        mean_file, std_file = diff_files(k)
        out[folder / mean_file] = _npy_writer(_channels([s.diff[k].mean for s in streams]))
        out[folder / std_file] = _npy_writer(_channels([s.diff[k].std for s in streams]))
    sidecar = {
        "format": "makani statistics written by wxstats",
        "split": split,
        "channels": [f for s in streams for f in s.features],
        "units": [u for s in streams for u in s.units],
        "diff_steps": list(steps),
        "grid_shape": list(grid),
        "method": f"population statistics (ddof 0), {weighting(stats.attrs)}, float64 "
        "rounded to float32; time_means unweighted per grid point",
        "source": {k: v for k, v in stats.attrs.items() if isinstance(v, (str, int, float))},
        "run": stats.run,
    }
    text = json.dumps(sidecar, indent=1, default=str)

    def write_sidecar(path: Path) -> None:
        path.write_text(text)

    out[folder / SIDECAR] = write_sidecar
    return out


def is_makani(folder: Path) -> bool:
    return (folder / "global_means.npy").is_file() and (folder / "global_stds.npy").is_file()


def _load(path: Path, channels: int | None) -> np.ndarray:
    array = load_npy(path)
    flat = np.asarray(array, dtype=np.float64).reshape(-1)
    if array.ndim != 4 or array.shape[0] != 1 or array.shape[2:] != (1, 1):
        raise InputError(f"{path}: shape {array.shape}, makani's is (1, C, 1, 1)")
    if channels is not None and flat.shape[0] != channels:
        raise InputError(f"{path}: {flat.shape[0]} channels, global_means.npy has {channels}")
    return flat


def read_makani(folder: str | Path, split: str | None = None) -> Stats:
    """A makani statistics folder (wxstats' or makani's own) as :class:`Stats`: one
    ``state`` stream, channels named from ``wxstats_makani.json`` when present, of
    the split it records (``split``, when given, must be it), else of ``split``."""
    folder = Path(folder)
    mean = _load(folder / "global_means.npy", None)
    n = mean.shape[0]
    meta: dict[str, Any] = {}
    if (folder / SIDECAR).is_file():
        meta = read_json(folder / SIDECAR)
        if not isinstance(meta, dict):
            raise InputError(f"{folder / SIDECAR}: not a JSON object of channels and units")
    names = meta.get("channels") or [f"#{i}" for i in range(n)]
    stream = StreamStats(
        name="state",
        features=list(names),
        units=list(meta.get("units") or [""] * n),
        mean=mean,
        std=_load(folder / "global_stds.npy", n),
        named="channels" in meta,
        layout=listed_features(
            "state", recorded_split(meta.get("split"), split, str(folder)), names
        ),
    )
    if (folder / "mins.npy").is_file():
        stream.minimum = _load(folder / "mins.npy", n)
    if (folder / "maxs.npy").is_file():
        stream.maximum = _load(folder / "maxs.npy", n)
    for path in sorted(folder.glob("time_diff_means_dt*.npy")):
        k = int(path.stem.removeprefix("time_diff_means_dt"))
        std_path = folder / diff_files(k)[1]
        if std_path.is_file():
            stream.diff[k] = DiffStats(mean=_load(path, n), std=_load(std_path, n))
    return Stats(
        source_kind="makani",
        streams={"state": stream},
        attrs=dict(meta.get("source") or {}),
        run=dict(meta.get("run") or {}),
        origin=f"{folder} (makani)",
    )
