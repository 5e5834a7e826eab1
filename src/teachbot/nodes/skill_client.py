"""A facade over the skills' actions and the simulator's services, for callers that are not nodes.

In the manner of nav2_simple_commander, but every wait has an overall timeout and a failure is a
:class:`~teachbot.errors.TeachbotError` (or a result with a message), never ``None`` plus hidden state.
The node it owns must be spun by an executor (the caller's, or :meth:`SkillClient.spin_in_background`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Bool
from teachbot_interfaces.msg import SkillResult
from teachbot_interfaces.srv import GetWorldState, ReleaseHandover, ResetScene

from teachbot.errors import ControllerError, InvalidArgumentError, MotionTimeoutError
from teachbot.nodes.common import COMMAND_QOS
from teachbot.nodes.skills_node import HOUSEHOLD_FIELDS, SKILLS, skills_for
from teachbot.robot_profile import RobotProfile
from teachbot.skills.parameters import NAMES_FIELD, VALUES_FIELD

DISCOVERY_GRACE = 1.0  # seconds a just-started caller waits to discover a skill server


@dataclass(eq=False)
class SkillHandle:
    """A goal in flight: wait for it, read its feedback, or cancel it."""

    name: str
    goal_handle: Any
    feedback: list[tuple[str, float]]

    def cancel(self, timeout: float = 5.0) -> None:
        _wait_future(self.goal_handle.cancel_goal_async(), timeout, f"cancel of {self.name}")

    def result(self, timeout: float) -> SkillResult:
        response = _wait_future(self.goal_handle.get_result_async(), timeout, f"result of {self.name}")
        return response.result.result


def _wait_future(future: Any, timeout: float, what: str) -> Any:
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    if not done.wait(timeout):
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
        self._active: set[SkillHandle] = set()
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

    def send(self, name: str, timeout: float = 5.0, **fields: Any) -> SkillHandle:
        """Send a goal; returns once the server has accepted it. A keyword that is not a field of the
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
            target = HOUSEHOLD_FIELDS[name][0]
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
        feedback: list[tuple[str, float]] = []
        future = self._clients[name].send_goal_async(
            goal, feedback_callback=lambda msg: feedback.append((msg.feedback.feedback.stage, msg.feedback.feedback.progress))
        )
        handle = _wait_future(future, timeout, f"goal {name}")
        if not handle.accepted:
            raise ControllerError(f"skill {name} rejected the goal")
        return SkillHandle(name, handle, feedback)

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> SkillResult:
        """Send a goal and wait for its result."""
        handle = self.send(name, **fields)
        self._active.add(handle)
        try:
            return handle.result(timeout)
        finally:
            self._active.discard(handle)

    def cancel_all(self) -> int:
        """Cancel every goal this client is waiting on (e.g. when console code is killed)."""
        handles = list(self._active)
        for handle in handles:
            with contextlib.suppress(MotionTimeoutError):
                handle.cancel(timeout=2.0)
        return len(handles)

    def world_state(self, timeout: float = 5.0) -> GetWorldState.Response:
        return _wait_future(self._world.call_async(GetWorldState.Request()), timeout, "sim/get_world_state")

    def reset(self, seed: int = 0, scene_yaml: str = "", timeout: float = 10.0) -> ResetScene.Response:
        return _wait_future(self._reset.call_async(ResetScene.Request(seed=seed, scene_yaml=scene_yaml)), timeout, "sim/reset")

    def release_handover(self, timeout: float = 5.0) -> ReleaseHandover.Response:
        return _wait_future(self._release.call_async(ReleaseHandover.Request()), timeout, "skills/release_handover")

    def release_handover_async(self) -> None:
        """Ask for the release without waiting for the answer (from a callback thread)."""
        self._release.call_async(ReleaseHandover.Request())

    def waiting_on(self, *names: str) -> bool:
        """Whether this client is waiting on a goal of one of these skills."""
        return any(handle.name in names for handle in list(self._active))

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
