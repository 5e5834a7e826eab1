"""Perception core without ROS: sim_ground_truth detections placed in 3D on seeded scenes, colour
naming from pixels, projection maths, tracking through occlusion, and every scene relation."""

from __future__ import annotations

import math

import numpy as np
import pybullet as pb
import pytest

from teachbot.config import load_yaml
from teachbot.errors import InvalidArgumentError, UnknownObjectError
from teachbot.paths import config_path
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import Detection, Frame, make_detector
from teachbot.perception.localize import CameraModel, Observation, localize, rotation_from_quaternion
from teachbot.perception.pipeline import Perception
from teachbot.perception.relations import RELATIONS
from teachbot.perception.scene_model import OCCLUDED, SceneModel
from teachbot.sim.camera import CameraSpec, quaternion_from_matrix
from teachbot.simrobot.direct import yaw_of
from teachbot.world.scene import generate_scene, scene_from_yaml


@pytest.fixture(scope="module")
def config() -> PerceptionConfig:
    return PerceptionConfig.load()


@pytest.fixture(scope="module")
def spec() -> CameraSpec:
    return CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])


@pytest.fixture(scope="module")
def camera(spec) -> CameraModel:
    rot, eye = spec.pose()
    return CameraModel.from_pose(spec.K, spec.width, spec.height, eye, quaternion_from_matrix(rot))


def sim_frame(world, spec, stamp=0.0, labels=True) -> Frame:
    f = world.render(spec)
    seg_labels = {o.body_id: {"category": o.category, "color": o.color, "name": o.name} for o in world.objects()}
    return Frame(f.rgb, f.depth, f.segmentation, seg_labels if labels else {}, stamp)


# ---------------------------------------------------------------- sim_ground_truth on seeded scenes
@pytest.mark.parametrize("seed", range(20))
def test_sim_ground_truth_finds_every_object_within_a_centimetre(seed, world, spec, camera, config):
    world.reset(generate_scene(seed, world.table))
    perception = Perception(config)
    tracked = {t.name: t for t in perception.update(sim_frame(world, spec), camera)}
    truth = {o.name: o for o in world.objects()}
    assert sorted(tracked) == sorted(truth)
    for name, obj in truth.items():
        t = tracked[name]
        error = float(np.linalg.norm(t.position - obj.position))
        assert error < 0.01, f"seed {seed}: {name} placed {error * 100:.2f} cm from the simulator's ground truth"
        assert t.label == obj.category and t.color == obj.color
        assert np.allclose(t.size, obj.size, atol=1e-6)
        if obj.category == "block":  # a cube's yaw is defined modulo a quarter turn
            d = (t.yaw - yaw_of(obj.orientation) + math.pi / 4) % (math.pi / 2) - math.pi / 4
            assert abs(d) < math.radians(4), f"seed {seed}: {name} yaw off by {math.degrees(d):.1f} deg"


def test_colour_is_named_from_the_pixels_when_the_detector_only_says_block(world, spec, camera, config):
    """A class-only detection (no name, no instance) of each object gets the simulator's colour name."""
    checked = 0
    for seed in range(5):
        world.reset(generate_scene(seed, world.table))
        frame = sim_frame(world, spec)
        for det in make_detector("sim_ground_truth").detect(frame, ["block", "bowl"]):
            anonymous = Detection(det.label, 0.8, det.box, mask=det.mask)
            obs = localize(anonymous, frame, camera, config)
            truth = frame.segment_labels[det.instance]
            assert obs is not None and obs.name == truth["name"] and obs.color == truth["color"]
            checked += 1
    assert checked >= 10


def test_queries_select_classes_and_names(world, spec):
    world.reset(scene_from_yaml("objects:\n  - {category: block, color: red, position: [-0.1, -0.45]}\n"
                                "  - {category: block, color: blue, position: [0.05, -0.6]}\n"
                                "  - {category: bowl, color: green, position: [0.12, -0.35]}\n", world.table))
    frame = sim_frame(world, spec)
    detector = make_detector("sim_ground_truth")
    assert sorted(d.name for d in detector.detect(frame, ["block"])) == ["blue block", "red block"]
    assert [d.name for d in detector.detect(frame, ["green bowl"])] == ["green bowl"]
    assert len(detector.detect(frame, [])) == 3
    assert detector.detect(frame, ["cup"]) == []


def test_sim_ground_truth_without_segmentation_says_which_backend_to_use(config):
    frame = Frame(np.zeros((4, 4, 3), np.uint8), np.ones((4, 4), np.float32))
    with pytest.raises(InvalidArgumentError, match="perception.backend in config/perception.yaml"):
        make_detector("sim_ground_truth").detect(frame, ["block"])
    with pytest.raises(InvalidArgumentError, match="set perception.backend in config/perception.yaml to one of"):
        make_detector("magic_eye")


