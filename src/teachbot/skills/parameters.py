"""Skill parameters a correction can change: named values with defaults and safe ranges per skill.

Declared in config/skill_parameters.yaml per world (the robot profile's ``robot.world``) and per skill:
the grasp height offset, approach height, place offsets, gripper width and force, speed factor, drawer
pull distance, wipe passes. This is the ground for DROC's skill-level corrections ("grasp it a bit
higher", "pull the drawer further"): a correction sets a parameter, the skill reads it.

:meth:`SkillParameters.check` fills the defaults of one skill call and refuses an unknown name or a
value outside its range with an :class:`~teachbot.errors.InvalidArgumentError` naming the range. Bound
to a robot profile it also applies the profile's safety limits, which win over every range (a
:class:`~teachbot.errors.LimitExceededError`). ROS-free: the skills node, the direct (in-process) skills
and the console all use it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, InvalidArgumentError, LimitExceededError
from teachbot.paths import config_path
from teachbot.robot_profile import RobotProfile

WORLDS = ("tabletop", "household")
FIELDS = ("default", "min", "max", "unit", "doc", "integer")
PROFILE = "profile"  # a default that is the robot profile's own value
# parameters whose default may be the robot profile's value, and where the profile keeps it
PROFILE_DEFAULTS: dict[str, Callable[[RobotProfile], float]] = {
    "approach_height": lambda p: p.skills.approach_height,
    "speed_factor": lambda p: p.safety.default_speed_factor,
    "gripper_width": lambda p: p.gripper.max_width,
    "gripper_force": lambda p: p.gripper.effort,
}
# what a skill called without parameters (from inside another skill) uses for a parameter it does not
# declare in this world: the behaviour the skills had before parameters existed
NEUTRAL = {"grasp_height_offset": 0.0, "place_offset_x": 0.0, "place_offset_y": 0.0}
# the fields of a skill goal (and keywords of SkillLibrary.run) that carry parameters
NAMES_FIELD, VALUES_FIELD = "parameter_names", "parameter_values"


@dataclass(frozen=True)
class Parameter:
    """One declared parameter: ``default`` None means the robot profile's value (PROFILE_DEFAULTS)."""

    name: str
    default: float | None
    min: float
    max: float
    unit: str
    doc: str
    integer: bool = False

    def range_text(self) -> str:
        """``[-0.03, 0.05] m``: the safe range with its unit."""
        return f"[{self.min:g}, {self.max:g}]" + (f" {self.unit}" if self.unit else "")

    def validate(self, value: Any) -> float:
        """``value`` as a number inside the safe range, or an InvalidArgumentError naming the range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgumentError(f"{self.name} must be a number in {self.range_text()}, got {value!r}")
        number = float(value)
        if not math.isfinite(number) or not self.min - 1e-9 <= number <= self.max + 1e-9:
            raise InvalidArgumentError(f"{self.name}={number:g} is outside its safe range {self.range_text()}")
        if self.integer:
            if number != round(number):
                raise InvalidArgumentError(f"{self.name} must be a whole number in {self.range_text()}, got {number:g}")
            return int(round(number))
        return number


class Tuning(dict):
    """The checked parameter values of one skill call. ``given`` holds the names the caller set; a
    name this call does not declare reads as the skills' behaviour without parameters (the robot
    profile's value, or NEUTRAL), so a skill may read what its inner skills use."""

    def __init__(self, values: Mapping[str, float], profile: RobotProfile | None = None, given: Sequence[str] = ()) -> None:
        super().__init__(values)
        self.profile = profile
        self.given = frozenset(given)

    def __missing__(self, name: str) -> float:
        if name in PROFILE_DEFAULTS and self.profile is not None:
            return PROFILE_DEFAULTS[name](self.profile)
        if name in NEUTRAL:
            return NEUTRAL[name]
        raise KeyError(name)


