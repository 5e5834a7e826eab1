"""A lesson is tried against the table the person accepted (teachbot.interaction.pending): learned right after the
complaint, it waits, unstored, until the person accepts the corrected task, is then replayed from the episode's first
scene and kept only when it ends there; an episode that ends before the person accepts discards it."""

from __future__ import annotations

import json
import time

import pytest
from test_rehearsal import BLUE, INITIAL, REQUEST, RIGHT, WRONG_PLACE, Chain, Memory, rehearser
from timing import pytest_timeout

from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.core import ENDED
from teachbot.interaction.pending import DISCARDED, KEPT, PENDING_OUTPUT, REJECTED, accepted_at_return, left_after_fix
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.learning.call import LearnRequest
from teachbot.learning.learner import Learner, MemoryLessons
from teachbot.llm.scripted import ScriptedModel
from teachbot.simrobot.snapshot import scene_from_positions

API = RobotApi.load("tabletop")
MOTIONS = API.motion_names
MISTAKE, FIX = "put_first_on_second('green block', 'red bowl')", "put_first_on_second('green block', 'blue bowl')"
COMPLAINT = "no, the blue bowl. Remember that."


def entries(*lines: str):
    return Transcript.parse("\n".join([">>> wait_for_trigger()", REQUEST, *lines])).entries


def said(text: str) -> str:
    return repr({"type": "dialog", "text": text})


def test_what_accepts_the_table():
    complaint = [f">>> {MISTAKE}", "'success'", ">>> wait_for_trigger()", said(COMPLAINT)]
    # the complaint answered by learning, then the fix: the complaint is no acceptance
    fixed = [*complaint, ">>> learn_from_interaction()", f">>> {FIX}", "'success'"]
    assert not accepted_at_return(entries(*fixed, ">>> wait_for_trigger()"), MOTIONS)
    assert left_after_fix(entries(*fixed, ">>> wait_for_trigger()"), MOTIONS)  # leaving now: they saw the fix
    # the person's words after the fix, which the robot answers by neither moving nor learning: accepted
    thanks = [*fixed, ">>> wait_for_trigger()", said("thanks")]
    assert accepted_at_return(entries(*thanks, ">>> say('glad to help')", ">>> wait_for_trigger()"), MOTIONS)
    # ... answered by moving again (another correction) or by learning (asked to remember one): not accepted
    assert not accepted_at_return(entries(*thanks, f">>> {MISTAKE}", ">>> wait_for_trigger()"), MOTIONS)
    assert not accepted_at_return(entries(*thanks, ">>> learn_from_interaction()", ">>> wait_for_trigger()"), MOTIONS)
    # a complaint the robot learned from but never acted on: leaving then is no acceptance
    unanswered = [*complaint, ">>> learn_from_interaction()", ">>> wait_for_trigger()"]
    assert not accepted_at_return(entries(*unanswered), MOTIONS) and not left_after_fix(entries(*unanswered), MOTIONS)


def deferred(transcript: str) -> LearnRequest:
    return LearnRequest("tabletop", "ep1", transcript, ("green block", "blue bowl", "red bowl"), time.time() + 60,
                        initial_scene=INITIAL, accepted_scene=INITIAL, defer=True)


def test_a_deferred_lesson_is_pending_and_kept_only_when_it_ends_where_the_person_accepted():
    accepted = scene_from_positions({"green block": [-0.09, -0.61, 0.026], "blue bowl": list(BLUE),
                                     "red bowl": [0.2, -0.65, 0.0]})
    for lesson, stored in ((RIGHT, True), (WRONG_PLACE, False)):
        memory = Memory()
        learner = Learner(lambda _profile, lesson=lesson: Chain(lesson), MemoryLessons(memory), rehearsal=rehearser())
        learned = learner.learn(deferred("(the transcript)"))
        assert learned.pending and not learned.stored and memory.added == [] and learned.rehearsal is None
        assert learned.reply().pending and learned.reply().lesson.transcript == lesson
        kept = learner.keep(deferred(""), learned.example, timeout=60)
        assert not kept.stored  # the request's accepted scene is still the initial one: the lesson moves the block
        settled = learner.keep_pending(LearnRequest("tabletop", "ep1", "", (), time.time() + 60, initial_scene=INITIAL,
                                                    accepted_scene=accepted), learned.example)
        assert settled.stored is stored and len(memory.added) == int(stored), settled.message
        if not stored:
            assert settled.message == ("I did not keep that lesson: replayed from the start it left the green block in "
                                       "the red bowl, not in the blue bowl where you accepted it.")
    # rehearsal off: stored at once, as before the rehearsal existed
    memory = Memory()
    off = Learner(lambda _profile: Chain(WRONG_PLACE), MemoryLessons(memory), rehearsal=rehearser(enabled=False))
    learned = off.learn(deferred("(the transcript)"))
    assert learned.stored and not learned.pending and len(memory.added) == 1


class Table:
    """The tabletop's put_first_on_second over positions, enough for a console episode and its scenes."""

    def __init__(self) -> None:
        self.positions = {o.name: list(o.position) for o in INITIAL}

    def put(self, obj: str, target: str) -> str:
        self.positions[obj] = [*self.positions[target][:2], 0.026]
        return "success"


