"""RAIDER's grounded tools: what the issue-detection agent may ask about the scene and the robot.

``robot_holding()``, ``object_detection()``, ``dist_to_target(target)``, ``get_obj_state(obj)``,
``check_obj_relationship(relationship, obj)`` and ``get_obj_properties(obj)`` answer from the scene
model's queries (:class:`teachbot.perception.relations.SceneQueries`, tabletop or household), never
from the model's imagination. Names are matched forgivingly (case, underscores, small typos); a name
that fits several objects or none is a :class:`ToolError` that says which names exist. Every answer is
plain text or JSON. Pure Python, no ROS: the perception node serves the same tools to other clients.
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachbot.errors import InvalidArgumentError, TeachbotError
from teachbot.perception.relations import RELATIONS, SceneQueries
from teachbot.world.household_layout import HouseholdLayout

TOOL_DOCS: dict[str, str] = {
    "robot_holding": "robot_holding() -> what the robot's hand holds now, or that it is empty.",
    "object_detection": "object_detection() -> JSON: the objects the robot perceives (and the places, in a house).",
    "dist_to_target": "dist_to_target(target) -> how far an object or place is from the arm's base and whether the "
                      "arm can reach it (from where the robot stands, or after driving there).",
    "get_obj_state": "get_obj_state(obj) -> JSON: an object's or place's state (where it rests, held, open, on, "
                     "sliced, clean, filled, visible, ...).",
    "check_obj_relationship": "check_obj_relationship(relationship, obj) -> which objects stand in `relationship` to "
                              "`obj`; relationship is one of: " + ", ".join(r.replace("_", " ") for r in RELATIONS) + ".",
    "get_obj_properties": "get_obj_properties(obj) -> JSON: what kind of thing it is (pickable or graspable, "
                          "container, openable, sliceable, heavy, size, ...).",
}


class ToolError(TeachbotError):
    """A tool call that could not be answered (unknown or ambiguous name, bad relationship)."""


Box = tuple[tuple[float, float], tuple[float, float], tuple[float, float]]
AXES = ("x", "y", "z")


@dataclass(frozen=True)
class Reach:
    """How far the arm reaches from its base, and the box (in the arm's frame) its skills accept; a
    mobile robot can first drive to a place's location."""

    radius: float = 0.85  # metres from the arm's base (the Panda's reach)
    mobile: bool = False
    workspace: Box | None = None  # the robot profile's safety workspace, arm frame; None: the radius alone

    @classmethod
    def for_robot(cls, profile: Any, radius: float) -> Reach:
        """The reach of a robot profile (teachbot.robot_profile.RobotProfile): its workspace, mobile in a house."""
        box = tuple(tuple(float(v) for v in profile.safety.workspace[a]) for a in AXES)
        return cls(radius, mobile=profile.world == "household", workspace=box)  # type: ignore[arg-type]

    def outside(self, local: np.ndarray) -> str:
        """'' when a point in the arm's frame is inside the workspace, else what is wrong ('too high ...')."""
        if self.workspace is None:
            return ""
        words = {"x": ("too close to the arm's base", "too far ahead"), "y": ("too far to the right", "too far to the left"),
                 "z": ("too low", "too high")}
        for axis, value, (lo, hi) in zip(AXES, local, self.workspace, strict=True):
            if value < lo or value > hi:
                low, high = words[axis]
                return f"{low if value < lo else high} ({axis} {value:.2f} m in the arm's frame, allowed {lo:g} to {hi:g})"
        return ""


def normalise(name: str) -> str:
    """Lower case, words separated by one space, no leading article ('The Apple_Juice ' -> 'apple juice')."""
    return re.sub(r"^(?:the|a|an) ", "", re.sub(r"[\s_]+", " ", str(name)).strip().lower())


class GroundedTools:
    """The six tools over one scene. ``held()`` names what the hand holds ('' for nothing; by default
    the object whose state says held); ``layout`` (household) lets distances count a drive to a place."""

    def __init__(self, queries: SceneQueries, reach: Reach | None = None, held: Callable[[], str] | None = None,
                 layout: HouseholdLayout | None = None) -> None:
        self.queries = queries
        self.reach = reach or Reach()
        self._held = held
        self.layout = layout

    # ------------------------------------------------------------------ dispatch
    def functions(self) -> dict[str, Callable[..., str]]:
        """Tool name -> callable, for the agent and for servers."""
        return {name: getattr(self, name) for name in TOOL_DOCS}

    def call(self, name: str, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> str:
        """Run tool ``name``; a wrong tool, wrong arguments or an unknown object is a ToolError."""
        fn = self.functions().get(name)
        if fn is None:
            raise ToolError(f"there is no tool {name!r}; the tools are {', '.join(TOOL_DOCS)}")
        try:
            inspect.signature(fn).bind(*(args or []), **(kwargs or {}))
        except TypeError as exc:
            raise ToolError(f"{TOOL_DOCS[name].split(' -> ')[0]}: {exc}") from None
        try:
            return fn(*(args or []), **(kwargs or {}))
        except ToolError:
            raise
        except TeachbotError as exc:
            raise ToolError(str(exc)) from None

    # ------------------------------------------------------------------ names
    def _names(self) -> list[str]:
        return [o.name for o in self.queries.scene.objects()]

    def _places(self) -> list[str]:
        return list(self.queries.fixtures())

    def resolve(self, name: str) -> str:
        """The scene's name for ``name``: exact, then case and underscores, then a unique close match."""
        if not isinstance(name, str) or not name.strip():
            raise ToolError(f"expected an object's name, got {name!r}")
        known = [*self._names(), *self._places()]
        if name in known:
            return name
        by_norm: dict[str, list[str]] = {}
        for k in known:
            by_norm.setdefault(normalise(k), []).append(k)
        key = normalise(name)
        if len(by_norm.get(key, [])) == 1:
            return by_norm[key][0]
        words = [k for k in known if re.search(rf"\b{re.escape(key)}\b", normalise(k))]  # "cup" in "red cup"
        if len(words) > 1:
            raise ToolError(f"{name!r} could be any of {', '.join(sorted(words))}; name one of them")
        if len(words) == 1:
            return words[0]
        close = difflib.get_close_matches(key, list(by_norm), n=2, cutoff=0.8)  # typos: "apple juce"
        if len(close) == 2:
            raise ToolError(f"{name!r} could be {close[0]!r} or {close[1]!r}; name one of them")
        if close and len(by_norm[close[0]]) == 1:
            return by_norm[close[0]][0]
        raise ToolError(f"no object or place called {name!r}; the robot knows: {', '.join(sorted(known))}")

    # ------------------------------------------------------------------ the tools
    def held(self) -> str:
        """The name of what the hand holds, '' for nothing."""
        if self._held is not None:
            return self._held()
        # what the simulator or the gripper reports (the scene model's known state), without computing
        # every object's supports as queries.state() would
        return next((o.name for o in self.queries.scene.objects() if o.state.get("held") == "True"), "")

    def robot_holding(self) -> str:
        held = self.held()
        return f"The robot is holding {held}." if held else "The robot's hand is empty: it holds nothing."

    def object_detection(self) -> str:
        out: dict[str, Any] = {"objects": self._names()}
        places = self._places()
        if places:
            out["places"] = places
        return json.dumps(out)

    def dist_to_target(self, target: str) -> str:
        name = self.resolve(target)
        base, yaw = self.queries.robot_frame()
        here, wrong = self._reach_from(name, base, yaw)
        reach = self.reach.radius
        text = f"{name} is {here:.2f} m from the arm's base"
        if here <= reach and not wrong:
            return f"{text}: within the arm's reach ({reach:.2f} m)."
        why = f"outside the arm's workspace: {wrong}" if here <= reach else f"out of the arm's reach ({reach:.2f} m)"
        text += f": {why} from where the robot stands"
        if not self.reach.mobile or self.layout is None:
            return text + "."
        place = name if name in self._places() else self._place_of(name)
        if not place or place not in self.layout.places:
            return text + "; it rests on no place the robot can drive to."
        there, wrong = self._reach_from(name, *self._stance(place))
        if there <= reach and not wrong:
            return f"{text}; after move_to('{place}') it would be {there:.2f} m away: within reach."
        why = f"still outside the arm's workspace: {wrong}" if there <= reach else "still out of reach"
        return f"{text}; after move_to('{place}') it would be {there:.2f} m away: {why}."

    def _place_of(self, name: str) -> str:
        support = name
        for _ in range(8):  # down a stack to the furniture it stands on
            support = self.queries.supported_by(support)
            if not support or support in self._places():
                return support
        return ""

    def _stance(self, place: str) -> tuple[np.ndarray, float]:
        """The arm's base and heading with the base standing at ``place``'s location."""
        assert self.layout is not None
        x, y, yaw = self.layout.location_pose(place)
        return self.layout.base.arm_origin(x, y, yaw), yaw

    def _reach_from(self, name: str, arm: np.ndarray, yaw: float) -> tuple[float, str]:
        """Distance from the arm's base at ``arm`` (heading ``yaw``) to ``name``, and why the skills' workspace
        excludes the top of it, where grasps of tall things and presses go ('' when it does not; a place
        counts by its nearest edge and has no workspace check)."""
        fixture = self.queries.fixtures().get(name)
        if fixture is not None:
            return max(fixture.edge_distance(arm), 0.0), ""
        obj = self.queries.object(name)
        d = obj.position - arm
        top = d + np.array([0.0, 0.0, self.queries.body(name).top - float(obj.position[2])])  # where the hand goes
        c, s = math.cos(yaw), math.sin(yaw)
        local = np.array([c * top[0] + s * top[1], -s * top[0] + c * top[1], top[2]])
        return float(np.linalg.norm(d)), self.reach.outside(local)

    def get_obj_state(self, obj: str) -> str:
        name = self.resolve(obj)
        state = dict(self.queries.state(name))
        state.pop("seconds_since_seen", None)
        return json.dumps({"name": name, **state})

    def check_obj_relationship(self, relationship: str, obj: str) -> str:
        key = normalise(relationship).replace(" ", "_")
        if key not in RELATIONS:
            raise ToolError(f"unknown relationship {relationship!r}; use one of "
                            f"{', '.join(r.replace('_', ' ') for r in RELATIONS)}")
        name = self.resolve(obj)
        try:
            found = self.queries.related(key, name)
        except InvalidArgumentError as exc:
            raise ToolError(str(exc)) from None
        words = key.replace("_", " ")
        if not found:
            return f"Nothing is {words} {name}."
        return f"{', '.join(found)} {'is' if len(found) == 1 else 'are'} {words} {name}."

    def get_obj_properties(self, obj: str) -> str:
        name = self.resolve(obj)
        return json.dumps(self.queries.properties(name))
