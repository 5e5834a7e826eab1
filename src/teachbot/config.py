"""YAML configuration loading with errors that name the file and the key to fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from teachbot.errors import ConfigError
from teachbot.paths import config_path


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or a syntax error becomes a one-line ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}; check the path or the --config flag")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_yaml_list(path: str | Path, key: str) -> list[Any]:
    """The list under ``key`` of the YAML mapping in ``path`` (benchmark cases, tasks); a ConfigError otherwise."""
    rows = load_yaml(path).get(key)
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: expected a mapping with a list '{key}:'")
    return rows


def require(mapping: dict[str, Any], key: str, source: str, kind: type | tuple[type, ...] | None = None) -> Any:
    """``mapping[key]``, or a ConfigError naming ``source`` and the dotted key."""
    if key not in mapping:
        raise ConfigError(f"{source}: missing key '{key}'")
    value = mapping[key]
    if kind is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{source}: key '{key}' must be {names}, got {value!r}")
    return value


def resolve_config(name_or_path: str, subdir: str = "") -> Path:
    """A bare profile name ('panda_sim') resolves under config/<subdir>/; anything else is a path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_absolute() or "/" in name_or_path:
        return candidate
    return config_path(subdir, f"{name_or_path}.yaml") if subdir else config_path(f"{name_or_path}.yaml")


def dataclass_block(block: Any, cls: type, config: str, key: str) -> Mapping[str, Any]:
    """``block`` checked as keyword arguments of the dataclass ``cls``: a ConfigError naming the ``config``
    file and its ``key`` when it is no mapping or holds keys ``cls`` does not have."""
    if not isinstance(block, Mapping):
        raise ConfigError(f"{config} config: '{key}' must be a mapping, got {block!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(block) - known)
    if unknown:
        raise ConfigError(f"{config} config: unknown key(s) {unknown} under '{key}'; known: {sorted(known)}")
    return block
