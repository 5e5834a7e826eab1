"""Grounding a skill-level correction: "a bit higher" as a metric change in the object's frame and scale.

Deterministic, no LLM. The correction model names a parameter, a direction and an amount ("small",
"large") or an explicit change ("2 cm higher": 0.02); :func:`ground` turns that into the parameter's new
value. One step is ``corrections.step_fraction`` of the object's size along the axis the parameter moves
(its height for ``grasp_height_offset``, its footprint for the place offsets), a configured drawer step for
``pull_distance``, one pass for ``wipe_passes``, a factor for ``speed_factor`` and a share of the range for
the rest; a large amount is ``large_factor`` steps. The result is clamped to the declared range.

Direction words for the place offsets (config/skill_parameters.yaml): tabletop ``place_offset_x`` is + to
the table's right, ``place_offset_y`` + towards its top side, which is the side nearest the robot
(config/tabletop.yaml: the robot stands at y = 0, the table lies at negative y), so "further away" is -y;
household ``place_offset_along`` is + away from the robot, ``place_offset_across`` + to its left.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.paths import config_path
from teachbot.skills.parameters import Parameter

# words that raise or lower a parameter's value
UP = frozenset({"+", "up", "upward", "upwards", "higher", "high", "more", "increase", "raise", "larger", "bigger", "wider", "longer",
                "further", "farther", "faster", "quicker", "stronger", "harder", "firmer", "tighter", "plus", "positive", "extra"})
DOWN = frozenset({"-", "down", "downward", "downwards", "lower", "low", "less", "decrease", "smaller", "narrower", "shorter", "slower",
                  "weaker", "softer", "gentler", "looser", "fewer", "minus", "negative"})
# spatial words of the place offsets -> (parameter, sign); the one the skill declares applies
SPATIAL: dict[str, tuple[tuple[str, int], ...]] = {
    "left": (("place_offset_x", -1), ("place_offset_across", +1)),
    "right": (("place_offset_x", +1), ("place_offset_across", -1)),
    "away": (("place_offset_y", -1), ("place_offset_along", +1)),
    "closer": (("place_offset_y", +1), ("place_offset_along", -1)),
    "top": (("place_offset_y", +1),),
    "bottom": (("place_offset_y", -1),),
}
SPATIAL_SYNONYMS = {"forward": "away", "forwards": "away", "further": "away", "farther": "away", "back": "closer",
                    "backward": "closer", "backwards": "closer", "nearer": "closer", "towards": "closer", "toward": "closer",
                    "near": "closer"}
PLACE_OFFSETS = frozenset(name for options in SPATIAL.values() for name, _ in options)
SMALL = frozenset({"", "small", "bit", "a bit", "little", "a little", "slightly", "slight", "tiny", "medium", "some", "step", "one"})
LARGE = frozenset({"large", "much", "a lot", "lot", "big", "far", "way", "very", "significantly", "lots", "two"})
HEIGHT_AXIS = frozenset({"grasp_height_offset"})
AXIS = {"place_offset_x": 0, "place_offset_along": 0, "place_offset_y": 1, "place_offset_across": 1}
DECIMALS = 4  # values are written with at most this many decimals (0.1 mm, 0.1 mN...)


@dataclass(frozen=True)
class CorrectionConfig:
    """``knowledge.corrections`` of config/knowledge.yaml: the handler's switch, prompt and grounding steps."""

    enabled: bool = True
    # DROC's two steps: first the dependence prompt decides from the correction alone what it depends on (the
    # last interaction, the initial one, nothing), then the solver prompt sees that history only. False: one
    # call whose prompt shows the whole history and which also says the dependence (the paper's Ours-E)
    history_selection: bool = True
    dependence_prompt: str = "droc_dependence.txt"
    dependence_max_tokens: int = 64
    prompt: str = "droc_correction.txt"
    full_history_prompt: str = "droc_correction_full.txt"
    max_tokens: int = 256
    step_fraction: float = 0.25     # one step: this share of the object's size along the parameter's axis
    large_factor: float = 2.0       # a large amount is this many steps
    default_size: float = 0.08      # m, the size of an object whose size is not known
    drawer_step: float = 0.05       # m, one step of pull_distance
    speed_factor_step: float = 1.5  # faster multiplies speed_factor by this, slower divides
    range_fraction: float = 0.2     # one step of a parameter without an object scale (gripper width/force, approach height)
    history_lines: int = 40         # transcript lines the prompt shows

    @classmethod
    def load(cls, path: str | Path | None = None) -> CorrectionConfig:
        path = Path(path) if path else config_path("knowledge.yaml")
        return cls.from_mapping(load_yaml(path), str(path))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], source: str = "knowledge config") -> CorrectionConfig:
        """Build from the parsed YAML; a missing key keeps its default, a bad or unknown one raises ConfigError naming it."""
        config = read_section(cls, raw, "corrections", source)
        problems = [text for bad, text in (
            (config.max_tokens < 1, "corrections.max_tokens >= 1"),
            (config.dependence_max_tokens < 1, "corrections.dependence_max_tokens >= 1"),
            (config.step_fraction <= 0, "corrections.step_fraction > 0"),
            (config.large_factor < 1, "corrections.large_factor >= 1"),
            (config.default_size <= 0, "corrections.default_size > 0"),
            (config.drawer_step <= 0, "corrections.drawer_step > 0"),
            (config.speed_factor_step <= 1, "corrections.speed_factor_step > 1"),
            (not 0 < config.range_fraction <= 1, "0 < corrections.range_fraction <= 1"),
            (config.history_lines < 1, "corrections.history_lines >= 1"),
        ) if bad]
        if problems:
            raise ConfigError(f"{source}: need {', '.join(problems)} (see config/knowledge.yaml)")
        return config