# ---------------------------------------------------------------- projection maths
def test_projection_from_a_camera_looking_straight_down():
    """Optical frame at (0.1, -0.5, 1.0), z down, x along base x, y along base -y: quaternion (1, 0, 0, 0)."""
    K = np.array([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]])
    cam = CameraModel.from_pose(K, 640, 480, np.array([0.1, -0.5, 1.0]), np.array([1.0, 0, 0, 0]))
    assert np.allclose(cam.deproject(np.array([320.0]), np.array([240.0]), np.array([1.0])), [[0.1, -0.5, 0.0]])
    # 50 px right and 100 px down at 0.8 m depth: 8 cm along +x, 16 cm along -y, 0.2 m above the table
    assert np.allclose(cam.deproject(np.array([370.0]), np.array([340.0]), np.array([0.8])), [[0.18, -0.66, 0.2]])
    u, v, z = cam.project(np.array([[0.18, -0.66, 0.2], [0.1, -0.5, 2.0]]))
    assert np.allclose(u[0], 370) and np.allclose(v[0], 340) and np.allclose(z, [0.8, -1.0])
    assert np.allclose(cam.rays[340, 370] * 0.8 + cam.position, [0.18, -0.66, 0.2])


def test_projection_round_trips_for_tilted_cameras_and_matches_the_sim_camera(spec, camera):
    rng = np.random.default_rng(7)
    for _ in range(5):
        q = rng.normal(size=4)
        rot = rotation_from_quaternion(q)
        assert np.allclose(rot, np.array(pb.getMatrixFromQuaternion(list(q / np.linalg.norm(q)))).reshape(3, 3))
        cam = CameraModel.from_pose(spec.K, spec.width, spec.height, rng.normal(size=3), q)
        u, v, d = rng.uniform(0, 640, 20), rng.uniform(0, 480, 20), rng.uniform(0.2, 3.0, 20)
        u2, v2, d2 = cam.project(cam.deproject(u, v, d))
        assert np.allclose(u, u2) and np.allclose(v, v2) and np.allclose(d, d2)
    for u, v, d in [(0, 0, 1.0), (320, 240, 0.9), (639, 100, 1.3)]:
        assert np.allclose(camera.deproject(np.array([u]), np.array([v]), np.array([d]))[0], spec.deproject(u, v, d))


def test_config_extrinsics_fallback_is_the_sim_camera(config, spec):
    ext = config.camera["extrinsics"]
    rot, eye = spec.pose()
    assert np.allclose(ext["position"], eye)
    assert np.allclose(rotation_from_quaternion(np.array(ext["orientation"])), rot, atol=1e-5)


# ---------------------------------------------------------------- tracking
SCENE = ("objects:\n  - {category: block, color: red, position: [0.0, -0.5]}\n"
         "  - {category: bowl, color: blue, position: [0.15, -0.35]}\n")


def test_an_occluded_object_keeps_its_entry_and_a_removed_one_is_dropped(world, spec, camera, config):
    world.reset(scene_from_yaml(SCENE, world.table))
    perception = Perception(config)
    first = {t.name: t for t in perception.update(sim_frame(world, spec, 0.0), camera)}
    assert set(first) == {"red block", "blue bowl"}
    block = next(o for o in world.objects() if o.name == "red block")
    # a gripper-sized plate halfway between the camera and the block hides it completely
    eye = np.array(spec.eye)
    mid = eye + 0.5 * (block.position - eye)
    vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=[0.06, 0.06, 0.06], physicsClientId=world.client)
    plate = pb.createMultiBody(0, -1, vis, basePosition=mid.tolist(), physicsClientId=world.client)
    try:
        for stamp in (1.0, 5.0, 20.0):  # far beyond the missing timeout, within the occlusion timeout
            frame = sim_frame(world, spec, stamp)
            assert not np.any(frame.segmentation == block.body_id), "the plate must hide the block"
            tracked = {t.name: t for t in perception.update(frame, camera)}
            assert "red block" in tracked and not tracked["red block"].seen
            assert tracked["red block"].hidden == OCCLUDED
            assert tracked["red block"].id == first["red block"].id
            assert np.allclose(tracked["red block"].position, first["red block"].position)
    finally:
        pb.removeBody(plate, physicsClientId=world.client)
    seen_again = {t.name: t for t in perception.update(sim_frame(world, spec, 21.0), camera)}
    assert seen_again["red block"].seen and seen_again["red block"].id == first["red block"].id
    # taken away: its place is in plain view and empty, so it goes after tracking.missing_timeout
    pb.resetBasePositionAndOrientation(block.body_id, [2.0, 3.0, 0.02], [0, 0, 0, 1], physicsClientId=world.client)
    still = {t.name: t for t in perception.update(sim_frame(world, spec, 21.5), camera)}
    assert still["red block"].hidden in ("missing", "out_of_view")
    gone = {t.name for t in perception.update(sim_frame(world, spec, 21.5 + config.tracking.missing_timeout + 0.1), camera)}
    assert "red block" not in gone and "blue bowl" in gone


def obs(name, position, size=(0.04, 0.04, 0.04), label=None, yaw=0.0):
    label = label or name.split()[-1]
    return Observation(name, label, 1.0, np.array(position, float), np.array(size, float), yaw, name.split()[0])


