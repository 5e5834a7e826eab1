"""PyBullet bodies of the household world: furniture (solid blocks, the fridge with its hinged door, the
cupboard with its drawer, the person), the mobile base and the objects. Geometry comes from the layout
(``HouseholdLayout.fixed_boxes``) and the catalog; the world (``household_world``) owns the bodies."""

from __future__ import annotations

import math

import numpy as np
import pybullet as pb

from teachbot.world.household_layout import CABINET_WALL as WALL
from teachbot.world.household_layout import BaseSpec, HouseholdLayout, Place

Boxes = list[tuple[list[float], list[float]]]  # (half extents, centre) in one frame


def box_body(client: int, half: list[float], centre: list[float], rgb: tuple[float, ...], yaw: float = 0.0, mass: float = 0.0) -> int:
    """A single box."""
    col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=half, physicsClientId=client)
    vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=half, rgbaColor=[*rgb, 1.0], physicsClientId=client)
    return pb.createMultiBody(mass, col, vis, basePosition=centre, baseOrientation=pb.getQuaternionFromEuler([0, 0, yaw]),
                              physicsClientId=client)


def compound_shapes(client: int, boxes: Boxes) -> tuple[int, int]:
    """Collision and visual shapes of several boxes in one frame."""
    n = len(boxes)
    halves, centres = [b[0] for b in boxes], [b[1] for b in boxes]
    col = pb.createCollisionShapeArray([pb.GEOM_BOX] * n, halfExtents=halves, collisionFramePositions=centres, physicsClientId=client)
    vis = pb.createVisualShapeArray([pb.GEOM_BOX] * n, halfExtents=halves, visualFramePositions=centres, physicsClientId=client)
    return col, vis


def place_body(client: int, layout: HouseholdLayout, place: Place) -> int:
    """The body of one place: the person a cylinder, the fridge and the cupboard articulated (their moving
    part is link 0, on a joint from 0 to ``place.joint_limit``), anything else a solid block."""
    yaw = math.atan2(place.front[1], place.front[0])  # the place's own x axis points at the robot
    d, w = place.depth, place.width
    if place.hand is not None:
        col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=w / 2, height=place.height, physicsClientId=client)
        vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=w / 2, length=place.height, rgbaColor=[*place.rgb, 1.0],
                                   physicsClientId=client)
        body = pb.createMultiBody(0, col, vis, basePosition=[*place.centre, place.height / 2], physicsClientId=client)
    elif place.door is not None:
        body = _fridge(client, layout, place, yaw, d, w)
    elif place.drawer is not None:
        body = _cupboard(client, layout, place, yaw, d, w)
    else:
        body = box_body(client, [d / 2, w / 2, place.height / 2], [*place.centre, place.height / 2], place.rgb, yaw)
    pb.changeDynamics(body, -1, lateralFriction=1.0, physicsClientId=client)
    return body


def _articulated(client: int, place: Place, yaw: float, base: Boxes, link: Boxes, joint: tuple[int, list[float], list[float]]) -> int:
    """A fixed cabinet (``base`` boxes) with one moving part (``link`` boxes) on a joint."""
    joint_type, axis, origin = joint
    base_col, base_vis = compound_shapes(client, base)
    link_col, link_vis = compound_shapes(client, link)
    body = pb.createMultiBody(
        0, base_col, base_vis, basePosition=[*place.centre, 0.0], baseOrientation=pb.getQuaternionFromEuler([0, 0, yaw]),
        linkMasses=[2.0], linkCollisionShapeIndices=[link_col], linkVisualShapeIndices=[link_vis],
        linkPositions=[origin], linkOrientations=[[0, 0, 0, 1]], linkInertialFramePositions=[[0, 0, 0]],
        linkInertialFrameOrientations=[[0, 0, 0, 1]], linkParentIndices=[0], linkJointTypes=[joint_type],
        linkJointAxis=[axis], physicsClientId=client,
    )
    pb.changeDynamics(body, 0, jointLowerLimit=0.0, jointUpperLimit=place.joint_limit, linearDamping=0.5, angularDamping=0.5,
                      physicsClientId=client)
    for link_index in (-1, 0):
        pb.changeVisualShape(body, link_index, rgbaColor=[*place.rgb, 1.0], physicsClientId=client)
    return body


