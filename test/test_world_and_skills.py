"""The PyBullet world and the skill library driven directly (no ROS): physics decides every outcome."""

from __future__ import annotations

import numpy as np
import pytest

from teachbot.errors import ErrorCode
from teachbot.sim.camera import CameraSpec
from teachbot.simrobot.direct import DirectArm, WorldObjects
from teachbot.skills.library import SkillLibrary
from teachbot.world.scene import scene_from_yaml

SCENE = """
objects:
  - {category: block, color: red, position: [-0.1, -0.45], yaw: 0.4}
  - {category: block, color: green, position: [0.12, -0.6]}
  - {category: bowl, color: blue, position: [0.1, -0.35]}
"""


@pytest.fixture()
def lib(world, profile, tabletop):
    world.reset(scene_from_yaml(SCENE, tabletop))
    return SkillLibrary(profile, DirectArm(world), WorldObjects(world))


def state(world):
    return {o.name: o for o in world.objects()}


def test_reset_places_the_scene_and_objects_rest_on_the_table(world, lib, tabletop):
    objects = state(world)
    assert set(objects) == {"red block", "green block", "blue bowl"}
    red = objects["red block"]
    assert red.position[:2] == pytest.approx([-0.1, -0.45], abs=2e-3)
    assert red.position[2] == pytest.approx(tabletop.block_size / 2, abs=2e-3)
    assert red.supported_by == "" and not red.held


def test_pick_lifts_the_block_and_place_on_point_puts_it_there(world, lib, profile):
    out = lib.run("pick", object_name="red block")
    assert out.success, out.message
    red = state(world)["red block"]
    assert red.held and red.position[2] > 0.1
    assert world.held_object() == "red block"
    out = lib.run("place", target_point=(0.15, -0.7))
    assert out.success, out.message
    red = state(world)["red block"]
    assert not red.held and red.position[:2] == pytest.approx([0.15, -0.7], abs=0.02)
    assert red.position[2] == pytest.approx(0.02, abs=3e-3)


def test_stacking_a_block_on_a_block(world, lib):
    out = lib.run("put_first_on_second", object_name="red block", target_name="green block")
    assert out.success, out.message
    red = state(world)["red block"]
    assert red.supported_by == "green block" and not red.inside
    assert red.position[2] == pytest.approx(0.06, abs=5e-3)


def test_put_block_in_bowl(world, lib):
    assert lib.run("put_first_on_second", object_name="green block", target_name="blue bowl").success
    green = state(world)["green block"]
    assert green.supported_by == "blue bowl" and green.inside


@pytest.mark.parametrize(
    ("skill", "kwargs", "code", "needle"),
    [
        ("pick", {"object_name": "cup"}, ErrorCode.UNKNOWN_OBJECT, "unknown object 'cup'; known: blue bowl, green block, red block"),
        ("pick", {"object_name": "blue bowl"}, ErrorCode.GRASP_FAILED, "bowls are fixed to the table"),
        ("place", {"target_name": "blue bowl"}, ErrorCode.NOT_HOLDING, "pick an object first"),
        ("put_first_on_second", {"object_name": "red block", "target_name": "red block"}, ErrorCode.PLACE_FAILED, "on itself"),
        ("put_first_on_second", {"object_name": "red block", "target_name": "mug"}, ErrorCode.UNKNOWN_OBJECT, "unknown object 'mug'"),
        ("move_to", {"position": (0.0, -0.5, 0.8)}, ErrorCode.OUT_OF_WORKSPACE, "outside the workspace"),
        ("move_to", {"pose_name": "kitchen"}, ErrorCode.UNKNOWN_OBJECT, "unknown pose 'kitchen'; known: home"),
        ("move_to", {"pose_name": "handover", "speed_factor": 1.5}, ErrorCode.LIMIT_EXCEEDED, "safety.max_speed_factor"),
        ("go_home", {"speed_factor": -1.0}, ErrorCode.LIMIT_EXCEEDED, "outside (0, 1]"),
        ("fly", {}, ErrorCode.INVALID_ARGUMENT, "unknown skill 'fly'"),
    ],
)
def test_bad_requests_fail_with_a_message_that_names_the_fix(world, lib, skill, kwargs, code, needle):
    before = state(world)
    out = lib.run(skill, **kwargs)
    assert not out.success and out.code == code
    assert needle in out.message
    after = state(world)
    for name in before:  # nothing moved
        assert np.allclose(before[name].position, after[name].position, atol=2e-3)


