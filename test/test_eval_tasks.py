"""The benchmark tasks without a simulator: the spec copy, sampled episodes, the success rules at
their tolerances, diagnoses, and every expert solving its episodes in a teleporting fake world."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from teachbot.console.tabletop_api import TabletopRobot
from teachbot.evaluation import (
    SPLITS,
    TASKS,
    TASKS_BY_KEY,
    Benchmark,
    ObjectTruth,
    WorldState,
    run_statements,
    tasks_for_split,
    transcript,
)
from teachbot.evaluation import world_state as W
from teachbot.evaluation.tasks_seen import NTH
from teachbot.language.dialog import DialogChannel
from teachbot.paths import config_path
from teachbot.world.scene import TabletopConfig, scene_from_yaml

SHARED = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "cap_tabletop.yaml"
EPISODES = 200
PLACEHOLDER_KEYS = {"block:1": "color", "block:2": "color", "block": "color", "bowl": "color"}


@pytest.fixture(scope="module")
def bench():
    return Benchmark.load()


@pytest.fixture(scope="module")
def table():
    return TabletopConfig.load()


# ----------------------------------------------------------------------------- the spec


def test_project_copy_holds_the_shared_benchmark():
    if not SHARED.is_file():
        pytest.skip("../shared/benchmarks/cap_tabletop.yaml not beside this checkout")
    ours = yaml.safe_load(config_path("benchmarks", "cap_tabletop.yaml").read_text())
    shared_text = SHARED.read_text()
    # the shared file's last section is prose that is not valid YAML; our copy quotes its items
    head, tail = shared_text.split("\nrobot_api_in_the_paper:")
    shared = yaml.safe_load(head)
    shared["robot_api_in_the_paper"] = [line.strip()[2:] for line in tail.splitlines()[1:] if line.strip()]
    assert ours == shared


def test_loader_reads_the_tolerances(bench):
    s = bench.success
    assert (s.on_point, s.on_bowl, s.on_block) == (0.06, 0.06, 0.04)
    assert (s.a_little_max, s.a_lot_min, s.line_distance) == (0.2, 0.2, 0.03)
    assert (s.horizontal_max_slope, s.diagonal_slope, s.vertical_min_slope) == (0.3, (0.7, 1.3), 10.0)
    assert bench.split_attributes("SA-SI").colors == ("blue", "red", "green", "orange", "yellow")
    assert bench.split_attributes("UA-UI")["line"] == ("diagonal",)


def test_one_class_per_template(bench):
    assert sorted(t.template for t in TASKS if t.seen) == sorted(bench.instructions["seen"])
    assert sorted(t.template for t in TASKS if not t.seen) == sorted(bench.instructions["unseen"])
    assert len(TASKS_BY_KEY) == 14
    assert [len(tasks_for_split(s)) for s in SPLITS] == [8, 8, 6]


def test_unseen_instruction_is_not_sampled_in_a_seen_split(bench):
    with pytest.raises(ValueError, match="belongs to UA-UI"):
        TASKS_BY_KEY["blocks_in_line"].sample(np.random.default_rng(0), "SA-SI", bench)


# ----------------------------------------------------------------------------- sampling

CASES = [(t, s) for t in TASKS for s in t.splits()]


@pytest.mark.parametrize(("task", "split"), CASES, ids=[f"{t.key}-{s}" for t, s in CASES])
def test_sampled_episodes(task, split, bench, table):
    rng = np.random.default_rng(11)
    episodes = [task.sample(rng, split, bench, table) for _ in range(EPISODES)]
    again = np.random.default_rng(11)
    assert [task.sample(again, split, bench, table) for _ in range(20)] == episodes[:20]
    attrs = bench.split_attributes(split)
    (x0, x1), (y0, y1) = table.spawn_area["x"], table.spawn_area["y"]
    for e in episodes:
        where = f"{e.instruction}: {e.scene.names()}"
        initial = e.initial_state()
        assert e.task.infeasible(initial) == "" and not e.task.success(initial, initial), where
        assert "<" not in e.instruction
        for key, value in e.task.attributes.items():
            allowed = attrs[PLACEHOLDER_KEYS.get(key, key)]
            assert value.removesuffix(" block").removesuffix(" bowl") in allowed, (key, value, where)
        assert all(o.color in attrs.colors for o in e.scene.objects), where
        for category in ("block", "bowl"):
            colors = [o.color for o in e.scene.objects if o.category == category]
            assert 1 <= len(colors) <= 4 and len(set(colors)) == len(colors), where
        for cat, color in e.task.required_objects():
            assert f"{color} {cat}" in e.scene.names(), where
        assert len(initial.blocks()) >= e.task.min_blocks, where
        xy = np.array([o.position for o in e.scene.objects])
        assert np.all((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)), where
        gaps = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(len(xy))
        assert gaps.min() >= table.min_separation, where
        assert scene_from_yaml(e.scene_yaml(), table).objects == e.scene.objects


def test_nth_block_scenes_have_enough_blocks(bench, table):
    rng = np.random.default_rng(3)
    for _ in range(50):
        e = TASKS_BY_KEY["nth_block_to_point"].sample(rng, "UA-SI", bench, table)
        assert len(e.initial_state().blocks()) >= NTH[e.task.attributes["nth"]]


# ----------------------------------------------------------------------------- experts in a fake world


class TeleportSkills:
    """put_first_on_second that moves the object exactly onto its target: on top of whatever is there."""

    def __init__(self, state: WorldState, table: TabletopConfig) -> None:
        self.pos = {o.name: list(o.position) for o in state.objects}
        self.category = {o.name: o.category for o in state.objects}
        self.size = table.block_size

    def call(self, name, timeout=60.0, object_name="", target_name="", target_point=None):
        assert name == "put_first_on_second"
        if target_name and target_name not in self.pos:
            return SimpleNamespace(success=False, code=1, message=f"unknown object {target_name!r}")
        xy = self.pos[target_name][:2] if target_name else list(target_point)
        below = [self.pos[n][2] + self.size / 2 for n in self.pos if n != object_name and self.category[n] == "block"
                 and math.dist(self.pos[n][:2], xy) < self.size]
        floor = 0.006 if target_name and self.category[target_name] == "bowl" else 0.0
        self.pos[object_name] = [xy[0], xy[1], max([floor, *below]) + self.size / 2]
        return SimpleNamespace(success=True, code=0, message="")

    def state(self, like: WorldState) -> WorldState:
        return WorldState(tuple(ObjectTruth(o.name, o.category, o.color, tuple(self.pos[o.name])) for o in like.objects))


@pytest.mark.parametrize(("task", "split"), CASES, ids=[f"{t.key}-{s}" for t, s in CASES])
def test_expert_solves_its_episodes_in_a_perfect_world(task, split, bench, table):
    rng = np.random.default_rng(5)
    for _ in range(EPISODES // 4):
        e = task.sample(rng, split, bench, table)
        initial = e.initial_state()
        skills = TeleportSkills(initial, table)
        robot = TabletopRobot(skills, lambda s=skills: {n: p for n, p in s.pos.items()}, DialogChannel(timeout=0.1), table)
        results = run_statements(e.task.oracle(initial), robot.functions())
        final = skills.state(initial)
        assert not any(r.error for r in results), transcript(results)
        assert e.task.success(initial, final), f"{e.instruction}\n{transcript(results)}\n{e.task.diagnose(initial, final)}"
        assert e.task.diagnose(initial, final) == ""
        wrong = e.task.diagnose(initial, initial)
        assert wrong, e.instruction
        # a person's words: which object, where, which way; never coordinates or measurements
        assert not re.search(r"\d|x=|\bcm\b|\bm\)", wrong), wrong


# ----------------------------------------------------------------------------- rules at their edges


def block(color, x, y, z=0.02, **kw):
    return ObjectTruth(f"{color} block", "block", color, (x, y, z), **kw)


def bowl(color, x, y):
    return ObjectTruth(f"{color} bowl", "bowl", color, (x, y, 0.0))


def world(*objects, held=""):
    return WorldState(tuple(objects), held_object=held)


def make(key, **attributes):
    return TASKS_BY_KEY[key](attributes)


def test_on_point_tolerance(bench):
    task = make("block_to_corner_by_distance_to_bowl", block="red block", distance="closest", bowl="blue bowl")
    initial = world(block("red", 0.0, -0.5), bowl("blue", 0.15, -0.35))  # closest corner: top right (0.25, -0.25)
    assert task.success(initial, world(block("red", 0.25 - 0.059, -0.25), bowl("blue", 0.15, -0.35)))
    failed = world(block("red", 0.25 - 0.061, -0.25), bowl("blue", 0.15, -0.35))
    assert not task.success(initial, failed)
    said = task.diagnose(initial, failed)
    assert "the red block is not on the top right corner: it is on the table near the top right corner" in said
    assert "it should go a little further to the right, onto the top right corner" in said, said
    held = world(block("red", 0.25, -0.25, 0.1, held=True), bowl("blue", 0.15, -0.35), held="red block")
    assert "still in the gripper" in task.diagnose(initial, held)
    far = make("block_to_corner_by_distance_to_bowl", block="red block", distance="farthest", bowl="blue bowl")
    assert far.oracle(initial) == ["put_first_on_second('red block', 'bottom left corner')"]


def test_on_bowl_tolerance_and_above():
    task = make("block_in_bowl", block="red block", bowl="blue bowl")
    b = bowl("blue", 0.0, -0.5)
    initial = world(block("red", 0.15, -0.4), b)
    assert task.success(initial, world(block("red", 0.059, -0.5, 0.026), b))
    assert not task.success(initial, world(block("red", 0.061, -0.5, 0.026), b))
    assert not task.success(initial, world(block("red", 0.0, -0.5, -0.03), b))  # under the bowl's base
    assert "not in the blue bowl" in task.diagnose(initial, world(block("red", 0.2, -0.5), b))


def test_on_block_tolerance_and_above():
    task = make("block_on_block", **{"block:1": "red block", "block:2": "green block"})
    initial = world(block("red", 0.15, -0.4), block("green", 0.0, -0.5))
    assert task.success(initial, world(block("red", 0.039, -0.5, 0.06), block("green", 0.0, -0.5)))
    assert not task.success(initial, world(block("red", 0.041, -0.5, 0.06), block("green", 0.0, -0.5)))
    side = world(block("red", 0.03, -0.5, 0.02), block("green", 0.0, -0.5))  # beside it, not above
    assert not task.success(initial, side)
    assert "red block is not on the green block" in task.diagnose(initial, side)


@pytest.mark.parametrize(("magnitude", "distance", "ok"), [
    ("a little", 0.2, True), ("a little", 0.201, False), ("a little", 0.1, True),
    ("a lot", 0.2, False), ("a lot", 0.201, True), ("a lot", 0.1, False),
])
def test_a_little_and_a_lot(magnitude, distance, ok):
    task = make("block_beside_bowl", block="red block", magnitude=magnitude, direction="left", bowl="blue bowl")
    b = bowl("blue", 0.1, -0.5)
    initial = world(block("red", 0.0, -0.35), b)
    final = world(block("red", 0.1 - distance, -0.5), b)
    assert task.success(initial, final) is ok
    assert bool(task.diagnose(initial, final)) is not ok


def test_beside_bowl_wrong_side_and_in_the_bowl():
    task = make("block_beside_bowl", block="red block", magnitude="a little", direction="top", bowl="blue bowl")
    b = bowl("blue", 0.0, -0.5)
    initial = world(block("red", 0.15, -0.5), b)
    assert task.success(initial, world(block("red", 0.0, -0.36), b))
    assert "not to the top" in task.diagnose(initial, world(block("red", 0.0, -0.64), b))
    assert "not to the top" in task.diagnose(initial, world(block("red", 0.12, -0.4), b))  # more right than up
    assert "in the blue bowl" in task.diagnose(initial, world(block("red", 0.0, -0.47, 0.026), b))
    assert task.oracle(initial) == ["bowl_pos = get_obj_pos('blue bowl')",
                                    "put_first_on_second('red block', [bowl_pos[0], bowl_pos[1] + 0.14])"]


@pytest.mark.parametrize(("kind", "end", "ok"), [
    ("horizontal", (0.3, 0.089), True), ("horizontal", (0.3, 0.091), False),
    ("vertical", (0.029, 0.3), True), ("vertical", (0.031, 0.3), False),
    ("diagonal", (0.3, 0.21), True), ("diagonal", (0.3, 0.39), True), ("diagonal", (0.3, 0.2), False), ("diagonal", (0.3, 0.4), False),
])
def test_line_slopes(kind, end, ok, bench):
    task = make("blocks_in_line", line=kind)
    x0, y0 = -0.15, -0.65
    initial = world(block("red", 0.0, -0.4), block("green", 0.15, -0.6))
    final = world(block("red", x0, y0), block("green", x0 + end[0], y0 + end[1]))
    assert task.success(initial, final) is ok, task.diagnose(initial, final)


def test_line_distance_tolerance():
    task = make("blocks_in_line", line="horizontal")
    initial = world(block("red", 0.0, -0.4), block("green", 0.15, -0.6), block("blue", -0.15, -0.5))
    line = [block("red", -0.2, -0.5), block("green", 0.2, -0.5)]
    assert task.success(initial, world(*line, block("blue", 0.0, -0.5 + 0.029)))
    off = world(*line, block("blue", 0.0, -0.5 + 0.031))
    assert not task.success(initial, off)
    assert "the blue block is off the line through the" in task.diagnose(initial, off)


def test_all_blocks_on_point_and_stack():
    flat = [block("red", -0.25 + 0.02, -0.25), block("green", -0.25 - 0.03, -0.25)]  # side by side on the corner
    tower = [block("red", -0.25, -0.25), block("green", -0.25 + 0.01, -0.25, 0.06)]
    initial = world(block("red", 0.0, -0.4), block("green", 0.15, -0.6))
    put = make("all_blocks_on_point", corner_or_side="top left corner")
    stack = make("stack_on_point", corner_or_side="top left corner")
    assert put.success(initial, world(*flat)) and put.success(initial, world(*tower))
    assert stack.success(initial, world(*tower)) and not stack.success(initial, world(*flat))
    assert "should be stacked" in stack.diagnose(initial, world(*flat))
    assert "green block is" in put.diagnose(initial, world(flat[0], block("green", 0.0, -0.5)))


def test_different_corners():
    task = make("different_corners")
    initial = world(block("red", 0.0, -0.4), block("green", 0.15, -0.6), bowl("blue", -0.1, -0.6))
    ok = world(block("red", -0.25, -0.25), block("green", 0.25, -0.75), bowl("blue", -0.1, -0.6))
    same = world(block("red", -0.25, -0.25), block("green", -0.25, -0.25, 0.06), bowl("blue", -0.1, -0.6))
    middle = world(block("red", -0.25, -0.25), block("green", 0.0, -0.5), bowl("blue", -0.1, -0.6))
    assert task.success(initial, ok)
    assert "both in the top left corner" in task.diagnose(initial, same)
    assert "green block" in task.diagnose(initial, middle) and "corner of its own" in task.diagnose(initial, middle)


def test_matching_and_mismatched_colours():
    bowls = [bowl("red", 0.1, -0.4), bowl("green", -0.1, -0.6)]
    initial = world(block("red", 0.15, -0.6), block("green", -0.15, -0.4), *bowls)
    matched = world(block("red", 0.1, -0.4, 0.026), block("green", -0.1, -0.6, 0.026), *bowls)
    swapped = world(block("red", -0.1, -0.6, 0.026), block("green", 0.1, -0.4, 0.026), *bowls)
    matching, mismatched = make("matching_colors"), make("mismatched_colors")
    assert matching.success(initial, matched) and not matching.success(initial, swapped)
    assert mismatched.success(initial, swapped) and not mismatched.success(initial, matched)
    assert "which has its own colour" in mismatched.diagnose(initial, matched)
    assert "in no bowl" in mismatched.diagnose(initial, initial)
    assert "red block is not in the red bowl" in matching.diagnose(initial, swapped)


def test_targets_are_fixed_from_the_initial_state():
    task = make("block_by_direction_of_bowl_to_point", direction="left", bowl="blue bowl", corner_or_side="top side")
    b = bowl("blue", 0.1, -0.5)
    initial = world(block("red", -0.1, -0.45), block("green", 0.1, -0.65), b)
    # afterwards the green block is left of the bowl too; the red one was meant and is still off target
    final = world(block("red", -0.1, -0.45), block("green", 0.0, -0.25), b)
    assert task.oracle(initial) == ["put_first_on_second('red block', 'top side')"]
    assert not task.success(initial, final)
    assert task.diagnose(initial, final).startswith("the red block is")
    assert "2 blocks lie to the left" in task.infeasible(world(block("red", -0.1, -0.45), block("green", -0.1, -0.6), b))


def test_nth_and_distance_targets():
    blocks = [block("red", -0.2, -0.4), block("green", 0.0, -0.6), block("blue", 0.15, -0.3)]
    initial = world(*blocks, bowl("yellow", 0.15, -0.55))
    second_left = make("nth_block_to_point", nth="second", direction="left", corner_or_side="left side")
    first_top = make("nth_block_to_point", nth="first", direction="top", corner_or_side="left side")
    fourth = make("nth_block_to_point", nth="fourth", direction="right", corner_or_side="left side")
    assert second_left.target(initial)[0].name == "green block"
    assert first_top.target(initial)[0].name == "blue block"
    assert fourth.target(initial)[0] is None and "no fourth block" in fourth.infeasible(initial)
    closest = make("block_by_distance_to_bowl_to_point", distance="closest", bowl="yellow bowl", corner_or_side="top side")
    farthest = make("block_by_distance_to_bowl_to_point", distance="farthest", bowl="yellow bowl", corner_or_side="top side")
    assert closest.target(initial)[0].name in ("green block", "blue block")
    assert farthest.target(initial)[0].name == "red block"


def test_world_state_from_a_ros_response():
    def obj(name, category, color, xyz, supported_by=""):
        pose = SimpleNamespace(position=SimpleNamespace(x=xyz[0], y=xyz[1], z=xyz[2]))
        return SimpleNamespace(name=name, category=category, color=color, pose=pose, supported_by=supported_by,
                               inside=bool(supported_by), held=False)

    response = SimpleNamespace(objects=[obj("red block", "block", "red", (0.1, -0.4, 0.026), "blue bowl"),
                                        obj("blue bowl", "bowl", "blue", (0.1, -0.4, 0.0))], held_object="")
    state = WorldState.from_ros(response)
    assert state.get("red block").supported_by == "blue bowl" and state.get("red block").inside
    assert [o.name for o in state.bowls()] == ["blue bowl"]
    assert re.match(r"in the blue bowl", W.describe(state.get("red block"), state))
