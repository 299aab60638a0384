"""What a shared object asks the dynamic loader for: its ELF dynamic section, read.

`read_dynamic` gives an ELF file's DT_NEEDED names, DT_SONAME and its RPATH/RUNPATH
folders (ELF32 and ELF64, either byte order), reading only the headers, the dynamic
segment and the string table it points at. Anything that is not a well-formed ELF
file gives None, never an exception: the caller checks what it can read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["Dynamic", "read_dynamic"]

_MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ = 0, 1, 5, 10
_DT_SONAME, _DT_RPATH, _DT_RUNPATH = 14, 15, 29
_MAX_HEADERS = 4096  # program headers; real files have a dozen
_MAX_DYNAMIC = 1 << 16  # dynamic entries
_MAX_STRING = 4096


@dataclass(frozen=True)
class Dynamic:
    """A shared object's requests: the libraries it needs, its own name, where it says
    to look first (RPATH, RUNPATH: folders, `$ORIGIN` as written)."""

    needed: tuple[str, ...]
    soname: str | None = None
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Layout:
    order: str  # "<" or ">"
    wide: bool  # ELF64

    def unpack(self, fmt: str, data: bytes) -> tuple[int, ...]:
        return struct.unpack(self.order + fmt, data)


def _read(handle: BinaryIO, offset: int, size: int) -> bytes | None:
    if offset < 0 or size < 0:
        return None
    handle.seek(offset)
    data = handle.read(size)
    return data if len(data) == size else None


def _headers(handle: BinaryIO, layout: _Layout) -> list[tuple[int, int, int, int]] | None:
    """(type, offset, vaddr, filesz) of each program header."""
    # e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize,
    # e_phentsize, e_phnum, ...: addresses are 8 bytes wide in ELF64, 4 in ELF32.
    header, entry, size = (
        ("HHIQQQIHHHHHH", "IIQQQQQQ", 56) if layout.wide else ("HHIIIIIHHHHHH", "IIIIIIII", 32)
    )
    head = _read(handle, 16, struct.calcsize("<" + header))
    if head is None:
        return None
    fields = layout.unpack(header, head)
    phoff, phentsize, phnum = fields[4], fields[8], fields[9]
    if phnum > _MAX_HEADERS or phentsize < size:
        return None
    found = []
    for index in range(phnum):
        raw = _read(handle, phoff + index * phentsize, size)
        if raw is None:
            return None
        f = layout.unpack(entry, raw)
        if layout.wide:  # type, flags, offset, vaddr, paddr, filesz, memsz, align
            found.append((f[0], f[2], f[3], f[5]))
        else:  # type, offset, vaddr, paddr, filesz, memsz, flags, align
            found.append((f[0], f[1], f[2], f[4]))
    return found


def _offset(vaddr: int, loads: list[tuple[int, int, int, int]]) -> int | None:
    """The file offset of virtual address `vaddr`, through the PT_LOAD segment holding it."""
    for _, offset, start, size in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    return None


def _string(table: bytes, at: int) -> str | None:
    if not 0 <= at < len(table):
        return None
    end = table.find(b"\0", at, at + _MAX_STRING)
    if end < 0:
        return None
    return table[at:end].decode("utf-8", errors="replace")


def _parse(handle: BinaryIO) -> Dynamic | None:
    ident = _read(handle, 0, 16)
    if ident is None or ident[:4] != _MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    layout = _Layout("<" if ident[5] == 1 else ">", ident[4] == 2)
    headers = _headers(handle, layout)
    if headers is None:
        return None
    dynamic = [h for h in headers if h[0] == _PT_DYNAMIC]
    if not dynamic:
        return Dynamic(())  # static, or not a shared object: it asks for nothing
    _, offset, _, size = dynamic[0]
    width = 16 if layout.wide else 8
    count = min(size // width, _MAX_DYNAMIC)
    raw = _read(handle, offset, count * width)
    if raw is None:
        return None
    entries: list[tuple[int, int]] = []
    for index in range(count):
        tag, value = layout.unpack(
            "qQ" if layout.wide else "iI", raw[index * width : (index + 1) * width]
        )
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
    strsz = next((v for t, v in entries if t == _DT_STRSZ), None)
    if strtab is None or strsz is None or strsz > 1 << 26:
        return None
    start = _offset(strtab, [h for h in headers if h[0] == _PT_LOAD])
    table = _read(handle, start, strsz) if start is not None else None
    if table is None:
        return None

    def strings(tag: int) -> list[str] | None:
        found = []
        for t, v in entries:
            if t == tag:
                text = _string(table, v)
                if text is None:
                    return None
                found.append(text)
        return found

    needed, soname = strings(_DT_NEEDED), strings(_DT_SONAME)
    rpath, runpath = strings(_DT_RPATH), strings(_DT_RUNPATH)
    if needed is None or soname is None or rpath is None or runpath is None:
        return None
    return Dynamic(
        tuple(needed),
        soname[0] if soname else None,
        tuple(p for text in rpath for p in text.split(":") if p),
        tuple(p for text in runpath for p in text.split(":") if p),
    )


def read_dynamic(path: Path) -> Dynamic | None:
    """The dynamic section's requests of the ELF file at `path`; None when it is not a
    readable, well-formed ELF file."""
    try:
        with path.open("rb") as handle:
            return _parse(handle)
    except (OSError, struct.error, ValueError, OverflowError):
        return None
