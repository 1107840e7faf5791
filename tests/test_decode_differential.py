"""wxstats' decoding of stored values against xarray's own, on generated files.

Hypothesis writes one variable to a netCDF4 file (chunked aligned or not with
the time axis, contiguous, compressed, big-endian, partly written), a netCDF3
file or a zarr store, with the encodings seen in the wild: int8/16/32 and
unsigned, ``_Unsigned``, ``scale_factor``/``add_offset`` (float32 or float64),
``_FillValue`` and ``missing_value`` (given in either signedness, as integer
or float attributes), ``valid_min``/``valid_max``/``valid_range``, NaN, and
netCDF's default fill. The files are written with netCDF4-python and zarr
directly (not through xarray's encoder), so the attributes are what they are.

The reference is xarray's decoding: which values are missing is
``xarray.open_dataset(mask_and_scale=True)``'s NaN; the values are its formula,
``raw * scale_factor + add_offset``, evaluated in float64 (xarray itself may
evaluate it in float32: the test checks that xarray's values are the float64
ones to a few units of float32 when it does, so the reference is xarray's decoding, only
more precise). wxstats' count, nan_count, min and max must equal the
reference's exactly, mean and std to 1e-12 (relative to the data's magnitude).

Where wxstats decides differently from xarray on purpose, the case is named
and the expectation says what wxstats does instead (docs/gridded.md,
"Decoding", says why):

* ``DEFAULT_FILL``: values equal to netCDF's default fill in a netCDF variable
  without ``_FillValue`` (never written) are refused in one line; xarray keeps
  them as data (9.97e36).
* ``SIGNED_MISSING_VALUE``: a ``missing_value`` of ``_Unsigned`` data given in
  the stored type (-1 for int16) marks its values missing, as ``_FillValue``
  does; xarray converts only ``_FillValue``, so its ``missing_value`` -1 never
  matches the unsigned values.
* ``XARRAY_BIG_ENDIAN_UNSIGNED_FILL``: xarray 2026.9 converts the ``_FillValue``
  of big-endian ``_Unsigned`` data through a byte-swapped view (-23793 stored
  is looked for as 4003), so it misses the fill values; wxstats masks them, as
  xarray does for the same data stored little-endian.
* ``XARRAY_PACKED_CAST_FILL``: packed data is cast by xarray to the float type
  it decodes into (float32 for int32 or float64 with a float32 ``scale_factor``)
  before it looks for ``_FillValue``/``missing_value``, so a fill value that is
  no float32 is missed and summed as data; wxstats looks for it among the
  stored values, as CF says (fill values are packed values).

Profiles: ``quick`` (default, under a minute) and ``long``
(``WXSTATS_HYPOTHESIS_PROFILE=long``, 10000 files, a few minutes).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from wxstats.core.errors import InputError
from wxstats.runtime.run import compute

settings.register_profile(
    "quick",
    max_examples=300,
    deadline=None,
    derandomize=True,  # CI sees the same 300 cases every run; the long profile explores
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "long",
    max_examples=10000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PROFILE = os.environ.get("WXSTATS_HYPOTHESIS_PROFILE", "quick")

NETCDF_DEFAULT_FILL = {k: v for k, v in netCDF4.default_fillvals.items() if k[0] in "iuf"}
"""netCDF-C's NC_FILL_* (netCDF4-python's copy, not wxstats')."""


@dataclass
class Case:
    """One generated variable, as written (``raw`` in the stored dtype)."""

    fmt: str  # nc4, nc4-contiguous, nc4-zlib, nc3, zarr
    stored: np.dtype
    raw: np.ndarray
    attrs: dict[str, Any] = field(default_factory=dict)
    fill: Any = None  # _FillValue, in the stored dtype (netCDF requires it)
    chunks: tuple[int, ...] | None = None
    big_endian: bool = False
    written: int = 0  # steps written (netCDF4: the rest is never written)

    def __str__(self) -> str:
        """Every field, the values exactly (to rerun a falsifying example)."""
        return f"{self!r} raw={self.raw.tolist()!r} stored={self.stored.str}"


FORMATS = ["nc4", "nc4-contiguous", "nc4-zlib", "nc3", "zarr"]
NC3_TYPES = ["i1", "i2", "i4", "f4", "f8"]
ALL_TYPES = ["i1", "i2", "i4", "u1", "u2", "u4", "f4", "f8"]


