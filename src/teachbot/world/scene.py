"""Tabletop scene descriptions: seeded random generation and explicit YAML scenes.

Pure data, no physics: the world (``teachbot.sim.world``) builds bodies from a :class:`SceneSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teachbot.config import load_yaml
from teachbot.errors import SceneSpecError
from teachbot.paths import config_path

CATEGORIES = ("block", "bowl", "cup")
CUP_POSES = ("upright", "flipped")  # a cup stands on its base (open top) or on its rim (teachbot.sim.cup)
CUP_REACH = 0.09  # m between a cup's centre and another object's: its rim's diameter and a little


@dataclass(frozen=True)
class ObjectSpec:
    """One object to place: ``name`` is how people and the robot API refer to it."""

    name: str
    category: str
    color: str
    position: tuple[float, float]
    yaw: float = 0.0
    pose: str = "upright"  # cups only: upright or flipped


@dataclass(frozen=True)
class SceneSpec:
    """A whole scene; ``seed`` is None for an explicit (hand-written) scene."""

    objects: tuple[ObjectSpec, ...]
    seed: int | None = None

    def names(self) -> list[str]:
        return [o.name for o in self.objects]

    def to_yaml(self) -> str:
        """Explicit-scene YAML that :func:`scene_from_yaml` reads back to an equal spec."""
        rows = [
            {
                "name": o.name,
                "category": o.category,
                "color": o.color,
                "position": [round(o.position[0], 6), round(o.position[1], 6)],
                "yaw": round(o.yaw, 6),
                **({"pose": o.pose} if o.category == "cup" else {}),
            }
            for o in self.objects
        ]
        return yaml.safe_dump({"objects": rows}, sort_keys=False)


@dataclass(frozen=True)
class TabletopConfig:
    """The numbers of config/tabletop.yaml that scene generation and the world need."""

    bounds: dict[str, tuple[float, float]]
    normalized_area: dict[str, tuple[float, float]]
    named_points: dict[str, tuple[float, float]]
    colors: tuple[str, ...]
    spawn_area: dict[str, tuple[float, float]]
    min_separation: float
    block_size: float
    block_count: tuple[int, int]
    block_mass: float
    block_friction: float
    bowl_count: tuple[int, int]
    bowl_radius: float
    bowl_height: float
    bowl_wall: float
    table_x: tuple[float, float]
    table_y: tuple[float, float]
    table_thickness: float
    rgb: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None) -> TabletopConfig:
        path = Path(path) if path else config_path("tabletop.yaml")
        raw = load_yaml(path)
        try:
            ws, sc, tb = raw["workspace"], raw["scene"], raw["table"]
            pair = lambda v: (float(v[0]), float(v[1]))  # noqa: E731
            return cls(
                bounds={k: pair(v) for k, v in ws["bounds"].items()},
                normalized_area={k: pair(v) for k, v in ws["normalized_area"].items()},
                named_points={k: pair(v) for k, v in ws["named_points"].items()},
                colors=tuple(sc["colors"]),
                spawn_area={k: pair(v) for k, v in sc["spawn_area"].items()},
                min_separation=float(sc["min_separation"]),
                block_size=float(sc["blocks"]["size"]),
                block_count=tuple(int(c) for c in sc["blocks"]["count"]),  # type: ignore[arg-type]
                block_mass=float(sc["blocks"]["mass"]),
                block_friction=float(sc["blocks"]["friction"]),
                bowl_count=tuple(int(c) for c in sc["bowls"]["count"]),  # type: ignore[arg-type]
                bowl_radius=float(sc["bowls"]["radius"]),
                bowl_height=float(sc["bowls"]["height"]),
                bowl_wall=float(sc["bowls"]["wall"]),
                table_x=pair(tb["x"]),
                table_y=pair(tb["y"]),
                table_thickness=float(tb["thickness"]),
                rgb={k: tuple(float(c) for c in v) for k, v in raw.get("rgb", {}).items()},  # type: ignore[misc]
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SceneSpecError(f"{path}: malformed tabletop config ({exc!r}); compare with config/tabletop.yaml") from None


def generate_scene(seed: int, config: TabletopConfig | None = None, max_tries: int = 500) -> SceneSpec:
    """A random scene: 1-4 blocks and 1-4 bowls of distinct colours, spaced ``min_separation`` apart.

    The same seed always gives the same scene (a private ``numpy.random.Generator``).
    """
    cfg = config or TabletopConfig.load()
    rng = np.random.default_rng(seed)
    n_blocks = int(rng.integers(cfg.block_count[0], cfg.block_count[1] + 1))
    n_bowls = int(rng.integers(cfg.bowl_count[0], cfg.bowl_count[1] + 1))
    block_colors = rng.choice(len(cfg.colors), size=n_blocks, replace=False)
    bowl_colors = rng.choice(len(cfg.colors), size=n_bowls, replace=False)
    wanted = [("bowl", cfg.colors[i]) for i in bowl_colors] + [("block", cfg.colors[i]) for i in block_colors]
    (x0, x1), (y0, y1) = cfg.spawn_area["x"], cfg.spawn_area["y"]
    # Sequential rejection sampling can paint itself into a corner with 8 objects; start the whole
    # layout over then (still deterministic: the same generator keeps drawing).
    for _attempt in range(max_tries):
        placed: list[ObjectSpec] = []
        for category, color in wanted:
            for _ in range(100):
                xy = (float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1)))
                if all(np.hypot(xy[0] - o.position[0], xy[1] - o.position[1]) >= cfg.min_separation for o in placed):
                    break
            else:
                break
            yaw = float(rng.uniform(-np.pi / 4, np.pi / 4)) if category == "block" else 0.0
            placed.append(ObjectSpec(f"{color} {category}", category, color, xy, yaw))
        if len(placed) == len(wanted):
            return SceneSpec(tuple(placed), seed=seed)
    raise SceneSpecError(
        f"seed {seed}: cannot place {len(wanted)} objects {cfg.min_separation} m apart in the spawn "
        f"area; lower scene.min_separation or enlarge scene.spawn_area in config/tabletop.yaml"
    )


def scene_from_yaml(text: str, config: TabletopConfig | None = None, source: str = "scene") -> SceneSpec:
    """Parse and validate an explicit scene; every problem names the object and the field to fix."""
    cfg = config or TabletopConfig.load()
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SceneSpecError(f"{source}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("objects"), list) or not data["objects"]:
        raise SceneSpecError(f"{source}: expected a mapping with a non-empty list 'objects:'; see config/scenes/example.yaml")
    objects: list[ObjectSpec] = []
    for i, row in enumerate(data["objects"]):
        where = f"{source}: objects[{i}]"
        if not isinstance(row, dict):
            raise SceneSpecError(f"{where}: expected a mapping with category, color, position")
        category = row.get("category")
        if category not in CATEGORIES:
            raise SceneSpecError(f"{where}: category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        color = row.get("color")
        if color not in cfg.colors:
            raise SceneSpecError(f"{where}: color must be one of {', '.join(cfg.colors)}, got {color!r}")
        pos = row.get("position")
        if not (isinstance(pos, (list, tuple)) and len(pos) == 2 and all(isinstance(v, (int, float)) for v in pos)):
            raise SceneSpecError(f"{where}: position must be [x, y] in metres, got {pos!r}")
        (bx0, bx1), (by0, by1) = cfg.bounds["x"], cfg.bounds["y"]
        if not (bx0 <= pos[0] <= bx1 and by0 <= pos[1] <= by1):
            raise SceneSpecError(f"{where}: position {list(pos)} is outside the workspace x in [{bx0}, {bx1}], y in [{by0}, {by1}]")
        yaw = row.get("yaw", 0.0)
        if not isinstance(yaw, (int, float)):
            raise SceneSpecError(f"{where}: yaw must be a number of radians, got {yaw!r}")
        pose = row.get("pose", "upright")
        if pose not in CUP_POSES or (pose != "upright" and category != "cup"):
            raise SceneSpecError(f"{where}: pose must be one of {', '.join(CUP_POSES)} (and only a cup may be flipped), got {pose!r}")
        name = row.get("name") or f"{color} {category}"
        if name in (o.name for o in objects):
            raise SceneSpecError(f"{where}: duplicate name {name!r}; give each object a distinct name")
        objects.append(ObjectSpec(str(name), category, color, (float(pos[0]), float(pos[1])), float(yaw), str(pose)))
    min_gap = cfg.block_size * 1.2
    for i, a in enumerate(objects):
        for b in objects[i + 1 :]:
            gap = float(np.hypot(a.position[0] - b.position[0], a.position[1] - b.position[1]))
            reach = (cfg.bowl_radius + cfg.block_size if "bowl" in (a.category, b.category)
                     else CUP_REACH if "cup" in (a.category, b.category) else min_gap)
            if gap < reach:
                raise SceneSpecError(f"{source}: {a.name!r} and {b.name!r} overlap ({gap:.3f} m apart); move one of them")
    return SceneSpec(tuple(objects), seed=None)


def load_scene_file(path: str | Path, config: TabletopConfig | None = None) -> SceneSpec:
    """Read an explicit scene from a YAML file."""
    path = Path(path)
    if not path.is_file():
        raise SceneSpecError(f"scene file not found: {path}; see config/scenes/ for examples")
    return scene_from_yaml(path.read_text(), config, source=str(path))
