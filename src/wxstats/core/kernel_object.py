"""The compiled kernel's machine code, kept on disk and loaded without numba.

Loading the kernel through numba costs about 0.3 s in every process (``import
numba``, its typing and lowering registries, the cache lookup), for machine code
of a few hundred kB. So numba compiles the kernel once as a C function of
pointers (:func:`wxstats.core._kernels_numba.entry`, one per dtype of the
values), its object code is stored in :func:`cache_dir`, named by everything it
was compiled from (the kernel's sources, numba, llvmlite, Python, the CPU and
numba's settings for it), and later processes link it with llvmlite alone
(~30 ms) and call it through ctypes, which releases the GIL as numba's
``nogil`` did. The same machine code runs whoever loaded it, so the bits are
the kernel's. Where the object cannot be stored or linked here, numba's own
compiled function is called.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.kernel_sources import sources_digest
from wxstats.core.untrusted import parse_json

_N_ARGS = 14
_FUNCTIONS: dict[str, Callable[..., None]] = {}
_ENGINES: list[Any] = []  # llvmlite's linkers: the loaded code lives as long as they do
_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Where the objects are kept: ``WXSTATS_KERNEL_CACHE`` if set; else beside
    numba's own cache when ``NUMBA_CACHE_DIR`` is set (a user who moved numba's
    cache moved this one too); else the user's cache folder (``$XDG_CACHE_HOME``
    or ``~/.cache``). A folder shared by nodes of other CPUs is fine: the CPU is in
    each file's name."""
    if os.environ.get("WXSTATS_KERNEL_CACHE"):
        return Path(os.environ["WXSTATS_KERNEL_CACHE"])
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]) / "wxstats-kernels"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "wxstats" / "kernels"


def extremes_dtype(dtype: np.dtype) -> np.dtype:
    """The values' extremes are compared in float32 lanes for float32 values (half
    the vector width; widening keeps order and value), float64 otherwise."""
    return np.dtype(np.float32) if dtype == np.float32 else np.dtype(np.float64)


def scratch_sizes(lanes: int, n_c: int, chunk: int, weighted: bool) -> tuple[int, int]:
    """Sizes of the kernel's float64 and int64 scratch (its layout is in
    :func:`wxstats.core._kernels_numba.kernel`): the machine code allocates
    nothing, so it needs none of numba's runtime."""
    return 5 * lanes + 3 * n_c + (chunk * n_c if weighted else 0), 3 * lanes


def kernel(a, n_c, m, chunk, lags, ranges, refs, w, by, steps_float, steps_int, totals_float,
           totals_int, before_numba: Callable[[], None] | None = None) -> None:  # fmt: skip
    """:func:`wxstats.core._kernels_numba.kernel` on these arrays, by its machine
    code (loaded once per dtype); ``before_numba`` runs before numba is imported,
    if it must be (to compile, or where the object cannot be linked)."""
    function = _FUNCTIONS.get(a.dtype.str) or _function(a.dtype, before_numba)
    lanes = m * n_c
    n_fs, n_i = scratch_sizes(lanes, n_c, chunk, w.shape[0] > 0)
    fs, ints = np.empty(n_fs), np.empty(n_i, dtype=np.int64)
    xs = np.empty(2 * lanes, dtype=extremes_dtype(a.dtype))
    sizes = (a.shape[0], a.shape[1], n_c, m, chunk, lags.shape[0], ranges.shape[0], lanes,
             w.shape[0], steps_float.shape[1], steps_int.shape[1], totals_float.shape[2],
             totals_float.shape[1], totals_int.shape[1], n_fs, n_i)  # fmt: skip
    dims = np.array(sizes, dtype=np.int64)
    arrays = (a, dims, lags, ranges, refs, w, by, steps_float, steps_int, totals_float,
              totals_int, fs, ints, xs)  # fmt: skip
    for x, kind in zip(arrays[1:-1], "iiiffifififi", strict=True):
        want = np.int64 if kind == "i" else np.float64
        if x.dtype != want or not x.flags.c_contiguous:
            raise ValueError(f"kernel argument of {x.dtype}, {x.shape}: not C-contiguous {want}")
    if not a.flags.c_contiguous or a.ndim != 2:
        raise ValueError("the kernel's values must be a C-contiguous (steps, points) array")
    if steps_float.shape[2:] != (a.shape[0], n_c) or totals_int.shape[2:] != (
        totals_float.shape[2],
        n_c,
    ):
        raise ValueError("the kernel's output arrays do not match its values")
    function(*arrays)


