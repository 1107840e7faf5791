"""Every option of every command, given a nonsense value: one line on stderr
(``... error: ...``), exit status 2, no traceback, nothing written.

The options are read from the parser itself, so a new option is swept too."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from gridded_data import gridded, write_zarr

from wxstats.cli import main
from wxstats.cli.parser import build_parser

FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction,
         argparse._VersionAction, argparse._CountAction)  # fmt: skip


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(command: str) -> list[argparse.Action]:
    return [
        a for a in _commands()[command]._actions if a.option_strings and not isinstance(a, FLAGS)
    ]


@pytest.fixture(scope="module")
def world(tmp_path_factory, meps_small):
    """Valid inputs for every command, and a file to put paths under."""
    from wxstats.runtime.run import compute  # noqa: F401  (imports before timing-free runs)

    root = tmp_path_factory.mktemp("sweep")
    ds, _ = gridded(n_time=8)
    store = write_zarr(ds, root / "g.zarr")
    stats, state = root / "g.stats.nc", root / "g.wxstate"
    args = ["compute", str(store), "--output", str(stats), "--state", str(state), "--quiet"]
    assert main(args) == 0
    blocker = root / "a-file"
    blocker.write_text("")
    return {
        "store": str(store),
        "stats": str(stats),
        "state": str(state),
        "meps": str(meps_small),
        "blocker": blocker,
        "root": root,
    }


def _positionals(command: str, world: dict, tmp: Path) -> list[str]:
    return {
        "compute": [world["store"]],
        "update": [world["state"], world["store"]],
        "merge": [world["state"], world["state"]],
        "example": [str(tmp / "new-example")],
        "report": [world["stats"]],
        "compare": [world["stats"], world["stats"]],
        "inspect": [world["meps"]],
        "doctor": [],
    }[command]


def _nonsense(action: argparse.Action, world: dict) -> list[str]:
    if action.type is Path:
        return [str(world["blocker"] / "under-a-file")]
    if action.choices:
        return ["no-such-choice"]
    return ["nan", "-7", "x%y"]


def _refused(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


CASES = [
    (command, action.option_strings[-1]) for command in _commands() for action in _options(command)
]


@pytest.mark.parametrize("command, option", CASES, ids=[f"{c} {o}" for c, o in CASES])
def test_every_option_with_a_nonsense_value_is_one_line_exit_2(
    world, tmp_path, capsys, command, option
):
    action = next(a for a in _options(command) if option in a.option_strings)
    for value in _nonsense(action, world):
        out = tmp_path / "out"
        argv = [command, *_positionals(command, world, tmp_path), f"{option}={value}"]
        if command in ("compute", "update", "merge") and option not in ("--output", "--output-dir"):
            argv += ["--output" if command != "compute" else "--output-dir", str(out)]
        code, err = _refused(argv, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2, (argv, code, err)
        assert len(lines) == 1 and "error:" in lines[0], (argv, err)
        assert "Traceback" not in err
        assert not out.exists() or not any(out.iterdir()), argv


@pytest.mark.parametrize("command", [c for c in _commands() if c != "doctor"])
def test_every_positional_naming_nothing_is_one_line_exit_2(world, tmp_path, capsys, command):
    positionals = _positionals(command, world, tmp_path)
    for i in range(len(positionals)):
        if command == "example":
            continue  # any new folder is a fine place for the example
        argv = [command, *positionals]
        argv[1 + i] = str(tmp_path / "no-such-thing")
        code, err = _refused(argv, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, code, err)
