"""Skill parameters a correction can change (config/skill_parameters.yaml, teachbot.skills.parameters):
the file and its checks, and in the tabletop simulation (direct, no ROS) that a parameter changes what
the robot does while an out-of-range one is refused before anything moves."""

from __future__ import annotations

import dataclasses
import re
import textwrap

import numpy as np
import pytest

from teachbot.console.tabletop_api import TabletopRobot
from teachbot.errors import ConfigError, ErrorCode, InvalidArgumentError, LimitExceededError
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.robot_profile import RobotProfile
from teachbot.simrobot.direct import DirectArm, DirectSkills, WorldObjects
from teachbot.skills.household_signatures import HOUSEHOLD_TARGETS
from teachbot.skills.library import SkillLibrary
from teachbot.skills.parameters import SkillParameters, Tuning, call_fields, offset_grasp, pull_fraction
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.scene import scene_from_yaml

REQUIRED = {
    "tabletop": {"pick": {"grasp_height_offset", "approach_height", "gripper_width", "gripper_force", "speed_factor"},
                 "place": {"place_offset_x", "place_offset_y", "approach_height", "speed_factor"},
                 "put_first_on_second": {"grasp_height_offset", "place_offset_x", "place_offset_y", "speed_factor"}},
    "household": {"grasp": {"grasp_height_offset", "approach_height", "gripper_width", "gripper_force", "speed_factor"},
                  "place_object": {"place_offset_along", "place_offset_across"}, "open": {"pull_distance"},
                  "wipe": {"wipe_passes"}, "move_to": {"speed_factor"}},
}
SCENE = """
objects:
  - {category: block, color: red, position: [-0.1, -0.45]}
  - {category: block, color: green, position: [0.12, -0.6]}
  - {category: bowl, color: blue, position: [0.1, -0.35]}
"""


@pytest.fixture(scope="module")
def sim_params():
    return SkillParameters.load(profile=RobotProfile.load("panda_sim"))


