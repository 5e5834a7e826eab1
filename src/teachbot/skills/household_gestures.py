"""Gestures of the household robot: pointing at a thing with the closed hand.

``point_at`` drives to where the arm reaches the thing (as grasping does), closes the fingers and holds
the fingertips a little above the thing's top, and stays so: the arm keeps pointing after the skill
returns, until the next motion. A full hand may point too; then what it holds hangs that far above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teachbot.errors import InvalidArgumentError, UnreachableError
from teachbot.skills.library import FINGERTIP_DEPTH

if TYPE_CHECKING:
    from teachbot.skills.household import HouseholdSkills

# metres between the fingertips (or the bottom of what the hand holds) and the top of the thing pointed
# at: low enough that a person sees which of two neighbours is meant, high enough to clear both
POINT_HEIGHT = 0.08


class Gestures:
    """The gestures of :class:`HouseholdSkills`, one of its parts (it provides the motion helpers used here)."""

    def skill_point_at(self: HouseholdSkills, object_name: str) -> dict:
        """Point at an object with the closed hand and keep pointing (see the module docstring); returns {}."""
        thing = self._thing(object_name)  # unknown: lists the known names, as grasp does
        held = self._holding()
        if object_name == held:
            raise InvalidArgumentError(f"cannot point at {object_name!r}: the hand holds it; place it first, or point at something else")
        if not thing.place:
            where = np.round(thing.position, 2).tolist()
            raise UnreachableError(f"{object_name!r} is not on any place the robot can reach (it lies at {where})")
        if self.layout.place(thing.place).hand is not None:
            raise UnreachableError(f"{object_name!r} is with the person; ask them about it instead of pointing")
        if thing.inside:
            self._reachable_inside(thing.place, repr(object_name))
        self._work_at(thing.place, thing.position)
        hang = FINGERTIP_DEPTH  # from the grasp point down to the lowest point of the hand (or of what it holds)
        if held:
            self._stage("hold", 0.3)
            grasp_z = float(self.kin.fk(self.arm.joint_positions())[0][2])
            h = self.view.things()[held]
            hang = max(hang, grasp_z - (float(self.to_arm(h.position)[2]) - float(h.size[2]) / 2))
        else:
            self._stage("close", 0.3)
            self._gripper(0.0)
        target = self.to_arm(thing.position + np.array([0.0, 0.0, float(thing.size[2]) / 2 + POINT_HEIGHT + hang]))
        self._stage("point", 0.5)
        self._move_joint_space(target, self._reachable_yaw(0.0, [target]))
        self._stage("pointing", 1.0)
        return {}
