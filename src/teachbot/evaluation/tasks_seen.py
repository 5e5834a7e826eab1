"""The eight seen instruction templates of the tabletop benchmark (SA-SI and UA-SI)."""

from __future__ import annotations

import numpy as np

from teachbot.evaluation import rules
from teachbot.evaluation.benchmark import DIRECTIONS, Attributes
from teachbot.evaluation.task import Task
from teachbot.evaluation.world_state import ObjectTruth, WorldState

NTH = {"first": 1, "second": 2, "third": 3, "fourth": 4}
MARGIN = 0.03  # "closest", "nth from the left", ... must win by this much to be unambiguous


def pick(rng: np.random.Generator, values: tuple[str, ...], k: int = 1) -> list[str]:
    return [values[i] for i in rng.choice(len(values), size=k, replace=False)]


def ranked(values: list[tuple[float, ObjectTruth]], index: int) -> tuple[ObjectTruth | None, float]:
    """The object at ``index`` of ``values`` sorted by key, and its margin to its neighbours (inf if alone)."""
    values = sorted(values, key=lambda v: v[0])
    if index >= len(values):
        return None, 0.0
    keys = [v[0] for v in values]
    gaps = [abs(keys[index] - keys[j]) for j in (index - 1, index + 1) if 0 <= j < len(keys)]
    return values[index][1], min(gaps, default=float("inf"))


def stack_statements(names: list[str], target: str) -> list[str]:
    """The first block onto ``target``, each next one onto the one before."""
    out, below = [], target
    for name in names:
        out.append(f"put_first_on_second({name!r}, {below!r})")
        below = name
    return out


class BlockOnBlock(Task):
    key = "block_on_block"
    template = "pick up the <block:1> and place it on the <block:2>"
    seen = True
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        a, b = pick(rng, attrs.colors, 2)
        return {"block:1": f"{a} block", "block:2": f"{b} block"}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("block", self.attributes["block:1"].split()[0]), ("block", self.attributes["block:2"].split()[0])]

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        top, bottom = final.get(self.attributes["block:1"]), final.get(self.attributes["block:2"])
        return [p for p in [rules.on_block(top, bottom, self.rules, final, self.table.block_size)] if p]

    def oracle(self, initial: WorldState) -> list[str]:
        return [f"put_first_on_second({self.attributes['block:1']!r}, {self.attributes['block:2']!r})"]


class BlockInBowl(Task):
    key = "block_in_bowl"
    template = "pick up the <block> and place it on the <bowl>"
    seen = True

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"block": f"{pick(rng, attrs.colors)[0]} block", "bowl": f"{pick(rng, attrs.colors)[0]} bowl"}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("block", self.attributes["block"].split()[0]), ("bowl", self.attributes["bowl"].split()[0])]

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        block, bowl = final.get(self.attributes["block"]), final.get(self.attributes["bowl"])
        return [p for p in [rules.on_bowl(block, bowl, self.rules, final, self.table.block_size)] if p]

    def oracle(self, initial: WorldState) -> list[str]:
        return [f"put_first_on_second({self.attributes['block']!r}, {self.attributes['bowl']!r})"]


class AllBlocksOnPoint(Task):
    """Every block within on_point of the corner or side; the expert stacks them there."""

    key = "all_blocks_on_point"
    template = "put all the blocks on the <corner_or_side>"
    seen = True
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"corner_or_side": pick(rng, attrs["corner_or_side"])[0]}

    def infeasible(self, initial: WorldState) -> str:
        return self.free_of_objects(self.point(self.attributes["corner_or_side"]), initial)

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        label = self.attributes["corner_or_side"]
        found = [rules.on_point(b, self.point(label), label, self.rules, final) for b in final.blocks()]
        return [p for p in found if p]

    def oracle(self, initial: WorldState) -> list[str]:
        return stack_statements([b.name for b in initial.blocks()], self.attributes["corner_or_side"])


class AllBlocksInBowl(Task):
    key = "all_blocks_in_bowl"
    template = "put the blocks in the <bowl>"
    seen = True
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"bowl": f"{pick(rng, attrs.colors)[0]} bowl"}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("bowl", self.attributes["bowl"].split()[0])]

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        bowl = final.get(self.attributes["bowl"])
        found = [rules.on_bowl(b, bowl, self.rules, final, self.table.block_size) for b in final.blocks()]
        return [p for p in found if p]

    def oracle(self, initial: WorldState) -> list[str]:
        return [
            "block_names = [name for name in get_obj_names() if name.endswith('block')]",
            f"for name in block_names:\n    put_first_on_second(name, {self.attributes['bowl']!r})",
        ]