def read_section(cls: type, raw: Mapping[str, Any], name: str, source: str) -> Any:
    """``cls`` (a dataclass of bool/int/float/str fields with defaults) from ``knowledge.<name>`` of ``raw``."""
    top = raw.get("knowledge", {}) if isinstance(raw, Mapping) else None
    if top is None:
        top = {}
    if not isinstance(top, Mapping):
        raise ConfigError(f"{source}: 'knowledge' must be a mapping, got {top!r}")
    section = top.get(name, {})
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: 'knowledge.{name}' must be a mapping, got {section!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise ConfigError(f"{source}: unknown key knowledge.{name}.{unknown[0]}; known: {', '.join(known)}")
    values: dict[str, Any] = {}
    for key, spec in known.items():
        if key not in section:
            continue
        value, kind = section[key], type(spec.default)
        where = f"knowledge.{name}.{key}"
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{source}: {where} must be true or false, got {value!r}")
        elif kind is str:
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{source}: {where} must be a non-empty string, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)) \
                or not math.isfinite(value):
            raise ConfigError(f"{source}: {where} must be a{'n int' if kind is int else ' float'}, got {value!r}")
        values[key] = kind(value)
    return cls(**values)


@dataclass(frozen=True)
class Grounded:
    """A parameter's change: ``base`` -> ``value`` (clamped to the range when ``clamped``), as ``change`` text."""

    parameter: str
    base: float | int
    value: float | int
    clamped: bool
    change: str


def words(text: str) -> list[str]:
    """Lower-case words of ``text``; a lone '+' or '-' is a word too."""
    text = str(text).strip().casefold()
    return [text] if text in ("+", "-") else re.findall(r"[a-z0-9]+", text)


