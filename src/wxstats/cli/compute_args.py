"""The command line of every declared option, and the options it makes.

The flags, their value types, help and which command has them are declared
once, with the fields of :class:`~wxstats.runtime.options.ComputeOptions`
(:data:`~wxstats.runtime.options.OPTIONS`); :func:`add_options` turns that
declaration into argparse arguments for one command and :func:`given_options`
reads them back. A value that cannot be right is refused here, by argparse,
before anything is read.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.runtime import option as declared
from wxstats.runtime.options import OPTIONS, ComputeOptions


def _argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its refusal's message is argparse's error."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except (ValueError, WxstatsError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = parse.__name__
    return read


positive_int = _argument_type(declared.positive_int)
"""A positive whole number, for the arguments of other commands (``example --times``)."""


_LATER = re.compile(r"[\w.]+:\w+")
"""``module:name``: a help text or choices declared in a table that imports the options."""


def _named(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def add_options(p: argparse.ArgumentParser, command: str) -> None:
    """The declared options ``command`` takes, as its arguments (default None: a
    value not given is the declaration's default)."""
    groups: dict[str, Any] = {}
    for name, decl in OPTIONS.items():
        if command not in decl.commands:
            continue
        where = p
        if decl.group and command in declared.COMPUTE:  # update's and merge's are few
            where = groups.get(decl.group) or groups.setdefault(
                decl.group, p.add_argument_group(decl.group)
            )
        text = decl.help_for.get(command) or decl.help
        if _LATER.fullmatch(text):
            text = _named(text)()
        how: dict[str, Any] = {"dest": name, "help": text}
        if decl.action == "store_true":
            how["action"] = "store_true"
            how["default"] = None
        else:
            if decl.parse is not None:
                plain = decl.parse is Path  # a path is refused when it is used
                how["type"] = decl.parse if plain else _argument_type(decl.parse)
            if decl.action:
                how["action"] = decl.action
            if decl.metavar:
                how["metavar"] = decl.metavar
            if decl.choices is not None:
                named = isinstance(decl.choices, str)
                how["choices"] = _named(decl.choices) if named else decl.choices
        where.add_argument(decl.flag, **how)


def given_options(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The declared options of ``command`` given on its command line, by field name."""
    out = {}
    for name, decl in OPTIONS.items():
        value = getattr(args, name, None) if command in decl.commands else None
        if value is not None:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def add_compute_arguments(p: argparse.ArgumentParser, command: str = "compute") -> None:
    """``compute``'s arguments (``inspect`` takes the same but ``--state``)."""
    p.add_argument(
        "dataset",
        help="neural-lam datastore YAML (npyfilesmeps), or a zarr store (folder or URL), "
        "a netCDF file, or a quoted glob of netCDF files opened as one dataset",
    )
    add_options(p, command)


def compute_options(args: argparse.Namespace, argv: list[str]) -> ComputeOptions:
    """The options of a ``compute`` (or ``inspect``) command line (``argv`` for ``--nproc``)."""
    return ComputeOptions(
        dataset=args.dataset, argv=tuple(argv), **given_options(args, args.command)
    )
