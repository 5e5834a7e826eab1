"""Approvals and confirmations answer the question asked (issue 31, items 2 and 3): words typed before a question are
not its answer, a button answers only the question whose id it carries, the approval question shows the call as it
will run (learned parameters included) and its zone check uses the place point the offsets give, and a lesson the
learner rewrote from the person's sentence is read back before it is stored. No ROS."""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING

import pytest
from test_approval_gate import Table, answering, gate_config, wait_until
from timing import pytest_timeout

from teachbot.console.approval import ApprovalGate
from teachbot.errors import MotionNotApproved
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.confirm import LessonConfirmation
from teachbot.interaction.knowledge import ConsoleKnowledge, Found
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.learning.call import LearnReply, LearnRequest
from teachbot.llm.scripted import ScriptedModel
from teachbot.memory.example import InteractionExample
from teachbot.skills.parameters import SkillParameters
from teachbot.web.hub import Hub
from teachbot.web.protocol import Limits, Refused, parse

if TYPE_CHECKING:
    from teachbot.language.dialog import Question

pytestmark = pytest.mark.timeout(pytest_timeout(120))

CALL = "put_first_on_second('red block', 'blue bowl')"


# ----------------------------------------------------------------------------- answers typed before the question
def _gate(tmp_path, rule="always", timeout=0.3):
    """(functions, table, dialog, said) with no scripted answers: the test speaks itself."""
    dialog, said, _left = answering((), timeout)
    table = Table({"red block": [0.0, -0.5], "blue bowl": [0.05, -0.45], "edge bowl": [0.15, -0.5]})
    gate = ApprovalGate.load(str(gate_config(tmp_path, "tabletop", {"put_first_on_second": rule})),
                             RobotApi.load("tabletop"), dialog)
    return gate.wrap(table.functions()), table, dialog, said


def test_an_ok_typed_before_the_question_is_not_its_answer(tmp_path):
    functions, table, dialog, said = _gate(tmp_path)
    dialog.put_user("ok")  # typed while the robot was busy, before it asked
    with pytest.raises(MotionNotApproved, match="nobody answered"):
        functions["put_first_on_second"]("red block", "blue bowl")
    assert table.moves == [] and said == [f"May I run {CALL}? Say yes or no."]
    assert dialog.wait_for_trigger()["text"] == "ok"  # not lost: words for the robot's next wait


def test_a_stale_yes_from_a_double_enter_does_not_approve_the_next_motion(tmp_path):
    """The person sent "yes" twice to a lesson's question: the second "yes" came before the motion's question, so it
    is not that question's answer."""
    functions, table, dialog, said = _gate(tmp_path)

    def asked(text: str) -> None:
        said.append(text)
        if text.startswith("Here is what I would remember"):
            dialog.put_user("yes")
            dialog.put_user("yes")

    dialog.on_say = asked
    learner = Learner()
    assert LessonConfirmation(learner, dialog).run(LearnRequest("tabletop", "e1", "t", (), time.time() + 60),  # type: ignore[arg-type]
                                                   LESSON, 5.0, learner.redo) is None
    assert len(learner.stored) == 1
    with pytest.raises(MotionNotApproved, match="nobody answered"):
        functions["put_first_on_second"]("red block", "blue bowl")
    assert table.moves == []


def test_a_stale_yes_from_a_double_click_does_not_approve_the_next_motion(tmp_path):
    """A double click on "Keep it": both clicks carry the lesson question's id; the second is nobody's answer."""
    functions, table, dialog, said = _gate(tmp_path)
    opened: list[Question] = []

    def question(q: Question) -> None:
        opened.append(q)
        if q.open:
            said.append(q.text)
        if q.open and q.kind == "lesson":
            assert dialog.put_user("yes", answers=q.id)
            dialog.put_user("yes", answers=q.id)  # the second click: queued while the question was still open

    dialog.on_question = question
    assert dialog.ask_after("Keep it?", "lesson") == {"type": "dialog", "text": "yes", "question": opened[0].id}
    assert dialog.put_user("yes", answers=opened[0].id) is False  # a third click, after the answer: not taken
    with pytest.raises(MotionNotApproved, match="nobody answered"):
        functions["put_first_on_second"]("red block", "blue bowl")
    assert table.moves == []
    assert [q.kind for q in opened] == ["lesson", "lesson", "approval", "approval"] and not opened[-1].open
    assert opened[0].id != opened[2].id


