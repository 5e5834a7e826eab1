"""The household profile's robot functions (config/robot_api/household.yaml) over the skills.

ROS-free like :mod:`teachbot.console.tabletop_api`: ``skills`` is anything with ``call(name, **fields)``
returning a result with ``success``, ``code`` and ``message``; ``objects`` returns the names of the
objects the robot knows about and ``states`` the states of things (perception, or the simulator).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from teachbot.console.tabletop_api import ARGUMENT_ERRORS, SkillCaller
from teachbot.errors import ErrorCode
from teachbot.language.dialog import DialogChannel
from teachbot.skills.household_signatures import HOUSEHOLD_TARGETS
from teachbot.skills.parameters import call_fields
from teachbot.world.household_layout import HouseholdLayout


class HouseholdRobot:
    """Implementations of config/robot_api/household.yaml."""

    def __init__(
        self,
        skills: SkillCaller,
        objects: Callable[[], Sequence[str]],
        states: Callable[[], dict[str, dict[str, Any]]],
        dialog: DialogChannel,
        layout: HouseholdLayout | None = None,
        where: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.skills = skills
        self._objects = objects
        self._states = states
        self.dialog = dialog
        self.layout = layout or HouseholdLayout.load()
        self._where = where  # object -> the place it stands at, or the object it rests in or on (list_objects(location))

    def functions(self) -> dict[str, Callable[..., Any]]:
        out: dict[str, Callable[..., Any]] = {
            "wait_for_trigger": self.dialog.wait_for_trigger,
            "ask": self.dialog.ask,
            "say": self.dialog.say,
            "list_objects": self.list_objects,
            "list_locations": self.list_locations,
            "get_location_coordinates": self.get_location_coordinates,
            "get_object_state": self.get_object_state,
            "handover_object_to_human": self.handover_object_to_human,
        }
        for name, field in HOUSEHOLD_TARGETS.items():
            out[name] = self._skill_function(name, name, field)
        return out

    def list_objects(self, location: str = "") -> list[str]:
        names = list(self._objects())
        if not location:
            return names
        if not isinstance(location, str):
            raise TypeError(f"list_objects() takes a location's name, got {type(location).__name__}")
        where = self._where() if self._where is not None else {}
        if location not in self.layout.places and location not in names:
            raise ValueError(f"unknown location {location!r}. Use one of list_locations() {self.layout.names()}")
        if self._where is None:
            raise RuntimeError("where objects are is not known in this setup; call list_objects() without a location")
        return [n for n in names if n != location and _rests_at(n, location, where)]

    def list_locations(self) -> list[str]:
        return self.layout.names()

    def get_location_coordinates(self, location: str) -> list[float]:
        if location not in self.layout.places:
            raise ValueError(f"unknown location {location!r}. Use one of list_locations() {self.layout.names()}")
        return self.layout.coordinates(location)

    def get_object_state(self, object_name: str) -> dict[str, Any]:
        states = self._states()
        if object_name in states:
            return {k: v for k, v in states[object_name].items() if k != "held" or v}
        known = sorted({*self._objects(), *self.layout.names()})
        if object_name in known:
            return {}
        raise ValueError(f"unknown object {object_name!r}. Use one of list_objects() or list_locations(): {known}")

    def handover_object_to_human(self, hand: str = "right") -> str:
        return self._call("handover_object_to_human", hand=hand)

    def _skill_function(self, name: str, skill: str, field: str) -> Callable[..., str]:
        """The console function ``name``: its target, its plain arguments (move_to's speed_factor, a
        hand), and any other keywords as the skill's parameters (config/skill_parameters.yaml), which
        the skill checks: an unknown or out-of-range one comes back as a ValueError naming the range."""
        def call(target: str, *args: Any, **kwargs: Any) -> str:
            if not isinstance(target, str):
                raise TypeError(f"{name}() takes a name as its first argument, got {type(target).__name__}")
            plain = ("speed_factor",) if name == "move_to" else ("hand",) if name in ("grasp", "place_object") else ()
            if len(args) > len(plain):
                raise TypeError(f"{name}() takes {len(plain) + 1} positional argument{'s' if plain else ''}; give parameters by name")
            extra = dict(zip(plain, args))
            for key in [k for k in kwargs if k in plain]:
                extra[key] = kwargs.pop(key)
            return self._call(skill, **{field: target}, **extra, **call_fields(kwargs))

        call.__name__ = name
        return call

    def _call(self, skill: str, **fields: Any) -> str:
        result = self.skills.call(skill, **fields)
        if result.success:
            return "success"
        raise (ValueError if ErrorCode(result.code) in ARGUMENT_ERRORS else RuntimeError)(result.message)


def _rests_at(name: str, location: str, where: dict[str, str], depth: int = 8) -> bool:
    """Whether ``name`` is at ``location``: there, or in or on something that is (a fruit in a bin on the table)."""
    at = where.get(name, "")
    for _ in range(depth):
        if at == location:
            return True
        if at not in where:
            return False
        at = where[at]
    return False
