"""What is where, for the task memory's logs: each object's type, colour and what it rests in or on.

The robot perceives objects as boxes (centre and size, in one frame) and the household's thing states
(type, the place it stands at, whether the robot holds it). An object rests in or on another when its
centre lies over the other's footprint and its bottom is near the other's top (a fruit in a bin, a cube on
a cube); else it is at its place (``table``), in the robot's hand (``robot``) or in the person's
(``person``). Pure geometry, no ROS: the interaction manager feeds it perception's messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from teachbot.taskmemory.specs import PERSON, ROBOT, ObjectInfo

SUPPORT_GAP = 0.03  # metres between a resting object's bottom and its support's top, at most
FOOTPRINT_MARGIN = 0.01  # metres the footprint is widened by, for an object resting near a bin's rim


@dataclass(frozen=True)
class Seen:
    """One object as perceived: its centre and extent (same frame for all), type, place and held flag."""

    position: tuple[float, float, float]
    size: tuple[float, float, float]
    type: str = ""
    color: str = ""
    place: str = ""
    held: bool = False


def color_of(name: str, type_: str, colors: Mapping[str, object], type_colors: Mapping[str, str]) -> str:
    """An object's colour: the colour word of its name ('red cup'), else its type's colour (a banana: yellow)."""
    for word in name.lower().split():
        if word in colors:
            return word
    return type_colors.get(type_, "")


def environment(seen: Mapping[str, Seen], person_place: str = PERSON) -> dict[str, ObjectInfo]:
    """Where each object is: ``robot``, ``person``, the object it rests in or on, or its place."""
    out = {}
    for name, s in seen.items():
        if s.held:
            at = ROBOT
        elif s.place == person_place:
            at = PERSON
        else:
            at = _support(name, s, seen) or s.place
        out[name] = ObjectInfo(s.type, s.color, at)
    return out


def _support(name: str, s: Seen, seen: Mapping[str, Seen]) -> str:
    """The object ``name`` rests in or on: the highest one under its centre whose top is at its bottom."""
    centre, half = np.asarray(s.position, float), np.asarray(s.size, float) / 2
    bottom = centre[2] - half[2]
    best, best_top = "", -np.inf
    for other, o in seen.items():
        if other == name or o.held:
            continue
        oc, oh = np.asarray(o.position, float), np.asarray(o.size, float) / 2
        top = oc[2] + oh[2]
        over = abs(centre[0] - oc[0]) <= oh[0] + FOOTPRINT_MARGIN and abs(centre[1] - oc[1]) <= oh[1] + FOOTPRINT_MARGIN
        if over and -SUPPORT_GAP <= bottom - top <= SUPPORT_GAP and top > best_top and oc[2] < centre[2]:
            best, best_top = other, top
    return best
