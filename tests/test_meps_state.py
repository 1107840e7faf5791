"""States of a neural-lam MEPS datastore: ``compute --state``, ``update`` and
``merge`` give the same bytes as one compute over all the samples.

The 10 samples of ``meps_small`` (5 analysis times x 2 members) are split into
two datastores A and B (linked files, the same YAML), one analysis time's
members on both sides; every path through the states is compared byte for byte
with a compute over all the samples (neural-lam's files; wxstats_stats.nc
value for value, its attributes name the run) and with the independent float64
reference of ``tests/reference.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import xarray as xr
import yaml
from growing import merge_states, update_chain
from refusals import assert_refused

from reference import assert_close, meps_reference
from wxstats.cli import main
from wxstats.core.conventions import MEPS_FLUX
from wxstats.io.formats.neurallam import NEURALLAM_FILES
from wxstats.io.read import NETCDF_NAME, read_stats
from wxstats.runtime.state import State

Q = ["--quiet"]


def datastore(meps_small: Path, root: Path, keep=lambda name: True, config=None) -> Path:
    """A datastore of the samples of ``meps_small`` whose file name ``keep``
    accepts (linked, with their flux files), its YAML copied (or ``config``)."""
    src = meps_small.parent / "samples" / "train"
    folder = root / "samples" / "train"
    folder.mkdir(parents=True)
    for path in sorted(src.glob("nwp_*_mbr*.npy")):
        if keep(path.name):
            (folder / path.name).symlink_to(path)
            flux = f"nwp_{MEPS_FLUX}_{path.name.split('_')[1]}.npy"
            if not (folder / flux).exists():
                (folder / flux).symlink_to(src / flux)
    target = root / meps_small.name
    if config is None:
        shutil.copy(meps_small, target)
    else:
        target.write_text(yaml.safe_dump(config))
    return target


def names(meps_small: Path) -> list[str]:
    return sorted(p.name for p in (meps_small.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))


@pytest.fixture(scope="module")
def stores(meps_small, tmp_path_factory):
    """full, A (the first 5 samples: 2.5 analysis times) and B (the rest), a
    state of each of A and B computed apart, the full run's static files."""
    root = tmp_path_factory.mktemp("meps_state")
    first = set(names(meps_small)[:5])
    full = datastore(meps_small, root / "full")
    a = datastore(meps_small, root / "a", lambda n: n in first)
    b = datastore(meps_small, root / "b", lambda n: n not in first)
    assert main(["compute", str(full), *Q]) == 0
    for store, state in ((b, "b.wxstate"), (a, "a.wxstate")):
        assert main(["compute", str(store), "--state", str(root / state), *Q]) == 0
    return root, full, a, b


def same_outputs(folder: Path, full: Path) -> None:
    """neural-lam's files byte for byte, wxstats_stats.nc value for value."""
    static = full.parent / "static"
    for name in NEURALLAM_FILES:
        assert (folder / name).read_bytes() == (static / name).read_bytes(), name
    with xr.open_dataset(folder / NETCDF_NAME) as got, xr.open_dataset(static / NETCDF_NAME) as ref:
        assert sorted(got.data_vars) == sorted(ref.data_vars)
        for var in ref.data_vars:
            assert got[var].values.tobytes() == ref[var].values.tobytes(), var


def test_a_state_covers_its_samples_and_keeps_no_edges(stores, meps_small):
    root, *_ = stores
    state = State.read(str(root / "a.wxstate"))
    assert state.samples == tuple(names(meps_small)[:5]) and state.times is None
    assert state.partial.heads == {} and state.partial.tails == {}
    # compute --state also wrote the datastore's own static files
    assert (root / "a" / "static" / "parameter_mean.pt").is_file()


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_merge_in_either_order_is_the_full_run(stores, tmp_path, order):
    root, full, *_ = stores
    states = [root / f"{x}.wxstate" for x in order]
    same_outputs(merge_states(states, tmp_path / "m", flag="--output-dir"), full)


