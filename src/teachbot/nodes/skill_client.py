"""A facade over the skills' actions and the simulator's services, for callers that are not nodes.

In the manner of nav2_simple_commander, but every wait has an overall timeout and a failure is a
:class:`~teachbot.errors.TeachbotError` (or a result with a message), never ``None`` plus hidden state.
The node it owns must be spun by an executor (the caller's, or :meth:`SkillClient.spin_in_background`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from action_msgs.msg import GoalStatus
from action_msgs.srv import CancelGoal
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Bool
from teachbot_interfaces.msg import SkillResult
from teachbot_interfaces.srv import GetWorldState, ReleaseHandover, ResetScene

from teachbot.errors import ControllerError, InvalidArgumentError, MotionTimeoutError
from teachbot.nodes.action_client import ActionClient
from teachbot.nodes.common import COMMAND_QOS, DONE, GONE, STOPPED, wait_served
from teachbot.nodes.skills_node import SKILLS, skills_for
from teachbot.robot_profile import RobotProfile
from teachbot.sandbox.robot_time import time_left
from teachbot.skills.household_signatures import HOUSEHOLD_SKILLS
from teachbot.skills.parameters import NAMES_FIELD, VALUES_FIELD
from teachbot.tracing import fail, set_attributes, span, trace_parent
from teachbot.tracing.spans import arguments_text

DISCOVERY_GRACE = 1.0  # seconds a just-started caller waits to discover a skill server
# seconds a node that is on the graph may take to accept a goal or answer a sim service: a loaded machine may keep
# its executor busy for seconds; a node that is gone is noticed through the graph within about 1 s (wait_served)
ANSWER_TIMEOUT = 30.0
CANCEL_GRACE = 5.0  # seconds a timed-out call waits for its cancel to be accepted and the skill to stop

# what a skills node answered to a cancel request (GONE as wait_served's: the goal or its server is no more)
ACCEPTED, REFUSED, UNANSWERED = "accepted", "refused", "unanswered"

# what a goal cancelled with a fault raises from call(): built from the skill's name and what became of the motion
Fault = Callable[[str, str], Exception]


@dataclass(eq=False)
class SkillHandle:
    """A goal in flight: wait for it, read its feedback, or cancel it."""

    name: str
    goal_handle: Any
    feedback: list[tuple[str, float]]
    fault: Fault | None = field(default=None, init=False, repr=False)  # set by cancel_all(fault=...): why it was stopped
    _result: Any = field(default=None, init=False, repr=False)

    def cancel(self, timeout: float = 5.0) -> CancelGoal.Response:
        """Ask the server to cancel the goal; its answer (MotionTimeoutError when none comes within ``timeout``)."""
        return _wait_future(self.goal_handle.cancel_goal_async(), timeout, f"cancel of {self.name}")

    def result_future(self) -> Any:
        """The future of the goal's result, requested once and shared by every waiter."""
        if self._result is None:
            self._result = self.goal_handle.get_result_async()
        return self._result

    def result(self, timeout: float) -> SkillResult:
        response = _wait_future(self.result_future(), timeout, f"result of {self.name}")
        return response.result.result


def _wait_done(future: Any, timeout: float) -> bool:
    """Whether ``future`` is done within ``timeout`` seconds."""
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    # a future that is already done schedules its callback on the executor: do not wait for that
    return future.done() or done.wait(max(0.0, timeout))


def _wait_future(future: Any, timeout: float, what: str) -> Any:
    if not _wait_done(future, timeout):
        raise MotionTimeoutError(f"no answer for {what} within {timeout:.0f} s; is the node running?")
    return future.result()


def _wait_answer(future: Any, timeout: float, ready: Callable[[], bool], what: str) -> Any:
    """The answer of a server that may be slow (up to ``timeout``) but must stay on the graph (see wait_served)."""
    ended = wait_served(future, timeout, ready)
    if ended == GONE:
        raise ControllerError(f"no answer for {what}: its node left the ROS graph (killed or crashed); "
                              "try again once it is back (the launcher restarts it)")
    if ended != DONE:
        raise MotionTimeoutError(f"no answer for {what} within {timeout:.0f} s; is the node running?")
    return future.result()


