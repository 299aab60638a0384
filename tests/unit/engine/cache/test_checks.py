"""What a cache entry may propose: the paths an action declares, and the values a
restore accepts (issue 12, item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.engine.cache.checks import (
    Declared,
    RefusedEntry,
    checked_mode,
    checked_path,
    checked_sha256,
    checked_size,
    declared_outputs,
)
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import BuildContext
from shipyard.stamp import Stamp


def test_declared_outputs_by_kind(tmp_path: Path) -> None:
    ctx = BuildContext(tmp_path, tmp_path / "dist", Stamp("1", None, False, 0), "3.11", {})
    image = declared_outputs(Action("image:app", "image", ("app",), tmp_path), ctx)
    assert image.allows(("dist", "images", "app", "blobs", "sha256", "ab"))
    assert image.allows(("dist", "images", "app-1.0-linux_amd64.tar"))
    assert not image.allows(("dist", "images", "other", "index.json"))
    zipapp = declared_outputs(Action("zipapp:app", "zipapp", ("app",), tmp_path), ctx)
    assert zipapp.allows(("dist", "zipapps", "app-1.0.pyz"))
    assert not zipapp.allows(("dist", "zipapps", "sub", "app-1.0.pyz"))
    with pytest.raises(RefusedEntry):
        checked_path("dist/wheels/x.whl\0", Declared.dist())


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "dist/../x", "dist/./x", "dist//x", "dist/.git/hooks/x", "Makefile"],
)
def test_a_path_outside_the_declared_outputs_is_refused(path: str) -> None:
    with pytest.raises(RefusedEntry):
        checked_path(path, Declared.dist())
    assert checked_path("dist/wheels/x.whl", Declared.dist()) == ("dist", "wheels", "x.whl")


def test_modes_digests_and_sizes_are_only_what_a_store_writes() -> None:
    assert checked_mode(0o755) == 0o755
    for mode in (0o4755, 0o777, True, "644"):
        with pytest.raises(RefusedEntry):
            checked_mode(mode)
    assert checked_sha256("a" * 64) == "a" * 64
    for digest in ("A" * 64, "a" * 63, "../" + "a" * 61, 7):
        with pytest.raises(RefusedEntry):
            checked_sha256(digest)
    assert checked_size(0) == 0
    for size in (-1, True, "3"):
        with pytest.raises(RefusedEntry):
            checked_size(size)
