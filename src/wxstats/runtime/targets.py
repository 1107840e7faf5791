"""Every output a run can write, declared once: :data:`TARGETS`.

A :class:`Target` says when a run writes it (``chosen``), what data it needs
(``requires``, by :class:`~wxstats.sources.base.Capabilities`), which options
it cannot take (``refuses``, with why), which output options it uses
(``takes``), whether its files hold one split (``one_split``), and its
``check``, ``paths`` and ``writers`` (files written all-or-nothing,
:mod:`wxstats.io.atomic`) or ``into`` (a store rewritten in place after them).
Paths and writers see the data as :class:`~wxstats.runtime.set_outputs.DataFacts`.
Options that select data are declared with the capability that takes them
in :mod:`wxstats.runtime.data_options` (:data:`DATA_OPTIONS` here). The one
pre-flight that refuses by this table is :mod:`wxstats.runtime.preflight`.
Adding a format is one module in :mod:`wxstats.io.formats` and one row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.runtime import anemoi_outputs as anemoi
from wxstats.runtime import set_outputs as sets
from wxstats.runtime.option import Option
from wxstats.runtime.options import OPTIONS, ComputeOptions
from wxstats.runtime.set_outputs import DataFacts
from wxstats.sources.base import Capabilities

# -- options, as a run is given them -------------------------------------------------------
GIVEN: dict[str, Callable[[ComputeOptions], str | None]] = {
    "--split": lambda o: "--split" if o.splits else None,
    "--variables": lambda o: "--variables" if o.variables else None,
    "--time-dim": lambda o: "--time-dim" if o.time_dim != "time" else None,
    "--diff-steps": lambda o: "--diff-steps" if o.diff_steps else None,
    "--feature-dims": lambda o: "--feature-dims" if o.feature_dims is not None else None,
    "--by": lambda o: f"--by {o.by}" if o.by else None,
    "--by year": lambda o: "--by year" if o.by == "year" else None,
    "--pool": lambda o: f"--pool {','.join(o.pool)}" if o.pool else None,
    "--weights": lambda o: "--weights" if o.weights is not None else None,
    "--weights (but none)": lambda o: (
        f"--weights {o.weights}" if o.weights not in (None, "none") else None
    ),
    "--block-mb": lambda o: "--block-mb" if o.block_mb is not None else None,
    "--storage-option": lambda o: "--storage-option" if o.storage_options else None,
    "--step-length": lambda o: "--step-length" if o.step_length is not None else None,
    "--level-weights": lambda o: "--level-weights" if o.level_weights is not None else None,
    "--min-std": lambda o: "--min-std" if o.min_std is not None else None,
    "--output": lambda o: "--output" if o.output is not None else None,
    "--write-into": lambda o: "--write-into" if o.write_into else None,
    "--format": lambda o: f"--format {o.output_format}" if o.output_format != "netcdf" else None,
    "--format anemoi": lambda o: "--format anemoi" if o.output_format == "anemoi" else None,
    "--state": lambda o: "--state" if o.state is not None or o.base_state is not None else None,
    "--skipna": lambda o: "--skipna" if o.skipna else None,
}
"""How each option reads when given (``--by month``), else None: the one home of
"was this option given"."""


DATA_OPTIONS: dict[str, Option] = {o.flag: o for o in OPTIONS.values() if o.takes is not None}
"""Options that select data, by flag: the capability that takes each is declared with
the option (:attr:`~wxstats.runtime.option.Option.takes`)."""

OUTPUT_OPTIONS: dict[str, str] = {
    "--min-std": "it floors what neural-lam divides by: neural-lam's static files, or an "
    "mllam-data-prep store with --write-into; a statistics file keeps the true std",
    "--level-weights": "neural-lam's parameter_weights.npy: only a neural-lam datastore's run "
    "writes loss weights",
}
"""Options only some targets use (:attr:`Target.takes`): why, where none does."""


def _given(options: ComputeOptions, flags: Any) -> list[str]:
    return [text for flag in flags if (text := GIVEN[flag](options)) is not None]


def refuse_data_options(options: ComputeOptions, caps: Capabilities) -> None:
    """Refuse options that select data this kind of data does not have (before it is opened)."""
    refused = [f for f in DATA_OPTIONS if GIVEN[f](options) and not DATA_OPTIONS[f].takes(caps)]
    if refused:
        wheres = {DATA_OPTIONS[f].where for f in refused}
        hints = [DATA_OPTIONS[f].hint for f in refused if DATA_OPTIONS[f].hint]
        if len(wheres) == 1:
            flags, why = ", ".join(_given(options, refused)), f"for {wheres.pop()} only"
        else:
            texts = [f"{GIVEN[f](options)} ({DATA_OPTIONS[f].where})" for f in refused]
            flags, why = ", ".join(texts), "for those only"
        raise WxstatsError(
            f"{options.dataset}: {flags}: not for {caps.what} ({why}"
            + (f"; {hints[0]})" if hints else ")")
        )
    if options.pool and options.by:
        raise WxstatsError(
            f"{options.dataset}: {GIVEN['--pool'](options)}: not with --by {options.by} "
            "(pooled statistics are over the whole run)"
        )


# -- targets -------------------------------------------------------------------------------
Check = Callable[[Any, ComputeOptions], None]
Paths = Callable[[DataFacts, ComputeOptions], list[Path]]
Writers = Callable[[DataFacts, Stats, ComputeOptions], Mapping[Path, Writer]]
Into = Callable[[Any, Stats, ComputeOptions], Callable[[], list[Path]]]


def _nothing(source: Any, options: ComputeOptions) -> None:
    return None


def _no_option_check(options: ComputeOptions) -> None:
    return None


def _has(name: str) -> Callable[[Capabilities], str | None]:
    """A requirement: the capability ``name``, else why not (``a neural-lam datastore``)."""
    return lambda c: None if getattr(c, name) else f"not {c.what}"


@dataclass(frozen=True)
class Target:
    """One output of a run (see module docstring)."""

    name: str
    """How messages name it (``--format makani``)."""
    writes: str
    """What it writes, for messages (``writes a folder of .npy files``)."""
    chosen: Callable[[Capabilities, ComputeOptions], bool]
    paths: Paths
    writers: Writers | None = None
    """Writers of its files (None: written by another part, a state by its growth)."""
    into: Into | None = None
    """A store it writes in place after the files: checks the values, returns the write."""
    rewrites: Callable[[DataFacts, ComputeOptions], Path] | None = None
    """The store it changes in place (the dataset itself): locked from the run's
    preparation to the end of its write, an interrupted write into it repaired
    first (:mod:`wxstats.io.zarrstore`)."""
    requires: Callable[[Capabilities], str | None] = lambda c: None
    needs: str = ""
    refuses: Mapping[str, str] = field(default_factory=dict)
    takes: tuple[str, ...] = ()
    check: Check = _nothing
    """What the data must be for it (a source: not run by ``merge``, which has none)."""
    check_options: Callable[[ComputeOptions], None] = _no_option_check
    """What its options must be (``merge`` too)."""
    one_split: bool = False
    """Its files hold the statistics of one split."""
    one_step: str | None = None
    """Its files hold one difference step, so called (``residual step``)."""
    format: str | None = None
    """Its ``--format`` name, if one chooses it; ``help`` says what it writes there."""
    help: str = ""
    weights: str | None = None
    """The weighting it defaults to (makani's quadrature: ``coslat``)."""
    time_means: bool = False
    """It needs the mean over time of every grid point."""
    beside_data: bool = False
    """Written beside the dataset unless ``--output-dir`` says where (neural-lam's
    ``static/``): a merge, which has no dataset, writes it only into a given folder."""


def _format(name: str) -> Callable[[Capabilities, ComputeOptions], bool]:
    return lambda c, o: o.output_format == name


def _folder_paths(files: Callable[[Any, ComputeOptions], list[str]]) -> Paths:
    return lambda s, o: [sets.folder(o) / name for name in files(s, o)]


def _stats_file_chosen(c: Capabilities, o: ComputeOptions) -> bool:
    if c.neurallam_files or o.output_format != "netcdf":
        return False
    return o.output is not None or (o.summary is None and not o.write_into)


_A_SET = {"--output": "give --output-dir", "--write-into": ""}
_NOT_POOLED = {"--pool": "no place for pooled statistics; write a statistics file"}
_NO_CLIMATOLOGY = {"--by": "a climatology is written to a statistics file (--output, --summary)"}
_FOLDER = {"--state": "", "--skipna": "its time means keep a NaN"}
_GRIDDED = _has("time_splits")

TARGETS: list[Target] = [
    Target(
        "a neural-lam datastore's run",
        "writes neural-lam's static/ files and wxstats_stats.nc (--output-dir)",
        lambda c, o: c.neurallam_files,
        paths=lambda s, o: sets.neurallam_paths(sets.static_dir(s, o)),
        writers=sets.neurallam_writers,
        refuses={"--output": "give --output-dir", "--write-into": "", "--format": ""},
        takes=("--min-std", "--level-weights"),
        check_options=lambda o: sets.check_neurallam(o.min_std),
        beside_data=True,
    ),
    Target(
        "the statistics file",
        "(--output FILE.nc)",
        _stats_file_chosen,
        paths=sets.stats_file,
        writers=sets.netcdf_writers,
        format="netcdf",
        help="one statistics file (default)",
    ),
    Target(
        "--summary",
        "writes a JSON summary",
        lambda c, o: o.summary is not None,
        paths=lambda s, o: [Path(o.summary)],
        writers=sets.summary_writers,
    ),
    Target(
        "--state",
        "keeps the exact sums to grow with later data",
        lambda c, o: GIVEN["--state"](o) is not None,
        paths=lambda s, o: [Path(o.state)] if o.state is not None else [],
        requires=lambda c: None if c.state else c.no_state,
        needs="zarr/netCDF datasets and neural-lam datastores",
        refuses={
            "--by year": "its years are this run's, not a state's; compute per-year statistics "
            "in one run over every year"
        },
        check=sets.check_state,
        one_split=True,
    ),
    Target(
        "--format graphcast",
        "writes a set of files in --output-dir",
        _format("graphcast"),
        paths=_folder_paths(sets.graphcast_files),
        writers=sets.graphcast_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=sets.check_graphcast,
        one_split=True,
        one_step="difference step",
        format="graphcast",
        help="mean_by_level.nc, stddev_by_level.nc, diffs_stddev_by_level.nc, "
        "min_by_level.nc in --output-dir, one variable per field with the dataset's level "
        "coordinate (one split, one step)",
    ),
    Target(
        "--format makani",
        "writes a folder of .npy files",
        _format("makani"),
        paths=_folder_paths(sets.makani_files),
        writers=sets.makani_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_FOLDER, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=sets.check_makani,
        one_split=True,
        format="makani",
        help="global_means.npy, global_stds.npy, mins.npy, maxs.npy, time_means.npy, "
        "time_diff_{means,stds}_dt{K}.npy in --output-dir, channels in --variables order, "
        "weighted by cos(latitude) as makani's quadrature unless --weights says otherwise",
        weights="coslat",
        time_means=True,
    ),
    Target(
        "--format ace",
        "writes a folder of netCDF files",
        _format("ace"),
        paths=_folder_paths(sets.ace_files),
        writers=sets.ace_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_FOLDER, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=sets.check_ace,
        one_split=True,
        one_step="residual step",
        format="ace",
        help="centering.nc, scaling-full-field.nc, scaling-residual.nc (std of the "
        "--diff-steps difference, default 1), time-mean.nc in --output-dir, unweighted as "
        "ACE's get_stats.py",
        time_means=True,
    ),
    Target(
        "--format aurora",
        "writes aurora_normalisation.json in --output-dir",
        _format("aurora"),
        paths=_folder_paths(sets.aurora_files),
        writers=sets.aurora_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        one_split=True,
        format="aurora",
        help="aurora_normalisation.json in --output-dir: Aurora's locations and scales "
        "(mean, std) keyed NAME or NAME_LEVEL (one split)",
    ),
    Target(
        "--write-into",
        "rewrites an mllam-data-prep store's statistics",
        lambda c, o: o.write_into and not c.anemoi_statistics,
        paths=lambda s, o: [],
        into=sets.write_into_store,
        rewrites=lambda d, o: Path(d.path),
        requires=lambda c: None if c.mdp_store else f"{c.what} is not one",
        # the data --write-into takes at all (this row or the anemoi one below): a plain
        # zarr's user is told both, not only the row whose requirement it failed
        needs="mllam-data-prep zarr stores and anemoi datasets",
        refuses={
            "--weights (but none)": "an mllam-data-prep store's statistics are unweighted and "
            "cannot record a weighting; write a statistics file (--output)",
            **_NOT_POOLED,
            **_NO_CLIMATOLOGY,
        },
        takes=("--min-std",),
        check=sets.check_store,
    ),
    Target(
        "--write-into",
        "writes the anemoi dataset's own statistics",
        lambda c, o: o.write_into and c.anemoi_statistics,
        paths=lambda s, o: [],
        into=anemoi.write_into_dataset,
        rewrites=lambda d, o: Path(d.path),
        refuses={"--format anemoi": "a separate store (--output S.zarr): give one of them"},
        check=anemoi.check_into_dataset,
    ),
    Target(
        "--format anemoi",
        "writes a statistics store (--output S.zarr)",
        _format("anemoi"),
        paths=lambda s, o: [Path(o.output)],
        into=anemoi.write_sidecar,
        requires=_has("anemoi_statistics"),
        needs="anemoi datasets",
        check=anemoi.check_sidecar,
        format="anemoi",
        help="(an anemoi dataset) the statistics in a store of their own, --output S.zarr, "
        "for open_dataset(DATASET, statistics=S, statistics_tendencies=S)",
    ),
]
"""Every output target (see module docstring): one row per format."""

FORMATS = [t.format for t in TARGETS if t.format]
"""The names ``--format`` takes."""


def format_help() -> str:
    """``--format``'s help, from the table."""
    return "; ".join(f"{t.format}: {t.help}" for t in TARGETS if t.format)


def chosen(caps: Capabilities, options: ComputeOptions) -> list[Target]:
    """The targets a run with ``options`` over data with ``caps`` writes."""
    return [t for t in TARGETS if t.chosen(caps, options)]


def source_needs(options: ComputeOptions) -> tuple[str | None, bool]:
    """(default weighting, per-grid-point time means): what the ``--format`` needs of a source."""
    target = next((t for t in TARGETS if t.format == options.output_format), None)
    return (target.weights, target.time_means) if target else (None, False)
