"""Files someone else wrote (issue 33, cases 6 and 7): deeply nested JSON as a
summary, a journal or a checkpoint's manifest (and YAML as a datastore config),
and a ``.pt`` whose pickle would run code, are refused in one line through the
CLI, with no traceback and nothing run; and the guarded readers of
:mod:`wxstats.core.untrusted` themselves."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from distributed_helpers import compute_args, run, wxstats_cmd

from wxstats.core.errors import InputError
from wxstats.core.untrusted import (
    JSON_DEPTH,
    UntrustedInput,
    load_npy,
    load_tensor,
    load_yaml,
    parse_json,
    read_json,
)

DEEP = "[" * 200_000  # issue 33 case 6: a RecursionError traceback before


def _one_line_refusal(result, *words: str) -> str:
    """The command failed with exactly one ``wxstats: ...`` line on stderr and no traceback."""
    err = result.stderr.strip()
    assert result.returncode != 0, (result.stdout, err)
    assert "Traceback" not in err and "RecursionError" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("wxstats: "), err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- the readers ---------------------------------------------------------------------
def test_json_depth_is_counted_before_parsing_and_strings_do_not_count():
    with pytest.raises(UntrustedInput, match=r"f\.json: JSON nested 200000 levels deep"):
        parse_json(DEEP, "f.json")
    nested = "[" * JSON_DEPTH + "]" * JSON_DEPTH
    assert parse_json(nested, "x") == json.loads(nested)
    with pytest.raises(UntrustedInput, match="nested 129 levels"):
        parse_json("{" + '"a":[' * JSON_DEPTH + "]" * JSON_DEPTH + "}", "x")
    brackets_in_strings = json.dumps({"a": ["[" * 1000, '{"\\"[' * 500]})
    assert parse_json(brackets_in_strings, "x") == json.loads(brackets_in_strings)


def test_json_depth_scan_is_linear_on_unterminated_strings():
    """Escaped quotes after an unterminated quote: a string pattern that can fail
    rescanned the rest from each of them (40,000 of them took 70 s)."""
    text = "[]" * 100 + "[" * 100 + '"' + '\\"' * 400_000
    with pytest.raises(UntrustedInput, match="not valid JSON"):
        parse_json(text, "x")  # 100 deep before the string, which nests nothing
    with pytest.raises(UntrustedInput, match="nested 300 levels"):
        parse_json("[" * 300 + '"' + "[" * 1000, "x")


def test_json_refusals_are_value_errors_and_input_errors_naming_the_file():
    for text, why in [
        ("{", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        ("1" * 5000, "not valid JSON"),  # Python's limit on an integer's digits
        (12, "not JSON text"),
    ]:
        with pytest.raises(UntrustedInput, match=why) as caught:
            parse_json(text, "where.json")
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, InputError)
        assert str(caught.value).startswith("where.json: ") and "\n" not in str(caught.value)


def test_read_json_reads_no_more_than_its_limit(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps(["x" * 1000] * 2000))
    assert len(read_json(big)) == 2000
    with pytest.raises(UntrustedInput, match=r"big\.json: larger than 1000 bytes"):
        read_json(big, limit=1000)
    with pytest.raises(FileNotFoundError):  # callers word a missing file themselves
        read_json(tmp_path / "missing.json")


def test_yaml_refusals_are_one_line(tmp_path):
    """A datastore config of 200,000 ``[`` was a RecursionError traceback from
    PyYAML's parser; a syntax error was PyYAML's message of four lines."""
    cases = {
        "deep.yaml": (DEEP, "YAML nested too deeply"),
        "bad.yaml": ("dataset:\n  var_names: [a, b\n", r"not valid YAML: .* \(line 3, column 1\)"),
        "latin1.yaml": (b"name: caf\xe9\n", "not UTF-8"),
    }
    for name, (content, why) in cases.items():
        path = tmp_path / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        with pytest.raises(UntrustedInput, match=why) as caught:
            load_yaml(path)
        assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
    (tmp_path / "ok.yaml").write_text("dataset:\n  var_names: [a, b]\n")
    assert load_yaml(tmp_path / "ok.yaml") == {"dataset": {"var_names": ["a", "b"]}}
    with pytest.raises(UntrustedInput, match="larger than 10 bytes"):
        load_yaml(tmp_path / "ok.yaml", limit=10)


def test_npy_header_is_checked_against_the_file_before_loading(tmp_path):
    good = tmp_path / "good.npy"
    np.save(good, np.arange(4.0).reshape(1, 4, 1, 1))
    assert load_npy(good).shape == (1, 4, 1, 1)
    data = good.read_bytes()
    cases = {
        "short.npy": (data[:-3], "declares 32 bytes of data"),
        "huge.npy": (
            data.replace(b"(1, 4, 1, 1)", b"(10**12,)".ljust(12)).replace(b"10**12", b"999999"),
            "declares 7999992 bytes",
        ),
        "header.npy": (data[:12], "not a readable .npy file"),
        "magic.npy": (b"PK\x03\x04" + data[4:], "not a readable .npy file"),
    }
    for name, (content, why) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UntrustedInput, match=why):
            load_npy(tmp_path / name)
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UntrustedInput, match="Python objects"):
        load_npy(objects)
    with pytest.raises(UntrustedInput, match="more than the 16 bytes"):
        load_npy(good, limit=16)


class _RunsCode:
    """A pickle that runs ``touch MARKER`` when it is loaded (issue 33 case 7)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_code_running_pt_is_refused_without_running_it(tmp_path):
    import torch

    marker = tmp_path / "MARKER"
    evil = tmp_path / "evil.pt"
    torch.save({"mean": _RunsCode(marker)}, evil)
    with pytest.raises(UntrustedInput) as caught:
        load_tensor(evil)
    text = str(caught.value)
    assert text.startswith(f"{evil}: refused") and "system" in text, text
    assert "\n" not in text and "weights_only" not in text, text
    assert not marker.exists()
    torch.save(torch.arange(3.0), tmp_path / "ok.pt")
    assert load_tensor(tmp_path / "ok.pt").tolist() == [0.0, 1.0, 2.0]


def test_a_pt_with_compressed_or_oversized_records_is_refused_before_torch(tmp_path):
    import torch

    good = tmp_path / "ok.pt"
    torch.save(torch.arange(3.0), good)
    with pytest.raises(UntrustedInput, match="records declare"):
        load_tensor(good, limit=10)
    deflated = tmp_path / "deflated.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(deflated, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), zipfile.ZIP_DEFLATED)
    with pytest.raises(UntrustedInput, match="compressed records"):
        load_tensor(deflated)


# -- through the CLI: one line, non-zero, no traceback -------------------------------
@pytest.fixture(scope="module")
def computed(tmp_path_factory, meps_small):
    """A finished run's outputs (the neural-lam files and a JSON summary)."""
    out = tmp_path_factory.mktemp("computed")
    result = run(wxstats_cmd(*compute_args(meps_small, out, "--threads", "1")))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow  # subprocesses: what a user sees, tracebacks included
def test_deeply_nested_summary_is_one_line_in_report_and_compare(tmp_path, computed):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    _one_line_refusal(run(wxstats_cmd("report", str(deep))), str(deep), "nested 200000")
    result = run(wxstats_cmd("compare", str(computed / "summary.json"), str(deep)))
    _one_line_refusal(result, str(deep), "nested 200000")


@pytest.mark.slow  # subprocesses: what a user sees, tracebacks included
def test_deeply_nested_datastore_config_is_one_line(tmp_path):
    config = tmp_path / "meps.datastore.yaml"
    config.write_text(DEEP)
    result = run(wxstats_cmd("compute", str(config), "--output-dir", str(tmp_path / "out")))
    _one_line_refusal(result, str(config), "nested too deeply")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # subprocesses: what a user sees, tracebacks included
def test_deeply_nested_journal_is_one_line_and_nothing_moves(tmp_path, meps_small, computed):
    out = tmp_path / "out"
    out.mkdir()
    journal = out / ".wxstats-replacing-1234.json"
    journal.write_text(DEEP)
    result = run(wxstats_cmd(*compute_args(meps_small, out, "--threads", "1")))
    _one_line_refusal(result, str(journal))
    assert sorted(p.name for p in out.iterdir()) == [journal.name]
    _one_line_refusal(run(wxstats_cmd("report", str(out))), "interrupted")


@pytest.mark.slow  # subprocesses: what a user sees, tracebacks included
def test_deeply_nested_checkpoint_manifest_is_one_line(tmp_path, meps_small):
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    (checkpoint / "manifest.json").write_text(DEEP)
    out = tmp_path / "out"
    args = compute_args(meps_small, out, "--threads", "1", "--checkpoint", str(checkpoint))
    line = _one_line_refusal(run(wxstats_cmd(*args, "--resume")), "manifest.json")
    assert "damaged" in line and "nested 200000" in line, line
    _one_line_refusal(run(wxstats_cmd(*args)), str(checkpoint))
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.slow  # subprocesses: what a user sees, tracebacks included
def test_a_code_running_pt_in_a_static_folder_is_one_line(tmp_path, computed):
    """Case 7: ``report`` of a neural-lam folder whose ``parameter_mean.pt`` is a
    code-running pickle: one line naming it, the code never runs, and torch's advice
    to load it with ``weights_only=False`` is not repeated."""
    import shutil

    import torch

    static = tmp_path / "static"
    shutil.copytree(computed, static)
    (static / "wxstats_stats.nc").unlink()
    marker = tmp_path / "MARKER"
    torch.save({"mean": _RunsCode(marker)}, static / "parameter_mean.pt")
    for command in (("report", str(static)), ("compare", str(static), str(computed))):
        result = run(wxstats_cmd(*command))
        line = _one_line_refusal(result, str(static / "parameter_mean.pt"), "refused")
        assert "weights_only" not in result.stderr + result.stdout, line
    assert not marker.exists()
