"""Motion safety: a timed-out skill call cancels its goal, a sandbox kill says what it really cancelled, and the
robot's motions have a time budget per snippet and per episode (config/sandbox.yaml).

The sandbox tests use a fake skills client and a clock that a fake motion moves on (so budgets are exact and
nothing sleeps); the SkillClient tests run real rclpy in this process against a fake action server for the
``wait`` skill whose goal never finishes unless cancelled.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from timing import deadline, pytest_timeout, timeout

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, ControllerError, ErrorCode, MotionTimeoutError, RobotTimeBudgetExceeded
from teachbot.language.registry import RobotApi
from teachbot.paths import config_path
from teachbot.sandbox import robot_time
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits
from teachbot.sandbox.robot_time import RobotClock, not_counted, time_left

pytestmark = pytest.mark.timeout(pytest_timeout(120))


# ---------------------------------------------------------------------- the sandbox, with fakes
class FakeClock:
    """time for teachbot.sandbox.robot_time: the real monotonic clock plus what fake motions and waits added."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


class FakeSkills:
    """Robot API functions over a fake skills client: motions take clock time, goals can be left in flight."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.in_flight: list[str] = []
        self.moves: list[float] = []
        self.left: list[tuple[float, str] | None] = []  # time_left() as each motion saw it

    def api(self) -> dict[str, Any]:
        return {"move": self.move, "approved_move": self.approved_move, "start": self.start, "ask": self.ask,
                "say": lambda text: None}

    def move(self, seconds: float) -> str:
        self.left.append(time_left())
        self.moves.append(seconds)
        self.clock.offset += seconds
        return "success"

    def approved_move(self, wait: float, seconds: float) -> str:
        with not_counted():  # waiting for the person's approval
            self.clock.offset += wait
        return self.move(seconds)

    def start(self, name: str) -> None:
        """A goal sent and left running (as a call that gave up waiting, or was interrupted, leaves it)."""
        self.in_flight.append(name)

    def ask(self, question: str, seconds: float) -> dict[str, str]:
        self.clock.offset += seconds  # the person takes their time
        return {"type": "dialog", "text": "yes"}

    def cancel_all(self) -> list[str]:
        cancelled, self.in_flight = self.in_flight, []
        return cancelled


MOTIONS = ("move", "approved_move")


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(robot_time, "time", fake)
    return fake


@pytest.fixture()
def skills(clock: FakeClock) -> FakeSkills:
    return FakeSkills(clock)


def _sandbox(skills: FakeSkills, **limits: float) -> SandboxExecutor:
    settings = {"wall_time": 3.0, "cpu_time": 2.0, "memory_mb": 256, **limits}
    return SandboxExecutor(skills.api(), SandboxLimits(**settings), on_kill=skills.cancel_all, robot_functions=MOTIONS)


def test_a_kill_says_which_goals_it_cancelled_and_when_there_were_none(skills: FakeSkills) -> None:
    with _sandbox(skills, wall_time=0.5) as ex:
        result = ex.run("start('grasp')\nwhile True:\n    pass")
        assert result.killed and result.error == "Timeout: the code ran longer than 0.5 s and was stopped; cancelled the robot's grasp"
        assert skills.in_flight == []
        result = ex.run("while True:\n    pass")
        assert result.error == "Timeout: the code ran longer than 0.5 s and was stopped; no robot motion was in progress"
        result = ex.run("start('move_to')\nstart('grasp')\nwhile True:\n    pass")
        assert result.error.endswith("; cancelled the robot's move_to and grasp")


@pytest.mark.parametrize(("returned", "note"), [
    (None, "; the robot was asked to cancel its motions"),  # an on_kill that does not say
    (0, "; the robot was asked to cancel 0 motions"),  # an old caller's count
    (1, "; the robot was asked to cancel 1 motion"),
    (("a", "b", "c"), "; cancelled the robot's a, b and c"),
    (ControllerError("the cancel of grasp was not answered within 5 s;\nthe arm may still move"),
     "; cancelling robot motions failed (ControllerError: the cancel of grasp was not answered within 5 s; the arm may still move)"),
])
def test_every_kind_of_on_kill_answer_reads_as_one_true_line(returned: Any, note: str) -> None:
    def on_kill() -> Any:
        if isinstance(returned, Exception):
            raise returned
        return returned

    with SandboxExecutor({}, SandboxLimits(wall_time=0.3), on_kill=on_kill) as ex:
        result = ex.run("while True:\n    pass")
        assert result.error == f"Timeout: the code ran longer than 0.3 s and was stopped{note}"


def test_a_snippet_that_used_its_robot_time_is_refused_further_motions(skills: FakeSkills) -> None:
    with _sandbox(skills, robot_time_per_snippet=10.0, robot_time_per_episode=100.0) as ex:
        result = ex.run("for i in range(10):\n    move(4.0)")
        assert skills.moves == [4.0] * 3  # 0, 4 and 8 s used before each: the third ran past, the fourth never started
        assert result.error_type == "RobotTimeBudgetExceeded"
        assert result.error == ("RobotTimeBudgetExceeded: move() was not started: the robot's motions in this snippet have "
                                "used all of their 10 s (robot_time_per_snippet in config/sandbox.yaml); go on in a new snippet")
        assert ex.run("move(4.0)").outputs == ["'success'"]  # a new snippet has its own budget


def test_the_episode_budget_spans_snippets_until_a_new_episode(skills: FakeSkills) -> None:
    with _sandbox(skills, robot_time_per_snippet=10.0, robot_time_per_episode=12.0) as ex:
        assert ex.run("move(7.0)").error is None
        assert ex.run("move(7.0)").error is None  # 7 s used: some left when it started
        result = ex.run("say('one more')\nmove(1.0)")
        assert result.error == ("RobotTimeBudgetExceeded: move() was not started: the robot's motions in this episode have "
                                "used all of their 12 s (robot_time_per_episode in config/sandbox.yaml); tell the person, "
                                "the robot can move again in the next episode")
        assert skills.moves == [7.0, 7.0]
        ex.reset()  # a reset namespace is not a new episode
        assert ex.run("move(1.0)").error_type == "RobotTimeBudgetExceeded"
        ex.new_episode()
        assert ex.run("move(1.0)").outputs == ["'success'"]


def test_waiting_for_the_person_uses_no_robot_time(skills: FakeSkills) -> None:
    with _sandbox(skills, robot_time_per_snippet=10.0, robot_time_per_episode=10.0) as ex:
        result = ex.run("ask('shall I?', 1000.0)\nmove(6.0)\napproved_move(1000.0, 3.0)\nmove(0.5)")
        assert result.error is None and skills.moves == [6.0, 3.0, 0.5]  # 2000 s of waiting did not count
        assert ex.run("move(1.0)").error is None  # 0.5 s were left when it started
        assert ex.run("move(1.0)").error_type == "RobotTimeBudgetExceeded"


def test_a_motion_sees_what_is_left_of_the_budget_that_runs_out_first(skills: FakeSkills) -> None:
    assert time_left() is None  # outside a console motion
    with _sandbox(skills, robot_time_per_snippet=10.0, robot_time_per_episode=25.0) as ex:
        ex.run("move(8.0)")
        ex.run("move(8.0)\nmove(1.0)")
        ex.run("move(1.0)")
    (left_1, budget_1), (left_2, budget_2), (left_3, budget_3), (left_4, budget_4) = skills.left
    assert budget_1 == budget_2 == budget_3 == "robot_time_per_snippet" and budget_4 == "robot_time_per_episode"
    assert left_1 == pytest.approx(10.0, abs=0.5) and left_3 == pytest.approx(2.0, abs=0.5)
    assert left_4 == pytest.approx(25.0 - 17.0, abs=0.5)
    assert time_left() is None


def test_the_robot_clock_alone() -> None:
    clock = RobotClock(per_snippet=5.0, per_episode=8.0)
    assert clock.left() == (5.0, "robot_time_per_snippet")
    clock.snippet, clock.episode = 5.0, 5.0
    with pytest.raises(RobotTimeBudgetExceeded, match=r"grasp\(\) was not started") as refused, clock.motion("grasp"):
        pytest.fail("a used-up budget must not start the motion")
    assert refused.value.code == ErrorCode.LIMIT_EXCEEDED
    clock.new_snippet()
    assert clock.left() == (3.0, "robot_time_per_episode")
    clock.new_episode()
    assert (clock.snippet, clock.episode) == (0.0, 0.0)


def test_robot_functions_must_be_api_functions() -> None:
    with pytest.raises(ValueError, match="'grasp'"):
        SandboxExecutor({"say": print}, robot_functions=("grasp",))


def test_the_budgets_come_from_the_sandbox_config() -> None:
    limits = SandboxLimits.from_config(load_yaml(config_path("sandbox.yaml")))
    assert (limits.robot_time_per_snippet, limits.robot_time_per_episode) == (300.0, 900.0)
    with pytest.raises(ConfigError, match="robot_time_per_episode"):
        SandboxLimits.from_config({"limits": {"robot_time_per_episode": 0}})


def test_the_profiles_mark_their_motions_and_the_prompt_does_not_show_it(tmp_path: Path) -> None:
    assert RobotApi.load("tabletop").motion_names == {"put_first_on_second"}
    household = RobotApi.load("household")
    assert {"move_to", "grasp", "place_object", "handover_object_to_human", "wipe"} <= household.motion_names
    assert not {"wait_for_trigger", "say", "ask", "list_objects", "learn_from_interaction", "check_action"} & household.motion_names
    unflagged = RobotApi(household.profile, tuple(dataclasses.replace(f, motion=False) for f in household.functions))
    assert household.import_block() == unflagged.import_block()  # the prompt (and the recorded bags) stay as they were
    bad = tmp_path / "bad.yaml"
    bad.write_text("functions:\n  - {name: go, signature: '() -> str', doc: 'Go.', motion: 'yes'}\n")
    with pytest.raises(ConfigError, match="'motion' must be true or false"):
        RobotApi.load(str(bad))


# ---------------------------------------------------------------------- SkillClient over real rclpy
class FakeWaitServer:
    """skills/wait whose goal runs until cancelled (or its duration passes), busy while one runs, as the skills node."""

    def __init__(self, node: Any) -> None:
        from rclpy.action import ActionServer, CancelResponse, GoalResponse
        from rclpy.callback_groups import ReentrantCallbackGroup
        from teachbot_interfaces.action import Wait

        self.wait_type = Wait
        self.accept_cancel = True
        self.cancels: list[str] = []  # 'accepted' or 'rejected', as the server answered
        self.outcomes: list[str] = []
        self.running = threading.Event()
        self._busy = threading.Lock()

        def on_cancel(_goal: Any) -> Any:
            self.cancels.append("accepted" if self.accept_cancel else "rejected")
            return CancelResponse.ACCEPT if self.accept_cancel else CancelResponse.REJECT

        self.server = ActionServer(node, Wait, "skills/wait", execute_callback=self.execute, goal_callback=lambda _g: GoalResponse.ACCEPT,
                                   cancel_callback=on_cancel, callback_group=ReentrantCallbackGroup())

    def execute(self, goal_handle: Any) -> Any:
        from teachbot_interfaces.msg import SkillResult

        if not self._busy.acquire(blocking=False):
            goal_handle.abort()
            self.outcomes.append("busy")
            return self.wait_type.Result(result=SkillResult(success=False, code=int(ErrorCode.BUSY), message="busy"))
        try:
            self.running.set()
            end = time.monotonic() + goal_handle.request.duration
            while time.monotonic() < end and not goal_handle.is_cancel_requested:
                time.sleep(0.01)
            if goal_handle.is_cancel_requested:
                goal_handle.canceled()
                self.outcomes.append("canceled")
                return self.wait_type.Result(result=SkillResult(success=False, code=int(ErrorCode.CANCELED), message="canceled"))
            goal_handle.succeed()
            self.outcomes.append("succeeded")
            return self.wait_type.Result(result=SkillResult(success=True, code=0, message=""))
        finally:
            self.running.clear()
            self._busy.release()


@pytest.fixture(scope="module")
def ros(ros_context: None) -> Iterator[SimpleNamespace]:
    """A fake skills server and a SkillClient in a namespace of their own (the session's stack has a real skills/wait)."""
    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from teachbot.nodes.skill_client import SkillClient

    namespace = f"/motion_safety_{os.getpid()}"
    server_node = rclpy.create_node("fake_skills", namespace=namespace)
    server = FakeWaitServer(server_node)
    executor = MultiThreadedExecutor(num_threads=3)
    executor.add_node(server_node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)

    thread = threading.Thread(target=spin, daemon=True, name="fake-skills")
    thread.start()
    client = SkillClient(rclpy.create_node("motion_safety_client", namespace=namespace))
    client.spin_in_background()
    until = deadline(30.0)
    while True:  # discovery, then a real round trip (the first answer may be lost before the reply writer matches:
        # each try waits 2 s for the goal's acceptance, as SkillClient.wait_ready's probes do)
        try:
            client.send("wait", timeout=timeout(2.0), duration=0.0).result(timeout(2.0))
            break
        except (ControllerError, MotionTimeoutError):
            assert time.monotonic() < until, "the fake skills/wait server did not answer"
    yield SimpleNamespace(client=client, server=server)
    client.close()
    client.node.destroy_node()
    stop.set()
    thread.join(timeout=10.0)
    executor.shutdown(timeout_sec=2.0)
    server.server.destroy()
    server_node.destroy_node()


def _settled(ros: SimpleNamespace) -> None:
    """Between tests: nothing running on the server, nothing in flight on the client."""
    until = deadline(20.0)
    while ros.server.running.is_set() or ros.client.in_flight():
        assert time.monotonic() < until, "the fake skill did not settle"
        time.sleep(0.02)
    ros.server.cancels.clear()
    ros.server.outcomes.clear()
    ros.server.accept_cancel = True


def test_a_timed_out_call_cancels_its_goal_and_the_next_goal_runs(ros: SimpleNamespace) -> None:
    _settled(ros)
    started = time.monotonic()
    with pytest.raises(MotionTimeoutError) as timed_out:
        ros.client.call("wait", timeout=1.0, duration=600.0)
    assert str(timed_out.value) == "skill wait did not finish within 1 s; the goal was cancelled and the skill stopped"
    assert time.monotonic() - started < 10.0  # the property: it gave up at its 1 s and a cancel, not with the 600 s goal
    assert ros.server.cancels == ["accepted"] and ros.server.outcomes == ["canceled"]
    assert ros.client.in_flight() == []
    result = ros.client.call("wait", timeout=timeout(30.0), duration=0.0)
    assert result.success and ros.server.outcomes == ["canceled", "succeeded"]  # not refused as busy


def test_a_refused_cancel_is_reported_and_the_goal_stays_in_flight(ros: SimpleNamespace) -> None:
    _settled(ros)
    ros.client.cancel_grace = 1.0
    ros.server.accept_cancel = False
    try:
        with pytest.raises(MotionTimeoutError, match=r"^skill wait did not finish within 0.5 s; the skills node refused to "
                                                     r"cancel the goal; the arm may still move$"):
            ros.client.call("wait", timeout=0.5, duration=600.0)
        assert [h.name for h in ros.client.in_flight()] == ["wait"] and ros.server.running.is_set()
        with pytest.raises(ControllerError, match=r"^the skills node refused to cancel wait; the arm may still move$"):
            ros.client.cancel_all()
        ros.server.accept_cancel = True
        assert ros.client.cancel_all() == ["wait"]  # a kill now stops the goal the timed-out call left behind
    finally:
        ros.client.cancel_grace = 5.0
        ros.server.accept_cancel = True
    _settled(ros)
    assert ros.client.cancel_all() == []


def test_cancel_all_names_the_goals_it_cancelled(ros: SimpleNamespace) -> None:
    _settled(ros)
    results: list[Any] = []
    caller = threading.Thread(target=lambda: results.append(ros.client.call("wait", timeout=60.0, duration=600.0)))
    caller.start()
    until = deadline(20.0)
    while not (ros.client.in_flight() and ros.server.running.is_set()):
        assert time.monotonic() < until, "the goal did not start"
        time.sleep(0.02)
    assert ros.client.waiting_on("wait")
    assert ros.client.cancel_all() == ["wait"]
    caller.join(timeout=timeout(20.0))
    assert not caller.is_alive() and results[0].code == ErrorCode.CANCELED  # the waiting call got the cancelled result
    _settled(ros)
    assert ros.client.cancel_all() == []


def test_a_motion_in_the_console_is_cut_to_what_is_left_of_its_robot_time(ros: SimpleNamespace) -> None:
    _settled(ros)
    with RobotClock(per_snippet=1.0, per_episode=100.0).motion("wait"), pytest.raises(MotionTimeoutError) as timed_out:
        ros.client.call("wait", timeout=60.0, duration=600.0)
    assert str(timed_out.value).startswith("skill wait did not finish within ")
    assert str(timed_out.value).endswith(" s (what was left of robot_time_per_snippet in config/sandbox.yaml); "
                                         "the goal was cancelled and the skill stopped")
    assert ros.server.cancels == ["accepted"]
