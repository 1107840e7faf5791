"""The fuzz tier (issue 33): files someone else wrote, mutated, must give either
the right numbers or one line.

Seeded mutations of what wxstats reads that others may write: zarr metadata
(``.zarray``/``.zattrs``/``.zgroup``/``.zmetadata``: shape, chunks, dtype,
compressor, fill_value, filters, truncation, type swaps) and chunk bytes
(truncated, flipped, wrong size), the first KB of a netCDF-4/HDF5 file, JSON
summaries, neural-lam ``.pt`` files, ``.wxstate`` states and checkpoints
(manifest and part files), recovery journals and datastore YAML. Each case's outcome must be

- exit 0 with numbers equal to what xarray decodes from the same mutated input
  (count and NaN count exactly, the rest to float32 decoding's precision: an
  independent float64 numpy reference over ``xarray``'s decoded values), or
- a non-zero exit with exactly one ``wxstats: ...`` line on stderr (warning
  lines aside),

and never a traceback, a hang, a file created, changed or removed outside the
case's output folder (the input and a sentinel folder are snapshotted), or
memory above the plan (each batch runs under ``RLIMIT_AS``; a MemoryError is a
traceback like any other).

The cases are fixed: every mutation kind appears, its details drawn from a
seed derived from the case's family and index, so a failure reproduces with
``python tests/test_fuzz.py FAMILY INDEX`` (the case, its seed and the
mutation are in the failure's message). Budgeted by count, not time: each
family runs its cases in one subprocess through the in-process CLI entry
(``wxstats.cli.main``, stdout and stderr captured at the file descriptors, so
a C library's own printing counts too); a crash or a hang (a generous timeout,
a guard, not a speed check) is that case's failure and the batch goes on from
the next case.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.fuzz]  # subprocesses: the full tier, as CI runs it

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
MEMORY_LIMIT = 3 << 30  # bytes of address space per batch: imports take ~1.5 GiB of it
HANG_GUARD = 60  # seconds a case may take before its batch is called hung
DEEP = "[" * 200_000


@dataclass(frozen=True)
class Case:
    family: str
    index: int
    kind: str

    @property
    def seed(self) -> int:
        return int(hashlib.sha256(f"{self.family}/{self.index}".encode()).hexdigest()[:8], 16)

    @property
    def id(self) -> str:
        return f"{self.family}-{self.index:02d}-{self.kind}"


KINDS: dict[str, list[str]] = {
    "zarr-meta": [
        "shape_grow", "shape_shrink", "shape_huge", "shape_type", "chunks_zero",
        "chunks_huge", "chunks_type", "chunks_len", "dtype", "compressor", "fill_value",
        "filters", "order", "zarr_format", "dim_separator", "type_swap", "drop_field",
        "attr_scale", "attr_fill", "attr_dims", "attr_units", "truncate", "deep", "junk",
        "zgroup",
    ],
    "zarr-chunk": [
        "truncate", "flip", "append", "empty", "zeros", "random", "swap", "delete", "dir",
        "bomb",
    ],
    "netcdf": ["flip_header", "flip_header", "zero_run", "truncate", "flip_anywhere"],
    "summary": [
        "truncate", "deep", "type_swap", "drop", "list_len", "nan_strings", "huge_int",
        "junk", "empty", "bom",
    ],
    "pt": [
        "flip", "truncate", "code", "shape2d", "wrong_len", "dict", "deflate", "empty",
        "legacy", "records",
    ],
    "state": [
        "flip_header", "flip_anywhere", "truncate", "meta_deep", "meta_junk", "meta_types",
        "checksum", "version",
    ],
    "checkpoint": [
        "manifest_truncate", "manifest_deep", "manifest_type_swap", "manifest_drop",
        "part_flip", "part_truncate", "part_meta_deep",
    ],
    "journal": ["deep", "truncate", "junk", "types", "outside", "escape", "own"],
    "yaml": ["truncate", "deep", "junk", "type_swap", "drop", "list_len", "empty", "bom"],
}  # fmt: skip
COUNTS = {
    "zarr-meta": 50,
    "zarr-chunk": 16,
    "netcdf": 20,
    "summary": 16,
    "pt": 12,
    "state": 12,
    "checkpoint": 10,
    "journal": 7,
    "yaml": 10,
}


def all_cases() -> list[Case]:
    return [
        Case(family, i, KINDS[family][i % len(KINDS[family])])
        for family, n in COUNTS.items()
        for i in range(n)
    ]


# -- the parent: run the batches, judge each case ----------------------------------------
def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE), env.get("PYTHONPATH", "")])
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def run_family(family: str, cases: list[Case], work: Path) -> dict[str, dict]:
    """Every case of ``family`` in as few subprocesses as crashes and hangs allow."""
    results: dict[str, dict] = {}
    todo = list(cases)
    while todo:
        spec = work / f"{family}.json"
        log = work / f"{family}.results"
        spec.write_text(json.dumps([c.index for c in todo]))
        log.write_text("")
        timeout = HANG_GUARD * (len(todo) + 2)
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--batch", family, str(spec), str(log)],
                cwd=work,
                env=_env(),
                preexec_fn=_limit_memory,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            ended = f"batch ended with status {proc.returncode}: {proc.stderr[-2000:]}"
        except subprocess.TimeoutExpired:
            ended = f"hung: no end within {timeout} s"
        started = None
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if "started" in record:
                started = record["started"]
            else:
                results[record["id"]] = record
                started = None
        done = {c.id for c in todo if c.id in results}
        if started is not None:  # this case crashed or hung its batch
            results[started] = {"id": started, "failure": f"the case's process {ended}"}
            done.add(started)
        elif len(done) < len(todo):
            first = next(c for c in todo if c.id not in done)
            results[first.id] = {"id": first.id, "failure": f"before the case: {ended}"}
            done.add(first.id)
        todo = [c for c in todo if c.id not in done]
    return results


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("fuzz")
    found: dict[str, dict] = {}
    for family in COUNTS:
        found.update(run_family(family, [c for c in all_cases() if c.family == family], work))
    return found


def _params():
    return [pytest.param(case, id=case.id) for case in all_cases()]


@pytest.mark.parametrize("case", _params())
def test_fuzz_case(case: Case, outcomes: dict[str, dict]) -> None:
    record = outcomes.get(case.id, {"failure": "no outcome recorded"})
    where = (
        f"case {case.id} (seed {case.seed}; reproduce: python tests/test_fuzz.py "
        f"{case.family} {case.index}); mutation: {record.get('mutation', '?')}"
    )
    assert "failure" not in record, f"{where}: {record.get('failure')}"


# -- the child: build the inputs once, mutate, run, judge ---------------------------------
class Fixtures:
    """The unmutated inputs of a batch, built once (lazily) under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, Path] = {}

    def get(self, name: str) -> Path:
        if name not in self._made:
            self._made[name] = getattr(self, f"_make_{name.replace('-', '_')}")()
        return self._made[name]

    def _dataset(self, start: int = 0, stop: int = 12):
        import numpy as np
        import xarray as xr

        rng = np.random.default_rng(0)
        n, ny, nx = 12, 4, 5
        t2m = (280 + 4 * rng.standard_normal((n, ny, nx))).astype(np.float32)
        raw = rng.integers(-2000, 2000, (n, ny, nx)).astype(np.int16)
        packed = {
            "scale_factor": np.float32(0.01),
            "add_offset": np.float32(1000),
            "_FillValue": np.int16(-32767),
            "units": "hPa",
        }
        times = np.datetime64("2021-01-01T00", "h") + np.arange(n).astype("timedelta64[h]")
        ds = xr.Dataset(
            {
                "t2m": (("time", "y", "x"), t2m, {"units": "K"}),
                "msl": (("time", "y", "x"), raw, packed),
            },
            coords={"time": times, "y": np.arange(ny), "x": np.arange(nx)},
        )
        return ds.isel(time=slice(start, stop))

    def _zarr(self, name: str, start: int = 0, stop: int = 12) -> Path:
        ds = self._dataset(start, stop)
        encoding = {v: {"chunks": (4, 4, 5)} for v in ds.data_vars}
        path = self.root / name
        ds.to_zarr(path, mode="w", zarr_format=2, encoding=encoding, consolidated=True)
        return path

    def _make_zarr(self) -> Path:
        return self._zarr("s.zarr")

    def _make_netcdf(self) -> Path:
        path = self.root / "s.nc"
        ds = self._dataset()
        encoding = {v: {"chunksizes": (4, 4, 5), "zlib": True} for v in ds.data_vars}
        ds.to_netcdf(path, engine="netcdf4", encoding=encoding)
        return path

    def _make_summary(self) -> Path:
        out = self.root / "computed"
        _cli(["compute", str(self.get("zarr")), "--output", str(out / "s.nc"),
              "--summary", str(out / "summary.json"), "--quiet"])  # fmt: skip
        return out / "summary.json"

    def _make_meps(self) -> Path:
        from wxstats.tools.example import ExampleSpec, write_example

        return write_example(self.root / "meps", ExampleSpec(analysis_times=2, grid=(3, 4)))

    def _make_static(self) -> Path:
        out = self.root / "static"
        argv = ["compute", str(self.get("meps")), "--quiet", "--output-dir", str(out)]
        code, _, err = _cli(argv)
        assert code == 0, err
        (out / "wxstats_stats.nc").unlink()  # report reads the .pt files themselves
        return out

    def _make_states(self) -> Path:
        folder = self.root / "states"
        for name, (a, b) in {"a": (0, 6), "b": (6, 12)}.items():
            store = self._zarr(f"{name}.zarr", a, b)
            code, _, err = _cli(["compute", str(store), "--quiet",
                                 "--state", str(folder / f"{name}.wxstate"),
                                 "--output", str(folder / f"{name}.nc")])  # fmt: skip
            assert code == 0, err
        return folder

    def _make_checkpoint(self) -> Path:
        out = self.root / "checkpointed"
        argv = ["compute", str(self.get("zarr")), "--quiet", "--output", str(out / "s.nc")]
        code, _, err = _cli([*argv, "--checkpoint", str(out / "ck")])
        assert code == 0, err
        (out / "s.nc").unlink()
        return out / "ck"


