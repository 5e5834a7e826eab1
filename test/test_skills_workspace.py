"""The skills over the whole benchmark workspace, through the real sim and skills nodes (issue 10).

Every named point of config/tabletop.yaml and the corners and centre of the spawn area are picked from
and placed at; blocks go four to a bowl and four high on a corner; a failed command leaves the robot
clean for the next. Success is judged on the simulator's ground truth with the benchmark's rules
(../shared/benchmarks/cap_tabletop.yaml: on_point 6 cm, on_bowl 6 cm, on_block 4 cm)."""

from __future__ import annotations

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.errors import ErrorCode
from teachbot.world.scene import TabletopConfig

pytestmark = pytest.mark.timeout(pytest_timeout(300))

TABLE = TabletopConfig.load()
ONE_BLOCK = "objects:\n  - {category: block, color: red, position: [0.0, -0.45]}\n"
FOUR_BLOCKS = """
objects:
  - {category: block, color: red, position: [-0.15, -0.4]}
  - {category: block, color: green, position: [0.15, -0.4]}
  - {category: block, color: yellow, position: [-0.15, -0.65]}
  - {category: block, color: cyan, position: [0.15, -0.65]}
  - {category: bowl, color: blue, position: [0.0, -0.52]}
"""


def truth(client):
    return {o.name: o for o in client.world_state().objects}


def xy(obj):
    return np.array([obj.pose.position.x, obj.pose.position.y])


def put(client, obj, target):
    fields = {"object_name": obj}
    fields.update(target_name=target) if isinstance(target, str) else fields.update(target_point=list(target))
    return client.call("put_first_on_second", **fields)


def on_point(client, obj, point):
    return float(np.linalg.norm(xy(truth(client)[obj]) - np.asarray(point))) < 0.06


def test_every_named_point_is_reached_to_place_and_to_pick(client):
    """Place a block on each named point, then pick it from there and put it back in the middle."""
    assert client.reset(scene_yaml=ONE_BLOCK).success
    failures = []
    for name, point in TABLE.named_points.items():
        result = put(client, "red block", point)
        if not (result.success and on_point(client, "red block", point)):
            failures.append(f"place at {name}: {result.message}")
            continue
        result = put(client, "red block", (0.0, -0.45))
        if not (result.success and on_point(client, "red block", (0.0, -0.45))):
            failures.append(f"pick from {name}: {result.message}")
    assert not failures, failures


def test_spawn_area_corners_and_centre(client):
    """One block visits the corners and the centre of the spawn area: each is a pick and a place."""
    (x0, x1), (y0, y1) = TABLE.spawn_area["x"], TABLE.spawn_area["y"]
    grid = [(x0, y0), (x1, y1), (x0, y1), (x1, y0), ((x0 + x1) / 2, (y0 + y1) / 2), (x0, y0)]
    assert client.reset(scene_yaml=ONE_BLOCK).success
    failures = []
    for point in grid:
        result = put(client, "red block", point)
        if not (result.success and on_point(client, "red block", point)):
            failures.append(f"{point}: {result.message}")
    assert not failures, failures


def test_four_blocks_into_one_bowl(client):
    """Each is reported a success and each lies in the bowl by ground truth, also when it rests on
    the blocks already there."""
    assert client.reset(scene_yaml=FOUR_BLOCKS).success
    for block in ("red block", "green block", "yellow block", "cyan block"):
        result = put(client, block, "blue bowl")
        assert result.success, result.message
        state = truth(client)
        assert float(np.linalg.norm(xy(state[block]) - xy(state["blue bowl"]))) < 0.06
        assert state[block].pose.position.z > state["blue bowl"].pose.position.z
    # and the robot goes on working afterwards
    state = truth(client)
    top = max(("red block", "green block", "yellow block", "cyan block"), key=lambda b: state[b].pose.position.z)
    result = put(client, top, (0.15, -0.7))
    assert result.success, result.message


@pytest.mark.parametrize(("corner", "by_name"), [("top left corner", False), ("bottom right corner", True)])
def test_stack_four_on_a_corner(client, corner, by_name):
    """"stack all the blocks on the <corner>": each block onto the corner point (or onto the block
    below it), four high."""
    assert client.reset(scene_yaml=FOUR_BLOCKS.replace("bowl, color: blue, position: [0.0, -0.52]",
                                                       "bowl, color: blue, position: [0.05, -0.25]")).success
    point = TABLE.named_points[corner]
    blocks = ["red block", "green block", "yellow block", "cyan block"]
    for i, block in enumerate(blocks):
        target = blocks[i - 1] if by_name and i else point
        result = put(client, block, target)
        assert result.success, f"{block} (#{i + 1}): {result.message}"
    state = truth(client)
    heights = sorted(state[b].pose.position.z for b in blocks)
    assert heights == pytest.approx([0.02, 0.06, 0.10, 0.14], abs=0.01)
    for below, above in zip(blocks, blocks[1:]):
        assert float(np.linalg.norm(xy(state[above]) - xy(state[below]))) < 0.04
    assert on_point(client, blocks[0], point)


def test_a_failed_place_leaves_the_robot_clean_and_the_next_command_works(client, stack):
    assert client.reset(scene_yaml=ONE_BLOCK).success
    before = xy(truth(client)["red block"])
    # the place point is outside the workspace: put_first_on_second refuses it before picking anything
    result = put(client, "red block", (0.0, -0.95))
    assert not result.success and result.code == ErrorCode.OUT_OF_WORKSPACE, result.message
    assert result.message.startswith("place point (0.000, -0.950, ") and "(the robot" not in result.message
    assert np.allclose(xy(truth(client)["red block"]), before, atol=1e-3)
    # a place alone finds it only with the block in the hand: the block is put down, the gripper opens
    assert client.call("pick", object_name="red block").success
    result = client.call("place", target_point=[0.0, -0.95])
    assert not result.success and result.code == ErrorCode.OUT_OF_WORKSPACE
    assert "put 'red block' down" in result.message and "went home" in result.message
    state = truth(client)["red block"]
    assert not state.held and state.pose.position.z == pytest.approx(0.02, abs=5e-3)
    result = put(client, "red block", (0.2, -0.7))
    assert result.success, result.message

    # a trajectory the controller never receives: the motion times out with the block held
    library = stack.node("skills").library
    arm = library.arm
    send, dropped = arm.send_trajectory, []

    def lose_the_lowering(names, times, positions):
        if library.held and not dropped and len(times) > 1 and positions[-1][1] > positions[0][1]:
            dropped.append(True)  # the first move that lowers (joint 2 forward) while holding
            return None
        return send(names, times, positions)

    arm.send_trajectory = lose_the_lowering
    try:
        result = put(client, "red block", TABLE.named_points["middle"])
    finally:
        arm.send_trajectory = send
    assert dropped and not result.success and result.code == ErrorCode.TIMEOUT, result.message
    assert "went home" in result.message
    assert not truth(client)["red block"].held and library.held == ""
    result = put(client, "red block", TABLE.named_points["top right corner"])
    assert result.success, result.message
    assert on_point(client, "red block", TABLE.named_points["top right corner"])


def test_a_buried_block_is_refused_before_moving(client):
    assert client.reset(scene_yaml=FOUR_BLOCKS).success
    assert put(client, "red block", "green block").success
    result = put(client, "green block", (0.0, -0.7))
    assert not result.success and result.code == ErrorCode.GRASP_FAILED
    assert "'red block' rests on it; move that first" in result.message
    assert put(client, "red block", (0.0, -0.7)).success
    assert put(client, "green block", (-0.15, -0.4)).success