def test_a_button_answer_with_another_questions_id_is_ignored_and_typed_words_after_the_question_count(tmp_path):
    functions, table, dialog, said = _gate(tmp_path, timeout=5.0)
    answers: list[bool] = []

    def question(q: Question) -> None:
        if q.open:
            said.append(q.text)
            answers.append(dialog.put_user("yes", answers="0123456789ab"))  # another question's button
            answers.append(dialog.put_user("yes", answers=""))  # typed in the chat after the question
    dialog.on_question = question
    assert functions["put_first_on_second"]("red block", "blue bowl") == "success"
    assert answers == [False, True] and len(table.moves) == 1

    def wrong_button_then_no(q: Question) -> None:
        if q.open:
            dialog.put_user("yes", answers="ba9876543210")
            dialog.put_user("no")
    dialog.on_question = wrong_button_then_no
    with pytest.raises(MotionNotApproved, match="the person said: 'no'"):
        functions["put_first_on_second"]("red block", "blue bowl")
    assert len(table.moves) == 1


def test_the_page_sends_a_buttons_answer_with_its_question_id():
    """The page's buttons send {"type": "answer", "question": id, "text": ...}; the hub hands it to the robot with the
    id; a robot question reaches the page with its id and kind; an answer without a question id is refused."""
    class Robot:
        def __init__(self) -> None:
            self.answers: list[tuple[str, str]] = []

        def answer(self, question: str, text: str) -> None:
            self.answers.append((question, text))

    robot = Robot()
    hub = Hub(robot, traces=None)  # type: ignore[arg-type]
    message = parse(json.dumps({"type": "answer", "question": "0123456789ab", "text": " yes "}), Limits())
    assert hub.handle(message) == [] and robot.answers == [("0123456789ab", "yes")]
    for bad in ({"type": "answer", "text": "yes"}, {"type": "answer", "question": "", "text": "yes"},
                {"type": "answer", "question": "../../etc", "text": "yes"}):
        with pytest.raises(Refused):
            parse(json.dumps(bad), Limits())
    hub.dialog("robot", "May I run it? Say yes or no.", ("approval", "0123456789ab"))
    assert hub._dialog[-1]["question"] == {"kind": "approval", "id": "0123456789ab"}


# ----------------------------------------------------------------------------- the call as it will run
def test_a_place_offset_that_puts_the_place_outside_the_safe_zone_is_asked_and_refused(tmp_path):
    functions, table, dialog, said = _gate(tmp_path, {"outside": "safe_zone"})
    assert functions["put_first_on_second"]("red block", "edge bowl") == "success"  # at x 0.15: inside
    assert functions["put_first_on_second"]("red block", [0.15, -0.5], place_offset_x=-0.05) == "success"
    assert said == []
    with pytest.raises(MotionNotApproved, match="nobody answered"):  # 5 cm past the zone's edge: asked, nobody said yes
        functions["put_first_on_second"]("red block", "edge bowl", place_offset_x=0.05)
    with pytest.raises(MotionNotApproved):
        functions["put_first_on_second"]("red block", [0.0, -0.64], place_offset_y=-0.05)
    assert len(table.moves) == 2
    assert said[0] == ("May I run put_first_on_second('red block', 'edge bowl', place_offset_x=0.05)? The target "
                       "'edge bowl' place_offset_x=0.05 at [0.2, -0.5] is outside safe_zone. Say yes or no.")


class LearnedOffset:
    """A knowledge source that knows one learned place offset for the red block."""

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        if kind == "skill_parameter" and object_name == "red block":
            entry = KnowledgeEntry(kind="skill_parameter", text="Put the red block a bit further right.",
                                   object="red block", skill="put_first_on_second", scope="object",
                                   parameters={"place_offset_x": 0.05})
            return Found((entry,), "", ("object",))
        return Found()


