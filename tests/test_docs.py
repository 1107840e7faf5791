"""The documentation site builds without a warning, and every shell and Python
example on its pages (and in the README) runs, as written, on small data.

Each page's examples run in order in a fresh copy of one sandbox that holds
small datasets under the names the pages use (``era5.zarr``, daily from 1979 to
2020 so that every split on the pages selects data; ``meps.datastore.yaml``; an
mllam-data-prep store; an anemoi dataset ...), one folder for the whole page as
a user following it would have: a multi-step example (a state computed, data
appended, the state updated; datastores computed apart, then merged) runs step
after step on what the steps before it wrote, and a name two examples of a page
both write is found. A block the sandbox cannot run
(package installs, an object store, two machines, Slurm, GB benchmarks) is
preceded by an HTML comment saying why and which test runs it instead; a block
with neither fails this test, and so does a block of plain ``wxstats`` commands
left to another test (it is run here, as written).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from distributed_helpers import env

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(
    r"(<!--(?P<note>[^>]*)-->\s*\n)?```(?P<lang>bash|python)\n(?P<code>.*?)```", re.S
)
EXEMPT = re.compile(r"not run here: \S|tests/test_\w+\.py runs")
pytestmark = pytest.mark.slow


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, note) of every bash/python block of ``page``."""
    return [
        (m["lang"], m["code"], (m["note"] or "").strip()) for m in BLOCK.finditer(page.read_text())
    ]


def _era5(path: Path) -> xr.Dataset:
    """Daily 1979-2020 on a 3 x 4 grid: surface and pressure-level fields under the
    names the pages use, and a static land-sea mask."""
    rng = np.random.default_rng(0)
    time = np.arange("1979-01-01", "2021-01-01", dtype="datetime64[D]").astype("datetime64[ns]")
    n, lat, lon, level = len(time), [50.0, 40.0, 30.0], [0.0, 10.0, 20.0, 30.0], [500, 850]
    season = np.sin(2 * np.pi * np.arange(n) / 365.25)[:, None, None]

    def surface(base: float, spread: float) -> tuple:
        noise = rng.standard_normal((n, 3, 4))
        return ("time", "latitude", "longitude"), (base + spread * (season + noise)).astype("f4")

    def upper(base: float, spread: float) -> tuple:
        noise = rng.standard_normal((n, 2, 3, 4))
        values = base + spread * (season[:, None] + noise)
        return ("time", "level", "latitude", "longitude"), values.astype("f4")

    ds = xr.Dataset(
        {
            "t2m": surface(280, 5), "2m_temperature": surface(281, 5), "msl": surface(101325, 800),
            "u10": surface(2, 4), "v10": surface(-1, 4), "z": upper(50000, 900),
            "t": upper(250, 6), "geopotential": upper(50010, 900), "temperature": upper(251, 6),
            "land_sea_mask": (("latitude", "longitude"), rng.uniform(0, 1, (3, 4)).astype("f4")),
        },
        coords={"time": time, "latitude": ("latitude", lat, {"units": "degrees_north"}),
                "longitude": ("longitude", lon, {"units": "degrees_east"}),
                "level": ("level", level, {"units": "hPa"})},
    )  # fmt: skip
    encoding = {
        v: {"chunks": (1000, *ds[v].shape[1:])} for v in ds.data_vars if "time" in ds[v].dims
    }
    ds.to_zarr(path, encoding=encoding, zarr_format=2, consolidated=True)
    return ds


def _eraint(path: Path) -> None:
    """A monthly climatology like ERA-Interim's u/v/z download: int16, packed."""
    rng = np.random.default_rng(1)
    shape = (12, 3, 5, 6)
    dims = ("month", "level", "latitude", "longitude")
    ds = xr.Dataset(
        {name: (dims, base + spread * rng.standard_normal(shape))
         for name, base, spread in (("u", 5.0, 8.0), ("v", 0.0, 6.0), ("z", 50000.0, 2000.0))},
        coords={"month": np.arange(1, 13), "level": [200, 500, 850],
                "latitude": np.linspace(60, 40, 5), "longitude": np.linspace(0, 25, 6)},
    )  # fmt: skip
    encoding = {
        v: {"dtype": "int16", "scale_factor": float(np.ptp(ds[v].values) / 60000),
            "add_offset": float(ds[v].mean()), "_FillValue": -32767}
        for v in ds.data_vars
    }  # fmt: skip
    ds.to_netcdf(path, encoding=encoding)


def _datastore(example: Path, folder: Path, keep) -> None:
    """A MEPS datastore of the samples of the datastore ``example`` whose analysis
    time (``2022040112``) ``keep`` accepts: the growing pages' ``march/``, ``all/``,
    ``a/`` and ``b/``, each with its own ``static/`` as a user's would have."""
    samples = folder / "samples" / "train"
    samples.mkdir(parents=True)
    shutil.copytree(example / "static", folder / "static")
    shutil.copy(example / "meps.datastore.yaml", folder)
    for path in sorted((example / "samples" / "train").glob("*.npy")):
        if keep(re.search(r"_(\d{10})(_mbr\d+)?\.npy$", path.name)[1]):
            shutil.copy(path, samples / path.name)


