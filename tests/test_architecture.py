"""The package's shape: every import points down the layers, and none goes in a circle.

The allowed order is written here once (ARCHITECTURE.md draws it):

    core  <  parallel, storage  <  sources, io  <  runtime  <  tools  <  cli

A module may import its own layer and the layers below it. ``sources`` and
``io`` are side by side and never import each other: sources know nothing of
statistics files, writers nothing of the datasets' file layouts. ``parallel``
(the distributed runner) and ``storage`` (chunked reading of zarr/HDF5, local
or fsspec) stand on core alone: ranks never need a source, and the chunk
readers never know which source points them at an array; ``io`` needs neither.
The package root (``wxstats/__init__.py``, ``__main__.py``) is the public face
and may import anything. Imports inside functions count as much as those at the top.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "wxstats"

ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "parallel": {"core", "parallel"},
    "storage": {"core", "storage"},
    "sources": {"core", "storage", "sources"},
    "io": {"core", "io"},
    "runtime": {"core", "parallel", "storage", "sources", "io", "runtime"},
    "tools": {"core", "parallel", "storage", "sources", "io", "runtime", "tools"},
    "cli": {"core", "parallel", "storage", "sources", "io", "runtime", "tools", "cli"},
}
ROOT_MODULES = {"wxstats", "wxstats.__main__"}
MAX_LINES = 450
"""The most lines a module may have (a failure above; no module is exempt)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str) -> set[str]:
    """The wxstats modules ``path`` imports (resolved to modules, not names)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "wxstats")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "wxstats":
                continue
            # "from wxstats.x import y": y may be a module of its own
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                found.add(candidate if candidate in MODULES else module)
    return {m for m in found if m in MODULES or m == "wxstats"}


MODULES = _modules()
GRAPH = {name: _imports(path, name) for name, path in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_the_layers_cover_every_module():
    strays = [m for m in MODULES if _layer(m) is None and m not in ROOT_MODULES]
    assert not strays, f"modules outside the layers {sorted(ALLOWED)}: {strays}"


def test_no_import_points_up_or_sideways():
    wrong = []
    for module, imported in GRAPH.items():
        layer = _layer(module)
        if layer is None:
            continue
        for target in imported:
            if target == "wxstats":
                continue  # the version string
            if _layer(target) not in ALLOWED[layer]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


BENCHMARKS = PACKAGE.parents[1] / "benchmarks"


def _benchmark_graph() -> dict[str, set[str]]:
    """The benchmark scripts' imports of each other (``from run import ...``: they
    run from their own folder), named ``benchmarks.NAME``, and of the package."""
    scripts = {p.stem: p for p in sorted(BENCHMARKS.glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for stem, path in scripts.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                if name in scripts:
                    found.add(f"benchmarks.{name}")
                elif name in MODULES:
                    found.add(name)
        graph[f"benchmarks.{stem}"] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle found by a depth-first walk (``a -> b -> a``)."""
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target == module or target == "wxstats":
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def test_no_import_cycles():
    """None in the package, nor among the benchmark scripts (``run.py`` and
    ``bench_zarr.py`` imported each other until their shared helpers moved to
    ``benchmarks/children.py``)."""
    benchmarks = _benchmark_graph()
    assert "benchmarks.run" in benchmarks, "no benchmark scripts found"
    cycles = _cycles({**GRAPH, **benchmarks})
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_finder_sees_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == ["a -> b -> c -> a"]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _reached(module: str) -> set[str]:
    """Every wxstats module ``module`` imports, directly or through others (the
    package root only for its version string)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in GRAPH.get(todo.pop(), ()):
            if target not in seen and target != "wxstats":
                seen.add(target)
                todo.append(target)
    return seen


def test_the_distributed_runner_needs_no_source_and_no_format():
    """``parallel/`` runs ranks for any computation: nothing it imports, even
    through other modules, reads a dataset or writes a statistics file."""
    wrong = [
        f"{module} -> {target}"
        for module in GRAPH
        if _layer(module) == "parallel"
        for target in sorted(_reached(module))
        if _layer(target) in ("sources", "io")
    ]
    assert any(_layer(m) == "parallel" for m in GRAPH), "no parallel/ modules found"
    assert not wrong, "parallel/ reaches sources or io:\n" + "\n".join(wrong)


def _imports_argparse(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
    return False


def test_nothing_below_the_cli_sees_argparse():
    users = [m for m, p in MODULES.items() if _imports_argparse(p) and _layer(m) != "cli"]
    assert not users, f"argparse outside the CLI: {users}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_say_what_they_own_and_stay_short(module):
    """Every module opens with a docstring and has at most ``MAX_LINES`` lines: a
    newcomer reads a module whole, and a longer one has always held two concerns
    (``runtime/targets.py`` held the table and the pre-flight)."""
    path = MODULES[module]
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines (>{MAX_LINES})"
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring, f"{path.relative_to(PACKAGE)} opens without a docstring"


def test_the_checker_sees_a_planted_violation(tmp_path):
    """The import reader resolves relative and function-level imports (so the
    tests above can fail)."""
    bad = tmp_path / "planted.py"
    bad.write_text(
        '"""x"""\n\n\ndef f():\n    from ..cli import main\n    from wxstats.runtime import run\n'
    )
    found = _imports(bad, "wxstats.core.planted")
    assert found == {"wxstats.cli", "wxstats.runtime.run"}
    assert _layer("wxstats.cli") not in ALLOWED["core"]


SOURCE_FACE = {"wxstats.sources.base", "wxstats.sources.kinds", "wxstats.sources.factory"}
"""What runtime and tools may import of ``sources/``: the protocol, the kinds
table and the factory; a concrete source is the factory's to choose."""