def test_merged_statistics_match_the_float64_reference(stores, tmp_path):
    root, full, *_ = stores
    states = [root / "b.wxstate", root / "a.wxstate"]
    out = merge_states(states, tmp_path / "m", flag="--output-dir")
    stats = read_stats(out / NETCDF_NAME)
    ref = meps_reference(full)
    assert int(stats.state.count[0]) == ref["count"]
    assert_close(stats.state.mean, ref["mean"], 1e-10, "mean")
    assert_close(stats.state.std, ref["std"], 1e-10, "std")
    assert_close(stats.state.minimum, ref["min"], 0.0, "min")
    assert_close(stats.state.maximum, ref["max"], 0.0, "max")
    diff = stats.state.diff[ref["step"]]
    assert int(diff.count[0]) == ref["diff_count"]
    assert_close(diff.mean, ref["diff_mean"], 1e-10, "diff mean")
    assert_close(diff.std, ref["diff_std"], 1e-10, "diff std")
    flux = stats.streams["forcing__train"]  # the flux, as wxstats_stats.nc names it
    n, mean, std = ref["flux"]
    assert int(flux.count[0]) == n
    assert_close(flux.mean, mean, 1e-10, "flux mean")
    assert_close(flux.std, std, 1e-10, "flux std")


def test_update_with_the_full_datastore_adds_only_the_new_samples(
    stores, meps_small, tmp_path, capsys
):
    root, full, *_ = stores
    grown = tmp_path / "ab.wxstate"
    last = ["--state", str(grown)]
    out = update_chain(root / "a.wxstate", [full], tmp_path, output_dir=tmp_path / "u", last=last)
    same_outputs(out, full)  # a sample counted twice would change every byte
    assert State.read(str(grown)).samples == tuple(names(meps_small))
    # the grown state merges like any other; all of it again is nothing to add
    same_outputs(merge_states([grown], tmp_path / "m", flag="--output-dir"), full)
    again = ["update", str(grown), str(full), "--output-dir", str(tmp_path / "x")]
    assert_refused(capsys, tmp_path, again, str(full), "already", "nothing to add")


def test_update_with_two_processes(stores, tmp_path, monkeypatch):
    """Every rank leaves out the state's samples and shares out the same rest."""
    from distributed_helpers import env

    root, full, *_ = stores
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])  # the ranks run this checkout
    last = ["--nproc", "2"]
    out = update_chain(root / "b.wxstate", [full], tmp_path, output_dir=tmp_path / "u", last=last)
    same_outputs(out, full)


def test_update_writes_the_datastores_static_files_by_default(stores, meps_small, tmp_path):
    """As compute over the bigger datastore would: its static/ folder."""
    root, full, *_ = stores
    bigger = datastore(meps_small, tmp_path / "bigger")
    state = tmp_path / "s.wxstate"  # grown in place, as docs/neural-lam.md shows
    shutil.copy(root / "a.wxstate", state)
    assert main(["update", str(state), str(bigger), "--state", str(state), "--overwrite", *Q]) == 0
    same_outputs(bigger.parent / "static", full)
    assert State.read(str(state)).samples == tuple(names(meps_small))


def test_update_names_the_datastore_it_read(stores, meps_small, tmp_path):
    """The statistics file and the grown state of an update name the datastore
    updated from (as a compute over it would), not the state's first one."""
    root, *_ = stores
    bigger = datastore(meps_small, tmp_path / "bigger")
    state = tmp_path / "s.wxstate"
    assert main(["update", str(root / "a.wxstate"), str(bigger), "--state", str(state), *Q]) == 0
    with xr.open_dataset(bigger.parent / "static" / NETCDF_NAME) as ds:
        assert ds.attrs["source_datastore_config"] == str(bigger.resolve())
    assert State.read(str(state)).attrs["datastore_config"] == str(bigger.resolve())


