"""Build a ``Model`` for a role (interaction, function_generation, improvement) from config/llm.yaml.

The file holds ``llm.defaults`` (every key, documented in the YAML) and ``llm.roles.<role>``, whose
keys override the defaults for that role, backend included. Unknown keys are errors, so a typo does
not silently fall back to a default; keys of another backend are ignored (the defaults hold them all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.llm.base import CompletionListener, Model
from teachbot.llm.scripted import ScriptedModel
from teachbot.llm.transformers_model import TransformersModel
from teachbot.paths import config_path

BACKENDS = ("openai", "transformers", "scripted")
ROLES = ("interaction", "function_generation", "improvement")

_NUMBER = (int, float)
# key -> accepted types; the backends that read it are listed in _BACKEND_KEYS.
_KEY_TYPES: dict[str, type | tuple[type, ...]] = {
    "backend": str,
    "mode": str,
    "model": str,
    "base_url": str,
    "api_key": str,
    "api_key_env": str,
    "temperature": _NUMBER,
    "max_tokens": int,
    "max_tokens_param": str,
    "stop": list,
    "stop_supported": bool,
    "max_stop": int,
    "temperature_supported": bool,
    "reasoning_effort": str,
    "reasoning_budget": int,
    "stream": bool,
    "timeout": _NUMBER,
    "retries": int,
    "backoff_base": _NUMBER,
    "backoff_max": _NUMBER,
    "empty_retries": int,
    "empty_temperature_step": _NUMBER,
    "system_split": str,
    "history_size": int,
    "model_path": str,
    "device": str,
    "dtype": str,
    "completions": list,
    "replay": str,
}
_COMMON = ("temperature", "max_tokens", "stop", "history_size")
_BACKEND_KEYS: dict[str, tuple[str, ...]] = {
    "openai": _COMMON
    + ("mode", "model", "base_url", "api_key", "api_key_env", "max_tokens_param", "timeout", "retries", "backoff_base", "backoff_max")
    + ("empty_retries", "empty_temperature_step", "system_split")
    + ("stop_supported", "max_stop", "temperature_supported", "reasoning_effort", "reasoning_budget", "stream"),
    "transformers": _COMMON + ("model_path", "device", "dtype"),
    "scripted": ("stop", "history_size", "completions", "replay"),
}


def load_llm_config(path: str | Path | None = None) -> dict[str, Any]:
    """The parsed config/llm.yaml (or ``path``)."""
    return load_yaml(path if path is not None else config_path("llm.yaml"))


def _sections(raw: dict[str, Any], role: str, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``llm.defaults`` and ``llm.roles.<role>`` of the file (or of its ``llm`` section)."""
    section = raw.get("llm", raw)
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: 'llm' must be a mapping")
    defaults = section.get("defaults") or {}
    roles = section.get("roles") or {}
    if not isinstance(defaults, dict) or not isinstance(roles, dict):
        raise ConfigError(f"{source}: 'llm.defaults' and 'llm.roles' must be mappings")
    if role not in roles and role not in ROLES:
        raise ConfigError(f"{source}: no LLM role '{role}'; roles: {', '.join(sorted(set(ROLES) | set(roles)))}")
    overrides = roles.get(role) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{source}: 'llm.roles.{role}' must be a mapping")
    return defaults, overrides


def _key_path(raw: dict[str, Any], role: str, key: str, source: str) -> str:
    """Dotted path of the entry that set ``key`` for ``role``, for error messages."""
    return f"llm.roles.{role}.{key}" if key in _sections(raw, role, source)[1] else f"llm.defaults.{key}"


def role_settings(raw: dict[str, Any], role: str = "interaction", source: str = "config/llm.yaml") -> dict[str, Any]:
    """Defaults merged with the role's overrides, type-checked; ``raw`` is the file or its ``llm`` section."""
    defaults, overrides = _sections(raw, role, source)
    settings = {"backend": "openai", **defaults, **overrides}
    for key, value in settings.items():
        where = _key_path(raw, role, key, source)
        kind = _KEY_TYPES.get(key)
        if kind is None:
            raise ConfigError(f"{source}: unknown key '{where}'; known keys: {', '.join(_KEY_TYPES)}")
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, _NUMBER)):
            names = kind.__name__ if isinstance(kind, type) else "a number"
            raise ConfigError(f"{source}: '{where}' must be {names}, got {value!r}")
    if settings["backend"] not in BACKENDS:
        raise ConfigError(f"{source}: llm backend must be one of {', '.join(BACKENDS)}, got {settings['backend']!r} (role {role})")
    return settings


def model_from_config(
    raw: dict[str, Any],
    role: str = "interaction",
    *,
    on_completion: CompletionListener | None = None,
    source: str = "config/llm.yaml",
) -> Model:
    """The ``Model`` configured for ``role``; the openai backend is imported only when used."""
    settings = role_settings(raw, role, source)
    backend = settings["backend"]
    kwargs = {k: settings[k] for k in _BACKEND_KEYS[backend] if k in settings}
    if "stop" in kwargs:
        kwargs["stop"] = tuple(str(s) for s in kwargs["stop"])
    if backend == "openai":
        from teachbot.llm.openai_model import OpenAIModel  # deferred: openai

        if not kwargs.get("model"):
            raise ConfigError(f"{source}: set 'model' for LLM role '{role}' (the name the endpoint serves)")
        return OpenAIModel(name=f"{role}:{kwargs['model']}", on_completion=on_completion, **kwargs)
    if backend == "transformers":

        key = f"{source}: {_key_path(raw, role, 'model_path', source)}"
        path = kwargs.pop("model_path", "")
        return TransformersModel(path, config_key=key, name=f"{role}:{Path(path).name}", on_completion=on_completion, **kwargs)

    replay = kwargs.pop("replay", "")
    completions = [str(c) for c in kwargs.pop("completions", [])]
    if replay:
        return ScriptedModel.from_records(replay, completions=completions, name=f"{role}:replay", on_completion=on_completion, **kwargs)
    return ScriptedModel(completions, name=f"{role}:scripted", on_completion=on_completion, **kwargs)
