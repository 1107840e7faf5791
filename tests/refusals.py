"""How the tests check a refusal: one ``wxstats: error:`` line naming what is
wrong, status 2, and nothing written or removed in the folder watched."""

from __future__ import annotations

from pathlib import Path

from wxstats.cli import main


def assert_refused(capsys, folder: Path, args: list[str], *words: str) -> str:
    """Run ``wxstats ARGS``; assert the refusal; return its line."""
    before = sorted(p.name for p in Path(folder).iterdir())
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wxstats: error: "), err
    for word in words:
        assert word in err[0], (word, err[0])
    assert sorted(p.name for p in Path(folder).iterdir()) == before
    return err[0]
