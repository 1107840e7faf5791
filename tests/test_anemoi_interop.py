"""wxstats' anemoi statistics through anemoi-datasets' own code (the interoperability tier).

Runs anemoi-datasets 0.5.47 in its own environment (``scripts/anemoi-env.sh``:
it needs zarr <= 2.18.7, wxstats runs on zarr 3; ``scripts/test.sh`` exports it
as ``WXSTATS_ANEMOI_PYTHON``). A tiny dataset is built offline with
``anemoi-datasets create`` from a netCDF file written here; after wxstats
writes its statistics, anemoi's ``open_dataset`` must return exactly them, and
they must agree with a float64 two-pass reference over the stored data (1e-12)
and with anemoi's own statistics, computed at creation and recomputed by
``anemoi-datasets statistics --recompute-statistics`` (1e-10 relative: anemoi
sums in another order).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from distributed_helpers import run, wxstats_cmd

from wxstats.cli import main
from wxstats.sources.anemoi import default_window

ANEMOI_PYTHON = os.environ.get("WXSTATS_ANEMOI_PYTHON")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not ANEMOI_PYTHON,
        reason="anemoi environment not set up: run scripts/anemoi-env.sh and export "
        "WXSTATS_ANEMOI_PYTHON (scripts/test.sh does)",
    ),
]
OPS = ("mean", "stdev", "minimum", "maximum")
DELTAS = {"6h": 1, "12h": 2}
N_DATES = 24

RECIPE = """
dates:
  start: 2020-01-01T00:00:00
  end: 2020-01-06T18:00:00
  frequency: 6h
input:
  netcdf:
    path: {path}
statistics:
  tendencies: [6h, 12h]
"""

READ_SCRIPT = """
import json, sys
from anemoi.datasets import open_dataset
kw = {}
if len(sys.argv) > 2:
    kw = dict(statistics=sys.argv[2], statistics_tendencies=sys.argv[2])
ds = open_dataset(sys.argv[1], **kw)
out = {"": {k: v.tolist() for k, v in ds.statistics.items()}, "variables": list(ds.variables)}
for delta in ("6h", "12h"):
    out[delta] = {k: v.tolist() for k, v in ds.statistics_tendencies(delta).items()}
print("JSON" + json.dumps(out))
"""


def _anemoi(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(ANEMOI_PYTHON), *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def anemoi_reads(dataset: Path, sidecar: Path | None = None) -> dict:
    """What anemoi's open_dataset serves: {"" or delta: {op: values}}."""
    args = [str(dataset)] + ([str(sidecar)] if sidecar else [])
    out = _anemoi("-c", READ_SCRIPT, *args, cwd=dataset.parent).stdout
    return json.loads(out.split("JSON", 1)[1])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A dataset made by ``anemoi-datasets create`` (3 variables, 24 dates, 4 x 5 cells)."""
    root = tmp_path_factory.mktemp("anemoi")
    rng = np.random.default_rng(1)
    times = np.datetime64("2020-01-01T00", "ns") + np.arange(N_DATES) * np.timedelta64(6, "h")
    shape = (N_DATES, 4, 5)
    walk = np.cumsum(rng.standard_normal(shape), axis=0)
    fields = {
        "msl": (101325.0 + 300.0 * (walk + rng.standard_normal(shape)), "Pa"),
        "t2m": (280.0 + 4.0 * (walk + rng.standard_normal(shape)), "K"),
        "tp": (np.abs(rng.standard_normal(shape)) * 1e-3, "m"),
    }
    ds = xr.Dataset(
        {k: (("time", "latitude", "longitude"), v.astype("float32"), {"units": u})
         for k, (v, u) in fields.items()},
        coords={
            "time": times,
            "latitude": ("latitude", [20.0, 10.0, 0.0, -10.0], {"units": "degrees_north"}),
            "longitude": ("longitude", [0.0, 10.0, 20.0, 30.0, 40.0], {"units": "degrees_east"}),
        },
    )  # fmt: skip
    ds.to_netcdf(root / "input.nc")
    (root / "recipe.yaml").write_text(RECIPE.format(path=root / "input.nc"))
    cli = Path(str(ANEMOI_PYTHON)).parent / "anemoi-datasets"
    result = subprocess.run(
        [str(cli), "create", "recipe.yaml", "built.zarr"],
        capture_output=True, text=True, cwd=root, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "built.zarr"


def _copy(built: Path, where: Path, name: str = "ds.zarr") -> Path:
    shutil.copytree(built, where / name)
    return where / name


def reference(path: Path, float32_diffs: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """float64 two-pass statistics over the stored data of the recorded window; with
    ``float32_diffs``, of the differences rounded to float32 first (anemoi's way)."""
    group = zarr.open_group(str(path), mode="r")
    data = group["data"][:]
    dates = group["dates"][:].astype("datetime64[s]")
    lo = int(np.searchsorted(dates, np.datetime64(group.attrs["statistics_start_date"])))
    hi = int(np.searchsorted(dates, np.datetime64(group.attrs["statistics_end_date"]), "right"))
    out = {}
    for name, k in {"": 0, **DELTAS}.items():
        x = data[lo:hi] if float32_diffs else data[lo:hi].astype(np.float64)
        x = (x[k:] - x[:-k] if k else x).astype(np.float64)
        flat = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)
        mean = flat.sum(axis=1) / flat.shape[1]
        std = np.sqrt(((flat - mean[:, None]) ** 2).sum(axis=1) / flat.shape[1])
        out[name] = {"mean": mean, "stdev": std, "minimum": flat.min(1), "maximum": flat.max(1)}
    return out


