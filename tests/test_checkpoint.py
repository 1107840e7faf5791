"""Checkpoints: resumed runs give the same bytes; stale checkpoints are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wxstats.api import ComputeOptions, compute_source, open_source, partition
from wxstats.checkpoint import Checkpoint
from wxstats.engine import accumulate, empty_accumulator, references
from wxstats.errors import WxstatsError
from wxstats.stats import finalize


def _fingerprint(source, **options):
    return {"identity": source.identity(), "options": {"split": "train", **options}}


def _stats_bytes(stats):
    s = stats.state
    parts = [s.mean, s.std, s.minimum, s.maximum, s.diff[3].mean, s.diff[3].std]
    flux = stats.streams["toa_downwelling_shortwave_flux"]
    return b"".join(np.asarray(p).tobytes() for p in parts + [flux.mean, flux.std])


@pytest.mark.parametrize("first_world,second_world", [(2, 1), (2, 3), (3, 2)])
def test_resume_with_another_world_size_is_byte_identical(
    meps_small, tmp_path, first_world, second_world
):
    source = open_source(meps_small, ComputeOptions())
    refs = references(source)
    clean = compute_source(source)
    # first run: each rank finished part of its range, then was killed
    for rank in range(first_world):
        mine = list(partition(len(source), rank, first_world))[:2]
        ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
        ck.prepare(resume=rank > 0)
        ck.save(mine, accumulate(source, mine, refs))
    # second run: load, share out the rest, merge
    ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
    ck.prepare(resume=True)
    done, carried = ck.load(empty_accumulator(source))
    assert len(done) == 2 * first_world
    remaining = [i for i in range(len(source)) if i not in done]
    total = carried
    for rank in range(second_world):
        total.merge(
            accumulate(
                source, [remaining[i] for i in partition(len(remaining), rank, second_world)], refs
            )
        )
    resumed = finalize(total, source.streams, refs, source.kind)
    assert _stats_bytes(resumed) == _stats_bytes(clean)


def test_part_files_are_replaced_atomically(meps_small, tmp_path):
    source = open_source(meps_small, ComputeOptions())
    refs = references(source)
    ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
    ck.prepare(resume=False)
    ck.save([0], accumulate(source, [0], refs))
    ck.save([0, 1], accumulate(source, [0, 1], refs))
    # a write killed half-way leaves only a hidden temporary file, which is ignored
    (tmp_path / "ck" / f".{ck.part.name}.xyz.tmp").write_bytes(b"half a file")
    assert len(list((tmp_path / "ck").glob("part-*.npz"))) == 1
    done, _ = Checkpoint(tmp_path / "ck", _fingerprint(source)).load(empty_accumulator(source))
    assert done == {0, 1}


def test_existing_checkpoint_needs_resume(meps_small, tmp_path):
    source = open_source(meps_small, ComputeOptions())
    Checkpoint(tmp_path / "ck", _fingerprint(source)).prepare(resume=False)
    with pytest.raises(WxstatsError, match="--resume"):
        Checkpoint(tmp_path / "ck", _fingerprint(source)).prepare(resume=False)


def test_changed_options_or_data_are_refused(meps_copy, tmp_path):
    source = open_source(meps_copy, ComputeOptions())
    Checkpoint(tmp_path / "ck", _fingerprint(source, skipna=False)).prepare(resume=False)
    with pytest.raises(WxstatsError, match="option skipna: False -> True"):
        Checkpoint(tmp_path / "ck", _fingerprint(source, skipna=True)).prepare(resume=True)
    victim = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[2]
    x = np.load(victim)
    np.save(victim, x + 1)
    changed = open_source(meps_copy, ComputeOptions())
    with pytest.raises(WxstatsError, match=f"files modified: {victim.name}"):
        Checkpoint(tmp_path / "ck", _fingerprint(changed, skipna=False)).prepare(resume=True)


def test_overlapping_parts_are_refused(meps_small, tmp_path):
    source = open_source(meps_small, ComputeOptions())
    refs = references(source)
    for _ in range(2):
        ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
        ck.prepare(resume=True)
        ck.save([3], accumulate(source, [3], refs))
    with pytest.raises(WxstatsError, match="two part files"):
        Checkpoint(tmp_path / "ck", _fingerprint(source)).load(empty_accumulator(source))


def test_manifest_records_identity(meps_small, tmp_path):
    source = open_source(meps_small, ComputeOptions())
    Checkpoint(tmp_path / "ck", _fingerprint(source)).prepare(resume=False)
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert len(manifest["identity"]["files"]) == 20 and manifest["options"]["split"] == "train"
