"""DROC's visual case in its evaluation: an upright and a flipped cup, colour as the distractor.

In the paper (its "Hang cup on rack" task) an upright and a flipped cup need different handling, so the
knowledge taught on one must come back for a cup in the same pose, not for the other pose, whatever the
colour. Here, per trial: mesh cups (teachbot.sim.cup) stand on the tabletop of the real simulator
(TabletopWorld) and the fixed scene camera of config/sim.yaml renders them; perception finds them (the
detector's boxes, localised and tracked; ``cup`` is one of config/perception.yaml's classes) and each is cut
out by box and depth (``droc_worlds.tabletop_crops``: teachbot.knowledge.object_crop, no segmentation ids) and
described by the descriptor of config/knowledge.yaml, as ``perception/describe_object`` does. One teaching
scene stores two entries in a knowledge store of their own, the same task and object words ("hang the cup on
the rack", "cup"), one with the look of an upright cup of colour A, one with that of a flipped cup of colour
B. The query scenes put an upright cup of colour B and a flipped cup of colour A (the other pose's colour) at
other places and yaws; each query retrieves through ``KnowledgeRetriever`` with its crop's vector, and counts
as right when the first object entry returned is its pose's (nothing returned, or the other pose's entry
first, is wrong). Without images (``no_visual``) the same queries retrieve by the words only: the two entries
tie, so it can only be right for one pose.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from teachbot.evaluation.droc_worlds import scene_camera, tabletop_crops
from teachbot.knowledge import KnowledgeConfig, KnowledgeEntry, KnowledgeRetriever, KnowledgeStore
from teachbot.perception.config import PerceptionConfig
from teachbot.robot_profile import RobotProfile
from teachbot.sim.cup import FLIPPED, UPRIGHT
from teachbot.sim.world import TabletopWorld
from teachbot.world.scene import ObjectSpec, SceneSpec

__all__ = ["cup_looks", "scene_camera", "upright_flipped"]  # scene_camera: its home is droc_worlds, named here too

TASK, OBJECT = "hang the cup on the rack", "cup"
TEXTS = {UPRIGHT: "The upright cup is grasped by its rim from above and hung by its handle side.",
         FLIPPED: "The flipped cup is turned over first, then grasped by its rim and hung."}
COLOURS = ("red", "blue", "green", "yellow")
# places none of tools/calibrate_looks.py's spots (held out), spaced so that no cup hides another from the camera
PLACES = ((-0.2, -0.48), (0.2, -0.48), (0.0, -0.66), (-0.3, -0.62), (0.3, -0.62))
QUERY_SCENES = 4


def cup_looks(world: TabletopWorld, objects: Sequence[ObjectSpec], embedder: Any,
              config: PerceptionConfig | None = None) -> dict[str, np.ndarray]:
    """Render ``objects`` on the table and describe each as perception/describe_object does, by name: the
    crops of :func:`teachbot.evaluation.droc_worlds.tabletop_crops` (detector's box and depth) embedded."""
    world.reset(SceneSpec(tuple(objects)))
    return {name: embedder.embed(crop.rgb, crop.depth, crop.mask) for name, crop in tabletop_crops(world, config).items()}


def upright_flipped(seed: int, text_embedder: Any, descriptor: Any, config: KnowledgeConfig | None = None) -> dict[str, Any]:
    """One trial of the upright/flipped retrieval (see the module docstring): its counts and every query."""
    rng = np.random.default_rng(2900 + seed)
    first, second = (COLOURS[int(i)] for i in rng.choice(len(COLOURS), 2, replace=False))
    taught = {UPRIGHT: first, FLIPPED: second}
    asked = {UPRIGHT: second, FLIPPED: first}  # each pose in the other pose's colour

    def cups(kinds: dict[str, str], places: Sequence[tuple[float, float]]) -> list[ObjectSpec]:
        return [ObjectSpec(f"{colour} {pose} cup", "cup", colour, place, float(rng.uniform(-math.pi, math.pi)), pose)
                for (pose, colour), place in zip(kinds.items(), places)]

    world = TabletopWorld(RobotProfile.load("panda_sim"))
    queries = []
    try:
        teach = cups(taught, PLACES[:2])
        seen = cup_looks(world, teach, descriptor)
        with tempfile.TemporaryDirectory(prefix="droc-looks-") as tmp:
            store = KnowledgeStore(tmp)
            ids = {}
            for spec in teach:
                if spec.name not in seen:
                    raise RuntimeError(f"perception did not see the taught {spec.name}")
                ids[store.add(KnowledgeEntry(kind="object_info", text=TEXTS[spec.pose], task=TASK, object=OBJECT, scope="object",
                                             image_embedding=tuple(float(v) for v in seen[spec.name]),
                                             image_model=descriptor.name))] = spec.pose
            retriever = KnowledgeRetriever(store, text_embedder, descriptor, config or KnowledgeConfig.load())
            for scene in range(QUERY_SCENES):
                places = [PLACES[(2 + scene + k) % len(PLACES)] for k in range(2)]
                asking = cups(asked, places)
                looks = cup_looks(world, asking, descriptor)
                for spec in asking:
                    vector = looks.get(spec.name)
                    with_looks = _first_pose(retriever.retrieve(TASK, OBJECT, vector), ids) if vector is not None else ""
                    by_words = _first_pose(retriever.retrieve(TASK, OBJECT, None), ids)
                    queries.append({"scene": scene, "pose": spec.pose, "colour": spec.color, "seen": vector is not None,
                                    "retrieved": with_looks, "no_visual": by_words})
    finally:
        world.close()
    hits = sum(q["retrieved"] == q["pose"] for q in queries)
    words = sum(q["no_visual"] == q["pose"] for q in queries)
    return {"trial": seed, "descriptor": descriptor.name, "taught": taught, "queries": len(queries), "hits": hits,
            "accuracy": hits / len(queries), "no_visual_hits": words, "no_visual_accuracy": words / len(queries),
            "per_query": queries}


def _first_pose(found: Sequence[Any], ids: dict[str, str]) -> str:
    """The pose of the first retrieved entry that is one of ``ids``' ('' when none came back)."""
    return next((ids[r.entry.id] for r in found if r.entry.id in ids), "")