def test_the_question_shows_the_learned_parameters_and_the_zone_sees_them(tmp_path):
    """The gate sits inside the learned parameters: the question holds them, and a learned offset that takes the
    place out of the safe zone is asked about (and refused without a yes)."""
    said: list[str] = []
    dialog = DialogChannel(said.append, timeout=1.0)
    moves: list[tuple] = []
    functions = {
        "wait_for_trigger": dialog.wait_for_trigger, "ask": dialog.ask, "say": dialog.say,
        "get_obj_names": lambda: ["edge bowl", "red block"],
        "get_obj_pos": lambda name: {"red block": [0.0, -0.5], "edge bowl": [0.15, -0.5]}[name],
        "denormalize_xy": lambda xy: xy,
        "put_first_on_second": lambda a, b, **p: moves.append((a, b, p)) or "success",
    }
    call = "put_first_on_second('red block', 'edge bowl')"
    model = ScriptedModel([call, "wait_for_trigger()"])
    config = CoreConfig(approval=str(gate_config(tmp_path, "tabletop", {"put_first_on_second": {"outside": "safe_zone"}})))
    knowledge = ConsoleKnowledge(LearnedOffset(), SkillParameters.load("tabletop").declared, inject=True)  # applied silently
    core = InteractionCore(RobotApi.load("tabletop"), functions, dialog, model, config=config, knowledge=knowledge,
                           scene_objects=lambda: ["edge bowl", "red block"])
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    try:
        dialog.put_user("put the red block in the edge bowl")
        wait_until(lambda: model.served >= 2, what="the statement after the question")
        lines = core.session.transcript.render().splitlines()
    finally:
        core.close()
        thread.join(timeout=10)
        core.shutdown()
    assert said[0] == ("May I run put_first_on_second('red block', 'edge bowl', place_offset_x=0.05)? The target "
                       "'edge bowl' place_offset_x=0.05 at [0.2, -0.5] is outside safe_zone. Say yes or no.")
    assert moves == [] and lines[3].startswith("MotionNotApproved:")


# ----------------------------------------------------------------------------- an edited lesson is read back
class Learner:
    """Rewrites a lesson from the person's sentence; records what it stores."""

    def __init__(self) -> None:
        self.stored: list[InteractionExample] = []
        self.rewrites: list[str] = []

    def store(self, lesson: InteractionExample, timeout: float) -> LearnReply:
        self.stored.append(lesson)
        return LearnReply(True, lesson.improvement, lesson, example_id="lesson-1")

    def redo(self, request: LearnRequest) -> LearnReply:
        self.rewrites.append(request.improvement)
        return LearnReply(False, "rewritten", InteractionExample(
            profile="tabletop", source="learned", transcript=">>> put_first_on_second('yellow block', 'blue bowl')",
            problem=request.problem, improvement="(the learner's words)", scope="always"))


LESSON = InteractionExample(profile="tabletop", source="learned", transcript=">>> put_first_on_second('red block', 'blue bowl')",
                            problem="The robot took the wrong block.", improvement="Take the green block.")


def test_a_three_word_edit_is_rewritten_and_read_back_before_it_is_stored():
    learner = Learner()
    answers = ["Take yellow ones.", "yes"]
    said: list[str] = []
    stored_when_asked: list[int] = []

    def hear(text: str) -> None:
        said.append(text)
        stored_when_asked.append(len(learner.stored))
        if answers:
            dialog.put_user(answers.pop(0))

    dialog = DialogChannel(hear, timeout=2.0)
    confirmation = LessonConfirmation(learner, dialog)  # type: ignore[arg-type]
    request = LearnRequest("tabletop", "e1", "transcript", (), time.time() + 60)
    assert confirmation.run(request, LESSON, 5.0, learner.redo) is None
    assert learner.rewrites == ["Take yellow ones."]
    assert said[1] == ("In your words, I would remember: Take yellow ones. Shall I keep it? Say yes, no, or say in one "
                       "sentence what I should do instead.")
    assert stored_when_asked[:2] == [0, 0]  # nothing stored before the person agreed to the rewritten lesson
    (lesson,) = learner.stored
    assert lesson.improvement == "Take yellow ones." and "yellow block" in lesson.transcript
    assert said[2] == "Got it, in your words. Next time: Take yellow ones."


def test_an_edited_lesson_the_person_refuses_when_read_back_is_not_stored():
    learner = Learner()
    answers = ["Take the yellow block.", "no"]

    def hear(text: str) -> None:
        if answers:
            dialog.put_user(answers.pop(0))

    dialog = DialogChannel(hear, timeout=2.0)
    candidate = InteractionExample(profile="tabletop", source="learned", transcript=">>> x", problem="p", improvement="i")
    output = LessonConfirmation(learner, dialog).run(  # type: ignore[arg-type]
        LearnRequest("tabletop", "e1", "t", (), time.time() + 60), candidate, 5.0, learner.redo)
    assert output == "nothing learned: the person rejected the lesson" and learner.stored == []
