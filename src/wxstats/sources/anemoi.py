"""An anemoi-datasets dataset: a zarr group whose ``data`` is (dates, variables, ensembles, cells).

anemoi keeps one float64 value per variable for each statistic, over every date
of its *statistics window*, every ensemble member and every cell, and the same
for the tendencies ``x[t + k] - x[t]`` whose two dates are both inside the
window (named by their time span: ``6h``, ``12h``, ``1d``). This source gives
the engine exactly those values: one stream whose features are the dataset's
``variables``, read in contiguous blocks of dates aligned with the ``data``
chunks (each block reads the ``max(k)`` dates before it, inside the window),
each date summed exactly on its own, so the block size
and the number of ranks never change a bit.

The window is, in order: ``--period START/END`` (inclusive, as for any
source); the ``statistics_start_date``/``statistics_end_date`` the dataset
records (what ``anemoi-datasets create`` chose, by its rule or its recipe);
anemoi's own default rule (:func:`default_window`).

The dataset is opened with zarr-python directly (anemoi 0.5.47 writes zarr
format 2, which zarr 3 reads), never through xarray: ``data`` has no
``_ARRAY_DIMENSIONS``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import span_name, span_seconds
from wxstats.core.errors import InputError
from wxstats.core.kernel import Block, step_bytes
from wxstats.core.streams import StreamSpec, listed_features
from wxstats.sources.base import Capabilities, SampleSteps, parse_period
from wxstats.sources.kinds import Selection, SourceKind
from wxstats.sources.xarray.blocks import TimeBlock, chunks_per_step, plan_blocks, shared_steps
from wxstats.sources.xarray.fingerprint import array_fingerprints
from wxstats.sources.xarray.timeaxis import Split, select, time_index
from wxstats.storage.chunks import SlabRequest
from wxstats.storage.sizes import check_slab
from wxstats.storage.zarrchunks import ZarrChunkReader

LABEL = "anemoi"
CAPABILITIES = Capabilities(
    what="an anemoi dataset",
    no_state="an anemoi dataset's statistics are rewritten whole, over its window",
    anemoi_statistics=True,
)
STREAM = "data"
SPLIT = "train"
DEFAULT_BLOCK_BYTES = 32 * 2**20
TENDENCY_RE = re.compile(r"^statistics_tendencies_(.+)_mean$")


def is_anemoi(path: str) -> bool:
    """A local zarr group with a ``data`` array and anemoi's marks: a ``variables``
    attribute, or a 4-D ``data`` beside ``dates`` (a CMIP store's ``frequency``
    attribute is no mark)."""
    if "://" in path or not (Path(path) / "data").is_dir():
        return False  # no data array folder (zarr 2 and 3 alike): no need to open it
    import zarr

    try:
        group = zarr.open_group(path, mode="r")
        arrays = set(group.array_keys())
        if "data" not in arrays:
            return False
        attrs = group.attrs.asdict()
        return "variables" in attrs or ("dates" in arrays and len(group["data"].shape) == 4)
    except Exception:  # noqa: BLE001 - not a zarr group: another source's business
        return False


def frequency_seconds(value: Any, where: str) -> int:
    """Seconds of the dataset's ``frequency`` attribute (``6h``, ``1d``...)."""
    seconds = span_seconds(value)
    if seconds is None:
        raise InputError(f"{where}: frequency {value!r} is not a time step such as 6h or 1d")
    return seconds


def anemoi_date(value: np.datetime64) -> str:
    """A date as anemoi writes it in the attributes (``2020-01-03T00:00:00``)."""
    return np.datetime64(value, "s").astype(object).isoformat()


def default_window(dates: np.ndarray) -> tuple[int, int]:
    """anemoi-datasets 0.5.47's default statistics window (``Statistics.default_statistics_dates``)
    as ``[start, stop)`` indices: under 10 dates or under 10 years (rounded), the
    first ``int(0.8 n)`` dates (at least one); from 10 years on, up to the last
    date of the year before the last one; from 20 years on, of three years before."""
    n = len(dates)
    years = (dates[-1] - dates[0]) / np.timedelta64(1, "s") / (365.25 * 24 * 3600)
    if n < 10:
        return 0, max(1, int(n * 0.8))
    if round(years) < 10:
        return 0, int(n * 0.8)
    end_year = (
        dates[-1].astype("datetime64[Y]").astype(int) + 1970 - (3 if round(years) >= 20 else 1)
    )
    in_year = np.nonzero(dates.astype("datetime64[Y]").astype(int) + 1970 == end_year)[0]
    return 0, int(in_year[-1]) + 1


