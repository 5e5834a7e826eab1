"""The six unseen instruction templates of the tabletop benchmark (UA-UI)."""

from __future__ import annotations

import math

import numpy as np

from teachbot.evaluation import rules
from teachbot.evaluation.benchmark import CORNERS, DIRECTIONS, Attributes
from teachbot.evaluation.task import Point, Task
from teachbot.evaluation.tasks_seen import MARGIN, pick, stack_statements
from teachbot.evaluation.world_state import WorldState

OFFSETS = {"a little": 0.14, "a lot": 0.27}  # the expert's distances from the bowl (rules: <= 0.2, > 0.2)
LINE_SPACING = 0.15  # between neighbouring blocks of the expert's line
LINE_DIRECTIONS = {"horizontal": [(1.0, 0.0)], "vertical": [(0.0, 1.0)],
                   "diagonal": [(math.sqrt(0.5), math.sqrt(0.5)), (math.sqrt(0.5), -math.sqrt(0.5))]}


class DifferentCorners(Task):
    key = "different_corners"
    template = "put all the blocks in different corners"
    seen = False
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {}

    def free_corners(self, initial: WorldState) -> list[str]:
        return [c for c in CORNERS if not self.free_of_objects(self.point(c), initial)]

    def infeasible(self, initial: WorldState) -> str:
        free, n = self.free_corners(initial), len(initial.blocks())
        return f"only {len(free)} free corners for {n} blocks" if len(free) < n else ""

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        out, taken = [], {}
        for b in final.blocks():
            corner = min(CORNERS, key=lambda c: b.xy_distance(self.point(c)))
            problem = rules.on_point(b, self.point(corner), corner, self.rules, final)
            if problem:
                out.append(problem.replace(f"on the {corner}", "in a corner of its own"))
            elif corner in taken:
                out.append(f"the {b.name} and the {taken[corner]} are both in the {corner}; each block should have a corner of its own")
            else:
                taken[corner] = b.name
        return out

    def oracle(self, initial: WorldState) -> list[str]:
        free, out = self.free_corners(initial), []
        for b in initial.blocks():
            corner = min(free, key=lambda c: b.xy_distance(self.point(c)))
            free.remove(corner)
            out.append(f"put_first_on_second({b.name!r}, {corner!r})")
        return out


class MismatchedColors(Task):
    key = "mismatched_colors"
    template = "put the blocks in the bowls with mismatched colors"
    seen = False
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {}

    def infeasible(self, initial: WorldState) -> str:
        for b in initial.blocks():
            if all(w.color == b.color for w in initial.bowls()):
                return f"every bowl has the colour of the {b.name}"
        return ""

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        out = []
        for b in final.blocks():
            inside = [w for w in final.bowls() if not rules.on_bowl(b, w, self.rules, final, self.table.block_size)]
            if not inside:
                out.append(rules.on_bowl(b, min(final.bowls(), key=lambda w: b.xy_distance(w.xy)), self.rules, final,
                                         self.table.block_size).replace("is not in the", "is in no bowl; nearest is the")
                           + "; it should be in a bowl of another colour")
            elif inside[0].color == b.color:
                out.append(f"the {b.name} is in the {inside[0].name}, which has its own colour; it should be in a bowl of another colour")
        return out

    def oracle(self, initial: WorldState) -> list[str]:
        load = {w.name: 0 for w in initial.bowls()}
        out = []
        for b in initial.blocks():
            bowl = min((w for w in initial.bowls() if w.color != b.color), key=lambda w: (load[w.name], w.name))
            load[bowl.name] += 1
            out.append(f"put_first_on_second({b.name!r}, {bowl.name!r})")
        return out


class StackOnPoint(Task):
    """Every block on the corner or side point, in one stack."""

    key = "stack_on_point"
    template = "stack all the blocks on the <corner_or_side>"
    seen = False
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"corner_or_side": pick(rng, attrs["corner_or_side"])[0]}

    def infeasible(self, initial: WorldState) -> str:
        return self.free_of_objects(self.point(self.attributes["corner_or_side"]), initial)

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        label = self.attributes["corner_or_side"]
        blocks = final.blocks()
        out = [p for p in (rules.on_point(b, self.point(label), label, self.rules, final) for b in blocks) if p]
        if out:
            return out
        tower = sorted(blocks, key=lambda b: b.z)
        for below, above in zip(tower, tower[1:]):
            problem = rules.on_block(above, below, self.rules, final, self.table.block_size)
            if problem:
                out.append(problem + "; the blocks should be stacked")
        return out

    def oracle(self, initial: WorldState) -> list[str]:
        return stack_statements([b.name for b in initial.blocks()], self.attributes["corner_or_side"])


