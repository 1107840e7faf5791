"""The source factory: what a dataset's kind says it supports before it is opened
(the refusals of options come first, from that: ``runtime/outputs.open_source``)
is what the source it opens declares."""

from __future__ import annotations

import pytest
import xarray as xr
from gridded_data import gridded, write_zarr
from test_anemoi import make_dataset

from wxstats.sources.factory import kind_of, open_source
from wxstats.sources.kinds import MODULES, Selection, capabilities_of, kind_named


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, meps_small):
    root = tmp_path_factory.mktemp("factory")
    ds, _ = gridded(n_time=12)
    write_zarr(ds, root / "grid.zarr")
    ds.to_netcdf(root / "grid.nc")
    make_dataset(root / "an.zarr")
    return {
        "MEPS datastore": meps_small,
        "zarr store": root / "grid.zarr",
        "netCDF file": root / "grid.nc",
        "anemoi dataset": root / "an.zarr",
    }


@pytest.mark.parametrize("name", ["MEPS datastore", "zarr store", "netCDF file", "anemoi dataset"])
def test_capabilities_known_before_opening_are_the_opened_sources(datasets, name):
    path = datasets[name]
    kind = kind_of(str(path))
    before = capabilities_of(kind.label)  # what a state recording the label finds
    source = open_source(str(path), Selection())
    assert source.capabilities == before == kind.capabilities, name
    assert source.kind == kind.label
    assert source.path is not None


def test_a_given_dataset_is_read_as_xarray_data(datasets):
    with xr.open_zarr(datasets["zarr store"], consolidated=False) as ds:
        before = kind_of("in memory", ds).capabilities
        source = open_source("in memory", Selection(), given=ds)
        assert source.capabilities == before
        assert before.time_splits and not before.neurallam_files


def test_a_run_tells_the_kind_once(datasets, monkeypatch):
    """Telling an anemoi dataset opens its zarr group: a run's source is opened
    (its options refused first) on one look at the folder, and is anemoi's."""
    from wxstats.runtime.options import ComputeOptions
    from wxstats.runtime.outputs import open_source as open_run_source
    from wxstats.sources import anemoi

    looks = []
    real = anemoi.is_anemoi
    monkeypatch.setattr(anemoi, "is_anemoi", lambda path: looks.append(path) or real(path))
    source = open_run_source(ComputeOptions(dataset=str(datasets["anemoi dataset"])))
    assert source.kind == "anemoi"
    assert looks == [str(datasets["anemoi dataset"])]


def test_every_kind_declares_itself_under_its_label():
    """Each module named in the registry declares the kind of its label."""
    for label in MODULES:
        assert kind_named(label).label == label
    assert capabilities_of("no such kind") == type(capabilities_of("xarray"))()
