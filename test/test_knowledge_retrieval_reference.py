"""Knowledge retrieval (teachbot.knowledge.retriever) against a plain per-entry reference of its rules.

The retriever works on arrays (key vectors in one matrix, image vectors in another, object words in an
index, cached per store version) for speed (bench/knowledge.py); these tests pin WHAT it retrieves: for
random stores and random queries, the same entries, reasons, order and scores as :func:`reference`, a
direct transcription of the module docstring's rules, one entry at a time. Random stores mix every kind
and scope, objects of one or two words, skill parameters learned in a task (their tasks compared with the
objects' names masked), image vectors of the query's embedder, of another one and none, and equal
creation times (the tie-break by id). The sentence and image vectors are continuous (sums of random word
and look vectors), so no score sits on a threshold by accident.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from teachbot.knowledge import (
    DEFAULT_SCOPE,
    ColourDepthDescriptor,
    KnowledgeConfig,
    KnowledgeEntry,
    KnowledgeRetriever,
    KnowledgeStore,
    Provenance,
)
from teachbot.knowledge.descriptor import cosine
from teachbot.knowledge.retriever import OBJECT_KINDS, RetrievedKnowledge, action_text, mask_object

VERBS = ["put", "move", "bring", "pick up", "open", "wipe"]
COLOURS = ["red", "blue", "green", "brown"]
THINGS = ["cup", "bowl", "coaster", "drawer", "sponge"]
PLACES = ["on the shelf", "in the sink", "on the table", "into the box"]
LOOKS = 6  # distinct looks; an object's image vector is its look's plus noise


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


class WordVectors:
    """A sentence embedder stand-in: the normalised sum of a fixed random vector per word (texts sharing words
    are alike, and no two similarities tie by accident). Records what it was asked to embed."""

    name = "word-vectors-48"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = np.zeros((len(texts), 48), dtype=np.float32)
        for row, text in zip(rows, texts):
            for word in text.lower().replace(".", " ").split():
                row += np.random.default_rng(_seed(word)).normal(size=48).astype(np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms > 0, norms, 1.0)


class CosineLooks:
    """An image embedder stand-in with the cosine metric (as CLIP's); vectors are given, never computed."""

    name = "cosine-looks-24"
    metric = "cosine"

    def embed(self, rgb: Any, depth: Any = None, mask: Any = None) -> np.ndarray:  # noqa: ARG002 - the protocol's signature
        raise NotImplementedError

    def similarity(self, a: Any, b: Any) -> float:
        return cosine(a, b)


class OtherMetric(CosineLooks):
    """An embedder whose metric the retriever has no vectorised form for: its own ``similarity`` per entry."""

    name = "other-metric-24"
    metric = "manhattan"

    def similarity(self, a: Any, b: Any) -> float:
        return float(1.0 / (1.0 + np.abs(np.asarray(a, float) - np.asarray(b, float)).sum()))


def look_vector(embedder: Any, look: int, rng: np.random.Generator) -> np.ndarray:
    size = 56 if isinstance(embedder, ColourDepthDescriptor) else 24
    base = np.random.default_rng(1000 + look).random(size) ** 3
    vector = base + rng.random(size) * 0.25
    if isinstance(embedder, ColourDepthDescriptor):
        return vector / vector.sum()
    return vector - vector.mean() * 0.5


def random_entry(n: int, rng: random.Random, nrng: np.random.Generator, embedder: Any, start: datetime) -> KnowledgeEntry:
    kind = rng.choice(["constraint", "preference", "robot_constraint", "skill_parameter", "skill_parameter", "object_info",
                       "object_state"])
    thing = f"{rng.choice(COLOURS)} {rng.choice(THINGS)}" if rng.random() < 0.7 else rng.choice(THINGS)
    task = f"{rng.choice(VERBS)} the {thing} {rng.choice(PLACES)}" if rng.random() < 0.85 else ""
    scope = rng.choice(["", "", "object", "task", "always"] if kind != "skill_parameter" else ["", "object", "object", "task"])
    extra: dict[str, Any] = {"skill": "grasp", "parameters": {"grasp_height_offset": round(rng.uniform(-0.01, 0.02), 3)}} \
        if kind == "skill_parameter" else {}
    image: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.7:
        image = {"image_embedding": look_vector(embedder, rng.randrange(LOOKS), nrng), "image_model": embedder.name}
    elif roll < 0.8:
        image = {"image_embedding": [0.5] * 8, "image_model": "another-model"}
    created = start + timedelta(seconds=rng.randrange(40))  # many equal times: the id breaks the tie
    return KnowledgeEntry(id=f"e{n:04d}-{rng.randrange(10**6):06d}", kind=kind, scope=scope,
                          text=f"{rng.choice(['Careful with', 'Remember'])} the {thing} {rng.choice(PLACES)}.",
                          task=task, object=thing if rng.random() < 0.9 or (scope or DEFAULT_SCOPE[kind]) == "object" and not image else "",
                          **extra, **image,
                          provenance=Provenance(created=created.isoformat(timespec="milliseconds")))


# ---------------------------------------------------------------------------------------------- the reference
def _words(text: str) -> set[str]:
    import re

    return set(re.findall(r"[a-z0-9]+", text.casefold()))


def _cos(embedder: WordVectors, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b]).astype(np.float64)
    return float(va @ vb)