def _past_the_source_face(graph: dict[str, set[str]]) -> list[str]:
    """Imports by runtime/ and tools/ modules of a ``sources`` module that is not
    the protocol, the kinds table or the factory (``wxstats.sources`` itself, a
    package whose ``__init__`` could re-export anything, counts as concrete)."""
    return sorted(
        f"{module} -> {target}"
        for module, imported in graph.items()
        if _layer(module) in ("runtime", "tools")
        for target in imported
        if _layer(target) == "sources" and target not in SOURCE_FACE
    )


def test_runtime_and_tools_know_sources_only_by_protocol_and_factory():
    """Runtime and tools learn what a kind of data supports from its capabilities
    and use the protocols of :mod:`wxstats.sources.base`; which source a dataset
    needs, and the facts of a kind they need (an output's name stem, how an
    array's change is worded), come from :mod:`wxstats.sources.factory`. Pure
    time and naming helpers both sides share live in core."""
    assert set(MODULES) >= SOURCE_FACE, f"missing: {SOURCE_FACE - set(MODULES)}"
    wrong = _past_the_source_face(GRAPH)
    assert not wrong, "concrete sources imported by runtime/tools:\n" + "\n".join(wrong)


def test_the_knowledge_checker_sees_planted_imports(tmp_path):
    """A concrete source imported at the top, inside a function, relatively or as a
    package is found (so the test above can fail); the protocol and factory are not."""
    bad = tmp_path / "planted.py"
    bad.write_text(
        '"""x"""\n\nfrom wxstats.sources.base import Source\n'
        "from wxstats.sources import factory\n"
        "from wxstats.sources.xarray.timeaxis import group_index\n\n\n"
        "def f():\n    from ..sources.meps import MepsSource\n"
        "    from wxstats.sources import anemoi\n    import wxstats.sources.xarray\n"
    )
    planted = "wxstats.runtime.planted"
    graph = {planted: _imports(bad, planted)}
    assert _past_the_source_face(graph) == [
        f"{planted} -> wxstats.sources.anemoi",
        f"{planted} -> wxstats.sources.meps",
        f"{planted} -> wxstats.sources.xarray",
        f"{planted} -> wxstats.sources.xarray.timeaxis",
    ]
    assert _past_the_source_face({"wxstats.sources.factory": graph[planted]}) == []