def _function(dtype: np.dtype, before_numba: Callable[[], None] | None) -> Callable[..., None]:
    """The kernel for ``dtype`` as a function of the 14 arrays :func:`kernel` passes."""
    with _LOCK:
        if dtype.str in _FUNCTIONS:
            return _FUNCTIONS[dtype.str]
        address = None
        if sys.platform.startswith("linux"):  # ELF objects; elsewhere numba's cached kernel
            path = _path(dtype)
            with contextlib.suppress(OSError, ValueError):  # not stored yet, or foreign
                address = _link(path.read_bytes())
            if address is None:
                address = _compile_and_store(dtype, path, before_numba)
        if address is not None:
            native = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * _N_ARGS))(address)
            _FUNCTIONS[dtype.str] = lambda *arrays: native(*(x.ctypes.data for x in arrays))
        else:
            _FUNCTIONS[dtype.str] = _numba_kernel(before_numba)
        return _FUNCTIONS[dtype.str]


def _numba_kernel(before_numba: Callable[[], None] | None) -> Callable[..., None]:
    """numba's compiled kernel itself (its dispatcher, from numba's cache), where no
    object can be linked: the same arrays, the sizes it needs taken from ``dims``."""
    compiled = _import_numba(before_numba).kernel

    def call(a, dims, lags, ranges, refs, w, by, sf, si, tf, ti, fs, ints, xs):  # fmt: skip
        compiled(a, dims[2], dims[3], dims[4], lags, ranges, refs, w, by, sf, si, tf, ti, fs,
                 ints, xs)  # fmt: skip

    return call


def _import_numba(before_numba: Callable[[], None] | None) -> Any:
    """:mod:`wxstats.core._kernels_numba`, ``before_numba`` run first if this is
    the process's first import of numba."""
    if before_numba is not None and "numba" not in sys.modules:
        before_numba()
    from wxstats.core import _kernels_numba

    return _kernels_numba


def stored() -> dict[str, Any]:
    """The store's folder and the dtypes whose kernel it holds for this machine
    (``wxstats doctor``: a run that compiles every time shows here as none)."""
    folder = cache_dir()
    names = sorted(p.name for p in folder.glob("kernel-*.o")) if folder.is_dir() else []
    mine = []
    for name in names:
        with contextlib.suppress(TypeError, ImportError):
            dtype = np.dtype(name.split("-")[1])
            if _path(dtype).name == name:
                mine.append(dtype.name)
    return {"folder": str(folder), "this_machine": mine, "files": len(names)}


def _path(dtype: np.dtype) -> Path:
    """Where the object for values of ``dtype`` is stored, for this machine."""
    return cache_dir() / f"kernel-{dtype.str.lstrip('<>=|')}-{_key(dtype)}.o"


def _key(dtype: np.dtype) -> str:
    """A digest of everything the machine code depends on."""
    import llvmlite
    import llvmlite.binding as llvm

    h = hashlib.sha256(sources_digest())
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        raise ImportError("numba is not installed")
    numba_dir = Path(spec.origin).parent
    version_file = numba_dir / "_version.py"
    h.update((version_file if version_file.exists() else Path(spec.origin)).read_bytes())
    settings = [llvmlite.__version__, sys.version, sys.platform, dtype.str]
    settings += [llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()]
    settings += [os.environ.get(f"NUMBA_{v}", "") for v in ("CPU_NAME", "CPU_FEATURES", "OPT")]
    h.update(json.dumps(settings).encode())
    return h.hexdigest()[:20]


def _compile_and_store(
    dtype: np.dtype, path: Path, before_numba: Callable[[], None] | None
) -> int | None:
    """Compile the entry with numba (the kernel from numba's own cache when it has
    it), store its object code for the next processes and return the address to
    call; None where the object cannot be linked here (numba's kernel is used)."""
    compiled = _import_numba(before_numba).entry(dtype, extremes_dtype(dtype))
    try:
        # the object code of the whole linked library (numba's AOT libraries emit theirs
        # the same way; the kernel itself comes from numba's cache when it is there)
        library = compiled._library
        code = library._codegen._tm.emit_object(library._final_module)
        header = {
            "symbol": compiled.native_name,
            "undefined": _undefined_symbols(code),
            "sha256": hashlib.sha256(code).hexdigest(),
        }
        blob = json.dumps(header).encode() + b"\n" + code
        address = _link(blob)
    except (AttributeError, ValueError):
        return None  # another numba, or not linkable here
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(blob)
        os.replace(partial, path)  # whole or not at all, whoever else writes it
    except OSError:  # a read-only cache: this process has the code all the same
        with contextlib.suppress(OSError):
            partial.unlink()
    return address


