"""Every declared option, walked through a state: ``compute`` over the first
half of the times with ``--state``, then ``update`` with the second half from
another folder, equals one run over all of it (the statistics file and the
state's numbers, byte for byte), and that run equals a float64 two-pass numpy
reference; or the option is refused in one line naming it (and the state, when
the state is what refuses it).

The walk iterates over the declaration (:data:`wxstats.runtime.options.OPTIONS`):
an option declared without a case here fails the test by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from gridded_data import gridded, write_zarr
from growing import values

from reference import two_pass
from wxstats.cli import main
from wxstats.io.read import read_stats
from wxstats.runtime.options import OPTIONS
from wxstats.runtime.state import State

N = 24
HALF = 12

WALK: dict[str, list[str]] = {
    "splits": ["--split", "fit=2021-01-01/2021-01-02"],
    "period": ["--period", "2021-01-01T02/2021-01-02"],
    "variables": ["--variables", "t2m,z"],
    "time_dim": ["--time-dim", "time"],
    "diff_steps": ["--diff-steps", "1,3"],
    "feature_dims": ["--feature-dims", ""],
    "by": ["--by", "month"],
    "pool": ["--pool", "level"],
    "weights": ["--weights", "area.nc:area"],  # relative: the update runs elsewhere
    "block_mb": ["--block-mb", "0.001"],
    "storage_options": ["--storage-option", "anon=true"],
    "step_length": ["--step-length", "1"],
    "skipna": ["--skipna"],
    "moments": ["--moments", "4"],
    "output_dir": ["--output-dir", "{out}-dir"],
    "summary": ["--summary", "{out}.json"],
    "output": [],  # every run of the walk gives it
    "write_into": ["--write-into"],
    "output_format": ["--format", "netcdf"],
    "overwrite": ["--overwrite"],
    "level_weights": ["--level-weights", "500=1"],
    "min_std": ["--min-std", "1e-6"],
    "checkpoint": ["--checkpoint", "{out}-ck"],
    "checkpoint_interval": ["--checkpoint-interval", "5"],
    "resume": ["--resume"],
    "state": [],  # every run of the walk gives it
    "threads": ["--threads", "1"],
    "nproc": ["--nproc", "1"],
    "backend": ["--backend", "gloo"],
    "device": ["--device", "cpu"],
    "timeout": ["--timeout", "30"],
    "quiet": [],  # every run of the walk gives it
    "log_format": ["--log-format", "json"],
    "log_interval": ["--log-interval", "5"],
}
"""How each option is given in the walk (``{out}``: the run's own output name)."""

COMPUTED = [name for name, decl in OPTIONS.items() if "compute" in decl.commands]


def test_every_option_compute_takes_has_a_walk_case():
    missing = [f"{OPTIONS[n].flag} ({n})" for n in COMPUTED if n not in WALK]
    assert not missing, f"declared options without a walk case: {', '.join(missing)}"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("walk")
    ds, truth = gridded(n_time=N)
    write_zarr(ds, root / "full.zarr", time_chunk=5)
    write_zarr(ds.isel(time=slice(0, HALF)), root / "first.zarr", time_chunk=5)
    write_zarr(ds.isel(time=slice(HALF, N)), root / "rest.zarr", time_chunk=5)
    area = np.random.default_rng(3).uniform(0.5, 2.0, (ds.sizes["y"], ds.sizes["x"]))
    xr.Dataset({"area": (("y", "x"), area)}, coords={"y": ds.y, "x": ds.x}).to_netcdf(
        root / "area.nc"
    )
    return root, truth, area


def _args(case: list[str], out: str) -> list[str]:
    return [a.replace("{out}", out) for a in case]


def _one_line(capsys, *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("wxstats: error: "), err
    for word in words:
        assert word in err, (word, err)


def _numbers(path) -> list[bytes]:
    return [np.ascontiguousarray(a).tobytes() for a in State.read(str(path)).partial.sums.pack()]


def _reference(name: str, truth: dict, area: np.ndarray) -> dict[str, tuple]:
    """(mean, std) per feature of each stream the full run writes, by the
    textbook two-pass formula over the raw float64 values, for the option walked."""
    steps = slice(2, N) if name == "period" else slice(0, N)
    chosen = ("t2m", "z") if name == "variables" else ("t2m", "z", "msl")
    split = "fit" if name == "splits" else "train"
    out = {}
    for var in chosen:
        x = truth[var][steps]  # (time, y, x, features)
        if name == "feature_dims":
            x = x.reshape(*x.shape[:3], 1, -1).transpose(0, 1, 2, 4, 3).reshape(x.shape[0], -1, 1)
        x = x.reshape(x.shape[0], -1, x.shape[-1])
        if name == "weights":
            w = np.broadcast_to(area.reshape(1, -1, 1), x.shape)
            mean = (w * x).sum(axis=(0, 1)) / w.sum(axis=(0, 1))
            std = np.sqrt((w * (x - mean) ** 2).sum(axis=(0, 1)) / w.sum(axis=(0, 1)))
        else:
            mean, std = two_pass(x.reshape(-1, x.shape[-1]), 0)
        out[f"{var}__{split}"] = (mean, std)
        if name == "pool" and x.shape[-1] > 1:
            out[f"{var}_pooled__{split}"] = two_pass(x.reshape(-1), 0)
    return out


def _matches(path, expected: dict[str, tuple], by: bool) -> None:
    """``by``: the statistics per month, of which the data has one, January (the first)."""
    stats = read_stats(path)
    for stream, (mean, std) in expected.items():
        got = stats.streams[stream]
        means, stds = np.asarray(got.mean), np.asarray(got.std)
        if by:  # features by month (z_1_500, z_1_850, z_2_500...): January's first
            means, stds = means[: np.size(mean)], stds[: np.size(mean)]
        np.testing.assert_allclose(np.ravel(means), np.ravel(mean), rtol=1e-10, err_msg=stream)
        np.testing.assert_allclose(np.ravel(stds), np.ravel(std), rtol=1e-9, err_msg=stream)


@pytest.mark.parametrize("name", COMPUTED)
def test_compute_then_update_is_the_full_run(data, tmp_path, monkeypatch, capsys, name):
    root, truth, area = data
    decl = OPTIONS[name]
    case = WALK[name]
    monkeypatch.chdir(root)  # a relative path given to compute is the data folder's
    full, piece = tmp_path / "full", tmp_path / "p0"
    base = ["--diff-steps", "1,3"] if name != "diff_steps" else []
    run = ["--quiet", *base]
    code = main(["compute", "full.zarr", "--output", f"{full}.nc", *_args(case, str(full)), *run])
    if code != 0:  # refused for this data whatever the state: in one line naming it
        _one_line(capsys, decl.flag)
        return
    _matches(f"{full}.nc", _reference(name, truth, area), by=name == "by")
    cmd = ["compute", "first.zarr", "--state", f"{piece}.wxstate", "--output", f"{piece}.nc"]
    if main([*cmd, *_args(case, str(piece)), *run]) != 0:  # a state cannot keep it
        _one_line(capsys, decl.flag, "--state")
        return
    whole = tmp_path / "fs"
    cmd = ["compute", "full.zarr", "--state", f"{whole}.wxstate", "--output", f"{whole}.nc"]
    assert main([*cmd, *_args(case, str(whole)), *run]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the update runs in another folder
    grown = tmp_path / "p1"
    again = _args(case, str(grown)) if "update" in decl.commands else []
    cmd = ["update", f"{piece}.wxstate", str(root / "rest.zarr"), "--state", f"{grown}.wxstate"]
    if main([*cmd, "--output", f"{grown}.nc", *again, "--quiet"]) != 0:
        _one_line(capsys, decl.flag, f"{piece}.wxstate")
        return
    assert values(f"{grown}.nc") == values(f"{full}.nc")
    assert _numbers(f"{grown}.wxstate") == _numbers(f"{whole}.wxstate")


def test_update_of_a_state_whose_weights_file_is_gone_names_the_state(data, tmp_path, capsys):
    """A recorded file that is gone: one line naming the state and what it records."""
    root, _, area = data
    copy = tmp_path / "area.nc"
    copy.write_bytes((root / "area.nc").read_bytes())
    state = tmp_path / "p0.wxstate"
    cmd = ["compute", str(root / "first.zarr"), "--state", str(state), "--quiet"]
    assert main([*cmd, "--weights", f"{copy}:area"]) == 0
    copy.unlink()
    cmd = ["update", str(state), str(root / "rest.zarr"), "--output", str(tmp_path / "p1.nc")]
    assert main(cmd) == 2
    _one_line(capsys, f"{state} records --weights {copy}:area, not found")
