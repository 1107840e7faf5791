"""The digests of every file wxstats writes for the built-in example and a small
synthetic zarr/netCDF dataset, in every output format, one line per file.

A change that must not alter the numbers is checked by running this before
and after (``python scripts/checksums.py > before.txt``, then ``diff``). The
data come from a seeded generator. The run record (``wxstats_run``: start time,
seconds, host) is left out of a netCDF file's or a JSON summary's digest;
everything else (names, dimensions, dtypes, attributes, values) is hashed,
with the working folder's path written as ``WORKDIR``.

Usage: python scripts/checksums.py [WORKDIR]
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import xarray as xr

RUNS = [
    "example ex",
    "compute grid.zarr --output out.nc --summary out.json",
    "compute grid.nc --output out_nc.nc",
    "compute grid.zarr --weights coslat --by month --output clim.nc",
    "compute grid.zarr --pool level --output pooled.nc",
    "compute grid.zarr --format graphcast --output-dir gc",
    "compute grid.zarr --format makani --output-dir mk",
    "compute grid.zarr --format ace --variables t2m --output-dir ace",
    "compute grid.zarr --format aurora --output-dir au",
    "compute grid.zarr --period 2020-01-01/2020-01-12 --state part.wxstate",
    "update part.wxstate grid.zarr --only-new --overwrite",
]
OUTPUTS = [
    "ex/static",
    "gc",
    "mk",
    "ace",
    "au",
    "out.nc",
    "out.json",
    "out_nc.nc",
    "clim.nc",
    "pooled.nc",
    "part.stats.nc",
]


def write_data(work: Path) -> None:
    rng = np.random.default_rng(20261205)
    t = pd.date_range("2020-01-01", periods=96, freq="6h")
    ds = xr.Dataset(
        {
            "t2m": (
                ("time", "latitude", "longitude"),
                280 + 5 * rng.standard_normal((96, 11, 13)),
                {"units": "K"},
            ),
            "u": (
                ("time", "level", "latitude", "longitude"),
                10 * rng.standard_normal((96, 2, 11, 13)),
                {"units": "m s-1"},
            ),
        },
        coords={
            "time": t,
            "latitude": np.linspace(60.0, 50.0, 11),
            "longitude": np.linspace(-8.0, 2.0, 13),
            "level": np.array([500, 850]),
        },
    )
    ds.to_zarr(work / "grid.zarr", mode="w", encoding={"t2m": {"chunks": (8, 11, 13)}})
    ds.to_netcdf(work / "grid.nc")


def nc_digest(path: Path, work: Path) -> str:
    h = hashlib.sha256()

    def text(value: object) -> str:
        return str(value).replace(str(work), "WORKDIR")

    def walk(group: netCDF4.Dataset) -> None:
        attrs = sorted((k, text(group.getncattr(k))) for k in group.ncattrs() if k != "wxstats_run")
        h.update(repr(attrs).encode())
        for name, var in sorted(group.variables.items()):
            var.set_auto_maskandscale(False)
            h.update(f"{name}{var.dimensions}{var.dtype}".encode())
            h.update(repr(sorted((k, text(var.getncattr(k))) for k in var.ncattrs())).encode())
            values = np.asarray(var[...])
            h.update(repr(values.tolist()).encode() if values.dtype == object else values.tobytes())
        for sub in sorted(group.groups):
            walk(group.groups[sub])

    with netCDF4.Dataset(path) as ds:
        walk(ds)
    return h.hexdigest()


def digest(path: Path, work: Path) -> str:
    if path.suffix == ".nc":
        return nc_digest(path, work)
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        data.pop("run", None)
        if isinstance(data.get("wxstats_run"), dict):  # Aurora's file keeps its record here
            data["wxstats_run"].pop("run", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    write_data(work)
    for run in RUNS:
        quiet = ["--quiet"] if run.startswith(("compute", "update")) else []
        subprocess.run(
            ["wxstats", *run.split(), *quiet], cwd=work, check=True, stdout=subprocess.DEVNULL
        )
    files = []
    for out in OUTPUTS:
        p = work / out
        files += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        print(digest(f, work), f.relative_to(work))


if __name__ == "__main__":
    main()
