"""The one world factory: the simulated world of a robot profile, and the skills the skills node would run
on it in this process. ``teachbot sim`` (the sim node) and every evaluation build their worlds here, so
what an evaluation measures runs on the world the robot runs on."""

from __future__ import annotations

from typing import Any

from teachbot.robot_profile import RobotProfile
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.direct import DirectArm, DirectBase, WorldHousehold, WorldObjects
from teachbot.skills.household import HouseholdSkills
from teachbot.skills.library import SkillLibrary
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.household_objects import Catalog
from teachbot.world.scene import TabletopConfig

# the simulated robot of each kind of world (config/robots/<name>.yaml)
SIM_PROFILES = {"tabletop": "panda_sim", "household": "household_sim"}


def sim_profile(kind: str) -> RobotProfile:
    """The simulated robot of a kind of world ('tabletop' or 'household')."""
    return RobotProfile.load(SIM_PROFILES[kind])


def make_world(profile: RobotProfile, *, layout: HouseholdLayout | None = None, catalog: Catalog | None = None,
               table: TabletopConfig | None = None, **options: Any) -> TabletopWorld | HouseholdWorld:
    """The world of ``profile``'s kind, empty until its ``reset(scene)``: a kitchen with the given layout and
    object catalog (the shipped ones by default), or a table. ``options``: gui, time_step, grasp_assist."""
    if profile.world == "household":
        return HouseholdWorld(profile, layout, catalog, **options)
    return TabletopWorld(profile, table, **options)


def make_skills(world: TabletopWorld | HouseholdWorld) -> SkillLibrary:
    """The skill library the skills node runs for the world's robot, on the world in this process."""
    if isinstance(world, HouseholdWorld):
        return HouseholdSkills(world.profile, DirectArm(world), DirectBase(world), WorldHousehold(world), world.layout)
    return SkillLibrary(world.profile, DirectArm(world), WorldObjects(world))
