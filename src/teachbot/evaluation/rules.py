"""The benchmark's success rules as small checks: each returns '' when it holds, else what is wrong in words.

Conventions: x grows to the right, y to the top (``top_is: +y``); a block still in the gripper is never placed.
What is wrong is said as a person watching the table says it: which object, where it is (in which bowl, near which
corner or side), which way it should go; never coordinates or centimetres.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from teachbot.evaluation.benchmark import SuccessRules
from teachbot.evaluation.world_state import ObjectTruth, WorldState, describe, towards

Point = tuple[float, float]


def _held(block: ObjectTruth, state: WorldState) -> bool:
    return block.held or state.held_object == block.name


def on_point(block: ObjectTruth, point: Point, label: str, rules: SuccessRules, state: WorldState) -> str:
    """on_point: xy distance < rules.on_point (stacked blocks count: it is the xy that matters)."""
    if _held(block, state):
        return f"the {block.name} is still in the gripper; it should be on the {label}"
    d = block.xy_distance(point)
    if d < rules.on_point:
        return ""
    return (f"the {block.name} is not on the {label}: it is {describe(block, state)}; "
            f"it should go {towards(block.xy, point)}, onto the {label}")


def on_bowl(block: ObjectTruth, bowl: ObjectTruth, rules: SuccessRules, state: WorldState, block_size: float = 0.04) -> str:
    """on_bowl: xy distance < rules.on_bowl and above the bowl (its bottom not below the bowl's base)."""
    if _held(block, state):
        return f"the {block.name} is still in the gripper; it should be in the {bowl.name}"
    d = block.xy_distance(bowl.xy)
    if d < rules.on_bowl and block.z - block_size / 2 >= bowl.z - 0.005:
        return ""
    return f"the {block.name} is not in the {bowl.name}: it is {describe(block, state)}"


def on_block(top: ObjectTruth, bottom: ObjectTruth, rules: SuccessRules, state: WorldState, block_size: float = 0.04) -> str:
    """on_block: xy distance < rules.on_block and above the other block (centre at least half a block higher)."""
    if _held(top, state):
        return f"the {top.name} is still in the gripper; it should be on the {bottom.name}"
    d = top.xy_distance(bottom.xy)
    if d < rules.on_block and top.z - bottom.z > block_size / 2:
        return ""
    return f"the {top.name} is not on the {bottom.name}: it is {describe(top, state)}, and the {bottom.name} is {describe(bottom, state)}"


def beside(block: ObjectTruth, bowl: ObjectTruth, direction: str, vector: Point, magnitude: str,
           rules: SuccessRules, state: WorldState) -> str:
    """'<magnitude> to the <direction> of the bowl': on the correct side along the axis (and within the
    90-degree cone of that direction, our reading), out of the bowl, at xy distance <= a_little_max
    ('a little') or > a_lot_min ('a lot')."""
    want = f"{magnitude} to the {direction} of the {bowl.name}"
    if _held(block, state):
        return f"the {block.name} is still in the gripper; it should be {want}"
    dx, dy = block.position[0] - bowl.position[0], block.position[1] - bowl.position[1]
    along = dx * vector[0] + dy * vector[1]
    across = abs(-dx * vector[1] + dy * vector[0])
    d = math.hypot(dx, dy)
    where = f"it is {describe(block, state)}"
    if along <= 0 or across > along:
        return f"the {block.name} is not to the {direction} of the {bowl.name}: {where}; it should be {want}"
    if d < rules.on_bowl:
        return f"the {block.name} is in the {bowl.name}, not beside it; it should be {want}"
    if magnitude == "a little" and d > rules.a_little_max:
        return f"the {block.name} is too far from the {bowl.name}: {where}; a little means close beside it"
    if magnitude == "a lot" and d <= rules.a_lot_min:
        return f"the {block.name} is too close to the {bowl.name}: {where}; a lot means well away from it"
    return ""


def line_kind(slope: float, rules: SuccessRules) -> str:
    """'horizontal', 'vertical', 'diagonal' or '' for a line of |dy/dx| ``slope``."""
    if slope < rules.horizontal_max_slope:
        return "horizontal"
    if slope > rules.vertical_min_slope:
        return "vertical"
    lo, hi = rules.diagonal_slope
    return "diagonal" if lo <= slope <= hi else ""


def in_line(blocks: Sequence[ObjectTruth], kind: str, rules: SuccessRules, state: WorldState) -> str:
    """The line rule: every other block within rules.line_distance of the line through the first two,
    whose |slope| says horizontal/diagonal/vertical. "The first two" are read as the two blocks farthest
    apart (the line's ends), which makes the slope least sensitive to placement noise."""
    held = [b.name for b in blocks if _held(b, state)]
    if held:
        return f"the {held[0]} is still in the gripper; all the blocks should be in a {kind} line"
    if len(blocks) < 2:
        return ""
    pairs = [(a, b) for i, a in enumerate(blocks) for b in blocks[i + 1:]]
    a, b = max(pairs, key=lambda p: p[0].xy_distance(p[1].xy))
    dx, dy = b.position[0] - a.position[0], b.position[1] - a.position[1]
    length = math.hypot(dx, dy)
    if length < 1e-6:
        return f"the blocks are all at one spot ({describe(a, state)}); they should be spread in a {kind} line"
    slope = abs(dy) / abs(dx) if abs(dx) > 1e-9 else math.inf
    problems = []
    got = line_kind(slope, rules)
    if got != kind:
        problems.append(f"the line from the {a.name} to the {b.name} is {got or 'neither horizontal, vertical nor diagonal'}; "
                        f"it should be {kind}")
    for c in blocks:
        if c is a or c is b:
            continue
        off = abs((c.position[0] - a.position[0]) * dy - (c.position[1] - a.position[1]) * dx) / length
        if off > rules.line_distance:
            problems.append(f"the {c.name} is off the line through the {a.name} and the {b.name} ({describe(c, state)})")
    return "; ".join(problems)