# -- what each layer knows: core is pure computation, the engine only orchestrates --

PROCESS_MODULES = {"gc", "ctypes", "resource", "signal"}
"""Modules whose use tunes or steers the whole process (the collector, glibc's
mallopt, limits, signal handlers): the command's business (``cli/process.py``)."""
CALLS_NATIVE_CODE = {"wxstats.core.kernel.stored": {"ctypes"}}
"""Where core may use ctypes: to call the kernel's machine code and find the C
symbols it needs (the process-setting calls below stay forbidden there too)."""
PROCESS_CALLS = {"freeze", "set_threshold", "mallopt", "putenv", "unsetenv"}
SHARED_MAPPINGS = {("sys", "modules"), ("os", "environ")}
"""Process-wide mappings core may read but never change."""
MUTATORS = {"setdefault", "pop", "popitem", "update", "clear", "__setitem__", "__delitem__"}
CORE_NUMERICS = {"Block", "restrict", "group_runs", "cell_reference", "add_steps", "add_block"}
"""Names whose home is core (the numbers of a block): the engine imports them."""


def _shared_mapping(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and (node.value.id, node.attr) in SHARED_MAPPINGS
    )


def _process_settings(tree: ast.AST, allowed: set[str] | None = None) -> list[str]:
    """What in ``tree`` imports a process-tuning module (but those ``allowed``),
    calls a process setting or changes ``sys.modules``/``os.environ`` (by line)."""
    banned = PROCESS_MODULES - (allowed or set())
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in banned]  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if (node.module or "").split(".")[0] in banned:
                found.append(f"{line}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in PROCESS_CALLS:
                found.append(f"{line}: {node.func.attr}()")
            elif node.func.attr in MUTATORS and _shared_mapping(node.func.value):
                found.append(f"{line}: {ast.unparse(node.func)}()")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _shared_mapping(target.value):
                    found.append(f"{line}: {ast.unparse(target)} changed")
    return found


def test_core_sets_nothing_process_wide_and_the_engine_leaves_numbers_to_core():
    """Core is pure computation (its package docstring says so): no module of it
    pauses the collector, calls mallopt, handles signals or edits ``sys.modules``
    or ``os.environ``; such settings are the command's, offered to core as hooks
    (``choice.BEFORE_NUMBA``). ``runtime/engine.py`` orchestrates: it
    imports numpy for type hints only and defines none of core's numerics."""
    wrong = []
    for module, path in MODULES.items():
        if _layer(module) == "core":
            tree = ast.parse(path.read_text(), str(path))
            allowed = CALLS_NATIVE_CODE.get(module)
            wrong += [f"{module}:{hit}" for hit in _process_settings(tree, allowed)]
    assert not wrong, "process settings in core:\n" + "\n".join(wrong)

    engine = ast.parse(MODULES["wxstats.runtime.engine"].read_text())
    typing_only = {
        id(n)
        for block in ast.walk(engine)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for n in ast.walk(block)
    }
    numpy_at_run_time = [
        node.lineno
        for node in ast.walk(engine)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and id(node) not in typing_only
        and any(a.name.split(".")[0] == "numpy" for a in node.names)
        | ((getattr(node, "module", None) or "").split(".")[0] == "numpy")
    ]
    assert not numpy_at_run_time, f"runtime/engine.py imports numpy at lines {numpy_at_run_time}"
    defined = {
        n.name
        for n in ast.walk(engine)
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
    }
    assert not defined & CORE_NUMERICS, f"core's numerics in the engine: {defined & CORE_NUMERICS}"


def test_the_process_checker_sees_planted_settings():
    """The reader of process settings finds each kind (so the test above can fail)."""
    planted = ast.parse(
        "import gc\nimport ctypes.util\nimport sys, os\n"
        "def f():\n    from gc import freeze\n    gc.freeze()\n    lib.mallopt(1, 2)\n"
        "    sys.modules['x'] = None\n    del sys.modules['x']\n"
        "    sys.modules.setdefault('dask', None)\n    os.environ['A'] = '1'\n"
        "    ok = 'x' in sys.modules and sys.modules.get('y') and os.environ.get('Z')\n"
    )
    found = _process_settings(planted)
    assert sorted(int(hit.split(":")[0]) for hit in found) == [1, 2, 5, 6, 7, 8, 9, 10, 11]


_KIND = re.compile(r"(^|_)kind$")
"""A field naming a kind of data under any name: ``kind``, ``source_kind``, ``data_kind``."""


def _kind_tests(path: Path) -> list[str]:
    """Where ``path`` branches on a kind of data's label or reaches past the
    source protocol: a comparison (``==``, ``!=``, ``in``, ``is``) of an
    ``X.kind`` (or ``X.source_kind``, any field ending in ``kind``) that is not a
    dtype's, or of an ``X["kind"]`` (``X["source_kind"]``); a ``getattr(source``."""
    tree = ast.parse(path.read_text(), str(path))
    name = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                of_dtype = "dtype" in ast.unparse(side)
                attr = isinstance(side, ast.Attribute) and _KIND.search(side.attr) and not of_dtype
                key = isinstance(side, ast.Subscript) and _KIND.search(
                    ast.unparse(side.slice).strip("'\"")
                )
                if attr or key:
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and "source" in ast.unparse(node.args[0])
        ):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_sources_know_their_kinds():
    """Runtime and tools ask a source's capabilities and use its protocol
    (:mod:`wxstats.sources.base`); only ``sources/`` maps a kind's label to
    what it supports (the label stays for messages and the statistics file)."""
    found = [
        hit
        for module, path in MODULES.items()
        if _layer(module) != "sources"
        for hit in _kind_tests(path)
    ]
    assert not found, "kind tests or getattr on a source outside sources/:\n" + "\n".join(found)


