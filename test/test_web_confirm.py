"""Confirm-before-store in the interaction core, without ROS: the robot reads the lesson back in one sentence and
stores it only when the person says yes, stores the person's own sentence (its lesson rewritten from it) when
they edit it, and nothing when they say no, answer unclearly twice or not at all. The models are scripted and
answer from their prompts (test/web_scripted.py); the learner is the real improvement chain over a real store."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from timing import deadline, pytest_timeout
from web_scripted import robot_model, teacher_model

from teachbot.console.session import SessionConfig
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.confirm import EDIT, NO, UNCLEAR, YES, ConfirmWording, sentence_of
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.learning.improver import Improver
from teachbot.learning.learner import Learner, MemoryLessons
from teachbot.memory import InteractionExample, MemoryStore

pytestmark = pytest.mark.timeout(pytest_timeout(120))
SCENE = ["blue bowl", "green block", "red block", "yellow block"]


def wait_until(predicate, timeout=20.0, what="condition"):
    until = deadline(timeout)
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.02)


class RecordingLearner(Learner):
    """The one learner in this process (the improvement chain, a file store), recording its requests."""

    def __init__(self, store: MemoryStore) -> None:
        self.teacher = teacher_model()
        self.requests = []
        improver = Improver(self.teacher, RobotApi.load("tabletop"))
        super().__init__(lambda _profile: improver, MemoryLessons(store), store_margin=0.0)

    def improve(self, request, timeout):
        self.requests.append(request)
        return super().improve(request, timeout)


class Console:
    """An InteractionCore on its own thread with confirm_lessons on, the scripted robot and the local learner."""

    def __init__(self, tmp_path, confirm: bool = True) -> None:
        self.said: list[str] = []
        self.pending: list[object] = []
        self.dialog = DialogChannel(self.said.append, timeout=3.0)
        self.store = MemoryStore(tmp_path / "learned", tmp_path / "seeds")
        self.learner = RecordingLearner(self.store)
        self.moves: list[tuple[str, str]] = []
        functions = {
            "wait_for_trigger": self.dialog.wait_for_trigger, "ask": self.dialog.ask, "say": self.dialog.say,
            "get_obj_names": lambda: list(SCENE), "get_obj_pos": lambda name: [0.0, -0.5], "denormalize_xy": lambda xy: xy,
            "put_first_on_second": lambda a, b: self.moves.append((a, b)) or "success",
        }
        self.core = InteractionCore(
            RobotApi.load("tabletop"), functions, self.dialog, robot_model(),
            config=CoreConfig(session=SessionConfig(), confirm_lessons=confirm), learner=self.learner,
            scene_objects=lambda: list(SCENE), on_pending_lesson=self.pending.append,
        )
        self.thread = threading.Thread(target=self.core.run, daemon=True)

    def __enter__(self) -> Console:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.core.close()
        self.thread.join(timeout=10)
        self.core.shutdown()

    def teach(self) -> None:
        """A request the robot gets wrong, and the person's correction; returns once the robot asks."""
        self.dialog.put_user("put the block in the blue bowl")
        wait_until(lambda: self.said, what="the robot's report")
        self.dialog.put_user("No, I meant the green block. Remember that next time.")
        wait_until(lambda: len(self.said) >= 2, what="the lesson read back")

    def transcript(self) -> str:
        return self.core.session.transcript.render() if self.core.session else ""


def test_a_confirmed_lesson_is_stored_and_said(tmp_path):
    with Console(tmp_path) as c:
        c.teach()
        assert c.said[1] == ("Here is what I would remember: When the person says 'the block', take the green block. "
                             "Shall I keep it? Say yes, no, or say in one sentence what I should do instead.")
        assert c.store.list(source="learned") == []  # nothing before the person answers
        assert c.pending[-1].improvement == "When the person says 'the block', take the green block."
        c.dialog.put_user("Yes, keep it!")
        wait_until(lambda: len(c.said) >= 3, what="the robot's confirmation")
        assert c.said[2] == "Got it. Next time: When the person says 'the block', take the green block."
        assert c.pending[-1] is None
    (lesson,) = c.store.list(source="learned")
    assert lesson.improvement == "When the person says 'the block', take the green block."
    assert "put_first_on_second('green block', 'blue bowl')" in lesson.transcript
    assert c.moves == [("red block", "blue bowl")]
    assert c.learner.requests[0].store is False


def test_a_rejected_lesson_is_not_stored(tmp_path):
    with Console(tmp_path) as c:
        c.teach()
        c.dialog.put_user("no")
        wait_until(lambda: "nothing learned" in c.transcript(), what="the learning call's output")
        assert c.said[2] == "All right, I will not remember that."
        assert ">>> learn_from_interaction()\n'nothing learned: the person rejected the lesson'" in c.transcript()
    assert c.store.list(source="learned") == []


