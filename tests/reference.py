"""Independent float64 two-pass reference statistics, written for the tests only.

Nothing here imports wxstats' computing code: it loads the raw files with
numpy, widens to float64 and applies the textbook definitions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml


def two_pass(values: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray]:
    """(mean, population std) in float64 by the two-pass formula."""
    v = np.asarray(values, dtype=np.float64)
    mean = v.mean(axis=axis)
    centred = v - np.expand_dims(mean, axis) if np.ndim(axis) == 0 else v - mean
    return mean, np.sqrt((centred * centred).mean(axis=axis))


def meps_reference(config_path: Path, split: str = "train", step: int | None = None) -> dict:
    """The DESIGN.md §1 definitions, applied directly to the MEPS files."""
    config = yaml.safe_load(Path(config_path).read_text())
    ds = config["dataset"]
    step = step or int(ds["step_length"])
    folder = Path(config_path).parent / "samples" / split
    files = sorted(p for p in folder.glob("nwp_*_mbr*.npy"))
    removed = set(ds.get("remove_state_features_with_index") or [])
    states, fluxes, diffs = [], [], []
    for path in files:
        x = np.load(path).astype(np.float64)
        keep = [c for c in range(x.shape[-1]) if c not in removed]
        x = x[..., keep]
        t_len = x.shape[0]
        x = x.reshape(t_len, -1, x.shape[-1])
        states.append(x)
        used = (t_len // step) * step
        later = np.arange(step, used)
        diffs.append(x[later] - x[later - step])
        stamp = path.name.split("_")[1]
        flux = np.load(folder / f"nwp_toa_downwelling_shortwave_flux_{stamp}.npy")
        fluxes.append(flux.astype(np.float64)[2:].ravel())
    state = np.concatenate(states).reshape(-1, states[0].shape[-1])
    diff = np.concatenate(diffs).reshape(-1, states[0].shape[-1])
    flux = np.concatenate(fluxes)
    mean, std = two_pass(state, 0)
    diff_mean, diff_std = two_pass(diff, 0)
    flux_mean, flux_std = two_pass(flux, 0)
    return {
        "count": state.shape[0],
        "mean": mean,
        "std": std,
        "min": state.min(axis=0),
        "max": state.max(axis=0),
        "diff_count": diff.shape[0],
        "diff_mean": diff_mean,
        "diff_std": diff_std,
        "flux": (flux.size, flux_mean, flux_std),
        "step": step,
        "names": list(ds["var_names"]),
    }


def assert_close(actual, expected, rtol: float = 1e-10, what: str = "") -> None:
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    scale = np.maximum(np.abs(expected), np.finfo(np.float64).tiny)
    rel = np.abs(actual - expected) / scale
    assert np.all(rel <= rtol), f"{what}: max relative error {rel.max():.3g} > {rtol}"


def fixed(block, shift, scale, dshift, dscale):
    """One shift and scale per feature (and per lag) for every step of ``block``:
    the kernel's sums are then comparable with numpy's over the whole block."""
    from wxstats.core.kernel import StepReferences

    n_t = block.array.shape[0]

    def rows(v):
        return np.tile(np.asarray(v, dtype=np.float64), (n_t, 1))

    return StepReferences(
        rows(shift),
        rows(scale),
        {k: rows(v) for k, v in dshift.items()},
        {k: rows(v) for k, v in dscale.items()},
    )


def block_sums_numpy(block, refs):
    """The definitions :func:`wxstats.core.kernel.block_sums` computes, in plain
    float64 numpy over the whole block (any order: close, not the same bits), with
    the references ``refs``: the kernel's sums are checked against these."""
    from wxstats.core.kernel import BlockSums

    lags = sorted(block.diff_ranges)
    a = np.asarray(block.array)[:, :, block.channels].astype(np.float64)
    weighted = block.weights is not None
    w = np.asarray(block.weights if weighted else np.ones(a.shape[1]), dtype=np.float64)
    w = w[None, :, None]
    out = BlockSums.empty(a.shape[0], a.shape[2], lags, weighted, refs)
    t0, t1 = block.value_range
    values = a[t0:t1]
    nan = np.isnan(values)
    inf = np.isinf(values)
    finite = ~(nan | inf)
    shift, scale = refs.shift[t0:t1, None, :], refs.scale[t0:t1, None, :]
    y = np.where(finite, (values - shift) / scale, 0.0)
    out.step_count[t0:t1] = finite.sum(axis=1)
    out.step_sum1[t0:t1] = (w * y).sum(axis=1)
    out.step_sum2[t0:t1] = (w * y * y).sum(axis=1)
    if weighted:
        out.step_weight[t0:t1] = np.where(finite, w, 0.0).sum(axis=1)
    out.nan_count[:] = nan.sum(axis=(0, 1))
    out.inf_count[:] = inf.sum(axis=(0, 1))
    if finite.any():
        out.minimum[:] = np.where(finite, values, np.inf).min(axis=(0, 1))
        out.maximum[:] = np.where(finite, values, -np.inf).max(axis=(0, 1))
    for k in lags:
        d0, d1 = block.diff_ranges[k]
        d0 = max(d0, k)
        if d1 <= d0:
            continue
        d = a[d0:d1] - a[d0 - k : d1 - k]
        ok = np.isfinite(d)
        dshift, dscale = refs.diff_shift[k][d0:d1, None, :], refs.diff_scale[k][d0:d1, None, :]
        yd = np.where(ok, (d - dshift) / dscale, 0.0)
        out.diff_step_count[k][d0:d1] = ok.sum(axis=1)
        out.diff_step_sum1[k][d0:d1] = (w * yd).sum(axis=1)
        out.diff_step_sum2[k][d0:d1] = (w * yd * yd).sum(axis=1)
        if weighted:
            out.diff_step_weight[k][d0:d1] = np.where(ok, w, 0.0).sum(axis=1)
        if ok.any():
            out.diff_minimum[k][:] = np.where(ok, d, np.inf).min(axis=(0, 1))
            out.diff_maximum[k][:] = np.where(ok, d, -np.inf).max(axis=(0, 1))
    return out
