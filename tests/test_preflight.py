"""One pre-flight (``runtime/preflight.py``): ``inspect`` refuses what ``compute``
refuses, with the same line, before either reads a value; ``merge`` refuses by
the same steps; a target holding one split says so once, in its row."""

from __future__ import annotations

import pytest
from gridded_data import gridded, write_zarr

from wxstats.cli import main


@pytest.fixture(scope="module")
def zarr_store(tmp_path_factory):
    ds, _ = gridded(n_time=12, ny=4, nx=5)
    return write_zarr(ds, tmp_path_factory.mktemp("preflight") / "g.zarr")


@pytest.fixture
def no_reading(monkeypatch):
    """Any value read fails the test: every refusal must come first."""
    from wxstats.sources.anemoi import AnemoiSource
    from wxstats.sources.meps import MepsSource
    from wxstats.sources.xarray import XarraySource

    def refuse(self, *args, **kwargs):
        raise AssertionError("a value was read before the refusal")

    for cls in (XarraySource, MepsSource, AnemoiSource):
        monkeypatch.setattr(cls, "read", refuse)
        monkeypatch.setattr(cls, "reference_blocks", refuse)


BAD_ZARR = [
    ["--format", "makani", "--skipna"],
    ["--format", "ace", "--output", "x.nc"],
    ["--format", "graphcast", "--diff-steps", "1,2"],
    ["--format", "aurora", "--by", "month"],
    ["--format", "anemoi", "--output", "s.zarr"],
    ["--write-into"],
    ["--write-into", "--weights", "coslat"],
    ["--pool", "level", "--by", "month"],
    ["--by", "year", "--write-into"],
    ["--min-std", "1e-6"],
    ["--level-weights", "500=1"],
    ["--step-length", "3"],
    ["--output", "o.nc", "--summary", "o.nc"],
    ["--output", "INPUT/inside.nc"],
    ["--resume"],
]
BAD_ANEMOI = [
    ["--weights", "coslat"],
    ["--split", "train"],
    ["--format", "graphcast"],
    ["--format", "anemoi"],
    ["--write-into", "--format", "anemoi", "--output", "s.zarr"],
    ["--min-std", "1", "--output", "x.nc"],
]
BAD_MEPS = [
    ["--diff-steps", "3"],
    ["--output", "x.nc"],
    ["--format", "makani"],
    ["--write-into"],
    ["--variables", "t2m", "--weights", "coslat"],
]


def _same_refusal(capsys, dataset, args):
    lines = {}
    for command in ("compute", "inspect"):
        extra = ["--no-measure"] if command == "inspect" else ["--quiet"]
        assert main([command, str(dataset), *args, *extra]) == 2, (command, args)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("wxstats: error: "), (command, err)
        lines[command] = err[0]
    assert lines["compute"] == lines["inspect"]


@pytest.mark.parametrize("args", BAD_ZARR, ids=" ".join)
def test_inspect_refuses_as_compute_for_zarr(
    zarr_store, tmp_path, monkeypatch, capsys, no_reading, args
):
    monkeypatch.chdir(tmp_path)
    args = [a.replace("INPUT", str(zarr_store)) for a in args]
    _same_refusal(capsys, zarr_store, args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", BAD_MEPS, ids=" ".join)
def test_inspect_refuses_as_compute_for_a_datastore(
    meps_small, tmp_path, monkeypatch, capsys, no_reading, args
):
    monkeypatch.chdir(tmp_path)
    _same_refusal(capsys, meps_small, args)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def anemoi_dataset(tmp_path_factory):
    from test_anemoi import make_dataset

    path = tmp_path_factory.mktemp("preflight") / "an.zarr"
    make_dataset(path)
    return path


@pytest.mark.parametrize("args", BAD_ANEMOI, ids=" ".join)
def test_inspect_refuses_as_compute_for_anemoi(
    anemoi_dataset, tmp_path, monkeypatch, capsys, no_reading, args
):
    monkeypatch.chdir(tmp_path)
    _same_refusal(capsys, anemoi_dataset, args)
    assert list(tmp_path.iterdir()) == []


def _facts(splits=("train",), steps=(1,)):
    from wxstats.runtime.set_outputs import DataFacts

    return DataFacts("d.zarr", splits=tuple(splits), diff_steps=tuple(steps))


def test_every_one_split_target_refuses_several_splits_in_one_line():
    """Each row declaring ``one_split`` (and ``one_step``) is refused by the one
    check, naming this run's splits (and steps) and the flag to give."""
    from wxstats.core.errors import WxstatsError
    from wxstats.runtime.preflight import _refuse_several
    from wxstats.runtime.targets import TARGETS

    single = [t for t in TARGETS if t.one_split]
    assert {t.name for t in single} >= {"--state", "--format makani", "--format aurora"}
    for target in single:
        _refuse_several("d.zarr", target, _facts())  # one split, one step: taken
        with pytest.raises(WxstatsError) as err:
            _refuse_several("d.zarr", target, _facts(splits=("a", "b")))
        line = str(err.value)
        assert line.startswith(f"d.zarr: {target.name} holds the statistics of one split")
        assert "a, b" in line and "give one --split" in line and "\n" not in line
        if target.one_step is not None:
            with pytest.raises(WxstatsError, match="one --diff-steps"):
                _refuse_several("d.zarr", target, _facts(steps=(1, 2)))
        else:
            _refuse_several("d.zarr", target, _facts(steps=(1, 2)))


def test_merge_refuses_two_outputs_in_one_file_as_compute(tmp_path):
    """``merge``'s pre-flight is compute's: the same line for the same mistake."""
    from wxstats.core.errors import WxstatsError
    from wxstats.runtime.options import ComputeOptions
    from wxstats.runtime.preflight import merge_preflight
    from wxstats.sources.kinds import capabilities_of

    same = tmp_path / "x.out"
    options = ComputeOptions(dataset="a.wxstate", output=same, summary=same)
    with pytest.raises(WxstatsError, match="two outputs of this run are the same file"):
        merge_preflight("a.wxstate", capabilities_of("xarray"), _facts(), options)
    plan = merge_preflight(
        "a.wxstate", capabilities_of("xarray"), _facts(), ComputeOptions(dataset="a", output=same)
    )
    assert list(plan.files) == [same] and plan.data == _facts()
