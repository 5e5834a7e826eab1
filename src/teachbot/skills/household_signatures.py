"""The one table of the household robot's skills: what each takes from a skill goal.

Read by the skills node (a goal's fields -> the skill's keyword arguments), the skill client (the
keyword arguments -> a goal), the household console API (one console function per skill with a
target) and the evaluations that name the household's physical skills.
"""

from __future__ import annotations

from dataclasses import dataclass

HAND = "hand"


@dataclass(frozen=True)
class HouseholdSignature:
    """``target``: the keyword the goal's target becomes ('' when the skill has none); ``extras``: the other
    goal fields it takes (``hand``, ``speed_factor``, ``timeout``)."""

    target: str
    extras: tuple[str, ...] = ()


HOUSEHOLD_SKILLS: dict[str, HouseholdSignature] = {
    "move_to": HouseholdSignature("location", ("speed_factor",)),
    "grasp": HouseholdSignature("object_name", (HAND,)),
    "place_object": HouseholdSignature("location", (HAND,)),
    "handover_object_to_human": HouseholdSignature("", (HAND, "timeout")),
    "point_at": HouseholdSignature("object_name"),
    "open": HouseholdSignature("thing"),
    "close": HouseholdSignature("thing"),
    "toggle": HouseholdSignature("thing"),
    "slice": HouseholdSignature("object_name"),
    "wipe": HouseholdSignature("surface"),
}

# skill -> the keyword of its one target: the skills the console offers as one-argument functions
HOUSEHOLD_TARGETS: dict[str, str] = {name: s.target for name, s in HOUSEHOLD_SKILLS.items() if s.target}
