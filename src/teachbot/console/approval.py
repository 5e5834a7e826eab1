"""The approval gate for motion: a person approves a robot motion before it starts (config/approval.yaml).

Each motion function of a profile has a rule: ``never`` runs at once, ``always`` asks, ``{outside: zone}``
asks when a target of the call lies outside the zone or when where it lies cannot be told (fail safe). A
target's ``offsets`` (config: the parameters that shift it, such as tabletop ``place_offset_x/y``) are added to
its position before the zone check: the zone sees the point the robot will really go to. A household place
zone needs no offsets: place_object's place_offset_along/across move the spot only on the surface of the place it
names, or of the place the named object stands on (skills.household refuses one that would leave it before
anything moves), so the place checked is the place the robot puts things. The question goes
through the dialog with the call as it will run (the console wraps the gate inside the learned parameters, so
they are in it; wording: prompts/safety.yaml); only a clear yes (config ``approve``) said after the question, or
its button, lets the motion start (DialogChannel.ask_after: words typed before the question are not its answer);
anything else or no answer raises :class:`~teachbot.errors.MotionNotApproved` carrying the person's words. ROS-free.

The wrappers replace the parent process's implementations, the functions the sandbox dispatches to; the
sandbox worker only holds names, so console code cannot reach around the gate.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from teachbot.config import load_yaml, resolve_config
from teachbot.console.emergency_stop import safety_texts
from teachbot.console.issue_guard import call_text
from teachbot.errors import ConfigError, MotionNotApproved
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.sandbox import robot_time
from teachbot.tracing import set_attributes, span

CALL_CHARS = 300  # of the statement shown in the question; longer arguments are cut with '...'

NEVER, ALWAYS, OUTSIDE = "never", "always", "outside"
NO_GATE = ("", "none", "off")  # config/interaction.yaml `approval:` values that turn the gate off


@dataclass(frozen=True)
class BoxZone:
    """An axis-aligned box in the profile's frame; z is checked only on a target with a height."""

    name: str
    x: tuple[float, float]
    y: tuple[float, float]
    z: tuple[float, float] | None = None

    def contains(self, position: Sequence[float]) -> bool:
        inside = self.x[0] <= position[0] <= self.x[1] and self.y[0] <= position[1] <= self.y[1]
        if self.z is not None and len(position) > 2:
            inside = inside and self.z[0] <= position[2] <= self.z[1]
        return inside


@dataclass(frozen=True)
class PlaceZone:
    """Named places: a target is inside when it is one of them or an object at one of them."""

    name: str
    places: tuple[str, ...]


Zone = BoxZone | PlaceZone


@dataclass(frozen=True)
class Rule:
    """When a motion asks: ``never``, ``always``, or ``outside`` its ``zone``."""

    confirm: str
    zone: Zone | None = None


@dataclass(frozen=True)
class Parameters:
    """A declared signature's parameters: positional names in order, and the literal defaults."""

    positional: tuple[str, ...]
    names: frozenset[str]
    defaults: Mapping[str, Any]

    @classmethod
    def parse(cls, signature: str) -> Parameters:
        """From a config/robot_api signature such as ``(obj_name: str, target: str, **params: float) -> str``."""
        a = cast(ast.FunctionDef, ast.parse(f"def _{signature}: pass").body[0]).args
        positional = [p.arg for p in (*a.posonlyargs, *a.args)]
        defaults: dict[str, Any] = {}
        for param, default in zip(positional[len(positional) - len(a.defaults):], a.defaults):
            defaults[param] = _literal(default)
        for param, default in zip(a.kwonlyargs, a.kw_defaults):
            if default is not None:
                defaults[param.arg] = _literal(default)
        return cls(tuple(positional), frozenset(positional) | {p.arg for p in a.kwonlyargs}, defaults)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's value of each parameter it gives or defaults (leniently: the function checks the call)."""
        values = dict(self.defaults)
        values.update(zip(self.positional, args))
        values.update({k: v for k, v in kwargs.items() if k in self.names})
        return values


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