def test_an_edited_sentence_rewrites_the_lesson_before_it_is_stored(tmp_path):
    with Console(tmp_path) as c:
        c.teach()
        c.dialog.put_user("Take the yellow block when I do not say which block.")
        wait_until(lambda: len(c.said) >= 3, what="the rewritten lesson read back")
        assert c.said[2] == ("In your words, I would remember: Take the yellow block when I do not say which block. "
                             "Shall I keep it? Say yes, no, or say in one sentence what I should do instead.")
        assert c.store.list(source="learned") == []  # nothing stored before the person agrees to the rewritten lesson
        assert "yellow block" in c.pending[-1].transcript  # the page shows the rewritten lesson while it asks
        c.dialog.put_user("yes")
        wait_until(lambda: len(c.said) >= 4, what="the robot's confirmation")
        assert c.said[3] == "Got it, in your words. Next time: Take the yellow block when I do not say which block."
        edit = c.learner.requests[-1]
        assert edit.improvement == "Take the yellow block when I do not say which block."
        assert edit.problem == "The robot took the wrong block; the person meant the green block."
    (lesson,) = c.store.list(source="learned")
    assert lesson.improvement == "Take the yellow block when I do not say which block."
    assert "put_first_on_second('yellow block', 'blue bowl')" in lesson.transcript  # written from the person's sentence
    prompts = c.learner.teacher.prompts
    assert "How to do better: Take the yellow block" in prompts[-1]
    assert sum("Did the robot do something wrong" in p for p in prompts) == 1  # the edit asked no verdict again


def test_an_unclear_answer_is_asked_again_then_nothing_is_stored(tmp_path):
    with Console(tmp_path) as c:
        c.teach()
        c.dialog.put_user("hmm")
        wait_until(lambda: len(c.said) >= 3, what="the question again")
        assert c.said[2] == "Please say yes, no, or one sentence of what I should do differently."
        c.dialog.put_user("maybe")
        wait_until(lambda: "nothing learned" in c.transcript(), what="the learning call's output")
        assert "the person's answer was neither yes, no nor a sentence" in c.transcript()
    assert c.store.list(source="learned") == []


def test_no_answer_stores_nothing(tmp_path):
    with Console(tmp_path) as c:
        c.teach()
        wait_until(lambda: "nothing learned" in c.transcript(), timeout=10, what="the dialog timeout")
        assert c.said[2] == "Nobody answered, so I did not remember anything."
        assert "nobody confirmed the lesson within 3 s" in c.transcript()
    assert c.store.list(source="learned") == []


def test_without_confirm_the_lesson_is_stored_at_once(tmp_path):
    with Console(tmp_path, confirm=False) as c:
        c.teach()
        assert c.said[1] == "Got it. Next time: when the person says 'the block', take the green block."
        assert c.learner.requests[0].store is True
    assert len(c.store.list(source="learned")) == 1


def test_the_answers_are_read_as_yes_no_edit_or_unclear():
    wording = ConfirmWording.load()
    assert [wording.classify(a) for a in ("Yes!", "  OK ", "yes, keep it", "No.", "nope", "Don't", "hmm", "the red one",
                                          "Always take the red block first.")] == \
        [YES, YES, YES, NO, NO, NO, UNCLEAR, EDIT, EDIT]
    assert sentence_of(InteractionExample(improvement="take the green block")) == "take the green block."
    assert sentence_of(replace(InteractionExample(), problem="It guessed.")) == "It guessed."


def test_ending_the_conversation_ends_the_episode_quietly_and_the_next_starts_afresh(tmp_path):
    with Console(tmp_path, confirm=False) as c:
        c.dialog.put_user("put the block in the blue bowl")
        wait_until(lambda: c.said, what="the robot's report")  # it waits for the person now (its own wait_for_trigger())
        first = c.core.episode_id
        c.dialog.end_conversation()
        wait_until(lambda: c.core.episode_id != first, what="a new episode")
        assert c.core.episodes == 1 and len(c.said) == 1  # ended without a word to the person
        c.dialog.put_user("put the block in the blue bowl")
        wait_until(lambda: len(c.said) == 2, what="the second episode's report")
        assert c.transcript().startswith(">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'put the block in the blue bowl'}")
        c.dialog.end_conversation()  # ends the second episode too (the robot was waiting in it); a third waits
        time.sleep(0.3)
        assert c.core.episodes == 2


def test_chat_end_ends_the_conversation_and_answers_go_to_the_robot_as_words():
    from teachbot.nodes.chat_client import handle_line

    words, stops, shown, ended = [], [], [], []
    for line in ("/end", "yes", "Take the yellow block when I do not say which.", "/END"):
        handle_line(line, words.append, stops.append, shown.append, "/emergency_stop", lambda: ended.append(True))
    assert ended == [True, True] and stops == []
    assert words == ["yes", "Take the yellow block when I do not say which."]  # a lesson's answer is typed as words
    assert shown[0] == "conversation ended: the robot starts afresh with what you say next"
