"""Household scenes as data: which objects stand where, and the starting states of things.

A scene names each object, its type from the catalog (``config/household/objects.yaml``), the place it
stands at and an offset on that place's surface; ``states`` sets places' and objects' flags (the fridge
open, the table dirty). Pure Python, no physics: :class:`~teachbot.sim.household_world.HouseholdWorld`
builds bodies from it. Scenes come from YAML (``config/household/scenes/``) or from a seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teachbot.errors import SceneSpecError
from teachbot.paths import config_path
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.household_objects import Catalog

MIN_GAP = 0.02  # metres between the footprints of two objects on one surface


@dataclass(frozen=True)
class PlacedObject:
    """One object: ``offset`` is (along, across) on the place's surface from its centre, metres; along
    points away from the robot standing there, across to its left."""

    name: str
    type: str
    place: str
    offset: tuple[float, float] = (0.0, 0.0)
    color: str | None = None
    yaw: float = 0.0
    states: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HouseholdScene:
    objects: tuple[PlacedObject, ...]
    states: dict[str, dict[str, Any]] = field(default_factory=dict)  # place name -> flags
    seed: int | None = None

    def names(self) -> list[str]:
        return [o.name for o in self.objects]

    def to_yaml(self) -> str:
        rows = []
        for o in self.objects:
            row: dict[str, Any] = {"name": o.name, "type": o.type, "at": o.place, "offset": [round(v, 4) for v in o.offset]}
            if o.color:
                row["color"] = o.color
            if o.yaw:
                row["yaw"] = round(o.yaw, 4)
            if o.states:
                row["states"] = dict(o.states)
            rows.append(row)
        return yaml.safe_dump({"objects": rows, "states": self.states}, sort_keys=False)


def footprint(type_size: tuple[float, ...], shape: str) -> tuple[float, float]:
    """Half extents on the floor of an object of this shape and size (yaw ignored: the larger side)."""
    if shape == "box":
        return type_size[0] / 2, type_size[1] / 2
    return type_size[0] / 2, type_size[0] / 2


def household_scene_from_yaml(
    text: str, layout: HouseholdLayout | None = None, catalog: Catalog | None = None, source: str = "scene"
) -> HouseholdScene:
    """Parse and check a scene; every problem names the object and the field to fix."""
    layout, catalog = layout or HouseholdLayout.load(), catalog or Catalog.load()
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SceneSpecError(f"{source}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("objects"), list):
        raise SceneSpecError(f"{source}: expected a mapping with a list 'objects:'; see config/household/scenes/kitchen.yaml")
    objects: list[PlacedObject] = []
    for i, row in enumerate(data["objects"]):
        where = f"{source}: objects[{i}]"
        if not isinstance(row, dict) or "type" not in row or "at" not in row:
            raise SceneSpecError(f"{where}: expected a mapping with type and at (a place)")
        try:
            kind = catalog.type(str(row["type"]))
        except SceneSpecError as exc:
            raise SceneSpecError(f"{where}: {exc}") from None
        if row["at"] not in layout.places or layout.places[row["at"]].hand is not None:
            known = [n for n, p in layout.places.items() if p.hand is None]
            raise SceneSpecError(f"{where}: 'at' must be one of {known}, got {row['at']!r}")
        color = row.get("color")
        if color is not None and color not in catalog.colors:
            raise SceneSpecError(f"{where}: color must be one of {', '.join(catalog.colors)}, got {color!r}")
        offset = row.get("offset", [0.0, 0.0])
        if not (isinstance(offset, (list, tuple)) and len(offset) == 2 and all(isinstance(v, (int, float)) for v in offset)):
            raise SceneSpecError(f"{where}: offset must be [along, across] in metres, got {offset!r}")
        name = str(row.get("name") or (f"{color} {kind.name}" if color else kind.name.replace("_", " ")))
        if name in (o.name for o in objects):
            raise SceneSpecError(f"{where}: duplicate name {name!r}; give each object a distinct name")
        surface = layout.surface(row["at"])
        half = footprint(kind.size, kind.shape)
        if abs(offset[0]) + half[0] > surface.half_extents[0] + 1e-9 or abs(offset[1]) + half[1] > surface.half_extents[1] + 1e-9:
            raise SceneSpecError(
                f"{where}: {name!r} at offset {list(offset)} hangs over the edge of the {row['at']} "
                f"(usable ±{surface.half_extents[0]:.2f} along, ±{surface.half_extents[1]:.2f} across)"
            )
        states = row.get("states") or {}
        unknown = [k for k in states if k not in ("open", "on", "sliced", "clean", "filled", "contents")]
        if unknown:
            raise SceneSpecError(f"{where}: unknown state {unknown[0]!r}; use open, on, sliced, clean, filled, contents")
        objects.append(PlacedObject(name, kind.name, row["at"], (float(offset[0]), float(offset[1])), color,
                                    float(row.get("yaw", 0.0)), dict(states)))
    _check_overlaps(objects, catalog, source)
    place_states = data.get("states") or {}
    if not isinstance(place_states, dict):
        raise SceneSpecError(f"{source}: states must map place names to flags, e.g. {{fridge: {{open: true}}}}")
    for name, flags in place_states.items():
        if name not in layout.places:
            raise SceneSpecError(f"{source}: states names {name!r}, not a place; places: {layout.names()}")
        if not isinstance(flags, dict):
            raise SceneSpecError(f"{source}: states.{name} must map flags to values, e.g. {{open: true}}")
    return HouseholdScene(tuple(objects), {k: dict(v) for k, v in place_states.items()})


def _check_overlaps(objects: list[PlacedObject], catalog: Catalog, source: str) -> None:
    for i, a in enumerate(objects):
        ha = footprint(catalog.type(a.type).size, catalog.type(a.type).shape)
        for b in objects[i + 1:]:
            if b.place != a.place:
                continue
            hb = footprint(catalog.type(b.type).size, catalog.type(b.type).shape)
            if all(abs(a.offset[k] - b.offset[k]) < ha[k] + hb[k] + MIN_GAP for k in (0, 1)):
                raise SceneSpecError(f"{source}: {a.name!r} and {b.name!r} overlap on the {a.place}; move one of them")


def load_household_scene(
    path: str | Path | None = None, layout: HouseholdLayout | None = None, catalog: Catalog | None = None
) -> HouseholdScene:
    """Read a scene file; the default is the kitchen of ``config/household/scenes/kitchen.yaml``."""
    path = Path(path) if path else config_path("household", "scenes", "kitchen.yaml")
    if not path.is_file():
        raise SceneSpecError(f"scene file not found: {path}; see config/household/scenes/ for examples")
    return household_scene_from_yaml(path.read_text(), layout, catalog, source=str(path))


def generate_household_scene(seed: int, layout: HouseholdLayout | None = None, catalog: Catalog | None = None,
                             count: tuple[int, int] = (4, 8)) -> HouseholdScene:
    """A random scene: ``count`` pickable objects of distinct names on the open surfaces (not in the
    fridge or the drawer), none overlapping. The same seed gives the same scene."""
    layout, catalog = layout or HouseholdLayout.load(), catalog or Catalog.load()
    rng = np.random.default_rng(seed)
    places = [n for n, p in layout.places.items() if p.hand is None and not p.openable]
    kinds = catalog.types_with("pickable")
    objects: list[PlacedObject] = []
    wanted = int(rng.integers(count[0], count[1] + 1))
    for _ in range(wanted * 50):
        if len(objects) == wanted:
            break
        kind = catalog.type(kinds[int(rng.integers(len(kinds)))])
        color = str(rng.choice(list(catalog.colors))) if kind.any_color else None
        name = f"{color} {kind.name}" if color else kind.name.replace("_", " ")
        if name in (o.name for o in objects):
            continue
        place = places[int(rng.integers(len(places)))]
        surface, half = layout.surface(place), footprint(kind.size, kind.shape)
        limit = (surface.half_extents[0] - half[0], surface.half_extents[1] - half[1])
        offset = (float(rng.uniform(-limit[0], limit[0])), float(rng.uniform(-limit[1], limit[1])))
        candidate = PlacedObject(name, kind.name, place, offset, color)
        try:
            _check_overlaps([*objects, candidate], catalog, "generated")
        except SceneSpecError:
            continue
        objects.append(candidate)
    return HouseholdScene(tuple(objects), {}, seed=seed)