def _link(blob: bytes) -> int:
    """Link a stored object into this process; its entry's address. ValueError when
    it cannot be linked here (not an object of ours, or a symbol it needs is
    missing: LLVM would abort the process rather than raise)."""
    import llvmlite.binding as llvm

    head, newline, code = blob.partition(b"\n")
    try:
        header = parse_json(head, "its header")
        symbol, undefined, digest = header["symbol"], header["undefined"], header["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a stored kernel: {e}") from None
    if not newline or hashlib.sha256(code).hexdigest() != digest:
        raise ValueError("a damaged stored kernel")  # LLVM might abort on a bad object
    _register_numba_helpers()
    process = ctypes.CDLL(None)  # the C library and Python's own C API, by dlsym
    for name in undefined:
        if not llvm.address_of_symbol(name) and hasattr(process, name):
            llvm.add_symbol(name, ctypes.cast(getattr(process, name), ctypes.c_void_p).value)
    missing = [s for s in undefined if not llvm.address_of_symbol(s)]
    if missing:
        raise ValueError(f"cannot link the stored kernel: {', '.join(missing)} not found")
    machine = llvm.Target.from_default_triple().create_target_machine(jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
    engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    address = engine.get_function_address(symbol)
    if not address:
        raise ValueError(f"the stored kernel has no {symbol}")
    _ENGINES.append(engine)
    return address


_HELPERS = (("_helperlib", "numba_"), ("_dynfunc", "numba_"), ("core.runtime._nrt_python", "NRT_"))


@functools.cache
def _register_numba_helpers() -> None:
    """Set up LLVM once per process and give it the addresses of the C helpers
    numba's code calls on its error paths (raising, the GIL) and for reference
    counts, under the names numba gives them: from numba's extension modules,
    loaded alone when numba is not imported (ms)."""
    import builtins

    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()

    llvm.add_symbol("_Py_NoneStruct", id(None))
    for obj in vars(builtins).values():
        if isinstance(obj, type) and issubclass(obj, BaseException):
            llvm.add_symbol(f"PyExc_{obj.__name__}", id(obj))
    for name, prefix in _HELPERS:
        module = _extension(name)
        for py_name, address in module.c_helpers.items():
            c_name = py_name if prefix == "NRT_" and py_name.startswith("_") else prefix + py_name
            llvm.add_symbol(c_name, address)


def _extension(name: str) -> Any:
    """numba's C extension ``numba.<name>``, without importing numba itself."""
    full = f"numba.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("numba is not installed")
    folder = Path(spec.submodule_search_locations[0], *name.split(".")[:-1])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / (name.split(".")[-1] + suffix)
        if path.exists():
            found = importlib.util.spec_from_file_location(full, path)
            if found is None or found.loader is None:
                break
            module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
            return module
    raise ValueError(f"numba's {full} extension not found")


def _undefined_symbols(code: bytes) -> list[str]:
    """The symbols an ELF object file needs from elsewhere (its symbol table's
    undefined entries); ValueError for anything else (the object is then not kept)."""
    if code[:4] != b"\x7fELF" or code[4] != 2 or code[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF object")
    (shoff,) = struct.unpack_from("<Q", code, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", code, 0x3A)

    def section(i: int) -> tuple[int, int, int, int, int]:
        _n, kind, _f, _a, offset, size, link, _i, _al, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", code, shoff + i * shentsize
        )
        return kind, offset, size, link, entsize

    names = []
    for i in range(shnum):
        kind, offset, size, link, entsize = section(i)
        if kind != 2:  # SHT_SYMTAB
            continue
        _k, str_offset, _s, _l, _e = section(link)
        for s in range(offset, offset + size, entsize):
            name, _info, _other, shndx = struct.unpack_from("<IBBH", code, s)
            if shndx == 0 and name:
                end = code.index(b"\0", str_offset + name)
                names.append(code[str_offset + name : end].decode())
    return names
