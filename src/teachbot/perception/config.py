"""The numbers of config/perception.yaml as typed dataclasses; a bad value names its key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.config import load_yaml, resolve_config
from teachbot.errors import ConfigError

SHAPES = ("box", "bowl", "blob")
ANCHORS = ("center", "bottom")
OBSERVE = ("camera", "world_state")


@dataclass(frozen=True)
class CategorySpec:
    """What perception knows about one detector class: its geometry and its properties."""

    name: str
    shape: str = "blob"  # box: a cuboid seen from above; bowl: an open ring; blob: anything else
    size: tuple[float, float, float] | None = None  # known extent; None: measured from the points
    anchor: str = "center"  # the reference point the skills expect: body centre or base centre
    properties: Mapping[str, Any] = field(default_factory=dict)  # graspable, container, ...


@dataclass(frozen=True)
class TrackingConfig:
    match_distance: float = 0.08
    missing_timeout: float = 1.0
    occluded_timeout: float = 60.0
    occlusion_margin: float = 0.02
    smoothing: float = 0.0


@dataclass(frozen=True)
class RelationConfig:
    right: tuple[float, float, float] = (1.0, 0.0, 0.0)
    forward: tuple[float, float, float] = (0.0, -1.0, 0.0)
    margin: float = 0.02
    near: float = 0.06
    contact: float = 0.015
    blocking_clearance: float = 0.02
    robot_base: tuple[float, float, float] = (0.0, 0.0, 0.0)
    viewer: str = "fixed"  # fixed: right/forward as given; robot: given in a mobile base's frame, turning with it

    def __post_init__(self) -> None:
        if self.viewer not in ("fixed", "robot"):
            raise ConfigError(f"perception.relations.viewer must be 'fixed' or 'robot', got {self.viewer!r}")


@dataclass(frozen=True)
class LocalizationConfig:
    top_tolerance: float = 0.003
    min_points: int = 10
    table_height: float = 0.0


@dataclass(frozen=True)
class PerceptionConfig:
    """Everything under ``perception:`` in config/perception.yaml."""

    backend: str
    rate: float
    queries: tuple[str, ...]
    min_score: float
    base_frame: str
    backends: Mapping[str, Mapping[str, Any]]
    camera: Mapping[str, Any]
    localization: LocalizationConfig
    categories: Mapping[str, CategorySpec]
    colors: Mapping[str, tuple[float, float, float]]
    tracking: TrackingConfig
    relations: RelationConfig
    source: str = "config/perception.yaml"
    observe: str = "camera"  # camera: detect in images; world_state: the simulator's ground truth (household)

    @classmethod
    def load(cls, name_or_path: str | Path = "perception") -> PerceptionConfig:
        path = resolve_config(str(name_or_path))
        return cls.from_mapping(load_yaml(path), str(path))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], source: str = "config/perception.yaml") -> PerceptionConfig:
        p = raw.get("perception")
        if not isinstance(p, Mapping):
            raise ConfigError(f"{source}: expected a 'perception:' mapping at the top level")
        try:
            categories = {}
            for name, c in (p.get("categories") or {}).items():
                shape, anchor = str(c.get("shape", "blob")), str(c.get("anchor", "center"))
                if shape not in SHAPES or anchor not in ANCHORS:
                    raise ConfigError(
                        f"{source}: perception.categories.{name}: shape must be one of {SHAPES} and anchor one of "
                        f"{ANCHORS}, got shape={shape!r} anchor={anchor!r}"
                    )
                size = c.get("size")
                props = {k: v for k, v in c.items() if k not in ("shape", "size", "anchor")}
                categories[str(name)] = CategorySpec(
                    str(name), shape, _triple(size) if size is not None else None, anchor, props
                )
            colors = {str(k): _triple(v) for k, v in (p.get("colors") or {}).items()}
            rel = dict(p.get("relations") or {})
            for key in ("right", "forward", "robot_base"):
                if key in rel:
                    rel[key] = _triple(rel[key])
            return cls(
                backend=str(p["backend"]),
                rate=float(p.get("rate", 5.0)),
                queries=tuple(str(q) for q in p.get("queries", ())),
                min_score=float(p.get("min_score", 0.25)),
                base_frame=str(p.get("base_frame", "base")),
                backends={str(k): dict(v or {}) for k, v in (p.get("backends") or {}).items()},
                camera=dict(p.get("camera") or {}),
                localization=LocalizationConfig(**(p.get("localization") or {})),
                categories=categories,
                colors=colors,
                tracking=TrackingConfig(**(p.get("tracking") or {})),
                relations=RelationConfig(**rel),
                source=source,
                observe=_one_of(str(p.get("observe", "camera")), OBSERVE, f"{source}: perception.observe"),
            )
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: malformed perception config ({exc!r}); compare with config/perception.yaml") from None

    def category(self, label: str) -> CategorySpec:
        """The spec of a detector class; an unknown class is a generic blob measured from its points."""
        return self.categories.get(label) or CategorySpec(label)

    def backend_options(self, backend: str | None = None) -> dict[str, Any]:
        return dict(self.backends.get(backend or self.backend, {}))


def _triple(value: Any) -> tuple[float, float, float]:
    arr = np.asarray(value, dtype=float).reshape(-1)
    if arr.shape != (3,):
        raise ValueError(f"expected three numbers, got {value!r}")
    return (float(arr[0]), float(arr[1]), float(arr[2]))


def _one_of(value: str, allowed: tuple[str, ...], key: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {allowed}, got {value!r}")
    return value