def _cli(argv: list[str]) -> tuple[Any, str, str]:
    """``wxstats ARGV`` in this process: (exit status or ``"raised"``, stdout,
    stderr), both captured at the file descriptors."""
    from wxstats.cli import main

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            try:
                code: Any = main(argv)
            except SystemExit as exc:
                code = exc.code
            except BaseException:  # noqa: BLE001 - what the user would see as a traceback
                traceback.print_exc()
                code = "raised"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def _snapshot(folder: Path, skip: Path) -> dict[str, str]:
    """Every path under ``folder`` but ``skip``: a file's digest, a folder, a link."""
    seen = {}
    for root, dirs, files in os.walk(folder):
        if Path(root) == skip or skip in Path(root).parents:
            dirs.clear()
            continue
        for name in dirs + files:
            path = Path(root, name)
            if path == skip:
                continue
            key = str(path.relative_to(folder))
            if path.is_symlink():
                seen[key] = "link " + os.readlink(path)
            elif path.is_dir():
                seen[key] = "dir"
            else:
                seen[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _judge_lines(command: str, code: Any, out: str, err: str) -> str | None:
    """What is wrong with the command's output, if anything (not its numbers):
    ``compare``'s exit 1 says the sets differ, on stdout."""
    text = out + err
    if "Traceback" in text or "wxstats: error: unexpected" in text:
        return f"a traceback (exit {code}):\n{text[-3000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    others = [line for line in lines if not line.startswith("wxstats: warning:")]
    if code == 0 or (command == "compare" and code == 1 and out.strip()):
        return f"exit {code} with other lines on stderr: {others}" if others else None
    if not isinstance(code, int):
        return f"exit {code!r}:\n{text[-3000:]}"
    if len(others) != 1 or not others[0].startswith("wxstats: "):
        return f"exit {code} without exactly one wxstats line: {others}"
    return None


def _xarray_numbers(path: Path) -> dict[str, dict[str, float] | str] | str:
    """Per numeric variable with a time axis (what wxstats takes): xarray's
    decoded values' count, NaN count, mean, std, min and max in float64, or why
    xarray cannot decode that variable; or why it cannot open the input."""
    import numpy as np
    import xarray as xr

    engine = "zarr" if path.suffix == ".zarr" else "netcdf4"
    try:
        ds = xr.open_dataset(path, engine=engine)
    except Exception as exc:  # noqa: BLE001 - any refusal of xarray's is an answer
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    numbers: dict[str, dict[str, float] | str] = {}
    with ds:
        for name, var in ds.data_vars.items():
            stored = np.dtype(var.encoding.get("dtype", var.dtype))
            if "time" not in var.dims or stored.kind not in "iuf":
                continue
            try:
                values = np.asarray(var.values, dtype=np.float64).reshape(-1)
            except Exception as exc:  # noqa: BLE001
                numbers[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            finite = values[np.isfinite(values)]
            mean = finite.mean() if finite.size else np.nan
            numbers[name] = {
                "count": int(finite.size),
                "nan_count": int(values.size - finite.size),
                "mean": float(mean),
                "std": float(np.sqrt(np.mean((finite - mean) ** 2))) if finite.size else np.nan,
                "min": float(finite.min()) if finite.size else np.nan,
                "max": float(finite.max()) if finite.size else np.nan,
            }
    return numbers


def _compare_numbers(summary: Path, reference: dict | str) -> str | None:
    """Where the summary's state statistics differ from xarray's decoding."""
    if isinstance(reference, str):
        return f"exit 0, yet xarray cannot open the input ({reference})"
    data = json.loads(summary.read_text())
    names, state = data["variables"], data["state"]
    if sorted(names) != sorted(reference):
        return f"variables {sorted(names)}, xarray decodes {sorted(reference)}"
    for i, name in enumerate(names):
        ref = reference[name]
        if isinstance(ref, str):
            return f"exit 0, yet xarray cannot decode {name} ({ref})"
        scale = max(1.0, abs(ref["min"]), abs(ref["max"]))
        for key in ("count", "nan_count"):
            if state[key][i] != ref[key]:
                return f"{name} {key}: {state[key][i]}, xarray's {ref[key]}"
        for key in ("mean", "std", "min", "max"):
            if not abs(state[key][i] - ref[key]) <= 1e-6 * scale:
                return f"{name} {key}: {state[key][i]!r}, xarray's {ref[key]!r}"
    return None


# -- mutations -------------------------------------------------------------------------
JSON_VALUES = [None, True, 0, -1, 1.5, 2**70, "x", "", [], [1, "a"], {}, {"a": [None]}]


def _flip(data: bytes, rng: random.Random, n: int, within: int | None = None) -> bytes:
    out = bytearray(data)
    for _ in range(n):
        i = rng.randrange(min(len(out), within or len(out)))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _mutate_json_doc(doc: Any, rng: random.Random, kind: str) -> Any:
    """A random path of ``doc`` changed: its type swapped, dropped, or a list shortened."""
    parents = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in node:
                parents.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for i in range(len(node)):
                parents.append((node, i))
                walk(node[i])

    walk(doc)
    if kind == "list_len":
        lists = [(p, k) for p, k in parents if isinstance(p[k], list) and p[k]]
        if lists:
            parent, key = rng.choice(lists)
            parent[key] = parent[key][: rng.randrange(len(parent[key]))]
        return doc
    if kind == "nan_strings":
        numbers = [(p, k) for p, k in parents if isinstance(p[k], (int, float))]
        for parent, key in rng.sample(numbers, min(len(numbers), 5)):
            parent[key] = rng.choice(["NaN", None, "1e999", float("nan"), float("inf")])
        return doc
    parent, key = rng.choice(parents)
    if kind == "drop" and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = rng.choice(JSON_VALUES)
    return doc


def _text_mutation(data: bytes, rng: random.Random, kind: str) -> bytes:
    if kind.endswith("truncate"):
        return data[: rng.randrange(len(data))]
    if kind.endswith("deep"):
        return DEEP.encode()
    if kind == "junk":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if kind == "empty":
        return b""
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "huge_int":
        return data.replace(b"[", b"[" + b"7" * 5000 + b", ", 1)
    raise KeyError(kind)


def _zarr_field(meta: dict, rng: random.Random, kind: str) -> str:
    """Change one field of a ``.zarray``; says how."""
    axis = rng.randrange(3)
    choices: dict[str, tuple[str, Any]] = {
        "shape_grow": ("shape", [n * (rng.randrange(2, 5) if i == axis else 1)
                                 for i, n in enumerate(meta["shape"])]),
        "shape_shrink": ("shape", [rng.randrange(n) if i == axis else n
                                   for i, n in enumerate(meta["shape"])]),
        "shape_huge": ("shape", [12, 4, 10**12]),
        "shape_type": ("shape", rng.choice(["12", None, 12, [12.5, 4, 5], [-1, 4, 5],
                                            [[12], 4, 5], {}])),
        "chunks_zero": ("chunks", [0 if i == axis else n for i, n in enumerate(meta["chunks"])]),
        "chunks_huge": ("chunks", [10**9, 4, 5]),
        "chunks_type": ("chunks", rng.choice(["4", None, [4.5, 4, 5], [-4, 4, 5], True])),
        "chunks_len": ("chunks", rng.choice([meta["chunks"][:2], meta["chunks"] + [1]])),
        "dtype": ("dtype", rng.choice(["<f8", ">f4", "<i2", "|u1", "|O", "garbage", "<M8[ns]",
                                       "|S4", "<c8", "|b1", 7])),
        "compressor": ("compressor", rng.choice([
            {"id": "zlib", "level": 1}, {"id": "nosuch"}, None, "blosc",
            {"id": "blosc", "cname": "nosuch", "clevel": 5, "shuffle": 1},
            {"id": "zstd", "level": 3}, {"id": "gzip", "level": 1}])),
        "fill_value": ("fill_value", rng.choice([0, "NaN", "Infinity", "-Infinity", "junk",
                                                 [1], 2**70, None, True])),
        "filters": ("filters", rng.choice([[{"id": "delta", "dtype": "<f4"}], [{"id": "nosuch"}],
                                           "junk", [{"id": "fixedscaleoffset", "offset": 0,
                                                     "scale": 10, "dtype": "<f4"}]])),
        "order": ("order", rng.choice(["F", "X", None])),
        "zarr_format": ("zarr_format", rng.choice([3, 1, "2", None])),
        "dim_separator": ("dimension_separator", rng.choice(["/", "-", 5])),
    }  # fmt: skip
    if kind in ("type_swap", "drop_field"):
        field = rng.choice(sorted(meta))
        if kind == "drop_field":
            del meta[field]
            return f"{field} dropped"
        value = rng.choice(JSON_VALUES)
    else:
        field, value = choices[kind]
    meta[field] = value
    return f"{field} = {json.dumps(value)}"


def _zarr_attr(attrs: dict, rng: random.Random, kind: str) -> str:
    field, values = {
        "attr_scale": ("scale_factor", ["x", [1, 2], 0, 1e308, None, -1, {"a": 1}]),
        "attr_fill": ("_FillValue", ["x", 1e30, [1], None, 2**40, "NaN"]),
        "attr_dims": ("_ARRAY_DIMENSIONS", [["time", "y"], ["time", "y", "x", "z"], "time",
                                            None, ["time", "time", "x"], [1, 2, 3]]),
        "attr_units": ("units", [1, None, ["K"], "x" * 100_000]),
    }[kind]  # fmt: skip
    attrs[field] = rng.choice(values)
    return f"{field} = {json.dumps(attrs[field])[:60]}"


def _set_consolidated(store: Path, key: str, doc: Any) -> None:
    meta_path = store / ".zmetadata"
    meta = json.loads(meta_path.read_text())
    meta["metadata"][key] = doc
    meta_path.write_text(json.dumps(meta, indent=4))


def mutate_zarr_meta(store: Path, rng: random.Random, kind: str) -> str:
    var = rng.choice(["t2m", "msl"])
    if kind in ("truncate", "deep", "junk"):
        name = rng.choice([f"{var}/.zarray", f"{var}/.zattrs", ".zgroup", ".zattrs", ".zmetadata"])
        if name != ".zmetadata" and rng.random() < 0.5:
            (store / ".zmetadata").unlink()  # zarr reads the file itself
            name += " (unconsolidated)"
        path = store / name.split(" ")[0]
        path.write_bytes(_text_mutation(path.read_bytes(), rng, kind))
        return f"{kind} {name}"
    if kind == "zgroup":
        doc = rng.choice([{"zarr_format": 3}, {}, [], {"zarr_format": "x"}])
        (store / ".zgroup").write_text(json.dumps(doc))
        _set_consolidated(store, ".zgroup", doc)
        return f".zgroup = {json.dumps(doc)}"
    if kind.startswith("attr_"):
        key = f"{var}/.zattrs"
        attrs = json.loads((store / key).read_text())
        how = _zarr_attr(attrs, rng, kind)
    else:
        key = f"{var}/.zarray"
        attrs = json.loads((store / key).read_text())
        how = _zarr_field(attrs, rng, kind)
    (store / key).write_text(json.dumps(attrs, indent=2))
    _set_consolidated(store, key, attrs)
    return f"{key}: {how}"


def mutate_zarr_chunk(store: Path, rng: random.Random, kind: str) -> str:
    var = rng.choice(["t2m", "msl"])
    keys = sorted(p.name for p in (store / var).iterdir() if not p.name.startswith("."))
    key = rng.choice(keys)
    path = store / var / key
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))])
    elif kind == "flip":
        path.write_bytes(_flip(data, rng, rng.randrange(1, 16)))
    elif kind == "append":
        path.write_bytes(data + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "zeros":
        path.write_bytes(bytes(len(data)))
    elif kind == "random":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(len(data))))
    elif kind == "swap":
        other = "msl" if var == "t2m" else "t2m"
        path.write_bytes((store / other / key).read_bytes())
    elif kind == "delete":
        path.unlink()
    elif kind == "dir":
        path.unlink()
        path.mkdir()
    elif kind == "bomb":  # gzip: 40 members of 64 MiB of zeros in 2.6 MB: 2.5 GiB inflated
        import gzip

        import numcodecs

        blosc = numcodecs.Blosc()
        for other in keys:
            chunk = store / var / other
            chunk.write_bytes(gzip.compress(bytes(blosc.decode(chunk.read_bytes())), 1))
        path.write_bytes(gzip.compress(bytes(64 << 20), 1) * 40)
        meta = json.loads((store / var / ".zarray").read_text())
        meta["compressor"] = {"id": "gzip", "level": 1}
        (store / var / ".zarray").write_text(json.dumps(meta))
        _set_consolidated(store, f"{var}/.zarray", meta)
    return f"{var}/{key}: {kind}"


