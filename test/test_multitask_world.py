"""The multi-task benchmark's world (teachbot.evaluation.multitask_world): its catalog and five task scenes,
loaded alone, in pairs and all together, and every task done by hand with the household skills, judged on
the simulator's ground truth (truth(): robot, person, the object a thing rests on or in, the place)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.errors import ConfigError, ErrorCode, PlaceFailedError, SceneSpecError
from teachbot.evaluation.multitask_world import MultitaskWorld, multitask_catalog
from teachbot.simrobot.direct import WorldHousehold
from teachbot.skills.household import Thing
from teachbot.skills.household_containers import CONTAINER_EDGE, CONTAINER_GAP, Outline, apart, container_spot, inside, takes
from teachbot.world.household_objects import Catalog

pytestmark = pytest.mark.timeout(pytest_timeout(300))
SCENES = {  # task -> (its place, its objects: fixtures first)
    "sort": ("table", ["box 1", "box 2", "fresh apple", "white cup", "baseball", "ripe banana", "small bowl", "pear"]),
    "fruit_bowl": ("counter", ["bowl", "green apple", "tin can", "lemon", "small banana", "orange", "green pear"]),
    "point_colors": ("workbench", ["red apple", "soup can", "yellow lemon", "long banana", "navel orange", "bosc pear"]),
    "jello": ("sink", ["jello", "dessert bowl", "food can", "banana", "apple", "soft pear"]),
    "tower": ("shelf", ["red cube", "green cube", "black cube", "blue cube", "white cube"]),
}


@pytest.fixture(scope="module")
def multitask():
    with MultitaskWorld() as w:
        yield w


def ok(outcome):
    assert outcome.success, outcome.message
    return outcome


def run(w: MultitaskWorld, skill: str, **fields):
    if skill == "handover_object_to_human":
        fields.setdefault("timeout", 0.3)  # the person takes it
    return ok(w.skills().run(skill, **fields))


def positions(w: MultitaskWorld) -> dict[str, np.ndarray]:
    return {o.name: o.position.copy() for o in w.world.objects()}


def assert_side_by_side(w: MultitaskWorld, container: str, names: list[str]) -> None:
    """Each thing rests on the container's top, none on another, their footprints apart."""
    things = WorldHousehold(w.world).things()
    top = float(things[container].position[2] + things[container].size[2] / 2)
    truth = w.truth()
    for name in names:
        assert truth[name] == container, (name, truth[name])
        t = things[name]
        assert float(t.position[2] - t.size[2] / 2) == pytest.approx(top, abs=0.01), name
    for a, b in itertools.combinations(names, 2):
        assert apart(Outline.of(things[a]), Outline.of(things[b]), 0.0), (a, b)


# ---------------------------------------------------------------------------------------- catalog and scenes
def test_the_household_catalog_holds_the_benchmark_types_out_of_random_scenes():
    catalog = multitask_catalog()
    assert catalog == Catalog.load()  # the simulator's own catalog: nothing added for the benchmark
    for name in ("bin", "fruit_bowl", "jello", "sugar", "spoon", "baseball", "lemon", "can", "small_bowl"):
        assert name in catalog.types and not catalog.type(name).random
        assert name not in catalog.types_with("pickable") + catalog.types_with("container")  # never drawn at random
    assert {"jello", "sugar", "spoon", "baseball", "lemon", "can", "small_bowl"} <= set(catalog.types_with("pickable", drawn_only=False))
    assert "container" in catalog.type("bin").properties and "pickable" not in catalog.type("bin").properties
    assert "pickable" in catalog.type("jello").properties and "food" in catalog.type("sugar").properties
    assert {"pickable", "tool"} <= catalog.type("spoon").properties
    assert "cube" in catalog.types and "cup" in catalog.types  # the kitchen's own types stay


def test_each_scene_loads_at_its_place(multitask):
    assert multitask.scene_names() == sorted(SCENES)
    pickable = {n for n, t in multitask.catalog.types.items() if "pickable" in t.properties}
    for scene, (place, names) in SCENES.items():
        assert multitask.scene_objects(scene) == names
        multitask.load(scene)
        assert sorted(multitask.object_names()) == sorted(names)
        assert multitask.truth() == {n: place for n in names}, scene  # standing on its place, nothing on anything
        tasked = [n for n in names if multitask.world.object_type(n) in pickable]
        assert len(tasked) <= 6, scene


