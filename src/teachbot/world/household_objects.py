"""Household objects without physics: the type catalog (config/household/objects.yaml) and the state rules.

The world builds bodies from :class:`ObjectType`; skills change states through :class:`StateRules`, whose
errors say in one line what is wrong and what to do; the renderer colours a thing with :func:`tint`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, require
from teachbot.errors import ConfigError, InvalidArgumentError, SceneSpecError, UnknownObjectError
from teachbot.paths import config_path

SHAPES = ("box", "cylinder", "sphere")
PROPERTIES = ("pickable", "openable", "togglable", "sliceable", "fillable", "cleanable", "heavy", "drink", "food", "tool", "container")
MAX_GRASP_WIDTH = 0.07  # the gripper opens 0.08 m; keep a centimetre of clearance
# state flag -> (word when true, word when false, property that gives a thing the flag)
FLAGS: dict[str, tuple[str, str, str]] = {
    "open": ("open", "closed", "openable"),
    "on": ("on", "off", "togglable"),
    "sliced": ("sliced", "whole", "sliceable"),
    "clean": ("clean", "dirty", "cleanable"),
    "filled": ("filled", "empty", "fillable"),
    "held": ("held", "not held", "pickable"),
}
STATE_WORDS: dict[str, tuple[str, bool]] = {w: (f, v) for f, (t, n, _) in FLAGS.items() for w, v in ((t, True), (n, False))}
_SIZE_LEN = {"box": 3, "cylinder": 2, "sphere": 1}
RGB = tuple[float, float, float]


class StateError(InvalidArgumentError):
    """A state change that the thing's properties or current state forbid; ``cause`` names which rule."""

    def __init__(self, message: str, cause: str, thing: str) -> None:
        super().__init__(message)
        self.cause = cause  # not_<property> | already_<state word> | needs_tool | unknown_liquid
        self.thing = thing


@dataclass(frozen=True)
class ObjectType:
    """One kind of object: geometry for the world, properties and initial states for the rules."""

    name: str
    shape: str
    size: tuple[float, ...]
    mass: float
    rgb: RGB
    properties: frozenset[str]
    default_states: dict[str, bool] = field(default_factory=dict)
    color: str = ""
    any_color: bool = False
    contents: str | None = None
    random: bool = True  # False: seeded random scenes never draw it (types added after them, so they stay as they were)

    @property
    def grasp_width(self) -> float:
        """Width a top-down parallel gripper must close on: a box's shorter side, else the diameter."""
        return min(self.size[0], self.size[1]) if self.shape == "box" else self.size[0]

    def has(self, prop: str) -> bool:
        return prop in self.properties


@dataclass
class ObjectStates:
    """Mutable state of one thing; a flag is None where the thing's properties do not give it."""

    open: bool | None = None
    on: bool | None = None
    sliced: bool | None = None
    clean: bool | None = None
    filled: bool | None = None
    held: bool | None = None
    contents: str | None = None

    @classmethod
    def for_properties(
        cls, properties: Iterable[str], defaults: Mapping[str, bool] | None = None, contents: str | None = None
    ) -> ObjectStates:
        """Each flag its properties give, at ``defaults`` or else closed, off, whole, clean, empty, not held."""
        props, defaults = set(properties), dict(defaults or {})
        states = cls(**{f: defaults.get(f, f == "clean") for f, (_, _, p) in FLAGS.items() if p in props})
        states.contents = contents if states.filled else None
        return states

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name in FLAGS and getattr(self, f.name) is not None}
        if self.filled and self.contents:
            out["contents"] = self.contents
        return out

    def describe(self) -> str:
        """Short words, e.g. "closed, dirty" or "clean, filled with milk"; empty string for a stateless thing."""
        words = []
        for flag, value in self.to_dict().items():
            if flag == "contents" or (flag == "held" and not value):
                continue
            word = FLAGS[flag][0 if value else 1]
            words.append(f"{word} with {self.contents.replace('_', ' ')}" if flag == "filled" and value and self.contents else word)
        return ", ".join(words)