class AnemoiSource:
    """Blocks of dates of an anemoi dataset (see module docstring)."""

    kind = LABEL
    capabilities = CAPABILITIES
    stream = STREAM
    work_unit = "time block"

    def __init__(
        self,
        path: str | Path,
        period: str | None = None,
        diff_steps: tuple[int, ...] | None = None,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        io_threads: int = 0,
    ) -> None:
        import zarr

        self.path = str(path)
        where = self.path
        try:
            self.group = zarr.open_group(self.path, mode="r")
            self.data = self.group["data"]
        except Exception as exc:  # noqa: BLE001 - any zarr error, in one line
            raise InputError(f"{where}: cannot open as an anemoi dataset: {exc}") from None
        attrs = self.group.attrs.asdict()
        if self.data.ndim != 4:
            raise InputError(
                f"{where}: data has {self.data.ndim} dimensions {tuple(self.data.shape)}; an "
                "anemoi dataset's data is (dates, variables, ensembles, cells)"
            )
        n_dates, n_vars, n_ens, n_cells = map(int, self.data.shape)
        if n_dates == 0:
            raise InputError(f"{where}: data has no dates")
        if np.dtype(self.data.dtype) not in (np.float32, np.float64):
            raise InputError(
                f"{where}: data is {self.data.dtype}; anemoi stores float32 or float64"
            )
        names = attrs.get("variables")
        if not isinstance(names, list) or len(names) != n_vars:
            have = "no 'variables' attribute" if names is None else f"variables {names!r}"
            raise InputError(
                f"{where}: {have}; an anemoi dataset names each of the {n_vars} variables of "
                "data (dimension 2) in its 'variables' attribute"
            )
        self.variables = [str(v) for v in names]
        if "dates" not in set(self.group.array_keys()):
            raise InputError(f"{where}: no 'dates' array (the time of each entry of data)")
        dates = self.group["dates"]  # read whole: its declared size checked first
        check_slab(f"{where}: variable dates", dates.shape, None, dates.dtype.itemsize,
                   dates.dtype, 0, int(dates.shape[0]) if dates.ndim else 1)  # fmt: skip
        self.dates = np.asarray(dates[:]).astype("datetime64[s]")
        if self.dates.shape != (n_dates,):
            raise InputError(
                f"{where}: dates has shape {self.dates.shape}, data has {n_dates} dates"
            )
        self.frequency = attrs.get("frequency")
        self.step_seconds = frequency_seconds(self.frequency, where)
        if n_dates > 1 and np.any(np.diff(self.dates) != np.timedelta64(self.step_seconds, "s")):
            raise InputError(
                f"{where}: dates are not every {attrs.get('frequency')} (the 'frequency' "
                "attribute); tendencies need a regular time axis"
            )
        self.start, self.stop = self._window(attrs, period)
        self.missing = self._missing(attrs.get("missing_dates") or [])
        default = self._stored_steps() or self._recipe_steps(attrs.get("recipe")) or (1,)
        self.diff_steps = tuple(sorted(set(diff_steps or default)))
        n = self.stop - self.start
        if self.diff_steps[-1] >= n:
            raise InputError(
                f"{where}: the statistics window {self.window_label} has {n} dates: no pairs "
                f"for a tendency of {self.diff_steps[-1]} steps; give smaller --diff-steps "
                "or a longer --period"
            )
        self.deltas = {k: span_name(k * self.step_seconds) for k in self.diff_steps}
        self.n_grid = n_ens * n_cells
        self.dtype = np.dtype(self.data.dtype)
        # a step's values and what the kernel holds for it beside them (a few cells
        # a step: the kernel's rows are most of a block, as for a zarr/netCDF source)
        per_step = n_vars * self.n_grid * self.dtype.itemsize
        per_step += step_bytes(n_vars, len(self.diff_steps) + 1)
        chunk = int(self.data.chunks[0])
        self.blocks: list[TimeBlock] = plan_blocks(
            [Split(SPLIT, self.start, self.stop, self.window_label)],
            [range(0, n_dates, chunk)],
            per_step,
            block_bytes,
            self.diff_steps[-1],
            chunks_per_step(self.data.shape, self.data.chunks, 0),
        )
        self._chunks = ZarrChunkReader(self.path, {}, io_threads)
        fill = self.data.fill_value
        self._missing_ok = fill is not None and np.isnan(np.asarray(fill, dtype=np.float64))
        units = self._units(attrs)
        self.streams = [
            StreamSpec(
                STREAM, self.variables, units, self.diff_steps, list(self.variables),
                listed_features("state", SPLIT, self.variables),
                diff_span={k: k * self.step_seconds for k in self.diff_steps},
            )
        ]  # fmt: skip
        self.attrs = {
            "source": LABEL,
            "dataset": self.path,
            "statistics_start_date": anemoi_date(self.dates[self.start]),
            "statistics_end_date": anemoi_date(self.dates[self.stop - 1]),
            "statistics_window": self.window_label,
            "diff_steps": ",".join(map(str, self.diff_steps)),
            "tendencies": ",".join(f"{name}={k}" for k, name in self.deltas.items()),
            "variables": ",".join(self.variables),
            "reduced_dims": "dates,ensembles,cells",
            "diff_definition": "x[t+k] - x[t] over pairs with both dates inside the window",
        }

    # -- the window and the steps ---------------------------------------------
    def _window(self, attrs: dict[str, Any], period: str | None) -> tuple[int, int]:
        if period:
            start, end = parse_period(period)
            found = select(time_index(self.dates), self.dates, "--period", start, end, "dates")
            lo, hi, why = found.start, found.stop, f"--period {period}"
        elif attrs.get("statistics_start_date") and attrs.get("statistics_end_date"):
            s, e = attrs["statistics_start_date"], attrs["statistics_end_date"]
            try:
                lo = int(np.searchsorted(self.dates, np.datetime64(str(s)), "left"))
                hi = int(np.searchsorted(self.dates, np.datetime64(str(e)), "right"))
            except ValueError:
                raise InputError(
                    f"{self.path}: statistics_start_date {s!r} / statistics_end_date {e!r} "
                    "are not dates; give the window with --period START/END"
                ) from None
            why = f"the dataset's statistics_start_date/statistics_end_date {s} / {e}"
        else:
            lo, hi = default_window(self.dates)
            why = "anemoi's default rule"
        if lo >= hi:
            raise InputError(
                f"{self.path}: no date in the statistics window ({why}); the dates run from "
                f"{anemoi_date(self.dates[0])} to {anemoi_date(self.dates[-1])}"
            )
        self.window_label = (
            f"{anemoi_date(self.dates[lo])}/{anemoi_date(self.dates[hi - 1])} ({why})"
        )
        return lo, hi

    def _missing(self, listed: list[Any]) -> list[str]:
        """The ``missing_dates`` inside the window (their data is NaN: anemoi leaves
        them out of its statistics, as ``--skipna`` does)."""
        try:
            found = np.array([np.datetime64(str(d), "s") for d in listed], dtype="datetime64[s]")
        except ValueError:
            raise InputError(f"{self.path}: missing_dates {listed!r} are not dates") from None
        inside = (found >= self.dates[self.start]) & (found <= self.dates[self.stop - 1])
        return [anemoi_date(d) for d in found[inside]]

    def _stored_steps(self) -> tuple[int, ...]:
        """The tendency steps the dataset already has statistics for (the default)."""
        steps = []
        for name in self.stored_tendencies():
            seconds = span_seconds(name) or 0
            if seconds and seconds % self.step_seconds == 0:
                steps.append(seconds // self.step_seconds)
        return tuple(steps)

    def _recipe_steps(self, recipe: Any) -> tuple[int, ...]:
        """The tendency steps the dataset's recipe asks for (``statistics: {tendencies:
        [6h, 12h]}``; ``true``: anemoi's 1, 3, 6, 12 and 24 hours), as anemoi's
        ``finalise`` would compute them: the default of a dataset whose statistics
        arrays are not written yet (after ``init``/``load --parts``). A span that is
        not a whole number of dates is left out, as anemoi leaves it out."""
        section = recipe.get("statistics") if isinstance(recipe, dict) else None
        asked = section.get("tendencies") if isinstance(section, dict) else None
        if asked is None or asked is False:
            return ()
        spans = [1, 3, 6, 12, 24] if asked is True else asked
        steps = []
        for span in spans if isinstance(spans, list) else [spans]:
            seconds = span_seconds(span)
            if seconds is None:
                raise InputError(
                    f"{self.path}: the recipe's statistics.tendencies holds {span!r}, not a "
                    "time span (6h, 12h, 1d); give the tendencies with --diff-steps"
                )
            if seconds % self.step_seconds == 0:
                steps.append(seconds // self.step_seconds)
        return tuple(steps)

    def stored_tendencies(self) -> list[str]:
        """Names (``6h``...) of the tendency statistics the dataset holds."""
        return sorted(
            m.group(1) for m in map(TENDENCY_RE.match, self.group.array_keys()) if m is not None
        )

    def _units(self, attrs: dict[str, Any]) -> list[str]:
        meta = attrs.get("variables_metadata") or {}
        out = []
        for name in self.variables:
            entry = meta.get(name) if isinstance(meta, dict) else None
            mars = entry.get("mars", {}) if isinstance(entry, dict) else {}
            units = (entry or {}).get("units") or (
                mars.get("units") if isinstance(mars, dict) else None
            )
            out.append(str(units) if units else "")
        return out

    # -- the Source protocol ----------------------------------------------------
    def __len__(self) -> int:
        return len(self.blocks)

    def _request(self, r0: int, r1: int, shared: tuple = ()) -> SlabRequest:
        # stored (dates, variables, ensembles, cells); read (dates, ensembles, cells, variables)
        return SlabRequest("data", r0, r1, (0, 2, 3, 1), self._missing_ok, shared)

    def _read(self, r0: int, r1: int, shared: tuple = ()) -> np.ndarray:
        """Dates ``[r0, r1)`` as ``(dates, ensembles x cells, variables)``: chunk objects
        read and decompressed in a thread pool, one transposing copy
        (:mod:`wxstats.storage.chunks`); a date never written (a missing date)
        reads as NaN."""
        raw = self._chunks.read([self._request(r0, r1, shared)])["data"]
        return raw.reshape(r1 - r0, self.n_grid, len(self.variables))

    def _channels(self) -> np.ndarray:
        return np.arange(len(self.variables), dtype=np.int64)

    def read(self, index: int) -> dict[str, Block]:
        block = self.blocks[index]
        b0, b1, r0 = block.start, block.stop, block.first
        diffs = {}
        for k in self.diff_steps:
            d0 = max(b0, self.start + k)
            diffs[k] = (d0 - r0, b1 - r0) if d0 < b1 else (0, 0)
        array = self._read(r0, b1, shared_steps(self.blocks, index))
        return {STREAM: Block(array, self._channels(), (b0 - r0, b1 - r0), diffs)}

    def covers(self, index: int) -> dict[str, SampleSteps]:
        """The dates of the block (see :meth:`Source.covers`)."""
        block = self.blocks[index]
        return {STREAM: SampleSteps(SPLIT, block.first, block.start, block.stop)}

    def reference_blocks(self) -> dict[str, Block]:
        """The first dates of the window: shifts that do not depend on the blocks."""
        stop = min(self.stop, self.start + self.diff_steps[-1] + 1)
        array = self._read(self.start, stop)
        diffs = {k: (k, k + 1) if k < array.shape[0] else (0, 0) for k in self.diff_steps}
        return {STREAM: Block(array, self._channels(), (0, 1), diffs)}

    def describe(self, index: int) -> str:
        block = self.blocks[index]
        return (
            f"{self.path}: dates {anemoi_date(self.dates[block.start])} to "
            f"{anemoi_date(self.dates[block.stop - 1])} (entries {block.start}..{block.stop - 1})"
        )

    def nbytes(self, index: int) -> int:
        block = self.blocks[index]
        return (block.stop - block.first) * len(self.variables) * self.n_grid * self.dtype.itemsize

    def prefetch(self, index: int) -> None:
        """Announce the chunk objects of a coming block to the kernel (read-ahead)."""
        block = self.blocks[index]  # the request read() makes: its chunk plan is kept for it
        self._chunks.will_need(
            [self._request(block.first, block.stop, shared_steps(self.blocks, index))]
        )

    def inputs(self) -> list[str]:
        return [self.path]

    def identity(self, files: bool = True) -> dict[str, Any]:
        """The source's parts of a run's identity (:mod:`wxstats.runtime.identity`)."""
        where = os.path.realpath(self.path)
        return {
            "data": {
                "kind": LABEL,
                "features": list(self.variables),
                "diff_steps": list(self.diff_steps),
            },
            "run": {"window": [self.start, self.stop]},
            "files": {
                "files": [[where, None, None]],
                "arrays": array_fingerprints(where, ["data", "dates"]),
            }
            if files
            else {},
        }


def _open(dataset: Any, selection: Selection) -> AnemoiSource:
    block = DEFAULT_BLOCK_BYTES if selection.block_bytes is None else selection.block_bytes
    return AnemoiSource(
        str(dataset),
        period=selection.period,
        diff_steps=selection.diff_steps,
        block_bytes=block,
        io_threads=selection.io_threads,
    )


KIND = SourceKind(
    LABEL,
    CAPABILITIES,
    recognises=lambda dataset, given: given is None and is_anemoi(str(dataset)),
    opens=_open,
)
"""An anemoi dataset: a zarr group with anemoi's marks (:func:`is_anemoi`)."""
