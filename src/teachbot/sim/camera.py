"""A pinhole RGB-D camera rendered by PyBullet: intrinsics, extrinsics and metric depth."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pybullet as pb


@dataclass(frozen=True)
class CameraSpec:
    """Camera placement and optics; ``eye``/``target`` are in the robot base frame."""

    width: int = 640
    height: int = 480
    fov_y: float = 55.0
    eye: tuple[float, float, float] = (0.0, -1.15, 0.75)
    target: tuple[float, float, float] = (0.0, -0.5, 0.0)
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)
    near: float = 0.05
    far: float = 3.0
    rate: float = 5.0
    frame_id: str = "camera_color_optical_frame"

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> CameraSpec:
        return cls(
            width=int(raw.get("width", 640)),
            height=int(raw.get("height", 480)),
            fov_y=float(raw.get("fov_y", 55.0)),
            eye=tuple(float(v) for v in raw.get("eye", cls.eye)),  # type: ignore[arg-type]
            target=tuple(float(v) for v in raw.get("target", cls.target)),  # type: ignore[arg-type]
            near=float(raw.get("near", 0.05)),
            far=float(raw.get("far", 3.0)),
            rate=float(raw.get("rate", 5.0)),
            frame_id=str(raw.get("frame_id", cls.frame_id)),
        )

    @property
    def fy(self) -> float:
        return self.height / (2.0 * math.tan(math.radians(self.fov_y) / 2.0))

    @property
    def fx(self) -> float:
        return self.fy  # square pixels

    @property
    def K(self) -> np.ndarray:  # noqa: N802 - the usual name of the intrinsic matrix
        return np.array([[self.fx, 0.0, self.width / 2.0], [0.0, self.fy, self.height / 2.0], [0.0, 0.0, 1.0]])

    def pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Rotation (columns: optical x right, y down, z forward) and position in the base frame."""
        eye, target, up = (np.asarray(v, float) for v in (self.eye, self.target, self.up))
        z = target - eye
        z /= np.linalg.norm(z)
        x = np.cross(z, up)
        x /= np.linalg.norm(x)
        y = np.cross(z, x)
        return np.stack([x, y, z], axis=1), eye

    def view_matrix(self) -> list[float]:
        return pb.computeViewMatrix(self.eye, self.target, self.up)

    def projection_matrix(self) -> list[float]:
        return pb.computeProjectionMatrixFOV(self.fov_y, self.width / self.height, self.near, self.far)

    def linear_depth(self, buffer: np.ndarray) -> np.ndarray:
        """OpenGL depth buffer (0..1) to metres along the optical axis."""
        return self.far * self.near / (self.far - (self.far - self.near) * buffer)

    def deproject(self, u: float, v: float, depth: float) -> np.ndarray:
        """Pixel (u right, v down) with metric depth to a point in the base frame."""
        rot, eye = self.pose()
        ray = np.array([(u - self.width / 2.0) / self.fx, (v - self.height / 2.0) / self.fy, 1.0])
        return eye + rot @ (ray * depth)


def quaternion_from_matrix(rot: np.ndarray) -> np.ndarray:
    """(x, y, z, w) quaternion of a proper rotation matrix."""
    m = np.asarray(rot, float)
    trace = np.trace(m)
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, s / 4]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        q = [0.0, 0.0, 0.0, (m[k, j] - m[j, k]) / s]
        q[i], q[j], q[k] = s / 4, (m[j, i] + m[i, j]) / s, (m[k, i] + m[i, k]) / s
    return np.array(q) / np.linalg.norm(q)


@dataclass
class CameraFrame:
    rgb: np.ndarray  # (H, W, 3) uint8
    depth: np.ndarray  # (H, W) float32 metres
    segmentation: np.ndarray  # (H, W) int32 body id, -1 for background


def render(spec: CameraSpec, client: int) -> CameraFrame:
    """Render one frame with the CPU renderer (works headless in DIRECT mode)."""
    _, _, rgba, depth, seg = pb.getCameraImage(
        spec.width,
        spec.height,
        spec.view_matrix(),
        spec.projection_matrix(),
        renderer=pb.ER_TINY_RENDERER,
        physicsClientId=client,
    )
    rgba = np.asarray(rgba, dtype=np.uint8).reshape(spec.height, spec.width, 4)
    depth = spec.linear_depth(np.asarray(depth, dtype=np.float32).reshape(spec.height, spec.width))
    seg = np.asarray(seg, dtype=np.int32).reshape(spec.height, spec.width)
    return CameraFrame(rgb=np.ascontiguousarray(rgba[:, :, :3]), depth=depth.astype(np.float32), segmentation=seg)