def reference(entries: Sequence[KnowledgeEntry], text_embedder: WordVectors, image_embedder: Any, config: KnowledgeConfig,
              task: str, object_name: str = "", image: Any = None) -> list[tuple[str, str, float, float | None, float]]:
    """(id, reason, text score, visual score, score) of what the retriever should return, one entry at a time."""
    metric = getattr(image_embedder, "metric", "")
    threshold = config.learned_visual_threshold if metric == "cosine" else config.visual_threshold
    always = sorted((e for e in entries if e.scope == "always"), key=lambda e: (e.created, e.id))
    out: list[tuple[str, str, float, float | None, float]] = [(e.id, "always", 0.0, None, 1.0) for e in always]
    name_words = _words(object_name)
    found = []
    for e in (e for e in entries if e.scope != "always"):
        text = max((_cos(text_embedder, task, key) for key in e.keys), default=0.0) if task.strip() else 0.0
        action = 1.0
        if task.strip() and object_name.strip() and e.kind == "skill_parameter" and e.task.strip():
            action = _cos(text_embedder, mask_object(task, object_name), action_text(e))
        visual = None
        about_object = e.scope == "object" or e.kind in OBJECT_KINDS
        if (image is not None and image_embedder is not None and about_object and e.image_embedding is not None
                and e.image_model == image_embedder.name):
            visual = image_embedder.similarity(image, e.image_embedding)
        keep = text >= config.text_threshold
        if visual is not None:
            keep = keep or (e.scope == "object" and action >= config.text_threshold)
            keep = keep and not visual < threshold
        own = _words(e.object)
        if e.scope == "object" and own and own <= name_words and not (visual is not None and visual < threshold):
            keep = True
        if keep:
            w = config.visual_weight if visual is not None else 0.0
            score = (1 - w) * text + w * (visual or 0.0)
            found.append((e, "task" if text >= config.text_threshold else "object", text, visual, score))
    found.sort(key=lambda f: (-f[4], f[0].created, f[0].id))
    return out + [(e.id, reason, text, visual, score) for e, reason, text, visual, score in found[: config.k]]


def as_rows(found: Sequence[RetrievedKnowledge]) -> list[tuple[str, str, float, float | None, float]]:
    return [(r.entry.id, r.reason, 0.0 if r.reason == "always" else r.text_score, r.visual_score, r.score) for r in found]


def assert_same(got: list, want: list, query: Any) -> None:
    assert [(i, reason) for i, reason, *_ in got] == [(i, reason) for i, reason, *_ in want], query
    for (_, _, text, visual, score), (_, _, text2, visual2, score2) in zip(got, want):
        assert text == pytest.approx(text2, abs=1e-5) and score == pytest.approx(score2, abs=1e-5), query
        assert (visual is None) == (visual2 is None) and (visual is None or visual == pytest.approx(visual2, abs=1e-6)), query