def episode(lesson: str, replies: list[str], words: list[str]) -> tuple[str, Memory, InteractionCore, list[str]]:
    """One console episode: the scripted robot, the person's ``words`` then leaving; the learner's lesson ``lesson``."""
    table, memory, spoken = Table(), Memory(), []
    dialog = DialogChannel(on_say=spoken.append, timeout=5.0)
    learner = Learner(lambda _profile: Chain(lesson), MemoryLessons(memory), rehearsal=rehearser())
    core = InteractionCore(API, {"wait_for_trigger": dialog.wait_for_trigger, "say": dialog.say,
                                 "put_first_on_second": table.put}, dialog, ScriptedModel(replies),
                           config=CoreConfig(learn_deadline=60.0), learner=learner,
                           scene_objects=lambda: sorted(table.positions),
                           scene_state=lambda: scene_from_positions(table.positions))
    for text in ["put the green block in the blue bowl", *words]:
        dialog.put_user(text)
    dialog.close()
    try:
        reason = core.run_episode()
    finally:
        core.shutdown()
    return reason, memory, core, spoken


FIXED = [MISTAKE, "wait_for_trigger()", "learn_from_interaction()", FIX, "wait_for_trigger()", "wait_for_trigger()"]


def test_the_console_keeps_a_right_lesson_when_the_person_accepts_the_fix():
    reason, memory, core, spoken = episode(RIGHT, FIXED, [COMPLAINT, "thanks"])
    assert reason == ENDED and len(memory.added) == 1, spoken
    transcript = core.session.transcript.render()
    assert f">>> learn_from_interaction()\n{PENDING_OUTPUT!r}" in transcript  # what the console shows meanwhile
    assert core.pending.counts == {KEPT: 1}


def test_the_console_rejects_a_wrong_lesson_at_acceptance_and_says_why():
    reason, memory, core, spoken = episode(WRONG_PLACE, FIXED, [COMPLAINT, "thanks"])
    assert memory.added == [] and core.pending.counts == {REJECTED: 1}
    assert spoken[-1] == ("I did not keep that lesson: replayed from the start it left the green block in the red bowl, "
                          "not in the blue bowl where you accepted it.")


def test_leaving_after_the_fix_accepts_it_and_leaving_a_complaint_unanswered_discards_the_lesson():
    _, memory, core, _ = episode(RIGHT, FIXED[:-1], [COMPLAINT])  # the person leaves once the block is in the bowl
    assert len(memory.added) == 1 and core.pending.counts == {KEPT: 1}
    unanswered = [MISTAKE, "wait_for_trigger()", "learn_from_interaction()", "wait_for_trigger()"]
    _, memory, core, spoken = episode(RIGHT, unanswered, [COMPLAINT])
    assert memory.added == [] and core.pending.counts == {DISCARDED: 1}
    assert spoken[-1].startswith("I did not keep that lesson: the corrected task was never finished")


@pytest.mark.timeout(pytest_timeout(600))
def test_an_evaluation_sweep_rejects_a_careless_lesson_at_acceptance_and_keeps_a_right_one(client, tmp_path):
    """Through the harness on the shared stack: the reader (it mixes up half the places) is corrected in its first run
    of 'put all the blocks on the <place>' and learns at once; the person accepts the fix by ending the run at a success.
    With rehearse-lessons, the right tutor's lesson is kept, the careless tutor's (its first attempt written back) is
    rejected then; without it (the paper's protocol) the careless lesson is stored."""
    from teachbot.evaluation.harness import AgentModels
    from teachbot.evaluation.metrics import read_results
    from teachbot.evaluation.person import PersonConfig
    from teachbot.evaluation.reading_doubles import ReaderModel, TutorModel
    from teachbot.evaluation.sweep import SweepConfig
    from teachbot.nodes.eval_sweep import run_sweep

    def sweep(slip: float, deviations: tuple[str, ...]) -> tuple[dict, int]:
        config = SweepConfig(methods=("ours",), splits=("UA-SI",), runs=1, only=("all_blocks_on_point",), seed=0,
                             person=PersonConfig(remember_share=1.0), deviations=deviations)
        out = tmp_path / f"slip{slip}-{len(deviations)}"
        (record,) = read_results(run_sweep(config, out, lambda _m: AgentModels(
            ReaderModel(confusion=0.5, seed=0), None, TutorModel(slip=slip, seed=0)), show_progress=False, client=client))
        assert [r.state for r in record.returns] == ["failure", "success"], record.returns
        assert json.loads((out / "sweep.json").read_text())["deviations"] == list(deviations)
        return record.extra, len(list((out / "stores" / "ours").glob("*.json")))

    extra, stored = sweep(0.0, ("rehearse-lessons",))
    assert (extra["rehearsal_kept"], extra["rehearsal_rejected"], stored) == (1, 0, 1), extra
    extra, stored = sweep(1.0, ("rehearse-lessons",))
    assert (extra["rehearsal_kept"], extra["rehearsal_rejected"], stored) == (0, 1, 0), extra
    extra, stored = sweep(1.0, ())
    assert (extra["rehearsal_kept"], extra["rehearsal_rejected"], stored) == (0, 0, 1), extra
