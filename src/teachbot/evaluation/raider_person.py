"""The simulated person of Recov_Plan: answers a recovery plan's ``ask()`` from the case's ground truth.

For an ambiguity, "The <first candidate>, please."; asked where, a free work surface (household: the table,
counter or workbench with the fewest things; tabletop: the named point farthest from every object); asked
which or what, the grounded object; asked to bring closer a thing the robot cannot reach (an out-of-reach
case's key object named in the question, with "closer", "nearer" or "within reach"), the person moves it
within reach in the simulated world (:func:`bring_closer`, the paper's own recovery by asking) and says so; a
yes/no question, "Yes, please."; else "I leave that to you." Never the verdict. Pure Python, no ROS.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pybullet as pb

from teachbot.evaluation.raider_cases import RaiderCase, mentions
from teachbot.language.dialog import DialogChannel
from teachbot.raider.tools import normalise
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.world.household_layout import surface_point
from teachbot.world.scene import TabletopConfig

if TYPE_CHECKING:
    from teachbot.evaluation.raider_recovery import Goal

WORK_SURFACES = ("table", "counter", "workbench")
YES_NO = re.compile(r"^\W*(should|shall|can|could|may|do|does|would|will|is|are|want)\b")
CLOSER = re.compile(r"\b(?:closer|nearer|within (?:my |your |the robot's |its )?reach)\b")
TABLETOP_NEAR = 0.6  # metres from the arm's base: where the person puts a thing they bring closer on the tabletop
SETTLE_STEPS = 120


def far_objects(case: RaiderCase, world: HouseholdWorld | TabletopWorld) -> list[str]:
    """The things an out-of-reach case is about: its key facts (else its grounding) that are objects of the world."""
    names = set(world.object_names())
    facts = [alt for fact in case.facts for alt in fact if alt in names]
    return facts or [g for g in case.grounding if g in names]


def bring_closer(world: HouseholdWorld | TabletopWorld, name: str) -> None:
    """Move ``name`` within reach as a person would: household, to the near half of the surface it stands on
    (the side the robot stands at), where it is farthest from the other things there; tabletop, to the named
    point within TABLETOP_NEAR of the arm's base farthest from every other object. Physics settled."""
    objects = {o.name: o for o in world.objects()}
    thing = objects[name]
    others = [o.position[:2] for n, o in objects.items() if n != name and not o.held]
    if isinstance(world, HouseholdWorld):
        surface = world.surface(thing.place)
        spots = [surface_point(surface, -surface.half_extents[0] / 2, across) for across in (0.0, 0.15, -0.15, 0.3, -0.3)
                 if abs(across) < surface.half_extents[1] - 0.05]
        z = surface.z + float(thing.size[2]) / 2 + 0.01
    else:
        spots = [xy for xy in TabletopConfig.load().named_points.values() if float(np.hypot(*xy)) <= TABLETOP_NEAR]
        z = float(thing.position[2]) + 0.01
    spot = max(spots, key=lambda xy: min((float(np.hypot(*(np.array(xy) - p))) for p in others), default=1.0))
    pb.resetBasePositionAndOrientation(thing.body_id, [float(spot[0]), float(spot[1]), z], thing.orientation.tolist(),
                                       physicsClientId=world.client)
    world.step(SETTLE_STEPS)


class SimulatedPerson(DialogChannel):
    """Answers ``ask()`` at once from the case's ground truth; ``said`` holds only ``say()`` texts, ``asked`` the
    questions, ``brought`` what the person moved closer."""

    def __init__(self, case: RaiderCase, world: HouseholdWorld | TabletopWorld, goal: Goal) -> None:
        super().__init__(timeout=1.0)
        self.case, self.world, self.goal = case, world, goal
        self.asked: list[str] = []
        self.brought: list[str] = []

    def ask(self, question: str) -> dict:
        if not isinstance(question, str):
            raise TypeError(f"ask() takes a string, got {type(question).__name__}")
        self.asked.append(question)
        self.put_user(self.answer(question))
        return self.wait_for_trigger()

    def answer(self, question: str) -> str:
        q = question.lower()
        if self.case.issue_type == "IA":
            return f"The {self.case.grounding[0]}, please."
        far = [n for n in far_objects(self.case, self.world) if mentions(q, n)] if self.case.issue_type == "IU1" else []
        if far and CLOSER.search(q):
            for name in far:
                bring_closer(self.world, name)
            self.brought.extend(far)
            return f"There you go: I put the {' and the '.join(far)} closer to you."
        if re.search(r"\bwhere\b|\b(which|what) (place|spot|location)\b", q):
            return f"Put it {self.free_place()}, please."
        if re.search(r"\b(which|what)\b", q) and self.case.grounding:
            return f"The {self.case.grounding[0]}, please."
        return "Yes, please." if YES_NO.search(q) else "I leave that to you."

    def free_place(self) -> str:
        objects = self.world.objects()
        if isinstance(self.world, HouseholdWorld):
            free = [p for p in WORK_SURFACES if normalise(p) not in self.goal.named]
            return "on the " + min(free, key=lambda p: (sum(o.place == p for o in objects), free.index(p)))
        points = TabletopConfig.load().named_points
        spread = {n: min((float(np.hypot(*(np.array(xy) - o.position[:2]))) for o in objects), default=1.0) for n, xy in points.items()}
        return "at the " + max(points, key=lambda n: spread[n])
