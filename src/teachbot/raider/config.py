"""config/raider.yaml as a typed dataclass; a bad value names its key.

``profile``: ``paper`` (the default, the RAIDER paper's protocol: tools that return facts, the zero-shot
Figure 4 prompt with the reach stated in its constraints, the object list in the first message,
``call_tool{...}`` calls, several per turn, and the four warnings of its program flow manager) or ``guided``
(a labelled ablation, teachbot's variant before issue 28: tools that judge reach and ambiguity, a checklist in
the Ask step, a ban on common sense, one ``Tool call:`` line per turn and, with ``examples``, a worked
example).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, resolve_config
from teachbot.errors import ConfigError
from teachbot.raider.tools import Reach
from teachbot.robot_profile import RobotProfile

ABLATIONS = ("BASIC", "QGEN", "GRND", "QGEN_GRND")
TOOL_CALLING = ("text", "native")
PROFILES = ("paper", "guided")
GUARD_MODES = ("off", "warn", "block")


@dataclass(frozen=True)
class RaiderConfig:
    """Everything under ``raider:``."""

    prompt: str = "QGEN_GRND"
    profile: str = "paper"
    examples: bool = False
    tool_calling: str = "text"
    tool_calling_by_model: Mapping[str, str] = field(default_factory=dict)
    time_limit: float = 20.0
    max_turns: int = 0  # 0: none, the paper's (its time limit alone ends a check); N: a labelled deviation
    max_tokens: int = 400
    reach: Mapping[str, float] = field(default_factory=lambda: {"tabletop": 0.85, "household": 0.85})
    robots: Mapping[str, str] = field(default_factory=lambda: {"tabletop": "panda_sim", "household": "household_sim"})
    guard: Mapping[str, str] = field(default_factory=dict)
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = "config/raider.yaml"

    def __post_init__(self) -> None:
        checks = [("prompt", self.prompt, ABLATIONS), ("tool_calling", self.tool_calling, TOOL_CALLING),
                  ("profile", self.profile, PROFILES)]
        checks += [(f"tool_calling_by_model.{k}", v, TOOL_CALLING) for k, v in self.tool_calling_by_model.items()]
        checks += [(f"guard.{k}", v, GUARD_MODES) for k, v in self.guard.items()]
        for key, value, allowed in checks:
            if value not in allowed:
                raise ConfigError(f"{self.source}: raider.{key} must be one of {allowed}, got {value!r}")
        if self.time_limit <= 0 or self.max_turns < 0:
            raise ConfigError(f"{self.source}: raider.time_limit must be > 0 and raider.max_turns >= 0 (0: no turn limit)")

    @classmethod
    def load(cls, name_or_path: str | Path = "raider") -> RaiderConfig:
        path = resolve_config(str(name_or_path))
        return cls.from_mapping(load_yaml(path), str(path))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], source: str = "config/raider.yaml") -> RaiderConfig:
        r = raw.get("raider")
        if not isinstance(r, Mapping):
            raise ConfigError(f"{source}: expected a 'raider:' mapping at the top level")
        known = set(cls.__dataclass_fields__) - {"source"}
        unknown = sorted(set(r) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown raider keys {unknown}; known: {sorted(known)}")
        values = dict(r)
        values["guard"] = {str(k): "off" if v is False else str(v) for k, v in (r.get("guard") or {}).items()}
        values["guarded"] = {str(k): tuple(str(f) for f in v or ()) for k, v in (r.get("guarded") or {}).items()}
        values["reach"] = {str(k): float(v) for k, v in (r.get("reach") or {}).items()}
        values["robots"] = {str(k): str(v) for k, v in (r.get("robots") or {"tabletop": "panda_sim", "household": "household_sim"}).items()}
        values["tool_calling_by_model"] = dict(r.get("tool_calling_by_model") or {})
        try:
            return cls(**values, source=source)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: malformed raider config ({exc})") from None

    def tool_calling_for(self, model_name: str) -> str:
        """text or native for this endpoint's model name."""
        for pattern, mode in self.tool_calling_by_model.items():
            if fnmatch.fnmatch(model_name, pattern):
                return mode
        return self.tool_calling

    def reach_for(self, world: str) -> Any:
        """The grounded tools' Reach in ``world``: the radius here, the workspace of the robot profile named in ``robots``."""

        radius = self.reach.get(world, Reach.radius)
        name = self.robots.get(world)
        return Reach.for_robot(RobotProfile.load(name), radius) if name else Reach(radius, mobile=world == "household")

    @property
    def tool_style(self) -> str:
        """The grounded tools' style for this profile: facts (paper) or judged (guided)."""
        return "judged" if self.profile == "guided" else "facts"

    def guard_mode(self, profile: str) -> str:
        return self.guard.get(profile, "off")
