"""The parent process stays bounded whatever console code does: say() loops, oversized robot API arguments,
and a transcript that console outputs would grow past its limit (config/interaction.yaml bounds)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.config import load_yaml, resolve_config
from teachbot.console.prompt import PromptBuilder
from teachbot.console.session import ConsoleSession, SessionConfig
from teachbot.errors import ArgumentTooLarge, ConfigError
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.language.bounds import Bounds
from teachbot.language.dialog import CUT, DialogChannel, SessionEnded
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import ELIDED, Entry, Transcript
from teachbot.llm.scripted import ScriptedModel
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits

pytestmark = pytest.mark.timeout(pytest_timeout(60))

BOUNDS = Bounds()
SAY_ERROR = ("ArgumentTooLarge: say() takes at most 2000 characters (bounds.max_say_chars in config/interaction.yaml), "
             "got {n}; say it in fewer words")


def rss_mb() -> float:
    """This process's resident memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class Robot:
    """The tabletop API over a real DialogChannel; counts what reached the robot side, keeps no texts."""

    def __init__(self) -> None:
        self.published = 0
        self.longest = 0
        self.dialog = DialogChannel(self.publish, timeout=0.2)
        self.ran: list[str] = []

    def publish(self, text: str) -> None:
        self.published += 1
        self.longest = max(self.longest, len(text))

    def functions(self) -> dict:
        def moved(name: str):
            return lambda *args, **kwargs: self.ran.append(name) or "success"

        return {"say": self.dialog.say, "ask": self.dialog.ask, "wait_for_trigger": self.dialog.wait_for_trigger,
                "denormalize_xy": moved("denormalize_xy"), "put_first_on_second": moved("put_first_on_second")}


@pytest.fixture(scope="module")
def console():
    """The real sandbox with the tabletop API bound as the interaction core binds it (with the bounds)."""
    robot = Robot()
    # what is under test is memory, not speed: 1000 say() round trips can pass the shipped 10 s at load 19 on 2 cores
    limits = SandboxLimits(wall_time=120.0)
    with SandboxExecutor(RobotApi.load("tabletop").bind(robot.functions(), bounds=BOUNDS), limits) as executor:
        yield robot, executor


def test_the_shipped_config_has_the_bounds_and_the_core_applies_them():
    config = CoreConfig.from_config(load_yaml(resolve_config("interaction"))["interaction"])
    assert config.bounds == BOUNDS  # the defaults are the shipped values
    assert config.session.max_transcript_chars == config.bounds.max_transcript_chars == 60_000
    assert Bounds.from_config({"max_say_chars": "100"}).max_say_chars == 100
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['max_sai_chars'\] under 'bounds'"):
        Bounds.from_config({"max_sai_chars": 10})
    with pytest.raises(ConfigError, match="bounds.max_said_kept in config/interaction.yaml must be a positive"):
        Bounds.from_config({"max_said_kept": 0})

    robot = Robot()
    small = Bounds(max_say_chars=50, max_said_kept=3, max_argument_chars=100)
    core = InteractionCore(RobotApi.load("tabletop"), robot.functions(), robot.dialog, ScriptedModel([]),
                           config=CoreConfig(bounds=small))
    try:
        assert core.sandbox.run("say('x' * 51)").error.startswith("ArgumentTooLarge: say() takes at most 50 characters")
        assert core.sandbox.run("put_first_on_second('x' * 101, 'bowl')").error.startswith(
            "ArgumentTooLarge: put_first_on_second(): argument 1 (101 characters) is too long")
        assert core.sandbox.run("for i in range(10):\n    say(str(i))").error is None
        assert list(robot.dialog.said) == ["7", "8", "9"] and robot.ran == []
        core._say("a robot's own sentence " * 10)  # an error the core reports is cut, never refused
        assert robot.longest == 50 and robot.published == 11
    finally:
        core.shutdown()


