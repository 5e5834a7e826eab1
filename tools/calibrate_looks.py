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

The threshold is proposed as a new key, ``knowledge.descriptor.match_threshold`` (config/knowledge.yaml's
``retrieval.visual_threshold`` of 0.85 was set for descriptor v1, whose split coincided with colour).

Usage: .venv/bin/python tools/calibrate_looks.py [--places 7] [--yaws 3] [--colours red blue] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from teachbot.config import load_yaml  # noqa: E402
from teachbot.knowledge.object_crop import ObjectBounds, knowledge_settings, object_crop  # noqa: E402
from teachbot.paths import config_path  # noqa: E402
from teachbot.perception.config import PerceptionConfig  # noqa: E402
from teachbot.perception.detector import Frame  # noqa: E402
from teachbot.perception.localize import CameraModel, category_of  # noqa: E402
from teachbot.perception.pipeline import Perception  # noqa: E402
from teachbot.robot_profile import RobotProfile  # noqa: E402
from teachbot.sim.camera import CameraSpec, quaternion_from_matrix  # noqa: E402
from teachbot.sim.cup import POSES  # noqa: E402
from teachbot.sim.world import TabletopWorld  # noqa: E402
from teachbot.world.scene import ObjectSpec, SceneSpec  # noqa: E402

# where the cups stand: in the spawn area of config/tabletop.yaml, in the camera's view, two rows staggered so that
# no cup hides another from the camera (an occluded cup looks like another shape: that is not what is calibrated)
SPOTS = ((-0.21, -0.42), (0.0, -0.44), (0.21, -0.42), (-0.1, -0.6), (0.1, -0.6), (-0.27, -0.62), (0.27, -0.62))


def scene_camera() -> tuple[CameraSpec, CameraModel]:
    """The fixed scene camera of config/sim.yaml, and the same camera as perception models it."""
    spec = CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])
    rotation, eye = spec.pose()
    return spec, CameraModel.from_pose(spec.K, spec.width, spec.height, eye, quaternion_from_matrix(rotation))


def cup_looks(world: TabletopWorld, objects: list[ObjectSpec], embedder: Any,
              config: PerceptionConfig | None = None) -> dict[str, np.ndarray]:
    """Render ``objects`` on the table and describe each as perception/describe_object does: by name."""
    spec, camera = scene_camera()
    cfg = config or PerceptionConfig.load("perception")
    if "cup" not in cfg.queries:
        cfg = replace(cfg, queries=(*cfg.queries, "cup"))
    perception = Perception(cfg)
    world.reset(SceneSpec(tuple(objects)))
    image = world.render(spec)
    labels = {s.body_id: {"category": s.category, "color": s.color, "name": s.name} for s in world.objects()}
    frame = Frame(image.rgb, image.depth, image.segmentation, labels, 1.0)  # the detector reads the segmentation
    perception.update(frame, camera)
    crop_frame = Frame(image.rgb, image.depth)  # the crop does not: box and depth only
    looks = {}
    for track in perception.scene.objects():
        anchor = category_of(track.label, cfg).anchor
        bounds = ObjectBounds.of(track.position, track.size, track.yaw, anchor)
        looks[track.name] = embedder.embed(*object_crop(crop_frame, camera, bounds, track.box))
    return looks


def threshold_between(same: list[float], other: list[float]) -> tuple[float, int]:
    """The threshold with the fewest errors (same-pose pairs below it, other-pose pairs at or above it), the
    middle of the widest such gap; and its error count."""
    values = sorted(set(same) | set(other))
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(values)] or values
    best = min(candidates, key=lambda t: (sum(s < t for s in same) + sum(o >= t for o in other),
                                          -min([abs(t - v) for v in values])))
    return best, sum(s < best for s in same) + sum(o >= best for o in other)


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
    result = {"descriptor": embedder.name, "samples": len(samples), "same_pose": summary(same), "other_pose": summary(other),
              "other_pose_same_colour": summary(other_same_colour), "threshold": round(threshold, 3), "threshold_errors": errors,
              "pairs": len(same) + len(other), "nearest_pose_accuracy": hits / trials if trials else 0.0, "trials": trials,
              "proposed_config_key": "knowledge.descriptor.match_threshold", "seed": args.seed,
              "spots": sorted(used),
              "camera": "config/sim.yaml camera (the fixed scene camera)", "colours": list(args.colours)}
    for key in ("same_pose", "other_pose", "other_pose_same_colour"):
        print(f"{key:24s} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in result[key].items()))
    print(f"threshold {threshold:.3f} ({errors} of {result['pairs']} pairs on the wrong side); nearest look picks the pose in "
          f"{hits}/{trials} = {result['nearest_pose_accuracy']:.3f} with colour the distractor ({embedder.name})")
    print(f"proposed: knowledge.descriptor.match_threshold: {threshold:.2f}  # tools/calibrate_looks.py --places {args.places} "
          f"--yaws {args.yaws} --seed {args.seed}: {len(samples)} cups, {result['pairs']} pairs; replaces "
          "retrieval.visual_threshold for this descriptor version")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