class Thing:
    """Anything with a name whose states the rules change: an object instance, or a place (fridge, table).

    ``states`` may be an :class:`ObjectStates` or a mapping of flags; missing flags take the defaults.
    """

    def __init__(
        self,
        name: str,
        properties: Iterable[str],
        states: ObjectStates | Mapping[str, bool] | None = None,
        kind: str = "",
        rgb: RGB | None = None,
    ) -> None:
        self.name = name
        self.properties = frozenset(properties)
        unknown = sorted(self.properties - set(PROPERTIES))
        if unknown:
            raise SceneSpecError(f"thing '{name}': unknown property {', '.join(map(repr, unknown))}; known: {', '.join(PROPERTIES)}")
        self.states = states if isinstance(states, ObjectStates) else ObjectStates.for_properties(self.properties, states)
        self.kind = kind or name  # the object type, or the place's own name
        self.rgb = rgb

    def has(self, prop: str) -> bool:
        return prop in self.properties

    def __repr__(self) -> str:
        return f"Thing({self.name!r}, kind={self.kind!r}, {self.states.describe() or 'no states'})"


@dataclass(frozen=True)
class Tint:
    """How one state word changes a colour (see ``state_tints`` in objects.yaml)."""

    scale: float = 1.0
    mix: RGB | str | None = None  # an RGB, or "liquid"
    amount: float = 0.0
    alpha: float = 1.0


def tint(
    base_rgb: Iterable[float], states: ObjectStates | Mapping[str, Any], tints: Mapping[str, Tint], liquids: Mapping[str, RGB] | None = None
) -> tuple[float, float, float, float]:
    """RGBA of a thing with ``base_rgb`` in ``states``: each matching state word's tint, in ``tints`` order."""
    current = states.to_dict() if isinstance(states, ObjectStates) else dict(states)
    rgb = [float(c) for c in base_rgb]
    alpha = 1.0
    for word, t in tints.items():
        flag, value = STATE_WORDS[word]
        if current.get(flag) is None or bool(current[flag]) != value:
            continue
        rgb = [min(1.0, c * t.scale) for c in rgb]
        target = t.mix
        if target == "liquid":
            target = (liquids or {}).get(_key(str(current.get("contents") or "water")), (0.55, 0.75, 0.95))
        if target is not None:
            rgb = [(1 - t.amount) * c + t.amount * m for c, m in zip(rgb, target)]  # type: ignore[arg-type]
        alpha = t.alpha
    return (rgb[0], rgb[1], rgb[2], alpha)


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "_")


