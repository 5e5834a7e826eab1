"""One object's crop in a camera frame, and the image embedder that describes it (DROC's visual retrieval).

ROS-free. The perception node answers ``perception/describe_object`` with
``image_embedder().embed(*object_crop(...))``; the memory node compares such vectors with the ones the
knowledge entries carry, which is only meaningful when both use the same embedder: both build it with
:func:`knowledge_settings` from ``config/knowledge.yaml`` (``knowledge.image_model``: ``classic`` for
the colour + depth-shape descriptor with the ``knowledge.descriptor`` settings, or the path of a local
CLIP / DINOv2 directory, relative to the share directory unless absolute).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.knowledge.descriptor import ColourDepthDescriptor, ImageEmbedder, TransformersImageEmbedder, crop_object
from teachbot.knowledge.retriever import KnowledgeConfig
from teachbot.paths import config_path, share_dir
from teachbot.perception.detector import Frame

CLASSIC = "classic"

__all__ = ["CLASSIC", "image_embedder", "knowledge_settings", "object_crop"]


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


def object_crop(frame: Frame, instance: int = -1, box: Sequence[float] | None = None,
                pad: int = 2) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The crop (RGB, depth, mask) of one object in ``frame``.

    With a segmentation image and the object's segment id ``instance``: its bounding box and exactly its
    pixels (InvalidArgumentError when the segment is not in the frame, e.g. hidden by the arm). Else its
    detection ``box`` (x0, y0, x1, y1 pixels) with no mask: the whole box counts.
    """
    if frame.segmentation is not None and instance >= 0:
        return crop_object(frame.rgb, frame.depth, frame.segmentation, instance, pad)
    if box is None:
        raise InvalidArgumentError("no segmentation of the object and no detection box: nothing to crop")
    height, width = frame.rgb.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in box)
    left, top = max(int(np.floor(x0)) - pad, 0), max(int(np.floor(y0)) - pad, 0)
    right, bottom = min(int(np.ceil(x1)) + pad, width), min(int(np.ceil(y1)) + pad, height)
    if right <= left or bottom <= top:
        raise InvalidArgumentError(f"the object's box {tuple(box)} lies outside the {width}x{height} image")
    region = (slice(top, bottom), slice(left, right))
    depth = None if frame.depth is None else np.ascontiguousarray(frame.depth[region])
    return np.ascontiguousarray(frame.rgb[region]), depth, None
