"""Object crops from the fixed scene camera without segmentation ids (Issue 29 item 4): the detector's box, or the
tracked box projected, and a mask from depth (above the support, inside the footprint). The simulator's
segmentation is used here only as the ground truth the mask is checked against."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from teachbot.config import load_yaml
from teachbot.errors import InvalidArgumentError
from teachbot.knowledge.object_crop import ObjectBounds, object_crop, projected_box
from teachbot.paths import config_path
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import Frame
from teachbot.perception.localize import CameraModel, category_of
from teachbot.perception.pipeline import Perception
from teachbot.sim.camera import CameraSpec, quaternion_from_matrix
from teachbot.world.scene import ObjectSpec, SceneSpec

# a red cup with a green block beside it that reaches into the cup's box (seen from the camera), a bowl, a block
SCENE = (ObjectSpec("red cup", "cup", "red", (-0.05, -0.5), 0.4, "upright"),
         ObjectSpec("green block", "block", "green", (0.02, -0.53), 0.3),
         ObjectSpec("blue bowl", "bowl", "blue", (0.15, -0.65)),
         ObjectSpec("yellow cup", "cup", "yellow", (-0.2, -0.62), 0.0, "flipped"))


@pytest.fixture(scope="module")
def rendered(world):
    spec = CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])  # the fixed scene camera
    rotation, eye = spec.pose()
    camera = CameraModel.from_pose(spec.K, spec.width, spec.height, eye, quaternion_from_matrix(rotation))
    world.reset(SceneSpec(SCENE))
    image = world.render(spec)
    states = {s.name: s for s in world.objects()}
    labels = {s.body_id: {"category": s.category, "color": s.color, "name": s.name} for s in states.values()}
    config = replace(PerceptionConfig.load("perception"), queries=("block", "bowl", "cup"))
    perception = Perception(config)
    perception.update(Frame(image.rgb, image.depth, image.segmentation, labels, 1.0), camera)
    return image, camera, states, perception, config


def test_the_depth_mask_is_the_object(rendered) -> None:
    image, camera, states, perception, config = rendered
    bare = Frame(image.rgb, image.depth)  # no segmentation: what a real camera gives
    for name in ("red cup", "green block", "blue bowl", "yellow cup"):
        track = perception.scene.get(name)
        assert track is not None, name
        bounds = ObjectBounds.of(track.position, track.size, track.yaw, category_of(track.label, config).anchor)
        rgb, depth, mask = object_crop(bare, camera, bounds, track.box)
        x0, y0 = max(int(np.floor(track.box[0])) - 2, 0), max(int(np.floor(track.box[1])) - 2, 0)
        truth = image.segmentation[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]] == states[name].body_id
        iou = (mask & truth).sum() / (mask | truth).sum()
        assert rgb.shape[:2] == depth.shape == mask.shape and iou > 0.85, f"{name}: IoU {iou:.2f} with the segment"
        assert not (mask & (image.segmentation[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]] == states["green block"].body_id)).any() \
            or name == "green block"  # the neighbour reaching into the box is left out


def test_without_a_detection_box_the_tracked_box_is_projected(rendered) -> None:
    image, camera, states, perception, config = rendered
    track = perception.scene.get("red cup")
    bounds = ObjectBounds.of(track.position, track.size, track.yaw, category_of(track.label, config).anchor)
    x0, y0, x1, y1 = projected_box(bounds, camera)
    assert x0 <= track.box[0] + 3 and y0 <= track.box[1] + 3 and x1 >= track.box[2] - 3 and y1 >= track.box[3] - 3
    with_box = object_crop(Frame(image.rgb, image.depth), camera, bounds, track.box)
    projected = object_crop(Frame(image.rgb, image.depth), camera, bounds)
    assert abs(int(projected[2].sum()) - int(with_box[2].sum())) < 0.05 * with_box[2].sum()


def test_what_cannot_be_cropped(rendered) -> None:
    image, camera, _, perception, _ = rendered
    track = perception.scene.get("red cup")
    bounds = ObjectBounds.of(track.position, track.size, track.yaw)
    with pytest.raises(InvalidArgumentError, match="needs a depth image"):
        object_crop(Frame(image.rgb), camera, bounds, track.box)
    away = ObjectBounds(np.array([0.25, -0.3, 0.05]), np.array([0.04, 0.04, 0.04]))  # nothing stands there
    with pytest.raises(InvalidArgumentError, match="out of the camera's view"):
        object_crop(Frame(image.rgb, image.depth), camera, away)
    behind = ObjectBounds(np.array([0.0, -1.6, 1.2]), np.array([0.04, 0.04, 0.04]))  # behind the camera
    assert projected_box(behind, camera) is None
