from __future__ import annotations

import threading

import pytest

from wxstats.engine import accumulate, references
from wxstats.sources.npyfilesmeps import MepsSource


class Recording(MepsSource):
    """The MEPS source, noting the order of prefetch hints and reads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def prefetch(self, index):
        with self.lock:
            self.events.append(("prefetch", index))
        super().prefetch(index)

    def read(self, index):
        with self.lock:
            self.events.append(("read", index))
        return super().read(index)


@pytest.mark.parametrize("threads", [1, 3])
def test_every_sample_is_prefetched_before_it_is_read(meps_small, threads):
    source = Recording(meps_small)
    refs = references(source)
    source.events.clear()
    indices = [7, 2, 5, 0, 9, 4]
    one = accumulate(source, indices, refs, threads=threads)
    hinted = [i for kind, i in source.events if kind == "prefetch"]
    assert sorted(hinted) == sorted(indices)  # each once, nothing else
    for i in indices:
        assert source.events.index(("prefetch", i)) < source.events.index(("read", i))
    # hints run ahead by a bounded amount (3 * threads + 1 samples at most)
    reads = hints = 0
    for kind, _ in source.events:
        if kind == "read":
            reads += 1
        else:
            hints += 1
            assert hints <= reads + 3 * threads + 1
    # and they change nothing
    plain = accumulate(MepsSource(meps_small), indices, refs, threads=1)
    assert [p.tobytes() for p in one.pack()] == [p.tobytes() for p in plain.pack()]
