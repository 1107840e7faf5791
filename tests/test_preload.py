from __future__ import annotations

import subprocess
import sys

from wxstats.runtime import preload


def test_after_first_starts_the_import_once(monkeypatch):
    calls = []
    monkeypatch.setattr(preload, "start", lambda names: calls.append(names))
    callback = preload.after_first(("json",))
    assert calls == []
    for index in (4, 1, 7):
        callback(index)
    assert calls == [("json",)]


def test_start_imports_in_a_thread_and_ignores_missing_modules():
    code = (
        "import sys\n"
        "from wxstats.runtime import preload\n"
        "preload.start(('colorsys', 'no_such_module_wxstats')).join()\n"
        "assert 'colorsys' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
