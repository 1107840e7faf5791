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

:class:`Resumable` is how a run uses the folder (``wxstats compute
--checkpoint DIR [--resume]``): rank 0 prepares the manifest and reads the
part files, every rank receives the same set of finished samples and shares
out only the rest, and each rank saves its part at most every ``interval``
seconds, at the end of its share, when the run fails, and on SIGINT/SIGTERM
(then it stops with :class:`~wxstats.core.errors.Interrupted`).
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
import time
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.combine import RunMoments
from wxstats.core.errors import Interrupted, WxstatsError
from wxstats.io.atomic import write_all
from wxstats.runtime.job import Solo, World
from wxstats.sources.base import Source, sample_sizes
from wxstats.sources.xarray.fingerprint import describe_array_changes

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def _describe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changes = []
    old_id, new_id = old.get("identity", {}), new.get("identity", {})
    for key in sorted(set(old.get("options", {})) | set(new.get("options", {}))):
        a, b = old.get("options", {}).get(key), new.get("options", {}).get(key)
        if key == "samples" and old_id != new_id:
            continue  # changed files: said below, more clearly
        if a != b:
            changes.append(f"option {key}: {a!r} -> {b!r}")
    old_files = {f[0]: f[1:] for f in old_id.get("files", [])}
    new_files = {f[0]: f[1:] for f in new_id.get("files", [])}
    added = sorted(set(new_files) - set(old_files))
    removed = sorted(set(old_files) - set(new_files))
    modified = sorted(n for n in set(old_files) & set(new_files) if old_files[n] != new_files[n])
    for label, names in (("added", added), ("removed", removed), ("modified", modified)):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            changes.append(f"files {label}: {shown}")
    changes += describe_array_changes(old_id.get("arrays") or {}, new_id.get("arrays") or {})
    for key in sorted(set(old_id) | set(new_id)):
        if key not in ("files", "arrays") and old_id.get(key) != new_id.get(key):
            changes.append(f"dataset {key}: {old_id.get(key)!r} -> {new_id.get(key)!r}")
    return changes