class MatchingColors(Task):
    key = "matching_colors"
    template = "put all the blocks in the bowls with matching colors"
    seen = True
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {}

    def compose(self, rng: np.random.Generator, colors: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
        """Every block has a bowl of its colour; more bowls may stand beside them."""
        n_blocks = int(rng.integers(self.min_blocks, self.table.block_count[1] + 1))
        blocks = pick(rng, tuple(colors), n_blocks)
        n_bowls = int(rng.integers(n_blocks, self.table.bowl_count[1] + 1))
        others = [c for c in colors if c not in blocks]
        bowls = blocks + (pick(rng, tuple(others), n_bowls - n_blocks) if n_bowls > n_blocks else [])
        return [("bowl", c) for c in bowls] + [("block", c) for c in blocks]

    def infeasible(self, initial: WorldState) -> str:
        bowls = {b.color for b in initial.bowls()}
        lonely = [b.name for b in initial.blocks() if b.color not in bowls]
        return f"no bowl matches the {lonely[0]}" if lonely else ""

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        found = [rules.on_bowl(b, final.get(f"{b.color} bowl"), self.rules, final, self.table.block_size) for b in final.blocks()]
        return [p for p in found if p]

    def oracle(self, initial: WorldState) -> list[str]:
        return [f"put_first_on_second({b.name!r}, {b.color + ' bowl'!r})" for b in initial.blocks()]


class _BlockToPoint(Task):
    """A block chosen by a relation in the initial state, to be put on a corner or side."""

    seen = True

    def target(self, initial: WorldState) -> tuple[ObjectTruth | None, str]:
        """The block the instruction means, or None and why it is ambiguous or missing."""
        raise NotImplementedError

    def infeasible(self, initial: WorldState) -> str:
        block, why = self.target(initial)
        if block is None:
            return why
        return self.free_of_objects(self.point(self.attributes["corner_or_side"]), initial, moving=[block.name])

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        block, why = self.target(initial)
        if block is None:
            return [f"the instruction has no single target in this scene ({why})"]
        label = self.attributes["corner_or_side"]
        problem = rules.on_point(final.get(block.name), self.point(label), label, self.rules, final)
        return [problem] if problem else []

    def oracle(self, initial: WorldState) -> list[str]:
        block, why = self.target(initial)
        if block is None:
            raise ValueError(f"{self.instruction!r}: {why}")
        return [f"put_first_on_second({block.name!r}, {self.attributes['corner_or_side']!r})"]


class BlockByDirectionToPoint(_BlockToPoint):
    key = "block_by_direction_of_bowl_to_point"
    template = "pick up the block to the <direction> of the <bowl> and place it on the <corner_or_side>"

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"direction": pick(rng, attrs["direction"])[0], "bowl": f"{pick(rng, attrs.colors)[0]} bowl",
                "corner_or_side": pick(rng, attrs["corner_or_side"])[0]}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("bowl", self.attributes["bowl"].split()[0])]

    def target(self, initial: WorldState) -> tuple[ObjectTruth | None, str]:
        """The one block inside the 90-degree cone on the <direction> side of the bowl."""
        bowl, (ux, uy) = initial.get(self.attributes["bowl"]), DIRECTIONS[self.attributes["direction"]]
        hits = []
        for b in initial.blocks():
            dx, dy = b.position[0] - bowl.position[0], b.position[1] - bowl.position[1]
            along, across = dx * ux + dy * uy, abs(-dx * uy + dy * ux)
            if along > 0 and across < along:
                hits.append(b)
        if len(hits) != 1:
            return None, f"{len(hits)} blocks lie to the {self.attributes['direction']} of the {bowl.name}"
        return hits[0], ""


class BlockByDistanceToPoint(_BlockToPoint):
    key = "block_by_distance_to_bowl_to_point"
    template = "pick up the block <distance> to the <bowl> and place it on the <corner_or_side>"
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"distance": pick(rng, attrs["distance"])[0], "bowl": f"{pick(rng, attrs.colors)[0]} bowl",
                "corner_or_side": pick(rng, attrs["corner_or_side"])[0]}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("bowl", self.attributes["bowl"].split()[0])]

    def target(self, initial: WorldState) -> tuple[ObjectTruth | None, str]:
        bowl = initial.get(self.attributes["bowl"])
        keyed = [(b.xy_distance(bowl.xy), b) for b in initial.blocks()]
        block, margin = ranked(keyed, 0 if self.attributes["distance"] == "closest" else len(keyed) - 1)
        if block is None or margin < MARGIN:
            return None, f"the {self.attributes['distance']} block to the {bowl.name} wins by only {margin * 100:.1f} cm"
        return block, ""


class NthBlockToPoint(_BlockToPoint):
    key = "nth_block_to_point"
    template = "pick up the <nth> block from the <direction> and place it on the <corner_or_side>"

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.min_blocks = max(2, NTH[self.attributes["nth"]])

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"nth": pick(rng, attrs["nth"])[0], "direction": pick(rng, attrs["direction"])[0],
                "corner_or_side": pick(rng, attrs["corner_or_side"])[0]}

    def target(self, initial: WorldState) -> tuple[ObjectTruth | None, str]:
        """Counting from the <direction> side: the first from the left has the smallest x."""
        ux, uy = DIRECTIONS[self.attributes["direction"]]
        keyed = [(-(b.position[0] * ux + b.position[1] * uy), b) for b in initial.blocks()]
        block, margin = ranked(keyed, NTH[self.attributes["nth"]] - 1)
        if block is None:
            return None, f"there is no {self.attributes['nth']} block (only {len(keyed)})"
        if margin < MARGIN:
            return None, f"the {self.attributes['nth']} block from the {self.attributes['direction']} is ambiguous ({margin * 100:.1f} cm)"
        return block, ""
