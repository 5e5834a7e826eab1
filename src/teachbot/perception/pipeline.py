"""Detector -> localisation -> scene model, one frame at a time; what the perception node wraps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import Detector, Frame, make_detector
from teachbot.perception.localize import CameraModel, Observation, category_of, localize
from teachbot.perception.relations import SceneQueries
from teachbot.perception.scene_model import SceneModel, TrackedObject, depth_visibility


class Perception:
    """The perception core: ``update`` folds a frame into the scene model, ``observe`` answers a
    one-off detect(queries) without touching it, ``queries`` holds the relations and properties."""

    def __init__(self, config: PerceptionConfig, detector: Detector | None = None) -> None:
        self.config = config
        self.detector = detector or make_detector(config.backend, config.backend_options())
        self.scene = SceneModel(config)
        self.queries = SceneQueries(self.scene)

    def observe(self, frame: Frame, camera: CameraModel, queries: Sequence[str] | None = None) -> list[Observation]:
        """Detect ``queries`` (the configured vocabulary when None) and place each detection in 3D."""
        wanted = list(self.config.queries if queries is None else queries)
        observations = []
        for detection in self.detector.detect(frame, wanted):
            if detection.score < self.config.min_score:
                continue
            obs = localize(detection, frame, camera, self.config)
            if obs is not None:
                observations.append(obs)
        return observations

    def update(self, frame: Frame, camera: CameraModel, state: Mapping[str, Mapping[str, str]] | None = None) -> list[TrackedObject]:
        """Fold one frame into the scene model; ``state`` is extra knowledge by name (the simulator's)."""
        observations = self.observe(frame, camera)
        visibility = None
        if frame.depth is not None:
            visibility = depth_visibility(frame.depth, camera.project, self.config.tracking.occlusion_margin, self._top_of)
        return self.scene.update(observations, frame.stamp, visibility, state)

    def _top_of(self, track: TrackedObject) -> np.ndarray:
        """The centre of a track's top: the point the camera sees when nothing is in the way."""
        spec = category_of(track.label, self.config)
        rise = track.size[2] if spec.anchor == "bottom" else track.size[2] / 2
        return track.position + np.array([0.0, 0.0, rise])
