"""The compiled kernel's machine code, kept on disk and loaded without numba.

Loading the kernel through numba costs about 0.3 s in every process (``import
numba``, its typing and lowering registries, the cache lookup), for machine code
of a few hundred kB. So numba compiles the kernel once as a C function of
pointers (:func:`wxstats.core.kernel.compiled.entry`, one per dtype of the
values; its entry renamed :data:`SYMBOL`), its object code is stored in
:func:`wxstats.core.kernel.cache.store_dir`, named by everything it was
compiled from (the kernel's sources, numba, llvmlite, Python, the CPU and
numba's settings for it), and later processes link it with llvmlite alone
(~30 ms) and call it through ctypes, which releases the GIL as numba's
``nogil`` did. The same machine code runs whoever loaded it, so the bits are
the kernel's. Where the object cannot be stored or linked here, or numba is a
release not in :data:`NUMBA_CHECKED`, numba's own compiled function is called
(from numba's cache).

Trust: a stored object is code that runs as the user, so the store is read and
written only in a folder private to the user (:mod:`wxstats.core.private_files`:
the user's or root's, no one else can write it or any folder above it), files
opened without following links and checked on their descriptor, written new
(``O_EXCL | O_NOFOLLOW``, 0600) under a random name; anything else is refused
in one warning line and not read. The header's digest catches damage, not
tampering (that is the folder's privacy); the entry called is :data:`SYMBOL`,
named by this code, and the symbols linked are read from the object itself.

Why the store is kept (issue 33 asked whether a quarter second is worth numba's
internals and an ELF reader): measured whole commands, this store against
numba's own cache (the same code with the store switched off), alternated
rounds on the 2-CPU benchmark machine, medians (load average, other sessions'
work, in brackets):

    run (ab_command.py)          wall best    wall median    CPU median   [load]
    2 GB zarr, 6 rounds          4.41 / 5.73  11.89 / 11.88  5.39 / 5.73  [7.4-7.7]
    3 GB MEPS, 6 rounds          1.51 / 1.84   1.72 / 2.32   1.63 / 1.98  [6.6-7.7]
    2 GB zarr --nproc 8, 4       21.5 / 25.9   34.7 / 36.9   21.8 / 25.1  [6.6-12.8]
    3 GB MEPS --nproc 8, 4       20.7 / 24.3   24.6 / 26.0   14.5 / 17.4  [12.8-13.5]

(seconds, store / numba's cache; an earlier series of 5 rounds before the
store was hardened gave the same picture: CPU 5.17 / 5.39, 1.44 / 1.89, 21.1 /
23.2, 13.5 / 16.7 s). The store saves 0.3-0.4 CPU-s a process: 18-24 % of a
MEPS run's CPU, 9-19 % with eight ranks, 4-6 % of a 2 GB zarr run's (whose
wall medians drowned in the machine's load). That is above the issue's 5 %
bar everywhere but the single-process zarr run, which sits at it; so the store
stays, hardened as above, its numba internals behind :data:`NUMBA_CHECKED`
(``tests/test_kernel_trust.py`` fails on a release outside it).
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
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core import private_files
from wxstats.core.kernel import record
from wxstats.core.kernel.cache import not_cached, store_dir
from wxstats.core.kernel.elf import undefined_symbols
from wxstats.core.kernel.record import KernelArgs
from wxstats.core.kernel.sources import sources_digest
from wxstats.core.untrusted import parse_json

_FUNCTIONS: dict[str, Callable[..., None]] = {}
_ENGINES: list[Any] = []  # llvmlite's linkers: the loaded code lives as long as they do
_LOCK = threading.Lock()


SYMBOL = "wxstats_kernel"
"""The name the stored object's entry is given when it is compiled here, and
the one name linked and called: from this code, never from the file."""

_FORMAT = 3
"""The stored files' format, part of their names (1 named its entry in its header; 2
took 14 pointers, 3 takes the record's pointers and sizes, :mod:`wxstats.core.kernel.record`)."""

NUMBA_CHECKED = ((0, 58), (0, 68))
"""The numba releases (major, minor; inclusive) whose internals the store uses
(the compiled library's module and target machine, the C helpers its extension
modules export) were checked with. Outside these, numba's own kernel is called
(from numba's cache): the same bits, 0.3 s more a process, until the store is
checked with the new release (``tests/test_kernel_trust.py`` says so) and this widened."""


@functools.cache
def _numba_release() -> tuple[bytes, tuple[int, ...]]:
    """numba's version file (part of every stored name) and its release (major,
    minor), read without importing numba; ImportError where it is not installed."""
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        raise ImportError("numba is not installed")
    version_file = Path(spec.origin).parent / "_version.py"
    data = (version_file if version_file.exists() else Path(spec.origin)).read_bytes()
    found = re.search(rb'"version": "(\d+)\.(\d+)', data)
    return data, (int(found[1]), int(found[2])) if found else ()