def test_a_say_loop_keeps_the_parent_bounded(console):
    robot, executor = console
    long = BOUNDS.max_say_chars
    over = 50_000
    # the console sees the parent's ArgumentTooLarge as a RobotError whose kind is 'ArgumentTooLarge'
    loop = "for i in range({n}):\n    try:\n        say(str(i % 10) + 'x' * {size})\n    except RobotError as exc:\n        last = str(exc)"
    warm = executor.run(loop.format(n=50, size=over))
    assert warm.error is None, warm
    gc.collect()
    before, published = rss_mb(), robot.published
    for _ in range(2):  # 2000 over the limit: refused, nothing kept or published
        result = executor.run(loop.format(n=1000, size=over))
        assert result.error is None, result
    assert executor.run("last").outputs == [repr(SAY_ERROR.format(n=over + 1).split(": ", 1)[1])]
    assert robot.published == published
    for _ in range(2):  # 2000 at the limit: said, and only the newest max_said_kept are kept
        assert executor.run(f"for i in range(1000):\n    say(str(i % 10) + 'y' * {long - 1})").error is None
    gc.collect()
    growth = rss_mb() - before
    assert robot.published == published + 2000 and robot.longest == long
    assert len(robot.dialog.said) == BOUNDS.max_said_kept and robot.dialog.said[-1] == "9" + "y" * (long - 1)
    assert growth < 20, f"the parent grew by {growth:.1f} MB over 4000 say() calls"  # unbounded: ~100 MB

    result = executor.run(f"say('z' * {over})")  # the error line the LLM reads
    assert result.error == SAY_ERROR.format(n=over) and result.error_type == "ArgumentTooLarge"
    assert executor.run(f"ask('z' * {long + 1})").error.startswith(f"ArgumentTooLarge: ask() takes at most {long} characters")
    assert robot.published == published + 2000


@pytest.mark.parametrize(("source", "error"), [
    ("denormalize_xy([0] * 10**6)",  # reaches the parent (2 MB on the wire): refused there
     "ArgumentTooLarge: denormalize_xy(): argument 1 is too large: a robot call takes at most 1000 items in its arguments, "
     "nested ones counted (bounds.max_argument_items in config/interaction.yaml); pass less data per call"),
    ("denormalize_xy([[0.1] * 40] * 30)", "ArgumentTooLarge: denormalize_xy(): argument 1 is too large"),
    ("denormalize_xy({str(i): [i, i] for i in range(400)})", "ArgumentTooLarge: denormalize_xy(): argument 1 is too large"),
    ("x = [0.5]\nfor i in range(9):\n    x = [x]\ndenormalize_xy(x)",
     "ArgumentTooLarge: denormalize_xy(): argument 1 is nested too deeply: a robot call takes at most 8 levels"),
    ("put_first_on_second('red block', 'x' * 5000)",
     "ArgumentTooLarge: put_first_on_second(): argument 2 (5000 characters) is too long: a robot call takes at most 4000 "
     "characters of text in its arguments (bounds.max_argument_chars in config/interaction.yaml); pass shorter strings"),
    ("put_first_on_second('a' * 3000, target='b' * 3000)",
     "ArgumentTooLarge: put_first_on_second(): argument 'target' (3000 characters) is too long"),
    ("put_first_on_second('red block', 'bowl', **{'p' + str(i): 0.1 for i in range(1001)})",
     "ArgumentTooLarge: put_first_on_second(): 1003 arguments are too many"),
    ("denormalize_xy('x' * 10**7)", "ValueError: denormalize_xy(): the data is too large"),  # the worker refuses to send it
    ("x = [0.5]\nfor i in range(40):\n    x = [x]\ndenormalize_xy(x)", "ValueError: denormalize_xy(): the data is too large or nested"),
])
def test_oversized_arguments_are_refused_before_the_robot_function_runs(console, source, error):
    robot, executor = console
    robot.ran.clear()
    result = executor.run(source)
    assert result.error is not None and result.error.startswith(error), result
    assert robot.ran == [] and not result.killed
    assert executor.run("denormalize_xy([0.1, 0.2]) == 'success'").outputs == ["True"] and robot.ran == ["denormalize_xy"]


def test_the_parent_side_check_stops_at_the_limit():
    ran = []
    guarded = BOUNDS.guard("f", lambda *a, **k: ran.append(a))
    for args in (("x" * 10**7,), (list(range(10**6)),), ({i: "v" for i in range(10**5)},), (b"x" * 5000,)):
        with pytest.raises(ArgumentTooLarge, match=r"^f\(\): argument 1"):
            guarded(*args)
    nest: list = []
    for _ in range(30):
        nest = [nest]
    with pytest.raises(ArgumentTooLarge, match="nested too deeply"):
        guarded(nest)
    guarded("red block", [0.1, 0.2, 0.3], {"speed": 0.5})
    assert ran == [("red block", [0.1, 0.2, 0.3], {"speed": 0.5})]


def test_the_robots_own_sentences_are_cut_not_refused():
    dialog = DialogChannel()
    assert dialog.fit("short") == "short"
    cut = dialog.fit("w" * 10_000)
    assert len(cut) == BOUNDS.max_say_chars and cut.endswith(CUT)