class SkillParameters:
    """The declared parameters of one world's skills, optionally bound to a robot profile (which
    supplies the ``profile`` defaults and the safety limits)."""

    def __init__(self, world: str, skills: Mapping[str, Mapping[str, Parameter]], source: str = "",
                 profile: RobotProfile | None = None) -> None:
        self.world = world
        self.source = source
        self.profile = profile
        self._skills = {skill: dict(params) for skill, params in skills.items()}

    @classmethod
    def load(cls, world: str | None = None, profile: RobotProfile | None = None, path: str | Path | None = None) -> SkillParameters:
        """The parameters of ``world`` (default: the profile's world, else tabletop) from ``path``
        (default config/skill_parameters.yaml); a malformed file is a ConfigError naming the key."""
        world = world or (profile.world if profile is not None else "tabletop")
        if world not in WORLDS:
            raise ConfigError(f"unknown world {world!r} for skill parameters; known: {', '.join(WORLDS)}")
        source = Path(path) if path is not None else config_path("skill_parameters.yaml")
        declared = _read(str(source), source.stat().st_mtime_ns if source.is_file() else 0)
        return cls(world, declared.get(world, {}), str(source), profile)

    def skills(self) -> list[str]:
        """The skills of this world that declare parameters."""
        return list(self._skills)

    def declared(self, skill: str) -> dict[str, Parameter]:
        """The parameters ``skill`` declares, by name (empty when it declares none)."""
        return dict(self._skills.get(skill, {}))

    def default(self, parameter: Parameter) -> float | None:
        """A parameter's default; a ``profile`` default is None until bound to a profile."""
        if parameter.default is not None:
            return parameter.default
        return PROFILE_DEFAULTS[parameter.name](self.profile) if self.profile is not None else None

    def check(self, skill: str, **values: Any) -> Tuning:
        """Every parameter of ``skill``: the given values, checked, and the defaults for the rest.

        An unknown name (the known ones are listed) or a value outside its safe range is an
        InvalidArgumentError; bound to a profile, a value beyond its safety limits a LimitExceededError."""
        declared = self._skills.get(skill, {})
        unknown = sorted(set(values) - set(declared))
        if unknown:
            known = f"known: {', '.join(declared)}" if declared else "it takes none"
            raise InvalidArgumentError(f"unknown parameter {unknown[0]!r} for {skill}; {known}")
        out = {name: param.validate(values[name]) if name in values else self.default(param) for name, param in declared.items()}
        if self.profile is not None:
            _safety(out, values, self.profile)
        return Tuning(out, self.profile, tuple(values))

    def tuning(self, params: Tuning | None, skill: str) -> Tuning:
        """``params`` as given to a skill function, or, for a call from inside another skill (None),
        the defaults of ``skill`` where this world declares it and the skills' plain behaviour where not."""
        if params is not None:
            return params
        return self.check(skill) if skill in self._skills else Tuning({}, self.profile)

    def from_call(self, skill: str, kwargs: dict[str, Any], names: Sequence[str] = (), values: Sequence[float] = ()) -> Tuning | None:
        """The checked parameters of a skill call: the declared names among ``kwargs`` (taken out of
        it) and the goal's ``names``/``values``, which win; None when the skill declares none and none
        were given."""
        names, values = list(names), list(values)
        if len(names) != len(values):
            raise InvalidArgumentError(f"{len(names)} parameter names but {len(values)} values; send one value per name")
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"a parameter is named twice in {names}")
        declared = self._skills.get(skill, {})
        given = {name: kwargs.pop(name) for name in list(kwargs) if name in declared}
        given.update(zip(names, values))
        if not declared and not given:
            return None
        return self.check(skill, **given)


def call_fields(parameters: Mapping[str, Any]) -> dict[str, list]:
    """The goal fields carrying keyword ``parameters`` of a robot API call (nothing when there are
    none, so a skill caller that predates parameters sees the same fields); a non-number is a TypeError."""
    if not parameters:
        return {}
    for name, value in parameters.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {value!r}")
    return {NAMES_FIELD: list(parameters), VALUES_FIELD: [float(v) for v in parameters.values()]}


def offset_grasp(z: float, offset: float, fingertip_floor: float, name: str) -> float:
    """The grasp height ``z`` moved by grasp_height_offset ``offset``. ``fingertip_floor`` is the grasp
    height at which the fingertips touch the surface under ``name``: below it is a LimitExceededError."""
    lowest = fingertip_floor - z
    if offset < lowest - 1e-9:
        raise LimitExceededError(f"grasp_height_offset={offset:g} would push the fingertips into the surface under {name!r}; "
                                 f"the lowest grasp of it is grasp_height_offset={lowest:+.3f} m")
    return z + offset


