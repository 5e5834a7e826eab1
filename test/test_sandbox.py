"""Console semantics of the sandbox executor: what a snippet shows, how errors read, what persists, how kills recover.

The attacks live in test_sandbox_attacks.py; here the executor is used the way the console session uses it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, UnknownObjectError
from teachbot.paths import config_path
from teachbot.sandbox.executor import RunResult, SandboxExecutor, SandboxLimits

LIMITS = SandboxLimits(wall_time=3.0, cpu_time=2.0, memory_mb=256)
OBJECTS = ["red block", "green block", "blue bowl"]


class FakeRobot:
    """A robot API in the parent process that records what reached it."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.said: list[str] = []
        self.moves: list[tuple[str, str]] = []
        self.calls = 0
        self.kills = 0

    @property
    def api(self) -> dict[str, object]:
        names = ("get_obj_names", "put_first_on_second", "say", "get_pose", "lookup", "bad_result", "echo", "move_slowly",
                 "go_to", "wait_for_trigger")
        return {name: getattr(self, name) for name in names}

    def get_obj_names(self) -> list[str]:
        self.calls += 1
        return list(OBJECTS)

    def put_first_on_second(self, first: str, second: str) -> str:
        for name in (first, second):
            if name not in OBJECTS:
                raise ValueError(f"unknown object '{name}'; known: {', '.join(OBJECTS)}. Use one of get_obj_names()")
        self.moves.append((first, second))
        return "success"

    def say(self, text: str) -> None:
        self.said.append(text)

    def get_pose(self, name: str) -> np.ndarray:
        return np.array([0.1, -0.5, 0.02])

    def lookup(self, key: str) -> None:
        raise KeyError(key)

    def bad_result(self) -> object:
        return object()

    def echo(self, *args: object, **kwargs: object) -> object:
        return args, kwargs

    def move_slowly(self, seconds: float) -> str:
        time.sleep(seconds)
        return "arrived"

    def go_to(self, name: str) -> None:
        raise UnknownObjectError(f"unknown object '{name}'; use one of get_obj_names()")

    def wait_for_trigger(self) -> dict[str, str]:
        return {"type": "dialog", "text": "put the red block in the blue bowl"}

    def on_kill(self) -> list[str]:
        """Like SkillClient.cancel_all: the names of the goals it cancelled (no motion is left in flight here)."""
        self.kills += 1
        return []


@pytest.fixture(scope="module")
def robot() -> FakeRobot:
    return FakeRobot()


@pytest.fixture(scope="module")
def shared(robot: FakeRobot):
    with SandboxExecutor(robot.api, LIMITS, on_kill=robot.on_kill) as ex:
        yield ex


@pytest.fixture()
def ex(shared: SandboxExecutor, robot: FakeRobot) -> SandboxExecutor:
    shared.reset()
    robot.clear()
    return shared


def test_expression_values_are_shown_and_none_is_not(ex: SandboxExecutor, robot: FakeRobot) -> None:
    assert ex.run("1 + 1") == RunResult(outputs=["2"])
    assert ex.run("None") == RunResult()
    assert ex.run("say('hello')") == RunResult() and robot.said == ["hello"]
    assert ex.run("wait_for_trigger()").outputs == ["{'type': 'dialog', 'text': 'put the red block in the blue bowl'}"]
    assert ex.run("") == RunResult() and ex.run("# just a comment") == RunResult()


def test_assignment_shows_nothing_and_the_namespace_persists(ex: SandboxExecutor) -> None:
    assert ex.run("x = 5") == RunResult()
    assert ex.run("x * 2").outputs == ["10"]
    assert ex.run("objects = get_obj_names()") == RunResult()
    assert ex.run("len(objects)").outputs == ["3"]
    assert ex.names() == {"x", "objects"}


def test_for_loop_with_api_calls_shows_each_value_like_a_console(ex: SandboxExecutor, robot: FakeRobot) -> None:
    result = ex.run("for name in get_obj_names():\n    if 'block' in name:\n        put_first_on_second(name, 'blue bowl')")
    assert result == RunResult(outputs=["'success'", "'success'"])
    assert robot.moves == [("red block", "blue bowl"), ("green block", "blue bowl")]


def test_def_then_call(ex: SandboxExecutor) -> None:
    assert ex.run("def blocks():\n    return [n for n in get_obj_names() if n.endswith('block')]") == RunResult()
    assert ex.run("blocks()").outputs == ["['red block', 'green block']"]
    assert "blocks" in ex.names()


def test_multi_statement_snippet_runs_in_order(ex: SandboxExecutor) -> None:
    result = ex.run("a = 1\nb = a + 1\nb\nprint('b is', b)\nb * 10")
    assert result == RunResult(outputs=["2", "b is 2", "20"])