def random_query(rng: random.Random, nrng: np.random.Generator, embedder: Any, entries: Sequence[KnowledgeEntry]) -> tuple:
    thing = f"{rng.choice(COLOURS)} {rng.choice(THINGS)}" if rng.random() < 0.7 else rng.choice(THINGS)
    task = rng.choice([f"{rng.choice(VERBS)} the {thing} {rng.choice(PLACES)}", f"please {rng.choice(VERBS)} the {thing}", "",
                       "tell me a joke"])
    name = rng.choice([thing, thing, "", f"the {thing}", "square drink mat"])
    roll = rng.random()
    if roll < 0.3:
        image = None
    elif roll < 0.5:
        own = [e for e in entries if e.image_model == embedder.name]
        image = np.asarray(rng.choice(own).image_embedding) if own else None
    else:
        image = look_vector(embedder, rng.randrange(LOOKS), nrng)
    return task, name, image


# ---------------------------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("embedder", [ColourDepthDescriptor(), CosineLooks(), OtherMetric(), None],
                         ids=["intersection", "cosine", "own-similarity", "no-images"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_retrieval_matches_the_per_entry_reference(tmp_path: Path, embedder: Any, seed: int) -> None:
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    looks = embedder or CosineLooks()
    store = KnowledgeStore(tmp_path / "k")
    for n in range(150):
        store.add(random_entry(n, rng, nrng, looks, start))
    config = KnowledgeConfig(k=rng.choice([3, 8, 40]), text_threshold=0.45, visual_threshold=0.55,
                             learned_visual_threshold=0.75 if embedder is None or embedder.metric == "cosine" else 0.3,
                             visual_weight=0.4)
    if isinstance(embedder, OtherMetric):
        config = KnowledgeConfig(k=config.k, text_threshold=0.45, visual_threshold=0.3, visual_weight=0.4)
    words = WordVectors()
    retriever = KnowledgeRetriever(store, words, embedder, config)
    checked = 0
    for round_ in range(3):  # the store changes between rounds: the cached arrays must follow
        entries = store.list()
        for _ in range(25):
            task, name, image = random_query(rng, nrng, looks, entries)
            got = as_rows(retriever.retrieve(task, name, image))
            assert_same(got, reference(entries, WordVectors(), embedder, config, task, name, image), (task, name, image is None))
            checked += len(got)
        for gone in rng.sample(entries, 10):
            store.remove(gone.id)
        for n in range(10):
            store.add(random_entry(1000 * (round_ + 1) + n, rng, nrng, looks, start))
    assert checked > 200  # the queries brought back entries, not only empty lists


def test_the_masked_task_is_embedded_only_when_an_entry_can_use_it(tmp_path: Path) -> None:
    """A skill parameter learned in a task transfers to a look-alike object only for the same kind of task (its
    task compared with the objects' names masked); without such an entry the masked task is not embedded."""
    looks = ColourDepthDescriptor()
    nrng = np.random.default_rng(0)
    mat = look_vector(looks, 0, nrng)
    store = KnowledgeStore(tmp_path / "k")
    store.add(KnowledgeEntry(id="about", kind="object_info", text="The coaster is thin.", object="brown coaster",
                             image_embedding=mat, image_model=looks.name))
    store.add(KnowledgeEntry(id="lower", kind="skill_parameter", scope="task", text="Grasp it lower.", task="pick up the brown coaster",
                             object="brown coaster", skill="grasp", parameters={"grasp_height_offset": -0.003},
                             image_embedding=mat, image_model=looks.name))
    words = WordVectors()
    retriever = KnowledgeRetriever(store, words, looks, KnowledgeConfig(text_threshold=0.8, visual_threshold=0.5))
    retriever.retrieve("warm up", "cup")
    words.calls.clear()
    found = retriever.retrieve("pick up the square drink mat", "square drink mat", mat)
    assert words.calls == [["pick up the square drink mat"]]  # no object-scoped skill parameter: one text
    assert [r.entry.id for r in found] == ["about"]
    store.add(KnowledgeEntry(id="lower-here", kind="skill_parameter", scope="object", text="Grasp it lower.",
                             task="pick up the brown coaster", object="brown coaster", skill="grasp",
                             parameters={"grasp_height_offset": -0.003}, image_embedding=mat, image_model=looks.name))
    words.calls.clear()
    found = retriever.retrieve("pick up the square drink mat", "square drink mat", mat)
    assert words.calls == [["pick up the square drink mat", "pick up the object"]]  # now the masked task counts
    assert sorted(r.entry.id for r in found) == ["about", "lower-here"]
    words.calls.clear()
    retriever.retrieve("pick up the square drink mat", "square drink mat")  # no image: looks cannot bring it
    assert words.calls == [["pick up the square drink mat"]]
