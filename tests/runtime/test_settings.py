"""``RuntimeSettings``: one frozen value configures a ``Runtime``; its fields are documented."""

from __future__ import annotations

import ast
import inspect

import msgspec
import pytest

import plait
from plait import ConfigError, HistorySettings, MemoryStore, ModelSettings, Runtime
from plait.events import SessionStarted
from plait.runtime import RuntimeSettings
from plait.runtime import _settings as settings_module


def test_the_runtime_runs_on_the_settings_it_is_given() -> None:
    model = ModelSettings(model="m", api_key="k", context_window=32_000)
    given = RuntimeSettings(model=model, owner_id="here", expire_every_sec=None)
    with Runtime(MemoryStore(), given) as runtime:
        assert runtime.settings is given
        assert runtime.owner.id == "here"
        assert runtime.history.context_window == 32_000  # the model's, unless set
        session = runtime.start_session()
        started = runtime.store.read(session.session_id, limit=1)[0].body
    assert isinstance(started, SessionStarted)
    assert started.model == "m" and started.settings is not None
    assert started.settings.history.context_window == 32_000


def test_no_settings_are_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")  # the default model client needs a key
    with Runtime(MemoryStore()) as runtime:
        assert runtime.settings == RuntimeSettings()
        assert runtime.history == HistorySettings()


def test_settings_are_a_frozen_value_checked_when_made() -> None:
    settings = RuntimeSettings()
    with pytest.raises(AttributeError):
        settings.idle_sec = 5.0  # type: ignore[misc]
    changed = msgspec.structs.replace(settings, idle_sec=5.0)
    assert (changed.idle_sec, settings.idle_sec) == (5.0, None)
    with pytest.raises(ConfigError, match="approval policy 'sometimes'"):
        RuntimeSettings(approval_policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="approval policy 'sometimes'"):
        msgspec.structs.replace(settings, approval_policy="sometimes")


def test_every_setting_says_what_it_does() -> None:
    tree = ast.parse(inspect.getsource(settings_module))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RuntimeSettings"]
    documented = {
        field.target.id
        for field, after in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
    }
    assert documented == set(RuntimeSettings.__struct_fields__)


def test_plait_exports_the_settings() -> None:
    assert plait.RuntimeSettings is RuntimeSettings