class BlockBesideBowl(Task):
    key = "block_beside_bowl"
    template = "pick up the <block> and place it <magnitude> to the <direction> of the <bowl>"
    seen = False

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"block": f"{pick(rng, attrs.colors)[0]} block", "magnitude": pick(rng, attrs["magnitude"])[0],
                "direction": pick(rng, attrs["direction"])[0], "bowl": f"{pick(rng, attrs.colors)[0]} bowl"}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("block", self.attributes["block"].split()[0]), ("bowl", self.attributes["bowl"].split()[0])]

    def offset(self) -> Point:
        ux, uy = DIRECTIONS[self.attributes["direction"]]
        d = OFFSETS[self.attributes["magnitude"]]
        return ux * d, uy * d

    def infeasible(self, initial: WorldState) -> str:
        bowl, (dx, dy) = initial.get(self.attributes["bowl"]), self.offset()
        x, y = bowl.position[0] + dx, bowl.position[1] + dy
        (x0, x1), (y0, y1) = self.benchmark.normalized_area["x"], self.benchmark.normalized_area["y"]
        if not (x0 <= x <= x1 and y0 <= y <= y1):
            return f"{self.attributes['magnitude']} to the {self.attributes['direction']} of the {bowl.name} is off the table area"
        # the bowl itself is OFFSETS away by construction, clear of the fingers
        return self.free_of_objects((x, y), initial, moving=[self.attributes["block"], bowl.name])

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        a = self.attributes
        problem = rules.beside(final.get(a["block"]), final.get(a["bowl"]), a["direction"], DIRECTIONS[a["direction"]],
                               a["magnitude"], self.rules, final)
        return [problem] if problem else []

    def oracle(self, initial: WorldState) -> list[str]:
        dx, dy = self.offset()
        term = lambda i, d: f"bowl_pos[{i}]" + (f" + {d:g}" if d > 0 else f" - {-d:g}" if d < 0 else "")  # noqa: E731
        return [f"bowl_pos = get_obj_pos({self.attributes['bowl']!r})",
                f"put_first_on_second({self.attributes['block']!r}, [{term(0, dx)}, {term(1, dy)}])"]


class CornerByDistance(Task):
    key = "block_to_corner_by_distance_to_bowl"
    template = "pick up the <block> and place it in the corner <distance> to the <bowl>"
    seen = False

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"block": f"{pick(rng, attrs.colors)[0]} block", "distance": pick(rng, attrs["distance"])[0],
                "bowl": f"{pick(rng, attrs.colors)[0]} bowl"}

    def required_objects(self) -> list[tuple[str, str]]:
        return [("block", self.attributes["block"].split()[0]), ("bowl", self.attributes["bowl"].split()[0])]

    def corner(self, initial: WorldState) -> tuple[str, float]:
        """The corner the instruction means and its margin over the runner-up."""
        bowl = initial.get(self.attributes["bowl"])
        sign = 1 if self.attributes["distance"] == "closest" else -1
        ranked = sorted(CORNERS, key=lambda c: sign * bowl.xy_distance(self.point(c)))
        return ranked[0], abs(bowl.xy_distance(self.point(ranked[0])) - bowl.xy_distance(self.point(ranked[1])))

    def infeasible(self, initial: WorldState) -> str:
        corner, margin = self.corner(initial)
        if margin < MARGIN:
            return f"the corner {self.attributes['distance']} to the bowl wins by only {margin * 100:.1f} cm"
        return self.free_of_objects(self.point(corner), initial, moving=[self.attributes["block"]])

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        corner, _ = self.corner(initial)
        problem = rules.on_point(final.get(self.attributes["block"]), self.point(corner), corner, self.rules, final)
        return [problem] if problem else []

    def oracle(self, initial: WorldState) -> list[str]:
        return [f"put_first_on_second({self.attributes['block']!r}, {self.corner(initial)[0]!r})"]


class BlocksInLine(Task):
    key = "blocks_in_line"
    template = "put all the blocks in a <line> line"
    seen = False
    min_blocks = 2

    @classmethod
    def draw_attributes(cls, rng: np.random.Generator, attrs: Attributes) -> dict[str, str]:
        return {"line": pick(rng, attrs["line"])[0]}

    def slots(self, initial: WorldState) -> list[Point]:
        """Free points for the expert's line, nearest the table's middle first; [] when there are none."""
        n = len(initial.blocks())
        (x0, x1), (y0, y1) = self.benchmark.normalized_area["x"], self.benchmark.normalized_area["y"]
        middle = ((x0 + x1) / 2, (y0 + y1) / 2)
        centres = sorted(((float(x), float(y)) for x in np.arange(x0, x1 + 1e-9, 0.025) for y in np.arange(y0, y1 + 1e-9, 0.025)),
                         key=lambda c: (math.hypot(c[0] - middle[0], c[1] - middle[1]), c))
        for cx, cy in centres:
            for ux, uy in LINE_DIRECTIONS[self.attributes["line"]]:
                points = [(cx + (k - (n - 1) / 2) * LINE_SPACING * ux, cy + (k - (n - 1) / 2) * LINE_SPACING * uy) for k in range(n)]
                inside = all(x0 - 1e-9 <= x <= x1 + 1e-9 and y0 - 1e-9 <= y <= y1 + 1e-9 for x, y in points)
                if inside and not any(self.free_of_objects(p, initial) for p in points):
                    return points
        return []

    def infeasible(self, initial: WorldState) -> str:
        return "" if self.slots(initial) else f"no free room for a {self.attributes['line']} line"

    def problems(self, initial: WorldState, final: WorldState) -> list[str]:
        problem = rules.in_line(final.blocks(), self.attributes["line"], self.rules, final)
        return [problem] if problem else []

    def oracle(self, initial: WorldState) -> list[str]:
        """Blocks in the order of their position along the line go to the slots in order (no crossing)."""
        points = self.slots(initial)
        ux, uy = points[-1][0] - points[0][0], points[-1][1] - points[0][1]
        blocks = sorted(initial.blocks(), key=lambda b: b.position[0] * ux + b.position[1] * uy)
        (x0, x1), (y0, y1) = self.benchmark.normalized_area["x"], self.benchmark.normalized_area["y"]
        return [f"put_first_on_second({b.name!r}, denormalize_xy([{(x - x0) / (x1 - x0):.3f}, {(y - y0) / (y1 - y0):.3f}]))"
                for b, (x, y) in zip(blocks, points)]
