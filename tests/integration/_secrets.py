"""The world the secrets tests search: planted secrets, registries and a leak scanner.

A password per registry, an identity token, a decoy and unrelated secrets
(AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, an index password) are planted in the
environment and in a DOCKER_CONFIG config.json, all random hex, and a release
signing key as PEM text in SHIPYARD_SIGNING_KEY, beside a
basic-auth and a token-auth registry and a package index on loopback. The
scanner searches bytes for every secret in plain text and in base64 at every
alignment, inside gzip layers, tarballs and zip archives too.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
import traceback
import uuid
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from shipyard.oci.remote.auth import env_variable_names
from tests.integration.pypi import package_index
from tests.integration.registries import (
    USER,
    ExtraRegistry,
    TokenIssuer,
    running_registry,
    running_token_server,
    write_htpasswd,
)

RUN = uuid.uuid4().hex[:8]
NAMES = (
    "basic",  # the basic-auth registry's password, in SHIPYARD_REGISTRY_<HOST>_PASSWORD
    "token",  # the token registry's password, base64 in config.json auths[host].auth
    "identity",  # an identity token in config.json
    "decoy",  # config.json credentials for the basic registry, overridden by the environment
    "wrong",  # a wrong password, for a push that fails
    "wrong_token",  # a wrong token-registry password in another config.json
    "aws",  # AWS_SECRET_ACCESS_KEY, read by nothing
    "github",  # GITHUB_TOKEN
    "index",  # SHIPYARD_INDEX_PASSWORD, for the pypiserver the release uploads the wheel to
)


def _signing_pem() -> str:
    """A new ECDSA P-256 private key, PEM: the release signing key planted as
    SHIPYARD_SIGNING_KEY (the variable's PEM-text form, the one most easily leaked)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass(frozen=True)
class Secrets:
    """One random hex value per name, the signing key, and every form a leak could take."""

    values: Mapping[str, str] = field(
        default_factory=lambda: {n: f"{n}-{secrets.token_hex(20)}" for n in NAMES}
    )
    signing_pem: str = field(default_factory=_signing_pem)

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    def forms(self) -> dict[bytes, str]:
        """Needle -> what it is: the text, and its base64 (standard and url-safe) at each
        of the three alignments, cut so it matches inside any longer base64 stream."""
        found: dict[bytes, str] = {}
        for name, value in self.values.items():
            raw = value.encode()
            found[raw] = name
            for pad in range(3):
                for encode, kind in (
                    (base64.b64encode, "base64"),
                    (base64.urlsafe_b64encode, "b64url"),
                ):
                    encoded = encode(b"\0" * pad + raw)
                    # Drop what the padding bytes and the tail's grouping change.
                    cut = encoded[(pad * 4 + 2) // 3 + 1 : -4]
                    found[cut] = f"{name} ({kind}, offset {pad})"
        # The signing key: any of its PEM lines (each 48 bytes of the DER) or its scalar.
        for number, line in enumerate(self.signing_pem.splitlines()):
            if not line.startswith("-----"):
                found[line.encode()] = f"signing key (PEM line {number})"
        key = serialization.load_pem_private_key(self.signing_pem.encode(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        scalar = key.private_numbers().private_value
        found[f"{scalar:064x}".encode()] = "signing key (scalar, hex)"
        found[scalar.to_bytes(32, "big")] = "signing key (scalar)"
        return found


@dataclass
class Scanner:
    """Searches bytes (and the archives inside them) for the secrets' forms."""

    forms: Mapping[bytes, str]
    leaks: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    scanned: int = 0
    bytes_scanned: int = 0

    def text(self, where: str, text: str) -> None:
        """Search a text (as its bytes)."""
        self.data(where, text.encode(errors="surrogateescape"))

    def data(self, where: str, data: bytes, depth: int = 0) -> None:
        """Search `data` and, a few levels deep, the archives inside it (each once)."""
        digest = hashlib.sha256(data).hexdigest()
        if digest in self.seen:
            return
        self.seen.add(digest)
        self.scanned += 1
        self.bytes_scanned += len(data)
        for needle, what in self.forms.items():
            if needle in data:
                self.leaks.append(f"{where}: {what}")
        if depth > 4:
            return
        for name, inner in _members(data):
            self.data(f"{where}!{name}", inner, depth + 1)

    def tree(self, folder: Path) -> int:
        """Search every regular file under `folder`; how many there were."""
        count = 0
        for path in sorted(folder.rglob("*")) if folder.exists() else []:
            if path.is_file() and not path.is_symlink():
                self.data(str(path), path.read_bytes())
                count += 1
        return count


def _members(data: bytes) -> list[tuple[str, bytes]]:
    """The decompressed or archived contents of `data`: gzip, tar and zip."""
    found: list[tuple[str, bytes]] = []
    try:
        if data[:2] == b"\x1f\x8b":
            found.append(("(gunzip)", gzip.decompress(data)))
        elif len(data) > 262 and data[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member) if member.isfile() else None
                    if handle is not None:
                        found.append((member.name, handle.read()))
        elif b"PK\x03\x04" in data[:4096] or data[:2] == b"#!":
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                found += [
                    (i.filename, archive.read(i)) for i in archive.infolist() if not i.is_dir()
                ]
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile):
        pass  # not an archive after all: its bytes were searched as they are
    return found


MANIFEST = """\
schema: 1
project: {name: vault, version: git, python: "3.11"}
binaries:
  hello:
    source: hello
    entrypoint: "hello:main"
    outputs: [wheel, zipapp, image]
    platforms: [linux/amd64]
    image:
      base: "oci-layout:${BASE_LAYOUT}"
      hubs: ["${HUB_BASIC}", "${HUB_TOKEN}"]
      tags: [latest]
      env: {GREETING: hi}
"""


@dataclass(frozen=True)
class World:
    """The registries, the repository, the secrets and the environment a run gets."""

    basic: ExtraRegistry
    token: ExtraRegistry
    repo: Path
    cache: Path
    folder: Path
    secrets: Secrets
    env: dict[str, str]


def docker_config(folder: Path, auths: Mapping[str, Mapping[str, str]]) -> Path:
    """A DOCKER_CONFIG folder whose config.json holds `auths`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"auths": auths}))
    return folder


def b64(text: str) -> str:
    """`text` in standard base64, as config.json and Basic headers hold it."""
    return base64.b64encode(text.encode()).decode()


@contextmanager
def planted_world(folder: Path, base_layout: Path) -> Iterator[World]:
    """Registries (basic and token auth) and an index on loopback, a repository and
    the environment with every secret planted; all stopped when the block ends."""
    planted = Secrets()
    write_htpasswd(folder / "htpasswd", USER, planted["basic"])
    certs = folder / "certs"
    certs.mkdir()
    issuer = TokenIssuer(certs, USER, planted["token"])
    with ExitStack() as stack:
        basic = stack.enter_context(
            running_registry(folder / "basic", htpasswd=folder / "htpasswd")
        )
        realm = stack.enter_context(running_token_server(issuer))
        token = stack.enter_context(running_registry(folder / "token", token=(issuer, realm)))
        docker = docker_config(
            folder / "docker",
            {
                token.host: {"auth": b64(f"{USER}:{planted['token']}")},
                f"http://{basic.host}": {"auth": b64(f"decoy-user:{planted['decoy']}")},
                "elsewhere.invalid:5000": {"identitytoken": planted["identity"]},
            },
        )
        index = stack.enter_context(package_index(folder / "index", "uploader", planted["index"]))
        repo = _repo(folder / "repo")
        user_var, password_var = env_variable_names(basic.host)
        env = {
            **os.environ,
            "CI": "1",
            "DOCKER_CONFIG": str(docker),
            "SHIPYARD_CACHE_DIR": str(folder / "cache"),
            "BASE_LAYOUT": str(base_layout),
            "HUB_BASIC": f"{basic.host}/sec-{RUN}",
            "HUB_TOKEN": f"{token.host}/sec-{RUN}",
            user_var: USER,
            password_var: planted["basic"],
            "AWS_ACCESS_KEY_ID": "AKIASHIPYARDTEST",
            "AWS_SECRET_ACCESS_KEY": planted["aws"],
            "GITHUB_TOKEN": planted["github"],
            "SHIPYARD_INDEX_URL": index,
            "SHIPYARD_INDEX_USER": "uploader",
            "SHIPYARD_INDEX_PASSWORD": planted["index"],
            "SHIPYARD_SIGNING_KEY": planted.signing_pem,
        }
        yield World(basic, token, repo, folder / "cache", folder, planted, env)


def _repo(repo: Path) -> Path:
    (repo / "hello" / "hello").mkdir(parents=True)
    (repo / "hello" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "hello"\ndynamic = ["version"]\nrequires-python = ">=3.11"\n\n'
        '[tool.hatch.version]\nsource = "code"\npath = "version_stamp.py"\n'
    )
    (repo / "hello" / "version_stamp.py").write_text(
        'import os\n\n__version__ = os.environ.get("SHIPYARD_VERSION", "0.0.0")\n'
    )
    (repo / "hello" / "hello" / "__init__.py").write_text(
        "import os\n\ndef main():\n    print('hello', os.environ.get('GREETING'))\n    return 0\n"
    )
    (repo / "binaries.yaml").write_text(MANIFEST)
    (repo / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "hello"], check=True)
    return repo


def run_shipyard(world: World, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run the shipyard CLI in the world's repository, with `extra` in its environment."""
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=world.repo,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**world.env, **extra},
    )


def error_texts(exc: BaseException) -> list[tuple[str, str]]:
    """Everything an error shows: str, repr, args, attributes and the full traceback."""
    shown = [
        ("str", str(exc)),
        ("repr", repr(exc)),
        ("args", repr(exc.args)),
        ("attributes", repr(vars(exc))),
        ("traceback", "".join(traceback.format_exception(exc))),
    ]
    cause = exc.__cause__ or exc.__context__
    depth = 0
    while cause is not None and depth < 8:
        shown += [("cause str", str(cause)), ("cause repr", repr(cause))]
        shown.append(("cause attributes", repr(getattr(cause, "__dict__", {}))))
        cause = cause.__cause__ or cause.__context__
        depth += 1
    return shown
