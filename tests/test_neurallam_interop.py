"""wxstats' files through neural-lam's own code (the interoperability tier).

Runs neural-lam in its own environment (``scripts/neural-lam-env.sh``, which
``.ci/run`` calls and exports as ``WXSTATS_NEURALLAM_PYTHON``): its MEPS
datastore must serve exactly our values, and its own statistics script must
agree with ours within its float32 error while we agree with the float64
reference.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from reference import meps_reference
from wxstats.cli import main
from wxstats.io.formats.ptfile import tensor_values
from wxstats.tools.example import ExampleSpec, write_example

NEURALLAM_PYTHON = os.environ.get("WXSTATS_NEURALLAM_PYTHON")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not NEURALLAM_PYTHON,
        reason="neural-lam environment not set up: run scripts/neural-lam-env.sh and export "
        "WXSTATS_NEURALLAM_PYTHON (.ci/run does)",
    ),
]

SERVE_SCRIPT = """
import json, os, sys
from neural_lam.datastore.npyfilesmeps import NpyFilesDatastoreMEPS
served = []
for config in sys.argv[1:]:  # each datastore from its own folder, one start for all
    os.chdir(os.path.dirname(config))
    ds = NpyFilesDatastoreMEPS(config_path=config)
    state = ds.get_standardization_dataarray(category="state")
    forcing = ds.get_standardization_dataarray(category="forcing")
    out = {k: state[k].values.astype(float).tolist() for k in state.data_vars}
    out["state_feature"] = [str(v) for v in state["state_feature"].values]
    out["forcing_mean"] = forcing["forcing_mean"].values.astype(float).tolist()
    out["forcing_std"] = forcing["forcing_std"].values.astype(float).tolist()
    served.append(out)
print("JSON" + json.dumps(served))
"""


@pytest.fixture(scope="module")
def tiny_meps(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nl")
    config = write_example(root, ExampleSpec(analysis_times=2, grid=(8, 10)))
    assert main(["compute", str(config), "--quiet"]) == 0
    return config


@pytest.fixture(scope="module")
def constant_meps(tiny_meps, tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A copy whose pres_0g is constant over the split, computed with --min-std
    (refused without it); and that constant field."""
    copy = tmp_path_factory.mktemp("nl_constant") / "copy"
    shutil.copytree(tiny_meps.parent, copy)
    config = copy / tiny_meps.name
    constant = []
    for path in (copy / "samples" / "train").glob("nwp_*_mbr*.npy"):
        x = np.load(path)
        x[..., 0] = 1000.0  # pres_0g constant over the split
        np.save(path, x)
        constant.append(x[..., 0].astype(np.float64))
    assert main(["compute", str(config), "--quiet", "--overwrite"]) == 2  # refused: std 0
    assert main(["compute", str(config), "--quiet", "--overwrite", "--min-std", "1e-6"]) == 0
    return config, np.concatenate(constant)


@pytest.fixture(scope="module")
def served(tiny_meps, constant_meps) -> dict[Path, dict]:
    """What neural-lam's MEPS datastore serves for each dataset, read by one process
    (its start, importing neural-lam and torch, is most of the time)."""
    configs = [tiny_meps, constant_meps[0]]
    out = _neural_lam("-c", SERVE_SCRIPT, *map(str, configs), cwd=tiny_meps.parent)
    return dict(zip(configs, json.loads(out.split("JSON", 1)[1]), strict=True))