def supported_numba() -> bool:
    """Whether the installed numba is one of :data:`NUMBA_CHECKED`."""
    try:
        release = _numba_release()[1]
    except (ImportError, OSError):
        return False
    return NUMBA_CHECKED[0] <= release <= NUMBA_CHECKED[1]


def extremes_dtype(dtype: np.dtype) -> np.dtype:
    """The values' extremes are compared in float32 lanes for float32 values (half
    the vector width; widening keeps order and value), float64 otherwise."""
    return np.dtype(np.float32) if dtype == np.float32 else np.dtype(np.float64)


def scratch_sizes(lanes: int, n_c: int, chunk: int, weighted: bool) -> tuple[int, int]:
    """Sizes of the kernel's float64 and int64 scratch (its layout is in
    :func:`wxstats.core.kernel.compiled.kernel`): the machine code allocates
    nothing, so it needs none of numba's runtime."""
    return 7 * lanes + 5 * n_c + (chunk * n_c if weighted else 0), 3 * lanes


def kernel(args: KernelArgs, before_numba: Callable[[], None] | None = None) -> None:
    """:func:`wxstats.core.kernel.compiled.kernel` on the record ``args``, by its
    machine code (loaded once per dtype); ``before_numba`` runs before numba is
    imported, if it must be (to compile, or where the object cannot be linked)."""
    a = args.values
    if a.ndim != 2 or not a.flags.c_contiguous:
        raise ValueError("the kernel's values must be a C-contiguous (steps, points) array")
    record.check(args)
    n_c = args.n_c
    if args.steps_float.shape[2:] != (a.shape[0], n_c) or args.totals_int.shape[2:] != (
        args.totals_float.shape[2],
        n_c,
    ):
        raise ValueError("the kernel's output arrays do not match its values")
    lanes, n_p = args.m * n_c, args.ranges.shape[0]
    if (
        args.refs.shape != (n_p, 3, a.shape[0], lanes)
        or args.lags.shape != (n_p - 1,)
        or args.by.shape != (a.shape[0],)
        or a.shape[1] % n_c
        or args.weights.shape[0] not in (0, a.shape[1] // n_c)
    ):
        raise ValueError("the kernel's inputs do not match its values")  # it reads unchecked
    function = _FUNCTIONS.get(a.dtype.str) or _function(a.dtype, before_numba)
    n_fs, n_i = scratch_sizes(lanes, n_c, args.chunk, args.weights.shape[0] > 0)
    xs = np.empty(2 * lanes, dtype=extremes_dtype(a.dtype))
    function(args, (np.empty(n_fs), np.empty(n_i, dtype=np.int64), xs))


def _function(dtype: np.dtype, before_numba: Callable[[], None] | None) -> Callable[..., None]:
    """The kernel for ``dtype`` as a function of the record and the scratch
    :func:`kernel` passes."""
    with _LOCK:
        if dtype.str in _FUNCTIONS:
            return _FUNCTIONS[dtype.str]
        address = None
        if sys.platform.startswith("linux"):  # ELF objects; elsewhere numba's cached kernel
            address = _stored(dtype, before_numba)
        if address is not None:
            native = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(address)

            def linked(args: KernelArgs, scratch: tuple[np.ndarray, ...]) -> None:
                arrays, dims = record.c_layout(args, scratch)  # held until the call returns
                pointers = np.array([x.ctypes.data for x in arrays], dtype=np.uintp)
                native(pointers.ctypes.data, dims.ctypes.data)

            _FUNCTIONS[dtype.str] = linked
        else:
            _FUNCTIONS[dtype.str] = _numba_kernel(before_numba)
        return _FUNCTIONS[dtype.str]


def _stored(dtype: np.dtype, before_numba: Callable[[], None] | None) -> int | None:
    """The address of the stored kernel for ``dtype``, linked (compiled and stored
    first if the store lacks it); None where the store cannot be used: numba's
    kernel then (from numba's own cache where that is private). A store someone
    else can write is refused in one warning line, never read; one that cannot
    be made (a read-only home) is passed over silently."""
    if not supported_numba():
        return None
    folder = store_dir()
    try:
        fd = private_files.open_folder(folder, create=True)
    except private_files.NotPrivate as e:
        not_cached(f"its store is not private to this user ({e})")
        return None
    except OSError:
        return None  # no store here: numba's cache serves (a warning if it cannot)
    try:
        name = _name(dtype)
        try:
            blob = private_files.read(fd, name)
        except private_files.NotPrivate as e:
            not_cached(f"{folder / name} is not private to this user ({e})")
            return None
        if blob is not None:
            with contextlib.suppress(ValueError):  # damaged, or foreign: compiled again
                return _link(blob)
        blob = _compile(dtype, before_numba)
        if blob is None:
            return None
        try:
            address = _link(blob)
        except ValueError:
            return None  # not linkable here: numba's kernel
        with contextlib.suppress(OSError):  # a full or read-only store: linked all the same
            private_files.write(fd, name, blob)
        return address
    finally:
        os.close(fd)


def _numba_kernel(before_numba: Callable[[], None] | None) -> Callable[..., None]:
    """numba's compiled kernel itself (its dispatcher, from numba's cache), where no
    object can be linked: the same record and scratch."""
    compiled = _import_numba(before_numba).kernel

    def call(args: KernelArgs, scratch: tuple[np.ndarray, ...]) -> None:
        compiled(args, *scratch)

    return call


def _import_numba(before_numba: Callable[[], None] | None) -> Any:
    """:mod:`wxstats.core.kernel.compiled`, ``before_numba`` run first if this is
    the process's first import of numba."""
    if before_numba is not None and "numba" not in sys.modules:
        before_numba()
    from wxstats.core.kernel import compiled

    return compiled


def stored() -> dict[str, Any]:
    """The store's folder and the dtypes whose kernel it holds for this machine
    (``wxstats doctor``: a run that compiles every time shows here as none), and
    why it is not used where it is not private."""
    folder = store_dir()
    names = sorted(p.name for p in folder.glob("kernel-*.o")) if folder.is_dir() else []
    mine = []
    for name in names:
        with contextlib.suppress(TypeError, ImportError):
            dtype = np.dtype(name.split("-")[1])
            if _name(dtype) == name:
                mine.append(dtype.name)
    found = {"folder": str(folder), "this_machine": mine, "files": len(names)}
    with contextlib.suppress(OSError):
        why = private_files.folder_problem(folder)
        if why:
            found["refused"] = why
    return found


def _name(dtype: np.dtype) -> str:
    """The stored object's name for values of ``dtype``, for this machine."""
    return f"kernel-{dtype.str.lstrip('<>=|')}-{_key(dtype)}.o"


def _key(dtype: np.dtype) -> str:
    """A digest of everything the machine code depends on, and of the store's format."""
    import llvmlite
    import llvmlite.binding as llvm

    h = hashlib.sha256(sources_digest())
    h.update(_numba_release()[0])
    settings = [_FORMAT, llvmlite.__version__, sys.version, sys.platform, dtype.str]
    settings += [llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()]
    settings += [os.environ.get(f"NUMBA_{v}", "") for v in ("CPU_NAME", "CPU_FEATURES", "OPT")]
    h.update(json.dumps(settings).encode())
    return h.hexdigest()[:20]


def _compile(dtype: np.dtype, before_numba: Callable[[], None] | None) -> bytes | None:
    """Compile the entry with numba (the kernel from numba's own cache when it may
    use it) and return what the store keeps of it: a JSON line with the code's
    digest, then the object code, its entry renamed :data:`SYMBOL`; None where
    this numba does not lay its library out as known here (then numba's kernel
    is called)."""
    compiled = _import_numba(before_numba).entry(dtype, extremes_dtype(dtype))
    try:
        # the object code of the whole linked library (numba's AOT libraries emit theirs
        # the same way; the kernel itself comes from numba's cache when it is there)
        library = compiled._library
        module = library._final_module.clone()
        module.get_function(compiled.native_name).name = SYMBOL
        code = library._codegen._tm.emit_object(module)
    except (AttributeError, NameError, ValueError, RuntimeError):
        return None  # another numba's internals
    return json.dumps({"sha256": hashlib.sha256(code).hexdigest()}).encode() + b"\n" + code


def _link(blob: bytes) -> int:
    """Link a stored object into this process; the address of its :data:`SYMBOL`.
    ValueError when it cannot be linked here (damaged, not an object of ours, or
    a symbol it needs is missing: LLVM would abort the process rather than
    raise). What it needs is read from the object itself; nothing of the header
    but the digest is used (a check for damage, not for tampering: the folder's
    privacy is that)."""
    import llvmlite.binding as llvm

    head, newline, code = blob.partition(b"\n")
    try:
        digest = parse_json(head, "its header")["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a stored kernel: {e}") from None
    if not newline or hashlib.sha256(code).hexdigest() != digest:
        raise ValueError("a damaged stored kernel")  # LLVM might abort on a bad object
    undefined = undefined_symbols(code)
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
    address = engine.get_function_address(SYMBOL)
    if not address:
        raise ValueError(f"the stored kernel has no {SYMBOL}")
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
