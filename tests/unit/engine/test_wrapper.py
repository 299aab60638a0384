"""The layers around a builder (issue 27, item 4): the key, the cache and error
translation, each on its own and as `run.wrapped` composes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.artifacts import Artifact
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.wrapper import Cached, Keyed, Translated
from shipyard.errors import BuildError, UsageError
from shipyard.stamp import Stamp


class Builder:
    """Counts how often its inputs are read and it builds; raises `error` when set."""

    kind = "wheel"

    def __init__(self, error: Exception | None = None) -> None:
        self.asked = 0
        self.keys: list[ActionKey] = []
        self.error = error

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        self.asked += 1
        return {"id": action.id}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        if self.error is not None:
            raise self.error
        self.keys.append(key)
        return (Artifact("wheel", "", "any", ctx.dist / "x.whl", "0" * 64, 1),)


class Memory:
    """A cache in memory: what was stored is restored as it was."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Artifact, ...]] = {}

    def restore(self, key: str, repo: Path, declared: object = None) -> tuple[Artifact, ...] | None:
        return self.entries.get(key)

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        self.entries[key] = outputs


def _scene(tmp_path: Path) -> tuple[Action, BuildContext]:
    ctx = BuildContext(tmp_path, tmp_path / "dist", Stamp("1", None, False, 0), "3.11", {})
    return Action("wheel:x", "wheel", (), tmp_path), ctx


def test_the_key_is_computed_once_and_handed_to_the_build(tmp_path: Path) -> None:
    action, ctx = _scene(tmp_path)
    builder = Builder()
    outcome = Keyed(builder).run(action, ctx, ())
    assert builder.asked == 1 and builder.keys[0].digest == outcome.inputs
    assert not outcome.cached
    assert wrapped(builder).key(action, ctx, ()) == builder.keys[0]


def test_the_cache_layer_restores_a_hit_and_stores_a_miss(tmp_path: Path) -> None:
    action, ctx = _scene(tmp_path)
    builder, cache = Builder(), Memory()
    first = Cached(Keyed(builder), cache).run(action, ctx, ())
    assert not first.cached and list(cache.entries) == [first.inputs]
    assert builder.asked == 1, "the key is computed once, for the lookup and the build"
    again = Cached(Keyed(builder), cache).run(action, ctx, ())
    assert again.cached and again.outputs == first.outputs and len(builder.keys) == 1
    forced = Cached(Keyed(builder), cache, force=True).run(action, ctx, ())
    assert not forced.cached and len(builder.keys) == 2


def test_the_translation_layer_names_the_action_and_keeps_the_exit_code(tmp_path: Path) -> None:
    action, ctx = _scene(tmp_path)
    with pytest.raises(BuildError, match="wheel:x") as caught:
        Translated(Keyed(Builder(UsageError("bad input")))).run(action, ctx, ())
    assert isinstance(caught.value.__cause__, UsageError)
    with pytest.raises(OSError):
        Keyed(Builder(OSError("disk"))).run(action, ctx, ())  # the key layer translates nothing
    with pytest.raises(BuildError):
        wrapped(Builder(OSError("disk")), Memory()).run(action, ctx, ())