def test_overlapping_samples_are_refused(stores, meps_small, tmp_path, capsys):
    root, full, a, _ = stores
    third = tmp_path / "third"
    half = set(names(meps_small)[3:7])  # two samples of A, two of B
    store = datastore(meps_small, third, lambda n: n in half)
    assert main(["compute", str(store), "--state", str(tmp_path / "c.wxstate"), *Q]) == 0
    args = ["merge", str(root / "a.wxstate"), str(tmp_path / "c.wxstate")]
    shared = names(meps_small)[3]
    capsys.readouterr()  # the compute's warning: some analysis times lack a member
    line = assert_refused(capsys, tmp_path, [*args, "--output-dir", str(tmp_path / "m")])
    assert "overlaps" in line and shared in line and "counted once" in line
    # the same state twice, under two names
    shutil.copy(root / "a.wxstate", tmp_path / "a2.wxstate")
    args = ["merge", str(root / "a.wxstate"), str(tmp_path / "a2.wxstate"), "--state"]
    assert_refused(capsys, tmp_path, [*args, str(tmp_path / "s.wxstate")], "overlaps")


def test_other_channels_are_refused(stores, meps_small, tmp_path, capsys):
    """The same variable names read from other channels of the files (another
    ``remove_state_features_with_index``) are other data."""
    root, *_ = stores
    config = yaml.safe_load(meps_small.read_text())
    ds = config["dataset"]
    removed = list(ds.get("remove_state_features_with_index") or [])
    last = len(ds["var_names"]) + len(removed) - 1  # the last channel of the files
    assert len(removed) == 1 and removed != [last]
    ds["remove_state_features_with_index"] = [last]
    other = datastore(meps_small, tmp_path / "other", config=config)
    assert main(["compute", str(other), "--state", str(tmp_path / "o.wxstate"), *Q]) == 0
    capsys.readouterr()
    watched = tmp_path / "watched"
    watched.mkdir()
    args = ["merge", str(root / "a.wxstate"), str(tmp_path / "o.wxstate")]
    line = assert_refused(capsys, watched, [*args, "--output-dir", str(watched / "m")])
    assert "cannot merge with" in line and "o.wxstate" in line and "channels read" in line
    update = ["update", str(root / "a.wxstate"), str(other), "--output-dir", str(watched / "u")]
    assert_refused(capsys, watched, update, "cannot update", str(other), "channels read")


def test_outputs_neural_lam_cannot_load_are_refused(stores, tmp_path, capsys):
    root, full, *_ = stores
    a, b = str(root / "a.wxstate"), str(root / "b.wxstate")
    line = assert_refused(capsys, tmp_path, ["merge", a, b, "--output", str(tmp_path / "s.nc")])
    assert "--output-dir" in line and "neural-lam" in line
    assert_refused(capsys, tmp_path, ["merge", a, b], "--output-dir")
    update = ["update", a, str(full), "--output", str(tmp_path / "s.nc")]
    assert_refused(capsys, tmp_path, update, "--output-dir")
    # a floor the .pt files would store as inf: refused before a file is made
    out = ["--output-dir", str(tmp_path / "m"), "--min-std", "1e40"]
    assert_refused(capsys, tmp_path, ["merge", a, b, *out], "--min-std 1e+40", "inf")


def test_a_zarr_dataset_cannot_update_a_datastores_state(stores, tmp_path):
    """A state of samples grows only with samples: data whose states cover
    time ranges is refused before anything is read, naming both kinds."""
    from gridded_data import gridded, write_zarr

    from wxstats.core.errors import WxstatsError
    from wxstats.runtime.grow import Growth
    from wxstats.sources.xarray import XarraySource

    root = stores[0]
    zarr = write_zarr(gridded(n_time=6)[0], tmp_path / "g.zarr")
    growth = Growth(None, State.read(str(root / "a.wxstate")))
    with pytest.raises(WxstatsError, match="kind of data xarray, the state's npyfilesmeps"):
        growth.check(XarraySource(str(zarr)), skipna=False)
