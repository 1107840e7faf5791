"""neural-lam's MEPS layout (``npyfilesmeps``): a datastore YAML and ``.npy`` samples.

One sample per (analysis time, ensemble member) file
``samples/{split}/nwp_{YYYYMMDDHH}_mbr{NNN}.npy`` of shape
``(time, y, x, features)``, with the TOA flux of its analysis time in
``nwp_toa_downwelling_shortwave_flux_{YYYYMMDDHH}.npy`` ``(time, y, x)``.
The definitions (DESIGN.md §1) are neural-lam's own: state over all time
steps, flux over steps ``2..T-1``, differences over pairs ``(t, t+s)`` with
``t + s <= L - 1`` where ``L = (T // s) * s``. Each analysis time is counted
once per member, unlike neural-lam's file listing.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import MEPS_FLUX, levels_of
from wxstats.core.errors import InputError
from wxstats.core.kernel import Block
from wxstats.core.streams import StreamSpec, listed_features
from wxstats.core.untrusted import load_yaml
from wxstats.sources.base import Capabilities, SampleSteps, parse_period
from wxstats.sources.kinds import Selection, SourceKind
from wxstats.sources.npy import load_npy, npy_header
from wxstats.storage.readahead import prefetch_files

CAPABILITIES = Capabilities(
    what="a neural-lam datastore", state="samples", neurallam_files=True, maps_samples=True
)

FLUX_FIRST_STEP = 2
"""neural-lam uses the flux of the target steps only (the first two are inputs)."""

_SAMPLE_RE = re.compile(r"^nwp_(\d{10})_mbr(\d+)\.npy$")
_SAMPLE_GLOB = "nwp_*_mbr*.npy"


@dataclass(frozen=True)
class MepsSample:
    path: Path
    analysis_time: str  # YYYYMMDDHH
    member: int
    flux_path: Path


def _flux_name(time: str) -> str:
    return f"nwp_{MEPS_FLUX}_{time}.npy"


class _Samples(Sequence):
    """A split's samples as their file names (``nwp_YYYYMMDDHH_mbrNNN.npy``, checked
    by :meth:`MepsSource._list_samples`), each made a :class:`MepsSample` when asked:
    a list of ``MepsSample`` (two ``Path`` each) held ~1 KB per sample, 430 MB for
    the seed's 436,524 (``benchmarks/bench_scale.py``); a name holds ~80 bytes."""

    __slots__ = ("folder", "names")

    def __init__(self, folder: Path, names: list[str]) -> None:
        self.folder = folder
        self.names = names

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> MepsSample:  # type: ignore[override]
        name = self.names[index]
        time = name[4:14]
        member = int(name[18:-4])
        return MepsSample(self.folder / name, time, member, self.folder / _flux_name(time))


def _parse_step_length(value: Any, where: str) -> int:
    """Hours from an int or a string such as ``3``, ``3h``, ``PT3H``."""
    if isinstance(value, bool):
        raise InputError(f"{where}: step_length {value!r} is not a number of hours")
    if isinstance(value, (int, float)) and float(value).is_integer() and value > 0:
        return int(value)
    match = re.fullmatch(r"(?:PT)?(\d+)\s*[hH]?", str(value).strip())
    if match and int(match.group(1)) > 0:
        return int(match.group(1))
    raise InputError(f"{where}: step_length {value!r} is not a positive whole number of hours")