def test_already_holding(world, lib):
    assert lib.run("pick", object_name="red block").success
    out = lib.run("pick", object_name="green block")
    assert out.code == ErrorCode.ALREADY_HOLDING and "already holding 'red block'" in out.message


def test_grasp_of_a_moved_object_fails_honestly(world, lib, tabletop):
    # the skills see the block where it is not (stale perception): the gripper closes on nothing
    class Stale(WorldObjects):
        def objects(self):
            objects = super().objects()
            red = objects["red block"]
            objects["red block"] = type(red)(red.name, red.category, red.position + [0.0, 0.12, 0.0], red.size, red.yaw)
            return objects

    stale = SkillLibrary(lib.profile, lib.arm, Stale(world), lib.kin)
    out = stale.run("pick", object_name="red block")
    assert out.code == ErrorCode.GRASP_FAILED and "closed on nothing" in out.message


def test_move_to_and_go_home(world, lib, profile):
    assert lib.run("move_to", position=(0.1, -0.4, 0.25), speed_factor=0.5).success
    assert world.ee_position() == pytest.approx([0.1, -0.4, 0.25], abs=0.01)
    assert lib.run("go_home").success
    _, q, _, _ = world.joint_state()
    assert q[:7] == pytest.approx(profile.home, abs=0.02)


def test_camera_depth_and_segmentation_agree_with_ground_truth(world, lib):
    spec = CameraSpec(width=320, height=240)
    frame = world.render(spec)
    assert frame.rgb.shape == (240, 320, 3) and frame.rgb.dtype == np.uint8
    assert frame.depth.shape == (240, 320) and frame.segmentation.shape == (240, 320)
    red = state(world)["red block"]
    vs, us = np.nonzero(frame.segmentation == red.body_id)
    assert len(us) > 20
    # the visible top face: deprojected pixels lie on the block within its size
    points = np.array([spec.deproject(u, v, frame.depth[v, u]) for u, v in zip(us, vs)])
    assert np.abs(points[:, :2].mean(axis=0) - red.position[:2]).max() < 0.02
    assert points[:, 2].max() == pytest.approx(0.04, abs=0.006)


def test_place_lowers_onto_contact_when_the_object_touches_down_early(world, profile, tabletop):
    """The planned release height is 2 cm below where the block can go in the bowl (as when it sits low in the
    fingers): the guarded descent stops on contact and releases instead of pushing until it times out."""
    from dataclasses import replace

    world.reset(scene_from_yaml(SCENE, tabletop))
    low = replace(profile, skills=replace(profile.skills, place_clearance=-0.02))
    lib = SkillLibrary(low, DirectArm(world), WorldObjects(world))
    out = lib.run("put_first_on_second", object_name="red block", target_name="blue bowl")
    assert out.success, out.message
    red = state(world)["red block"]
    assert red.supported_by == "blue bowl" and red.inside and not red.held


def test_motion_allowance_counts_a_rewound_clock_as_no_time():
    """A sim reset rewinds the arm's clock to zero while a skill may hold a stamp from before it: the
    allowance keeps counting forward from there instead of waiting out the jump (or the wall backstop)."""
    from teachbot.skills.arm_motion import ArmDeadline

    class Clock:
        t = 100.0

        def now(self) -> float:
            return self.t

    arm, wall = Clock(), Clock()
    wall.t = 0.0
    deadline = ArmDeadline(arm, 1.0, wall=wall.now)  # type: ignore[arg-type]
    arm.t = 100.5
    assert deadline.elapsed() == pytest.approx(0.5)
    arm.t = 0.0  # reset
    assert deadline.elapsed() == pytest.approx(0.5) and not deadline.expired()
    arm.t = 0.4
    assert deadline.elapsed() == pytest.approx(0.9) and not deadline.expired()
    arm.t = 0.6
    assert not deadline.expired()  # 1.1 s of arm time, but the allowance must pass on the wall too
    wall.t = 1.05
    assert deadline.expired()


def test_an_arm_in_this_process_counts_its_own_clock_only():
    """DirectArm steps the world itself: no command is ever on its way, so its allowances are simulated time alone
    and a failing motion ends at the same point on a fast machine and a loaded one (RosArm also waits for the wall)."""
    from teachbot.simrobot.direct import DirectArm
    from teachbot.skills.arm_motion import ArmDeadline

    class Clock:
        t = 0.0

        def now(self) -> float:
            return self.t

    arm, wall = Clock(), Clock()
    deadline = ArmDeadline(arm, 1.0, wall=wall.now, commands_travel=DirectArm.commands_travel)  # type: ignore[arg-type]
    arm.t = 1.1
    assert deadline.expired()  # no wall time has passed at all
