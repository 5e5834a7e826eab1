#!/usr/bin/env python3
"""Calibrate the visual threshold of the classic descriptor on rendered cups, upright and flipped (Issue 29 item 4).

DROC's visual case: an upright and a flipped cup need different skills, and the robot must tell them apart by
their looks while their colours differ. This renders cups of two colours, upright and flipped, at a few places
and yaws on the tabletop (``teachbot.sim.world.TabletopWorld`` with ``teachbot.sim.cup`` bodies), from the fixed
scene camera of config/sim.yaml. Each cup is found as the perception node finds it (the ``sim_ground_truth``
detector's box, localised and tracked by ``teachbot.perception.pipeline.Perception``) and cut out as
``perception/describe_object`` cuts it (``teachbot.knowledge.object_crop.object_crop``: the box, a mask from
depth above the table; no segmentation ids), then described by the descriptor of config/knowledge.yaml.

It reports the similarity distributions of same-pose pairs (same shape, any colour) and of different-pose pairs
(other shape, any colour; and the hard ones: other shape, same colour), the threshold that separates them best
(midway between the worst same-pose pair and the best different-pose pair when they do not overlap; else the
value with the fewest errors), and the nearest-neighbour pose accuracy with colour as the distractor. The last
line of stdout is one JSON object with all of it.

The DROC evaluation's own object crops count too (``--droc``, on by default): within each task of
config/benchmarks/droc/, every two of its variants' crops (``DrocWorlds.crop``: the robot's camera, cut out by
box and depth as ``perception/describe_object`` does, no segmentation ids) as pairs that must match (teach,
same and similar variants; the same object at another place too) or must not (a dissimilar object against the
others). The cups alone allow any threshold in (0.595, 0.651); the DROC pairs alone any in (0.662, 0.847): the
two ranges do not meet (a red mug and a clear glass, a cupboard and a fridge, differ in colour but not in the
coarse shape this descriptor keeps, as much as a red and a blue upright cup do). The threshold written to
config/knowledge.yaml (``retrieval.visual_threshold``) is the one with the lowest balanced error, the mean
of each set's share of pairs on the wrong side, so neither set's size decides; both sets' errors at it are
printed and written down there.

Usage: .venv/bin/python tools/calibrate_looks.py [--places 7] [--yaws 3] [--colours red blue] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from teachbot.evaluation.droc_looks import cup_looks  # noqa: E402
from teachbot.evaluation.droc_worlds import scene_camera  # noqa: E402, F401 - scene_camera: here too
from teachbot.knowledge.object_crop import knowledge_settings  # noqa: E402
from teachbot.robot_profile import RobotProfile  # noqa: E402
from teachbot.sim.cup import POSES  # noqa: E402
from teachbot.sim.world import TabletopWorld  # noqa: E402
from teachbot.world.scene import ObjectSpec  # noqa: E402

# where the cups stand: in the spawn area of config/tabletop.yaml, in the camera's view, two rows staggered so that
# no cup hides another from the camera (an occluded cup looks like another shape: that is not what is calibrated)
SPOTS = ((-0.21, -0.42), (0.0, -0.44), (0.21, -0.42), (-0.1, -0.6), (0.1, -0.6), (-0.27, -0.62), (0.27, -0.62))


def threshold_between(same: list[float], other: list[float]) -> tuple[float, int]:
    """The threshold with the fewest errors (same-pose pairs below it, other-pose pairs at or above it), the
    middle of the widest such gap; and its error count."""
    values = sorted(set(same) | set(other))
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(values)] or values
    best = min(candidates, key=lambda t: (sum(s < t for s in same) + sum(o >= t for o in other),
                                          -min([abs(t - v) for v in values])))
    return best, sum(s < best for s in same) + sum(o >= best for o in other)


def balanced_threshold(sets: dict[str, tuple[list[float], list[float]]]) -> tuple[float, dict[str, int]]:
    """The threshold with the lowest mean over ``sets`` of (match pairs below it + no-match pairs at or above it) /
    pairs, the middle of the widest such gap; and each set's error count there."""
    values = sorted({v for match, other in sets.values() for v in (*match, *other)})
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(values)] or values

    def errors(t: float) -> dict[str, int]:
        return {k: sum(v < t for v in m) + sum(v >= t for v in o) for k, (m, o) in sets.items()}

    def cost(t: float) -> tuple[float, float]:
        found = errors(t)
        return (sum(found[k] / max(1, len(m) + len(o)) for k, (m, o) in sets.items()) / len(sets), -min(abs(t - v) for v in values))

    best = min(candidates, key=cost)
    return best, errors(best)


