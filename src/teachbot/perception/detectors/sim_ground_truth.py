"""``sim_ground_truth``: exact detections read off the simulator's segmentation image.

For simulation runs and the benchmark protocol: every visible object's pixels are known exactly,
and its label comes from the simulator (``Frame.segment_labels``), so errors downstream are
localisation's alone. It needs no weights and no GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from teachbot.errors import InvalidArgumentError
from teachbot.perception.detector import Detection, Frame


class SimGroundTruthDetector:
    """Detector over ``Frame.segmentation`` and ``Frame.segment_labels``."""

    name = "sim_ground_truth"

    def __init__(self, min_pixels: int = 15) -> None:
        self.min_pixels = int(min_pixels)

    def detect(self, frame: Frame, queries: Sequence[str]) -> list[Detection]:
        """One detection per labelled segment whose category or name matches a query (all when none)."""
        if frame.segmentation is None:
            raise InvalidArgumentError(
                "the sim_ground_truth detector needs the simulator's segmentation image (camera/segmentation); "
                "on a real camera set perception.backend in config/perception.yaml to yolo_world or owlv2"
            )
        seg = frame.segmentation
        wanted = {q.strip().lower() for q in queries if q.strip()}
        found: list[tuple[int, Detection]] = []
        for instance, label in frame.segment_labels.items():
            category, name = str(label.get("category", "")), str(label.get("name", ""))
            matched = _matches(wanted, category, name)
            if matched is None:
                continue
            mask = seg == instance
            rows = np.flatnonzero(mask.any(axis=1))
            if rows.size == 0:
                continue
            cols = np.flatnonzero(mask[rows[0] : rows[-1] + 1].any(axis=0))
            count = int(np.count_nonzero(mask[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]))
            if count < self.min_pixels:
                continue
            box = (float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1))
            found.append((count, Detection(matched, 1.0, box, mask=mask, name=name, instance=int(instance))))
        found.sort(key=lambda pair: -pair[0])  # best first: the most visible
        return [d for _, d in found]


def _matches(wanted: set[str], category: str, name: str) -> str | None:
    """The label a segment answers: its category for a class query, its name for a named query."""
    if not wanted:
        return category
    if category.lower() in wanted:
        return category
    if name.lower() in wanted:
        return name
    return None
