"""A small, realistic dataset in neural-lam's MEPS layout, made on the spot.

Magnitudes follow MEPS: surface pressures ~1e5 Pa with a spread of ~1e3,
geopotential at 500 hPa ~5.5e4 m²/s², temperatures ~280 K, winds of a few
m/s, and a TOA shortwave flux that follows the sun and is zero at night. Two
ensemble members, a few analysis times, 65 hourly steps. The same arguments
always give the same bytes (seeded per sample).

The command never destroys what a user has: a folder that is not empty is
written into only with ``--overwrite``, except one that already holds this very
example (same spec, recorded in a marker file written last), which is reused
as it is, with the statistics an earlier run computed from it
(:func:`earlier_statistics`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from wxstats.core.errors import WxstatsError

# (name, long name, units, typical mean, spatial spread, temporal spread)
VARIABLES: list[tuple[str, str, str, float, float, float]] = [
    ("pres_0g", "pres_heightAboveGround_0_instant", "Pa", 99500.0, 900.0, 300.0),
    ("pres_0s", "pres_heightAboveSea_0_instant", "Pa", 101300.0, 600.0, 300.0),
    ("nlwrs_0", "nlwrs_heightAboveGround_0_accum", "W/m**2", -60.0, 25.0, 20.0),
    ("nswrs_0", "nswrs_heightAboveGround_0_accum", "W/m**2", 120.0, 60.0, 90.0),
    ("r_2", "r_heightAboveGround_2_instant", "", 0.78, 0.1, 0.08),
    ("r_65", "r_hybrid_65_instant", "", 0.80, 0.1, 0.08),
    ("t_2", "t_heightAboveGround_2_instant", "K", 280.0, 6.0, 3.0),
    ("t_65", "t_hybrid_65_instant", "K", 279.0, 6.0, 3.0),
    ("t_500", "t_isobaricInhPa_500_instant", "K", 250.0, 4.0, 2.0),
    ("t_850", "t_isobaricInhPa_850_instant", "K", 270.0, 5.0, 2.5),
    ("u_65", "u_hybrid_65_instant", "m/s", 2.0, 5.0, 3.0),
    ("u_850", "u_isobaricInhPa_850_instant", "m/s", 4.0, 7.0, 4.0),
    ("v_65", "v_hybrid_65_instant", "m/s", 0.5, 5.0, 3.0),
    ("v_850", "v_isobaricInhPa_850_instant", "m/s", 1.0, 7.0, 4.0),
    ("wvint_0", "wvint_entireAtmosphere_0_instant", "kg/m**2", 12.0, 5.0, 2.0),
    ("z_1000", "z_isobaricInhPa_1000_instant", "m**2/s**2", 900.0, 600.0, 300.0),
    ("z_500", "z_isobaricInhPa_500_instant", "m**2/s**2", 55000.0, 1200.0, 500.0),
]
REMOVED_INDEX = 15
"""Like MEPS, the files hold one more feature, dropped by the config."""

SOLAR_CONSTANT = 1361.0
MARKER = ".wxstats-example.json"
"""Written last into an example folder: the spec it was made with."""


@dataclass(frozen=True)
class ExampleSpec:
    """Size of the generated dataset (defaults: ~37 MB, a few seconds)."""

    analysis_times: int = 3
    members: int = 2
    grid: tuple[int, int] = (32, 40)
    num_timesteps: int = 65
    step_length: int = 3
    first_time: datetime = datetime(2022, 4, 1, 0)
    interval_hours: int = 12
    val_times: int = 1

    @property
    def sample_bytes(self) -> int:
        ny, nx = self.grid
        return self.num_timesteps * ny * nx * (len(VARIABLES) + 1) * 4


def config_text(spec: ExampleSpec, name: str = "meps_example") -> str:
    import yaml

    config = {
        "dataset": {
            "name": name,
            "num_forcing_features": 16,
            "var_names": [v[0] for v in VARIABLES],
            "var_units": [v[2] for v in VARIABLES],
            "var_longnames": [v[1] for v in VARIABLES],
            "num_timesteps": spec.num_timesteps,
            "num_ensemble_members": spec.members,
            "step_length": spec.step_length,
            "remove_state_features_with_index": [REMOVED_INDEX],
        },
        "grid_shape_state": list(spec.grid),
        "projection": {
            "class_name": "LambertConformal",
            "kwargs": {
                "central_latitude": 63.3,
                "central_longitude": 15.0,
                "standard_parallels": [63.3, 63.3],
            },
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def _coordinates(spec: ExampleSpec) -> tuple[np.ndarray, np.ndarray]:
    ny, nx = spec.grid
    y = np.linspace(0.0, 1.0, ny)[:, None]
    x = np.linspace(0.0, 1.0, nx)[None, :]
    return np.broadcast_to(y, (ny, nx)), np.broadcast_to(x, (ny, nx))


def toa_flux(spec: ExampleSpec, analysis_time: datetime) -> np.ndarray:
    """Diurnal TOA shortwave flux (time, y, x): positive by day, 0 at night."""
    yy, xx = _coordinates(spec)
    lat = np.deg2rad(55.0 + 15.0 * yy)
    lon = np.deg2rad(0.0 + 30.0 * xx)
    day = analysis_time.timetuple().tm_yday
    declination = np.deg2rad(23.44) * math.sin(2 * math.pi * (284 + day) / 365.0)
    out = np.empty((spec.num_timesteps, *spec.grid), dtype=np.float32)
    for t in range(spec.num_timesteps):
        when = analysis_time + timedelta(hours=t)
        solar_hour = when.hour + when.minute / 60.0 + np.rad2deg(lon) / 15.0
        hour_angle = np.deg2rad(15.0 * (solar_hour - 12.0))
        cos_zenith = np.sin(lat) * math.sin(declination) + np.cos(lat) * math.cos(
            declination
        ) * np.cos(hour_angle)
        out[t] = SOLAR_CONSTANT * np.clip(cos_zenith, 0.0, None)
    return out


def state_sample(spec: ExampleSpec, analysis_time: datetime, member: int) -> np.ndarray:
    """One sample (time, y, x, features + 1) in float32."""
    seed = int(analysis_time.strftime("%Y%m%d%H")) * 1000 + member
    rng = np.random.default_rng(seed)
    yy, xx = _coordinates(spec)
    t = np.arange(spec.num_timesteps, dtype=np.float64)[:, None, None]
    hours = analysis_time.hour + t
    diurnal = np.sin(2 * np.pi * (hours - 9.0) / 24.0)
    n_feat = len(VARIABLES) + 1
    out = np.empty((spec.num_timesteps, *spec.grid, n_feat), dtype=np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=n_feat)
    for f in range(n_feat):
        if f == REMOVED_INDEX:
            out[..., f] = rng.normal(0.0, 1.0, size=out.shape[:-1])
            continue
        k = f if f < REMOVED_INDEX else f - 1
        _, _, _, mean, spatial, temporal = VARIABLES[k]
        pattern = np.sin(3.0 * xx + phase[f]) * np.cos(2.0 * yy - phase[f])
        drift = np.sin(2 * np.pi * t / 40.0 + phase[f] + 0.3 * member)
        field = (
            mean
            + spatial * pattern
            + temporal * (0.6 * diurnal + 0.4 * drift)
            + 0.05 * spatial * rng.standard_normal(out.shape[:-1])
        )
        if VARIABLES[k][0] in ("r_2", "r_65"):
            field = np.clip(field, 0.0, 1.0)
        elif VARIABLES[k][0] == "nswrs_0":
            field = np.clip(field, 0.0, None)
        out[..., f] = field
    return out


def write_example(root: str | Path, spec: ExampleSpec = ExampleSpec()) -> Path:
    """Write the dataset under ``root``; returns the datastore config path."""
    root = Path(root)
    config_path = root / "meps.datastore.yaml"
    static = root / "static"
    static.mkdir(parents=True, exist_ok=True)
    config_path.write_text(config_text(spec))
    yy, xx = _coordinates(spec)
    np.save(
        static / "nwp_xy.npy",
        np.stack([xx * 2.5e3 * spec.grid[1], yy * 2.5e3 * spec.grid[0]]).astype(np.float32),
    )
    border = np.zeros(spec.grid, dtype=bool)
    border[:2, :] = border[-2:, :] = border[:, :2] = border[:, -2:] = True
    np.save(static / "border_mask.npy", border)
    np.save(static / "surface_geopotential.npy", (2000.0 * yy * xx).astype(np.float32))
    splits = {
        "train": range(spec.analysis_times),
        "val": range(spec.analysis_times, spec.analysis_times + spec.val_times),
    }
    for split, indices in splits.items():
        folder = root / "samples" / split
        folder.mkdir(parents=True, exist_ok=True)
        for i in indices:
            when = spec.first_time + timedelta(hours=spec.interval_hours * i)
            stamp = when.strftime("%Y%m%d%H")
            for member in range(spec.members):
                np.save(
                    folder / f"nwp_{stamp}_mbr{member:03d}.npy", state_sample(spec, when, member)
                )
            np.save(
                folder / f"nwp_toa_downwelling_shortwave_flux_{stamp}.npy", toa_flux(spec, when)
            )
            np.save(folder / f"wtr_{stamp}.npy", (xx < 0.3).astype(np.float32))
    (root / MARKER).write_text(_spec_json(spec))
    return config_path


def _spec_json(spec: ExampleSpec) -> str:
    fields = {k: str(v) if isinstance(v, datetime) else v for k, v in vars(spec).items()}
    return json.dumps(fields, sort_keys=True, default=list)


def example_in(root: str | Path, spec: ExampleSpec, overwrite: bool) -> tuple[Path, bool]:
    """The example's config under ``root`` and whether it was already there:
    written into an empty or new folder, reused where the same example is,
    written over other files only with ``overwrite``."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise WxstatsError(f"{root}: exists and is not a folder; choose another location")
    marker = root / MARKER
    if not overwrite and marker.is_file() and marker.read_text() == _spec_json(spec):
        return root / "meps.datastore.yaml", True
    if root.is_dir() and any(root.iterdir()) and not overwrite:
        what = "holds a different wxstats example" if marker.is_file() else "is not empty"
        raise WxstatsError(
            f"{root}: {what}; the example would overwrite files in it. Choose a new folder, "
            "or pass --overwrite to write the example into it anyway"
        )
    return write_example(root, spec), False


def earlier_statistics(config: Path) -> Path | None:
    """The statistics an earlier ``wxstats example`` wrote beside the example's
    config, when its whole set is there (a rerun shows them rather than
    refusing to replace them, or computing the same bytes again)."""
    from wxstats.io.formats.neurallam import NEURALLAM_FILES
    from wxstats.io.journal import interrupted_write
    from wxstats.io.read import NETCDF_NAME

    static = config.parent / "static"
    names = (*NEURALLAM_FILES, NETCDF_NAME)
    if interrupted_write(static) is None and all((static / n).is_file() for n in names):
        return static / NETCDF_NAME
    return None
