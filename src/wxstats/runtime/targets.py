"""Every output a run can write, declared once: :data:`TARGETS`, and the one pre-flight.

A :class:`Target` says when a run writes it (``chosen``), what data it needs
(``requires``, by :class:`~wxstats.sources.base.Capabilities`), which options
it cannot take (``refuses``, with why), which output options it uses
(``takes``), and its ``check``, ``paths`` and ``writers`` (files written
all-or-nothing, :mod:`wxstats.io.atomic`) or ``into`` (a store rewritten in
place after them). Options that select data are declared with the capability
that takes them in :mod:`wxstats.runtime.data_options` (:data:`DATA_OPTIONS`). Every
refusal line is built here, in one wording each:

- ``{dataset}: {flags}: not for {what} ({why})`` -- an option this data or
  these outputs do not take;
- ``{dataset}: {target} {writes}; not with {flag} ({why}), ...`` -- options a
  target refuses;
- ``{dataset}: {target} is for {needs} ({why not})`` -- data a target cannot write.

:func:`refuse_options` runs before a source is opened;
:func:`preflight` after (before any data is read) for ``compute``, ``update``
and ``inspect``; :func:`refuse_merge_options` for ``merge``. Adding a format
is one module in :mod:`wxstats.io.formats` and one row here.
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
from wxstats.sources.base import Capabilities, Source

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
Paths = Callable[[Any, ComputeOptions], list[Path]]
Writers = Callable[[Any, Stats, ComputeOptions], Mapping[Path, Writer]]
Into = Callable[[Any, Stats, ComputeOptions], Callable[[], list[Path]]]


def _nothing(source: Any, options: ComputeOptions) -> None:
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
    rewrites: Callable[[Any, ComputeOptions], Path] | None = None
    """The store it changes in place (the dataset itself): locked from the run's
    preparation to the end of its write, an interrupted write into it repaired
    first (:mod:`wxstats.io.zarrstore`)."""
    requires: Callable[[Capabilities], str | None] = lambda c: None
    needs: str = ""
    refuses: Mapping[str, str] = field(default_factory=dict)
    takes: tuple[str, ...] = ()
    check: Check = _nothing
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


def _static_dir(source: Any, options: ComputeOptions) -> Path:
    return Path(options.output_dir or sets.meps_static_dir(source))


def _stats_file_chosen(c: Capabilities, o: ComputeOptions) -> bool:
    if c.neurallam_files or o.output_format != "netcdf":
        return False
    return o.output is not None or (o.summary is None and not o.write_into)


def _stats_file(source: Source, options: ComputeOptions) -> list[Path]:
    """``--output``; else beside a ``--state`` and named after it (the dataset's name
    would make a second state of the same data clash), else the dataset's name."""
    if options.output is not None:
        return [Path(options.output)]
    if options.state is not None:
        return [Path(options.state).with_suffix(".stats.nc")]
    from wxstats.sources.factory import output_stem

    return [Path(options.output_dir or ".") / f"{output_stem(source.path)}.stats.nc"]


def _netcdf(source: Source, stats: Stats, options: ComputeOptions) -> dict[Path, Writer]:
    from wxstats.io.formats.netcdf import netcdf_writer

    return dict.fromkeys(_stats_file(source, options), netcdf_writer(stats))


def _summary(source: Source, stats: Stats, options: ComputeOptions) -> dict[Path, Writer]:
    from wxstats.io.formats.summary import summary_writer

    return {Path(options.summary): summary_writer(stats)}


def _neurallam(source: Any, stats: Stats, options: ComputeOptions) -> dict[Path, Writer]:
    static, floor = _static_dir(source, options), options.min_std
    return sets.neurallam_set(
        static, stats, source.step_length, source.levels(), options.level_weights, floor
    )


def _state_check(source: Source, options: ComputeOptions) -> None:
    from wxstats.runtime.state import coverage_of

    coverage_of(source)  # now, not after the run: several splits, a cftime axis