def _rgb(value: Any, where: str) -> RGB:
    if not isinstance(value, list | tuple) or len(value) != 3 or not all(isinstance(c, int | float) and 0 <= c <= 1 for c in value):
        raise ConfigError(f"{where} must be [r, g, b] with each in 0..1, got {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def parse_type(name: str, raw: Any, src: str, liquids: Mapping[str, RGB]) -> ObjectType:
    """The object type ``name`` of a catalog file ``src`` (``raw``: its mapping); a bad field is a ConfigError naming it."""
    where = f"{src}: type '{name}'"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping, got {raw!r}")
    shape = require(raw, "shape", where, str)
    if shape not in SHAPES:
        raise ConfigError(f"{where}: shape '{shape}' is not one of {', '.join(SHAPES)}")
    size = require(raw, "size", where, list)
    if len(size) != _SIZE_LEN[shape] or not all(isinstance(s, int | float) and s > 0 for s in size):
        raise ConfigError(f"{where}: a {shape} needs size of {_SIZE_LEN[shape]} positive numbers (metres), got {size!r}")
    props = require(raw, "properties", where, list)
    unknown = [p for p in props if p not in PROPERTIES]
    if unknown:
        raise ConfigError(f"{where}: unknown property {', '.join(map(repr, unknown))}; known: {', '.join(PROPERTIES)}")
    states = raw.get("states") or {}
    if not isinstance(states, dict):
        raise ConfigError(f"{where}: states must be a mapping of flag: true/false, got {states!r}")
    for flag, value in states.items():
        if isinstance(flag, bool):
            raise ConfigError(f"{where}: state key {flag} is a YAML boolean; quote it ('on': false), as YAML reads bare on/off/yes/no so")
        if flag not in FLAGS or not isinstance(value, bool):
            raise ConfigError(f"{where}: state '{flag}: {value}' is not a flag ({', '.join(FLAGS)}) set to true/false")
        if FLAGS[flag][2] not in props:
            raise ConfigError(f"{where}: state '{flag}' needs the property '{FLAGS[flag][2]}'")
    contents = raw.get("contents")
    if contents is not None and contents not in liquids:
        raise ConfigError(f"{where}: contents '{contents}' is not a liquid ({', '.join(liquids)})")
    mass, color = require(raw, "mass", where, (int, float)), require(raw, "color", where, str)
    if mass <= 0:
        raise ConfigError(f"{where}: mass must be positive (kg), got {mass!r}")
    rgb = _rgb(require(raw, "rgb", where), f"{where}: rgb")
    drawn = raw.get("random", True)
    if not isinstance(drawn, bool):
        raise ConfigError(f"{where}: random must be true or false (whether seeded random scenes draw the type), got {drawn!r}")
    t = ObjectType(
        name, shape, tuple(map(float, size)), float(mass), rgb, frozenset(props), dict(states), color, bool(raw.get("any_color")),
        contents, drawn,
    )
    if t.has("pickable") and t.grasp_width > MAX_GRASP_WIDTH:
        raise ConfigError(
            f"{where}: pickable but {t.grasp_width:.3f} m wide; the gripper takes at most {MAX_GRASP_WIDTH} m (shrink it or drop pickable)"
        )
    return t


def _parse_tint(word: Any, raw: Any, where: str) -> Tint:
    if isinstance(word, bool):
        raise ConfigError(f"{where}: the key is a YAML boolean; quote it ('on':), as YAML reads bare on/off/yes/no so")
    if word not in STATE_WORDS or not isinstance(raw, dict) or set(raw) - {"scale", "mix", "amount", "alpha"}:
        raise ConfigError(f"{where}: expected a state word ({', '.join(STATE_WORDS)}) mapped to scale/mix/amount/alpha, got {raw!r}")
    mix = raw.get("mix")
    try:
        numbers = [float(raw.get(k, d)) for k, d in (("scale", 1.0), ("amount", 0.0), ("alpha", 1.0))]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: scale, amount and alpha must be numbers, got {raw!r}") from None
    return Tint(numbers[0], mix if mix in (None, "liquid") else _rgb(mix, f"{where}.mix"), numbers[1], numbers[2])


@dataclass(frozen=True)
class Catalog:
    """The object types, colours, liquids and state tints of config/household/objects.yaml."""

    types: dict[str, ObjectType]
    colors: dict[str, RGB]
    liquids: dict[str, RGB]
    tints: dict[str, Tint]
    source: Path

    @classmethod
    def load(cls, path: str | Path | None = None) -> Catalog:
        path = Path(path) if path else config_path("household", "objects.yaml")
        raw, src = load_yaml(path), str(path)
        colors = {str(k): _rgb(v, f"{src}: colors.{k}") for k, v in require(raw, "colors", src, dict).items()}
        liquids = {str(k): _rgb(v, f"{src}: liquids.{k}") for k, v in (raw.get("liquids") or {}).items()}
        types = {str(n): parse_type(str(n), v, src, liquids) for n, v in require(raw, "types", src, dict).items()}
        tints = {str(w): _parse_tint(w, t, f"{src}: state_tints.{w}") for w, t in (raw.get("state_tints") or {}).items()}
        return cls(types, colors, liquids, tints, path)

    def type(self, name: str) -> ObjectType:
        """The type called ``name`` ("apple juice" and "apple_juice" alike), or an error listing the known ones."""
        found = self.types.get(_key(name))
        if found is None:
            raise SceneSpecError(f"unknown object type '{name}'; known types: {', '.join(sorted(self.types))}")
        return found

    def names(self) -> list[str]:
        return sorted(self.types)

    def types_with(self, prop: str, drawn_only: bool = True) -> list[str]:
        """The types with ``prop``, the ones seeded random scenes draw from: a ``random: false`` type is left out
        unless ``drawn_only`` is False (so adding such types leaves every seeded scene as it was)."""
        if prop not in PROPERTIES:
            raise InvalidArgumentError(f"unknown property '{prop}'; known: {', '.join(PROPERTIES)}")
        return sorted(n for n, t in self.types.items() if t.has(prop) and (t.random or not drawn_only))

    def make(self, name: str, type_name: str, color: str | None = None) -> Thing:
        """A fresh instance of a type, in its default states, coloured ``color`` (a name from ``colors``) if given."""
        t = self.type(type_name)
        if color is not None and color not in self.colors:
            raise SceneSpecError(f"unknown colour '{color}' for '{name}'; known colours: {', '.join(self.colors)}")
        states = ObjectStates.for_properties(t.properties, t.default_states, t.contents)
        return Thing(name, t.properties, states, t.name, self.colors[color] if color else t.rgb)


class StateRules:
    """The registry of things whose states skills change, and the rules for changing them.

    Every misuse raises :class:`StateError` with one line naming the cause and the fix; an unknown name
    raises UnknownObjectError listing the known ones.
    """

    def __init__(self, things: Iterable[Thing] = (), liquids: Iterable[str] | None = None) -> None:
        self._things: dict[str, Thing] = {}
        self.liquids = None if liquids is None else sorted(liquids)
        for thing in things:
            self.register(thing)

    def register(self, thing: Thing) -> Thing:
        if thing.name in self._things:
            raise SceneSpecError(f"two things are called '{thing.name}'; give each a unique name")
        self._things[thing.name] = thing
        return thing

    def thing(self, name: str | Thing) -> Thing:
        if isinstance(name, Thing):
            return name
        if name not in self._things:
            raise UnknownObjectError(f"unknown object or place '{name}'; known: {', '.join(sorted(self._things)) or 'none'}")
        return self._things[name]

    def names_with(self, prop: str) -> list[str]:
        return [n for n, t in self._things.items() if t.has(prop)]

    def _need(self, target: str | Thing, prop: str, verb: str) -> tuple[Thing, ObjectStates]:
        thing = self.thing(target)
        if not thing.has(prop):
            known = ", ".join(self.names_with(prop))
            raise StateError(
                f"cannot {verb} '{thing.name}': it is not {prop} ({f'{prop} here: {known}' if known else f'nothing here is {prop}'})",
                f"not_{prop}",
                thing.name,
            )
        return thing, thing.states

    def _set(self, thing: Thing, flag: str, value: bool, hint: str = "") -> None:
        if getattr(thing.states, flag) == value:
            word = FLAGS[flag][0 if value else 1]
            raise StateError(f"the {thing.name} is already {word}{hint}", f"already_{word}", thing.name)
        setattr(thing.states, flag, value)

    def _holding(self, held_tool: str | Thing | None, kind: str) -> bool:
        if held_tool is None:
            return False
        if isinstance(held_tool, Thing):
            return held_tool.kind == kind
        return (self._things[held_tool].kind if held_tool in self._things else _key(held_tool)) == kind

    def _tool_hint(self, kind: str, held_tool: str | Thing | None) -> str:
        name = next((n for n, t in self._things.items() if t.kind == kind), kind)
        held = held_tool.name if isinstance(held_tool, Thing) else held_tool
        first = f"put the {held} down, then " if held else ""
        return f"{first}hold a {kind} first: grasp('{name}')"

    def open(self, target: str | Thing) -> None:
        thing, _ = self._need(target, "openable", "open")
        self._set(thing, "open", True)

    def close(self, target: str | Thing) -> None:
        thing, _ = self._need(target, "openable", "close")
        self._set(thing, "open", False)

    def switch(self, target: str | Thing, on: bool) -> None:
        thing, _ = self._need(target, "togglable", f"switch {'on' if on else 'off'}")
        self._set(thing, "on", on)

    def toggle(self, target: str | Thing) -> bool:
        """Flip on/off; returns the new state (True = on)."""
        thing, states = self._need(target, "togglable", "toggle")
        states.on = not states.on
        return states.on

    def slice(self, target: str | Thing, held_tool: str | Thing | None) -> None:
        thing, _ = self._need(target, "sliceable", "slice")
        if not self._holding(held_tool, "knife"):
            raise StateError(f"cannot slice '{thing.name}': {self._tool_hint('knife', held_tool)}", "needs_tool", thing.name)
        self._set(thing, "sliced", True)

    def wipe(self, target: str | Thing, held_tool: str | Thing | None) -> None:
        """Clean a dirty object or surface with the sponge in hand."""
        thing, _ = self._need(target, "cleanable", "wipe")
        if not self._holding(held_tool, "sponge"):
            raise StateError(f"cannot wipe '{thing.name}': {self._tool_hint('sponge', held_tool)}", "needs_tool", thing.name)
        self._set(thing, "clean", True)

    def soil(self, target: str | Thing) -> None:
        """Make a cleanable thing dirty (scenario setup, or after use)."""
        thing, _ = self._need(target, "cleanable", "soil")
        self._set(thing, "clean", False)

    def fill(self, target: str | Thing, with_what: str) -> None:
        thing, states = self._need(target, "fillable", "fill")
        liquid = _key(with_what)
        if self.liquids is not None and liquid not in self.liquids:
            raise StateError(
                f"cannot fill '{thing.name}' with '{with_what}': liquids here: {', '.join(self.liquids)}", "unknown_liquid", thing.name
            )
        what = f" with {states.contents.replace('_', ' ')}" if states.filled and states.contents else ""
        self._set(thing, "filled", True, f"{what}; empty('{thing.name}') first")
        states.contents = liquid

    def empty(self, target: str | Thing) -> None:
        thing, states = self._need(target, "fillable", "empty")
        self._set(thing, "filled", False)
        states.contents = None
