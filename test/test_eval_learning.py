"""Learning proven by stand-ins that read only their prompt (issue 27, item 6).

The reader (the robot's interaction model) is told nothing but its prompt: no task, no plan, no variant. It holds a
seeded misconception (it mixes up some named places when it must write them itself), fixes the table only from the
words of the person's correction, and imitates the example of its prompt most like the request. The tutor (the
improvement model) writes the lesson from the transcript its prompts show. With the shipped seeds: ours gets better
over the runs of a template, ours-no-learning does not, ours-no-improve (the raw interaction stored) does worse than
ours; at k = 4 among distractor lessons the right lesson is retrieved, and the reader follows it.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from timing import pytest_timeout

from teachbot.console.prompt import PromptBuilder
from teachbot.evaluation.harness import UNBOUND, AgentModels
from teachbot.evaluation.metrics import read_results
from teachbot.evaluation.person import PersonConfig
from teachbot.evaluation.reading_doubles import (
    PLACES,
    ReaderModel,
    ReaderProgramModel,
    TutorModel,
    confusions,
    moves,
    wanted,
)
from teachbot.evaluation.sweep import SweepConfig
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.learning.improver import Improver
from teachbot.memory import EpisodicMemory, InteractionExample, MemoryConfig, SentenceTransformerEmbedder
from teachbot.nodes.eval_sweep import run_sweep
from teachbot.paths import share_dir

API = RobotApi.load("tabletop").without(UNBOUND)
SEED = share_dir() / "memory_store" / "tabletop" / "all_blocks_on_top_left_corner.txt"
REQUEST = "put all the blocks on the bottom left corner"


class Given:
    """An example source that returns the given transcripts (most similar last)."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)

    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        return self.texts[-k:]


def prompt(examples: list[str], *lines: str) -> str:
    transcript = Transcript.parse("\n".join(lines))
    return PromptBuilder.for_profile(API, Given(*examples)).build(transcript)


def lesson(request: str, place: str) -> str:
    return "\n".join([">>> wait_for_trigger()", repr({"type": "dialog", "text": request}),
                      ">>> blocks = [name for name in get_obj_names() if 'block' in name]",
                      f">>> put_first_on_second(blocks[0], {place!r})",
                      ">>> for below, block in zip(blocks, blocks[1:]):", "...     put_first_on_second(block, below)",
                      ">>> wait_for_trigger()"])


def statements(model, examples: list[str], *lines: str) -> list[str]:
    """What ``model`` types after ``lines`` until it hands control back, with ``examples`` in its prompt."""
    typed, current = [], list(lines)
    while True:
        reply = model.generate(prompt(examples, *current)).text.strip()
        if reply == "wait_for_trigger()" or len(typed) > 8:
            return typed
        typed.append(reply)
        first, *rest = reply.split("\n")
        current += [f">>> {first}", *(f"... {r}" for r in rest)]


def test_no_stand_in_here_is_told_the_task():
    """The harness tells a stand-in the run's plan through begin_run; these have none to be told through."""
    for model in (ReaderModel(), TutorModel(), ReaderProgramModel()):
        assert not hasattr(model, "begin_run"), type(model).__name__


def test_the_misconception_is_seeded_and_in_context_evidence_overrides_it():
    mixed = confusions(1.0, seed=4)
    assert set(mixed) == set(PLACES) and all(mixed[p] != p for p in PLACES)
    assert confusions(0.5, seed=4) == confusions(0.5, seed=4) != confusions(0.5, seed=5)
    assert confusions(0.0, seed=4) == {}
    reader = ReaderModel(confusion=1.0, seed=4)
    asked = [">>> wait_for_trigger()", repr({"type": "dialog", "text": REQUEST})]
    # adapted from the seed that names the top left corner: the reader writes the place it mixes this one up with
    typed = statements(reader, [SEED.read_text()], *asked)
    assert any(repr(mixed["bottom left corner"]) in s for s in typed) and not any("'bottom left corner'" in s for s in typed), typed
    # an example whose request said the same words: the place is copied, and right
    typed = statements(reader, [lesson(REQUEST, "bottom left corner")], *asked)
    assert any("'bottom left corner'" in s for s in typed), typed


def test_the_reader_fixes_the_table_from_the_words_of_the_correction():
    words = ("Not quite. The cyan block is not on the bottom side: it is on the table near the right side; it should go "
             "further to the left, onto the bottom side; the gray block is not on the bottom side: it is on the cyan "
             "block; it should go further to the left, onto the bottom side. Remember that next time.")
    assert wanted(words) == [("gray block", "bottom side"), ("cyan block", "bottom side")]  # the top one first
    assert moves(wanted(words)) == ["put_first_on_second('gray block', 'bottom side')",
                                    "put_first_on_second('cyan block', 'gray block')"]
    reader = ReaderModel()
    before = [">>> wait_for_trigger()", repr({"type": "dialog", "text": "put all the blocks on the bottom side"}),
              ">>> put_first_on_second('cyan block', 'left side')", "'success'", ">>> wait_for_trigger()",
              repr({"type": "dialog", "text": words})]
    assert reader.generate(prompt([], *before)).text == "learn_from_interaction()"  # asked to remember: first
    after = [*before, ">>> learn_from_interaction()"]
    assert reader.generate(prompt([], *after)).text == "put_first_on_second('gray block', 'bottom side')"
    unasked = [*before[:-1], repr({"type": "dialog", "text": words.replace(" Remember that next time.", "")})]
    assert reader.generate(prompt([], *unasked)).text == "put_first_on_second('gray block', 'bottom side')"


