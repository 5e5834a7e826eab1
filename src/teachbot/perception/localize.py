"""From 2D detections to named objects in the robot base frame.

Pixel + depth + intrinsics (CameraInfo K) + extrinsics (the optical frame's pose in the base frame)
give 3D points. A camera sees only an object's near surfaces, so the centroid of its points is not
its centre; the known geometry of its category (config ``perception.categories``) corrects that:
a box is placed from its top face, a bowl from a circle fitted to its rim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from teachbot.errors import InvalidArgumentError
from teachbot.perception.config import CategorySpec, LocalizationConfig, PerceptionConfig
from teachbot.perception.detector import Detection, Frame


@dataclass(frozen=True, eq=False)
class CameraModel:
    """A pinhole camera: ``K`` (ROS convention, pixel centres at integers) and the optical frame's pose
    in the base frame (``rotation`` columns = optical x right, y down, z forward; ``position``)."""

    K: np.ndarray
    width: int
    height: int
    rotation: np.ndarray
    position: np.ndarray

    @classmethod
    def from_pose(cls, K: np.ndarray, width: int, height: int, position: np.ndarray, quaternion: np.ndarray) -> CameraModel:  # noqa: N803
        """Camera from intrinsics and an (x, y, z, w) orientation quaternion of the optical frame."""
        K = np.asarray(K, float).reshape(3, 3)  # noqa: N806
        if K[0, 0] <= 0 or K[1, 1] <= 0 or width <= 0 or height <= 0:
            raise InvalidArgumentError(f"camera intrinsics are not usable (K={K.tolist()}, {width}x{height}); check camera_info")
        return cls(K, int(width), int(height), rotation_from_quaternion(quaternion), np.asarray(position, float).reshape(3))

    @cached_property
    def rays(self) -> np.ndarray:
        """(H, W, 3) base-frame ray per pixel with unit optical depth: point = position + ray * depth.
        Computed once per camera model; frames share it until the pose or intrinsics change."""
        u = (np.arange(self.width) - self.K[0, 2]) / self.K[0, 0]
        v = (np.arange(self.height) - self.K[1, 2]) / self.K[1, 1]
        cam = np.stack(np.broadcast_arrays(u[None, :], v[:, None], np.ones((1, 1))), axis=-1)
        return cam @ self.rotation.T

    def deproject(self, u: np.ndarray, v: np.ndarray, depth: np.ndarray) -> np.ndarray:
        """Pixels (u right, v down; integer = pixel centre) with optical depth (m) -> (N, 3) base-frame points."""
        u, v, depth = (np.asarray(a, float) for a in (u, v, depth))
        cam = np.stack([(u - self.K[0, 2]) / self.K[0, 0] * depth, (v - self.K[1, 2]) / self.K[1, 1] * depth, depth], axis=-1)
        return cam @ self.rotation.T + self.position

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Base-frame points (N, 3) -> pixel u, v and optical depth (negative: behind the camera)."""
        cam = (np.asarray(points, float).reshape(-1, 3) - self.position) @ self.rotation
        z = cam[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = self.K[0, 0] * cam[:, 0] / z + self.K[0, 2]
            v = self.K[1, 1] * cam[:, 1] / z + self.K[1, 2]
        return u, v, z


def rotation_from_quaternion(q: np.ndarray) -> np.ndarray:
    """3x3 rotation of an (x, y, z, w) quaternion (normalised first)."""
    x, y, z, w = np.asarray(q, float).reshape(4) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


@dataclass(frozen=True, eq=False)
class Observation:
    """One detection placed in the base frame: what the scene model tracks."""

    name: str  # "red block"
    label: str  # detector class ("block")
    score: float
    position: np.ndarray  # the category's reference point (centre, or base centre for containers)
    size: np.ndarray  # extent x, y, z
    yaw: float = 0.0
    color: str = ""
    box: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    instance: int = -1
    points: int = 0  # valid depth points it was placed from


def category_of(label: str, config: PerceptionConfig) -> CategorySpec:
    """The category spec a detector label refers to: "block", or the last word of "red block"."""
    if label in config.categories:
        return config.categories[label]
    words = label.lower().split()
    return config.category(words[-1] if words else label)


def name_color(rgb: np.ndarray, palette: Mapping[str, tuple[float, float, float]]) -> str:
    """Nearest palette colour to the pixels (N, 3 uint8), allowing for any brightness: lighting scales
    reflectance, so each palette entry is compared after its best scale. '' for an empty palette."""
    if not palette or len(rgb) == 0:
        return ""
    c = np.median(np.asarray(rgb, float).reshape(-1, 3), axis=0) / 255.0
    best, best_err = "", math.inf
    for name, ref in palette.items():
        p = np.asarray(ref, float)
        scale = float(np.clip(c @ p / max(p @ p, 1e-9), 0.2, 1.5))
        err = float(np.linalg.norm(c - scale * p))
        if err < best_err:
            best, best_err = name, err
    return best


def object_points(detection: Detection, frame: Frame, camera: CameraModel, table_height: float) -> tuple[np.ndarray, np.ndarray]:
    """Base-frame points (N, 3) of a detection and their pixel indices (N,) into the flat image.

    Uses the mask where the backend gives one; a box-only detection keeps the points above the table."""
    if frame.depth is None:
        raise InvalidArgumentError("localisation needs a depth image registered to the colour image (camera/depth/image_raw)")
    h, w = frame.depth.shape[:2]
    if (h, w) != (camera.height, camera.width):
        raise InvalidArgumentError(
            f"depth image is {w}x{h} but camera_info says {camera.width}x{camera.height}; use depth aligned to the colour image"
        )
    x0, y0, x1, y1 = (int(round(c)) for c in detection.box)
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 <= x0 or y1 <= y0:
        return np.empty((0, 3)), np.empty(0, int)
    depth = frame.depth[y0:y1, x0:x1]
    keep = np.isfinite(depth) & (depth > 0)
    if detection.mask is not None:
        keep &= detection.mask[y0:y1, x0:x1]
    rows, cols = np.nonzero(keep)
    rows, cols = rows + y0, cols + x0
    points = camera.position + camera.rays[rows, cols] * frame.depth[rows, cols, None].astype(float)
    if detection.mask is None:  # a box also covers the table around the object
        above = points[:, 2] > table_height + 0.003
        points, rows, cols = points[above], rows[above], cols[above]
    return points, rows * w + cols


def localize(detection: Detection, frame: Frame, camera: CameraModel, config: PerceptionConfig) -> Observation | None:
    """Place one detection in the base frame and name it; None when too few depth points are valid."""
    loc = config.localization
    points, flat = object_points(detection, frame, camera, loc.table_height)
    if len(points) < loc.min_points:
        return None
    spec = category_of(detection.label, config)
    position, size, yaw = _fit(spec, points, loc)
    color = ""
    name = detection.name
    if not name or detection.instance < 0:
        color = name_color(frame.rgb.reshape(-1, 3)[flat[:: max(1, len(flat) // 2000)]], config.colors)
        name = detection.name or (f"{color} {spec.name}" if color and not detection.label.startswith(color) else detection.label)
    elif name.split()[0] in config.colors:
        color = name.split()[0]
    return Observation(name, spec.name, float(detection.score), position, size, yaw, color, detection.box,
                       detection.instance, len(points))


def _fit(spec: CategorySpec, points: np.ndarray, loc: LocalizationConfig) -> tuple[np.ndarray, np.ndarray, float]:
    """Reference point, extent and yaw of an object of category ``spec`` from its visible points."""
    z_top = float(np.percentile(points[:, 2], 99.0))
    top = points[points[:, 2] >= z_top - loc.top_tolerance]
    if spec.shape == "box" and spec.size is not None and len(top) >= 3:
        size = np.array(spec.size)
        xy, yaw = _rectangle(top[:, :2])
        z_centre = float(np.median(top[:, 2])) - size[2] / 2
    elif spec.shape == "bowl" and spec.size is not None and len(top) >= 8:
        size = np.array(spec.size)
        xy = _circle_centre(top[:, :2])
        if xy is None:
            xy = _bbox_centre(points[:, :2])
        yaw = 0.0
        z_centre = float(np.median(top[:, 2])) - size[2] / 2
    else:  # unknown geometry: the robust extent of what is seen
        lo, hi = np.percentile(points, 2.0, axis=0), np.percentile(points, 98.0, axis=0)
        lo[2] = min(lo[2], loc.table_height) if lo[2] - loc.table_height < 0.01 else lo[2]
        size = np.maximum(hi - lo, 1e-3)
        if spec.size is not None:
            size = np.array(spec.size)
        xy, yaw = (lo[:2] + hi[:2]) / 2, 0.0
        z_centre = float(hi[2]) - size[2] / 2
    z = z_centre - size[2] / 2 if spec.anchor == "bottom" else z_centre
    return np.array([xy[0], xy[1], z]), size, yaw


def _bbox_centre(xy: np.ndarray) -> np.ndarray:
    lo, hi = np.percentile(xy, 2.0, axis=0), np.percentile(xy, 98.0, axis=0)
    return (lo + hi) / 2


def _rectangle(xy: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre and yaw (in (-pi/4, pi/4]) of the minimum-area rectangle around a top face's points.

    The rectangle's centre, unlike the points' mean, does not lean towards the camera where pixels
    are denser."""
    from scipy.spatial import ConvexHull, QhullError  # deferred: scipy

    try:
        hull = xy[ConvexHull(xy).vertices]
    except (QhullError, ValueError):
        return xy.mean(axis=0), 0.0
    edges = np.diff(np.vstack([hull, hull[:1]]), axis=0)
    angles = np.unique(np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2))
    best = (math.inf, 0.0, xy.mean(axis=0))
    for a in angles:
        c, s = math.cos(a), math.sin(a)
        local = hull @ np.array([[c, -s], [s, c]])  # coordinates along the edge direction and across it
        lo, hi = local.min(axis=0), local.max(axis=0)
        area = float(np.prod(hi - lo))
        if area < best[0]:
            mid = (lo + hi) / 2
            best = (area, a, np.array([c * mid[0] - s * mid[1], s * mid[0] + c * mid[1]]))
    yaw = best[1] if best[1] <= np.pi / 4 else best[1] - np.pi / 2
    return best[2], float(yaw)


def _circle_centre(xy: np.ndarray) -> np.ndarray | None:
    """Least-squares (Kasa) circle centre: exact for any arc of a rim, however unevenly sampled."""
    a = np.column_stack([xy, np.ones(len(xy))])
    b = (xy**2).sum(axis=1)
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    centre = sol[:2] / 2
    if not np.all(np.isfinite(centre)):
        return None
    return centre
