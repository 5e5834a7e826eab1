"""A lesson is tried before it is kept (teachbot.learning.rehearsal): replayed from the episode's initial scene in a
copy of the tabletop world, kept only when it runs without errors and ends where the person accepted the episode."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from teachbot.console.tabletop_api import TabletopRobot
from teachbot.learning.call import LearnRequest
from teachbot.learning.improver import Lesson
from teachbot.learning.learner import Learner, MemoryLessons, learning_config
from teachbot.learning.rehearsal import KEPT, NOT_TRIED, REJECTED, RehearsalConfig, Rehearser, corrected_before_learning
from teachbot.simrobot.factory import world_from_scene
from teachbot.simrobot.snapshot import SceneObject, scene_from_json, scene_from_positions, scene_to_json

BLOCK, BLUE, RED = (0.1, -0.4, 0.02), (-0.1, -0.6, 0.0), (0.2, -0.65, 0.0)
INITIAL = (SceneObject("green block", "block", "green", BLOCK), SceneObject("blue bowl", "bowl", "blue", BLUE),
           SceneObject("red bowl", "bowl", "red", RED))
# what the person accepted: the green block in the blue bowl (a little off its centre, as perception sees it)
ACCEPTED = (SceneObject("green block", "block", "green", (-0.09, -0.61, 0.026)), *INITIAL[1:])
REQUEST = "{'type': 'dialog', 'text': 'put the green block in the blue bowl'}"


def lesson(*statements: str) -> str:
    return "\n".join([">>> wait_for_trigger()", REQUEST, *statements, ">>> wait_for_trigger()", ""])


RIGHT = lesson(">>> put_first_on_second('green block', 'blue bowl')", "'success'")
WRONG_PLACE = lesson(">>> put_first_on_second('green block', 'red bowl')", "'success'")
WRONG_NAME = lesson(">>> put_first_on_second('green block', 'purple bowl')", "'success'")
ASKS = lesson(">>> ask('Which bowl?')", "{'type': 'dialog', 'text': 'the blue one'}",
              ">>> put_first_on_second('green block', 'blue bowl')", "'success'")
# after the lesson hands control back, nothing more runs (the person's turn): the red bowl is never reached
STOPS_AT_TRIGGER = lesson(">>> put_first_on_second('green block', 'blue bowl')", "'success'", ">>> wait_for_trigger()",
                          "{'type': 'dialog', 'text': 'thanks'}", ">>> put_first_on_second('green block', 'red bowl')")


# the corrected episode: a mistake, the person's correction carried out, then the learning call
CORRECTED = "\n".join([">>> wait_for_trigger()", REQUEST, ">>> put_first_on_second('green block', 'red bowl')", "'success'",
                       ">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'no, the blue bowl'}",
                       ">>> put_first_on_second('green block', 'blue bowl')", "'success'", ">>> wait_for_trigger()",
                       "{'type': 'dialog', 'text': 'right, remember that'}", ">>> learn_from_interaction()"])
# the usual order: the complaint, the learning call at once, the fix after it
LEARNED_FIRST = "\n".join([">>> wait_for_trigger()", REQUEST, ">>> put_first_on_second('green block', 'red bowl')", "'success'",
                           ">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'no, the blue bowl'}",
                           ">>> learn_from_interaction()", ">>> put_first_on_second('green block', 'blue bowl')"])


def tabletop(skills, objects, dialog):
    return TabletopRobot(skills, objects, dialog).functions()


def rehearser(enabled: bool = True, tolerance: float = 0.05) -> Rehearser:
    return Rehearser({"tabletop": tabletop}, RehearsalConfig(enabled, tolerance))


def request(profile: str = "tabletop", initial=INITIAL, accepted=ACCEPTED, episode: str = CORRECTED) -> LearnRequest:
    return LearnRequest(profile, "ep1", episode, ("green block", "blue bowl", "red bowl"), time.time() + 60,
                        initial_scene=initial, accepted_scene=accepted)


def test_a_correct_lesson_is_kept():
    tried = rehearser().rehearse(request(), RIGHT)
    assert tried.verdict == KEPT, tried.reason
    assert tried.seconds > 0


def test_a_lesson_that_puts_the_block_elsewhere_is_rejected_with_where_it_went():
    tried = rehearser().rehearse(request(), WRONG_PLACE)
    assert tried.verdict == REJECTED
    assert tried.reason == ("I did not keep that lesson: replayed from the start it left the green block in the red bowl, "
                            "not in the blue bowl where you accepted it.")


def test_a_lesson_that_raises_is_rejected_with_the_error():
    tried = rehearser().rehearse(request(), WRONG_NAME)
    assert tried.verdict == REJECTED
    assert "put_first_on_second('green block', 'purple bowl') failed (ValueError" in tried.reason


def test_a_lesson_that_leaves_the_block_on_the_table_says_where():
    tried = rehearser().rehearse(request(), lesson(">>> say('done')"))
    assert tried.verdict == REJECTED
    assert "left the green block near the" in tried.reason and "not in the blue bowl" in tried.reason


def test_ask_gets_the_recorded_answer_and_a_later_trigger_ends_the_replay():
    assert rehearser().rehearse(request(), ASKS).verdict == KEPT
    assert rehearser().rehearse(request(), STOPS_AT_TRIGGER).verdict == KEPT


def test_an_ask_without_an_answer_ends_the_replay_there():
    unanswered = lesson(">>> answer = ask('Which bowl?')", ">>> put_first_on_second('green block', 'blue bowl')")
    assert rehearser().rehearse(request(), unanswered).verdict == REJECTED


def test_learned_before_the_fix_the_replay_only_has_to_run_without_errors():
    """At a learning call right after the complaint the objects are where the person said they should not be."""
    assert not corrected_before_learning(LEARNED_FIRST, {"put_first_on_second"})
    assert corrected_before_learning(CORRECTED, {"put_first_on_second"})
    tried = rehearser().rehearse(request(episode=LEARNED_FIRST), WRONG_PLACE)
    assert tried.verdict == KEPT and "the end was not compared" in tried.reason
    assert rehearser().rehearse(request(episode=LEARNED_FIRST), WRONG_NAME).verdict == REJECTED


def test_not_tried_off_household_or_without_scenes():
    assert rehearser(enabled=False).rehearse(request(), WRONG_PLACE).verdict == NOT_TRIED
    household = rehearser().rehearse(request("household"), WRONG_PLACE)
    assert household.verdict == NOT_TRIED and "household profile has no rehearsal world" in household.reason
    assert rehearser().rehearse(request(initial=()), WRONG_PLACE).verdict == NOT_TRIED


def test_a_stacked_block_is_rebuilt_on_its_block():
    scene = (SceneObject("red block", "block", "red", (0.0, -0.5, 0.02)),
             SceneObject("green block", "block", "green", (0.0, -0.5, 0.06)))
    world = world_from_scene(scene)
    try:
        states = {o.name: o for o in world.objects()}
        assert states["green block"].supported_by == "red block"
    finally:
        world.close()


def test_scenes_travel_as_json_and_come_from_an_object_list():
    assert scene_from_json(scene_to_json(INITIAL)) == INITIAL
    assert scene_from_json("") == () and scene_to_json(()) == ""
    with pytest.raises(ValueError, match="JSON list"):
        scene_from_json("[1]")
    scene = scene_from_positions({"green block": [0.1, -0.4, 0.02], "thing": [0, 0]})
    assert scene[0] == SceneObject("green block", "block", "green", (0.1, -0.4, 0.02))
    assert (scene[1].category, scene[1].color, scene[1].position) == ("", "", (0.0, 0.0, 0.0))


class Chain:
    def __init__(self, transcript: str, mode: str = "improve") -> None:
        self.model, self.mode = SimpleNamespace(name="improvement:stand-in"), mode
        self.lesson = Lesson(True, "Put the green block in the blue bowl.", problem="p", improvement="i", scope="s",
                             transcript=transcript)

    def learn(self, transcript, **kwargs):
        return self.lesson


class Memory:
    def __init__(self) -> None:
        self.added = []

    def add(self, example):
        self.added.append(example)
        return f"ex-{len(self.added)}"


def learn(transcript: str, trial: Rehearser | None, mode: str = "improve"):
    memory, chain = Memory(), Chain(transcript, mode)
    learner = Learner(lambda _profile: chain, MemoryLessons(memory), rehearsal=trial)
    return learner, learner.learn(request()), memory


def test_the_learner_stores_only_kept_lessons_and_counts_the_verdicts():
    learner, learned, memory = learn(RIGHT, rehearser())
    assert learned.stored and learned.rehearsal.verdict == KEPT and len(memory.added) == 1
    learner2, rejected, memory2 = learn(WRONG_PLACE, rehearser())
    assert not rejected.stored and memory2.added == [] and rejected.example is None
    assert rejected.message.startswith("I did not keep that lesson:") and rejected.rehearsal.rejected
    assert rejected.reply().message == rejected.message  # the console's (and the person's) one sentence
    assert (learner.rehearsals[KEPT], learner2.rehearsals[REJECTED]) == (1, 1)


def test_switched_off_or_raw_lessons_are_stored_untried():
    learner, learned, memory = learn(WRONG_PLACE, rehearser(enabled=False))
    assert learned.stored and learned.rehearsal.verdict == NOT_TRIED and len(memory.added) == 1
    _, raw, memory = learn(WRONG_PLACE, rehearser(), mode="store_raw")
    assert raw.stored and raw.rehearsal.verdict == NOT_TRIED
    _, untried, memory = learn(WRONG_PLACE, None)
    assert untried.stored and untried.rehearsal is None


def test_the_shipped_config_rehearses():
    config = RehearsalConfig.from_config(learning_config().get("rehearsal"))
    assert config.enabled and config.tolerance > 0
    with pytest.raises(ValueError, match="rehearsal.enabled"):
        RehearsalConfig.from_config({"enabled": "yes"})


def test_the_evaluation_rehearses_as_configured_and_records_each_runs_rejections(tmp_path):
    """The harness passes its option to the learner and writes how many lessons a run's rehearsal kept and rejected."""
    from teachbot.evaluation.doubles import OracleModel, TeacherModel
    from teachbot.evaluation.harness import METHODS, AgentModels, ConsoleAgent, PreparedRun
    from teachbot.evaluation.person import PersonConfig
    from teachbot.interaction.core import ENDED

    models = AgentModels(OracleModel(), None, TeacherModel())
    agent = ConsoleAgent(METHODS["ours"], tmp_path / "a", models, skills=None, objects=dict, person=PersonConfig(), seed=0,
                         rehearse=False)
    try:
        assert agent.learner.rehearsal is not None and not agent.learner.rehearsal.enabled
        agent.learner.rehearsals[REJECTED] = 3  # earlier runs' verdicts are not this run's

        def episode() -> str:  # one learning call whose lesson the rehearsal rejected
            agent.learner.rehearsals[REJECTED] += 1
            return ENDED

        agent.core.run_episode = episode
        record = agent.run(PreparedRun("ours", "SA-SI", "t", 0, "put the green block in the blue bowl", lambda: (True, "")))
        assert (record.extra["rehearsal_rejected"], record.extra["rehearsal_kept"]) == (1, 0)
    finally:
        agent.close()


