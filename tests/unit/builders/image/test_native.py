"""The ELF reader and the native library check of images (issue 31, item 4): every
library an image's shared objects need is found in its own files or its base's library
folders, or the build fails naming it, the file and the distribution."""

from __future__ import annotations

import io
import struct
import tarfile
from pathlib import Path

import pytest

from shipyard.builders.distributions import Distribution
from shipyard.builders.image.native import base_libraries, missing_libraries
from shipyard.builders.resolve import Resolution
from shipyard.oci.elf import Dynamic, read_dynamic
from shipyard.oci.layer import BlobStore, layer_from_tarball
from shipyard.oci.layercheck import check_base_layers
from shipyard.oci.model import Layer

HOST_LIBSTDCXX = Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")


def elf(
    *,
    wide: bool = True,
    order: str = "<",
    needed: tuple[str, ...] = (),
    soname: str | None = None,
    runpath: str | None = None,
) -> bytes:
    """A minimal shared object: ELF header, a PT_LOAD over the whole file, a PT_DYNAMIC
    and its string table, in either class and byte order."""
    strings = b"\0"
    offsets: dict[str, int] = {}
    for text in (*needed, *([soname] if soname else []), *([runpath] if runpath else [])):
        offsets[text] = len(strings)
        strings += text.encode() + b"\0"
    entries = [(1, offsets[n]) for n in needed]
    if soname:
        entries.append((14, offsets[soname]))
    if runpath:
        entries.append((29, offsets[runpath]))
    header_size, ph_size = (64, 56) if wide else (52, 32)
    dyn_size = 16 if wide else 8
    ph_off = header_size
    dyn_off = ph_off + 2 * ph_size
    dyn_count = len(entries) + 3  # + STRTAB, STRSZ, NULL
    str_off = dyn_off + dyn_count * dyn_size
    vaddr = 0x1000  # the strings' address: the file mapped at 0x1000
    entries += [(5, vaddr + str_off), (10, len(strings)), (0, 0)]
    total = str_off + len(strings)
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if order == "<" else 2, 1]) + b"\0" * 9
    if wide:
        head = struct.pack(
            order + "HHIQQQIHHHHHH", 3, 62, 1, 0, ph_off, 0, 0, header_size, ph_size, 2, 0, 0, 0
        )
        load = struct.pack(order + "IIQQQQQQ", 1, 5, 0, vaddr, vaddr, total, total, 0x1000)
        dyn = struct.pack(
            order + "IIQQQQQQ", 2, 6, dyn_off, vaddr + dyn_off, 0, dyn_count * 16, 0, 8
        )
        table = b"".join(struct.pack(order + "qQ", t, v) for t, v in entries)
    else:
        head = struct.pack(
            order + "HHIIIIIHHHHHH", 3, 40, 1, 0, ph_off, 0, 0, header_size, ph_size, 2, 0, 0, 0
        )
        load = struct.pack(order + "IIIIIIII", 1, 0, vaddr, vaddr, total, total, 5, 0x1000)
        dyn = struct.pack(
            order + "IIIIIIII", 2, dyn_off, vaddr + dyn_off, 0, dyn_count * 8, 0, 6, 4
        )
        table = b"".join(struct.pack(order + "iI", t, v) for t, v in entries)
    data = ident + head + load + dyn + table + strings
    assert len(data) == total
    return data


@pytest.mark.parametrize(("wide", "order"), [(True, "<"), (True, ">"), (False, "<"), (False, ">")])
def test_every_class_and_byte_order_reads_the_same(wide: bool, order: str, tmp_path: Path) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(
        elf(
            wide=wide, order=order, needed=("libstdc++.so.6", "libc.so.6"),
            soname="libacme.so.1", runpath="$ORIGIN/../acme.libs:/opt/x",
        )
    )  # fmt: skip
    assert read_dynamic(path) == Dynamic(
        ("libstdc++.so.6", "libc.so.6"), "libacme.so.1", (), ("$ORIGIN/../acme.libs", "/opt/x")
    )


def test_malformed_and_foreign_files_give_none_never_an_exception(tmp_path: Path) -> None:
    good = elf(needed=("libm.so.6",))
    path = tmp_path / "x.so"
    for cut in (3, 16, 40, 64, 100, 150, len(good) - 3):
        path.write_bytes(good[:cut])
        assert read_dynamic(path) is None, cut
    for data in (b"", b"not an elf file", b"\x7fELF\x03\x01" + b"\0" * 60, b"\xff" * 500):
        path.write_bytes(data)
        assert read_dynamic(path) is None
    # A DT_NEEDED offset past the end of the string table.
    broken = bytearray(good)
    dyn_off = 64 + 2 * 56  # after the ELF64 header and two program headers
    broken[dyn_off + 8 : dyn_off + 16] = struct.pack("<Q", 0xFFFF)
    path.write_bytes(bytes(broken))
    assert read_dynamic(path) is None
    assert read_dynamic(tmp_path / "absent.so") is None