def test_each_scene_starts_the_simulator_as_teachbot_sim_scene_does():
    """``teachbot sim --world household --scene <task>.yaml``: the CLI's scene file, read and reset as the sim node
    does (load_household_scene with the default catalog, make_world of the household profile), without ROS."""
    from teachbot.cli import build_parser
    from teachbot.commands._args import scene_overrides
    from teachbot.robot_profile import RobotProfile
    from teachbot.sim.household_world import HouseholdWorld
    from teachbot.simrobot.factory import make_world
    from teachbot.world.household_scene import load_household_scene

    world = make_world(RobotProfile.load("household_sim"))
    assert isinstance(world, HouseholdWorld)
    try:
        for scene, (place, names) in SCENES.items():
            path = f"config/benchmarks/multitask/scenes/{scene}.yaml"
            args = build_parser().parse_args(["sim", "--world", "household", "--scene", path])
            world.reset(load_household_scene(str(scene_overrides(args)["scene_file"])))
            world.step(240)
            objects = {o.name: o for o in world.objects()}
            assert sorted(objects) == sorted(names), scene
            assert {o.place for o in objects.values()} == {place}, scene
            assert all(o.position[2] > 0.3 for o in objects.values()), scene  # on the furniture, not the floor
    finally:
        world.close()


def test_object_names_are_unique_across_the_scenes():
    names = [n for _, objects in SCENES.values() for n in objects]
    assert len(names) == len(set(names))


def test_any_two_scenes_and_all_five_load_together_without_overlap(multitask):
    for pair in [*itertools.combinations(SCENES, 2), tuple(SCENES)]:
        multitask.load(*pair)  # an overlap or a clashing name is a SceneSpecError
        before = positions(multitask)
        multitask.world.step(240)
        after = positions(multitask)
        assert all(np.linalg.norm(after[n] - before[n]) < 0.005 for n in before), pair  # nothing pushed or rolling
        assert set(multitask.truth().values()) == {SCENES[s][0] for s in pair}, pair


def test_loading_checks_its_scenes(multitask, tmp_path):
    (tmp_path / "a.yaml").write_text("objects:\n  - {name: cube, type: cube, at: table, offset: [0.0, 0.0]}\n")
    (tmp_path / "b.yaml").write_text("objects:\n  - {name: ball, type: ball, at: table, offset: [0.02, 0.0]}\n")
    with MultitaskWorld(multitask.catalog, tmp_path) as w:
        with pytest.raises(SceneSpecError, match="overlap"):
            w.load("a", "b")
        with pytest.raises(ConfigError, match="unknown multi-task scene 'c'"):
            w.load("c")
        with pytest.raises(ConfigError, match="at least one scene"):
            w.load()


def thing(name: str, size: tuple[float, float, float], xy=(0.0, 0.0), z: float = 0.0, props=("pickable",)) -> Thing:
    return Thing(name, name, np.array([*xy, z + size[2] / 2]), np.array(size), 0.0, "table", False, frozenset(props), {})


def test_container_spots_fill_a_bin_side_by_side_until_it_is_full():
    """Pure geometry: apples go into a bin nearest row first, each inside it and clear of the others."""
    box = thing("bin", (0.24, 0.32, 0.03), props=("container",))
    assert takes(box, thing("apple", (0.065, 0.065, 0.065))) and not takes(thing("cube", (0.04, 0.04, 0.04)), box)
    placed: list[Thing] = []
    with pytest.raises(PlaceFailedError, match="the bin has no free spot for 'apple 6' \\(it holds 'apple 0', "):
        for k in range(12):
            held = thing(f"apple {k}", (0.065, 0.065, 0.065))
            xy = container_spot(box, held, [box, *placed], to_arm=lambda p: p)  # the robot looks along +x
            spot = thing(held.name, (0.065, 0.065, 0.065), xy, z=0.03)
            assert inside(Outline.of(spot), Outline.of(box), CONTAINER_EDGE - 1e-9)
            assert all(apart(Outline.of(spot), Outline.of(o), CONTAINER_GAP - 1e-9) for o in placed)
            placed.append(spot)
    assert {round(float(t.position[0]), 3) for t in placed[:3]} == {-0.07}  # side by side in the row nearest the robot (1 cm grid)
    assert sorted(round(float(t.position[1]), 3) for t in placed[:3]) == [-0.09, 0.0, 0.09]  # from the middle out
    assert len(placed) == 6  # two rows of three