def mutate_netcdf(path: Path, rng: random.Random, kind: str) -> str:
    data = path.read_bytes()
    if kind == "flip_header":
        n = rng.randrange(1, 8)
        path.write_bytes(_flip(data, rng, n, within=1024))
        return f"{n} bits flipped in the first KB"
    if kind == "zero_run":
        start, size = rng.randrange(1024), rng.randrange(16, 64)
        path.write_bytes(data[:start] + bytes(size) + data[start + size :])
        return f"{size} bytes zeroed at {start}"
    if kind == "truncate":
        at = rng.randrange(1024, len(data))
        path.write_bytes(data[:at])
        return f"truncated at {at} of {len(data)}"
    n = rng.randrange(1, 16)
    path.write_bytes(_flip(data, rng, n))
    return f"{n} bits flipped anywhere"


def mutate_json_file(path: Path, rng: random.Random, kind: str) -> str:
    kind = kind.removeprefix("manifest_")
    data = path.read_bytes()
    if kind in ("type_swap", "drop", "list_len", "nan_strings"):
        doc = _mutate_json_doc(json.loads(data), rng, kind)
        path.write_text(json.dumps(doc))
    else:
        path.write_bytes(_text_mutation(data, rng, kind))
    return f"{path.name}: {kind}"


def mutate_yaml(path: Path, rng: random.Random, kind: str) -> str:
    import yaml

    data = path.read_bytes()
    if kind in ("type_swap", "drop", "list_len"):
        doc = _mutate_json_doc(yaml.safe_load(data), rng, kind)
        path.write_text(yaml.safe_dump(doc))
    else:
        path.write_bytes(_text_mutation(data, rng, kind))
    return f"{path.name}: {kind}"


