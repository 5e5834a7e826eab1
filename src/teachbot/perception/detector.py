"""The one interface every detector backend implements, and the factory that picks one from config.

A backend turns one camera frame and a list of text queries ("block", "red bowl") into 2D
detections; localisation in 3D and naming happen downstream (teachbot.perception.localize)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from teachbot.errors import InvalidArgumentError

# backend name -> "module:factory"; modules are imported only when chosen (torch is heavy)
BACKENDS: dict[str, str] = {
    "sim_ground_truth": "teachbot.perception.detectors.sim_ground_truth:SimGroundTruthDetector",
    "yolo_world": "teachbot.perception.detectors.yolo_world:YoloWorldDetector",
    "owlv2": "teachbot.perception.detectors.owlv2:Owlv2Detector",
}


@dataclass(frozen=True)
class Frame:
    """One synchronised camera frame. ``segmentation`` (int32 ids) and ``segment_labels`` (id -> label
    such as {"category": "block", "color": "red", "name": "red block"}) exist only in simulation."""

    rgb: np.ndarray  # HxWx3 uint8
    depth: np.ndarray | None = None  # HxW float32 metres along the optical axis; 0/NaN = no reading
    segmentation: np.ndarray | None = None
    segment_labels: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    stamp: float = 0.0


@dataclass(frozen=True)
class Detection:
    """One detected instance in image coordinates."""

    label: str  # the query it answers, e.g. "block"
    score: float  # 0..1
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels
    mask: np.ndarray | None = None  # HxW bool where the backend segments; None = use the box
    name: str = ""  # full name when the backend knows it ("red block"); else derived from pixels
    instance: int = -1  # the simulator's segmentation id (sim_ground_truth only)


class Detector(Protocol):
    """A detector backend."""

    name: str

    def detect(self, frame: Frame, queries: Sequence[str]) -> list[Detection]:
        """Detections of ``queries`` in ``frame``, best first."""
        ...


def make_detector(backend: str, options: Mapping[str, Any] | None = None) -> Detector:
    """Instantiate the backend named in config (``perception.backend``) with its options
    (``perception.backends.<name>``)."""
    if backend not in BACKENDS:
        raise InvalidArgumentError(
            f"unknown perception backend {backend!r}; set perception.backend in config/perception.yaml to one of {sorted(BACKENDS)}"
        )
    module_name, factory = BACKENDS[backend].split(":")
    module = importlib.import_module(module_name)
    return getattr(module, factory)(**dict(options or {}))
