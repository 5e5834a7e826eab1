"""The one learner (teachbot.learning.learner): the same object behind the improvement node, the evaluations
and the soak bench. Here with stores in this process and a stand-in chain and extractor."""

from __future__ import annotations

import time
from types import SimpleNamespace

from teachbot.errors import MemoryStoreError
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.learning.call import LearnRequest
from teachbot.learning.improver import Lesson
from teachbot.learning.learner import NO_STORE, Learner, MemoryLessons, StoreKnowledge

TRANSCRIPT = ">>> wait_for_trigger()\n'put the cube in the bowl'\n>>> put_first_on_second('cube', 'bowl')\n'success'\n"
GOOD = Lesson(True, "Put cubes in bowls.", problem="p", improvement="Put cubes in bowls.", scope="tabletop",
              transcript=TRANSCRIPT)


class Chain:
    def __init__(self, lesson: Lesson) -> None:
        self.lesson, self.model, self.calls = lesson, SimpleNamespace(name="improvement:stand-in"), []

    def learn(self, transcript, **kwargs):
        self.calls.append(kwargs)
        return self.lesson


class Memory:
    def __init__(self, fail: str = "") -> None:
        self.added, self.fail = [], fail

    def add(self, example):
        if self.fail:
            raise MemoryStoreError(self.fail)
        self.added.append(example)
        return f"ex-{len(self.added)}"


class Extractor:
    def __init__(self, texts: list[str]) -> None:
        self.texts, self.calls = texts, 0

    def extract(self, transcript, **kwargs):
        self.calls += 1
        return [KnowledgeEntry(kind="preference", text=t, scope="task") for t in self.texts]


class Knowledge:
    def __init__(self) -> None:
        self.entries = []

    def add(self, entry):
        self.entries.append(entry)
        return f"k-{len(self.entries)}"


def request(seconds: float = 60.0, **fields) -> LearnRequest:
    return LearnRequest("tabletop", "ep1", TRANSCRIPT, ("cube", "bowl"), time.time() + seconds, **fields)


def learner(lesson: Lesson = GOOD, memory: Memory | None = None, extractor: Extractor | None = None,
            knowledge: Knowledge | None = None, margin: float = 2.0) -> Learner:
    chain = Chain(lesson)
    return Learner(lambda _profile: chain, MemoryLessons(memory) if memory is not None else None,
                   extractor=(lambda _p: extractor) if extractor else None,
                   knowledge=StoreKnowledge(knowledge) if knowledge is not None else None, store_margin=margin)


def test_a_lesson_is_stored_with_its_provenance():
    memory = Memory()
    reply = learner(memory=memory).improve(request(), timeout=60)
    assert reply.stored and reply.example_id == "ex-1" and reply.message == "Put cubes in bowls."
    example = memory.added[0]
    assert (example.source, example.episode_id, example.author_model) == ("learned", "ep1", "improvement:stand-in")
    assert example.instructions == ("put the cube in the bowl",) and example.created
    assert reply.lesson.id == "ex-1"


def test_a_candidate_is_handed_back_and_nothing_is_stored():
    memory, knowledge = Memory(), Knowledge()
    reply = learner(memory=memory, extractor=Extractor(["Cubes go in bowls."]), knowledge=knowledge).improve(
        request(store=False), timeout=60)
    assert not reply.stored and reply.lesson is not None and reply.lesson.improvement == "Put cubes in bowls."
    assert memory.added == [] and knowledge.entries == []


def test_nothing_is_stored_inside_the_store_margin():
    memory = Memory()
    reply = learner(memory=memory, margin=5.0).improve(request(seconds=3.0), timeout=60)
    assert not reply.stored and "nothing was stored" in reply.message and memory.added == []


def test_a_past_deadline_runs_no_chain():
    one = learner(memory=Memory())
    reply = one.improve(request(seconds=-1.0), timeout=60)
    assert not reply.stored and "deadline had passed" in reply.message
    assert one.improver("tabletop").calls == []


def test_a_refused_lesson_still_distils_and_says_so():
    knowledge = Knowledge()
    reply = learner(Lesson(False, "no problem found"), memory=Memory(), extractor=Extractor(["Cubes go in bowls."]),
                    knowledge=knowledge).improve(request(), timeout=60)
    assert not reply.stored and reply.message == "no problem found"
    assert reply.knowledge == ("Cubes go in bowls.",) and len(knowledge.entries) == 1


def test_a_store_that_fails_is_reported():
    reply = learner(memory=Memory(fail="disk full")).improve(request(), timeout=60)
    assert not reply.stored and reply.message == "the lesson could not be stored: disk full"


def test_distillation_alone():
    knowledge, extractor = Knowledge(), Extractor(["Cubes go in bowls.", "Hold cups by the handle."])
    reply = learner(extractor=extractor, knowledge=knowledge).distill(request(), timeout=60)
    assert reply.stored and reply.knowledge == ("Cubes go in bowls.", "Hold cups by the handle.")
    assert reply.message.startswith("learned: ")
    off = learner().distill(request(), timeout=60)
    assert not off.stored and "no knowledge extractor" in off.message
    nowhere = learner(extractor=extractor).distill(request(), timeout=60)
    assert not nowhere.stored and nowhere.message == NO_STORE and extractor.calls == 1  # no model call without a store


def test_a_confirmed_lesson_is_stored():
    memory = Memory()
    candidate = learner(memory=memory).improve(request(store=False), timeout=60).lesson
    reply = learner(memory=memory).store(candidate, timeout=60)
    assert reply.stored and reply.example_id == "ex-1" and memory.added == [candidate]