def _runs_code(marker: Path) -> Any:
    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return RunsCode()


def mutate_pt(static: Path, rng: random.Random, kind: str, sentinel: Path) -> str:
    import numpy as np
    import torch

    name = rng.choice(["parameter_mean.pt", "parameter_std.pt", "diff_std.pt", "flux_stats.pt"])
    path = static / name
    data = path.read_bytes()
    tensor = torch.load(path, weights_only=True)
    if kind == "flip":
        path.write_bytes(_flip(data, rng, rng.randrange(1, 8)))
    elif kind == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))])
    elif kind == "code":
        torch.save({"mean": _runs_code(sentinel / "MARKER")}, path)
    elif kind == "shape2d":
        torch.save(tensor.reshape(1, -1), path)
    elif kind == "wrong_len":
        torch.save(tensor[: max(0, len(tensor) - 1)], path)
    elif kind == "dict":
        torch.save({"mean": tensor}, path)
    elif kind == "deflate":
        import zipfile

        with zipfile.ZipFile(path) as src:
            records = [(i.filename, src.read(i)) for i in src.infolist()]
        with zipfile.ZipFile(path, "w") as dst:
            for filename, content in records:
                dst.writestr(filename, content, zipfile.ZIP_DEFLATED)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "legacy":
        torch.save(tensor, path, _use_new_zipfile_serialization=False)
    elif kind == "records":  # a record's declared size in the central directory: 2 GiB
        at = data.rfind(b"PK\x01\x02")
        size = np.uint32(2**31 - 1).tobytes()
        path.write_bytes(data[: at + 24] + size + data[at + 28 :])
    return f"{name}: {kind}"