def _fridge(client: int, layout: HouseholdLayout, place: Place, yaw: float, d: float, w: float) -> int:
    h = place.height
    hinge_y = w / 2 if place.door.get("hinge", "right") == "right" else -w / 2  # type: ignore[union-attr]
    # the robot looks along -x: its right is +y. The door reaches from the hinge across the front.
    sign = -1.0 if hinge_y > 0 else 1.0
    door = [([WALL / 2, w / 2, h / 2 - 0.01], [0, sign * w / 2, h / 2])]
    axis = [0, 0, 1.0] if hinge_y > 0 else [0, 0, -1.0]  # either way a positive angle swings it towards the robot
    return _articulated(client, place, yaw, layout.fixed_boxes(place.name), door,
                        (pb.JOINT_REVOLUTE, axis, [d / 2 + WALL / 2, hinge_y, 0.0]))


def _cupboard(client: int, layout: HouseholdLayout, place: Place, yaw: float, d: float, w: float) -> int:
    dr = place.drawer or {}
    h, floor = place.height, float(dr["floor_height"])
    depth, width = float(dr["depth"]), float(dr["width"])
    drawer_h = h - WALL - floor - 0.01
    wall_h = min(0.1, drawer_h)
    drawer = [
        ([depth / 2, width / 2 - 0.005, 0.005], [0, 0, -0.005]),  # floor
        ([0.01, width / 2 - 0.005, wall_h / 2], [-depth / 2 + 0.01, 0, wall_h / 2]),  # back
        ([depth / 2, 0.005, wall_h / 2], [0, width / 2 - 0.01, wall_h / 2]),  # sides
        ([depth / 2, 0.005, wall_h / 2], [0, -width / 2 + 0.01, wall_h / 2]),
        ([0.01, width / 2 + 0.02, drawer_h / 2], [depth / 2 + 0.01, 0, drawer_h / 2 - 0.005]),  # front panel
    ]
    origin = [d / 2 - depth / 2 - 0.005, 0.0, floor]
    return _articulated(client, place, yaw, layout.fixed_boxes(place.name), drawer, (pb.JOINT_PRISMATIC, [1.0, 0, 0], origin))


def base_body(client: int, base: BaseSpec) -> int:
    """The mobile base: a box with a column up to the arm's mount (kinematic, mass 0)."""
    mount = base.arm_mount
    col, vis = compound_shapes(client, [
        ([base.size[0] / 2, base.size[1] / 2, base.size[2] / 2], [0, 0, base.size[2] / 2]),
        ([0.1, 0.1, (mount[2] - base.size[2]) / 2], [mount[0], mount[1], (mount[2] + base.size[2]) / 2]),
    ])
    body = pb.createMultiBody(0, col, vis, basePosition=[0, 0, 0], physicsClientId=client)
    pb.changeVisualShape(body, -1, rgbaColor=[0.25, 0.25, 0.28, 1.0], physicsClientId=client)
    return body


def object_body(client: int, shape: str, size: tuple[float, ...], mass: float, xy: tuple[float, float], z: float,
                yaw: float) -> tuple[int, np.ndarray]:
    """An object of the catalog's ``shape`` and ``size`` standing on height ``z``; returns it and its bounding box."""
    if shape == "box":
        half = [size[0] / 2, size[1] / 2, size[2] / 2]
        col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=half, physicsClientId=client)
        vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=half, physicsClientId=client)
        bbox = np.array(size[:3])
    elif shape == "cylinder":
        col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=size[0] / 2, height=size[1], physicsClientId=client)
        vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=size[0] / 2, length=size[1], physicsClientId=client)
        bbox = np.array([size[0], size[0], size[1]])
    else:
        col = pb.createCollisionShape(pb.GEOM_SPHERE, radius=size[0] / 2, physicsClientId=client)
        vis = pb.createVisualShape(pb.GEOM_SPHERE, radius=size[0] / 2, physicsClientId=client)
        bbox = np.array([size[0]] * 3)
    body = pb.createMultiBody(mass, col, vis, basePosition=[xy[0], xy[1], z + bbox[2] / 2 + 1e-3],
                              baseOrientation=pb.getQuaternionFromEuler([0, 0, yaw]), physicsClientId=client)
    pb.changeDynamics(body, -1, lateralFriction=1.0, spinningFriction=0.002, rollingFriction=0.001 if shape == "sphere" else 0.0,
                      physicsClientId=client)
    return body, bbox
