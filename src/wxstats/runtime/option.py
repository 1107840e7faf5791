"""How one option is declared (:class:`Option`), and how its text is read.

The options themselves are declared with the fields of
:class:`~wxstats.runtime.options.ComputeOptions` (those selecting data in
:class:`~wxstats.runtime.data_options.DataOptions`); this module holds what
those declarations are made of: the value parsers (a ``ValueError`` or
:class:`~wxstats.core.errors.WxstatsError` refuses a value with its message,
which the CLI prints as argparse's error), the :class:`Option` record, and how
``update`` reads an option back from a state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wxstats.core.untrusted import parse_json

if TYPE_CHECKING:  # sources.base imports numpy: not before the command has tuned the process
    from wxstats.sources.base import Capabilities

# -- how an option's text is read (ValueError or WxstatsError: refused, by its message) -----


def positive_float(text: str) -> float:
    """A finite number > 0 (``nan`` and ``inf`` are floats too, and no good)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0.0 < value < math.inf):
        raise ValueError(f"expects a finite number > 0 (got {text!r})")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise ValueError(f"expected seconds >= 0, got {text!r}")
    return value


def names(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def steps(text: str) -> tuple[int, ...]:
    try:
        return tuple(positive_int(item) for item in text.split(","))
    except ValueError:
        raise ValueError(
            f"--diff-steps expects positive whole numbers such as 1,3,6 (got {text!r})"
        ) from None


def level_weights(text: str) -> dict[str, float]:
    from wxstats.io.formats.neurallam import parse_level_weights

    return parse_level_weights(text)


def storage_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{text!r}: expected KEY=VALUE")
    try:
        return key.strip(), parse_json(value, text)
    except ValueError:
        return key.strip(), value


def weights_file(text: str) -> tuple[str, str] | None:
    """The local file and variable of a ``--weights FILE:VAR`` (None: ``coslat``,
    a variable of the dataset, or a URL)."""
    file, colon, name = text.rpartition(":")
    if not (colon and file and name) or "://" in file:
        return None
    return file, name


def weights(text: str) -> str:
    """``--weights``: a ``FILE:VAR`` whose file exists is recorded with its absolute
    path, so that a state can be updated from any folder."""
    found = weights_file(text)
    if found is not None and Path(found[0]).exists():
        return f"{Path(found[0]).resolve()}:{found[1]}"
    return text


# -- the declaration ------------------------------------------------------------------------

COMPUTE = frozenset({"compute", "inspect"})
"""The commands taking the options of ``compute`` (``inspect`` says what it would do)."""
GROWS = frozenset({"compute", "inspect", "update"})
WRITES = frozenset({"compute", "inspect", "update", "merge"})


@dataclass(frozen=True)
class Option:
    """How one field of :class:`ComputeOptions` is given, checked and kept."""

    flag: str
    help: str
    """Its help; for a value declared in another table, ``module:function`` giving it
    (``--format``: the targets', whose table imports this module), read by the CLI."""
    parse: Callable[[str], Any] | None = None
    """Text to value; a ``ValueError``/``WxstatsError`` refuses it with its message."""
    action: str | None = None
    """``store_true`` (a switch), ``append`` or ``extend`` (repeatable); None: one value."""
    metavar: str | None = None
    choices: tuple[str, ...] | str | None = None
    """The values it takes, or ``module:NAME`` of the list of them (as ``help``)."""
    group: str = ""
    """Its heading in ``--help`` ("" none)."""
    commands: frozenset[str] = COMPUTE
    """The commands whose command line has it."""
    help_for: Mapping[str, str] = field(default_factory=dict)
    """Another help text for some commands (``update``'s ``--output``)."""
    takes: Callable[[Capabilities], bool] | None = None
    """Selects data: the capability of the data that takes it (None: any data)."""
    where: str = ""
    """That data in words, for a refusal."""
    hint: str = ""
    """What to give instead, for data that does not take it."""
    identity: str = ""
    """Where the run identity records it (``data.pool``, ``run.splits``); "" nowhere:
    it changes no bit of the statistics."""
    from_state: Callable[[Any], Any] | None = None
    """How ``update`` derives it from the state (a :class:`~wxstats.runtime.state.State`):
    always the state's, never given to ``update``."""
    files: Callable[[Any], list[str]] = lambda value: []
    """The local files its value names: a state records them absolute, and ``update``
    refuses one that is gone naming the state and the recorded value."""
    show: Callable[[Any], str] = lambda value: str(value)
    """Its value as given on a command line (for refusals)."""


def option(default: Any, flag: str, help: str, **how: Any) -> Any:
    """A :class:`ComputeOptions` field declared with its :class:`Option`."""
    return field(default=default, metadata={"option": Option(flag, help, **how)})


def gridded(c: Capabilities) -> bool:
    """Data with time splits (zarr/netCDF), which takes the options selecting variables."""
    return c.time_splits


GRIDDED = "zarr/netCDF datasets"
NOT_DATASTORES = "zarr/netCDF and anemoi datasets"
ZARR = "zarr / netCDF datasets"
RESUME = "resuming after a crash"
PARALLEL = "parallel runs (also under torchrun or srun)"
STATES = "statistics that grow with the data"


def weights_files(value: Any) -> list[str]:
    """The local file a ``--weights`` value names (none for coslat, a variable, a URL)."""
    found = weights_file(str(value)) if value else None
    return [found[0]] if found else []


# -- how update reads an option back from a state (its identity, its streams) -----------


def samples(state: Any) -> bool:
    """Whether ``state`` is of a datastore's samples (its selection: split and step)."""
    from wxstats.sources.kinds import capabilities_of

    return capabilities_of(state.identity["kind"]).neurallam_files


def state_variables(state: Any) -> tuple[str, ...]:
    """A state's variables in its streams' order (the identity's is by name): the
    outputs' order as the state's run."""
    return tuple(dict.fromkeys(s.layout.variable for s in state.specs if s.layout))


def state_feature_dims(state: Any) -> tuple[str, ...]:
    """A state's feature dimensions (``--feature-dims``), sorted."""
    return tuple(sorted({d for v in state.identity["variables"] for d in v["feature_dims"]}))