def mutate_state(path: Path, rng: random.Random, kind: str) -> str:
    kind = kind.removeprefix("part_")
    if kind in ("flip_header", "flip", "flip_anywhere", "truncate"):
        data = path.read_bytes()
        if kind == "truncate":
            path.write_bytes(data[: rng.randrange(len(data))])
        else:
            within = 1024 if kind == "flip_header" else None
            path.write_bytes(_flip(data, rng, rng.randrange(1, 8), within))
        return f"{path.name}: {kind}"
    import netCDF4

    with netCDF4.Dataset(path, "a") as nc:
        if kind == "meta_deep":
            nc.setncattr("meta", DEEP)
        elif kind == "meta_junk":
            nc.setncattr("meta", rng.choice(["{", "[]", "null", "{}", '{"done": 5}']))
        elif kind == "meta_types":
            meta = _mutate_json_doc(json.loads(nc.getncattr("meta")), rng, "type_swap")
            nc.setncattr("meta", json.dumps(meta))
        elif kind == "checksum":
            nc.setncattr("checksum", rng.choice(["0", "x" * 64, ""]))
        elif kind == "version":
            nc.setncattr("wxstats_state_version", rng.choice([99, -5, "x", 3.5]))
    return f"{path.name}: {kind}"


def mutate_journal(out: Path, rng: random.Random, kind: str, sentinel: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    journal = out / f".wxstats-replacing-{rng.randrange(10**6)}.json"
    own = out / "s.nc"
    doc: Any
    if kind in ("deep", "truncate", "junk"):
        valid = json.dumps({"files": [[str(own), str(out / ".s.nc.1.tmp"), None]], "journals": []})
        journal.write_bytes(_text_mutation(valid.encode(), rng, kind))
        return f"journal: {kind}"
    if kind == "types":
        doc = rng.choice([{"files": 5}, {"files": [[1, 2, 3]], "journals": "x"}, [], None])
    elif kind == "outside":  # case 1: a journal naming files outside its folder
        doc = {"files": [[str(sentinel / "bashrc"), str(sentinel / "planted"), None]],
               "journals": [str(sentinel / "other")]}  # fmt: skip
    elif kind == "escape":
        doc = {"files": [["../sentinel/bashrc", "../sentinel/planted", "../sentinel/other"]],
               "journals": []}  # fmt: skip
    else:  # wxstats' own journal of an interrupted two-file write, temporary files present
        temp = out / ".s.nc.1.tmp"
        temp.write_bytes(b"not yet renamed")
        doc = {"files": [[str(own), str(temp), None],
                         [str(out / "summary.json"), str(out / ".summary.json.2.tmp"), None]],
               "journals": []}  # fmt: skip
    journal.write_text(json.dumps(doc))
    return f"journal: {kind} {json.dumps(doc)[:120]}"


def run_case(case: Case, fixtures: Fixtures, work: Path) -> dict:
    """One case in a fresh folder: mutate a copy, run the command, judge it."""
    rng = random.Random(case.seed)
    root = work / case.id
    if root.exists():
        shutil.rmtree(root)
    inp, out, sentinel = root / "in", root / "out", root / "sentinel"
    inp.mkdir(parents=True)
    sentinel.mkdir()
    for name in ("bashrc", "planted", "other"):
        (sentinel / name).write_text(f"the user's own {name}\n")
    reference_of: Path | None = None
    summary = out / "summary.json"
    family = case.family
    if family in ("zarr-meta", "zarr-chunk", "journal"):
        store = inp / "s.zarr"
        shutil.copytree(fixtures.get("zarr"), store)
        if family == "zarr-meta":
            mutation = mutate_zarr_meta(store, rng, case.kind)
        elif family == "zarr-chunk":
            mutation = mutate_zarr_chunk(store, rng, case.kind)
        else:
            mutation = mutate_journal(out, rng, case.kind, sentinel)
        argv = ["compute", str(store), "--quiet", "--output", str(out / "s.nc"),
                "--summary", str(summary)]  # fmt: skip
        reference_of = store
    elif family == "netcdf":
        path = inp / "s.nc"
        shutil.copy(fixtures.get("netcdf"), path)
        mutation = mutate_netcdf(path, rng, case.kind)
        argv = ["compute", str(path), "--quiet", "--output", str(out / "s.nc"),
                "--summary", str(summary)]  # fmt: skip
        reference_of = path
    elif family == "summary":
        path = inp / "summary.json"
        shutil.copy(fixtures.get("summary"), path)
        mutation = mutate_json_file(path, rng, case.kind)
        if case.index % 2:
            argv = ["compare", str(path), str(fixtures.get("summary"))]
        else:
            argv = ["report", str(path), "--output-dir", str(out)]
    elif family == "pt":
        static = inp / "static"
        shutil.copytree(fixtures.get("static"), static)
        mutation = mutate_pt(static, rng, case.kind, sentinel)
        if case.index % 2:
            argv = ["compare", str(static), str(fixtures.get("static"))]
        else:
            argv = ["report", str(static), "--output-dir", str(out)]
    elif family == "state":
        states = inp / "states"
        shutil.copytree(fixtures.get("states"), states)
        target = states / rng.choice(["a.wxstate", "b.wxstate"])
        mutation = mutate_state(target, rng, case.kind)
        argv = ["merge", str(states / "a.wxstate"), str(states / "b.wxstate"), "--quiet",
                "--output", str(out / "m.nc"), "--summary", str(summary)]  # fmt: skip
        reference_of = fixtures.get("zarr")
    elif family == "checkpoint":
        ck = out / "ck"
        shutil.copytree(fixtures.get("checkpoint"), ck)
        if case.kind.startswith("manifest_"):
            mutation = mutate_json_file(ck / "manifest.json", rng, case.kind)
        else:
            mutation = mutate_state(next(ck.glob("part-*")), rng, case.kind)
        argv = ["compute", str(fixtures.get("zarr")), "--quiet", "--output", str(out / "s.nc"),
                "--summary", str(summary), "--checkpoint", str(ck), "--resume"]  # fmt: skip
        reference_of = fixtures.get("zarr")
    elif family == "yaml":  # a datastore config; exit 0 is judged by its lines alone
        config = fixtures.get("meps")
        shutil.copytree(config.parent, inp / "meps")
        mutation = mutate_yaml(inp / "meps" / config.name, rng, case.kind)
        argv = ["compute", str(inp / "meps" / config.name), "--quiet", "--output-dir", str(out)]
    else:
        raise KeyError(family)
    before = _snapshot(root, out)
    code, stdout, stderr = _cli(argv)
    said = [line for line in stderr.splitlines() if line.strip()]
    record: dict[str, Any] = {
        "id": case.id,
        "mutation": mutation,
        "exit": code,
        "said": said[-1][:300] if said else "",
    }
    problems = []
    if (wrong := _judge_lines(argv[0], code, stdout, stderr)) is not None:
        problems.append(wrong)
    after = _snapshot(root, out)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        problems.append(f"touched outside the output: {changed}")
    if code == 0 and reference_of is not None and not problems:
        problems.append(_compare_numbers(summary, _xarray_numbers(reference_of)))
    problems = [p for p in problems if p is not None]
    if problems:
        record["failure"] = "; ".join(problems) + f" [stderr: {stderr.strip()[-400:]}]"
        record["failure"] += f" (its files are kept in {root})"
    else:
        shutil.rmtree(root, ignore_errors=True)
    return record


def _batch(family: str, spec: Path, log: Path) -> None:
    import warnings

    warnings.simplefilter("ignore")  # the CLI shows its own; the fixtures' are noise
    work = Path.cwd() / f"{family}-cases"
    work.mkdir(exist_ok=True)
    fixtures = Fixtures(Path(tempfile.mkdtemp(prefix=f"{family}-base-", dir=Path.cwd())))
    with open(log, "a") as results:
        for index in json.loads(spec.read_text()):
            case = Case(family, index, KINDS[family][index % len(KINDS[family])])
            results.write(json.dumps({"started": case.id}) + "\n")
            results.flush()
            try:
                record = run_case(case, fixtures, work)
            except Exception:  # noqa: BLE001 - the harness's own failure, named
                record = {"id": case.id, "failure": "harness: " + traceback.format_exc()[-1500:]}
            results.write(json.dumps(record, default=str) + "\n")
            results.flush()


def _reproduce(family: str, index: int) -> None:
    """One case, here, its folder kept: ``python tests/test_fuzz.py FAMILY INDEX``."""
    work = Path(tempfile.mkdtemp(prefix="wxstats-fuzz-"))
    results = run_family(family, [Case(family, index, KINDS[family][index % len(KINDS[family])])],
                         work)  # fmt: skip
    print(json.dumps(results, indent=1))
    print(f"inputs and outputs under {work}")


if __name__ == "__main__":
    if sys.argv[1] == "--batch":  # the sources of PYTHONPATH (run_family's: this checkout's)
        _batch(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        _reproduce(sys.argv[1], int(sys.argv[2]))