@pytest.mark.skipif(not HOST_LIBSTDCXX.exists(), reason="no host libstdc++")
def test_real_shared_objects_of_this_machine() -> None:
    found = read_dynamic(HOST_LIBSTDCXX.resolve())
    assert found is not None and found.soname == "libstdc++.so.6"
    assert "libc.so.6" in found.needed
    import _ctypes  # an extension module of the interpreter running the tests

    module = read_dynamic(Path(_ctypes.__file__))
    assert module is not None and module.soname is None
    assert any(n.startswith("libffi") for n in module.needed), module.needed


def _site(tmp_path: Path, files: dict[str, bytes]) -> Resolution:
    """A site holding `files`, each listed in the RECORD of dist `native 1.0`."""
    site = tmp_path / "site"
    info = site / "native-1.0.dist-info"
    info.mkdir(parents=True)
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    (info / "RECORD").write_text("".join(f"{n},,\n" for n in files))
    return Resolution("linux/amd64", site, (Distribution("native", "1.0", False),), False)


def test_a_library_neither_the_site_nor_the_base_has_is_named_with_file_and_dist(
    tmp_path: Path,
) -> None:
    resolution = _site(
        tmp_path,
        {
            "native/_ext.cpython-311-x86_64-linux-gnu.so": elf(
                needed=("libstdc++.so.6", "libc.so.6")
            )
        },
    )
    (gap,) = missing_libraries(
        resolution, frozenset({"libc.so.6"}), image_path=lambda r, _: "/d/" + r
    )
    assert gap.library == "libstdc++.so.6"
    assert gap.needed_by == "/d/native/_ext.cpython-311-x86_64-linux-gnu.so"
    assert gap.distribution == "native 1.0"
    assert not missing_libraries(resolution, frozenset({"libc.so.6", "libstdc++.so.6"}))
    assert not missing_libraries(resolution, frozenset({"libc.so.6"}), accept=["libstdc++.so.6"])
    assert not missing_libraries(resolution, frozenset(), accept=["*"])


def test_a_vendored_library_satisfies_by_file_name_or_soname(tmp_path: Path) -> None:
    resolution = _site(
        tmp_path,
        {
            "native/_ext.so": elf(
                needed=("libgfortran-a1b2.so.5.0.0", "libopenblas.so.0"),
                runpath="$ORIGIN/../native.libs",
            ),
            "native.libs/libgfortran-a1b2.so.5.0.0": elf(needed=()),
            "native.libs/libopenblas-r0.so": elf(soname="libopenblas.so.0"),
        },
    )
    assert missing_libraries(resolution, frozenset()) == []


def _layer(store: BlobStore, members: dict[str, str | None]) -> Layer:
    """A gzip tar layer: path -> file contents, or None for a symlink to 'usr/lib'."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            if text is None:
                info.type, info.linkname = tarfile.SYMTYPE, "usr/lib"
                tar.addfile(info)
            else:
                data = text.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return layer_from_tarball(io.BytesIO(raw.getvalue()), store)


def test_the_base_libraries_are_the_merged_layers_library_folders(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    lower = _layer(
        store,
        {
            "lib": None,  # merged /usr: lib -> usr/lib
            "usr/lib/x86_64-linux-gnu/libc.so.6": "c",
            "usr/lib/x86_64-linux-gnu/libstdc++.so.6": "c++",
            "usr/lib/x86_64-linux-gnu/libgone.so.1": "g",
            "usr/share/doc/libfake.so.9": "not a library folder",
            "opt/app/libelse.so.2": "nor this",
        },
    )
    upper = _layer(store, {"usr/lib/x86_64-linux-gnu/.wh.libgone.so.1": ""})
    found = base_libraries([lower, upper], store)
    assert found == {"libc.so.6", "libstdc++.so.6"}
    assert base_libraries([lower, upper], store) == found  # from the note, the same
    opaque = _layer(
        store,
        {"usr/lib/x86_64-linux-gnu/.wh..wh..opq": "", "usr/lib/x86_64-linux-gnu/libz.so.1": "z"},
    )
    assert base_libraries([lower, opaque], store) == {"libz.so.1"}


def test_the_base_libraries_come_from_the_layer_checks_notes(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    lower = _layer(store, {"usr/lib/libc.so.6": "c", "usr/lib/libgone.so.1": "g"})
    upper = _layer(store, {"usr/lib/.wh.libgone.so.1": "", "lib64/libz.so.1": "z"})
    check_base_layers([lower, upper], store)
    for layer in (lower, upper):
        layer.path.write_bytes(b"")  # the blobs are not read again: the check noted them
    assert base_libraries([lower, upper], store) == {"libc.so.6", "libz.so.1"}


def test_a_layer_without_a_valid_note_is_read(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    lower = _layer(store, {"usr/lib/libc.so.6": "c", "usr/lib/libgone.so.1": "g"})
    upper = _layer(store, {"usr/lib/.wh.libgone.so.1": "", "lib64/libz.so.1": "z"})
    check_base_layers([lower, upper], store)
    note = store.path(lower.descriptor.digest).with_suffix(".libs")
    note.write_text('{"version": "1", "digest": "sha256:0", "events": []}')  # a miss
    assert base_libraries([lower, upper], store) == {"libc.so.6", "libz.so.1"}