@dataclass(frozen=True)
class ApprovalConfig:
    """One profile's section of config/approval.yaml, checked against the profile's robot API."""

    profile: str
    rules: Mapping[str, Rule]  # every motion of the profile
    targets: Mapping[str, tuple[str, ...]]  # motion -> the arguments that say where it goes
    parameters: Mapping[str, Parameters]  # motion -> its declared parameters
    approve: frozenset[str]
    wording: Mapping[str, str]
    position_of: str = ""
    objects_at: str = ""
    # motion -> target argument -> the keyword parameters that shift its position, one per axis (x, y[, z])
    offsets: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def load(cls, name_or_path: str, api: RobotApi, wording: Mapping[str, str] | None = None) -> ApprovalConfig:
        """The section of ``api.profile`` in config/approval.yaml (or a path); errors name the file and the key."""
        path = resolve_config(name_or_path)
        return cls.from_raw(load_yaml(path), api, str(path), wording)

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any], api: RobotApi, source: str,
                 wording: Mapping[str, str] | None = None) -> ApprovalConfig:
        def fail(key: str, problem: str) -> ConfigError:
            return ConfigError(f"{source}: {key}: {problem}")

        approve = raw.get("approve")
        if not isinstance(approve, list) or not approve or not all(isinstance(w, str) and _words(w) for w in approve):
            raise fail("approve", f"must be a non-empty list of quoted words (YAML reads a bare yes as true), got {approve!r}")
        profiles = raw.get("profiles")
        if not isinstance(profiles, Mapping) or not isinstance(profiles.get(api.profile), Mapping):
            raise fail(f"profiles.{api.profile}", "missing: the gate needs a section for this robot API profile")
        key = f"profiles.{api.profile}"
        section = profiles[api.profile]
        declared = {f.name: f for f in api.functions}
        lookups = {}
        for name in ("position_of", "objects_at"):
            value = section.get(name, "")
            if not isinstance(value, str) or (value and value not in declared):
                raise fail(f"{key}.{name}", f"{value!r} is not a function of config/robot_api/{api.profile}.yaml")
            lookups[name] = value
        zones = _zones(section.get("zones", {}) or {}, f"{key}.zones", fail)
        motions = section.get("motions")
        if not isinstance(motions, Mapping) or not motions:
            raise fail(f"{key}.motions", "must map each motion function to the list of its target arguments")
        targets, parameters = {}, {}
        for name, args in motions.items():
            if name not in declared:
                raise fail(f"{key}.motions.{name}", f"not a function of config/robot_api/{api.profile}.yaml")
            try:
                parameters[name] = Parameters.parse(declared[name].signature)
            except SyntaxError:
                raise fail(f"{key}.motions.{name}", f"its declared signature {declared[name].signature!r} does not parse") from None
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise fail(f"{key}.motions.{name}", f"must be a list of argument names, got {args!r}")
            unknown = [a for a in args if a not in parameters[name].names]
            if unknown:
                raise fail(f"{key}.motions.{name}", f"{unknown} are not parameters of {name}{declared[name].signature}")
            targets[name] = tuple(args)
        if set(targets) != api.motion_names:  # one list of what moves the robot: the robot API's `motion: true`
            raise fail(f"{key}.motions", f"must list exactly the functions marked `motion: true` in config/robot_api/"
                                         f"{api.profile}.yaml: {sorted(api.motion_names)}; it lists {sorted(targets)}")
        default = _rule(section.get("default", NEVER), zones, f"{key}.default", fail)
        own = section.get("rules", {}) or {}
        if not isinstance(own, Mapping):
            raise fail(f"{key}.rules", f"must map motion functions to rules, got {own!r}")
        for name in own:
            if name not in targets:
                raise fail(f"{key}.rules.{name}", "not a motion; declare it under motions with its target arguments first")
        rules = {name: _rule(own[name], zones, f"{key}.rules.{name}", fail) if name in own else default for name in targets}
        offsets = _offsets(section.get("offsets", {}) or {}, targets, f"{key}.offsets", fail)
        if wording is None:
            wording = load_wording()
        return cls(api.profile, rules, targets, parameters, frozenset(_words(w) for w in approve), wording, **lookups,
                   offsets=offsets)


def load_wording() -> dict[str, str]:
    """The ``approval:`` texts of prompts/safety.yaml."""
    return safety_texts("approval", ("question", "outside", "unknown", "no_target", "refused", "no_answer"))


def _zones(raw: Any, key: str, fail: Callable[[str, str], ConfigError]) -> dict[str, Zone]:
    if not isinstance(raw, Mapping):
        raise fail(key, f"must map zone names to a box {{x, y, z}} or {{places: [...]}}, got {raw!r}")
    zones: dict[str, Zone] = {}
    for name, spec in raw.items():
        where = f"{key}.{name}"
        if isinstance(spec, Mapping) and set(spec) == {"places"}:
            zones[name] = PlaceZone(str(name), _places(spec["places"], where, fail))
        elif isinstance(spec, Mapping) and {"x", "y"} <= set(spec) <= {"x", "y", "z"}:
            zones[name] = BoxZone(str(name), *(_range(spec[a], f"{where}.{a}", fail) for a in ("x", "y")),
                                  _range(spec["z"], f"{where}.z", fail) if "z" in spec else None)
        else:
            raise fail(where, f"a zone is a box {{x: [min, max], y: [min, max], z: [min, max]}} (z optional) or {{places: [...]}}, "
                              f"got {spec!r}")
    return zones