def _neural_lam(*args: str, cwd: Path) -> str:
    result = subprocess.run(
        [NEURALLAM_PYTHON, *args], capture_output=True, text=True, cwd=cwd, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_neural_lam_datastore_serves_our_values(tiny_meps, served):
    served = served[tiny_meps]
    static = tiny_meps.parent / "static"

    def ours(name):
        return torch.load(static / name, weights_only=True).numpy().astype(float).tolist()

    assert served["state_feature"][:2] == ["pres_0g", "pres_0s"]
    assert served["state_mean"] == ours("parameter_mean.pt")
    assert served["state_std"] == ours("parameter_std.pt")
    assert served["state_diff_mean_standardized"] == ours("diff_mean.pt")
    assert served["state_diff_std_standardized"] == ours("diff_std.pt")
    flux = ours("flux_stats.pt")
    assert served["forcing_mean"][0] == flux[0] and served["forcing_std"][0] == flux[1]


def test_a_constant_field_with_min_std_standardizes_finite_in_neural_lam(constant_meps, served):
    config, constant = constant_meps
    served = served[config]
    assert served["state_std"][0] == np.float32(1e-6)
    for key in ("state_mean", "state_std", "state_diff_mean_standardized"):
        assert np.all(np.isfinite(served[key])), key
    assert np.all(np.asarray(served["state_diff_std_standardized"]) > 0)
    # what neural-lam does with them: (x - mean) / std, 0 for the constant field
    standardized = (constant - served["state_mean"][0]) / served["state_std"][0]
    assert np.all(standardized == 0)


def test_neural_lam_script_agrees_within_its_float32_error(tiny_meps, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_meps.parent, copy)
    for p in (copy / "static").glob("*.pt"):
        p.unlink()
    config = copy / tiny_meps.name
    _neural_lam(
        "-m", "neural_lam.datastore.npyfilesmeps.compute_standardization_stats",
        "--datastore_config_path", str(config), "--batch_size", "4", "--step_length", "3",
        "--n_workers", "0", cwd=copy,
    )  # fmt: skip
    ref = meps_reference(tiny_meps)
    names = ref["names"]
    rows = []
    for name, key, standardized in (
        ("parameter_mean.pt", "mean", False),
        ("parameter_std.pt", "std", False),
        ("diff_mean.pt", "diff_mean", True),
        ("diff_std.pt", "diff_std", True),
    ):
        expected = ref[key] / (ref["std"] if standardized else 1.0)
        scale = np.maximum(np.abs(expected), 1e-12)
        mine = torch.load(tiny_meps.parent / "static" / name, weights_only=True).double().numpy()
        theirs = torch.load(copy / "static" / name, weights_only=True).double().numpy()
        # neural-lam's own files read without torch (report and compare of a base install)
        assert tensor_values((copy / "static" / name).read_bytes()).tobytes() == theirs.tobytes()
        err_mine = np.abs(mine - expected) / scale
        err_theirs = np.abs(theirs - expected) / scale
        rows.append((name, err_mine.max(), err_theirs.max(), int(err_theirs.argmax())))
        # ours: float32 rounding of the float64 value only
        assert err_mine.max() <= 1.2e-7, (name, err_mine.max())
        # neural-lam's float32 E[x²]-E[x]² is off by up to ~1e-3 here; never by more than 1 %
        assert err_theirs.max() <= 1e-2, (name, err_theirs.max())
    flux_mine = torch.load(tiny_meps.parent / "static" / "flux_stats.pt").double().numpy()
    flux_theirs = torch.load(copy / "static" / "flux_stats.pt").double().numpy()
    flux_read = tensor_values((copy / "static" / "flux_stats.pt").read_bytes())
    assert flux_read.tobytes() == flux_theirs.tobytes()
    flux_ref = np.array(ref["flux"][1:])
    assert np.all(np.abs(flux_mine - flux_ref) / flux_ref <= 1.2e-7)
    assert np.all(np.abs(flux_theirs - flux_ref) / flux_ref <= 1e-2)
    print("\nrelative error against the float64 reference (max over variables):")
    print(f"{'file':<20}{'wxstats':>12}{'neural-lam':>12}  worst variable")
    for name, mine_err, their_err, worst in rows:
        print(f"{name:<20}{mine_err:>12.2e}{their_err:>12.2e}  {names[worst]}")
    # the std of surface pressure is where float32 cancellation shows
    std_row = rows[1]
    assert std_row[2] > 10 * std_row[1]


# -- mllam-data-prep store, written into, read by neural-lam's mdp datastore ----------------

MDP_CONFIG = """\
schema_version: v0.5.0
dataset_version: v0.1.0
output:
  variables:
    static: [grid_index, static_feature]
    state: [time, grid_index, state_feature]
    forcing: [time, grid_index, forcing_feature]
  coord_ranges:
    time: {start: 2021-01-01T00:00, end: 2021-01-05T21:00, step: PT3H}
  chunking: {time: 8}
  splitting:
    dim: time
    splits:
      train:
        start: 2021-01-01T00:00
        end: 2021-01-03T21:00
        compute_statistics: {ops: [mean, std, diff_mean, diff_std], dims: [grid_index, time]}
      val: {start: 2021-01-04T00:00, end: 2021-01-04T21:00}
      test: {start: 2021-01-05T00:00, end: 2021-01-05T21:00}
inputs:
  heights:
    path: heights.zarr
    dims: [time, x, y, altitude]
    variables:
      u: {altitude: {values: [100, 200], units: m}}
      v: {altitude: {values: [100, 200], units: m}}
    dim_mapping:
      time: {method: rename, dim: time}
      state_feature:
        method: stack_variables_by_var_name
        dims: [altitude]
        name_format: "{var_name}{altitude}m"
      grid_index: {method: stack, dims: [x, y]}
    target_output_variable: state
  surface:
    path: surface.zarr
    dims: [time, x, y]
    variables: [swavr0m]
    dim_mapping:
      time: {method: rename, dim: time}
      grid_index: {method: stack, dims: [x, y]}
      forcing_feature: {method: stack_variables_by_var_name, name_format: "{var_name}"}
    target_output_variable: forcing
  land:
    path: land.zarr
    dims: [x, y]
    variables: [lsm]
    dim_mapping:
      grid_index: {method: stack, dims: [x, y]}
      static_feature: {method: stack_variables_by_var_name, name_format: "{var_name}"}
    target_output_variable: static
extra:
  projection:
    class_name: LambertConformal
    kwargs: {central_longitude: 25.0, central_latitude: 56.7, standard_parallels: [56.7, 56.7]}
"""

MDP_SERVE = """
import json, sys
from neural_lam.datastore.mdp import MDPDatastore
ds = MDPDatastore(config_path=sys.argv[1])
out = {}
for cat in ("state", "forcing"):
    da = ds.get_standardization_dataarray(category=cat)
    out[cat] = {k: da[k].values.astype(float).tolist() for k in da.data_vars}
    out[cat]["features"] = [str(v) for v in da[f"{cat}_feature"].values]
print("JSON" + json.dumps(out))
"""

TRAIN_STEPS = 24  # 2021-01-01T00 .. 2021-01-03T21 every 3 h


def _mdp_inputs(root: Path) -> dict[str, np.ndarray]:
    """Input zarrs for mllam-data-prep; returns the raw fields for the reference."""
    import pandas as pd
    import xarray as xr

    times = pd.date_range("2021-01-01T00", periods=40, freq="3h")
    x, y = np.arange(12) * 2500.0, np.arange(10) * 2500.0
    rng = np.random.default_rng(11)
    steps = np.arange(40)[:, None, None, None]
    u = (5 + 3 * np.sin(steps / 5) + rng.standard_normal((40, 12, 10, 2))).astype("float32")
    v = (1e5 + 300 * np.cos(steps / 7) + 50 * rng.standard_normal((40, 12, 10, 2))).astype(
        "float32"
    )
    hours = (np.arange(40) * 3) % 24
    sw = 800 * np.sin(2 * np.pi * hours / 24)[:, None, None] + rng.standard_normal((40, 12, 10))
    sw = np.clip(sw, 0, None).astype("float32")
    dims4 = ("time", "x", "y", "altitude")
    xr.Dataset(
        {"u": (dims4, u), "v": (dims4, v)},
        coords={"time": times, "x": x, "y": y, "altitude": [100, 200]},
    ).to_zarr(root / "heights.zarr", mode="w")
    xr.Dataset(
        {"swavr0m": (("time", "x", "y"), sw)}, coords={"time": times, "x": x, "y": y}
    ).to_zarr(root / "surface.zarr", mode="w")
    lsm = (rng.random((12, 10)) > 0.5).astype("float32")
    xr.Dataset({"lsm": (("x", "y"), lsm)}, coords={"x": x, "y": y}).to_zarr(
        root / "land.zarr", mode="w"
    )
    # features in mllam-data-prep's order: u100m, u200m, v100m, v200m
    state = np.concatenate([u, v], axis=-1).reshape(40, 120, 4)
    return {"state": state, "forcing": sw.reshape(40, 120, 1)}


def _train_reference(values: np.ndarray) -> dict[str, np.ndarray]:
    x = values[:TRAIN_STEPS].astype(np.float64)
    d = x[1:] - x[:-1]
    mean, std = x.mean(axis=(0, 1)), x.std(axis=(0, 1))
    return {
        "mean": mean,
        "std": std,
        "diff_mean": d.mean(axis=(0, 1)),
        "diff_std": d.std(axis=(0, 1)),
    }


def test_mdp_store_written_into_is_served_by_neural_lam(tmp_path):
    import xarray as xr

    raw = _mdp_inputs(tmp_path)
    config = tmp_path / "tiny.yaml"
    config.write_text(MDP_CONFIG)
    _neural_lam("-m", "mllam_data_prep", str(config), cwd=tmp_path)
    store = tmp_path / "tiny.zarr"
    ref = _train_reference(raw["state"])
    with xr.open_zarr(store) as before:
        theirs = before["state__train__diff_std"].values.astype(float)
    # mllam-data-prep's own diff_std is the std of a second difference (its issue 102)
    assert np.all(np.abs(theirs - ref["diff_std"]) / ref["diff_std"] > 0.05)

    assert main(["compute", str(store), "--write-into", "--quiet"]) == 0
    out = _neural_lam("-c", MDP_SERVE, str(config), cwd=tmp_path)
    served = json.loads(out.split("JSON", 1)[1])
    state = served["state"]
    assert state["features"] == ["u100m", "u200m", "v100m", "v200m"]

    def close(actual, expected, what):
        rel = np.abs(np.asarray(actual) - expected) / np.abs(expected)
        assert np.all(rel <= 2e-7), (what, rel.max())  # float32 rounding in the store

    close(state["state_mean"], ref["mean"], "mean")
    close(state["state_std"], ref["std"], "std")
    close(state["state_diff_std_standardized"], ref["diff_std"] / ref["std"], "diff std")
    close(state["state_diff_mean_standardized"], ref["diff_mean"] / ref["std"], "diff mean")
    flux = _train_reference(raw["forcing"])
    close(served["forcing"]["forcing_mean"], flux["mean"], "forcing mean")
    close(served["forcing"]["forcing_std"], flux["std"], "forcing std")