def test_the_console_sends_the_scene_of_the_first_request_and_the_one_at_the_learning_call():
    """The interaction core notes the objects when the episode's first request comes and sends them, with the objects
    at the learning call, in the learning request (what the improvement node rehearses from and against)."""
    import threading

    from test_interaction_core import SlowLearner, wait_until

    from teachbot.interaction import CoreConfig, InteractionCore
    from teachbot.language.dialog import DialogChannel
    from teachbot.language.registry import RobotApi
    from teachbot.llm.scripted import ScriptedModel

    positions = {"red block": [0.1, -0.4, 0.02], "blue bowl": [-0.1, -0.6, 0.0]}
    dialog = DialogChannel(timeout=5.0)

    def put(obj, target):
        positions[obj] = [*positions[target][:2], 0.026]
        return "success"

    learner = SlowLearner(0.0)
    model = ScriptedModel(["put_first_on_second('red block', 'blue bowl')", "wait_for_trigger()", "learn_from_interaction()",
                           "wait_for_trigger()"])
    core = InteractionCore(RobotApi.load("tabletop"), {"wait_for_trigger": dialog.wait_for_trigger, "say": dialog.say,
                                                       "put_first_on_second": put}, dialog, model,
                           config=CoreConfig(learn_deadline=30.0), learner=learner, scene_objects=lambda: sorted(positions),
                           scene_state=lambda: scene_from_positions(positions))
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    try:
        dialog.put_user("put the block in the blue bowl")
        dialog.put_user("Good. Remember that.")
        wait_until(lambda: learner.requests, what="the learning call")
    finally:
        core.close()
        thread.join(timeout=10)
        core.shutdown()
    request, _ = learner.requests[0]
    initial, accepted = {o.name: o for o in request.initial_scene}, {o.name: o for o in request.accepted_scene}
    assert initial["red block"].position == (0.1, -0.4, 0.02) and initial["red block"].category == "block"
    assert accepted["red block"].position == (-0.1, -0.6, 0.026)
