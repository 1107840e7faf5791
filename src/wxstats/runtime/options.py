"""Every option of a run, declared once, and the frozen value they make.

Each field of :class:`ComputeOptions` that the command line sets carries an
:class:`~wxstats.runtime.option.Option`: its flag, how its text is parsed, its
help, which commands take it, the capability of the data that takes it, where
the run identity records it, and how ``update`` derives it from a state. The
options selecting data are the fields of its base,
:class:`~wxstats.runtime.data_options.DataOptions`; the outputs and how to run
are declared here. From this one declaration (:data:`OPTIONS`) come the
argparse flags (:mod:`wxstats.cli.compute_args`), the refusal of data options
the data cannot take (:func:`wxstats.runtime.targets.refuse_data_options`) and
the selection of an ``update`` (:func:`from_state`). Adding an option is one
field. Nothing below the CLI sees argparse.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.runtime.data_options import DataOptions
from wxstats.runtime.option import (
    GROWS,
    PARALLEL,
    RESUME,
    STATES,
    WRITES,
    ZARR,
    Option,
    level_weights,
    option,
    positive_float,
    positive_int,
    seconds,
)


@dataclass(frozen=True)
class ComputeOptions(DataOptions):
    """What to read (:class:`DataOptions`), what to write, how to run (see docs/)."""

    # -- outputs -------------------------------------------------------------------
    output_dir: Path | None = option(
        None,
        "--output-dir",
        "write the statistics here instead of <datastore dir>/static (the train split) "
        "or <datastore dir>/static/SPLIT (any other split: never where neural-lam loads its "
        "training normalization)",
        parse=Path,
        metavar="DIR",
        commands=WRITES,
        help_for={
            "update": "neural-lam datastore states: write neural-lam's static files and "
            "wxstats_stats.nc here (default: the datastore's static/, as compute)",
            "merge": "neural-lam datastore states: write neural-lam's static files and "
            "wxstats_stats.nc here",
        },
    )
    summary: Path | None = option(
        None,
        "--summary",
        "also write the statistics as JSON (exact float64 values)",
        parse=Path,
        metavar="FILE.json",
        commands=WRITES,
    )
    output: Path | None = option(
        None,
        "--output",
        "the statistics file (netCDF, float64)",
        parse=Path,
        metavar="FILE.nc",
        group=ZARR,
        commands=WRITES,
        help_for={
            "update": "the statistics file of zarr/netCDF states (default: the new state's "
            "name with .stats.nc)",
            "merge": "the statistics file of zarr/netCDF states (default: beside --state)",
        },
    )
    write_into: bool = option(
        False,
        "--write-into",
        "mllam-data-prep store: replace its {category}__{split}__{mean,std,diff_mean,"
        "diff_std} variables with the exact values; anemoi dataset: its mean, stdev, minimum, "
        "maximum and statistics_tendencies_* arrays and statistics dates",
        action="store_true",
        group=ZARR,
    )
    output_format: str = option(
        "netcdf",
        "--format",
        "wxstats.runtime.targets:format_help",
        choices="wxstats.runtime.targets:FORMATS",
        group=ZARR,
    )
    """zarr/netCDF: ``netcdf`` (one statistics file), ``graphcast``, ``makani``, ``ace``
    or ``aurora`` (their files); an anemoi dataset: ``anemoi`` (a statistics store anemoi
    opens, ``--output S.zarr``). Declared in :data:`wxstats.runtime.targets.TARGETS`."""
    overwrite: bool = option(
        False,
        "--overwrite",
        "replace existing outputs (never done without it)",
        action="store_true",
        commands=WRITES,
    )
    level_weights: dict[str, float] | None = option(
        None,
        "--level-weights",
        "loss weight per vertical level for parameter_weights.npy "
        "(default 2=1,0=0.1,65=0.065,1000=0.1,850=0.05,500=0.03)",
        parse=level_weights,
        metavar="LEVEL=W,...",
        commands=WRITES,
        help_for={
            "update": "neural-lam states: as compute's (a state does not keep it)",
            "merge": "neural-lam states: as compute's (a state does not keep it)",
        },
    )
    min_std: float | None = option(
        None,
        "--min-std",
        "write max(std, VALUE) for every std neural-lam divides by (parameter_std.pt, "
        "diff_std.pt, the flux std; a --write-into store's std and diff_std); without it a "
        "std of 0 (a constant field) is refused. Choose VALUE far below any real std (e.g. "
        "1e-6): a constant field standardizes to 0 whatever it is. wxstats_stats.nc keeps "
        "the true values. Checked as stored: a std, or VALUE, that is 0 or subnormal in the "
        "file's dtype (float32 for .pt) counts as 0",
        parse=positive_float,
        metavar="VALUE",
        commands=WRITES,
        help_for={
            "update": "neural-lam states: as compute's (a state does not keep it)",
            "merge": "neural-lam states: as compute's (a state does not keep it)",
        },
    )
    """Floor of the std written where neural-lam divides by it; None: refuse a 0."""
    # -- resuming ------------------------------------------------------------------
    checkpoint: Path | None = option(
        None,
        "--checkpoint",
        "save progress in DIR (a new or empty folder; every rank; a shared folder for "
        "several nodes), so that a killed run can be resumed; kept after success",
        parse=Path,
        metavar="DIR",
        group=RESUME,
    )
    checkpoint_interval: float = option(
        60.0,
        "--checkpoint-interval",
        "most seconds between saves of each rank's progress (default 60)",
        parse=seconds,
        metavar="SECONDS",
        group=RESUME,
    )
    resume: bool = option(
        False,
        "--resume",
        "continue the run saved in --checkpoint DIR (any number of ranks, any launcher); "
        "refused if DIR holds no checkpoint, or the data or the options changed",
        action="store_true",
        group=RESUME,
    )
    # -- statistics states (wxstats.runtime.grow) ------------------------------
    state: Path | None = option(
        None,
        "--state",
        "also write the exact accumulator, to add later data with 'wxstats update' or "
        "join other ranges or samples with 'wxstats merge' (one split); a zarr/netCDF run's "
        "statistics file defaults to the state's name with .stats.nc",
        parse=Path,
        metavar="FILE.wxstate",
        group=STATES,
        commands=frozenset({"compute", "update", "merge"}),
        help_for={"update": "write the grown state", "merge": "write the merged state"},
    )
    """Write the exact accumulator here (``--state``)."""
    base_state: Path | None = None
    """``update``: the state the new data is added to."""
    allow_gap: bool = option(
        False,
        "--allow-gap",
        "accept time steps missing between the ranges (no differences across a gap)",
        action="store_true",
        commands=frozenset({"update", "merge"}),
    )
    # -- how to run ----------------------------------------------------------------
    threads: int | None = option(
        None,
        "--threads",
        "threads reading and reducing samples in this process "
        "(default: the CPUs available, at most 8)",
        parse=positive_int,
        commands=GROWS,
    )
    """Threads per process; ``None``: the CPUs available to this rank, at most 8."""
    nproc: int | None = option(
        None,
        "--nproc",
        "start N ranks on this machine (PyTorch Distributed: the torch extra); the results "
        "are identical. On one machine threads (--threads) are faster (each rank pays the "
        "start-up): use ranks across machines (torchrun, srun) or one per GPU",
        parse=positive_int,
        metavar="N",
        group=PARALLEL,
        commands=GROWS,
    )
    backend: str = option(
        "auto",
        "--backend",
        "collectives backend (default: nccl on CUDA devices, else gloo)",
        choices=("auto", "gloo", "nccl"),
        group=PARALLEL,
        commands=GROWS,
    )
    device: str = option(
        "auto",
        "--device",
        "device of the reduced tensors (default: cuda:LOCAL_RANK if there is a GPU "
        "for every local rank, else cpu)",
        choices=("auto", "cpu", "cuda"),
        group=PARALLEL,
        commands=GROWS,
    )
    timeout: float = option(
        120.0,
        "--timeout",
        "how long to wait for ranks to join, for a silent rank before it is declared "
        "dead, and for ranks to stop after a failure (default 120)",
        parse=positive_float,
        metavar="SECONDS",
        group=PARALLEL,
        commands=GROWS,
    )
    quiet: bool = option(
        False,
        "--quiet",
        "print only errors and warnings",
        action="store_true",
        commands=WRITES,
    )
    log_format: str = option(
        "text",
        "--log-format",
        "text: a progress bar on a terminal, else a line every --log-interval seconds; "
        "json: a JSON progress line every --log-interval seconds on stderr, for batch jobs",
        choices=("text", "json"),
    )
    log_interval: float = option(
        30.0,
        "--log-interval",
        "seconds between progress lines when there is no terminal (default 30)",
        parse=seconds,
        metavar="SECONDS",
    )
    argv: tuple[str, ...] = field(default=(), compare=False)
    """The command line, for ``--nproc`` to start its ranks with."""

    def __post_init__(self) -> None:
        for name in ("splits", "variables", "diff_steps", "feature_dims", "pool", "argv"):
            value = _tuple(getattr(self, name))
            object.__setattr__(
                self, name, () if value is None and name in ("splits", "pool", "argv") else value
            )
        object.__setattr__(self, "pool", tuple(dict.fromkeys(d for d in self.pool if d)))
        if isinstance(self.storage_options, dict):
            object.__setattr__(self, "storage_options", tuple(self.storage_options.items()))
        if self.split is not None and not self.splits:
            object.__setattr__(self, "splits", (self.split,))
        for name in ("output_dir", "summary", "output", "checkpoint", "state", "base_state"):
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


def _tuple(value: Any) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


OPTIONS: dict[str, Option] = {
    f.name: f.metadata["option"] for f in fields(ComputeOptions) if "option" in f.metadata
}
"""The declaration, by field name, in the order of :class:`ComputeOptions`."""


def from_state(state: Any) -> dict[str, Any]:
    """The options a state fixes, derived from what it records (``update`` takes
    them from it, never from its command line); a recorded file that is gone is
    refused naming the state and the recorded value."""
    derived = {}
    for name, decl in OPTIONS.items():
        if decl.from_state is None:
            continue
        value = decl.from_state(state)
        for file in decl.files(value):
            if not Path(file).exists():
                shown = f"{decl.flag} {decl.show(value)}"
                raise WxstatsError(f"{state.name} records {shown}, not found")
        if value is not None:
            derived[name] = value
    return derived
