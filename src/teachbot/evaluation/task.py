"""A benchmark task: one instruction template with its scene requirements, success check and expert.

As in ravens, environment, task and agent are kept apart: a :class:`Task` instance is one filled-in
template (its attributes fixed); :meth:`Task.sample` draws the attributes and a feasible scene from a
seeded generator; ``success``/``diagnose`` judge two world states (initial, final) with targets
resolved from the initial one; ``oracle`` is the console code a perfect model would type.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from teachbot.errors import SceneSpecError
from teachbot.evaluation.benchmark import Attributes, Benchmark
from teachbot.evaluation.world_state import ObjectTruth, WorldState
from teachbot.world.scene import ObjectSpec, SceneSpec, TabletopConfig

Point = tuple[float, float]


@dataclass(frozen=True)
class Episode:
    """One sampled run: the filled-in task, its split and its scene."""

    task: Task
    split: str
    scene: SceneSpec

    @property
    def instruction(self) -> str:
        return self.task.instruction

    def scene_yaml(self) -> str:
        """The scene in the explicit-scene YAML that ``sim/reset`` takes."""
        return self.scene.to_yaml()

    def initial_state(self) -> WorldState:
        """The state the scene describes, before the simulator settles it."""
        return WorldState.from_scene(self.scene, self.task.table)


class Task(ABC):
    """Base of the 14 template classes. Subclasses set ``key``, ``template``, ``seen`` and the hooks."""

    key: ClassVar[str]
    template: ClassVar[str]  # exactly as in the benchmark's instructions
    seen: ClassVar[bool]  # a seen (SA-SI, UA-SI) or unseen (UA-UI) instruction
    min_blocks: int = 1  # an instance may raise it from its attributes ("the fourth block")
    min_bowls: int = 1

    def __init__(self, attributes: Mapping[str, str], benchmark: Benchmark | None = None, table: TabletopConfig | None = None) -> None:
        self.attributes = dict(attributes)
        self.benchmark = benchmark or Benchmark.load()
        self.table = table or TabletopConfig.load()
        self.rules = self.benchmark.success

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.attributes!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.attributes == self.attributes  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.attributes.items()))))

    # ----------------------------------------------------------------- the instruction
    @property
    def instruction(self) -> str:
        text = self.template
        for key, value in self.attributes.items():
            text = text.replace(f"<{key}>", value)
        return text

    @classmethod
    def splits(cls) -> tuple[str, ...]:
        return ("SA-SI", "UA-SI") if cls.seen else ("UA-UI",)

    # ----------------------------------------------------------------- hooks
    @classmethod
    @abstractmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        """Fill the template's placeholders from the split's attribute lists."""

    def required_objects(self) -> list[tuple[str, str]]:
        """(category, colour) of the objects the instruction names."""
        return []

    def compose(self, rng: np.random.Generator, colors: Sequence[str]) -> list[tuple[str, str]]:
        """The scene's objects: the required ones plus random others, 1-4 blocks and 1-4 bowls of distinct
        colours per category, all from ``colors``."""
        need = self.required_objects()
        lo_b, hi_b = self.table.block_count
        lo_w, hi_w = self.table.bowl_count
        objects = []
        for category, lo, hi, floor in (("bowl", lo_w, hi_w, self.min_bowls), ("block", lo_b, hi_b, self.min_blocks)):
            fixed = [c for cat, c in need if cat == category]
            n = int(rng.integers(max(lo, floor, len(fixed)), hi + 1))
            free = [c for c in colors if c not in fixed]
            extra = [free[i] for i in rng.choice(len(free), size=n - len(fixed), replace=False)] if n > len(fixed) else []
            objects += [(category, c) for c in fixed + extra]
        return objects

    def infeasible(self, initial: WorldState) -> str:
        """Why this scene cannot serve the instruction ('' when it can)."""
        return ""

    @abstractmethod
    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        """What is wrong in ``final`` (targets resolved from ``initial``); empty on success."""

    @abstractmethod
    def oracle(self, initial: WorldState) -> list[str]:
        """Console statements that solve the task from ``initial``, as a perfect model would type them."""

    # ----------------------------------------------------------------- judging
    def success(self, initial: WorldState, final: WorldState) -> bool:
        return not self.problems(initial, final)

    def diagnose(self, initial: WorldState, final: WorldState) -> str:
        """What is wrong, in plain words for a (simulated) person to turn into a correction; '' on success."""
        return "; ".join(self.problems(initial, final))

    # ----------------------------------------------------------------- sampling
    @classmethod
    def sample(cls, rng: np.random.Generator, split: str, benchmark: Benchmark | None = None,
               table: TabletopConfig | None = None, max_tries: int = 1000) -> Episode:
        """Attributes from the split's lists, then scenes until one is feasible; deterministic in ``rng``."""
        benchmark = benchmark or Benchmark.load()
        if split not in cls.splits():
            raise ValueError(f"{cls.key!r} is {'a seen' if cls.seen else 'an unseen'} instruction; "
                             f"it belongs to {', '.join(cls.splits())}, not {split}")
        attrs = benchmark.split_attributes(split)
        task = cls(cls.draw_attributes(rng, attrs), benchmark, table)
        reason = ""
        for _ in range(max_tries):
            scene = place_objects(rng, task.compose(rng, attrs.colors), task.table)
            if scene is None:
                continue
            initial = WorldState.from_scene(scene, task.table)
            reason = task.infeasible(initial) or ("already solved at the start" if task.success(initial, initial) else "")
            if not reason:
                return Episode(task, split, scene)
        raise SceneSpecError(f"{task.instruction!r}: no feasible scene in {max_tries} tries (last: {reason})")

    # ----------------------------------------------------------------- helpers for subclasses
    def point(self, name: str) -> Point:
        return self.benchmark.named_points[name]

    def free_of_objects(self, point: Point, state: WorldState, moving: Sequence[str] = ()) -> str:
        """'' when nothing but the ``moving`` blocks stands where a block will be put at ``point``:
        bowls a bowl radius plus a block away, blocks 0.1 m (room for the open fingers)."""
        for o in state.objects:
            if o.name in moving:
                continue
            clearance = self.table.bowl_radius + self.table.block_size if o.category == "bowl" else 0.1
            if o.xy_distance(point) < clearance:
                return f"the {o.name} stands at the target point ({point[0]:.2f}, {point[1]:.2f})"
        return ""

    def block(self, state: WorldState, color: str) -> ObjectTruth:
        return state.get(f"{color} block")

    def bowl(self, state: WorldState, color: str) -> ObjectTruth:
        return state.get(f"{color} bowl")