def _offsets(raw: Any, targets: Mapping[str, tuple[str, ...]], key: str,
             fail: Callable[[str, str], ConfigError]) -> dict[str, dict[str, tuple[str, ...]]]:
    """``{motion: {target: [x parameter, y parameter]}}``: the keyword parameters that shift a target's position."""
    if not isinstance(raw, Mapping):
        raise fail(key, f"must map motions to {{target argument: [offset parameters per axis]}}, got {raw!r}")
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for motion, spec in raw.items():
        if motion not in targets:
            raise fail(f"{key}.{motion}", "not a motion listed under motions")
        if not isinstance(spec, Mapping):
            raise fail(f"{key}.{motion}", f"must map target arguments to offset parameters, got {spec!r}")
        out[motion] = {}
        for arg, names in spec.items():
            if arg not in targets[motion]:
                raise fail(f"{key}.{motion}.{arg}", f"not a target argument of {motion}: {list(targets[motion])}")
            if (not isinstance(names, list) or not 1 <= len(names) <= 3
                    or not all(isinstance(n, str) and n.isidentifier() for n in names)):
                raise fail(f"{key}.{motion}.{arg}", f"must list one parameter name per axis (x, y, z), got {names!r}")
            out[motion][arg] = tuple(names)
    return out


def _range(value: Any, key: str, fail: Callable[[str, str], ConfigError]) -> tuple[float, float]:
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            or value[0] > value[1]):
        raise fail(key, f"must be [min, max] in metres, got {value!r}")
    return float(value[0]), float(value[1])