def resolve(declared: Mapping[str, Parameter], parameter: str, direction: str) -> tuple[str, int] | None:
    """The parameter a correction changes and its sign (+1, -1; 0 when no direction is said) among the
    ``declared`` parameters of the skill; None when they do not fit (an undeclared parameter, a spatial word
    for a parameter it does not move)."""
    said = words(direction)
    for word in said:
        key = SPATIAL_SYNONYMS.get(word, word)
        if key not in SPATIAL:
            continue
        if parameter in declared and parameter not in PLACE_OFFSETS:
            if word in UP or word in DOWN:
                break  # "further" of pull_distance: more
            return None  # "left" for a grasp height: it does not move that way
        for name, sign in SPATIAL[key]:
            if name in declared:
                return name, sign
        return None
    if parameter not in declared:
        return None
    for word in said:
        if word in UP:
            return parameter, +1
        if word in DOWN:
            return parameter, -1
    return parameter, 0


def amount_factor(amount: Any, config: CorrectionConfig) -> float:
    """How many steps an amount is: small ones 1, large ones ``large_factor``; anything else 1."""
    said = words(str(amount or ""))
    if " ".join(said) in LARGE or (any(w in LARGE for w in said) and not any(w in SMALL for w in said)):
        return config.large_factor
    return 1.0


def step(parameter: Parameter, size: Sequence[float] | None, config: CorrectionConfig) -> float:
    """One step of ``parameter`` for an object of ``size`` ((x, y, z) extents in m; None: unknown)."""
    if parameter.integer:
        return 1.0
    if parameter.name == "pull_distance":
        return config.drawer_step
    if parameter.name in HEIGHT_AXIS:
        return config.step_fraction * _extent(size, 2, config)
    if parameter.name in AXIS:
        return config.step_fraction * _extent(size, AXIS[parameter.name], config)
    return config.range_fraction * (parameter.max - parameter.min)


def ground(parameter: Parameter, base: float, sign: int, amount: Any, value: float | None, size: Sequence[float] | None,
           config: CorrectionConfig, absolute: bool = False) -> Grounded:
    """The new value of ``parameter`` from ``base``: ``value`` (an explicit change, or the new value when
    ``absolute``) when given, else ``sign`` times the amount's steps; clamped to the range, rounded."""
    if absolute and value is not None:
        target = float(value)
    elif value is not None:
        target = base + (sign * abs(float(value)) if sign else float(value))
    elif parameter.name == "speed_factor":
        target = base * config.speed_factor_step ** (sign * amount_factor(amount, config))
    else:
        steps = amount_factor(amount, config)
        if parameter.integer:
            steps = max(1.0, round(steps))
        target = base + sign * steps * step(parameter, size, config)
    clamped_value = min(parameter.max, max(parameter.min, target))
    clamped = not math.isclose(clamped_value, target, abs_tol=1e-9)
    new = rounded(clamped_value, parameter)
    unit = f" {parameter.unit}" if parameter.unit else ""
    change = f"{parameter.name} {number_text(rounded(base, parameter))} -> {number_text(new)}{unit}"
    if clamped:
        change += f" (clamped to the range {parameter.range_text()})"
    return Grounded(parameter.name, rounded(base, parameter), new, clamped, change)


def rounded(value: float, parameter: Parameter) -> float | int:
    """``value`` as the parameter takes it: a whole number for an integer parameter, else at most DECIMALS decimals."""
    if parameter.integer:
        return int(round(value))
    result = round(float(value), DECIMALS)
    return 0.0 if result == 0 else result


def number_text(value: float | int) -> str:
    """A value as the transcript shows it: 0.02, 3, 0 (no trailing zeros)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _extent(size: Sequence[float] | None, axis: int, config: CorrectionConfig) -> float:
    """The object's extent along ``axis`` (a single number is its size along every axis); the default when unknown."""
    try:
        values = [float(v) for v in size] if size is not None else []
    except (TypeError, ValueError):
        values = []
    if len(values) == 1:
        values = values * 3
    if axis < len(values) and math.isfinite(values[axis]) and values[axis] > 0:
        return values[axis]
    return config.default_size
