"""wxstats' ACE files through fme's own normalization code (the interoperability tier).

Runs fme 2026.10.0 (ai2cm's ACE) in its own environment (``scripts/fme-env.sh``;
``scripts/test.sh`` exports its python as ``WXSTATS_FME_PYTHON``). fme builds its
network normalizer from ``centering.nc`` and ``scaling-full-field.nc`` and its loss
normalizer of residual-scaled outputs from ``scaling-residual.nc``
(``NetworkAndLossNormalizationConfig``), and loads every scalar with
``NormalizationConfig.load``; the time means are opened as its inference
aggregator opens ``time_mean_reference_data``. The constants it holds must be a
float64 numpy reference rounded to float32, and the data it normalizes must come
out centred with unit spread.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from wxstats.cli import main

FME_PYTHON = os.environ.get("WXSTATS_FME_PYTHON")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not FME_PYTHON,
        reason="fme environment not set up: run scripts/fme-env.sh and export "
        "WXSTATS_FME_PYTHON (scripts/test.sh does)",
    ),
]
NAMES = ["PRESsfc", "surface_temperature", "specific_total_water_0"]

FME_SCRIPT = """
import json, sys
import numpy as np, torch, xarray as xr
from fme.core.normalizer import NetworkAndLossNormalizationConfig, NormalizationConfig

out, data, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
config = NetworkAndLossNormalizationConfig(
    network=NormalizationConfig(
        global_means_path=f"{out}/centering.nc", global_stds_path=f"{out}/scaling-full-field.nc"
    ),
    residual=NormalizationConfig(
        global_means_path=f"{out}/centering.nc", global_stds_path=f"{out}/scaling-residual.nc"
    ),
)
network = config.get_network_normalizer(names)
loss = config.get_loss_normalizer(names, residual_scaled_names=names)
loaded = NormalizationConfig(
    global_means_path=f"{out}/centering.nc", global_stds_path=f"{out}/scaling-full-field.nc"
)
loaded.load()
ds = xr.open_zarr(data)
x = {n: torch.as_tensor(ds[n].values) for n in names}
normed = network.normalize(x)
residual = loss.normalize({n: v[1:] - v[:-1] for n, v in x.items()}, apply_mean=False)
reference = xr.open_dataset(f"{out}/time-mean.nc", decode_timedelta=False)
result = {
    "network": network.get_state(),
    "loss": loss.get_state(),
    "loaded": {"means": dict(loaded.means), "stds": dict(loaded.stds)},
    "normed": {n: [float(v.double().mean()), float(v.double().std(correction=0))]
               for n, v in normed.items()},
    "residual_std": {n: float(v.double().std(correction=0)) for n, v in residual.items()},
    "time_mean_error": {
        n: float(np.abs(reference[n].values - x[n].double().mean(0).numpy()).max())
        for n in names
    },
}
print(json.dumps(result))
"""


def test_fme_normalizes_with_wxstats_files(tmp_path):
    rng = np.random.default_rng(3)
    t, h, w = 40, 6, 12
    walk = np.cumsum(rng.standard_normal((t, h, w)), axis=0)
    fields = {
        "PRESsfc": 1e5 + 600 * rng.standard_normal((h, w)) + 20 * walk,
        "surface_temperature": 280 + 15 * rng.standard_normal((h, w)) + 0.5 * walk[::-1],
        "specific_total_water_0": 1e-3 * np.exp(0.1 * walk),
    }
    ds = xr.Dataset(
        {n: (("time", "lat", "lon"), v.astype(np.float32)) for n, v in fields.items()},
        coords={
            "time": pd.date_range("2001-01-01", periods=t, freq="6h"),
            "lat": np.linspace(-75, 75, h),
            "lon": np.arange(w) * 30.0,
        },
    )
    ds.to_zarr(tmp_path / "data.zarr", consolidated=False)
    out = tmp_path / "stats"
    args = ["compute", str(tmp_path / "data.zarr"), "--format", "ace", "--output-dir", str(out)]
    assert main([*args, "--quiet"]) == 0
    result = subprocess.run(
        [FME_PYTHON, "-c", FME_SCRIPT, str(out), str(tmp_path / "data.zarr"), ",".join(NAMES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    for name in NAMES:
        x = ds[name].values.astype(np.float64)  # the stored float32 values, summed in float64
        mean, std = x.mean(), x.std()
        residual = (x[1:] - x[:-1]).std()
        f32 = [float(np.float32(v)) for v in (mean, std, residual)]
        assert got["network"]["means"][name] == f32[0]  # fme holds torch.float constants
        assert got["network"]["stds"][name] == f32[1]
        assert got["loss"]["means"][name] == f32[0] and got["loss"]["stds"][name] == f32[2]
        np.testing.assert_allclose(
            [got["loaded"]["means"][name], got["loaded"]["stds"][name]], [mean, std], rtol=1e-12
        )
        np.testing.assert_allclose(got["normed"][name], [0.0, 1.0], atol=2e-5)
        np.testing.assert_allclose(got["residual_std"][name], 1.0, rtol=2e-5)
        assert got["time_mean_error"][name] <= 1e-6 * np.abs(x).max()  # float32 time means