def stored(path: Path) -> dict[str, dict[str, np.ndarray]]:
    group = zarr.open_group(str(path), mode="r")
    out = {"": {op: group[op][:] for op in OPS}}
    for name in DELTAS:
        out[name] = {op: group[f"statistics_tendencies_{name}_{op}"][:] for op in OPS}
    return out


def relative(a: dict, b: dict, names: tuple[str, ...] = ("", *DELTAS)) -> float:
    """The largest |a - b| / max(|b|, stdev of b), over the statistics of ``names``
    (``""``: of the values, else of a tendency)."""
    worst = 0.0
    for name in names:
        ops = b[name]
        scale = np.maximum(np.abs(np.asarray(ops["mean"])), np.asarray(ops["stdev"]))
        for op, values in ops.items():
            diff = np.abs(np.asarray(a[name][op]) - np.asarray(values))
            worst = max(worst, float(np.max(diff / np.maximum(np.abs(values), scale))))
    return worst


def test_anemoi_serves_wxstats_values_written_into_the_dataset(built, tmp_path):
    theirs = stored(built)  # anemoi's own, from its build
    path = _copy(built, tmp_path)
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    ours = stored(path)
    served = anemoi_reads(path)
    for name in ours:
        for op in OPS:
            assert served[name][op] == ours[name][op].tolist(), (name, op)
    assert served["variables"] == ["msl", "t2m", "tp"]
    ref = reference(path)
    vs_reference, vs_anemoi = relative(ours, ref), relative(ours, theirs, ("",))
    assert vs_reference <= 1e-12, vs_reference
    assert vs_anemoi <= 1e-10, vs_anemoi
    # anemoi's tendencies are of float32 data differenced in float32: each difference
    # rounded to float32 (exact for msl and t2m, not for tp, whose values differ by more
    # than a factor 2); to that definition, anemoi agrees; wxstats keeps the exact one
    anemoi_way = reference(path, float32_diffs=True)
    tendencies_vs_anemoi = relative(ours, theirs, tuple(DELTAS))
    assert relative(theirs, anemoi_way) <= 1e-10, relative(theirs, anemoi_way)
    assert 1e-10 < tendencies_vs_anemoi <= 1e-6, tendencies_vs_anemoi
    # anemoi recomputes its statistics over the dataset wxstats wrote into
    again = _copy(path, tmp_path, "again.zarr")
    cli = Path(str(ANEMOI_PYTHON)).parent / "anemoi-datasets"
    result = subprocess.run(
        [str(cli), "statistics", "--recompute-statistics", str(again)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    recomputed = stored(again)
    vs_recompute = relative(ours, recomputed, ("",))
    assert vs_recompute <= 1e-10, vs_recompute
    assert relative(recomputed, anemoi_way) <= 1e-10
    print(
        f"relative differences: float64 reference {vs_reference:.1e}; anemoi's build "
        f"{vs_anemoi:.1e} (values), {tendencies_vs_anemoi:.1e} (tendencies: float32 "
        f"differences); anemoi's recompute {vs_recompute:.1e} (values)"
    )
    # the window wxstats took is the one anemoi chose, by anemoi's default rule
    dates = zarr.open_group(str(path), mode="r")["dates"][:].astype("datetime64[s]")
    recorded = np.datetime64(json.loads((built / ".zattrs").read_text())["statistics_end_date"])
    assert default_window(dates) == (0, int(np.searchsorted(dates, recorded)) + 1)


def test_statistics_of_a_dataset_before_finalise_from_its_recipe(built, tmp_path):
    """The statistics part of anemoi's ``finalise``, done by wxstats: a dataset after
    ``init``/``load`` has no statistics arrays; the tendencies of its recipe
    (``[6h, 12h]``, read from its ``recipe`` attribute) are the default, and anemoi's
    ``open_dataset`` serves both from what wxstats wrote."""
    path = _copy(built, tmp_path)
    group = zarr.open_group(str(path), mode="r+")
    assert group.attrs["recipe"]["statistics"]["tendencies"] == ["6h", "12h"]
    for name in [k for k in group.array_keys() if k not in ("data", "dates")]:
        del group[name]  # as before anemoi's finalise
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    ours, served = stored(path), anemoi_reads(path)
    for name in ("", *DELTAS):
        for op in OPS:
            assert served[name][op] == ours[name][op].tolist(), (name, op)
    assert relative(ours, reference(path)) <= 1e-12


def test_sidecar_opened_with_statistics_and_tendencies(built, tmp_path):
    side = tmp_path / "stats.zarr"
    args = ["compute", str(built), "--format", "anemoi", "--output", str(side), "--quiet"]
    args += ["--period", "2020-01-02/2020-01-05"]
    assert main(args) == 0
    served = anemoi_reads(built, side)
    ours = stored(side)
    for name in ours:
        for op in OPS:
            assert served[name][op] == ours[name][op].tolist(), (name, op)
    assert served[""]["mean"] != stored(built)[""]["mean"].tolist()  # not the build's window


def test_processes_1_3_7_byte_identical(built, tmp_path):
    arrays = []
    for n in (1, 3, 7):
        path = _copy(built, tmp_path, f"ds{n}.zarr")
        cmd = wxstats_cmd("compute", str(path), "--write-into", "--block-mb", "0.0001")
        result = run([*cmd, "--nproc", str(n), "--quiet"], timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        arrays.append(
            {f"{k}/{op}": v.tobytes() for k, ops in stored(path).items() for op, v in ops.items()}
        )
    assert arrays[0] == arrays[1] == arrays[2]