@st.composite
def cases(draw) -> Case:
    fmt = draw(st.sampled_from(FORMATS))
    stored = np.dtype(draw(st.sampled_from(NC3_TYPES if fmt == "nc3" else ALL_TYPES)))
    nt, ny, nx = draw(st.integers(2, 9)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    shape = (nt, ny, nx)
    attrs: dict[str, Any] = {}
    view = stored
    if stored.kind in "iu" and draw(st.booleans()):
        unsigned = stored.kind == "i"  # _Unsigned="false" on unsigned: read as signed
        if fmt != "nc3" or unsigned:
            attrs["_Unsigned"] = "true" if unsigned else "false"
            view = np.dtype(f"{'u' if unsigned else 'i'}{stored.itemsize}")
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if stored.kind == "f":
        magnitude = draw(st.sampled_from([1e-3, 1.0, 300.0, 1e5]))
        offset = draw(st.sampled_from([0.0, 1e4]))
        raw = (offset + magnitude * rng.standard_normal(shape)).astype(stored)
        if draw(st.booleans()):
            raw[rng.random(shape) < 0.2] = np.nan
    else:
        info = np.iinfo(view)
        lo, hi = draw(st.sampled_from([(info.min, info.max), (0, min(info.max, 4000)), (-5, 5)]))
        lo = max(lo, info.min)
        raw = rng.integers(lo, hi, shape, endpoint=True).astype(view).view(stored)
    if stored.kind in "iu" or draw(st.booleans()):
        if draw(st.booleans()):
            attrs["scale_factor"] = draw(
                st.sampled_from([np.float32(0.01), np.float64(0.001), np.float32(1.5)])
            )
        if draw(st.booleans()):
            attrs["add_offset"] = draw(
                st.sampled_from([np.float32(273.15), np.float64(-100.25), np.float64(1e5)])
            )
    case = Case(fmt, stored, raw, attrs, written=nt)
    # fill values: values taken from the data, so that some are hit
    candidates = [v for v in raw.ravel()[1:] if not (stored.kind == "f" and np.isnan(v))]
    if candidates and draw(st.booleans()):
        case.fill = stored.type(draw(st.sampled_from(candidates)))
    if candidates and draw(st.booleans()):
        mv = stored.type(draw(st.sampled_from(candidates)))
        how = draw(st.sampled_from(["stored", "view", "float"]))
        if how == "view" and view != stored:
            mv = mv.view(view)  # the other signedness
        if how == "float" or fmt == "nc3" and how == "view":
            mv = np.float64(mv)
        attrs["missing_value"] = mv
    if draw(st.booleans()) and not np.isnan(raw).all():
        span = draw(st.sampled_from(["valid_range", "valid_min", "valid_max"]))
        value = raw[~np.isnan(raw)] if stored.kind == "f" else raw
        v_lo, v_hi = np.quantile(value.astype(np.float64), [0.3, 0.7]).astype(stored)
        attrs[span] = np.array([v_lo, v_hi]) if span == "valid_range" else v_lo
    if fmt.startswith("nc4"):
        if fmt == "nc4":
            case.chunks = tuple(draw(st.integers(1, n)) for n in shape)
        case.big_endian = draw(st.booleans())
        case.written = draw(st.sampled_from([nt, nt, max(1, nt - draw(st.integers(1, nt)))]))
    elif fmt == "zarr":
        case.chunks = tuple(draw(st.integers(1, n)) for n in shape)
        case.big_endian = stored.itemsize > 1 and draw(st.booleans())
    if draw(st.integers(0, 9)) == 0 and fmt != "zarr" and stored.itemsize > 1:
        default = NETCDF_DEFAULT_FILL[stored.str[1:]]
        case.raw[-1, 0, 0] = stored.type(default)  # a default fill among the data
    return case


def write(case: Case, path: Path) -> None:
    """``case`` written with netCDF4-python or zarr themselves (no CF encoding)."""
    nt, ny, nx = case.raw.shape
    if case.fmt == "zarr":
        group = zarr.open_group(path, mode="w", zarr_format=2)
        time = group.create_array(
            "time",
            shape=(nt,),
            dtype="f8",
            attributes={"_ARRAY_DIMENSIONS": ["time"], "units": "hours since 2021-01-01"},
        )
        time[:] = np.arange(nt)
        attrs = {k: _json(v) for k, v in case.attrs.items()}
        dtype = case.stored.newbyteorder(">") if case.big_endian else case.stored
        var = group.create_array(
            "v",
            shape=case.raw.shape,
            chunks=case.chunks,
            dtype=dtype,
            fill_value=case.fill,
            attributes={"_ARRAY_DIMENSIONS": ["time", "y", "x"], **attrs},
            # chunks all of the fill value are left out (read back as missing);
            # without one (null in zarr v2) what they read as is undefined: keep them
            config={"write_empty_chunks": case.fill is None},
        )
        var[...] = case.raw
        return
    fmt = "NETCDF3_64BIT_OFFSET" if case.fmt == "nc3" else "NETCDF4"
    with netCDF4.Dataset(path, "w", format=fmt) as nc:
        for dim, n in zip(("time", "y", "x"), (nt, ny, nx), strict=True):
            nc.createDimension(dim, n)
        time = nc.createVariable("time", "f8", ("time",))
        time.units = "hours since 2021-01-01"
        time[:] = np.arange(nt)
        kwargs: dict[str, Any] = {"fill_value": case.fill}
        if case.fmt.startswith("nc4"):
            kwargs["contiguous"] = case.fmt == "nc4-contiguous"
            kwargs["chunksizes"] = case.chunks
            kwargs["zlib"] = case.fmt == "nc4-zlib"
            kwargs["shuffle"] = case.fmt == "nc4-zlib"
            kwargs["endian"] = "big" if case.big_endian else "native"
        with warnings.catch_warnings():  # the byte order is the endian kwarg, on purpose
            warnings.filterwarnings("ignore", "endian-ness of dtype and endian kwarg")
            var = nc.createVariable("v", case.stored, ("time", "y", "x"), **kwargs)
        var.set_auto_maskandscale(False)
        for name, value in case.attrs.items():
            var.setncattr(name, value)
        var[: case.written] = case.raw[: case.written]


def _json(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value


def xarray_reference(path: Path, case: Case) -> np.ndarray | None:
    """float64 values of xarray's decoding with NaN where xarray masks (see module
    docstring); ``None``: xarray cannot decode the variable."""
    engine = "zarr" if case.fmt == "zarr" else None
    kw = {"consolidated": False} if engine else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with xr.open_dataset(path, engine=engine, mask_and_scale=True, **kw) as ds:
                decoded = ds["v"].values
        except (OverflowError, ValueError):
            return None
        with xr.open_dataset(path, engine=engine, mask_and_scale=False, **kw) as ds:
            raw, attrs = ds["v"].values, dict(ds["v"].attrs)
    unsigned = str(attrs.get("_Unsigned", "")).lower()
    if raw.dtype.kind == "i" and unsigned == "true":
        raw = raw.view(f"u{raw.dtype.itemsize}")
    if raw.dtype.kind == "u" and unsigned == "false":
        raw = raw.view(f"i{raw.dtype.itemsize}")
    values = raw.astype(np.float64)
    if "scale_factor" in attrs:
        values = values * np.float64(attrs["scale_factor"])
    if "add_offset" in attrs:
        values = values + np.float64(attrs["add_offset"])
    missing = np.isnan(decoded)
    values[missing] = np.nan
    # the reference is xarray's decoding, only exact: xarray's float32 arithmetic
    # rounds each operation, so within a few units of float32 of the magnitude
    eps = np.finfo(decoded.dtype).eps if decoded.dtype.kind == "f" else 0.0
    size = np.nanmax(np.abs(values), initial=0.0) + abs(float(attrs.get("add_offset", 0)))
    np.testing.assert_allclose(decoded, values, rtol=0, atol=4 * eps * size)
    return values


def named_differences(case: Case) -> dict[str, Any]:
    """The differences from xarray that ``case`` exercises, each with the stored
    values that wxstats (and not xarray) reads as missing (DEFAULT_FILL: refused)."""
    out: dict[str, tuple] = {}
    if case.fmt != "zarr" and case.fill is None and case.stored.itemsize > 1:
        default = case.stored.type(NETCDF_DEFAULT_FILL[case.stored.str[1:]])
        stored = case.raw.copy()
        stored[case.written :] = default  # never written: netCDF's default fill
        mv = case.attrs.get("missing_value")
        # the default fill as the data is read: through _Unsigned's view of the bits
        # (uint16 65535 with _Unsigned "false" is -1, which a missing_value -1 masks)
        flip = {"true": "u", "false": "i"}.get(str(case.attrs.get("_Unsigned")))
        seen = default
        if flip is not None and flip != case.stored.kind:
            seen = np.array(default).view(f"{flip}{case.stored.itemsize}")[()]
        masked = mv is not None and (seen == mv or default in (mv, _stored_type_missing(case)))
        if (stored == default).any() and not masked:
            out["DEFAULT_FILL"] = ()
    if _stored_type_missing(case) is not None:
        out["STORED_TYPE_MISSING_VALUE"] = (_stored_type_missing(case),)
    if case.big_endian and case.attrs.get("_Unsigned") == "true" and case.fill is not None:
        out["XARRAY_BIG_ENDIAN_UNSIGNED_FILL"] = (case.fill,)
    packed = "scale_factor" in case.attrs or "add_offset" in case.attrs
    if packed and case.stored.itemsize >= 4 and case.stored != np.float32:
        fills = (case.fill, case.attrs.get("missing_value"))
        out["XARRAY_PACKED_CAST_FILL"] = tuple(case.stored.type(f) for f in fills if f is not None)
    return out


def _stored_type_missing(case: Case) -> Any:
    """A ``missing_value`` of ``_Unsigned`` data given in the stored type only
    (-1 for int16 read as uint16): xarray does not convert it, so never matches."""
    mv = case.attrs.get("missing_value")
    if "_Unsigned" not in case.attrs or mv is None or float(mv) != round(float(mv)):
        return None
    view = np.dtype(f"{'i' if case.stored.kind == 'u' else 'u'}{case.stored.itemsize}")
    inside = np.iinfo(view).min <= int(mv) <= np.iinfo(view).max
    stored = np.iinfo(case.stored).min <= int(mv) <= np.iinfo(case.stored).max
    return case.stored.type(int(mv)) if stored and not inside else None


def summary(values: np.ndarray) -> dict[str, float]:
    """Textbook float64 statistics: fsum mean, two-pass population std."""
    kept = values[~np.isnan(values)].ravel()
    if kept.size == 0:
        return {"count": 0, "nan_count": values.size}
    mean = math.fsum(kept) / kept.size
    std = math.sqrt(math.fsum((kept - mean) ** 2) / kept.size)
    return {
        "count": kept.size,
        "nan_count": int(np.isnan(values).sum()),
        "mean": mean,
        "std": std,
        "min": float(kept.min()),
        "max": float(kept.max()),
    }


def check(path: Path, case: Case) -> None:
    named = named_differences(case)
    refused = "DEFAULT_FILL" in named
    for name in named:
        event(name)
    reference = xarray_reference(path, case)
    if reference is None:
        return  # xarray cannot decode it: nothing to compare with
    stored = case.raw.copy()  # as the file holds it: never-written steps are fills
    default = NETCDF_DEFAULT_FILL[case.stored.str[1:]]
    stored[case.written :] = case.fill if case.fill is not None else default
    for values in named.values():
        for value in values:
            reference[stored == value] = np.nan
    want = summary(reference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # missing chunks read as missing say so
        try:
            stream = compute(str(path), skipna=True).streams["v__train"]
        except InputError as exc:
            message = str(exc)
            assert "\n" not in message and "variable v" in message
            event("refused")
            if want["count"] == 0 and not refused:
                assert "no finite values" in message
                return
            assert refused, f"refused {case}: {message}"
            assert str(path) in message
            assert "never written" in message or "is missing from the store" in message
            return
    assert not refused, f"{case}: default fill values summed as data"
    assert want["count"] > 0, f"{case}: statistics of no values"
    got = {
        "count": int(stream.count[0]),
        "nan_count": int(stream.nan_count[0]),
        "mean": float(stream.mean[0]),
        "std": float(stream.std[0]),
        "min": float(stream.minimum[0]),
        "max": float(stream.maximum[0]),
    }
    scale = max(abs(want["min"]), abs(want["max"]))
    for key in ("count", "nan_count", "min", "max"):
        assert got[key] == want[key], f"{key}: {got[key]} != {want[key]} for {case}"
    for key in ("mean", "std"):
        assert abs(got[key] - want[key]) <= 1e-12 * scale, f"{key}: {got} != {want} ({case})"


@settings(settings.get_profile(PROFILE))
@given(case=cases())
def test_decoding_matches_xarray(case, tmp_path_factory):
    path = tmp_path_factory.mktemp("dec") / ("v.zarr" if case.fmt == "zarr" else "v.nc")
    event(f"{case.fmt} {case.stored}{' big-endian' if case.big_endian else ''}")
    write(case, path)
    check(path, case)


@pytest.mark.parametrize("fmt", ["nc4", "zarr"])
def test_unsigned_with_fill_in_the_stored_signed_type(tmp_path, fmt):
    """GOES-R: int16, ``_Unsigned="true"``, ``_FillValue=-1`` (main summed 65535)."""
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 40000, (6, 3, 4)).astype(np.uint16).view(np.int16)
    raw[rng.random(raw.shape) < 0.2] = -1
    raw[0, 0, 0] = 5
    case = Case(
        fmt, np.dtype("i2"), raw, {"_Unsigned": "true", "scale_factor": 0.01}, -1, (2, 3, 4)
    )
    case.written = 6
    path = tmp_path / ("v.zarr" if fmt == "zarr" else "v.nc")
    write(case, path)
    check(path, case)


@pytest.mark.parametrize("layout", ["chunked", "contiguous"])
def test_default_fill_is_refused_wherever_it_lies(tmp_path, layout):
    """Steps never written share a chunk with written ones, or lie in a contiguous
    variable: main summed 9.97e36 as data."""
    raw = np.random.default_rng(8).standard_normal((12, 3, 4)).astype(np.float32)
    fmt = "nc4" if layout == "chunked" else "nc4-contiguous"
    chunks = (4, 3, 4) if layout == "chunked" else None
    case = Case(fmt, np.dtype("f4"), raw, chunks=chunks, written=10)
    write(case, tmp_path / "v.nc")
    with pytest.raises(
        InputError, match=r"v.nc: variable v: values equal netCDF's default fill value 9.96"
    ):
        compute(str(tmp_path / "v.nc"), skipna=True)


def test_never_written_chunk_of_bytes_without_fill_is_data(tmp_path):
    """int8 has no default fill for missing data (netCDF4-python, xarray): a chunk
    never written reads as -127 like a written -127, not refused (main refused it
    while summing the same -127 in a chunk partly written)."""
    raw = np.arange(24, dtype=np.int8).reshape(6, 2, 2)
    case = Case("nc4", np.dtype("i1"), raw, chunks=(2, 2, 2), written=3)
    write(case, tmp_path / "v.nc")
    check(tmp_path / "v.nc", case)


def test_constant_series_whose_first_steps_are_nan_has_std_zero(tmp_path):
    """Found by the differential test: the shift came from the first step only, 0
    when it is NaN, leaving sqrt(eps) of spread (std 2.1e-6 for a constant 273.15)."""
    x = np.float32(0.0008216181304305792)
    for n_nan in (1, 3, 30):
        raw = np.array([np.nan] * n_nan + [x] * 3, dtype=np.float32).reshape(-1, 1, 1)
        case = Case("nc4", np.dtype("f4"), raw, {"add_offset": np.float32(273.15)}, None)
        case.chunks, case.written = (1, 1, 1), raw.shape[0]
        write(case, tmp_path / f"v{n_nan}.nc")
        stream = compute(str(tmp_path / f"v{n_nan}.nc"), skipna=True, block_mb=1e-6)
        got = stream.streams["v__train"]
        value = np.float64(x) + np.float64(np.float32(273.15))
        assert (got.count[0], got.mean[0], got.std[0]) == (3, value, 0.0)


def test_unsigned_false_reads_unsigned_storage_as_signed(tmp_path):
    """``_Unsigned="false"`` on uint8 storage (netCDF-4 writers of signed bytes):
    main read 255 as 255, xarray (and netCDF) as -1."""
    raw = np.arange(0, 256, 8, dtype=np.uint8).reshape(4, 2, 4)
    case = Case("nc4", np.dtype("u1"), raw, {"_Unsigned": "false"}, chunks=(2, 2, 4), written=4)
    write(case, tmp_path / "v.nc")
    check(tmp_path / "v.nc", case)