def _wxstats(where: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wxstats", *args, "--quiet"], cwd=where, env=env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """The datasets every page's examples name, built once."""
    from gridded_data import mdp_store
    from test_anemoi import make_dataset

    from wxstats.tools.example import ExampleSpec, write_example

    root = tmp_path_factory.mktemp("docs-sandbox")
    spec = ExampleSpec(analysis_times=3, grid=(6, 7))
    for folder in ("", "path/to", "data", "old", "new"):
        write_example(root / folder, spec)
    for folder in ("data", "old", "new"):  # statistics to report and compare
        _wxstats(root, "compute", f"{folder}/meps.datastore.yaml")
    era5 = _era5(root / "era5.zarr")
    for name, first, last in (("era5-1979-2019", "1979", "2019"), ("era5-2020", "2020", "2020"),
                              ("y1979", "1979", "1979"), ("y1980", "1980", "1980")):  # fmt: skip
        part = era5.sel(time=slice(first, last))
        part.to_zarr(root / f"{name}.zarr", zarr_format=2, consolidated=True,
                     encoding={v: {"chunks": part[v].shape} for v in part.data_vars})  # fmt: skip
    live = era5.sel(time=slice("1979", "2019"))  # docs/growing.md appends 2020 to it
    live.to_zarr(root / "era5-live.zarr", zarr_format=2, consolidated=True,
                 encoding={v: {"chunks": (1000, *live[v].shape[1:])}
                           for v in live.data_vars if "time" in live[v].dims})  # fmt: skip
    times = sorted({re.search(r"_(\d{10})_mbr", p.name)[1]
                    for p in (root / "samples" / "train").glob("nwp_*_mbr*.npy")})  # fmt: skip
    assert len(times) >= 2
    kept = {
        "march": lambda t: t != times[-1],  # a datastore, then "all" holding more samples
        "all": lambda t: True,
        "a": lambda t: t == times[0],  # and two of disjoint samples
        "b": lambda t: t != times[0],
    }
    for folder, keep in kept.items():
        _datastore(root, root / folder, keep)
    for day in ("01", "02"):
        era5[["z", "t"]].sel(time=slice(f"2019-03-{day}", f"2019-03-{day}")).to_netcdf(
            root / f"era5_pl_2019-03-{day}.nc"
        )
    _eraint(root / "eraint_uvz.nc")
    mdp_store(root / "data" / "danra.zarr")
    make_dataset(root / "era5-o96.zarr")
    return root


@pytest.fixture
def bin_dir(tmp_path_factory) -> Path:
    """``wxstats`` on PATH as this checkout's code (a worktree's, not the install's)."""
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "wxstats"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m wxstats "$@"\n')
    script.chmod(0o755)
    return folder


def test_every_example_is_run_or_says_which_test_runs_it():
    unexplained = [
        (page.name, code.splitlines()[0])
        for page in PAGES
        for _, code, note in blocks(page)
        if note and not EXEMPT.search(note)
    ]
    assert not unexplained, unexplained
    assert sum(not note for page in PAGES for _, _, note in blocks(page)) >= 20


def _commands(code: str) -> list[str]:
    """The commands of a shell block, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip()[:1] not in ("", "#")]


def test_no_sequence_of_wxstats_commands_is_left_to_another_test():
    """A block of ``wxstats`` commands on one machine runs here, as written and
    in order: left to another test (which runs its own steps, on its own names)
    a multi-step example failed as written unnoticed. Only what the sandbox
    lacks (``not run here: needs ...``: an object store, two datasets of one
    data) keeps such a block out."""
    left = [
        (page.name, code.splitlines()[0])
        for page in PAGES
        for lang, code, note in blocks(page)
        if lang == "bash" and note and not note.startswith("not run here: needs")
        and all(c.startswith("wxstats ") and "--nproc" not in c for c in _commands(code))
    ]  # fmt: skip
    assert not left, left


@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(not note for _, _, note in blocks(p))], ids=lambda p: p.name
)
def test_the_examples_of_a_page_run_as_written(page, sandbox, bin_dir, tmp_path):
    runnable = [(lang, code) for lang, code, note in blocks(page) if not note]
    work = tmp_path / "work"
    shutil.copytree(sandbox, work, symlinks=True)
    environment = env() | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for lang, code in runnable:
        cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable]
        done = subprocess.run(
            cmd, input=code if lang == "python" else None, cwd=work, env=environment,
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{page.name}:\n{code}\n{done.stderr[-3000:]}"


def test_the_site_builds_without_a_warning(tmp_path):
    """``mkdocs build --strict``: a broken link, a page missing from the navigation or
    an API object that is gone fails; the command-line page is the parser's help."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env() | {"NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    for command in ("compute", "update", "merge", "report", "compare", "inspect", "example"):
        assert f"wxstats {command}" in cli
    assert "--diff-steps" in cli and "--write-into" in cli
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "step_length" in api and "diff_steps" in api  # wxstats.compute's options
