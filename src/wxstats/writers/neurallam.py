"""The files neural-lam's MEPS datastore loads from ``static/``.

``parameter_mean.pt``, ``parameter_std.pt``, ``diff_mean.pt``, ``diff_std.pt``
(differences on the standardized scale), ``flux_stats.pt`` (``[mean, std]``):
float32 tensors saved with ``torch.save`` (torch itself writes its format; its
import is overlapped with the computation, see :mod:`wxstats.preload`) and
loadable with ``weights_only=True``; ``parameter_weights.npy``: float32, one weight per
variable from its vertical level.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wxstats.atomic import Writer
from wxstats.errors import WxstatsError
from wxstats.stats import Stats

DEFAULT_LEVEL_WEIGHTS: dict[str, float] = {
    "2": 1.0,
    "0": 0.1,
    "65": 0.065,
    "1000": 0.1,
    "850": 0.05,
    "500": 0.03,
}
"""The weights of neural-lam's original ``create_parameter_weights``."""

NEURALLAM_FILES = (
    "parameter_mean.pt",
    "parameter_std.pt",
    "diff_mean.pt",
    "diff_std.pt",
    "flux_stats.pt",
    "parameter_weights.npy",
)


def parameter_weights(levels: list[str], names: list[str], weights: dict[str, float]) -> np.ndarray:
    pairs = zip(names, levels, strict=True)
    missing = [f"{n} (level {lv!r})" for n, lv in pairs if lv not in weights]
    if missing:
        raise WxstatsError(
            f"no loss weight for the level of {', '.join(missing)}; "
            "add it with --level-weights LEVEL=WEIGHT,..."
        )
    return np.array([weights[lv] for lv in levels], dtype=np.float32)


def _tensor_writer(values: np.ndarray) -> Writer:
    def write(path: Path) -> None:
        import torch

        with open(path, "wb") as f:
            torch.save(torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)), f)

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
) -> dict[Path, Writer]:
    """Writers of the six neural-lam files, keyed by final path."""
    state = stats.state
    if step not in state.diff:
        raise WxstatsError(f"no difference statistics for step {step}: cannot write diff_*.pt")
    diff_mean, diff_std = state.standardized_diff(step)
    flux = stats.streams[flux_name]
    weights = parameter_weights(levels, state.features, level_weights)
    return {
        static_dir / "parameter_mean.pt": _tensor_writer(state.mean),
        static_dir / "parameter_std.pt": _tensor_writer(state.std),
        static_dir / "diff_mean.pt": _tensor_writer(diff_mean),
        static_dir / "diff_std.pt": _tensor_writer(diff_std),
        static_dir / "flux_stats.pt": _tensor_writer(np.array([flux.mean[0], flux.std[0]])),
        static_dir / "parameter_weights.npy": _npy_writer(weights),
    }
