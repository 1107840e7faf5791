"""The symbols an ELF object file needs from elsewhere, read without binutils:
what :mod:`wxstats.core.kernel.stored` must find in this process before LLVM
links a stored kernel (LLVM aborts the process on a missing symbol rather than
raise). Malformed or truncated bytes are a ValueError, never another error.
"""

from __future__ import annotations

import struct


def undefined_symbols(code: bytes) -> list[str]:
    """The symbols an ELF object file needs from elsewhere (its symbol table's
    undefined entries); ValueError for anything else, a truncated or malformed
    object included (the object is then not linked)."""
    if code[:4] != b"\x7fELF" or code[4:6] != b"\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF object")
    try:
        return _elf_undefined(code)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"a malformed ELF object: {e}") from None


def _elf_undefined(code: bytes) -> list[str]:
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
        if entsize < 16 or offset + size > len(code):
            raise IndexError("symbol table out of the file")
        _k, str_offset, _s, _l, _e = section(link)
        for s in range(offset, offset + size, entsize):
            name, _info, _other, shndx = struct.unpack_from("<IBBH", code, s)
            if shndx == 0 and name:
                end = code.index(b"\0", str_offset + name)  # ValueError where none
                names.append(code[str_offset + name : end].decode())
    return names
