"""One object's crop in a camera frame, and the image embedder that describes it (DROC's visual retrieval).

ROS-free. The crop comes from the fixed scene camera as a real robot has it: the detector's box (or the
projection of the tracked object's box) and a mask from depth (the pixels standing above the support's
plane inside the object's footprint), never the simulator's segmentation ids. The perception node answers
``perception/describe_object`` with ``image_embedder().embed(*object_crop(...))``; the memory node compares such vectors with the ones the
knowledge entries carry, which is only meaningful when both use the same embedder: both build it with
:func:`knowledge_settings` from ``config/knowledge.yaml`` (``knowledge.image_model``: ``classic`` for
the colour + depth-shape descriptor with the ``knowledge.descriptor`` settings, or the path of a local
CLIP / DINOv2 directory, relative to the share directory unless absolute).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.knowledge.descriptor import ColourDepthDescriptor, ImageEmbedder, TransformersImageEmbedder
from teachbot.knowledge.retriever import KnowledgeConfig
from teachbot.paths import config_path, share_dir
from teachbot.perception.detector import Frame
from teachbot.perception.localize import CameraModel

CLASSIC = "classic"

__all__ = ["CLASSIC", "ObjectBounds", "image_embedder", "knowledge_settings", "object_crop", "projected_box"]


def knowledge_settings(path: str | Path | None = None) -> tuple[KnowledgeConfig, ImageEmbedder]:
    """The retrieval settings and the image embedder named by ``knowledge.image_model`` in ``path``
    (default config/knowledge.yaml). A bad value is a ConfigError naming the key."""
    path = Path(path) if path else config_path("knowledge.yaml")
    raw = load_yaml(path)
    config = KnowledgeConfig.from_mapping(raw, str(path))
    top = raw.get("knowledge") or {}
    choice = top.get("image_model", CLASSIC) if isinstance(top, dict) else CLASSIC
    if choice is None or choice == "":
        choice = CLASSIC
    if not isinstance(choice, str):
        raise ConfigError(f"{path}: knowledge.image_model must be 'classic' or the path of a local CLIP/DINOv2 directory, "
                          f"got {choice!r}")
    return config, image_embedder(choice, config)


def image_embedder(choice: str = CLASSIC, config: KnowledgeConfig | None = None) -> ImageEmbedder:
    """``classic``: the colour + depth-shape descriptor with ``config.descriptor``; else a
    TransformersImageEmbedder of that local directory (loaded on first use)."""
    if choice.strip() == CLASSIC:
        return ColourDepthDescriptor((config or KnowledgeConfig()).descriptor)
    model = Path(choice).expanduser()
    return TransformersImageEmbedder(model if model.is_absolute() else share_dir() / model)


@dataclass(frozen=True)
class ObjectBounds:
    """Where an object is, as perception tracks it: the centre of its box, its extent (x, y, z) and its yaw
    (base frame, metres). Its bottom face is the support's plane (the table, a counter)."""

    centre: np.ndarray
    size: np.ndarray
    yaw: float = 0.0

    @classmethod
    def of(cls, position: Sequence[float], size: Sequence[float], yaw: float = 0.0, anchor: str = "center") -> ObjectBounds:
        """From a tracked object's reference point: its centre, or (``anchor`` ``bottom``) its base's centre."""
        centre = np.asarray(position, float).reshape(3).copy()
        extent = np.asarray(size, float).reshape(3)
        if anchor == "bottom":
            centre[2] += extent[2] / 2
        return cls(centre, extent, float(yaw))

    def corners(self) -> np.ndarray:
        """The box's eight corners (8, 3)."""
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=float)
        local = signs * np.asarray(self.size, float) / 2
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        return local @ np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]]) + np.asarray(self.centre, float)

    def holds(self, points: np.ndarray, margin: float, above: float) -> np.ndarray:
        """Per point (N, 3): inside the footprint grown by ``margin``, more than ``above`` over the bottom
        (the support's plane) and at most ``margin`` over the top."""
        offset = np.asarray(points, float) - np.asarray(self.centre, float)
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        along, across = offset[:, 0] * c + offset[:, 1] * s, -offset[:, 0] * s + offset[:, 1] * c
        half = np.asarray(self.size, float) / 2
        return ((np.abs(along) <= half[0] + margin) & (np.abs(across) <= half[1] + margin)
                & (offset[:, 2] > -half[2] + above) & (offset[:, 2] <= half[2] + margin))


def projected_box(bounds: ObjectBounds, camera: CameraModel) -> tuple[float, float, float, float] | None:
    """The pixel box (x0, y0, x1, y1) around the projection of ``bounds``; None when it is behind the camera."""
    u, v, z = camera.project(bounds.corners())
    if not np.all(z > 0):
        return None
    return float(u.min()), float(v.min()), float(u.max()) + 1.0, float(v.max()) + 1.0


def object_crop(frame: Frame, camera: CameraModel, bounds: ObjectBounds, box: Sequence[float] | None = None,
                pad: int = 2, margin: float = 0.015, above: float = 0.004,
                min_pixels: int = 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The crop (RGB, depth, mask) of one object in ``frame`` from the scene camera, without segmentation ids.

    The region is the detector's ``box`` (x0, y0, x1, y1 pixels), else the projection of ``bounds``. The
    mask is what the depth image says is the object: pixels whose 3D point (``camera``) stands more than
    ``above`` over the support's plane (the bottom of ``bounds``: the table is left out) and inside the
    object's footprint grown by ``margin`` (a neighbour reaching into the box is left out too).
    InvalidArgumentError when the frame has no depth, or fewer than ``min_pixels`` pixels are the object
    (hidden, e.g. by the arm or a closed door, or out of view).
    """
    if frame.depth is None:
        raise InvalidArgumentError("describing an object needs a depth image registered to the colour image")
    height, width = frame.rgb.shape[:2]
    if frame.depth.shape[:2] != (height, width) or (camera.height, camera.width) != (height, width):
        raise InvalidArgumentError(f"colour {width}x{height}, depth {frame.depth.shape[1]}x{frame.depth.shape[0]} and camera "
                                   f"{camera.width}x{camera.height} must match (depth registered to colour)")
    region_box = tuple(float(v) for v in box) if box is not None and box[2] > box[0] and box[3] > box[1] \
        else projected_box(bounds, camera)
    if region_box is None:
        raise InvalidArgumentError("the object is behind the camera")
    x0, y0, x1, y1 = region_box
    left, top = max(int(np.floor(x0)) - pad, 0), max(int(np.floor(y0)) - pad, 0)
    right, bottom = min(int(np.ceil(x1)) + pad, width), min(int(np.ceil(y1)) + pad, height)
    if right <= left or bottom <= top:
        raise InvalidArgumentError(f"the object's box {tuple(round(v, 1) for v in region_box)} lies outside the {width}x{height} image")
    region = (slice(top, bottom), slice(left, right))
    depth = np.ascontiguousarray(frame.depth[region], dtype=np.float32)
    valid = np.isfinite(depth) & (depth > 0)
    points = camera.position + camera.rays[region] * np.where(valid, depth, 0.0)[..., None]
    mask = valid & bounds.holds(points.reshape(-1, 3), margin, above).reshape(depth.shape)
    if int(mask.sum()) < min_pixels:
        raise InvalidArgumentError(f"only {int(mask.sum())} pixels of the object are in view (fewer than {min_pixels}); "
                                   "it is hidden or out of the camera's view")
    return np.ascontiguousarray(frame.rgb[region]), depth, mask