def test_a_carried_object_keeps_its_track_and_namesakes_are_numbered(config):
    scene = SceneModel(config)
    scene.update([obs("red block", [0.0, -0.5, 0.02]), obs("red block", [0.2, -0.5, 0.02])], 0.0)
    names = {t.name: t.id for t in scene.objects()}
    assert set(names) == {"red block", "red block 2"}
    scene.update([obs("red block", [0.01, -0.5, 0.02]), obs("red block", [0.21, -0.5, 0.02])], 0.2)
    assert {t.name: t.id for t in scene.objects()} == names
    single = SceneModel(config)
    single.update([obs("red block", [0.0, -0.5, 0.02])], 0.0)
    tid = single.objects()[0].id
    single.update([obs("red block", [0.0, -0.5, 0.25])], 0.2)  # lifted 23 cm between two frames
    assert [(t.id, t.position[2]) for t in single.objects()] == [(tid, 0.25)]


# ---------------------------------------------------------------- relations on constructed scenes
@pytest.fixture()
def queries(config):
    perception = Perception(config, detector=make_detector("sim_ground_truth"))
    perception.scene.update([
        obs("red block", [-0.10, -0.50, 0.02]),
        obs("green block", [0.10, -0.50, 0.02]),
        obs("blue block", [0.10, -0.50, 0.06]),  # stacked on the green block
        obs("yellow block", [-0.10, -0.65, 0.02]),  # nearer the viewer than the red block
        obs("blue bowl", [0.0, -0.35, 0.0], (0.14, 0.14, 0.04)),
        obs("pink block", [0.0, -0.35, 0.026]),  # in the bowl, on its floor
        obs("cyan block", [-0.10, -0.455, 0.02]),  # 0.5 cm beside the red block
    ], 1.0)
    return perception.queries


@pytest.mark.parametrize(("relation", "subject", "obj", "holds"), [
    ("left_of", "red block", "green block", True),
    ("left_of", "green block", "red block", False),
    ("left_of", "red block", "yellow block", False),  # same x: neither left nor right
    ("right_of", "green block", "red block", True),
    ("right_of", "red block", "green block", False),
    ("in_front_of", "yellow block", "red block", True),
    ("in_front_of", "red block", "yellow block", False),
    ("behind", "red block", "yellow block", True),
    ("behind", "yellow block", "red block", False),
    ("on_top_of", "blue block", "green block", True),
    ("on_top_of", "green block", "blue block", False),
    ("on_top_of", "red block", "green block", False),
    ("on_top_of", "pink block", "blue bowl", True),
    ("inside", "pink block", "blue bowl", True),
    ("inside", "blue block", "green block", False),  # a block is no container
    ("inside", "red block", "blue bowl", False),
    ("near", "red block", "cyan block", True),
    ("near", "red block", "green block", False),
    ("near", "blue block", "green block", True),
    ("blocking", "blue block", "green block", True),  # stacked on it: the green one cannot be grasped
    ("blocking", "green block", "blue block", False),
    ("blocking", "cyan block", "red block", True),  # too close for a finger between them
    ("blocking", "yellow block", "red block", False),
    ("blocking", "blue bowl", "pink block", False),  # the bowl holding it does not block it
    ("above", "blue block", "green block", True),
    ("above", "green block", "blue block", False),
    ("above", "red block", "green block", False),  # beside it, not over it
    ("above", "pink block", "blue bowl", False),  # in the bowl, not above it
    ("below", "green block", "blue block", True),
    ("below", "blue block", "green block", False),
])
def test_relation(queries, relation, subject, obj, holds):
    assert queries.relation(relation, subject, obj) is holds


def test_every_relation_is_covered_and_bad_queries_say_what_to_do(queries):
    assert set(RELATIONS) == {"left_of", "right_of", "in_front_of", "behind", "on_top_of", "inside", "near", "blocking",
                              "above", "below"}
    assert queries.relation("left of", "red block", "green block")  # spoken form accepted
    with pytest.raises(InvalidArgumentError, match="use one of left_of"):
        queries.relation("under", "red block", "green block")
    with pytest.raises(UnknownObjectError, match="perception knows: blue block, blue bowl"):
        queries.relation("near", "red block", "purple block")


def test_distance_state_and_properties(queries):
    assert queries.distance_to_robot("red block") == pytest.approx(math.dist([-0.10, -0.50, 0.02], [0, 0, 0]))
    state = queries.state("blue block")
    assert state["supported_by"] == "green block" and state["inside"] == "" and state["on_table"] == "False"
    pink = queries.state("pink block")
    assert pink["supported_by"] == "blue bowl" and pink["inside"] == "blue bowl"
    assert queries.state("red block")["on_table"] == "True"
    props = queries.properties("blue bowl")
    assert props["container"] == "true" and props["graspable"] == "false" and props["color"] == "blue"
    assert queries.properties("red block")["graspable"] == "true"