CORRECTED = "\n".join([
    ">>> wait_for_trigger()", repr({"type": "dialog", "text": REQUEST}),
    ">>> blocks = [name for name in get_obj_names() if 'block' in name]",
    ">>> put_first_on_second(blocks[0], 'right side')", "'success'",
    ">>> put_first_on_second(blocks[1], blocks[0])", "'success'",
    ">>> wait_for_trigger()",
    repr({"type": "dialog", "text": "No: the red block is not on the bottom left corner: it is on the table near the right "
                                    "side; it should go further to the left, onto the bottom left corner. Remember that."}),
    ">>> learn_from_interaction()"])


def test_the_tutor_writes_the_lesson_from_the_transcript_it_is_shown():
    learned = Improver(TutorModel(), API, "improve").learn(CORRECTED, scene_objects=["red block", "green block"])
    assert learned.ok, learned.reason
    kept = Transcript.parse(learned.transcript)
    assert kept.instructions() == [REQUEST]
    assert "put_first_on_second(blocks[0], 'bottom left corner')" in kept.code(), kept.render()
    assert "bottom left corner" in learned.improvement and "red block" in learned.problem
    # a careless tutor (its seeded slip) writes the first attempt back: the wrong place stays
    careless = Improver(TutorModel(slip=1.0), API, "improve").learn(CORRECTED, scene_objects=["red block", "green block"])
    assert careless.ok and "put_first_on_second(blocks[0], 'right side')" in Transcript.parse(careless.transcript).code()


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()  # bundled model, offline


def test_at_k4_among_distractor_lessons_the_right_lesson_is_retrieved_and_followed(minilm, tmp_path):
    """The shipped seeds, lessons for the same template on other places and for other templates on the same place,
    and the one right lesson: the four most similar hold it, and the reader (who mixes every place up) follows it."""
    settings = dataclasses.replace(MemoryConfig.load(), learned_dir=tmp_path / "learned", cache_dir=tmp_path / "cache")
    memory = EpisodicMemory.open(settings, embedder=minilm)
    distractors = [lesson(f"put all the blocks on the {place}", place) for place in
                   ("bottom right corner", "bottom side", "top right corner", "right side", "middle")]
    distractors += [lesson(f"pick up the block farthest to the pink bowl and place it on the {place}", place)
                    for place in ("bottom left corner", "bottom side")]
    right = lesson(REQUEST, "bottom left corner")
    for text in [*distractors[:4], right, *distractors[4:]]:
        memory.add(InteractionExample(profile="tabletop", source="learned", transcript=text).with_derived_instructions())
    found = memory.retrieve([REQUEST], profile="tabletop", k=4)
    assert len(found) == 4 and right in [r.example.transcript for r in found], [r.example.instructions for r in found]
    typed = statements(ReaderModel(confusion=1.0, seed=4), [r.example.transcript for r in found],
                       ">>> wait_for_trigger()", repr({"type": "dialog", "text": REQUEST}))
    assert any("'bottom left corner'" in t for t in typed), typed


@pytest.mark.timeout(pytest_timeout(900))
def test_ours_learns_over_the_runs_of_a_template_and_its_ablations_do_not(client, tmp_path):
    """UA-SI 'put all the blocks on the <corner_or_side>' (unseen places: the reader adapts them from the seeds and
    mixes some up), four runs, the person asking to remember every correction. ours: the first run of each place needs
    a correction, a later run of a place it was taught succeeds at once (whether or not the corrections got the first
    run's stack right: the lesson is written from the words); ours-no-learning never does; ours-no-improve
    stores the raw interaction, whose first attempt it then imitates."""
    config = SweepConfig(methods=("ours", "ours-no-learning", "ours-no-improve"), splits=("UA-SI",), runs=4,
                         only=("all_blocks_on_point",), seed=0, person=PersonConfig(remember_share=1.0))

    def models(method):
        return AgentModels(ReaderModel(confusion=0.5, seed=0), None, TutorModel(slip=0.0, seed=0))

    records = read_results(run_sweep(config, tmp_path / "sweep", models, show_progress=False, client=client))
    runs = {m: sorted((r for r in records if r.method == m), key=lambda r: r.run) for m in config.methods}
    places = [r.instruction for r in runs["ours"]]
    story = {m: [(r.instruction, [x.state for x in r.returns]) for r in rs] for m, rs in runs.items()}
    taught = [places.index(p) < i for i, p in enumerate(places)]  # the place came in an earlier run
    assert any(taught) and not all(taught), places  # the scenes repeat some places: the test can show learning
    assert [r.initial_success for r in runs["ours"]] == taught, story
    assert not any(r.initial_success for r in runs["ours-no-learning"]), story
    assert sum(r.initial_success for r in runs["ours-no-improve"]) < sum(r.initial_success for r in runs["ours"]), story
    stored = [json.loads(p.read_text()) for p in (tmp_path / "sweep" / "stores" / "ours").glob("*.json")]
    assert {e["instructions"][0] for e in stored} == set(places), stored  # every place was taught in its first run
    for example in stored:  # each names the place its request said, where the reader had written another
        place = example["instructions"][0].removeprefix("put all the blocks on the ")
        assert f"'{place}'" in example["transcript"], example["transcript"]
