"""The one pre-flight: everything refused before any data is read, from the
table of :mod:`wxstats.runtime.targets`, for ``compute``, ``update``,
``inspect`` and ``merge`` alike.

:func:`refuse_options` runs before a source is opened (options this kind of
data or the chosen targets do not take); :func:`preflight` after, once the
data is known: each chosen target's requirement, its one split (and step),
its checks, its paths (two outputs the same file, an output over an input),
and its writers made from a template (a writer refusing what it cannot hold
refuses now). ``merge`` has no source: :func:`merge_preflight` runs the same
steps over what its states say (:class:`~wxstats.runtime.set_outputs.DataFacts`).

The refusal lines, one wording each:

- ``{dataset}: {target} {writes}; not with {flag} ({why}), ...`` -- options a
  target refuses (and ``{dataset}: {flags}: not for {what} ({why})`` for
  options selecting data it does not have: :func:`~wxstats.runtime.targets.refuse_data_options`);
- ``{dataset}: {target} is for {needs} ({why not})`` -- data a target cannot write;
- ``{dataset}: {target} holds the statistics of one split ...`` -- a run of several.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.set_outputs import DataFacts
from wxstats.runtime.targets import GIVEN, OUTPUT_OPTIONS, Target, chosen, refuse_data_options
from wxstats.sources.base import Capabilities, Source


@dataclass
class OutputPlan:
    """What the pre-flight found a run writes."""

    files: dict[Path, Writer | None]
    """Files written all-or-nothing, with their writer from the template (None without)."""
    stores: list[Path]
    """Stores rewritten in place after them (``--write-into``, an anemoi sidecar)."""
    targets: list[Target]
    data: DataFacts
    """What the targets' paths and writers know of the data, made once."""
    rewritten: list[Path] = field(default_factory=list)
    """Stores changed in place (:attr:`Target.rewrites`)."""


def refuse_options(options: ComputeOptions, caps: Capabilities) -> None:
    """Every option refused by what it is, before the data is opened: options
    selecting data it does not have, options a chosen target refuses, output
    options no chosen target takes."""
    refuse_data_options(options, caps)
    _refuse_target_options(options.dataset, chosen(caps, options), options)


def refuse_merge_options(where: str, caps: Capabilities, options: ComputeOptions) -> None:
    """``merge``'s and ``update``'s outputs, refused as given, as ``compute``'s for
    the states' kind of data; ``--output-dir`` is the folder of neural-lam's files
    only (a merge's statistics file is ``--output`` or beside the ``--state``)."""
    targets = chosen(caps, options)
    _refuse_target_options(where, targets, options)
    _refuse_unmet(where, targets, caps)
    if options.output_dir is not None and not caps.neurallam_files:
        raise WxstatsError(
            f"{where}: --output-dir: not for {', '.join(t.name for t in targets)} (the folder "
            "of a neural-lam datastore's files; give --output FILE.nc)"
        )


def preflight(source: Source, options: ComputeOptions, template: Stats | None = None) -> OutputPlan:
    """The pre-flight of a run over ``source`` (module docstring); the writers
    are made from ``template``, if given."""
    targets = chosen(source.capabilities, options)
    data = DataFacts.of_source(source)
    return _preflight(source.path, source.capabilities, data, targets, options, template, source)


def merge_preflight(
    where: str, caps: Capabilities, data: DataFacts, options: ComputeOptions
) -> OutputPlan:
    """The pre-flight of ``merge``: ``compute``'s targets for the states' kind of
    data, neural-lam's files into a given ``--output-dir`` only (a merge has no
    datastore to write beside); no target's check of the data (there is none)."""
    refuse_merge_options(where, caps, options)
    targets = [t for t in chosen(caps, options) if options.output_dir or not t.beside_data]
    return _preflight(where, caps, data, targets, options, None, None)


def _preflight(
    where: str,
    caps: Capabilities,
    data: DataFacts,
    targets: list[Target],
    options: ComputeOptions,
    template: Stats | None,
    source: Source | None,
) -> OutputPlan:
    _refuse_target_options(where, targets, options)
    _refuse_unmet(where, targets, caps)
    for target in targets:
        _refuse_several(where, target, data)
        target.check_options(options)
        if source is not None:
            target.check(source, options)
    plan = OutputPlan({}, [], targets, data)
    plan.rewritten = [t.rewrites(data, options) for t in targets if t.rewrites is not None]
    owner: dict[Path, Path] = {}
    for target in targets:
        writers = target.writers(data, template, options) if template and target.writers else {}
        for path in target.paths(data, options):
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
    check_collisions(data, list(owner.values()))
    return plan


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


def _refuse_several(where: str, target: Target, data: DataFacts) -> None:
    """A target whose files hold one split (and one step: :attr:`Target.one_step`)."""
    steps = target.one_step is not None and len(data.diff_steps) != 1
    if not target.one_split or (len(data.splits) <= 1 and not steps):
        return
    if target.one_step is None:
        has, give = f"splits {', '.join(data.splits)}", "one --split"
        what = "one split"
    else:
        has = f"splits {', '.join(data.splits)} and steps {', '.join(map(str, data.diff_steps))}"
        what, give = f"one split and one {target.one_step}", "one --split and one --diff-steps"
    raise WxstatsError(
        f"{where}: {target.name} holds the statistics of {what} (this run has {has}); give {give}"
    )


def check_collisions(data: DataFacts, paths: list[Path]) -> None:
    """Refuse outputs that would destroy an input: ``--output d.nc`` for the
    dataset ``d.nc`` (with ``--overwrite`` it replaced the data with its
    statistics), or a file inside an input folder (a zarr store). An input is
    compared by its real path, so that a sample file that is a symbolic link to
    an output (or into an output folder) is refused too (:func:`real_path`)."""
    targets: dict[Path, tuple[Path, str]] = {}
    for path in paths:  # an output's real path and every folder above it
        real = path.resolve()
        targets.setdefault(real, (path, "is"))
        for parent in real.parents:
            targets.setdefault(parent, (path, "is inside"))
    folders: dict[str, Path] = {}
    for name in data.inputs:
        hit = targets.get(real_path(name, folders))
        if hit is not None:
            path, what = hit
            raise WxstatsError(
                f"{path}: this output {what} the input {name} of this run; writing it "
                "would destroy the data. Choose another output location"
            )


def real_path(name: str, folders: dict[str, Path], depth: int = 0) -> Path:
    """``Path(name).resolve()``, resolving each folder once (``folders``, by its
    name): a datastore's 436,524 sample files share a few folders, and resolving
    each file in full cost ~0.5 ms. A file that is a symbolic link is followed
    (its target joined to its folder's name, as ``resolve`` would), so a link to
    an output still shows as that output; a name ending in ``.``/``..``, or links
    more than 40 deep (a loop), are resolved in full, as before."""
    head, tail = os.path.split(name)
    if depth > 40 or tail in ("", ".", ".."):
        return Path(name).resolve()
    if os.path.islink(name):
        return real_path(os.path.join(head, os.readlink(name)), folders, depth + 1)
    folder = folders.get(head)
    if folder is None:
        folder = folders[head] = Path(head or ".").resolve()
    return folder / tail
