"""The outputs' check against the inputs: real paths found per folder, not per
file, and still a refusal for a sample file that is a symbolic link to an output."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from wxstats.cli import main
from wxstats.runtime.preflight import real_path
from wxstats.tools.example import ExampleSpec, write_example


def test_real_path_is_what_resolve_gives(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "f.npy").write_bytes(b"x")
    (tmp_path / "real" / "sub" / "g.npy").write_bytes(b"y")
    (tmp_path / "linkdir").symlink_to(tmp_path / "real" / "sub")
    (tmp_path / "real" / "abs").symlink_to(tmp_path / "real" / "f.npy")
    (tmp_path / "real" / "rel").symlink_to("sub/g.npy")
    (tmp_path / "real" / "chain").symlink_to("rel")
    (tmp_path / "linkdir" / "up").symlink_to("../f.npy")  # '..' from the link's real folder
    (tmp_path / "loop").symlink_to("loop")
    names = ["real/f.npy", "real/abs", "real/rel", "real/chain", "linkdir/g.npy", "linkdir/up",
             "linkdir/missing.npy", "missing/x", "f", str(tmp_path / "real" / "abs"),
             "real/sub/..", "linkdir/.", "real/./f.npy"]  # fmt: skip
    folders: dict[str, Path] = {}
    for name in names:
        assert real_path(name, folders) == Path(name).resolve(), name
    with pytest.raises(RuntimeError):  # a loop is refused as resolve() refuses it
        Path("loop").resolve(strict=True)
    try:
        expected = Path("loop").resolve()
    except RuntimeError:
        with pytest.raises(RuntimeError):
            real_path("loop", folders)
    else:
        assert real_path("loop", folders) == expected


@pytest.mark.parametrize("inside", [False, True])
def test_a_sample_linked_to_an_output_is_refused(tmp_path, inside, capsys):
    config = write_example(
        tmp_path / "data", ExampleSpec(analysis_times=1, members=1, grid=(2, 3), val_times=0)
    )
    out = tmp_path / "out"
    out.mkdir()
    sample = sorted((tmp_path / "data" / "samples" / "train").glob("nwp_*_mbr*.npy"))[0]
    # the link's target: an output file (a copy of the sample, so that the data
    # still reads), or a file inside the output folder
    target = out / "parameter_mean.pt" if not inside else out / "kept" / sample.name
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(sample, target)
    sample.unlink()
    sample.symlink_to(os.path.relpath(target, sample.parent))
    before = sorted((p.name, p.stat().st_size) for p in out.rglob("*"))
    args = ["compute", str(config), "--output-dir", str(out), "--overwrite", "--quiet"]
    if inside:  # the output folder's own file: a link to a file inside it is not an output
        assert main(args) == 0
        return
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "would destroy the data" in err and sample.name in err
    assert sorted((p.name, p.stat().st_size) for p in out.rglob("*")) == before