def test_the_kind_checker_sees_planted_tests(tmp_path):
    """The checker finds each way of testing a kind (so the test above can fail),
    and lets a dtype's kind be."""
    bad = tmp_path / "planted.py"
    bad.write_text(
        '"""x"""\n\n\ndef f(source, state, a):\n'
        '    if source.kind == "anemoi":\n        pass\n'
        '    if "xarray" != self.source.kind:\n        pass\n'
        '    if state.identity["kind"] in ("npyfilesmeps",):\n        pass\n'
        '    if getattr(source, "is_mdp", False):\n        pass\n'
        '    if a.dtype.kind == "f" or np.dtype(a).kind in "iu":\n        pass\n'
        '    if stats.source_kind != "xarray":\n        pass\n'
        '    if attrs["source_kind"] == "anemoi" or "meps" == a.data_kind:\n        pass\n'
        "    if a.kindness == 1 or a.kinds == 2:\n        pass\n"
    )
    found = _kind_tests(bad)
    assert [hit.split(":")[1] for hit in found] == ["5", "7", "9", "11", "15", "17", "17"], found


DECOMPRESSION_HOME = "wxstats.storage.decompress"
"""The one module that decompresses bytes someone else wrote: every decoder there
is bounded by the chunk's declared size (a zlib bomb inflated 1.5 MiB to 1.5 GiB)."""
DECOMPRESSING_NAMES = {"decompress", "decompressobj", "decompress_into"}
"""Functions (and methods) that decompress: ``zlib.decompress``, ``gzip.decompress``,
``isal_zlib.decompress``, a codec's or numcodecs module's ``decompress``..."""
DECOMPRESSOR_CLASS = "Decompressor"
"""``BZ2Decompressor``, ``LZMADecompressor``, ``IgzipDecompressor``, ``ZstdDecompressor``."""
CODEC_WORDS = ("codec", "compressor", "numcodecs", "zstd", "blosc", "lz4", "gzip", "zlib")
"""A ``.decode(`` on a receiver naming one of these is a codec's (a ``bytes.decode()``
of text is not)."""
INTRA_JOB_INFLATES = {"wxstats.parallel.job", "wxstats.runtime.resumable"}
"""Where rank 0's own bytes (a run's identity, a checkpoint's coverage, compressed
by rank 0 of the same job and sent over the job's store) are inflated: no file
someone else wrote; ``parallel`` may not import ``storage``."""