def write(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------------------------------------- the file
@pytest.mark.parametrize("world", ["tabletop", "household"])
def test_the_shipped_file_declares_every_parameter_with_its_range_unit_and_doc(world):
    params = SkillParameters.load(world)
    for skill, names in REQUIRED[world].items():
        declared = params.declared(skill)
        assert names <= set(declared), (skill, set(declared))
        for p in declared.values():
            assert p.min < p.max and p.doc and "\n" not in p.doc
            assert p.default is None or p.min <= p.default <= p.max
    assert params.declared("no_such_skill") == {}


def test_defaults_reproduce_the_skills_before_parameters():
    """Numbers the skills used to have built in: the profile's values, the full drawer, three passes."""
    for name in ("panda_sim", "panda_real", "household_sim"):
        profile = RobotProfile.load(name)
        params = SkillParameters.load(profile=profile)
        skill = "pick" if profile.world == "tabletop" else "grasp"
        assert params.check(skill) == {
            "grasp_height_offset": 0.0, "approach_height": profile.skills.approach_height, "gripper_width": profile.gripper.max_width,
            "gripper_force": profile.gripper.effort, "speed_factor": profile.safety.default_speed_factor,
        }
    household = SkillParameters.load(profile=RobotProfile.load("household_sim"))
    drawer = HouseholdLayout.load().place("cupboard").drawer
    assert household.check("open") == {"pull_distance": float(drawer["travel"])}
    assert household.check("wipe") == {"wipe_passes": 3, "speed_factor": 0.3}
    assert household.check("move_to") == {"speed_factor": 0.5}
    assert household.check("place_object")["place_offset_along"] == 0.0
    assert SkillParameters.load("tabletop").check("pick")["approach_height"] is None  # unbound: the robot decides


def test_check_fills_defaults_and_refuses_with_the_range(sim_params):
    values = sim_params.check("put_first_on_second", grasp_height_offset=0.01, place_offset_y=-0.02)
    assert values["grasp_height_offset"] == 0.01 and values["place_offset_y"] == -0.02 and values["place_offset_x"] == 0.0
    assert values.given == {"grasp_height_offset", "place_offset_y"}
    with pytest.raises(InvalidArgumentError) as bad:
        sim_params.check("put_first_on_second", grasp_height_offset=0.2)
    assert str(bad.value) == "grasp_height_offset=0.2 is outside its safe range [-0.03, 0.05] m"
    with pytest.raises(InvalidArgumentError, match=r"unknown parameter 'height' for pick; known: grasp_height_offset, approach_height"):
        sim_params.check("pick", height=0.1)
    with pytest.raises(InvalidArgumentError, match="unknown parameter 'speed' for wait; it takes none"):
        sim_params.check("wait", speed=1)
    assert sim_params.check("wait") == {}
    for bad_value in ("high", True, None, float("nan")):
        with pytest.raises(InvalidArgumentError, match="grasp_height_offset"):
            sim_params.check("pick", grasp_height_offset=bad_value)
    household = SkillParameters.load("household")
    assert household.check("wipe", wipe_passes=2.0)["wipe_passes"] == 2
    with pytest.raises(InvalidArgumentError, match=r"wipe_passes must be a whole number in \[1, 6\] passes, got 2.5"):
        household.check("wipe", wipe_passes=2.5)
    with pytest.raises(InvalidArgumentError, match=r"wipe_passes=9 is outside its safe range \[1, 6\] passes"):
        household.check("wipe", wipe_passes=9)


def test_the_robot_profiles_safety_limits_win_over_the_ranges():
    real = RobotProfile.load("panda_real")  # max_speed_factor 0.5
    with pytest.raises(LimitExceededError, match=r"speed_factor=0.8 is above this robot's limit 0.5 \(safety.max_speed_factor"):
        SkillParameters.load(profile=real).check("pick", speed_factor=0.8)
    weak = dataclasses.replace(real, gripper=dataclasses.replace(real.gripper, max_effort=50.0, max_width=0.07))
    params = SkillParameters.load(profile=weak)
    with pytest.raises(LimitExceededError, match=r"gripper_force=60 is above this robot's limit 50 \(gripper.max_effort"):
        params.check("pick", gripper_force=60)
    with pytest.raises(LimitExceededError, match=r"gripper_width=0.08 is above .* \(gripper.max_width"):
        params.check("pick", gripper_width=0.08)
    safety = dataclasses.replace(real.safety, max_speed_factor=0.2, default_speed_factor=0.1)
    slow = dataclasses.replace(real, world="household", safety=safety)
    assert SkillParameters.load(profile=slow).check("wipe")["speed_factor"] == 0.2  # the file's default 0.3, capped
    with pytest.raises(LimitExceededError):
        SkillParameters.load(profile=slow).check("wipe", speed_factor=0.3)
    assert RobotProfile.load("panda_sim").gripper.max_effort == 70.0


def test_a_grasp_cannot_push_the_fingertips_into_the_surface_and_a_door_takes_no_pull():
    assert offset_grasp(0.024, 0.01, 0.011, "red block") == pytest.approx(0.034)
    with pytest.raises(LimitExceededError, match=r"under 'red block'; the lowest grasp of it is grasp_height_offset=-0.013"):
        offset_grasp(0.024, -0.02, 0.011, "red block")
    household = SkillParameters.load("household")
    drawer = {"travel": 0.32}
    assert pull_fraction("cupboard", drawer, household.check("open")) == 1.0
    assert pull_fraction("cupboard", drawer, household.check("open", pull_distance=0.16)) == pytest.approx(0.5)
    assert pull_fraction("fridge", None, household.check("open")) == 1.0
    with pytest.raises(InvalidArgumentError, match="pull_distance applies to drawers; the fridge has a door"):
        pull_fraction("fridge", None, household.check("open", pull_distance=0.2))
    with pytest.raises(LimitExceededError, match="beyond the cupboard drawer's travel; it comes out at most 0.2 m"):
        pull_fraction("cupboard", {"travel": 0.2}, household.check("open", pull_distance=0.3))


def test_a_call_takes_parameters_as_goal_fields_or_keywords(sim_params):
    kwargs = {"object_name": "red block", "speed_factor": 0.3}
    values = sim_params.from_call("pick", kwargs, ["grasp_height_offset"], [0.02])
    assert kwargs == {"object_name": "red block"} and values["speed_factor"] == 0.3 and values["grasp_height_offset"] == 0.02
    assert sim_params.from_call("wait", {"duration": 1.0}) is None
    assert sim_params.from_call("move_to", {"speed_factor": 0.0}) is None  # tabletop move_to keeps its own speed_factor
    with pytest.raises(InvalidArgumentError, match="2 parameter names but 1 values"):
        sim_params.from_call("pick", {}, ["a", "b"], [1.0])
    with pytest.raises(InvalidArgumentError, match="named twice"):
        sim_params.from_call("pick", {}, ["speed_factor", "speed_factor"], [0.3, 0.4])
    with pytest.raises(InvalidArgumentError, match="unknown parameter 'force' for wait"):
        sim_params.from_call("wait", {}, ["force"], [1.0])
    assert call_fields({}) == {}
    assert call_fields({"wipe_passes": 2}) == {"parameter_names": ["wipe_passes"], "parameter_values": [2.0]}
    with pytest.raises(TypeError, match="grasp_height_offset must be a number, got 'high'"):
        call_fields({"grasp_height_offset": "high"})
    neutral = Tuning({}, RobotProfile.load("panda_sim"))  # what an inner skill call reads for names it was not given
    assert neutral["place_offset_x"] == 0.0 and neutral["gripper_force"] == 40.0
    with pytest.raises(KeyError):
        neutral["wipe_passes"]


@pytest.mark.parametrize(("text", "error"), [
    ("kitchen: {pick: {x: {default: 0, min: 0, max: 1, unit: m, doc: d}}}", "unknown world 'kitchen'"),
    ("tabletop: [pick]", "tabletop must map skill names"),
    ("tabletop: {pick: {}}", "tabletop.pick must map parameter names"),
    ("tabletop: {pick: {x: {default: 0, max: 1, unit: m, doc: d}}}", "tabletop.pick.x: missing key 'min'"),
    ("tabletop: {pick: {x: {default: 0, min: 1, max: 1, unit: m, doc: d}}}", "tabletop.pick.x: min (1) must be below max (1)"),
    ("tabletop: {pick: {x: {default: 2, min: 0, max: 1, unit: m, doc: d}}}", "tabletop.pick.x.default: 2 is outside [0, 1]"),
    ("tabletop: {pick: {x: {default: profile, min: 0, max: 1, unit: m, doc: d}}}", "tabletop.pick.x.default: only approach_height"),
    ("tabletop: {pick: {x: {default: 0, min: 0, max: 1, unit: m, doc: d, step: 1}}}", "tabletop.pick.x: unknown field 'step'"),
    ("tabletop: {pick: {x: {default: 0, min: 0, max: hi, unit: m, doc: d}}}", "tabletop.pick.x.max: must be a number"),
    ("tabletop: {pick: {x: {default: 0.5, min: 0, max: 1, unit: m, doc: d, integer: true}}}", "needs whole-number default"),
    ("tabletop: {pick: {x: {default: 0, min: 0, max: 1, unit: m, doc: ''}}}", "tabletop.pick.x.doc: must say"),
    ("tabletop: {pick: {x-y: {default: 0, min: 0, max: 1, unit: m, doc: d}}}", "'x-y' is not a Python keyword name"),
])
def test_a_bad_file_is_a_config_error_naming_the_key(tmp_path, text, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        SkillParameters.load("tabletop", path=write(tmp_path, text))


def test_a_file_without_a_world_declares_nothing_for_it(tmp_path):
    path = write(tmp_path, "household: {wipe: {wipe_passes: {default: 3, min: 1, max: 6, unit: passes, doc: d, integer: true}}}")
    assert SkillParameters.load("tabletop", path=path).skills() == []
    assert SkillParameters.load("household", path=path).check("wipe") == {"wipe_passes": 3}


def test_the_robot_api_declares_the_parameters_of_each_function():
    """The prompt's declarations name every parameter of the function's skill, keyword defaults as declared."""
    console = {"tabletop": {"put_first_on_second": "put_first_on_second"},
               "household": {name: name for name in HOUSEHOLD_TARGETS}}
    for world, functions in console.items():
        params = SkillParameters.load(world)
        for fn in RobotApi.load(world).functions:
            if fn.name not in functions or fn.name == "move_to":  # move_to's speed_factor is a plain argument
                continue
            declared = params.declared(functions[fn.name])
            text = fn.signature + fn.doc
            assert all(name in text for name in declared), (fn.name, sorted(declared))
            for name, default in re.findall(r"(\w+): \w+ = ([\d.]+)", fn.signature.partition("*")[2]):
                assert float(default) == declared[name].default, (fn.name, name)


# ---------------------------------------------------------------------------------------- in the simulation
@pytest.fixture()
def lib(world, profile, tabletop):
    world.reset(scene_from_yaml(SCENE, tabletop))
    return SkillLibrary(profile, DirectArm(world), WorldObjects(world))


def grasp_height(lib: SkillLibrary, **fields) -> float:
    """Gripper height at the moment the fingers close in a pick."""
    heights = []

    def feedback(stage: str, _progress: float) -> None:
        if stage == "grasp":
            heights.append(float(lib.kin.fk(lib.arm.joint_positions())[0][2]))

    outcome = lib.run("pick", feedback=feedback, object_name="red block", **fields)
    assert outcome.success, outcome.message
    return heights[0]


def test_a_higher_grasp_height_offset_grasps_higher(world, lib, tabletop):
    default = grasp_height(lib)
    world.reset(scene_from_yaml(SCENE, tabletop))
    higher = grasp_height(lib, parameter_names=["grasp_height_offset"], parameter_values=[0.01])
    assert higher - default == pytest.approx(0.01, abs=0.003)
    assert world.held_object() == "red block"


def test_place_offsets_move_where_the_block_is_put(world, lib):
    robot = TabletopRobot(DirectSkills(lib), lambda: {o.name: o.position for o in world.objects()}, DialogChannel(timeout=1.0))
    assert robot.put_first_on_second("red block", [0.0, -0.5], place_offset_x=0.04, place_offset_y=-0.03) == "success"
    red = {o.name: o for o in world.objects()}["red block"]
    assert red.position[:2] == pytest.approx([0.04, -0.53], abs=0.01)


def test_out_of_range_is_refused_with_the_range_and_nothing_moves(world, lib):
    robot = TabletopRobot(DirectSkills(lib), lambda: {o.name: o.position for o in world.objects()}, DialogChannel(timeout=1.0))
    arm, width = DirectArm(world).joint_positions(), world.gripper_width()
    before = {o.name: o.position.copy() for o in world.objects()}
    with pytest.raises(ValueError, match=re.escape("grasp_height_offset=0.2 is outside its safe range [-0.03, 0.05] m")):
        robot.put_first_on_second("red block", "blue bowl", grasp_height_offset=0.2)
    with pytest.raises(ValueError, match="unknown parameter 'height' for put_first_on_second; known: grasp_height_offset"):
        robot.put_first_on_second("red block", "blue bowl", height=0.2)
    with pytest.raises(ValueError, match="would push the fingertips into the surface under 'red block'"):
        robot.put_first_on_second("red block", "blue bowl", grasp_height_offset=-0.03)  # in range, but below the table
    with pytest.raises(TypeError, match="must be a number"):
        robot.put_first_on_second("red block", "blue bowl", speed_factor="fast")
    outcome = lib.run("pick", object_name="red block", gripper_force=100.0)
    assert outcome.code == ErrorCode.INVALID_ARGUMENT and "[10, 70] N" in outcome.message
    assert np.max(np.abs(DirectArm(world).joint_positions() - arm)) < 1e-3 and abs(world.gripper_width() - width) < 1e-3
    assert all(np.allclose(o.position, before[o.name], atol=1e-3) for o in world.objects())