def pull_fraction(thing: str, drawer: Mapping[str, Any] | None, params: Tuning | None) -> float:
    """The part of its travel the drawer of ``thing`` is pulled out for pull_distance in ``params``
    (1 without it); a door always opens fully, so a pull_distance given for one is refused."""
    if params is None or "pull_distance" not in params:
        return 1.0
    if drawer is None:
        if "pull_distance" in params.given:
            raise InvalidArgumentError(f"pull_distance applies to drawers; the {thing} has a door, which always opens fully")
        return 1.0
    travel = float(drawer["travel"])
    if params["pull_distance"] > travel + 1e-9:
        raise LimitExceededError(f"pull_distance={params['pull_distance']:g} is beyond the {thing} drawer's travel; "
                                 f"it comes out at most {travel:g} m")
    return min(1.0, params["pull_distance"] / travel)


def _safety(values: dict[str, Any], given: Mapping[str, Any], profile: RobotProfile) -> None:
    """The robot profile's limits, which win over the file's ranges: the maximum speed factor and the
    gripper's opening and force. A given value beyond them is refused, a default is capped."""
    limits = {
        "speed_factor": (profile.safety.max_speed_factor, "safety.max_speed_factor"),
        "gripper_width": (profile.gripper.max_width, "gripper.max_width"),
        "gripper_force": (profile.gripper.max_effort, "gripper.max_effort"),
    }
    for name, (limit, key) in limits.items():
        if name not in values or values[name] is None or values[name] <= limit + 1e-9:
            continue
        if name not in given:  # a default of the file beyond this robot's limit: the limit wins
            values[name] = limit
            continue
        raise LimitExceededError(
            f"{name}={values[name]:g} is above this robot's limit {limit:g} ({key} of the {profile.name} profile); use at most {limit:g}"
        )


@functools.lru_cache(maxsize=8)
def _read(path: str, _mtime: int) -> dict[str, dict[str, dict[str, Parameter]]]:
    """Parse and validate the file (cached per path and modification time)."""
    raw = load_yaml(path)
    out: dict[str, dict[str, dict[str, Parameter]]] = {}
    for world, skills in raw.items():
        if world not in WORLDS:
            raise ConfigError(f"{path}: unknown world {world!r} at the top level; use {' or '.join(WORLDS)}")
        if not isinstance(skills, dict):
            raise ConfigError(f"{path}: {world} must map skill names to their parameters")
        out[world] = {}
        for skill, params in skills.items():
            if not isinstance(params, dict) or not params:
                raise ConfigError(f"{path}: {world}.{skill} must map parameter names to their fields")
            out[world][str(skill)] = {
                str(name): _parameter(spec, str(name), f"{path}: {world}.{skill}.{name}") for name, spec in params.items()
            }
    return out


def _parameter(spec: Any, name: str, where: str) -> Parameter:
    """One parameter's fields, validated; errors name the key."""
    if not name.isidentifier():
        raise ConfigError(f"{where}: {name!r} is not a Python keyword name")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping with {', '.join(FIELDS[:5])}")
    extra = sorted(set(spec) - set(FIELDS))
    if extra:
        raise ConfigError(f"{where}: unknown field {extra[0]!r}; fields: {', '.join(FIELDS)}")
    for key in FIELDS[:5]:
        if key not in spec:
            raise ConfigError(f"{where}: missing key '{key}'")
    low, high = (_number(spec[k], f"{where}.{k}") for k in ("min", "max"))
    if not low < high:
        raise ConfigError(f"{where}: min ({low:g}) must be below max ({high:g})")
    integer = spec.get("integer", False)
    if not isinstance(integer, bool):
        raise ConfigError(f"{where}.integer: must be true or false, got {integer!r}")
    default: float | None
    if spec["default"] == PROFILE:
        if name not in PROFILE_DEFAULTS:
            raise ConfigError(f"{where}.default: only {', '.join(PROFILE_DEFAULTS)} can default to the robot profile's value")
        default = None
    else:
        default = _number(spec["default"], f"{where}.default")
        if not low <= default <= high:
            raise ConfigError(f"{where}.default: {default:g} is outside [{low:g}, {high:g}]")
    if integer and any(v is not None and v != round(v) for v in (low, high, default)):
        raise ConfigError(f"{where}: an integer parameter needs whole-number default, min and max")
    for key in ("unit", "doc"):
        if not isinstance(spec[key], str):
            raise ConfigError(f"{where}.{key}: must be a string, got {spec[key]!r}")
    if not spec["doc"].strip():
        raise ConfigError(f"{where}.doc: must say what the parameter does in one line")
    if integer and default is not None:
        default = int(default)
    return Parameter(name, default, low, high, spec["unit"], spec["doc"].strip(), integer)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    return float(value)
