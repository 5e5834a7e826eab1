"""The scene model: the current objects, kept over frames.

Each frame's observations are associated to tracks by name and distance. A track that is not seen
is kept while something nearer hides its place (the gripper, the arm) or it is out of view, and
dropped soon after its place is seen empty: briefly occluded objects do not vanish, objects that are
gone do not linger. Relations and per-object queries live in teachbot.perception.relations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from teachbot.perception.config import PerceptionConfig, TrackingConfig
from teachbot.perception.localize import Observation

VISIBLE, OCCLUDED, OUT_OF_VIEW = "visible", "occluded", "out_of_view"


@dataclass
class TrackedObject:
    """One object of the scene model (base frame, metres)."""

    id: int
    name: str  # unique in the scene: the observation's name, numbered when two share it
    base_name: str  # the name detections give it ("red block")
    label: str
    position: np.ndarray
    size: np.ndarray
    yaw: float
    score: float
    color: str
    box: tuple[float, float, float, float]
    instance: int
    first_seen: float
    last_seen: float
    seen: bool = True  # seen in the latest frame
    hidden: str = ""  # why it was not seen in the latest frame: occluded | out_of_view | missing
    state: dict[str, str] = field(default_factory=dict)  # what else is known (the simulator: held, supported_by)


class SceneModel:
    """Tracks over frames; :meth:`update` takes one frame's observations."""

    def __init__(self, config: PerceptionConfig) -> None:
        self.config = config
        self.tracking: TrackingConfig = config.tracking
        self._tracks: dict[int, TrackedObject] = {}
        self._next_id = 1
        self.stamp = 0.0

    def objects(self) -> list[TrackedObject]:
        """The current objects, oldest track first."""
        return list(self._tracks.values())

    def get(self, name: str) -> TrackedObject | None:
        return next((t for t in self._tracks.values() if t.name == name), None)

    def clear(self) -> None:
        """Forget every track (e.g. after the simulator loaded a new scene)."""
        self._tracks.clear()

    def update(
        self,
        observations: Sequence[Observation],
        stamp: float,
        visibility: Callable[[TrackedObject], str] | None = None,
        state: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[TrackedObject]:
        """Fold one frame in. ``visibility(track)`` says whether an unseen track's place is visible,
        occluded or out of view (None: treat it as occluded); ``state`` adds known state by name."""
        self.stamp = stamp
        matched = self._associate(observations)
        for track in self._tracks.values():
            track.seen = False
        for i, obs in enumerate(observations):
            track = matched.get(i)
            if track is None:
                track = self._new_track(obs, stamp)
            else:
                self._refresh(track, obs, stamp)
        for tid, track in list(self._tracks.items()):
            if track.seen:
                track.hidden = ""
                continue
            why = visibility(track) if visibility is not None else OCCLUDED
            track.hidden = why if why in (OCCLUDED, OUT_OF_VIEW) else "missing"
            limit = self.tracking.missing_timeout if track.hidden == "missing" else self.tracking.occluded_timeout
            if stamp - track.last_seen > limit:
                del self._tracks[tid]
        for track in self._tracks.values():
            track.state = dict((state or {}).get(track.name, {}))
        return self.objects()

    # ------------------------------------------------------------------ internals
    def _associate(self, observations: Sequence[Observation]) -> dict[int, TrackedObject]:
        """Observation index -> track. Same base name only; nearest pairs first. A name seen once and
        tracked once is the same object however far it moved (a block carried between frames)."""
        pairs = []
        for i, obs in enumerate(observations):
            for track in self._tracks.values():
                if track.base_name == obs.name:
                    pairs.append((float(np.linalg.norm(track.position - obs.position)), i, track))
        pairs.sort(key=lambda p: p[0])
        obs_count: dict[str, int] = {}
        for obs in observations:
            obs_count[obs.name] = obs_count.get(obs.name, 0) + 1
        track_count: dict[str, int] = {}
        for track in self._tracks.values():
            track_count[track.base_name] = track_count.get(track.base_name, 0) + 1
        matched: dict[int, TrackedObject] = {}
        used: set[int] = set()
        for dist, i, track in pairs:
            if i in matched or track.id in used:
                continue
            unique = obs_count[track.base_name] == 1 and track_count[track.base_name] == 1
            if dist <= self.tracking.match_distance or unique:
                matched[i] = track
                used.add(track.id)
        return matched

    def _new_track(self, obs: Observation, stamp: float) -> TrackedObject:
        taken = {t.name for t in self._tracks.values()}
        name, k = obs.name, 2
        while name in taken:
            name, k = f"{obs.name} {k}", k + 1
        track = TrackedObject(
            self._next_id, name, obs.name, obs.label, obs.position.copy(), obs.size.copy(), obs.yaw, obs.score,
            obs.color, obs.box, obs.instance, stamp, stamp,
        )
        self._tracks[track.id] = track
        self._next_id += 1
        return track

    def _refresh(self, track: TrackedObject, obs: Observation, stamp: float) -> None:
        a = float(np.clip(self.tracking.smoothing, 0.0, 0.99))
        track.position = (1 - a) * obs.position + a * track.position
        track.size, track.yaw, track.score = obs.size.copy(), obs.yaw, obs.score
        track.color, track.box, track.instance = obs.color or track.color, obs.box, obs.instance
        track.label = obs.label
        track.last_seen, track.seen = stamp, True


def depth_visibility(depth: np.ndarray, project: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
                     margin: float, top_of: Callable[[TrackedObject], np.ndarray]) -> Callable[[TrackedObject], str]:
    """A visibility test from one depth image: a track's top point projects into the image; if the
    depth there is nearer than the point by ``margin``, something hides it."""
    h, w = depth.shape[:2]

    def visibility(track: TrackedObject) -> str:
        u, v, z = project(top_of(track)[None, :])
        if not (z[0] > 0 and 0 <= u[0] < w and 0 <= v[0] < h):
            return OUT_OF_VIEW
        r, c = int(v[0]), int(u[0])
        window = depth[max(r - 2, 0) : r + 3, max(c - 2, 0) : c + 3]
        valid = window[np.isfinite(window) & (window > 0)]
        if valid.size == 0:
            return OCCLUDED  # no reading there: cannot tell that the place is empty
        return OCCLUDED if float(np.median(valid)) < z[0] - margin else VISIBLE

    return visibility