def test_a_flood_of_utterances_or_a_huge_one_is_not_taken_and_the_robot_says_why():
    """dialog/user is an open topic: a 10 MB message or a loop publishing to it must not grow the node."""
    said: list[str] = []
    dialog = DialogChannel(said.append, timeout=0.2, bounds=Bounds(max_heard_chars=100, max_heard_waiting=3))
    assert dialog.put_user("x" * 101) is False
    assert said == ["What you said is too long for me (101 characters; I take at most 100), so I did not take it. "
                    "Please say it in fewer words."]
    assert [dialog.put_user(f"put block {i} in the bowl") for i in range(1000)] == [True] * 3 + [False] * 997
    assert said[1:] == ["You said 3 things I have not read yet, so I take nothing more until I have caught up. "
                        "Please wait for my answer."]  # once per flood, not 997 times
    assert dialog.wait_for_trigger()["text"] == "put block 0 in the bowl"  # the first ones stay, in order
    assert dialog.put_user("and the red one") is True and len(said) == 2  # caught up by one: taken again
    assert [dialog.wait_for_trigger()["text"] for _ in range(3)] == [
        "put block 1 in the bowl", "put block 2 in the bowl", "and the red one"]
    assert [dialog.put_user("again") for _ in range(5)] == [True] * 3 + [False] * 2 and len(said) == 3  # a new flood: said again
    dialog.close()  # closing is never refused: the session ends even with a full queue
    for _ in range(3):
        dialog.wait_for_trigger()
    with pytest.raises(SessionEnded):
        dialog.wait_for_trigger()


def test_the_transcript_elides_old_console_outputs_and_keeps_the_persons_words():
    transcript = Transcript(max_chars=3000)
    words = [f"request number {i}: " + "please " * 30 for i in range(5)]
    for i, said in enumerate(words):
        transcript.add_code("wait_for_trigger()")
        transcript.add_output(repr({"type": "dialog", "text": said}))
        transcript.add_code(f"print('{i}' * 2000)")
        transcript.add_output(str(i) * 2000)
        assert transcript.chars() == len(transcript.render()) <= 3000
    assert transcript.instructions() == words
    outputs = [e.text for e in transcript.entries if e.kind == "output" and "dialog" not in e.text]
    assert outputs[:-1] == [str(i) * 60 + ELIDED for i in range(4)]  # older ones: their head and the marker
    assert outputs[-1].startswith("4" * 60) and not transcript.over_limit
    assert [e.text for e in transcript.entries if e.kind == "code"][-1] == "print('4' * 2000)"  # code is never touched

    untouched = Transcript(max_chars=3000)
    for entry in (Entry("code", "get_obj_names()"), Entry("output", "['red block']")):
        (untouched.add_code if entry.kind == "code" else untouched.add_output)(entry.text)
    assert untouched.entries == [Entry("code", "get_obj_names()"), Entry("output", "['red block']")]


def test_a_console_session_stays_under_its_transcript_limit():
    robot = Robot()
    robot.dialog.timeout = 2.0
    bounded = SessionConfig(max_rounds=40, max_transcript_chars=6000)
    script = [step for i in range(6) for step in (f"for j in range(50):\n    print('{i}' * 1900)", "wait_for_trigger()")]
    script.append("wait_for_trigger()")  # the person has left: the session ends
    with SandboxExecutor(RobotApi.load("tabletop").bind(robot.functions(), bounds=BOUNDS)) as executor:
        session = ConsoleSession(executor, ScriptedModel(script), PromptBuilder.for_profile(RobotApi.load("tabletop")),
                                 config=bounded)
        for i in range(7):
            robot.dialog.put_user(f"instruction {i}: " + "word " * 100)
        robot.dialog.close()
        reason = session.run()
        assert reason == "the person ended the session"
        assert len(session.transcript.render()) <= 6000
        assert session.transcript.instructions() == [f"instruction {i}: " + "word " * 100 for i in range(7)]

        robot.dialog = DialogChannel(timeout=2.0)  # a person whose words alone are longer than the limit
        executor = SandboxExecutor(RobotApi.load("tabletop").bind(robot.functions(), bounds=BOUNDS))
        try:
            session = ConsoleSession(executor, ScriptedModel(["wait_for_trigger()"] * 5),
                                     PromptBuilder.for_profile(RobotApi.load("tabletop")), config=bounded)
            for i in range(6):  # each under the sandbox's 2000 characters of one output
                robot.dialog.put_user(f"part {i} " + "long " * 300)
            assert "longer than 6000 characters even with old outputs elided (bounds.max_transcript_chars" in session.run()
            assert session.transcript.instructions() == [f"part {i} " + "long " * 300 for i in range(4)]  # kept whole
        finally:
            executor.close()