def _places(value: Any, key: str, fail: Callable[[str, str], ConfigError]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise fail(key, f"must be a non-empty list of place names, got {value!r}")
    return tuple(value)


def _rule(raw: Any, zones: Mapping[str, Zone], key: str, fail: Callable[[str, str], ConfigError]) -> Rule:
    if raw in (NEVER, ALWAYS):
        return Rule(raw)
    if isinstance(raw, Mapping) and set(raw) == {OUTSIDE}:
        zone = raw[OUTSIDE]
        if isinstance(zone, list):  # an inline list of places
            places = _places(zone, f"{key}.{OUTSIDE}", fail)
            return Rule(OUTSIDE, PlaceZone(" or ".join(places), places))
        if isinstance(zone, str) and zone in zones:
            return Rule(OUTSIDE, zones[zone])
        raise fail(f"{key}.{OUTSIDE}", f"unknown zone {zone!r}; known: {sorted(zones)} (or a list of places)")
    raise fail(key, f"must be never, always or {{outside: <zone>}}, got {raw!r}")


def _words(text: str) -> str:
    """An answer as compared with the approve list: lower-case words without punctuation."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


class _Unknown(Exception):  # noqa: N818 - internal: where a target lies cannot be told, and why
    pass


class ApprovalGate:
    """Wraps a console's robot functions so that motions with a rule ask the person first."""

    def __init__(self, config: ApprovalConfig, dialog: DialogChannel, log: Callable[[str], None] = lambda _line: None) -> None:
        self.config, self.dialog, self.log = config, dialog, log
        self._functions: Mapping[str, Callable[..., Any]] = {}

    @classmethod
    def load(cls, setting: str, api: RobotApi, dialog: DialogChannel,
             log: Callable[[str], None] = lambda _line: None) -> ApprovalGate | None:
        """The gate that config/interaction.yaml ``approval:`` names (a file under config/ or a path); None for ``none``."""
        if setting.strip().lower() in NO_GATE:
            return None
        return cls(ApprovalConfig.load(setting, api), dialog, log)

    def wrap(self, functions: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """``functions`` with every motion whose rule is not ``never`` asking first (the rest unchanged)."""
        self._functions = dict(functions)  # the lookups (get_obj_pos, list_objects) are these implementations
        out = dict(functions)
        for name, rule in self.config.rules.items():
            if rule.confirm != NEVER and name in functions:
                out[name] = self._gated(name, functions[name])
        return out

    def _gated(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def gated(*args: Any, **kwargs: Any) -> Any:
            reason = self.reason(name, args, kwargs)
            if reason is not None:
                self.approve(call_text(name, args, kwargs), reason)
            return fn(*args, **kwargs)

        return gated

    def reason(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        """Why this call needs approval (the question's middle, '' for ``always``), or None when it may run at once."""
        rule, texts = self.config.rules[name], self.config.wording
        if rule.confirm == NEVER:
            return None
        if rule.confirm == ALWAYS or rule.zone is None:
            return ""
        values = self.config.parameters[name].bind(args, kwargs)
        targets = self.config.targets[name]
        if not targets:
            return texts["no_target"].format(zone=rule.zone.name)
        for arg in targets:
            value = values.get(arg)
            shift = {n: kwargs.get(n, 0.0) for n in self.config.offsets.get(name, {}).get(arg, ())}
            what = (repr(value) if arg in values else arg) + "".join(f" {n}={v!r}" for n, v in shift.items() if v)
            try:
                if arg not in values:
                    raise _Unknown("the call does not give it")
                inside, where = self._inside(rule.zone, value, tuple(shift.values()))
            except _Unknown as exc:
                return texts["unknown"].format(what=what, zone=rule.zone.name, why=str(exc))
            if not inside:
                return texts["outside"].format(what=what, where=where, zone=rule.zone.name)
        return None

    def approve(self, call: str, reason: str) -> None:
        """Ask the person; returns on a clear yes, raises MotionNotApproved otherwise (TimeoutError: no answer)."""
        texts = self.config.wording
        if len(call) > CALL_CHARS:  # arguments may be long: the question must stay one the dialog will say
            call = call[:CALL_CHARS] + "...)"
        question = self.dialog.fit(texts["question"].format(call=call, reason=reason))
        with span("approval", {"approval.call": call, "approval.reason": reason, "approval.question": question}) as current:
            try:
                with robot_time.not_counted():  # waiting for the person is not robot time
                    answer = self.dialog.ask_after(question, "approval")
            except TimeoutError:
                set_attributes(current, {"approval.answer": "(no answer)", "approval.approved": False})
                raise MotionNotApproved(texts["no_answer"].format(call=call, timeout=self.dialog.timeout)) from None
            said = str(answer.get("text", "")) if isinstance(answer, Mapping) else str(answer)
            approved = _words(said) in self.config.approve
            set_attributes(current, {"approval.answer": said, "approval.approved": approved})
            if approved:
                self.log(f"approved by the person: {call}")
                return
            raise MotionNotApproved(texts["refused"].format(call=call, answer=said))

    # ------------------------------------------------------------------ where a target lies
    def _inside(self, zone: Zone, value: Any, shift: tuple[Any, ...] = ()) -> tuple[bool, str]:
        """(whether ``value``, moved by ``shift`` (per axis), lies inside ``zone``, where it lies as text); _Unknown
        when that cannot be told."""
        if isinstance(zone, BoxZone):
            position = self._position(value)
            for axis, delta in enumerate(shift[:len(position)]):
                if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta):
                    raise _Unknown(f"the offset {delta!r} is not a number")
                position[axis] += float(delta)
            return zone.contains(position), f" at {[round(v, 3) for v in position]}"
        if not isinstance(value, str):
            raise _Unknown(f"{zone.name} is a list of places, and {value!r} names none")
        if value in zone.places:
            return True, ""
        lookup = self._lookup(self.config.objects_at, "objects_at")
        for place in zone.places:
            try:
                if value in lookup(place):
                    return True, ""
            except Exception as exc:  # noqa: BLE001 - any failure to locate is an unknown target: ask
                raise _Unknown(f"{self.config.objects_at}({place!r}) failed: {exc}") from None
        return False, ""

    def _position(self, value: Any) -> list[float]:
        if isinstance(value, (list, tuple)) and len(value) in (2, 3) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return [float(v) for v in value]
        if not isinstance(value, str):
            raise _Unknown(f"{value!r} is neither a name nor a position")
        lookup = self._lookup(self.config.position_of, "position_of")
        try:
            position = lookup(value)
        except Exception as exc:  # noqa: BLE001 - an unknown name or no object list yet: ask
            raise _Unknown(f"{self.config.position_of}({value!r}) failed: {exc}") from None
        if isinstance(position, (list, tuple)) and len(position) >= 2:
            try:
                return [float(v) for v in position[:3]]
            except (TypeError, ValueError):
                pass
        raise _Unknown(f"{self.config.position_of}({value!r}) gave {position!r}")

    def _lookup(self, name: str, key: str) -> Callable[..., Any]:
        if not name or name not in self._functions:
            raise _Unknown(f"config/approval.yaml profiles.{self.config.profile}.{key} names no function of this console")
        return self._functions[name]