def test_print_output_is_captured_as_lines(ex: SandboxExecutor) -> None:
    result = ex.run("print('a', end='')\nprint('b')\nprint(1, 2, sep='-')\nprint()\nprint('two\\nlines')")
    assert result.outputs == ["ab", "1-2", "", "two", "lines"]


def test_an_error_stops_the_snippet_and_reads_as_one_line(ex: SandboxExecutor, robot: FakeRobot) -> None:
    result = ex.run("say('one')\nput_first_on_second('cup', 'blue bowl')\nsay('two')")
    assert result.error == "ValueError: unknown object 'cup'; known: red block, green block, blue bowl. Use one of get_obj_names()"
    assert (result.error_type, result.undefined_name, result.killed) == ("ValueError", None, False)
    assert robot.said == ["one"]
    result = ex.run("1\nprint('x')\n1 / 0\n2")
    assert result == RunResult(outputs=["1", "x"], error="ZeroDivisionError: division by zero", error_type="ZeroDivisionError")


def test_name_error_on_a_called_name_sets_undefined_name(ex: SandboxExecutor) -> None:
    result = ex.run("stack_blocks(['red block'])")
    assert result.error == "NameError: name 'stack_blocks' is not defined"
    assert (result.error_type, result.undefined_name) == ("NameError", "stack_blocks")
    assert ex.run("blocks + 1").undefined_name is None  # not called: nothing to generate
    assert ex.run("def tidy():\n    return sort_blocks()") == RunResult()
    assert ex.run("tidy()").undefined_name == "sort_blocks"  # called inside an earlier def


def test_api_exceptions_keep_class_and_message(ex: SandboxExecutor) -> None:
    result = ex.run("go_to('cup')")
    assert result.error == "UnknownObjectError: unknown object 'cup'; use one of get_obj_names()"
    assert result.error_type == "UnknownObjectError"
    assert ex.run("lookup('x')").error == "KeyError: 'x'"
    caught = ex.run("try:\n    put_first_on_second('cup', 'bowl')\nexcept ValueError as e:\n    print('caught:', e)")
    assert caught.outputs == ["caught: unknown object 'cup'; known: red block, green block, blue bowl. Use one of get_obj_names()"]
    assert ex.run("try:\n    go_to('cup')\nexcept RobotError as e:\n    e.kind").outputs == ["'UnknownObjectError'"]


def test_plain_data_crosses_both_ways(ex: SandboxExecutor) -> None:
    result = ex.run("echo(1, 2.5, 'a', b'b', [1], (2,), {3}, frozenset({4}), {'k': (1, None, True)}, float('inf'), key=-1)")
    expected = ((1, 2.5, "a", b"b", [1], (2,), {3}, frozenset({4}), {"k": (1, None, True)}, float("inf")), {"key": -1})
    assert result.outputs == [repr(expected)]


def test_non_plain_arguments_are_refused_before_reaching_the_robot(ex: SandboxExecutor, robot: FakeRobot) -> None:
    result = ex.run("say(lambda: 1)")
    assert result.error_type == "TypeError"
    plain = "None, bool, int, float, str, bytes, list, tuple, dict, set"
    assert result.error == f"TypeError: say() takes plain data only ({plain}); got function"
    assert ex.run("say([iter([1])])").error_type == "TypeError"
    assert robot.said == []


def test_numpy_results_become_lists_and_other_objects_are_refused(ex: SandboxExecutor) -> None:
    assert ex.run("get_pose('red block')").outputs == ["[0.1, -0.5, 0.02]"]
    result = ex.run("bad_result()")
    assert result.error_type == "TypeError"
    assert result.error.startswith("TypeError: robot API function bad_result() returned object, which cannot cross into the console")


def test_api_calls_at_the_recursion_limit_stay_in_step(ex: SandboxExecutor, robot: FakeRobot) -> None:
    result = ex.run("def dive(d):\n    get_obj_names()\n    return dive(d + 1)\ndive(0)")
    assert result.error_type == "RecursionError"
    calls = robot.calls
    assert ex.run("get_obj_names()").outputs == [repr(OBJECTS)] and robot.calls == calls + 1


def test_reset_gives_a_fresh_namespace(ex: SandboxExecutor) -> None:
    ex.run("x = 1\ndef f():\n    return 2")
    ex.reset()
    assert ex.names() == set()
    assert ex.run("x").error == "NameError: name 'x' is not defined"
    assert ex.run("get_obj_names()").outputs == [repr(OBJECTS)]  # the robot API survives a reset


def test_syntax_errors_are_one_line_and_nothing_runs(ex: SandboxExecutor, robot: FakeRobot) -> None:
    result = ex.run("say('a')\nx = (")
    assert result.error_type == "SyntaxError" and result.error.startswith("SyntaxError: ") and "(line 2)" in result.error
    assert robot.said == []
    assert ex.run("return 5").error_type == "SyntaxError"  # found by the compiler, not the parser