def _graphcast_files(source: Any, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.graphcast import GRAPHCAST_FILES

    return list(GRAPHCAST_FILES)


def _makani_files(source: Any, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.makani import makani_files

    return list(makani_files(tuple(source.diff_steps)))


def _ace_files(source: Any, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.ace import ACE_FILES

    return list(ACE_FILES)


def _aurora(source: Any, stats: Stats, options: ComputeOptions) -> Mapping[Path, Writer]:
    from wxstats.io.formats.aurora import aurora_outputs

    return aurora_outputs(stats, sets.folder(options), source.splits[0].name)


def _aurora_file(source: Any, options: ComputeOptions) -> list[str]:
    from wxstats.io.formats.aurora import FILE

    return [FILE]


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
        paths=lambda s, o: sets.neurallam_paths(_static_dir(s, o)),
        writers=_neurallam,
        refuses={"--output": "give --output-dir", "--write-into": "", "--format": ""},
        takes=("--min-std", "--level-weights"),
        check=lambda s, o: sets.check_neurallam(o.min_std),
        beside_data=True,
    ),
    Target(
        "the statistics file",
        "(--output FILE.nc)",
        _stats_file_chosen,
        paths=_stats_file,
        writers=_netcdf,
        format="netcdf",
        help="one statistics file (default)",
    ),
    Target(
        "--summary",
        "writes a JSON summary",
        lambda c, o: o.summary is not None,
        paths=lambda s, o: [Path(o.summary)],
        writers=_summary,
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
        check=_state_check,
    ),
    Target(
        "--format graphcast",
        "writes a set of files in --output-dir",
        _format("graphcast"),
        paths=_folder_paths(_graphcast_files),
        writers=sets.graphcast_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=sets.check_graphcast,
        format="graphcast",
        help="mean_by_level.nc, stddev_by_level.nc, diffs_stddev_by_level.nc, "
        "min_by_level.nc in --output-dir, one variable per field with the dataset's level "
        "coordinate (one split, one step)",
    ),
    Target(
        "--format makani",
        "writes a folder of .npy files",
        _format("makani"),
        paths=_folder_paths(_makani_files),
        writers=sets.makani_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_FOLDER, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=sets.check_makani,
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
        paths=_folder_paths(_ace_files),
        writers=sets.ace_writers,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_FOLDER, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=sets.check_ace,
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
        paths=_folder_paths(_aurora_file),
        writers=_aurora,
        requires=_GRIDDED,
        needs="zarr/netCDF datasets",
        refuses={**_A_SET, **_NOT_POOLED, **_NO_CLIMATOLOGY},
        check=lambda s, o: sets.check_one_split(s, "aurora"),
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
        rewrites=lambda s, o: Path(s.path),
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
        rewrites=lambda s, o: Path(s.path),
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


def refuse_options(options: ComputeOptions, caps: Capabilities) -> None:
    """Every option refused by what it is, before the data is opened: options
    selecting data it does not have, options a chosen target refuses, output
    options no chosen target takes."""
    refuse_data_options(options, caps)
    _refuse_target_options(options.dataset, chosen(caps, options), options)


def _refuse_target_options(where: str, targets: list[Target], options: ComputeOptions) -> None:
    for target in targets:
        given = {f: GIVEN[f](options) for f in target.refuses}
        refused = [(text, target.refuses[f]) for f, text in given.items() if text]
        if refused:
            flags = ", ".join(f"{flag} ({why})" if why else flag for flag, why in refused)
            raise WxstatsError(f"{where}: {target.name} {target.writes}; not with {flags}")
    taken = {flag for t in targets for flag in t.takes}
    for flag, why in OUTPUT_OPTIONS.items():
        if GIVEN[flag](options) and flag not in taken:
            names = ", ".join(t.name for t in targets) or "this run"
            raise WxstatsError(f"{where}: {flag}: not for {names} ({why})")


def _refuse_unmet(where: str, targets: list[Target], caps: Capabilities) -> None:
    """A target whose required capabilities the data lacks (known once it is open)."""
    for target in targets:
        why_not = target.requires(caps)
        if why_not is not None:
            raise WxstatsError(f"{where}: {target.name} is for {target.needs} ({why_not})")


@dataclass
class Plan:
    """What :func:`preflight` found a run writes."""

    files: dict[Path, Writer | None]
    """Files written all-or-nothing, with their writer from the template (None without)."""
    stores: list[Path]
    """Stores rewritten in place after them (``--write-into``, an anemoi sidecar)."""
    targets: list[Target]
    rewritten: list[Path] = field(default_factory=list)
    """Stores changed in place (:attr:`Target.rewrites`)."""


def preflight(source: Source, options: ComputeOptions, template: Stats | None = None) -> Plan:
    """Everything refused before any data is read, from the table: each chosen
    target's requirement, refused options and checks; outputs that are the same
    file or that would destroy an input. The writers are made from ``template``
    (a writer refusing what it cannot hold refuses now), if given."""
    targets = chosen(source.capabilities, options)
    _refuse_target_options(source.path, targets, options)
    _refuse_unmet(source.path, targets, source.capabilities)
    for target in targets:
        target.check(source, options)
    plan = Plan({}, [], targets)
    plan.rewritten = [t.rewrites(source, options) for t in targets if t.rewrites is not None]
    owner: dict[Path, Path] = {}
    for target in targets:
        paths = target.paths(source, options)
        writers = target.writers(source, template, options) if template and target.writers else {}
        for path in paths:
            same = owner.get(path.resolve())
            if same is not None:  # --output x.nc --summary x.nc kept only the JSON
                raise WxstatsError(
                    f"{path}: two outputs of this run are the same file ({same} and the "
                    f"{target.name}); give each its own name"
                )
            owner[path.resolve()] = path
            if target.into is not None:
                plan.stores.append(path)
            else:
                plan.files[path] = writers.get(path)
    check_collisions(source, list(owner.values()))
    return plan


def check_collisions(source: Source, paths: list[Path]) -> None:
    """Refuse outputs that would destroy an input: ``--output d.nc`` for the
    dataset ``d.nc`` (with ``--overwrite`` it replaced the data with its
    statistics), or a file inside an input folder (a zarr store)."""
    resolved = {path.resolve(): path for path in paths}
    for name in source.inputs():
        data = Path(name).resolve()
        for real, path in resolved.items():
            if real == data or data in real.parents:
                what = "is" if real == data else "is inside"
                raise WxstatsError(
                    f"{path}: this output {what} the input {name} of this run; writing it "
                    "would destroy the data. Choose another output location"
                )


def refuse_merge_options(where: str, caps: Capabilities, options: ComputeOptions) -> None:
    """``merge``'s outputs, refused as ``compute``'s for the states' kind of data;
    ``--output-dir`` is the folder of neural-lam's files only (a merge's
    statistics file is ``--output`` or beside the ``--state``)."""
    targets = chosen(caps, options)
    _refuse_target_options(where, targets, options)
    _refuse_unmet(where, targets, caps)
    if options.output_dir is not None and not caps.neurallam_files:
        raise WxstatsError(
            f"{where}: --output-dir: not for {', '.join(t.name for t in targets)} (the folder "
            "of a neural-lam datastore's files; give --output FILE.nc)"
        )
