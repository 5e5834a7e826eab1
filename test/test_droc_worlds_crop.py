"""DROC's object crops as the robot's perception makes them (``DrocWorlds.crop``), never by the simulator's
segmentation ids: the household's mast camera from where the skills stand at the thing's place, the tabletop's
fixed scene camera with the detector's box. Per world: the crop is not empty, nothing reads segmentation ids for
it, two objects of other colours describe apart, and the same object moved elsewhere describes closer than
another colour does. The household's base and arm are where they were after the crop."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pybullet as pb
import pytest
from timing import pytest_timeout

import teachbot.evaluation.droc_worlds as droc_worlds
import teachbot.knowledge.descriptor as descriptor_module
from teachbot.evaluation.droc_tasks import load_tasks
from teachbot.evaluation.droc_worlds import Crop, DrocWorlds
from teachbot.knowledge.descriptor import ColourDepthDescriptor
from teachbot.knowledge.retriever import KnowledgeConfig
from teachbot.sim.household_world import HouseholdWorld

pytestmark = pytest.mark.timeout(pytest_timeout(300))

BY_ID = {t.id: t for t in load_tasks()}
# (task, the variant whose scene has two colours, the object, the other colour's object, a variant with the object moved)
CASES = {"household": ("my_cup", "blue_and_red", "blue cup", "red cup", "swapped"),
         "tabletop": ("the_block_i_mean", "green_not_red", "green block", "red block", "moved")}


@pytest.fixture(scope="module")
def worlds():
    with DrocWorlds() as w:
        yield w


@pytest.fixture(scope="module")
def embedder() -> ColourDepthDescriptor:
    return ColourDepthDescriptor(KnowledgeConfig.load().descriptor)


@pytest.fixture
def no_segmentation(monkeypatch) -> list[Any]:
    """The segmentation cut is gone; every frame the crop gets is recorded (its segmentation must be None); the
    household's renders come without segmentation at all (the tabletop's detector still reads its ids)."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("crop_object (the segmentation cut) was called")

    monkeypatch.setattr(descriptor_module, "crop_object", refuse)
    frames: list[Any] = []
    real_crop = droc_worlds.object_crop

    def spy(frame, *args: Any, **kwargs: Any):
        frames.append(frame)
        return real_crop(frame, *args, **kwargs)

    monkeypatch.setattr(droc_worlds, "object_crop", spy)
    real_render = HouseholdWorld.render
    monkeypatch.setattr(HouseholdWorld, "render", lambda self, spec: dataclasses.replace(real_render(self, spec), segmentation=None))
    return frames


def crop_of(worlds: DrocWorlds, task_id: str, variant: str, name: str, load: bool = True) -> Crop:
    task = BY_ID[task_id]
    return worlds.crop(task, dataclasses.replace(task.variant(variant), object=name), load=load)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_crop_comes_from_box_and_depth_and_tells_colours_apart(worlds, embedder, no_segmentation, kind) -> None:
    task_id, scene, name, other, moved = CASES[kind]
    crop = crop_of(worlds, task_id, scene, name)
    assert crop.rgb.dtype == np.uint8 and crop.rgb.shape[:2] == crop.depth.shape == crop.mask.shape
    assert crop.mask.sum() > 100 and np.all(np.isfinite(crop.depth[crop.mask]))
    assert no_segmentation and all(f.segmentation is None for f in no_segmentation)
    look = embedder.embed(crop.rgb, crop.depth, crop.mask)
    other_look = embedder.embed(*dataclasses.astuple(crop_of(worlds, task_id, scene, other, load=False)))
    moved_look = embedder.embed(*dataclasses.astuple(crop_of(worlds, task_id, moved, name)))
    apart, again = embedder.similarity(look, other_look), embedder.similarity(look, moved_look)
    print(f"{kind}: {name} moved {again:.3f}, the {other} {apart:.3f}")
    assert not np.allclose(look, other_look) and apart < 0.95  # the same shape, another colour: not the same look
    assert again > apart, f"{name} moved scores {again:.3f}, the {other} {apart:.3f}"
    assert again >= KnowledgeConfig.load().visual_threshold  # the moved object would find what was taught on it


def test_the_household_crop_puts_the_base_and_the_arm_back(worlds, no_segmentation) -> None:
    task = BY_ID["my_cup"]
    world = worlds.load(task, task.variant("blue_and_red"))
    assert isinstance(world, HouseholdWorld)

    def state() -> tuple[Any, ...]:
        joints = tuple(round(pb.getJointState(world.robot_id, j, physicsClientId=world.client)[0], 9) for j in world.arm_indices)
        base = pb.getBasePositionAndOrientation(world.base_id, physicsClientId=world.client)
        return world.base_pose, joints, tuple(np.round(base[0], 9)), tuple(np.round(base[1], 9))

    before = state()
    crop_of(worlds, "my_cup", "blue_and_red", "blue cup", load=False)
    crop_of(worlds, "drawer_part_open", "cupboard", "cupboard", load=False)  # a piece of furniture: its box
    assert state() == before


def test_a_thing_hidden_or_unknown_has_no_crop(worlds, no_segmentation) -> None:
    with pytest.raises(Exception, match="no 'nothing here'"):
        crop_of(worlds, "my_cup", "blue_and_red", "nothing here")
    # the milk stands in the closed fridge: the mast camera does not see it
    with pytest.raises(Exception, match="in view"):
        crop_of(worlds, "drawer_part_open", "fridge", "milk")