def _contents(folder: Path) -> list[str]:
    """Names in ``folder`` other than temporary files a killed write of ours
    left (``.manifest.json.*.tmp``, ``.part-*.tmp``), sorted."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if not (p.name.endswith(".tmp") and p.name.startswith((f".{MANIFEST}.", ".part-")))
    )


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
        self._refuse_foreign(resume)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WxstatsError(
                f"{self.directory}: cannot create checkpoint folder: {exc}"
            ) from None
        text = json.dumps(self.fingerprint, indent=1, sort_keys=True)
        write_all({manifest: lambda p: p.write_text(text)}, overwrite=True)

    def _refuse_foreign(self, resume: bool) -> None:
        """Without a manifest: ``--resume`` has nothing to continue (a typo in
        the path must not silently start hours of work afresh), and a new
        checkpoint goes only into a new or empty folder (never mixed with, or
        later removed together with, someone's other files)."""
        if resume:
            if not self.directory.exists():
                raise WxstatsError(
                    f"{self.directory}: checkpoint folder does not exist, nothing to resume; "
                    "check the path, or run without --resume to start afresh"
                )
            if any(self.directory.glob("part-*.npz")):
                raise WxstatsError(
                    f"{self.directory}: part files without {MANIFEST}; cannot resume, "
                    "remove the folder and start afresh without --resume"
                )
            what = "is empty" if not _contents(self.directory) else f"has no {MANIFEST}"
            raise WxstatsError(
                f"{self.directory}: checkpoint folder {what}, it holds no wxstats checkpoint to "
                "resume; check the path, or run without --resume to start afresh"
            )
        if self.directory.is_dir() and _contents(self.directory):
            shown = ", ".join(_contents(self.directory)[:3])
            raise WxstatsError(
                f"{self.directory}: not empty ({shown}) and holds no wxstats checkpoint; "
                "choose a new or empty folder for --checkpoint"
            )

    def verify(self) -> None:
        """Refuse a checkpoint of other data or other options."""
        manifest = self.directory / MANIFEST
        try:
            old = json.loads(manifest.read_text())
        except OSError as exc:
            raise WxstatsError(f"{manifest}: cannot read: {exc.strerror or exc}") from None
        except ValueError:
            raise WxstatsError(
                f"{manifest}: the checkpoint is damaged (not valid JSON); remove the folder "
                f"{self.directory} and rerun without --resume to start afresh"
            ) from None
        if not isinstance(old, dict):
            raise WxstatsError(
                f"{manifest}: the checkpoint is damaged (not a manifest); remove the folder "
                f"{self.directory} and rerun without --resume to start afresh"
            )
        if old != self.fingerprint:
            changes = _describe_changes(old, self.fingerprint) or ["format or dataset description"]
            raise WxstatsError(
                f"{self.directory}: checkpoint is of another run ({'; '.join(changes)}); "
                "rerun with the original data and options, or remove the folder"
            )

    # -- reading what earlier runs did ------------------------------------
    def load(self, template: RunMoments) -> tuple[set[int], RunMoments]:
        """(finished sample indices, their exact accumulator) of all part files.

        ``template`` is an empty accumulator giving the layout; it is filled.
        """
        done: set[int] = set()
        for path in sorted(self.directory.glob("part-*.npz")):
            try:
                # our own file object: np.load leaks the one it opens when the zip is bad
                with open(path, "rb") as f, np.load(f, allow_pickle=False) as part:
                    indices = part["done"].astype(np.int64).tolist()
                    ints, minimum, maximum = part["ints"], part["minimum"], part["maximum"]
            except OSError as exc:  # not damage: permissions, an I/O error
                raise WxstatsError(f"{path}: cannot read: {exc.strerror or exc}") from None
            except (ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error):
                raise self._damaged(path, "not a complete part file") from None
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
            except (ValueError, IndexError):
                raise self._damaged(path, "its sums do not fit this run's layout") from None
            template.merge(piece)
        return done, template

    def _damaged(self, path: Path, why: str) -> WxstatsError:
        """One line: which part is damaged, and the two ways on (each part holds
        its own samples and their sums, so removing one part redoes only those)."""
        return WxstatsError(
            f"{path}: the checkpoint is damaged ({why}); remove this file to redo only its "
            f"samples, or remove the folder {self.directory} and rerun without --resume "
            "to start afresh"
        )

    # -- saving this rank's progress --------------------------------------
    def save(self, done: list[int], acc: RunMoments) -> None:
        """Atomically replace this rank's part file with its current state."""
        ints, minimum, maximum = acc.pack()
        indices = np.array(sorted(done), dtype=np.int64)

        def write(path: Path) -> None:
            with open(path, "wb") as f:
                np.savez(f, done=indices, ints=ints, minimum=minimum, maximum=maximum)

        write_all({self.part: write}, overwrite=True)


# -- a run's use of a checkpoint ------------------------------------------------------


def fingerprint(source: Source, skipna: bool) -> dict[str, Any]:
    """What a checkpoint of ``source`` is of: the data's identity, and every
    option that changes the sums or which samples there are (features, steps,
    splits, block sizes through the list of sample sizes, NaN handling, the
    version of the code that computed the per-sample sums)."""
    sizes = np.array(sample_sizes(source), dtype=np.int64)
    return {
        "identity": source.identity(),
        "options": {
            "wxstats_version": __version__,
            "skipna": bool(skipna),
            "features": {s.name: list(s.features) for s in source.streams},
            "diff_steps": {s.name: list(s.diff_steps) for s in source.streams},
            "samples": [len(source), hashlib.sha256(sizes.tobytes()).hexdigest()[:16]],
        },
    }


def resume_hint(directory: str | Path) -> str:
    return f"progress is saved in {directory}; rerun the same command with --resume to continue"


SIGNAL_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Resumable:
    """One rank's use of a checkpoint folder during a run (see module docstring).

    ``world`` (a :class:`~wxstats.runtime.job.World`) shares rank 0's list
    of finished samples with the other ranks.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        resume: bool = False,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)
        self.resume = resume
        self.interval = float(interval)
        self.clock = clock
        self.done_before = 0
        self.references: str | None = None
        """The shift/scale references when a state gives them (``--reference-state``)."""
        self.started = False  # the folder holds a checkpoint of this run
        self._checkpoint: Checkpoint | None = None
        self._acc: RunMoments | None = None
        self._done: list[int] = []
        self._saved = 0
        self._last_save = 0.0
        self._signal: int | None = None
        self._finished = False

    def _fingerprint(self, source: Source, skipna: bool) -> dict[str, Any]:
        out = fingerprint(source, skipna)
        if self.references is not None:  # taken from a state: part of what the sums are
            out["options"]["references"] = self.references
        return out

    def start(
        self, source: Source, *, skipna: bool, world: World | None = None
    ) -> tuple[list[int], RunMoments | None]:
        """(the samples still to do, in order; on rank 0 the accumulator of the
        finished ones, elsewhere ``None``). Only rank 0 reads the folder, before
        any rank of this run writes to it, so all ranks agree on what is done."""
        world = world if world is not None else Solo()
        rank = world.rank
        # only rank 0 checks the manifest: the others need not stat every chunk
        self._checkpoint = Checkpoint(
            self.directory, self._fingerprint(source, skipna) if rank == 0 else {}
        )
        carried: RunMoments | None = None
        payload = b""
        if rank == 0:
            self._checkpoint.prepare(self.resume)
            done, carried = self._checkpoint.load(RunMoments.create(source.streams))
            payload = zlib.compress(np.array(sorted(done), dtype=np.int64).tobytes())
        payload = world.broadcast_bytes("checkpoint/done", payload)
        finished = set(np.frombuffer(zlib.decompress(payload), dtype=np.int64).tolist())
        self.done_before = len(finished)
        self.started = True
        return [i for i in range(len(source)) if i not in finished], carried

    @contextmanager
    def tracking(
        self, acc: RunMoments, on_sample: Callable[[int], None] | None = None
    ) -> Iterator[Callable[[int], None]]:
        """Within: ``acc`` is this rank's accumulator of exactly the samples
        passed to the yielded callback (called after each is merged). Saves as
        the module docstring says; SIGINT/SIGTERM stop the run at the next
        sample after a save (a second signal stops it at once)."""
        self._acc, self._last_save = acc, self.clock()

        def after_sample(index: int) -> None:
            self._done.append(index)
            if self._signal is not None:
                self.save()
                raise self._interrupted(self._signal, saved=True)
            if self.clock() - self._last_save >= self.interval:
                self.save()
            if on_sample is not None:
                on_sample(index)

        previous = self._install_handlers()
        try:
            yield after_sample
        except Exception:
            if not self._finished:
                self._save_after_failure()
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def finish(self) -> None:
        """This rank's share is done: save it; a signal from now on stops at once."""
        self.save()
        self._finished = True
        if self._signal is not None:  # came after the last sample
            raise self._interrupted(self._signal, saved=True)

    def save(self) -> None:
        """Write this rank's part file if it finished samples since the last save."""
        if self._checkpoint is not None and self._acc is not None and len(self._done) > self._saved:
            self._checkpoint.save(self._done, self._acc)
            self._saved = len(self._done)
        self._last_save = self.clock()

    # -- internals ---------------------------------------------------------------
    def _save_after_failure(self) -> None:
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - the first error is the one to report
            print(f"wxstats: warning: could not save progress: {exc}", file=sys.stderr)

    def _interrupted(self, signum: int, saved: bool) -> Interrupted:
        name = signal.Signals(signum).name
        if saved:
            what = resume_hint(self.directory)
        else:
            what = (
                f"stopped at once without saving the last samples; {self.directory} holds what "
                "was saved before, rerun the same command with --resume to continue"
            )
        return Interrupted(f"interrupted by {name}: {what}", SIGNAL_CODES.get(signum, 1))

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._finished:
            raise self._interrupted(signum, saved=True)
        if self._signal is not None:  # asked twice: perhaps stuck in a read
            self._finished = True  # ``acc`` may be half-merged now: never save it
            raise self._interrupted(signum, saved=False)
        self._signal = signum

    def _install_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {s: signal.signal(s, self._on_signal) for s in SIGNAL_CODES}
