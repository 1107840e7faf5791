"""The growing scenario the state tests share: states computed over parts of the
data, ``update``d with the rest (or ``merge``d), compared with one run over all
of it (issue 24).

The helpers only drive the command line and read files back as bytes; what the
bytes must equal (the full run's, an independent float64 reference) stays in
each test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import xarray as xr

from wxstats.cli import main

Q = ["--quiet"]


def values(path: Path) -> dict[str, bytes]:
    """Every statistic of a file, as float64 bytes (attributes left out: they
    name the datasets and the run)."""
    with xr.open_dataset(path) as ds:
        return {name: ds[name].values.tobytes() for name in sorted(ds.data_vars)}


def compute_states(
    pieces: Mapping[str, Path], folder: Path, opts: Sequence[str]
) -> dict[str, Path]:
    """``compute PIECE --state folder/NAME.wxstate --output folder/NAME.nc`` for
    each piece, each on its own (as on separate machines); the states by name."""
    states = {}
    for name, data in pieces.items():
        state = folder / f"{name}.wxstate"
        args = ["compute", str(data), "--state", str(state), "--output", str(folder / f"{name}.nc")]
        assert main([*args, *opts]) == 0, name
        states[name] = state
    return states


def update_chain(
    state: Path,
    rest: Sequence[Path],
    folder: Path,
    *,
    keep_state: bool = False,
    last: Sequence[str] = (),
    output_dir: Path | None = None,
) -> Path:
    """``update`` ``state`` with each of ``rest`` in turn (the states between in
    ``folder``); ``last`` adds options to the last update only. Returns the last
    update's statistics: ``folder/grown.nc``, or ``output_dir`` (a
    datastore's files, ``--output-dir``), or with ``keep_state`` the file
    written beside the grown state ``folder/grown.wxstate``."""
    for i, data in enumerate(rest):
        if i < len(rest) - 1:
            nxt = folder / f"grown{i}.wxstate"
            assert main(["update", str(state), str(data), "--state", str(nxt), *Q]) == 0, data
            state = nxt
        elif keep_state:
            grown = folder / "grown.wxstate"
            args = ["update", str(state), str(data), "--state", str(grown)]
            assert main([*args, *last, *Q]) == 0, data
            return folder / "grown.stats.nc"
        else:
            out = output_dir or folder / "grown.nc"
            flag = "--output" if output_dir is None else "--output-dir"
            args = ["update", str(state), str(data), flag, str(out)]
            assert main([*args, *last, *Q]) == 0, data
            return out
    raise ValueError("nothing to update with")


def merge_states(states: Sequence[Path], out: Path, *extra: str, flag: str = "") -> Path:
    """``merge STATES... --output out`` (``--state out`` for a ``.wxstate``, or
    ``flag``, e.g. ``--output-dir``); returns ``out``."""
    flag = flag or ("--state" if out.suffix == ".wxstate" else "--output")
    assert main(["merge", *map(str, states), flag, str(out), *extra, *Q]) == 0
    return out


@dataclass
class Grown:
    """The files of one growing scenario: the full run's statistics, those of
    the first piece's state updated with the others, and of the states merged."""

    full: Path
    grown: Path
    merged: Path | None

    def assert_same_bytes(self) -> None:
        """The grown (and merged) statistics are the full run's, bit for bit."""
        full = values(self.full)
        assert values(self.grown) == full, "updated states differ from the full run"
        if self.merged is not None:
            assert values(self.merged) == full, "merged states differ from the full run"


def grow(
    full: Path,
    pieces: Mapping[str, Path],
    folder: Path,
    opts: Sequence[str],
    merge_order: str | None = None,
) -> Grown:
    """The whole scenario from the data alone: ``compute full --output`` and
    a state of each piece it needs with ``opts``; the first piece's state updated with
    the others in order; the states merged in ``merge_order`` (names), if any."""
    full_nc = folder / "full.nc"
    assert main(["compute", str(full), "--output", str(full_nc), *opts]) == 0
    first, *rest = pieces
    needed = {first, *(merge_order or "")}
    states = compute_states({n: d for n, d in pieces.items() if n in needed}, folder, opts)
    grown = update_chain(states[first], [pieces[n] for n in rest], folder)
    merged = None
    if merge_order is not None:
        merged = merge_states([states[n] for n in merge_order], folder / "merged.nc")
    return Grown(full_nc, grown, merged)