class SkillClient:
    """Action clients for every skill plus the sim services and the emergency stop publisher."""

    def __init__(self, node: Node, estop_topic: str = "/emergency_stop", profile: RobotProfile | None = None) -> None:
        """Clients for the skills of ``profile`` (default: the tabletop arm's)."""
        self.node = node
        self.skills = skills_for(profile) if profile is not None else SKILLS
        self.household = profile is not None and profile.world == "household"
        self._clients = {name: ActionClient(node, action_type, f"skills/{name}") for name, (action_type, _) in self.skills.items()}
        self._world = node.create_client(GetWorldState, "sim/get_world_state")
        self._reset = node.create_client(ResetScene, "sim/reset")
        self._release = node.create_client(ReleaseHandover, "skills/release_handover")
        self._estop = node.create_publisher(Bool, estop_topic, COMMAND_QOS)
        self._active: set[SkillHandle] = set()  # goals sent by call() whose result has not arrived
        self._active_lock = threading.Lock()
        self.cancel_grace = CANCEL_GRACE  # seconds to wait for a cancel to be accepted (and a timed-out skill to stop)
        self._executor: SingleThreadedExecutor | None = None
        self._thread: threading.Thread | None = None

    def spin_in_background(self) -> None:
        """Spin the client's node on a private single-threaded executor (its callbacks are tiny)."""
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True, name="skill-client")
        self._thread.start()

    def wait_ready(self, timeout: float = 30.0, sim: bool = True) -> None:
        """Block until every action server (and the sim services) is discovered and answers.

        Discovery alone is not enough: a server may see the request before its reply writer has
        matched this client, and the first answer is then lost. So it ends with real round trips.
        """
        deadline = time.monotonic() + timeout
        pending = list(self._clients.values()) + ([self._world, self._reset] if sim else [])
        while pending:
            pending = [c for c in pending if not (c.server_is_ready() if isinstance(c, ActionClient) else c.service_is_ready())]
            if pending and time.monotonic() > deadline:
                raise ControllerError(f"{len(pending)} skill servers/services not up after {timeout:.0f} s; start the skills and sim nodes")
            time.sleep(0.01)
        probes = [] if self.household else [lambda: self.send("wait", timeout=2.0, duration=0.0).result(2.0)]
        if sim:
            probes.insert(0, lambda: self.world_state(timeout=2.0))
        for probe in probes:
            while True:
                try:
                    probe()
                    break
                except MotionTimeoutError:
                    if time.monotonic() > deadline:
                        raise ControllerError(f"skill servers/services discovered but not answering after {timeout:.0f} s") from None

    def send(self, name: str, timeout: float = ANSWER_TIMEOUT, **fields: Any) -> SkillHandle:
        """Send a goal; returns once the server has accepted it (``timeout``: for a server that stays on the
        graph; one that leaves it is a ControllerError at once). A keyword that is not a field of the
        goal is a skill parameter (config/skill_parameters.yaml): it travels in parameter_names and
        parameter_values, where the skills node checks it."""
        client = self._clients[name]
        if not client.server_is_ready() and not client.wait_for_server(timeout_sec=DISCOVERY_GRACE):
            raise ControllerError(
                f"{name} is not available: no skills node serves skills/{name}; start it (ros2 run teachbot skills)"
            )
        action_type = self.skills[name][0]
        goal = action_type.Goal()
        if self.household:  # the skill's own keyword for what it acts on travels as the goal's target
            target = HOUSEHOLD_SKILLS[name].target
            if target and target in fields:
                fields = {**{k: v for k, v in fields.items() if k != target}, "target": fields[target]}
        names, values = list(fields.pop(NAMES_FIELD, [])), [float(v) for v in fields.pop(VALUES_FIELD, [])]
        for key in [k for k in fields if k not in goal.get_fields_and_field_types()]:
            value = fields.pop(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidArgumentError(f"{key!r} is neither a field of the {name} goal nor a skill parameter (a number)")
            names.append(key)
            values.append(float(value))
        if names and hasattr(goal, NAMES_FIELD):
            setattr(goal, NAMES_FIELD, names)
            setattr(goal, VALUES_FIELD, values)
        elif names:
            raise InvalidArgumentError(f"skill {name} takes no parameters; got {', '.join(names)}")
        for key, value in fields.items():
            if key in ("target_point", "position"):
                point = getattr(goal, key)
                point.x, point.y = float(value[0]), float(value[1])
                point.z = float(value[2]) if len(value) > 2 else 0.0
            else:
                setattr(goal, key, value)
        if hasattr(goal, "trace_parent"):
            goal.trace_parent = trace_parent()  # the skills node's span joins this episode's trace
        feedback: list[tuple[str, float]] = []
        future = client.send_goal_async(
            goal, feedback_callback=lambda msg: feedback.append((msg.feedback.feedback.stage, msg.feedback.feedback.progress))
        )
        handle = _wait_answer(future, timeout, client.server_is_ready, f"goal {name}")
        if not handle.accepted:
            raise ControllerError(f"skill {name} rejected the goal")
        return SkillHandle(name, handle, feedback)

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> SkillResult:
        """Send a goal and wait for its result.

        Past ``timeout`` (clipped to what is left of the console's robot time, see
        teachbot.sandbox.robot_time) the goal is cancelled, and MotionTimeoutError says whether the skill
        stopped within :attr:`cancel_grace` seconds or the arm may still move. A goal that ended by itself
        while being cancelled returns its result. A goal that :meth:`cancel_all` stopped with a ``fault``
        raises that fault. The call is a ``skill.goal`` span: the action, its arguments as sent, the result.
        """
        with span("skill.goal", {"skill.action": name, "skill.arguments": arguments_text(fields)}) as current:
            result = self._call(name, timeout, **fields)
            set_attributes(current, {"skill.code": int(result.code), "skill.result": result.message or "ok"})
            if result.code != SkillResult.SUCCESS:
                fail(current, result.message)
            return result

    def _call(self, name: str, timeout: float, **fields: Any) -> SkillResult:
        left = time_left()
        allowed = timeout if left is None or left[0] >= timeout else max(0.0, left[0])
        handle = self._track(self.send(name, **fields))
        future = handle.result_future()
        ended = wait_served(future, allowed, self._clients[name].server_is_ready, stop=lambda: handle.fault is not None)
        if ended == STOPPED or (ended == DONE and handle.fault is not None):
            return self._faulted(handle, future)
        if ended == DONE:
            return future.result().result.result
        if ended == GONE:  # killed or crashed: its result will never come, and nothing is left to cancel
            self._forget(handle)
            raise ControllerError(
                f"the skills node stopped answering (it is gone from the ROS graph) while {name} was running; "
                "the skill did not finish. Try again once the skills node is back (the launcher restarts it)"
            )
        grace = self.cancel_grace
        deadline = time.monotonic() + grace
        answer = self._cancel_answer(handle, handle.goal_handle.cancel_goal_async(), grace)
        if answer != UNANSWERED and _wait_done(future, deadline - time.monotonic()):
            response = future.result()
            if response.status != GoalStatus.STATUS_CANCELED:
                return response.result.result
            outcome = "the goal was cancelled and the skill stopped"
        elif answer == ACCEPTED:
            outcome = f"the goal's cancel was accepted, but the skill had not stopped {grace:g} s later; the arm may still move"
        elif answer == REFUSED:
            outcome = "the skills node refused to cancel the goal; the arm may still move"
        elif answer == GONE:
            outcome = "the skills node no longer knows the goal (it ended, or the node restarted)"
        else:
            outcome = f"the goal's cancel was not answered within {grace:g} s; the arm may still move"
        clipped = f" (what was left of {left[1]} in config/sandbox.yaml)" if allowed < timeout and left is not None else ""
        raise MotionTimeoutError(f"skill {name} did not finish within {allowed:.3g} s{clipped}; {outcome}")

    def _faulted(self, handle: SkillHandle, future: Any) -> SkillResult:
        """The end of a call whose goal cancel_all() stopped with a fault: its result when the goal ended by itself
        before the cancel took effect; else the fault, saying whether the skill stopped within :attr:`cancel_grace`."""
        if future.done() or _wait_done(future, self.cancel_grace):
            response = future.result()
            if response.status != GoalStatus.STATUS_CANCELED:
                return response.result.result
            outcome = "stopped the arm"
        else:
            outcome = f"the skill had not stopped {self.cancel_grace:g} s after its cancel; the arm may still move"
        raise handle.fault(handle.name, outcome)

    def cancel_all(self, timeout: float | None = None, fault: Fault | None = None) -> list[str]:
        """Cancel every goal of call() still in flight (e.g. when console code is killed); the names of those
        whose cancel the skills node accepted. ControllerError when a cancel was refused or not answered
        within ``timeout`` (default :attr:`cancel_grace`): the arm may still move, and the message says which goal.

        ``fault``: the reason, as the error each interrupted call() raises instead of returning the cancelled
        result (``fault(skill, outcome)``; the first reason given for a goal is kept)."""
        timeout = self.cancel_grace if timeout is None else timeout
        handles = self.in_flight()
        if fault is not None:
            with self._active_lock:
                for handle in handles:
                    handle.fault = handle.fault or fault
        requests = [(handle, handle.goal_handle.cancel_goal_async()) for handle in handles]
        deadline = time.monotonic() + timeout
        accepted: list[str] = []
        failed: list[str] = []
        for handle, future in requests:
            answer = self._cancel_answer(handle, future, deadline - time.monotonic())
            if answer == ACCEPTED:
                accepted.append(handle.name)
            elif answer == REFUSED:
                failed.append(f"the skills node refused to cancel {handle.name}")
            elif answer == UNANSWERED:
                failed.append(f"the cancel of {handle.name} was not answered within {timeout:g} s")
        if failed:
            cancelled = f" (cancelled: {', '.join(accepted)})" if accepted else ""
            raise ControllerError(f"{'; '.join(failed)}; the arm may still move{cancelled}")
        return accepted

    def in_flight(self) -> list[SkillHandle]:
        """Goals sent by call() whose result has not arrived, including ones whose call gave up waiting."""
        with self._active_lock:
            return list(self._active)

    def _track(self, handle: SkillHandle) -> SkillHandle:
        """Keep ``handle`` in flight until its result arrives, whoever is still waiting for it."""
        with self._active_lock:
            self._active.add(handle)
        handle.result_future().add_done_callback(lambda _f: self._forget(handle))
        return handle

    def _forget(self, handle: SkillHandle) -> None:
        with self._active_lock:
            self._active.discard(handle)

    def _cancel_answer(self, handle: SkillHandle, future: Any, timeout: float) -> str:
        """What the server answered to the cancel request ``future`` of ``handle``: ACCEPTED, REFUSED,
        GONE (the goal had ended or is unknown to it: nothing to stop) or UNANSWERED within ``timeout``."""
        if not _wait_done(future, timeout):
            return UNANSWERED
        response = future.result()
        goal = bytes(handle.goal_handle.goal_id.uuid)
        if response.return_code == CancelGoal.Response.ERROR_NONE and any(
            bytes(info.goal_id.uuid) == goal for info in response.goals_canceling
        ):
            return ACCEPTED
        if response.return_code in (CancelGoal.Response.ERROR_UNKNOWN_GOAL_ID, CancelGoal.Response.ERROR_GOAL_TERMINATED):
            self._forget(handle)  # its result may never come (a restarted node): stop tracking it
            return GONE
        return REFUSED

    def world_state(self, timeout: float = ANSWER_TIMEOUT) -> GetWorldState.Response:
        return _wait_answer(self._world.call_async(GetWorldState.Request()), timeout, self._world.service_is_ready,
                            "sim/get_world_state")

    def reset(self, seed: int = 0, scene_yaml: str = "", timeout: float = ANSWER_TIMEOUT) -> ResetScene.Response:
        return _wait_answer(self._reset.call_async(ResetScene.Request(seed=seed, scene_yaml=scene_yaml)), timeout,
                            self._reset.service_is_ready, "sim/reset")

    def release_handover(self, timeout: float = ANSWER_TIMEOUT) -> ReleaseHandover.Response:
        return _wait_answer(self._release.call_async(ReleaseHandover.Request()), timeout, self._release.service_is_ready,
                            "skills/release_handover")

    def release_handover_async(self) -> None:
        """Ask for the release without waiting for the answer (from a callback thread)."""
        self._release.call_async(ReleaseHandover.Request())

    def waiting_on(self, *names: str) -> bool:
        """Whether this client is waiting on a goal of one of these skills."""
        return any(handle.name in names for handle in self.in_flight())

    def emergency_stop(self, active: bool) -> None:
        self._estop.publish(Bool(data=active))

    def close(self) -> None:
        """Stop spinning and remove the action clients from the graph (destroy_node() would not)."""
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=1.0)
            self._thread.join(timeout=2.0)
        for client in self._clients.values():
            client.destroy()
        self._clients = {}
        with self._active_lock:
            self._active.clear()