def _decompressions(path: Path) -> list[str]:
    """Where ``path`` decompresses (by line): a decompressing function or method, a
    decompressor class, an import of either, or a codec's ``.decode``, called or
    handed on (``ChunkCodec(compressor.decode)``)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom):
            found += [f"{line}: from {node.module} import {a.name}" for a in node.names
                      if a.name in DECOMPRESSING_NAMES or DECOMPRESSOR_CLASS in a.name]  # fmt: skip
        elif isinstance(node, (ast.Attribute, ast.Name)):  # called, or handed on to be
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            receiver = ast.unparse(node.value).lower() if isinstance(node, ast.Attribute) else ""
            codec = name == "decode" and any(word in receiver for word in CODEC_WORDS)
            if name in DECOMPRESSING_NAMES or DECOMPRESSOR_CLASS in name or codec:
                found.append(f"{line}: {ast.unparse(node)}")
    return found


def test_only_the_bounded_home_decompresses():
    """Chunk objects are someone else's bytes: every decompression goes through
    :mod:`wxstats.storage.decompress`, bounded by the declared size (issue 33)."""
    found = [
        f"{module}:{hit}"
        for module, path in MODULES.items()
        if module != DECOMPRESSION_HOME and module not in INTRA_JOB_INFLATES
        for hit in _decompressions(path)
    ]
    assert not found, "decompression outside storage/decompress.py:\n" + "\n".join(found)


def test_the_decompression_checker_sees_planted_calls(tmp_path):
    """The checker finds each way of decompressing (so the test above can fail),
    and lets a text's ``.decode()`` and the bounded decoders' calls be."""
    bad = tmp_path / "planted.py"
    bad.write_text(
        '"""x"""\nfrom isal.isal_zlib import decompress as inflate\n\n\ndef f(arr, data, codec):\n'
        "    zlib.decompress(data)\n    zlib.decompressobj().decompress(data, 10)\n"
        "    arr.metadata.compressor.decode(data)\n    numcodecs.Zstd().decode(data)\n"
        "    lzma.LZMADecompressor()\n    codec.decompress(data)\n"
        '    text = data.decode("ascii")\n    codec.bounded_decode(data, 10)\n'
        "    return ChunkCodec(meta.compressor.decode, None)\n"
    )
    found = _decompressions(bad)
    assert sorted({int(hit.split(":")[0]) for hit in found}) == [2, 6, 7, 8, 9, 10, 11, 14], found


# -- bytes others may have written go through the guarded readers ------------------

UNTRUSTED_READERS = "wxstats.core.untrusted"
"""The one module that may call the readers below (files others may write): JSON with
size and depth limits, YAML by ``safe_load`` in one line, ``torch.load(weights_only=True)``,
``np.load(allow_pickle=False)``."""
UNGUARDED_CALLS = {
    ("json", "load"),
    ("json", "loads"),
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("torch", "load"),
    ("np", "load"),
    ("numpy", "load"),
    ("yaml", "load"),
    ("yaml", "safe_load"),
    ("yaml", "full_load"),
    ("yaml", "unsafe_load"),
    ("yaml", "load_all"),
    ("yaml", "safe_load_all"),
    # decompression (zlib/codec decode bounded by the declared chunk size): its pairs
    # and their own allow-list go here, beside these
}
"""(module, function) pairs that parse bytes and must not see a file's bytes
unguarded; an alias (``import json as j``) or ``from json import loads`` counts."""
RESTRICTED_UNPICKLERS = {
    # find_class admits only a tensor's rebuild, its storage classes and OrderedDict (what
    # torch.load(weights_only=True) admits for a 1-D tensor); anything else is refused
    ("wxstats.io.formats.ptfile", "pickle.Unpickler"),
}
"""Subclasses of ``pickle.Unpickler`` that read a file's pickle with a closed list
of what it may name: reviewed, named here."""
OWN_ROUND_TRIPS = {
    # json.loads(json.dumps(x)) of our own objects in memory, never a file's bytes: allowed
    # only in these modules and only with a json.dumps(...) call as the argument
    ("wxstats.runtime.identity", "json.loads"),
    ("wxstats.runtime.checkpoint", "json.loads"),
}


def _unguarded_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls in ``tree`` of an ``UNGUARDED_CALLS`` function (by line, as
    ``module.function``), through any import alias; a ``json.loads(json.dumps(...))``
    round trip is named ``json.loads`` of ``json.dumps``."""
    names: dict[str, str] = {}  # a local name -> the module it is
    functions: dict[str, str] = {}  # a local name -> "module.function"
    modules = {m for m, _ in UNGUARDED_CALLS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    names[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            for a in node.names:
                if (node.module, a.name) in UNGUARDED_CALLS:
                    functions[a.asname or a.name] = f"{node.module}.{a.name}"
    canonical = {"numpy": "np"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):  # class X(pickle.Unpickler): a reader of its own
            for base in node.bases:
                if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
                    module = names.get(base.value.id)
                    if module is not None and (module, base.attr) in UNGUARDED_CALLS:
                        found.append((node.lineno, f"{module}.{base.attr}"))
                elif isinstance(base, ast.Name) and base.id in functions:
                    found.append((node.lineno, functions[base.id]))
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            module = names.get(f.value.id, f.value.id if f.value.id in modules else None)
            if module is not None and (module, f.attr) in UNGUARDED_CALLS:
                call = f"{canonical.get(module, module)}.{f.attr}"
                dumped = node.args and ast.unparse(node.args[0]).startswith(f"{f.value.id}.dumps(")
                found.append((node.lineno, f"{call} of json.dumps" if dumped else call))
        elif isinstance(f, ast.Name) and f.id in functions:
            found.append((node.lineno, functions[f.id]))
    return found


def test_untrusted_bytes_are_read_only_through_the_guarded_readers():
    """No module but :mod:`wxstats.core.untrusted` calls ``json.load(s)``,
    ``pickle.load(s)``, ``torch.load`` or ``np.load``: a summary, a manifest, a
    journal, a ``.pt`` or a ``.npy`` someone else wrote is read with its size and
    depth limits, without running code, and refused in one line. A JSON round
    trip of our own objects in memory is named in ``OWN_ROUND_TRIPS``."""
    assert UNTRUSTED_READERS in MODULES
    wrong = []
    for module, path in MODULES.items():
        if module == UNTRUSTED_READERS:
            continue
        for line, call in _unguarded_calls(ast.parse(path.read_text(), str(path))):
            round_trip = call.endswith(" of json.dumps") and (
                (module, call.removesuffix(" of json.dumps")) in OWN_ROUND_TRIPS
            )
            if not round_trip and (module, call) not in RESTRICTED_UNPICKLERS:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: {call}")
    assert not wrong, "readers of untrusted bytes outside core/untrusted.py:\n" + "\n".join(wrong)


def test_the_reader_checker_sees_planted_calls():
    """Each way of calling an unguarded reader is found (so the test above can fail)."""
    planted = ast.parse(
        "import json\nimport numpy as np\nimport pickle as p\nfrom json import loads as L\n"
        "import torch\n"
        "def f(x):\n    json.loads(x)\n    np.load(x)\n    p.loads(x)\n    L(x)\n"
        "    torch.load(x, weights_only=True)\n    json.dumps(x)\n    np.save(x, x)\n"
        "    json.loads(json.dumps(x))\n"
        "class U(p.Unpickler):\n    pass\n"
    )
    assert sorted(_unguarded_calls(planted)) == [
        (7, "json.loads"),
        (8, "np.load"),
        (9, "pickle.loads"),
        (10, "json.loads"),
        (11, "torch.load"),
        (14, "json.loads of json.dumps"),
        (15, "pickle.Unpickler"),
    ]
