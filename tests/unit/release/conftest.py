"""Fixtures shared by the release tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.release.keys import SigningKey, generate_keypair


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SigningKey, Path, Path]:
    """A new key pair in tmp_path/keys: the key, the private and the public file."""
    private, public = tmp_path / "keys" / "cosign.key", tmp_path / "keys" / "cosign.pub"
    return generate_keypair(private, public), private, public