# ---------------------------------------------------------------------------------------- the tasks by hand
def test_sort_the_fruits_and_the_kitchenware_into_the_boxes_side_by_side(multitask):
    multitask.load("sort")
    for fruit in ("fresh apple", "ripe banana", "pear"):
        run(multitask, "grasp", object_name=fruit)
        assert multitask.truth()[fruit] == "robot"
        run(multitask, "place_object", location="box 1")
    for thing in ("white cup", "small bowl"):
        run(multitask, "grasp", object_name=thing)
        run(multitask, "place_object", location="box 2")
    multitask.world.step(240)  # and they stay there
    assert_side_by_side(multitask, "box 1", ["fresh apple", "ripe banana", "pear"])
    assert_side_by_side(multitask, "box 2", ["white cup", "small bowl"])
    assert multitask.truth()["box 1"] == multitask.truth()["baseball"] == "table"


def test_the_fruits_go_into_the_bowl_side_by_side(multitask):
    multitask.load("fruit_bowl")
    fruits = ["green apple", "lemon", "small banana", "orange", "green pear"]  # the paper's five
    for fruit in fruits:
        run(multitask, "grasp", object_name=fruit)
        run(multitask, "place_object", location="bowl")
    multitask.world.step(240)
    assert_side_by_side(multitask, "bowl", fruits)
    assert multitask.truth()["tin can"] == "counter"


def test_a_full_container_says_so(multitask, tmp_path):
    """The kitchen's small bowl takes one apple; the second gets a clear error, and nothing moved."""
    (tmp_path / "bowl.yaml").write_text("""objects:
  - {name: small bowl, type: bowl, at: table, offset: [-0.2, 0.0]}
  - {name: apple, type: apple, at: table, offset: [-0.2, 0.2]}
  - {name: crab apple, type: apple, at: table, offset: [-0.2, -0.2]}
""")
    with MultitaskWorld(multitask.catalog, tmp_path) as w:
        w.load("bowl")
        run(w, "grasp", object_name="apple")
        run(w, "place_object", location="small bowl")
        run(w, "grasp", object_name="crab apple")
        refused = w.skills().run("place_object", location="small bowl")
        assert not refused.success and refused.code == ErrorCode.PLACE_FAILED
        assert "the small bowl has no free spot for 'crab apple' (it holds 'apple')" in refused.message
        truth = w.truth()
        assert truth["apple"] == "small bowl" and truth["crab apple"] == "robot"


def test_a_tower_of_three_cubes_stands(multitask):
    multitask.load("tower")
    run(multitask, "grasp", object_name="red cube")
    run(multitask, "place_object", location="green cube")
    run(multitask, "grasp", object_name="blue cube")
    run(multitask, "place_object", location="red cube")
    run(multitask, "move_to", location="table")  # away, and time passes
    multitask.world.step(480)
    truth = multitask.truth()
    assert (truth["blue cube"], truth["red cube"], truth["green cube"]) == ("red cube", "green cube", "shelf")
    cubes = {o.name: o.position for o in multitask.world.objects() if o.name.endswith("cube")}
    assert np.linalg.norm(cubes["red cube"][:2] - cubes["green cube"][:2]) < 0.01  # stacked centred, as before
    assert np.linalg.norm(cubes["blue cube"][:2] - cubes["red cube"][:2]) < 0.01
    assert cubes["blue cube"][2] - cubes["green cube"][2] == pytest.approx(0.08, abs=0.005)


def test_the_jello_things_go_to_the_person(multitask):
    multitask.load("jello")
    for thing in ("dessert bowl", "jello", "banana"):  # the banana is long: held out short of the person's body
        run(multitask, "grasp", object_name=thing)
        run(multitask, "handover_object_to_human")
    truth = multitask.truth()
    assert [truth[n] for n in ("dessert bowl", "jello", "banana")] == ["person"] * 3
    assert truth["apple"] == truth["food can"] == truth["soft pear"] == "sink"
    assert not multitask.world.held_object()


@pytest.mark.slow
@pytest.mark.timeout(pytest_timeout(900))
def test_every_thing_of_every_scene_can_be_grasped_and_put_back(multitask):
    """All five scenes at once: each pickable thing to its place and back (run with -m slow or TEACHBOT_SLOW_TESTS=1)."""
    multitask.load(*SCENES)
    fixtures = {"box 1", "box 2", "bowl"}
    for scene, (place, names) in SCENES.items():
        for name in names:
            if name in fixtures:
                continue
            run(multitask, "grasp", object_name=name)
            assert multitask.truth()[name] == "robot", name
            run(multitask, "place_object", location=place)
            assert multitask.truth()[name] == place, (scene, name)
