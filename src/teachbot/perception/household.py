"""Perception in the household world: the scene model from the simulator's ground truth.

The kitchen is too large for one view and its cupboards hide what they hold, so here perception takes
labels, positions, states and properties from the simulator (``perception.observe: world_state``)
rather than from pixels, and uses the mast camera only to say what is in view now. The furniture
takes part in the relations as fixtures (see :mod:`teachbot.perception.relations`): an object can be
on top of the counter, inside the fridge, near the sink. Directions turn with the robot. No ROS here.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from teachbot.errors import InvalidArgumentError
from teachbot.perception.config import CategorySpec, PerceptionConfig
from teachbot.perception.localize import Observation, category_of
from teachbot.perception.relations import Body, SceneQueries
from teachbot.perception.scene_model import SceneModel, TrackedObject
from teachbot.world.household_layout import CABINET_WALL, HouseholdLayout
from teachbot.world.household_objects import Catalog

SURFACE_MARGIN = 0.04  # the layout keeps surfaces this far inside the edges; footprints take it back


@dataclass(frozen=True)
class WorldThing:
    """One object as the simulator reports it (map frame, metres; position is the body's centre)."""

    name: str
    type: str
    color: str
    position: np.ndarray
    size: np.ndarray
    yaw: float = 0.0
    segmentation_id: int = -1


@dataclass(frozen=True)
class ThingStatus:
    """What the simulator says about an object's or a place's states (``sim/states``)."""

    place: str = ""
    inside: bool = False
    held: bool = False
    flags: Mapping[str, bool] = field(default_factory=dict)  # open, on, sliced, clean, filled
    contents: str = ""


def household_categories(catalog: Catalog) -> dict[str, CategorySpec]:
    """The catalog's object types as perception categories: body-centred boxes with their properties."""
    out = {}
    for kind, spec in catalog.types.items():
        props: dict[str, Any] = {p: True for p in spec.properties}
        props.setdefault("container", False)
        out[kind] = CategorySpec(kind, "box", None, "center", props)
    return out


def fixture_bodies(layout: HouseholdLayout, openings: Mapping[str, float]) -> list[Body]:
    """The furniture as relation bodies: a surface to rest on, or a cabinet (fridge, drawer) to be inside.
    ``openings``: how far each door or drawer is open, 0..1 (the drawer's floor moves with it)."""
    out = []
    for p in layout.places.values():
        if p.openable:
            pull = float(openings.get(p.name, 0.0)) * p.joint_limit if p.drawer is not None else 0.0
            s = layout.surface(p.name, pull)
            half = (s.half_extents[0] + SURFACE_MARGIN, s.half_extents[1] + SURFACE_MARGIN)
            top = p.height - CABINET_WALL
            out.append(Body(p.name, np.array(s.centre, float), math.hypot(*half), s.z, top, True, half, s.yaw))
        else:
            half = (p.size[0] / 2, p.size[1] / 2)
            top = p.height if p.shelf_height is None else float(p.shelf_height)
            out.append(Body(p.name, np.array(p.centre, float), math.hypot(*half), 0.0, top, False, half, 0.0))
    return out


class HouseholdPerception:
    """The household scene model: :meth:`update` folds one report of the simulator in."""

    def __init__(self, config: PerceptionConfig, layout: HouseholdLayout | None = None, catalog: Catalog | None = None) -> None:
        self.layout = layout or HouseholdLayout.load()
        catalog = catalog or Catalog.load()
        self.config = replace(config, categories={**household_categories(catalog), **config.categories},
                              relations=replace(config.relations, robot_base=self.layout.base.arm_mount))
        self.scene = SceneModel(self.config)
        self.pose: tuple[float, float, float] = tuple(self.layout.base.start)  # type: ignore[assignment]
        self.openings: dict[str, float] = {}
        self.status: dict[str, ThingStatus] = {}
        self.visible: set[str] | None = None  # names the camera sees now; None: no image yet
        self.queries = HouseholdQueries(self)

    def update(
        self,
        things: Sequence[WorldThing],
        stamp: float,
        pose: tuple[float, float, float] | None = None,
        openings: Mapping[str, float] | None = None,
        status: Mapping[str, ThingStatus] | None = None,
        seen_ids: Collection[int] | None = None,
    ) -> list[TrackedObject]:
        """Fold in the simulator's objects, the base ``pose`` (x, y, yaw), the doors' and drawers'
        ``openings``, every thing's ``status`` and the segmentation ids in the camera image now."""
        if pose is not None:
            self.pose = (float(pose[0]), float(pose[1]), float(pose[2]))
        if openings is not None:
            self.openings = {k: float(v) for k, v in openings.items()}
        if status is not None:
            self.status = dict(status)
        if seen_ids is not None:
            ids = set(int(i) for i in seen_ids)
            self.visible = {t.name for t in things if t.segmentation_id in ids}
        observations = [
            Observation(t.name, t.type, 1.0, np.asarray(t.position, float), np.asarray(t.size, float), float(t.yaw),
                        t.color, instance=t.segmentation_id)
            for t in things
        ]
        known = {t.name: self._known_state(t.name) for t in things}
        return self.scene.update(observations, stamp, None, known)

    def _known_state(self, name: str) -> dict[str, str]:
        st = self.status.get(name, ThingStatus())
        out = {"place": st.place, "held": str(st.held)}
        if self.visible is not None:
            out["visible"] = str(name in self.visible)
            out["hidden"] = "" if name in self.visible else "not in the camera's view"
        out.update({k: str(bool(v)) for k, v in st.flags.items()})
        if st.contents:
            out["contents"] = st.contents
        return out

    def fixtures(self) -> list[Body]:
        return fixture_bodies(self.layout, self.openings)


class HouseholdQueries(SceneQueries):
    """Relations, states and properties over the household's objects and its furniture."""

    def __init__(self, perception: HouseholdPerception) -> None:
        super().__init__(perception.scene, perception.fixtures, lambda: perception.pose)
        self.perception = perception

    def state(self, name: str) -> dict[str, str]:
        """An object's position, support and the simulator's states; a place's states and opening."""
        fixture = self.fixtures().get(name)
        if fixture is None:
            state = super().state(name)
            for key in ("on_table", "lifted"):  # a kitchen has no one table plane
                state.pop(key, None)
            return state
        place = self.perception.layout.place(name)
        st = self.perception.status.get(name, ThingStatus())
        out = {"position": ", ".join(f"{v:.3f}" for v in (*fixture.centre, fixture.top)), "kind": "place"}
        if place.openable:
            out["opening"] = f"{self.perception.openings.get(name, 0.0):.2f}"
        out.update({k: str(bool(v)) for k, v in st.flags.items()})
        return out

    def properties(self, name: str) -> dict[str, str]:
        fixture = self.fixtures().get(name)
        if fixture is None:
            props = super().properties(name)
            props["category"] = category_of(self.object(name).label, self.config).name
            return props
        place = self.perception.layout.place(name)
        return {"name": name, "category": "place", "openable": str(place.openable).lower(),
                "cleanable": str(place.cleanable).lower(), "container": str(fixture.container).lower(),
                "size": ", ".join(f"{v:.3f}" for v in (*place.size, place.height))}

    def contents(self, name: str) -> list[str]:
        """The objects inside a container (the fridge, the drawer, a bowl), by name."""
        if not self.body(name).container:
            raise InvalidArgumentError(f"{name!r} is not a container; containers: "
                                     f"{sorted(n for n, b in self.fixtures().items() if b.container)}")
        return self.related("inside", name)