class MepsSource:
    """Samples of one split of a neural-lam MEPS datastore (see module doc)."""

    kind = "npyfilesmeps"
    capabilities = CAPABILITIES
    work_unit = "sample"

    def __init__(
        self,
        config_path: str | Path,
        split: str = "train",
        step_length: int | None = None,
        period: str | None = None,
    ) -> None:
        self.config_path = Path(config_path)
        self.period = period
        config = self._read_config(self.config_path)
        dataset = config.get("dataset") or {}
        where = str(self.config_path)

        def need(key: str) -> Any:
            if key in dataset:
                return dataset[key]
            if key in config:
                return config[key]
            raise InputError(f"{where}: missing key dataset.{key}")

        self.var_names: list[str] = [str(v) for v in need("var_names")]
        repeated = sorted({v for v in self.var_names if self.var_names.count(v) > 1})
        if repeated:
            raise InputError(
                f"{where}: dataset.var_names names {', '.join(repeated)} more than once; "
                "every variable needs its own name"
            )
        self.var_longnames: list[str] = [
            str(v) for v in (dataset.get("var_longnames") or self.var_names)
        ]
        units = dataset.get("var_units") or [""] * len(self.var_names)
        self.var_units: list[str] = [str(u) if u is not None else "" for u in units]
        for key, values in (("var_longnames", self.var_longnames), ("var_units", self.var_units)):
            if len(values) != len(self.var_names):
                raise InputError(
                    f"{where}: dataset.{key} has {len(values)} entries but dataset.var_names "
                    f"has {len(self.var_names)}"
                )
        self.num_timesteps = int(need("num_timesteps"))
        self.num_members = int(dataset.get("num_ensemble_members", 1))
        self.removed = sorted(
            int(i) for i in (dataset.get("remove_state_features_with_index") or [])
        )
        grid = config.get("grid_shape_state") or dataset.get("grid_shape_state")
        if grid is None or len(grid) != 2:
            raise InputError(f"{where}: grid_shape_state must be [ny, nx]")
        self.grid_shape = (int(grid[0]), int(grid[1]))
        self.step_length = (
            int(step_length)
            if step_length is not None
            else _parse_step_length(need("step_length"), where)
        )
        # neural-lam's pairs (t, t + s) lie within the first (T // s) * s steps: none
        # unless that span holds two steps of s
        if self.step_length < 1 or self.num_timesteps // self.step_length < 2:
            raise InputError(
                f"{where}: step length {self.step_length} h leaves no differences in "
                f"{self.num_timesteps} time steps (pairs (t, t + s) within the first "
                f"(T // s) * s steps, as neural-lam takes them); use at most "
                f"{self.num_timesteps // 2}"
            )
        self.split = split
        self.samples_dir = self.config_path.parent / "samples" / split
        self.samples = self._list_samples()
        self.n_channels = len(self.var_names) + len(self.removed)
        if self.removed and (self.removed[0] < 0 or self.removed[-1] >= self.n_channels):
            raise InputError(
                f"{where}: remove_state_features_with_index {self.removed} is outside the "
                f"{self.n_channels} features of the samples"
            )
        self.channels = np.array(
            [c for c in range(self.n_channels) if c not in set(self.removed)], dtype=np.int64
        )
        self._check_first_sample()
        steps = (self.step_length,)
        state = (self.var_names, self.var_units)
        flux = ([MEPS_FLUX], ["W/m**2"])
        self.streams = [
            StreamSpec(
                "state", *state, steps, self.var_longnames,
                listed_features("state", split, self.var_names),
                diff_span={self.step_length: self.step_length * 3600},  # the key is hours
            ),
            StreamSpec(
                MEPS_FLUX, *flux, (), [MEPS_FLUX], listed_features("forcing", split, [MEPS_FLUX])
            ),
        ]  # fmt: skip
        self.attrs = {
            "source": self.kind,
            "datastore_config": str(self.config_path.resolve()),
            "split": split,
            "step_length_hours": self.step_length,
            "num_timesteps": self.num_timesteps,
            "removed_feature_indices": ",".join(map(str, self.removed)),
        }
        if period:
            times = sorted({name[4:14] for name in self.samples.names})
            self.attrs["statistics_period"] = f"{period} (analysis times {times[0]} to {times[-1]})"

    # -- listing and validation -----------------------------------------
    @staticmethod
    def _read_config(path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise InputError(f"{path}: datastore config not found")
        config = load_yaml(path)
        if not isinstance(config, dict):
            raise InputError(f"{path}: expected a mapping with a 'dataset' section")
        return config

    def _list_samples(self) -> _Samples:
        """The split's samples, sorted by (analysis time, member), held as file names
        (:class:`_Samples`): listed from the folder's names, never a ``Path`` each."""
        if not self.samples_dir.is_dir():
            raise InputError(f"{self.samples_dir}: split folder not found")
        folder = self.samples_dir
        by_key: dict[tuple[str, int], str] = {}
        beyond: list[str] = []
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if fnmatch.fnmatchcase(e.name, _SAMPLE_GLOB))
        for name in names:
            match = _SAMPLE_RE.match(name)
            if not match:
                if name.startswith(f"nwp_{MEPS_FLUX}_"):
                    continue
                # neural-lam lists samples with this same pattern and then fails on the name
                raise InputError(
                    f"{folder / name}: matches neural-lam's sample pattern nwp_*_mbr*.npy but "
                    "is not named nwp_YYYYMMDDHH_mbrNNN.npy; rename it or move it out of the "
                    "folder"
                )
            path = os.path.join(folder, name)
            if not os.path.exists(path):
                raise InputError(f"{path}: a link to {os.readlink(path)}, which does not exist")
            time, member = match.group(1), int(match.group(2))
            if member >= self.num_members:
                beyond.append(name)  # neural-lam loads members 0..n-1 only
                continue
            try:
                datetime.strptime(time, "%Y%m%d%H")
            except ValueError:
                raise InputError(f"{path}: {time} is not a YYYYMMDDHH analysis time") from None
            if (time, member) in by_key:
                raise InputError(
                    f"{path}: duplicate sample: analysis time {time} member {member} is also "
                    f"{by_key[(time, member)]}; remove one of them"
                )
            by_key[(time, member)] = name
        del names
        if not by_key:
            raise InputError(f"{self.samples_dir}: no sample files nwp_YYYYMMDDHH_mbrNNN.npy")
        if beyond:
            warnings.warn(
                f"{self.samples_dir}: {len(beyond)} sample(s) of members beyond "
                f"num_ensemble_members {self.num_members} are left out, as neural-lam does: "
                f"{', '.join(beyond[:5])}",
                stacklevel=2,
            )
        if self.period:
            by_key = self._in_period(by_key)
        members_of: dict[str, list[int]] = {}
        for time, member in by_key:
            members_of.setdefault(time, []).append(member)
        all_members = list(range(self.num_members))
        incomplete = {t: ms for t, ms in members_of.items() if sorted(ms) != all_members}
        if incomplete:
            shown = ", ".join(f"{t} (has {sorted(ms)})" for t, ms in sorted(incomplete.items())[:5])
            warnings.warn(
                f"{self.samples_dir}: {len(incomplete)} analysis time(s) lack some of the "
                f"members {all_members}: {shown}; the statistics use the samples that exist",
                stacklevel=2,
            )
        for time in sorted(members_of):  # once per analysis time, not once per member
            flux = folder / _flux_name(time)
            if not flux.exists():
                needed = by_key[(time, min(members_of[time]))]
                raise InputError(
                    f"{flux}: flux file missing for analysis time {time} (needed by {needed})"
                )
        return _Samples(folder, [by_key[key] for key in sorted(by_key)])

    def _in_period(self, by_key: dict[tuple[str, int], str]) -> dict[tuple[str, int], str]:
        """The samples whose analysis time is in ``--period`` (inclusive)."""
        import pandas as pd

        start, end = parse_period(str(self.period))
        times = sorted({t for t, _ in by_key})
        index = pd.DatetimeIndex([datetime.strptime(t, "%Y%m%d%H") for t in times])
        try:
            found = index.slice_indexer(start or None, end or None)
        except (ValueError, TypeError, KeyError) as exc:
            raise InputError(f"--period {self.period}: cannot read it as times: {exc}") from None
        keep = set(times[found])
        if not keep:
            raise InputError(
                f"{self.samples_dir}: no analysis time in --period {self.period} (the split "
                f"has {times[0]} to {times[-1]})"
            )
        return {key: path for key, path in by_key.items() if key[0] in keep}

    def _check_first_sample(self) -> None:
        first = self.samples[0].path
        shape = npy_header(first)[0]
        if len(shape) == 4 and shape[3] != self.n_channels:
            raise InputError(
                f"{first}: has {shape[3]} features, but {self.config_path.name} lists "
                f"{len(self.var_names)} variables and removes {len(self.removed)}, "
                f"so {self.n_channels} are expected"
            )
        if shape != self.sample_shape:
            raise InputError(
                f"{first}: shape {shape} differs from (num_timesteps, *grid_shape_state, "
                f"features) = {self.sample_shape} in {self.config_path.name}"
            )

    @property
    def sample_names(self) -> list[str]:
        """The samples' file names: what a statistics state of them lists."""
        return list(self.samples.names)

    def leave_out(self, names: set[str]) -> None:
        """Read only the samples not named (``wxstats update``: those not yet in
        the state); called before anything is read or counted."""
        self.samples = _Samples(self.samples_dir, [n for n in self.samples.names if n not in names])

    @property
    def sample_shape(self) -> tuple[int, int, int, int]:
        return (self.num_timesteps, *self.grid_shape, self.n_channels)

    # -- the Source protocol ----------------------------------------------
    def __len__(self) -> int:
        return len(self.samples)

    def describe(self, index: int) -> str:
        return str(self.samples[index].path)

    def nbytes(self, index: int) -> int:
        sample = self.samples[index]
        return sample.path.stat().st_size + sample.flux_path.stat().st_size

    def prefetch(self, index: int) -> None:
        """Start reading sample ``index`` into the page cache (asynchronous,
        a hint only: errors are left to :meth:`read`)."""
        sample = self.samples[index]
        prefetch_files([sample.path, sample.flux_path])

    def read(self, index: int) -> dict[str, Block]:
        sample = self.samples[index]
        t = self.num_timesteps
        state = load_npy(sample.path, self.sample_shape)
        flux = load_npy(sample.flux_path, (t, *self.grid_shape))
        n_grid = self.grid_shape[0] * self.grid_shape[1]
        s = self.step_length
        used_length = (t // s) * s
        return {
            "state": Block(
                array=state.reshape(t, n_grid, self.n_channels),
                channels=self.channels,
                value_range=(0, t),
                diff_ranges={s: (s, used_length)},
            ),
            MEPS_FLUX: Block(
                array=flux.reshape(t, n_grid, 1),
                channels=np.zeros(1, dtype=np.int64),
                value_range=(FLUX_FIRST_STEP, t),
                origin=str(sample.flux_path),
            ),
        }

    def reference_blocks(self) -> dict[str, Block]:
        return self.read(0)

    def covers(self, index: int) -> dict[str, SampleSteps]:
        """All of the sample's file (see :meth:`Source.covers`): a MEPS sample is
        one file whatever the block size, so a checkpoint's coverage of a
        datastore stays by sample, named by its file."""
        name = self.samples[index].path.name
        return {s.name: SampleSteps(name, 0, 0, self.num_timesteps) for s in self.streams}

    def inputs(self) -> list[str]:
        paths = [self.config_path] + [p for s in self.samples for p in (s.path, s.flux_path)]
        return [str(p) for p in paths]

    def identity(self, files: bool = True) -> dict[str, Any]:
        """The source's parts of a run's identity (:mod:`wxstats.runtime.identity`):
        the variables, channels read, grid, step length and config file's
        content; the samples' files by name and size; and their modification times."""
        listing = []
        for sample in self.samples:
            for path in (sample.path, sample.flux_path):
                stat = path.stat()
                listing.append([path.name, stat.st_size, stat.st_mtime_ns])
        return {
            "data": {
                "kind": self.kind,
                "split": self.split,
                "features": list(self.var_names),
                "units": list(self.var_units),
                "grid": list(self.grid_shape),
                "channels": self.channels.tolist(),
                "config": hashlib.sha256(self.config_path.read_bytes()).hexdigest()[:16],
                "diff_steps": [self.step_length],
            },
            "run": {"period": self.period, "inputs": [f[:2] for f in listing]},
            "files": {"files": listing} if files else {},
        }

    @property
    def path(self) -> str:
        """The datastore's config file: what messages name."""
        return str(self.config_path)

    # -- neural-lam specifics ---------------------------------------------
    @property
    def static_dir(self) -> Path:
        return self.config_path.parent / "static"

    def levels(self) -> list[str]:
        """Vertical level of each variable, for ``parameter_weights.npy``."""
        return levels_of(self.var_longnames)


def _open(dataset: Any, selection: Selection) -> MepsSource:
    """One split of a datastore (its folder, default ``train``)."""
    if len(selection.splits) > 1:
        raise InputError(f"{dataset}: a neural-lam datastore takes one --split per run")
    split = selection.splits[0] if selection.splits else "train"
    step, period = selection.step_length, selection.period
    return MepsSource(str(dataset), split=split, step_length=step, period=period)


KIND = SourceKind(
    MepsSource.kind,
    CAPABILITIES,
    recognises=lambda dataset, given: given is None and str(dataset).endswith((".yaml", ".yml")),
    opens=_open,
)
"""A neural-lam datastore: its YAML config."""
