"""Durable partial results, so a killed run resumes without redoing its work.

Every rank keeps one part file ``part-<unique id>.npz`` in the checkpoint
folder: the indices of the samples it has finished and the exact accumulator
of exactly those samples (packed int64/float64 arrays). Files are replaced
atomically (temporary file, fsync, rename), so a kill at any moment, even
during a write, leaves the previous version. Sums are exact, so the union of
the part files of any earlier runs, whatever their number of ranks, plus the
remaining samples gives the same bytes as an uninterrupted run.

``manifest.json`` records what the checkpoint is of (the source's identity:
files, sizes, modification times; and every option that changes the result).
Resuming against anything else is refused with a message saying what changed.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.accumulate import RunAccumulator
from wxstats.atomic import write_all
from wxstats.errors import WxstatsError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def _describe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changes = []
    for key in sorted(set(old.get("options", {})) | set(new.get("options", {}))):
        a, b = old.get("options", {}).get(key), new.get("options", {}).get(key)
        if a != b:
            changes.append(f"option {key}: {a!r} -> {b!r}")
    old_id, new_id = old.get("identity", {}), new.get("identity", {})
    old_files = {f[0]: f[1:] for f in old_id.get("files", [])}
    new_files = {f[0]: f[1:] for f in new_id.get("files", [])}
    added = sorted(set(new_files) - set(old_files))
    removed = sorted(set(old_files) - set(new_files))
    modified = sorted(n for n in set(old_files) & set(new_files) if old_files[n] != new_files[n])
    for label, names in (("added", added), ("removed", removed), ("modified", modified)):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            changes.append(f"files {label}: {shown}")
    for key in sorted(set(old_id) | set(new_id)):
        if key != "files" and old_id.get(key) != new_id.get(key):
            changes.append(f"dataset {key}: {old_id.get(key)!r} -> {new_id.get(key)!r}")
    return changes


class Checkpoint:
    """One rank's view of a checkpoint folder (see module docstring)."""

    def __init__(self, directory: str | Path, fingerprint: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.fingerprint = {"format": FORMAT_VERSION, **json.loads(json.dumps(fingerprint))}
        self.part = self.directory / f"part-{uuid.uuid4().hex}.npz"

    # -- set-up (rank 0 first, then every rank) ----------------------------
    def prepare(self, resume: bool) -> None:
        """Create the folder and manifest, or check it for ``--resume``.

        Without ``resume`` an existing checkpoint is refused (it would be
        silently mixed in otherwise)."""
        manifest = self.directory / MANIFEST
        if manifest.exists():
            if not resume:
                raise WxstatsError(
                    f"{self.directory}: holds a checkpoint already; pass --resume to continue "
                    "it, or remove the folder to start afresh"
                )
            self.verify()
            return
        if resume and self.directory.exists() and any(self.directory.glob("part-*.npz")):
            raise WxstatsError(f"{self.directory}: part files without {MANIFEST}; cannot resume")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WxstatsError(
                f"{self.directory}: cannot create checkpoint folder: {exc}"
            ) from None
        text = json.dumps(self.fingerprint, indent=1, sort_keys=True)
        write_all({manifest: lambda p: p.write_text(text)}, overwrite=True)

    def verify(self) -> None:
        """Refuse a checkpoint of other data or other options."""
        manifest = self.directory / MANIFEST
        try:
            old = json.loads(manifest.read_text())
        except (OSError, ValueError) as exc:
            raise WxstatsError(f"{manifest}: unreadable checkpoint manifest: {exc}") from None
        if old != self.fingerprint:
            changes = _describe_changes(old, self.fingerprint) or ["format or dataset description"]
            raise WxstatsError(
                f"{self.directory}: checkpoint is of another run ({'; '.join(changes)}); "
                "rerun with the original data and options, or remove the folder"
            )

    # -- reading what earlier runs did ------------------------------------
    def load(self, template: RunAccumulator) -> tuple[set[int], RunAccumulator]:
        """(finished sample indices, their exact accumulator) of all part files.

        ``template`` is an empty accumulator giving the layout; it is filled.
        """
        done: set[int] = set()
        for path in sorted(self.directory.glob("part-*.npz")):
            try:
                with np.load(path) as part:
                    indices = part["done"].astype(np.int64).tolist()
                    ints, minimum, maximum = part["ints"], part["minimum"], part["maximum"]
            except (OSError, ValueError, KeyError) as exc:
                raise WxstatsError(f"{path}: unreadable checkpoint part: {exc}") from None
            overlap = done.intersection(indices)
            if overlap:
                raise WxstatsError(
                    f"{path}: samples {sorted(overlap)[:5]} are in two part files; "
                    "the checkpoint is inconsistent, remove the folder and start afresh"
                )
            done.update(indices)
            piece = template.empty_like()
            try:
                piece.unpack_like(ints, minimum, maximum)
            except (ValueError, IndexError) as exc:
                raise WxstatsError(
                    f"{path}: checkpoint part does not fit this run: {exc}"
                ) from None
            template.merge(piece)
        return done, template

    # -- saving this rank's progress --------------------------------------
    def save(self, done: list[int], acc: RunAccumulator) -> None:
        """Atomically replace this rank's part file with its current state."""
        ints, minimum, maximum = acc.pack()
        indices = np.array(sorted(done), dtype=np.int64)

        def write(path: Path) -> None:
            with open(path, "wb") as f:
                np.savez(f, done=indices, ints=ints, minimum=minimum, maximum=maximum)

        write_all({self.part: write}, overwrite=True)