def test_long_values_are_cut_with_a_marker(ex: SandboxExecutor) -> None:
    (out,) = ex.run("list(range(10000))").outputs
    assert len(out) == LIMITS.max_output_chars + len("... [truncated]") and out.endswith("... [truncated]")


def test_time_inside_api_calls_does_not_count(robot: FakeRobot) -> None:
    with SandboxExecutor(robot.api, SandboxLimits(wall_time=0.5, cpu_time=5.0), on_kill=robot.on_kill) as ex:
        kills = robot.kills
        assert ex.run("for i in range(3):\n    move_slowly(0.3)").outputs == ["'arrived'"] * 3
        assert robot.kills == kills


def test_wall_clock_kill_cancels_motions_restores_namespace_and_replays_no_api_call() -> None:
    robot = FakeRobot()
    with SandboxExecutor(robot.api, SandboxLimits(wall_time=0.5, cpu_time=10.0), on_kill=robot.on_kill) as ex:
        for source in ("x = 41", "def inc(v):\n    return v + 1", "names = get_obj_names()", "f = lambda: 1"):
            assert ex.run(source) == RunResult()
        result = ex.run("say('before')\nwhile True:\n    pass")
        assert result.killed and result.error_type == "Timeout" and robot.kills == 1
        assert result.error == "Timeout: the code ran longer than 0.5 s and was stopped; no robot motion was in progress; not restored: f"
        assert robot.calls == 1 and robot.said == ["before"]  # the restore replayed no robot call
        assert ex.run("inc(x)").outputs == ["42"]
        assert ex.run("names").outputs == [repr(OBJECTS)]
        assert ex.names() == {"x", "inc", "names"}


def test_cpu_limit_kills_busy_code() -> None:
    robot = FakeRobot()
    with SandboxExecutor(robot.api, SandboxLimits(wall_time=20.0, cpu_time=1.0), on_kill=robot.on_kill) as ex:
        result = ex.run("n = 0\nwhile True:\n    n += 1")
        assert result.error == "Timeout: the code used more than 1 s of CPU time and was stopped; no robot motion was in progress"
        assert result.killed and robot.kills == 1
        assert ex.run("1 + 1").outputs == ["2"]


def test_a_failing_on_kill_is_reported_in_the_same_line() -> None:
    def on_kill() -> None:
        raise RuntimeError("goal server down")

    with SandboxExecutor({}, SandboxLimits(wall_time=0.3), on_kill=on_kill) as ex:
        result = ex.run("while True:\n    pass")
        assert result.error.endswith("; cancelling robot motions failed (RuntimeError: goal server down)")
        assert "\n" not in result.error


def test_a_worker_that_dies_between_runs_is_replaced(ex: SandboxExecutor) -> None:
    ex.run("x = 7")
    os.kill(ex._worker.proc.pid, signal.SIGKILL)
    ex._worker.proc.wait()
    assert ex.run("x + 1").outputs == ["8"]


def test_close_kills_the_worker_and_later_runs_raise(robot: FakeRobot) -> None:
    with SandboxExecutor(robot.api) as ex:
        proc = ex._worker.proc
        assert ex.run("1").outputs == ["1"]
    assert proc.poll() is not None
    with pytest.raises(RuntimeError, match="closed"):
        ex.run("1")
    ex.close()  # idempotent


def test_calling_back_into_the_executor_from_the_robot_api_is_an_error_line() -> None:
    holder: list[SandboxExecutor] = []
    with SandboxExecutor({"nested": lambda: holder[0].run("1")}) as ex:
        holder.append(ex)
        result = ex.run("nested()")
        assert result.error_type == "RuntimeError" and "not re-entrant" in result.error
        assert ex.run("1 + 1").outputs == ["2"]


def test_runs_from_several_threads_are_serialised(ex: SandboxExecutor) -> None:
    results: list[RunResult] = []
    threads = [threading.Thread(target=lambda i=i: results.append(ex.run(f"{i} * 2"))) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.outputs[0] for r in results) == sorted(str(i * 2) for i in range(8))


def test_api_names_must_be_public_identifiers() -> None:
    for name in ("_secret", "not valid", "class"):
        with pytest.raises(ValueError, match="public Python identifier"):
            SandboxExecutor({name: print})


def test_limits_come_from_config() -> None:
    raw = load_yaml(config_path("sandbox.yaml"))
    assert SandboxLimits.from_config(raw["limits"]) == SandboxLimits()
    assert SandboxLimits.from_config(raw) == SandboxLimits()
    assert SandboxLimits.from_config({"wall_time": 3, "memory_mb": 300}) == SandboxLimits(wall_time=3.0, memory_mb=300)
    with pytest.raises(ConfigError, match="unknown key"):
        SandboxLimits.from_config({"wall_tme": 3})
    with pytest.raises(ConfigError, match="positive"):
        SandboxLimits.from_config({"cpu_time": -1})
    with pytest.raises(ConfigError):
        SandboxLimits.from_config({"memory_mb": "lots"})
