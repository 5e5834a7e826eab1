"""DROC's visual case (Issue 29 item 4): an upright and a flipped cup, with colour as the distractor.

Mesh cups (teachbot.sim.cup) of two colours stand upright or flipped on the tabletop of the real simulator
(TabletopWorld); the fixed scene camera of config/sim.yaml renders them; perception finds them (the
sim_ground_truth detector's boxes, localised and tracked) and each is cut out as perception/describe_object
cuts it (box and depth, no segmentation ids) and described by the descriptor of config/knowledge.yaml. The
stored looks come from other scenes than the queries, at other places and yaws (none of the places of
tools/calibrate_looks.py). The nearest stored look must have the query's pose even when the other pose has the
query's colour.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from teachbot.knowledge.object_crop import knowledge_settings
from teachbot.sim.cup import FLIPPED, POSES, UPRIGHT
from teachbot.world.scene import ObjectSpec, SceneSpec, scene_from_yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from calibrate_looks import SPOTS, cup_looks  # noqa: E402

# places the calibration never used, spaced so that no cup hides another from the camera
PLACES = ((-0.2, -0.48), (0.2, -0.48), (0.0, -0.66), (-0.3, -0.62), (0.3, -0.62))
COLOURS = ("red", "blue")


def test_the_places_are_held_out() -> None:
    assert not set(PLACES) & set(SPOTS)


@pytest.fixture(scope="module")
def looks(world) -> list[tuple[int, str, str, np.ndarray]]:
    """(scene, pose, colour, descriptor) of every cup of four scenes: each kind at another place, turned at random."""
    _, embedder = knowledge_settings()
    rng = np.random.default_rng(29)
    kinds = list(itertools.product(POSES, COLOURS))
    out = []
    for scene in range(4):
        places = [PLACES[(scene + k) % len(PLACES)] for k in range(len(kinds))]
        objects = [ObjectSpec(f"{colour} {pose} cup", "cup", colour, place, float(rng.uniform(-math.pi, math.pi)), pose)
                   for (pose, colour), place in zip(kinds, places)]
        described = cup_looks(world, objects, embedder)
        assert sorted(described) == sorted(o.name for o in objects), f"scene {scene}: perception saw {sorted(described)}"
        for o in objects:
            assert world.cup_pose(o.name) == o.pose  # it stands as it was put
            out.append((scene, o.pose, o.color, described[o.name]))
    return out


def test_the_nearest_stored_look_has_the_pose_not_the_colour(looks) -> None:
    _, embedder = knowledge_settings()
    hits = trials = 0
    for scene, pose, colour, vector in looks:
        # stored from other scenes: the query's pose in the other colour, and the other pose in the query's colour
        right = [v for s, p, c, v in looks if s != scene and p == pose and c != colour]
        wrong = [v for s, p, c, v in looks if s != scene and p != pose and c == colour]
        for good, bad in itertools.product(right, wrong):
            trials += 1
            hits += embedder.similarity(vector, good) > embedder.similarity(vector, bad)
    accuracy = hits / trials
    print(f"upright/flipped nearest-look accuracy, colour the distractor: {hits}/{trials} = {accuracy:.3f} ({embedder.name})")
    assert trials == 4 * 4 * 3 * 3  # 16 queries, 3 other scenes on each side
    assert accuracy >= 0.95, f"{hits}/{trials}"


def test_a_flipped_cup_is_no_upright_cup_of_its_colour(looks) -> None:
    """The same comparison as a store would make it: among one stored look of each kind from another scene, the
    best for each query is its own pose (its colour too when it is there); the other pose scores lower."""
    _, embedder = knowledge_settings()
    stored = {(p, c): v for s, p, c, v in looks if s == 0}
    for scene, pose, colour, vector in looks:
        if scene == 0:
            continue
        scores = {kind: embedder.similarity(vector, v) for kind, v in stored.items()}
        assert max(scores, key=scores.get) == (pose, colour), scores
        other_pose = FLIPPED if pose == UPRIGHT else UPRIGHT
        assert scores[(pose, next(c for c in COLOURS if c != colour))] > scores[(other_pose, colour)], scores


def test_cups_in_scene_files() -> None:
    spec = scene_from_yaml("objects:\n  - {category: cup, color: red, position: [0.1, -0.5], pose: flipped}\n"
                           "  - {category: cup, color: blue, position: [-0.1, -0.5]}\n")
    assert [(o.name, o.pose) for o in spec.objects] == [("red cup", "flipped"), ("blue cup", "upright")]
    assert scene_from_yaml(spec.to_yaml()) == SceneSpec(spec.objects)
    with pytest.raises(Exception, match="only a cup may be flipped"):
        scene_from_yaml("objects:\n  - {category: block, color: red, position: [0.1, -0.5], pose: flipped}\n")
