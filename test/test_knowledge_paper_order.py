"""DROC's retrieval order (Issue 29 item 3; teachbot.knowledge.paper_retrieval): preferences and robot
constraints always, then the LLM picks the previous tasks of the request's category, then the task knowledge
of those tasks and the single best visual match among their entries about an object.

The selection model here is the DROC evaluation's stand-in (evaluation.droc_select_double), which answers the
paper's prompt from that prompt alone; the sentence embedder a bag of words; the "looks" short vectors under
the classic descriptor's histogram intersection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from teachbot.evaluation.droc_doubles import Understanding
from teachbot.evaluation.droc_select_double import SelectionDouble, category
from teachbot.knowledge import ColourDepthDescriptor, KnowledgeConfig, KnowledgeEntry, KnowledgeRetriever, KnowledgeStore
from teachbot.knowledge.entry import Provenance
from teachbot.knowledge.paper_retrieval import parse_tasks, previous_tasks
from teachbot.llm.scripted import ScriptedModel


class Words:
    """Hashed counts of content words: texts sharing words are similar."""

    name = "words-64"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in zip(rows, texts):
            for word in set(text.lower().replace(".", " ").split()) - {"the", "a", "on", "me", "my"}:
                row[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % 64] += 1.0
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


DESCRIPTOR = ColourDepthDescriptor()  # its histogram intersection compares the short vectors below
LOOK = {"coaster": (8.0, 1.0, 1.0, 0.0), "mat": (7.0, 2.0, 1.0, 0.0), "jar": (0.0, 1.0, 2.0, 7.0), "cup": (0.0, 7.0, 3.0, 0.0)}


def at(second: int) -> Provenance:
    return Provenance(created=f"2026-01-01T00:00:0{second}Z")


def store_with(tmp_path) -> KnowledgeStore:
    store = KnowledgeStore(tmp_path)  # created one second apart: the order tasks are listed in is the order they were learned
    store.add(KnowledgeEntry(id="pref", kind="preference", text="The person wants things handed over on the left.", provenance=at(1)))
    store.add(KnowledgeEntry(id="coaster", kind="skill_parameter", text="Grasp the brown coaster lower.", task="pick up the brown coaster",
                             object="brown coaster", skill="grasp", parameters={"grasp_height_offset": -0.003},
                             image_embedding=LOOK["coaster"], image_model=DESCRIPTOR.name, provenance=at(2)))
    store.add(KnowledgeEntry(id="jar", kind="skill_parameter", text="Grasp the red spice jar narrower.", task="pick up the red spice jar",
                             object="red spice jar", skill="grasp", parameters={"gripper_width": 0.06},
                             image_embedding=LOOK["jar"], image_model=DESCRIPTOR.name, provenance=at(3)))
    store.add(KnowledgeEntry(id="drawer", kind="skill_parameter", text="Open the cupboard less far.", task="open the cupboard",
                             object="cupboard", skill="open", parameters={"pull_distance": 0.22}, provenance=at(4)))
    store.add(KnowledgeEntry(id="mine", kind="constraint", text="When the person says 'bring me my cup', they mean the blue cup.",
                             task="bring me my cup", provenance=at(5)))
    return store


@pytest.fixture
def retriever(tmp_path):
    config = KnowledgeConfig(order="paper", select_enabled=True, visual_threshold=0.7)
    return KnowledgeRetriever(store_with(tmp_path), Words(), DESCRIPTOR, config, select_model=SelectionDouble())


def ids(found) -> list[str]:
    return [r.entry.id for r in found]


def test_the_tasks_of_the_category_then_the_best_visual_match(retriever) -> None:
    # the mat looks like the coaster: of the two "pick up" tasks' entries only the best visual match comes back
    assert ids(retriever.retrieve("pick up the square drink mat", "square drink mat", np.asarray(LOOK["mat"]))) == ["pref", "coaster"]
    assert '2: [1, 2]' in retriever.last_selection  # the model picked both "pick up" tasks, nothing else
    # a cup looks like neither: the task's category is chosen, no entry about an object passes the looks
    assert ids(retriever.retrieve("pick up the blue cup", "blue cup", np.asarray(LOOK["cup"]))) == ["pref"]
    # a constraint of the chosen task comes back whatever object is at hand; another category's does not
    assert ids(retriever.retrieve("bring me my cup", "blue cup", np.asarray(LOOK["cup"]))) == ["pref", "mine"]
    assert ids(retriever.retrieve("open the fridge", "fridge")) == ["pref"]  # no image, not named: nothing about the cupboard
    assert ids(retriever.retrieve("open the cupboard", "cupboard")) == ["pref", "drawer"]  # named


def test_a_misreading_selection_model_and_an_unreadable_answer(tmp_path) -> None:
    config = KnowledgeConfig(order="paper", select_enabled=True, visual_threshold=0.7)
    wrong = KnowledgeRetriever(store_with(tmp_path / "a"), Words(), DESCRIPTOR, config, select_model=SelectionDouble(Understanding(1.0)))
    # every judgement the other way round: the "pick up" tasks left out, the others taken
    assert ids(wrong.retrieve("pick up the square drink mat", "square drink mat", np.asarray(LOOK["mat"]))) == ["pref", "mine"]
    garbled = KnowledgeRetriever(store_with(tmp_path / "b"), Words(), DESCRIPTOR, config,
                                 select_model=ScriptedModel(respond=lambda prompt: "I am not sure."))
    found = garbled.retrieve("pick up the square drink mat", "square drink mat", np.asarray(LOOK["mat"]))
    assert ids(found) == ["pref", "coaster"]  # unreadable: the tasks by text similarity instead


def test_the_prompt_and_its_answers() -> None:
    assert category("Pick up the spoon.") == "pick up" and category("open the top drawer") == "open"
    assert category("bring me my cup") == "bring me" and category("put the mug on the shelf") == "put"
    double = SelectionDouble()
    prompt = ("Previous tasks: 1. Open the top drawer. 2. Pick up the scissors.\nNew task: Pick up the spoon.\n"
              "Response:\n1: \"Yes\", 2: [2]\n\n"
              "Previous tasks: 1. open the cupboard. 2. pick up the brown coaster. 3. put the red mug on the table.\n"
              "New task: put the glass on the table.\nResponse:\n")
    assert double.answer(prompt) == '1: "Yes", 2: [3]'  # the last listing, not the example's
    assert parse_tasks('1: "Yes", 2: [2, 4]', 4) == [1, 3] and parse_tasks('1: "No"', 4) == [] and parse_tasks("hm", 4) is None
    entries = [KnowledgeEntry(id=str(i), kind="constraint", text="x", task=t) for i, t in enumerate(["a b", "A  B", "c"])]
    assert previous_tasks(entries) == ["a b", "c"]
    with pytest.raises(Exception, match="retrieval.order"):
        KnowledgeConfig.from_mapping({"knowledge": {"retrieval": {"order": "random"}}})
