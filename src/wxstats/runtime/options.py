"""Everything a ``compute`` run is told, in one frozen value.

The CLI parses its arguments into a :class:`ComputeOptions` once; the Python
API builds one from keyword arguments. Nothing below the CLI sees argparse:
this value travels down to the sources, the runtime and the writers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from wxstats.core.errors import WxstatsError


def _tuple(value: Any) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@dataclass(frozen=True)
class ComputeOptions:
    """What to read, what to write, how to run (see docs/ for each option)."""

    dataset: str = ""
    # -- which data (sources) ---------------------------------------------------
    split: str | None = None
    """One split: a MEPS split folder, or one ``NAME=START/END`` (same as ``splits``)."""
    splits: tuple[str, ...] = ()
    """zarr/netCDF: ``NAME=START/END`` intervals, or an mllam-data-prep store's split names."""
    step_length: int | None = None
    period: str | None = None
    """``START/END``: the statistics use only these times (every split cut to them)."""
    by: str | None = None
    """``month`` or ``hour`` (a climatology) or ``year``: statistics per group of time steps."""
    weights: str | None = None
    """zarr/netCDF: ``coslat``, ``VAR`` or ``FILE:VAR``: area-weighted statistics."""
    variables: tuple[str, ...] | None = None
    time_dim: str = "time"
    diff_steps: tuple[int, ...] | None = None
    feature_dims: tuple[str, ...] | None = None
    pool: tuple[str, ...] = ()
    """zarr/netCDF: feature dimensions (``level``) each variable is also pooled over."""
    moments: int = 2
    """The highest power summed: 4 adds the skewness and excess kurtosis (``--moments``)."""
    block_mb: float | None = None
    storage_options: tuple[tuple[str, Any], ...] = ()
    """fsspec options of a URL (``endpoint_url``, ``anon``, ``key``...); never recorded."""
    skipna: bool = False
    # -- outputs -------------------------------------------------------------------
    output_dir: Path | None = None
    summary: Path | None = None
    output: Path | None = None
    write_into: bool = False
    output_format: str = "netcdf"
    """zarr/netCDF: ``netcdf`` (one statistics file), ``graphcast``, ``makani``, ``ace``
    or ``aurora`` (their files); an anemoi dataset: ``anemoi`` (a statistics store anemoi
    opens, ``--output S.zarr``). Declared in :data:`wxstats.runtime.targets.TARGETS`."""
    overwrite: bool = False
    level_weights: dict[str, float] | None = None
    min_std: float | None = None
    """Floor of the std written where neural-lam divides by it; None: refuse a 0."""
    # -- resuming ------------------------------------------------------------------
    checkpoint: Path | None = None
    checkpoint_interval: float = 60.0
    resume: bool = False
    # -- statistics states (wxstats.runtime.grow) ------------------------------
    state: Path | None = None
    """Write the exact accumulator here (``--state``)."""
    base_state: Path | None = None
    """``update``: the state the new data is added to."""
    allow_gap: bool = False
    # -- how to run ----------------------------------------------------------------
    threads: int | None = None
    """Threads per process; ``None``: the CPUs available to this rank, at most 8."""
    nproc: int | None = None
    backend: str = "auto"
    device: str = "auto"
    timeout: float = 120.0
    quiet: bool = False
    log_format: str = "text"
    log_interval: float = 30.0
    argv: tuple[str, ...] = field(default=(), compare=False)
    """The command line, for ``--nproc`` to start its ranks with."""

    def __post_init__(self) -> None:
        for name in ("splits", "variables", "diff_steps", "feature_dims", "pool", "argv"):
            value = _tuple(getattr(self, name))
            object.__setattr__(
                self, name, () if value is None and name in ("splits", "pool", "argv") else value
            )
        if isinstance(self.storage_options, dict):
            object.__setattr__(self, "storage_options", tuple(self.storage_options.items()))
        if self.split is not None and not self.splits:
            object.__setattr__(self, "splits", (self.split,))
        for name in (
            "output_dir",
            "summary",
            "output",
            "checkpoint",
            "state",
            "base_state",
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        object.__setattr__(self, "dataset", str(self.dataset))

    @classmethod
    def of(cls, dataset: str | Path, **options: Any) -> ComputeOptions:
        """Options from keyword arguments, refusing unknown names clearly."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise WxstatsError(f"unknown option(s) {', '.join(unknown)}")
        return cls(dataset=str(dataset), **options)

    @property
    def meps_split(self) -> str:
        """The split folder of a neural-lam datastore (default ``train``)."""
        return self.splits[0] if self.splits else "train"