def droc_pairs(embedder: Any) -> tuple[list[float], list[float], list[dict[str, Any]]]:
    """Within each DROC task, the similarity of every two of its variants' object crops (``DrocWorlds.crop``: the
    robot's camera, no segmentation ids): pairs that must match (teach, same, similar; the same object at another
    place is a pair too), pairs that must not (a dissimilar object against the others); and each pair named."""
    from teachbot.evaluation.droc_tasks import load_tasks  # deferred: the DROC evaluation's worlds, only with --droc
    from teachbot.evaluation.droc_worlds import DrocWorlds  # deferred: as above

    match, other, named = [], [], []
    with DrocWorlds() as worlds:
        for task in load_tasks():
            if task.type:
                continue  # a Table II train/test pair: different tasks, not one object's looks
            looks = {}
            for v in task.variants:
                crop = worlds.crop(task, v)
                looks[v.name] = (v.object, v.role, embedder.embed(crop.rgb, crop.depth, crop.mask))
            for (a, (oa, ra, va)), (b, (ob, rb, vb)) in itertools.combinations(looks.items(), 2):
                score = float(embedder.similarity(va, vb))
                same = "dissimilar" not in (ra, rb)
                (match if same else other).append(score)
                named.append({"task": task.id, "a": f"{a} ({ra}: {oa})", "b": f"{b} ({rb}: {ob})", "match": same,
                              "similarity": round(score, 3)})
    return match, other, named


def summary(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {"n": int(a.size), "min": float(a.min()), "p10": float(np.percentile(a, 10)), "median": float(np.median(a)),
            "p90": float(np.percentile(a, 90)), "max": float(a.max())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--places", type=int, default=7, help=f"scenes, each at other spots (at most {len(SPOTS)})")
    parser.add_argument("--yaws", type=int, default=3, help="yaws per place")
    parser.add_argument("--colours", nargs="+", default=["red", "blue"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-droc", dest="droc", action="store_false", help="the cups only, without the DROC evaluation's pairs")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    _, embedder = knowledge_settings()
    world = TabletopWorld(RobotProfile.load("panda_sim"))
    samples: list[tuple[str, str, np.ndarray]] = []  # pose, colour, vector
    used: set[tuple[float, float]] = set()
    kinds = list(itertools.product(POSES, args.colours))
    try:
        for place in range(min(args.places, len(SPOTS))):
            for _ in range(args.yaws):
                # the four cups at four spots, shuffled so each kind stands at several places over the runs
                spots = [SPOTS[(place * 3 + k) % len(SPOTS)] for k in range(len(kinds))]
                used.update(spots)
                order = rng.permutation(len(kinds))
                objects = [ObjectSpec(f"{colour} {pose} cup", "cup", colour, spots[int(i)], float(rng.uniform(-math.pi, math.pi)), pose)
                           for (pose, colour), i in zip(kinds, order)]
                looks = cup_looks(world, objects, embedder)
                for o in objects:
                    if o.name in looks:
                        samples.append((o.pose, o.color, looks[o.name]))
    finally:
        world.close()
    same, other, other_same_colour = [], [], []
    for (p1, c1, v1), (p2, c2, v2) in itertools.combinations(samples, 2):
        score = embedder.similarity(v1, v2)
        (same if p1 == p2 else other).append(score)
        if p1 != p2 and c1 == c2:
            other_same_colour.append(score)
    threshold, errors = threshold_between(same, other)
    # nearest stored look, colour the distractor: for each query, the stored looks are one of each pose, the
    # other colour for its own pose and its own colour for the other pose
    hits = trials = 0
    for i, (pose, colour, vector) in enumerate(samples):
        right = [v for j, (p, c, v) in enumerate(samples) if j != i and p == pose and c != colour]
        wrong = [v for j, (p, c, v) in enumerate(samples) if j != i and p != pose and c == colour]
        for r, w in itertools.product(right, wrong):
            trials += 1
            hits += embedder.similarity(vector, r) > embedder.similarity(vector, w)
    sets = {"cups": (same, other)}
    named: list[dict[str, Any]] = []
    if args.droc:
        droc_match, droc_other, named = droc_pairs(embedder)
        sets["droc"] = (droc_match, droc_other)
    chosen, chosen_errors = balanced_threshold(sets)
    result = {"descriptor": embedder.name, "visual_threshold": round(chosen, 3), "errors_at_visual_threshold": chosen_errors,
              "pairs_per_set": {k: len(m) + len(o) for k, (m, o) in sets.items()}, "droc_pairs": named,
              "samples": len(samples), "same_pose": summary(same), "other_pose": summary(other),
              "other_pose_same_colour": summary(other_same_colour), "threshold": round(threshold, 3), "threshold_errors": errors,
              "pairs": len(same) + len(other), "nearest_pose_accuracy": hits / trials if trials else 0.0, "trials": trials,
              "config_key": "knowledge.retrieval.visual_threshold", "seed": args.seed,
              "spots": sorted(used),
              "camera": "config/sim.yaml camera (the fixed scene camera)", "colours": list(args.colours)}
    for key in ("same_pose", "other_pose", "other_pose_same_colour"):
        print(f"{key:24s} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in result[key].items()))
    print(f"threshold {threshold:.3f} ({errors} of {result['pairs']} pairs on the wrong side); nearest look picks the pose in "
          f"{hits}/{trials} = {result['nearest_pose_accuracy']:.3f} with colour the distractor ({embedder.name})")
    for pair in named:
        print(f"droc {pair['task']:18s} {pair['a']} / {pair['b']}: {pair['similarity']:.3f} ({'match' if pair['match'] else 'no match'})")
    print(f"cups alone: {threshold:.3f} ({errors} of {result['pairs']} pairs wrong)")
    print(f"knowledge.retrieval.visual_threshold: {chosen:.3f}  # balanced over {', '.join(sets)}; pairs on the wrong side: "
          + ", ".join(f"{k} {chosen_errors[k]} of {result['pairs_per_set'][k]}" for k in sets))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
