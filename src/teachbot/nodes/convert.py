"""Conversions between the core's dataclasses and teachbot_interfaces messages."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
from sensor_msgs.msg import CameraInfo, Image, RegionOfInterest
from teachbot_interfaces.msg import DetectedObject, SkillResult
from teachbot_interfaces.msg import ObjectState as ObjectStateMsg

from teachbot.sim.camera import CameraSpec
from teachbot.sim.world import ObjectState
from teachbot.simrobot.direct import yaw_of
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


# ---------------------------------------------------------------- perception
IMAGE_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def image_array(msg: Image) -> np.ndarray:
    """sensor_msgs/Image as numpy: colour as HxWx3 uint8 RGB, depth as HxW float32 metres (16UC1 is
    millimetres), labels (32SC1) as HxW int32. Other encodings raise a ValueError naming the supported ones."""
    enc = msg.encoding.lower()
    h, w = msg.height, msg.width
    if enc in IMAGE_CHANNELS:
        n = IMAGE_CHANNELS[enc]
        raw = np.frombuffer(msg.data, np.uint8).reshape(h, msg.step)[:, : w * n].reshape(h, w, n)
        if n == 1:
            return np.repeat(raw, 3, axis=2)
        rgb = raw[:, :, 2::-1] if enc.startswith("bgr") else raw[:, :, :3]
        return np.ascontiguousarray(rgb)
    dtypes = {"32fc1": np.float32, "16uc1": np.uint16, "32sc1": np.int32}
    if enc not in dtypes:
        raise ValueError(f"image encoding {msg.encoding!r} is not supported; use one of {sorted([*IMAGE_CHANNELS, *dtypes])}")
    dtype = np.dtype(dtypes[enc]).newbyteorder(">" if msg.is_bigendian else "<")
    arr = np.frombuffer(msg.data, dtype).reshape(h, msg.step // dtype.itemsize)[:, :w]
    if enc == "16uc1":
        return arr.astype(np.float32) / 1000.0
    return arr.astype(dtypes[enc], copy=False)


def stamp_seconds(stamp) -> float:  # noqa: ANN001 - builtin_interfaces/Time
    return stamp.sec + stamp.nanosec * 1e-9


def stamp_msg(seconds: float):  # noqa: ANN201 - builtin_interfaces/Time
    return Time(sec=int(seconds), nanosec=int(round((seconds % 1) * 1e9)) % 1_000_000_000)


def tracked_object_msg(obj, object_id: int | None = None) -> DetectedObject:  # noqa: ANN001 - TrackedObject or Observation
    """A scene-model object (or a one-off observation) as DetectedObject."""

    half = obj.yaw / 2
    x0, y0, x1, y1 = obj.box
    msg = DetectedObject(
        id=int(obj.id if object_id is None else object_id), name=obj.name, label=obj.label, score=float(obj.score),
        pose=pose_msg(obj.position, np.array([0.0, 0.0, np.sin(half), np.cos(half)])), size=vector(obj.size),
        bbox=RegionOfInterest(x_offset=max(int(x0), 0), y_offset=max(int(y0), 0), width=max(int(x1 - x0), 0),
                              height=max(int(y1 - y0), 0)),
    )
    last_seen = getattr(obj, "last_seen", None)
    if last_seen is not None:
        msg.last_seen = stamp_msg(last_seen)
    return msg
