"""The one world factory: the simulated world of a robot profile, and the skills the skills node would run
on it in this process. ``teachbot sim`` (the sim node) and every evaluation build their worlds here, so
what an evaluation measures runs on the world the robot runs on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from teachbot.robot_profile import RobotProfile
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.direct import DirectArm, DirectBase, WorldHousehold, WorldObjects
from teachbot.simrobot.snapshot import SceneObject
from teachbot.skills.household import HouseholdSkills
from teachbot.skills.library import SkillLibrary
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.household_objects import Catalog
from teachbot.world.scene import CATEGORIES, ObjectSpec, SceneSpec, TabletopConfig

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


def world_from_scene(scene: Sequence[SceneObject], profile: RobotProfile | None = None,
                     table: TabletopConfig | None = None) -> TabletopWorld:
    """A fresh tabletop world holding ``scene`` as it stood (a true copy: its own physics client; blocks in a bowl
    or on another block at their height), the robot at home. Objects of a kind the table has no body for are left
    out (ValueError when that leaves nothing). The caller closes it (``world.close()``)."""
    table = table or TabletopConfig.load()
    specs = [ObjectSpec(o.name, o.category, o.color, (o.position[0], o.position[1]), o.yaw)
             for o in scene if o.category in CATEGORIES]
    if not specs:
        raise ValueError("the scene holds no block or bowl to rebuild")
    world = make_world(profile or sim_profile("tabletop"), table=table)
    if not isinstance(world, TabletopWorld):
        world.close()
        raise ValueError(f"{world.profile.name}: only a tabletop world is rebuilt from a scene")
    world.reset(SceneSpec(tuple(specs)), heights={o.name: o.position[2] for o in scene if o.category == "block"})
    return world
