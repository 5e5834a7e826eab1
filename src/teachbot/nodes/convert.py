"""Conversions between the core's dataclasses and teachbot_interfaces messages."""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
from sensor_msgs.msg import CameraInfo, Image
from teachbot_interfaces.msg import DetectedObject, SkillResult
from teachbot_interfaces.msg import ObjectState as ObjectStateMsg

from teachbot.sim.camera import CameraSpec
from teachbot.sim.direct import yaw_of
from teachbot.sim.world import ObjectState
from teachbot.skills.interfaces import ObjectInfo
from teachbot.skills.library import SkillOutcome


def pose_msg(position: np.ndarray, orientation: np.ndarray | None = None) -> Pose:
    q = orientation if orientation is not None else np.array([0.0, 0.0, 0.0, 1.0])
    return Pose(
        position=Point(x=float(position[0]), y=float(position[1]), z=float(position[2])),
        orientation=Quaternion(x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3])),
    )


def vector(v: np.ndarray) -> Vector3:
    return Vector3(x=float(v[0]), y=float(v[1]), z=float(v[2]))


def object_state_msg(o: ObjectState) -> ObjectStateMsg:
    return ObjectStateMsg(
        name=o.name, category=o.category, color=o.color, pose=pose_msg(o.position, o.orientation),
        size=vector(o.size), supported_by=o.supported_by, inside=o.inside, held=o.held, segmentation_id=o.body_id,
    )


def detected_object_msg(o: ObjectState, index: int) -> DetectedObject:
    """Ground truth as a perfect detection (what the sim publishes on its object topic)."""
    return DetectedObject(
        id=index, name=o.name, label=o.category, score=1.0, pose=pose_msg(o.position, o.orientation), size=vector(o.size)
    )


def object_info(msg: DetectedObject) -> ObjectInfo:
    p, q = msg.pose.position, msg.pose.orientation
    return ObjectInfo(
        name=msg.name, category=msg.label, position=np.array([p.x, p.y, p.z]),
        size=np.array([msg.size.x, msg.size.y, msg.size.z]), yaw=yaw_of(np.array([q.x, q.y, q.z, q.w])),
    )


def skill_result(outcome: SkillOutcome) -> SkillResult:
    return SkillResult(success=outcome.success, code=int(outcome.code), message=outcome.message, duration=float(outcome.duration))


def image_msg(array: np.ndarray, encoding: str, frame_id: str, stamp) -> Image:  # noqa: ANN001 - builtin Time
    """A numpy image as sensor_msgs/Image (row-major, little endian)."""
    array = np.ascontiguousarray(array)
    channels = 1 if array.ndim == 2 else array.shape[2]
    msg = Image(height=array.shape[0], width=array.shape[1], encoding=encoding, is_bigendian=0)
    msg.header.frame_id = frame_id
    msg.header.stamp = stamp
    msg.step = array.shape[1] * array.itemsize * channels
    msg.data = array.tobytes()
    return msg


def camera_info_msg(spec: CameraSpec, stamp) -> CameraInfo:  # noqa: ANN001
    k = spec.K
    info = CameraInfo(width=spec.width, height=spec.height, distortion_model="plumb_bob")
    info.header.frame_id = spec.frame_id
    info.header.stamp = stamp
    info.k = k.flatten().tolist()
    info.d = [0.0] * 5
    info.r = np.eye(3).flatten().tolist()
    info.p = [k[0, 0], 0.0, k[0, 2], 0.0, 0.0, k[1, 1], k[1, 2], 0.0, 0.0, 0.0, 1.0, 0.0]
    return info
