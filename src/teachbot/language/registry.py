"""The robot API registry: each function declared once (name, signature, one-line doc) per profile.

The prompt's import block is generated from it, and the console binds each name to an implementation.
A function whose node is not running fails at once with a clear "not available" error, never a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, resolve_config
from teachbot.errors import ConfigError
from teachbot.language.bounds import Bounds


class NotAvailableError(RuntimeError):
    """A robot function whose serving node is not running."""


@dataclass(frozen=True)
class ApiFunction:
    name: str
    signature: str
    doc: str
    motion: bool = False  # moves the robot: its time counts toward the sandbox's robot-time budgets; not in the prompt

    def declaration(self) -> str:
        return f"def {self.name}{self.signature}:\n    \"\"\"{self.doc}\"\"\""


@dataclass(frozen=True)
class RobotApi:
    """The functions of one profile, in declaration order."""

    profile: str
    functions: tuple[ApiFunction, ...]

    @classmethod
    def load(cls, name_or_path: str) -> RobotApi:
        path = resolve_config(name_or_path, "robot_api")
        raw = load_yaml(path)
        rows = raw.get("functions")
        if not isinstance(rows, list) or not rows:
            raise ConfigError(f"{path}: expected a non-empty list 'functions:'")
        functions = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("name", "signature", "doc")):
                raise ConfigError(f"{path}: functions[{i}] needs string fields name, signature and doc")
            if not row["name"].isidentifier() or row["name"].startswith("_"):
                raise ConfigError(f"{path}: functions[{i}]: {row['name']!r} is not a public Python name")
            if not isinstance(row.get("motion", False), bool):
                raise ConfigError(f"{path}: functions[{i}]: 'motion' must be true or false, got {row['motion']!r}")
            functions.append(ApiFunction(row["name"], row["signature"], row["doc"], row.get("motion", False)))
        return cls(str(raw.get("profile", Path(path).stem)), tuple(functions))

    def without(self, names: Iterable[str]) -> RobotApi:
        """This API less ``names``: for a setup where they cannot run, so no prompt offers them (an evaluation has no
        issue detection node to answer check_action)."""
        dropped = set(names)
        unknown = dropped - set(self.names)
        if unknown:
            raise ConfigError(f"{sorted(unknown)} are not functions of the {self.profile} API")
        return RobotApi(self.profile, tuple(f for f in self.functions if f.name not in dropped))

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.functions]

    @property
    def motion_names(self) -> frozenset[str]:
        """The functions that move the robot (``motion: true`` in the profile's YAML)."""
        return frozenset(f.name for f in self.functions if f.motion)

    def import_block(self) -> str:
        """The robot API as the LLM sees it: declarations with one-line docs, generated, never hand-kept."""
        return "\n\n".join(f.declaration() for f in self.functions)

    def bind(
        self, implementations: Mapping[str, Callable[..., Any]], unavailable: Mapping[str, str] | None = None,
        bounds: Bounds | None = None,
    ) -> dict[str, Callable[..., Any]]:
        """Callables for every declared name; missing ones raise NotAvailableError naming the fix.

        With ``bounds`` every callable first checks its arguments' sizes (ArgumentTooLarge before it runs)."""
        unavailable = unavailable or {}
        bound: dict[str, Callable[..., Any]] = {}
        for fn in self.functions:
            if fn.name in implementations:
                bound[fn.name] = implementations[fn.name]
            else:
                reason = unavailable.get(fn.name, "no node serves it in this setup")
                bound[fn.name] = _not_available(fn.name, reason)
            if bounds is not None:
                bound[fn.name] = bounds.guard(fn.name, bound[fn.name])
        extra = sorted(set(implementations) - set(self.names))
        if extra:
            raise ConfigError(
                f"implementations for undeclared robot functions {extra}; declare them in config/robot_api/{self.profile}.yaml"
            )
        return bound


def _not_available(name: str, reason: str) -> Callable[..., Any]:
    def unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise NotAvailableError(f"{name}() is not available: {reason}")

    unavailable.__name__ = name
    return unavailable
