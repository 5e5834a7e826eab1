"""Defining a function runs nothing the transcript does not show (issue 31, item 8).

A default value, a decorator or an annotation runs when the ``def`` runs, not when the function is
called; the console refuses those that are not literals (or type names), before anything runs, so a
generated helper cannot move the robot as it is defined. A generated definition that ran is in the
transcript with its output even when it failed.
"""

from __future__ import annotations

import ast

import pytest

from teachbot.console.prompt import PromptBuilder
from teachbot.console.session import ConsoleSession, SessionConfig
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.llm.scripted import ScriptedModel
from teachbot.sandbox._sandbox_defs import definition_problem, is_literal
from teachbot.sandbox.executor import RunResult, SandboxExecutor, SandboxLimits

LIMITS = SandboxLimits(wall_time=5.0, cpu_time=3.0, memory_mb=256)


class Robot:
    """The tabletop API's motions recorded, over a real dialog channel."""

    def __init__(self) -> None:
        self.moves: list[tuple[str, ...]] = []
        self.dialog = DialogChannel(timeout=2.0)

    def functions(self) -> dict:
        def put_first_on_second(first: str, second: str) -> str:
            self.moves.append((first, second))
            return "success"

        return {"put_first_on_second": put_first_on_second, "say": self.dialog.say,
                "wait_for_trigger": self.dialog.wait_for_trigger, "get_obj_names": lambda: ["red block", "blue bowl"]}


@pytest.fixture(scope="module")
def robot_console():
    robot = Robot()
    with SandboxExecutor(RobotApi.load("tabletop").bind(robot.functions()), limits=LIMITS) as executor:
        yield robot, executor


ACTING_DEFINITIONS = [
    ("def f(x=put_first_on_second('red block', 'blue bowl')):\n    pass", "default value"),
    ("def f(*, x=put_first_on_second('red block', 'blue bowl')):\n    pass", "default value"),
    ("def f(x=[put_first_on_second('red block', 'blue bowl')]):\n    pass", "default value"),
    ("def f(x=(1, 2)[put_first_on_second('red block', 'blue bowl') == 'success']):\n    pass", "default value"),
    ("f = lambda x=put_first_on_second('red block', 'blue bowl'): x", "default value"),
    ("def outer():\n    def inner(x=put_first_on_second('red block', 'blue bowl')):\n        pass\n    return inner\nouter()",
     "default value"),
    ("@put_first_on_second\ndef f():\n    pass", "decorator"),
    ("def helper(fn):\n    put_first_on_second('red block', 'blue bowl')\n    return fn\n@helper\ndef f():\n    pass",
     "decorator"),
    ("@say\ndef f():\n    pass", "decorator"),
    ("def f(x: put_first_on_second('red block', 'blue bowl')):\n    pass", "annotation"),
    ("def f() -> put_first_on_second('red block', 'blue bowl'):\n    pass", "annotation"),
]


@pytest.mark.parametrize(("source", "what"), ACTING_DEFINITIONS, ids=range(len(ACTING_DEFINITIONS)))
def test_a_definition_that_would_act_is_refused_and_nothing_moves(robot_console, source, what):
    robot, executor = robot_console
    robot.moves.clear()
    result = executor.run(source)
    assert result.error_type == "SandboxViolation", result
    assert what in result.error and "is not allowed in the robot console" in result.error, result.error
    assert robot.moves == []
    assert executor.refusal(source) == result  # refused before anything ran


def test_the_error_says_why_and_what_to_do_instead(robot_console):
    _, executor = robot_console
    error = executor.run("def f(x=put_first_on_second('red block', 'blue bowl')):\n    pass").error
    assert error == ("SandboxViolation: the default value \"put_first_on_second('red block', 'blue bowl')\", which is not "
                     "a literal, is not allowed in the robot console; a default runs when the function is defined; use a "
                     "literal such as None and compute the value inside the body")


def test_literal_defaults_and_type_annotations_still_define(robot_console):
    robot, executor = robot_console
    robot.moves.clear()
    source = ("def place(first: str, second: str = 'blue bowl', times: int = -1, *, where: list[str] | None = None,\n"
              "          extra: dict = {'k': (1.5, True, None)}) -> str:\n"
              "    return put_first_on_second(first, second)")
    assert executor.run(source).error is None
    assert robot.moves == []
    assert executor.run("place('red block')").outputs == ["'success'"]
    assert robot.moves == [("red block", "blue bowl")]


def test_literals_are_what_ast_literal_eval_reads_without_set():
    for text in ("None", "-1", "+2.5", "'a'", "b'x'", "(1, 'a')", "[1, [2]]", "{1, 2}", "{'k': (1, None)}", "1j"):
        assert is_literal(ast.parse(text, mode="eval").body), text
    for text in ("set()", "x", "-x", "1 + 2", "[f()]", "{**d}", "not True", "(lambda: 0)", "[n for n in 'ab']"):
        assert not is_literal(ast.parse(text, mode="eval").body), text
    assert definition_problem(ast.parse("x = 1").body[0]) is None


def session(executor: SandboxExecutor, script: list[str], functions: list[str]) -> ConsoleSession:
    return ConsoleSession(executor, ScriptedModel(script), PromptBuilder.for_profile(RobotApi.load("tabletop")),
                          function_model=ScriptedModel(functions), config=SessionConfig(max_rounds=3))


class ActingDefinitions:
    """The real sandbox, except that a ``def`` runs as one with an acting default did before the policy: it prints
    and fails. No definition can do that through the real sandbox any more; the session must still show it if one does."""

    def __init__(self, executor: SandboxExecutor) -> None:
        self.executor = executor
        self.refusal, self.names = executor.refusal, executor.names

    def run(self, source: str) -> RunResult:
        if source.startswith("def "):
            return RunResult(outputs=["'success'"], error="ValueError: unknown object 'green cube'", error_type="ValueError")
        return self.executor.run(source)


def test_a_generated_definition_that_ran_and_failed_is_in_the_transcript_with_its_output(robot_console):
    robot, executor = robot_console
    robot.dialog.put_user("put the red block in the blue bowl")
    console = ConsoleSession(ActingDefinitions(executor), ScriptedModel(["tidy_up()"]),  # type: ignore[arg-type]
                             PromptBuilder.for_profile(RobotApi.load("tabletop")),
                             function_model=ScriptedModel(["def tidy_up():\n    return 'tidy'"]),
                             config=SessionConfig(max_rounds=3))
    console.begin()
    console.step()
    lines = console.transcript.render().splitlines()
    assert lines[2:7] == [
        ">>> def tidy_up():",
        "...     return 'tidy'",
        "'success'",
        "ValueError: unknown object 'green cube'",
        ">>> tidy_up()",
    ], lines
    assert lines[7].startswith("NameError: name 'tidy_up' is not defined"), lines


def test_a_generated_definition_that_would_move_the_robot_never_runs(robot_console):
    robot, executor = robot_console
    robot.moves.clear()
    robot.dialog.put_user("put the red block in the blue bowl")
    console = session(executor, ["tidy_up()"],
                      ["def tidy_up(done=put_first_on_second('red block', 'blue bowl')):\n    return done"])
    console.begin()
    console.step()
    assert robot.moves == []
    code = console.transcript.code()
    assert code == ["wait_for_trigger()", "tidy_up()"], code  # nothing ran, so nothing to show but the NameError
    assert console.transcript.render().splitlines()[-1].startswith("NameError: name 'tidy_up' is not defined")