def place_objects(rng: np.random.Generator, wanted: Sequence[tuple[str, str]], table: TabletopConfig,
                  max_layouts: int = 50) -> SceneSpec | None:
    """Random positions in the spawn area, ``min_separation`` apart: the rejection sampling of
    ``teachbot.world.scene.generate_scene`` (bowls first, blocks with a random yaw), for given objects.
    None when no layout was found in ``max_layouts`` restarts."""
    (x0, x1), (y0, y1) = table.spawn_area["x"], table.spawn_area["y"]
    order = [w for w in wanted if w[0] == "bowl"] + [w for w in wanted if w[0] != "bowl"]
    for _ in range(max_layouts):
        placed: list[ObjectSpec] = []
        for category, color in order:
            for _ in range(100):
                # rounded as SceneSpec.to_yaml writes them, so the sim builds exactly the checked scene
                xy = (round(float(rng.uniform(x0, x1)), 6), round(float(rng.uniform(y0, y1)), 6))
                if all(np.hypot(xy[0] - o.position[0], xy[1] - o.position[1]) >= table.min_separation for o in placed):
                    break
            else:
                break
            yaw = round(float(rng.uniform(-np.pi / 4, np.pi / 4)), 6) if category == "block" else 0.0
            placed.append(ObjectSpec(f"{color} {category}", category, color, xy, yaw))
        if len(placed) == len(order):
            return SceneSpec(tuple(placed))
    return None
