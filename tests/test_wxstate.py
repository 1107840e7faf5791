"""The state file format on its own: what is written is read back bit for bit,
and anything else is refused in one line (wxstats.io.formats.wxstate)."""

from __future__ import annotations

import netCDF4
import numpy as np
import pytest

from wxstats.core.errors import WxstatsError
from wxstats.io.formats.wxstate import (
    FORMAT_VERSION,
    StateFile,
    read_state_file,
    state_writer,
)


def _state() -> StateFile:
    rng = np.random.default_rng(0)
    head = rng.standard_normal((3, 5, 2)).astype(np.float16)
    tail = np.array(rng.standard_normal((3, 5, 2)), dtype=np.float16)
    tail[0, 0, 0] = np.nan
    return StateFile(
        meta={"identity": {"split": "train"}, "coverage": {"n": 7}},
        sums=np.array([3, -(2**40), 2**62, 0], dtype=np.int64),
        minimum=np.array([np.inf, -1.5]),
        maximum=np.array([-np.inf, 2.5]),
        edges={"t2m": (head, tail), "z": (np.ones((1, 4, 1)), np.zeros((1, 4, 1)))},
    )


@pytest.mark.parametrize("weighted", [False, True])
def test_round_trip_bit_for_bit(tmp_path, weighted):
    path = tmp_path / "s.wxstate"
    state = _state()
    if weighted:  # cos(latitude) per grid point, ending in a pole's 6e-17
        state.weights = {"t2m": np.cos(np.deg2rad(np.linspace(0, 90, 5)))}
    state_writer(state, "9.9")(path)
    back = read_state_file(path)
    assert back.meta == state.meta and back.wxstats_version == "9.9"
    for name in ("sums", "minimum", "maximum"):
        a, b = getattr(state, name), getattr(back, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for var, (head, tail) in state.edges.items():
        for a, b in zip((head, tail), back.edges[var], strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), var  # float16 kept
    assert back.weights.keys() == state.weights.keys()
    for var, weights in state.weights.items():
        assert back.weights[var].tobytes() == weights.tobytes()
    with netCDF4.Dataset(path) as nc:  # what other tools see
        assert int(nc.getncattr("wxstats_state_version")) == FORMAT_VERSION == 3
        assert nc["sums"].dimensions == ("word",)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:300]), "truncated or not netCDF"),
        (lambda p: _set(p, "wxstats_state_version", np.int32(FORMAT_VERSION + 1)), "newer wxstats"),
        # sums relative to one run-wide reference (before every step had its own)
        (lambda p: _set(p, "wxstats_state_version", np.int32(2)), "recompute the state"),
        (lambda p: _set(p, "wxstats_state_format", "other"), "not a wxstats state file"),
        (lambda p: _set(p, "meta", '{"identity": {}}'), "checksum"),
        (lambda p: p.unlink(), "no such state file"),
    ],
)
def test_damage_is_refused(tmp_path, damage, message):
    path = tmp_path / "s.wxstate"
    state_writer(_state(), "9.9")(path)
    damage(path)
    with pytest.raises(WxstatsError, match=message) as info:
        read_state_file(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def _set(path, name, value):
    with netCDF4.Dataset(path, "a") as nc:
        nc.setncattr(name, value)
