"""How a reason reads: the changed file, the chain of projects, and what changed."""

from __future__ import annotations

from shipyard.engine.reasons import KINDS, Reason


def test_a_reason_says_the_file_the_chain_and_the_detail() -> None:
    assert str(Reason("source", "app/x.py")) == "app/x.py changed"
    library = Reason("library", "libs/m/y.py", ("api", "model"))
    assert str(library) == "libs/m/y.py changed (through api -> model)"
    lock = Reason("lock", "uv.lock", detail="locked: fast 1.0 -> 1.1")
    assert str(lock) == "uv.lock changed (locked: fast 1.0 -> 1.1)"
    assert lock.to_json() == {
        "kind": "lock",
        "path": "uv.lock",
        "via": [],
        "detail": "locked: fast 1.0 -> 1.1",
        "text": str(lock),
    }
    assert KINDS == ("source", "library", "manifest", "lock")
