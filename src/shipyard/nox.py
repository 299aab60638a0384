"""nox sessions over `shipyard test`, for a repository's own noxfile.py:

    import nox
    from shipyard.nox import stages

    stages()        # sessions lint, typecheck, unit, integration, and test (all of them)

`nox -l` lists them, `nox -s test` runs every project's stages (cached by their
inputs: a second run costs a fraction of a second), `nox -s unit -- -k name` gives
`-k name` to the unit stage's command. Arguments that are `shipyard test`'s own
options come first and stay options: `nox -s test -- --since origin/main -j 4`.

Each session runs `shipyard test` with the interpreter nox itself runs on (the one
that imported this module), and needs no virtual environment of its own: shipyard
makes each stage's environment from the lock.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import nox

from shipyard.stages._settings import STAGES

__all__ = ["STAGES", "split_posargs", "stages"]

# `shipyard test` options a session's posargs may start with, and whether each takes
# a value.
_OPTIONS = {
    "--since": True,
    "--project": True,
    "--target": True,
    "--stage": True,
    "--shard": True,
    "--cache-dir": True,
    "--cache": True,
    "-j": True,
    "--jobs": True,
    "-f": True,
    "--file": True,
    "--keep-going": False,
    "--json": False,
    "--force": False,
    "--no-cache": False,
    "--dry-run": False,
}


def split_posargs(posargs: Sequence[str]) -> tuple[list[str], list[str]]:
    """`shipyard test` options at the front of `posargs`, and the rest (for the stage
    commands, after `--`). `--opt=value` and `--opt value` both count."""
    options: list[str] = []
    index = 0
    while index < len(posargs):
        word = posargs[index]
        name = word.split("=", 1)[0]
        if word == "--":
            index += 1
            break
        if name not in _OPTIONS and not (name.startswith("-j") and name[2:].isdigit()):
            break
        options.append(word)
        takes = _OPTIONS.get(name, False)  # -j4: the value is in the word
        if takes and "=" not in word and index + 1 < len(posargs):
            options.append(posargs[index + 1])
            index += 1
        index += 1
    return options, list(posargs[index:])


def _session(stage: str | None, *options: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        own, rest = split_posargs(session.posargs)
        command = [sys.executable, "-m", "shipyard", "test", *options]
        command += ["--stage", stage] if stage else []
        command += own + (["--", *rest] if rest else [])
        session.run(*command, external=True)

    return run


def stages(
    names: Sequence[str] = STAGES,
    *,
    prefix: str = "",
    all_name: str = "test",
    options: Sequence[str] = (),
) -> None:
    """Register one nox session per stage name (`prefix` + name), and `prefix` +
    `all_name` for every stage. `options` go to every `shipyard test` call (say,
    `["-f", "examples/binaries.yaml"]`)."""
    for name in names:
        body = _session(name, *options)
        body.__doc__ = f"shipyard test --stage {name}: every project's {name} stage"
        nox.session(name=prefix + name, python=False)(body)
    every = _session(None, *options)
    every.__doc__ = "shipyard test: every stage of every project, cached by their inputs"
    nox.session(name=prefix + all_name, python=False)(every)
    if nox.options.sessions is None and not prefix:
        # A bare `nox` runs every stage once, not each stage twice (its session and test).
        nox.options.sessions = [all_name]
