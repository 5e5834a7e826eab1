"""ROS 2 node ``skills``: the skill library behind one action server per skill.

It commands the arm only through the controller topics of the robot profile (a trajectory and a
gripper command out, joint states in), reads object positions from the profile's object topic, and
obeys the emergency stop topic (std_msgs/Bool: true cancels every goal and holds position).
Actions: skills/{pick, place, put_first_on_second, handover, move_to, gripper, go_home, wait}; for a
household profile instead skills/{move_to, grasp, place_object, handover_object_to_human, point_at, open,
close, toggle, slice, wipe} (HouseholdSkill), the base driven through its virtual joints on the same
controller topic. Service skills/release_handover. Skill parameters (config/skill_parameters.yaml)
travel in the goals' parameter_names/parameter_values; a bad one is an INVALID_ARGUMENT result and
nothing moves. A running goal whose action client left the ROS graph (its process killed: nobody will
read the result) is cancelled and the arm held, with a warning (teachbot.skills.goal_clients).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node, NodeNameNonExistentError
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool
from teachbot_interfaces.action import GoHome, Gripper, Handover, HouseholdSkill, MoveTo, Pick, Place, PutFirstOnSecond, Wait
from teachbot_interfaces.msg import GripperCommand, ObjectList, SkillFeedback
from teachbot_interfaces.srv import ReleaseHandover
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from teachbot.errors import ControllerError, EmergencyStopError, ErrorCode
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, refuse_duplicate, run_nodes, wait_for_worker
from teachbot.nodes.convert import object_info, skill_result
from teachbot.nodes.household_ros import RosBase, RosHouseholdView
from teachbot.robot_profile import RobotProfile
from teachbot.skills.goal_clients import GoalClientWatch, NodeName
from teachbot.skills.household import HouseholdSkills
from teachbot.skills.household_signatures import HAND, HOUSEHOLD_SKILLS
from teachbot.skills.interfaces import CancelToken, ObjectInfo
from teachbot.skills.library import SkillLibrary, SkillOutcome
from teachbot.tracing import fail, set_attributes, span
from teachbot.tracing.spans import arguments_text
from teachbot.world.household_layout import HouseholdLayout

STATE_TIMEOUT = 5.0  # seconds to wait for the first joint state before a skill gives up
STATE_STALE = 1.0  # wall seconds without a joint state after which the driver counts as gone (a killed sim)
# when nobody publishes them any more (it left the ROS graph): the skill's clock (RosArm.now) then fails, so the
# skill ends with an error instead of waiting out its backstop. A living sim keeps its publisher on the graph,
# so a gap (a starved machine, an executor busy with a long callback) is never taken for a death.
# finished goals are kept this long for late result requests; every kept goal is re-sent in each
# status update, so a long window makes each round trip slower as goals accumulate
RESULT_TIMEOUT = 1
CLIENT_POLL = 0.25  # seconds between looks at the graph for a running goal's client (the lease is 1.5 s)
HANDOVERS = ("handover", "handover_object_to_human")  # skills that wait for skills/release_handover


def _duration(seconds: float) -> Duration:
    return Duration(sec=int(seconds), nanosec=int((seconds % 1) * 1e9))


class RosArm:
    """ArmInterface over the controller topics; its clock is the joint states' stamps (see :meth:`now`)."""

    commands_travel = True  # trajectories and gripper commands are messages (ArmDeadline counts the wall too)

    def __init__(self, node: Node, profile: RobotProfile, group: Any) -> None:
        self.arm_joints = profile.arm_joints
        self._fingers = profile.finger_joints
        self._state: dict[str, float] = {}
        self._stamp: float | None = None  # the arm's own clock at the latest joint state (see now())
        self._sent: float | None = None  # the latest joint state's stamp as the driver sent it
        self._rewound = 0.0  # seconds the driver's clock went back in all (sim resets, a restarted sim)
        self._arrived: float | None = None  # time.monotonic() when the latest joint state came in
        self._have_state = threading.Event()
        # the e-stop and every outgoing command share this lock, so no trajectory can follow a hold
        self._command_lock = threading.Lock()
        self._stopped = False
        self._traj_pub = node.create_publisher(JointTrajectory, profile.topics["joint_trajectory"], COMMAND_QOS)
        self._grip_pub = node.create_publisher(GripperCommand, profile.topics["gripper_command"], COMMAND_QOS)
        node.create_subscription(JointState, profile.topics["joint_states"], self._on_state, COMMAND_QOS, callback_group=group)
        self._drivers = lambda: node.count_publishers(profile.topics["joint_states"])

    def _on_state(self, msg: JointState) -> None:
        self._state.update(zip(msg.name, msg.position))
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        if stamp > 0 or self._sent is not None:  # (a driver that never stamps leaves the wall as the clock)
            if self._sent is not None and stamp < self._sent:
                self._rewound += self._sent - stamp
            self._sent = stamp
            self._stamp = stamp + self._rewound
        self._arrived = time.monotonic()
        if all(n in self._state for n in self.arm_joints):
            self._have_state.set()

    def _wait_state(self) -> None:
        if not self._have_state.wait(STATE_TIMEOUT):
            raise ControllerError(
                "no joint states from the arm; check that the robot driver (or the sim node) is running "
                "and publishing the robot profile's joint_states topic"
            )

    def joint_positions(self) -> np.ndarray:
        self._wait_state()
        return np.array([self._state[n] for n in self.arm_joints])

    def gripper_width(self) -> float:
        self._wait_state()
        return float(sum(self._state.get(n, 0.0) for n in self._fingers))

    def joint_values(self, names: tuple[str, ...]) -> list[float]:
        """Latest positions of any joints the driver reports (a mobile base's, a door's)."""
        self._wait_state()
        missing = [n for n in names if n not in self._state]
        if missing:
            raise ControllerError(f"the joint states carry no {', '.join(missing)}; is the driver for them running?")
        return [float(self._state[n]) for n in names]

    def send_trajectory(self, joint_names: tuple[str, ...], times: np.ndarray, positions: np.ndarray) -> None:
        msg = JointTrajectory(joint_names=list(joint_names))
        msg.points = [
            JointTrajectoryPoint(positions=[float(v) for v in q], time_from_start=_duration(float(t)))
            for t, q in zip(times, positions)
        ]
        with self._command_lock:
            self._refuse_when_stopped()
            self._traj_pub.publish(msg)

    def send_gripper(self, width: float, effort: float) -> None:
        with self._command_lock:
            self._refuse_when_stopped()
            self._grip_pub.publish(GripperCommand(position=float(width), max_effort=float(effort)))

    def hold(self) -> None:
        """An empty trajectory: the controller stops where it is (ros2_control semantics)."""
        with self._command_lock:
            self._traj_pub.publish(JointTrajectory(joint_names=list(self.arm_joints)))

    def set_stopped(self, stopped: bool) -> None:
        """Emergency stop: hold now and refuse every command until released."""
        with self._command_lock:
            self._stopped = stopped
            if stopped:
                self._traj_pub.publish(JointTrajectory(joint_names=list(self.arm_joints)))

    def _refuse_when_stopped(self) -> None:
        if self._stopped:
            raise EmergencyStopError("emergency stop is active; publish false on the emergency stop topic to release it")

    def now(self) -> float:
        """The driver's clock (joint state stamps; simulated time in sim), wall time if unstamped.

        It never goes back: where the driver's clock does (a sim reset, or a sim restarted by the launcher,
        starts again at zero) it goes on from where it was, so an interval a skill measures across the jump
        (a motion allowance, the base's drive, a door opening) sees no time pass at the jump, never a wait
        for the old time to come round again, and a rewound stamp of exactly zero is not taken for wall time.

        ControllerError when joint states stopped coming for :data:`STATE_STALE` s and their publisher left
        the graph: the driver (or the sim node) is gone, and a skill must not wait on a clock that stopped."""
        arrived = self._arrived
        silent = 0.0 if arrived is None else time.monotonic() - arrived
        if silent > STATE_STALE and self._drivers() == 0:
            raise ControllerError(
                f"the arm's joint states stopped {time.monotonic() - arrived:.1f} s ago: the robot driver (or the "
                "sim node) is gone; the skill stopped. Try again once it is back (the launcher restarts it)"
            )
        return self._stamp if self._stamp is not None else time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class RosObjects:
    """ObjectSource over an ObjectList topic (simulator ground truth or perception)."""

    def __init__(self, node: Node, topic: str, group: Any) -> None:
        self._objects: dict[str, ObjectInfo] = {}
        self._updated = threading.Condition()
        node.create_subscription(ObjectList, topic, self._on_objects, LATCHED_QOS, callback_group=group)

    def _on_objects(self, msg: ObjectList) -> None:
        with self._updated:
            self._objects = {o.name: object_info(o) for o in msg.objects}
            self._updated.notify_all()

    def objects(self) -> dict[str, ObjectInfo]:
        return dict(self._objects)

    def wait_for_update(self, timeout: float) -> None:
        """Block until the next object list arrives (or ``timeout``): a scene may just have changed."""
        with self._updated:
            self._updated.wait(timeout)


def _parameters(goal: Any) -> dict[str, list]:
    """The skill parameters a goal carries (config/skill_parameters.yaml), as SkillLibrary.run takes them."""
    return {"parameter_names": [str(n) for n in goal.parameter_names], "parameter_values": [float(v) for v in goal.parameter_values]}


# action type, skill name, goal -> keyword arguments of the skill
SKILLS: dict[str, tuple[type, Callable[[Any], dict[str, Any]]]] = {
    "pick": (Pick, lambda g: {"object_name": g.object_name, **_parameters(g)}),
    "place": (Place, lambda g: {"target_name": g.target_name, "target_point": (g.target_point.x, g.target_point.y), **_parameters(g)}),
    "put_first_on_second": (PutFirstOnSecond, lambda g: {
        "object_name": g.object_name, "target_name": g.target_name, "target_point": (g.target_point.x, g.target_point.y),
        **_parameters(g)}),
    "handover": (Handover, lambda g: {"object_name": g.object_name, "timeout": g.timeout}),
    "move_to": (MoveTo, lambda g: {
        "pose_name": g.pose_name, "position": (g.position.x, g.position.y, g.position.z), "speed_factor": g.speed_factor}),
    "gripper": (Gripper, lambda g: {"close": g.close}),
    "go_home": (GoHome, lambda g: {"speed_factor": g.speed_factor}),
    "wait": (Wait, lambda g: {"duration": g.duration}),
}

# the household profile's skills (teachbot.skills.household), all with the HouseholdSkill action
def _household_kwargs(name: str, hands: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    target, extras = HOUSEHOLD_SKILLS[name].target, HOUSEHOLD_SKILLS[name].extras

    def to_kwargs(goal: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {target: goal.target} if target else {}
        kwargs.update(_parameters(goal))
        if HAND in extras:
            kwargs["hand"] = goal.hand or hands[0]
        if "speed_factor" in extras:
            kwargs["speed_factor"] = goal.speed_factor or 0.5
        if "timeout" in extras:
            kwargs["timeout"] = goal.timeout
        return kwargs

    return to_kwargs


def skills_for(profile: RobotProfile) -> dict[str, tuple[type, Callable[[Any], dict[str, Any]]]]:
    """The actions a skills node serves for ``profile``: the tabletop arm's or the household robot's."""
    if profile.world == "household":
        return {name: (HouseholdSkill, _household_kwargs(name, profile.hands)) for name in HOUSEHOLD_SKILLS}
    return SKILLS


class SkillsNode(Node):
    """Action servers for the skills; one skill runs at a time, the e-stop overrides everything."""

    def __init__(self, robot_profile: str = "panda_sim", namespace: str = "") -> None:
        super().__init__("skills", namespace=namespace)
        self.declare_parameter("robot_profile", robot_profile)
        self.profile = RobotProfile.load(str(self.get_parameter("robot_profile").value))
        refuse_duplicate(self)
        state_group = MutuallyExclusiveCallbackGroup()
        self.arm = RosArm(self, self.profile, state_group)
        self.objects = RosObjects(self, self.profile.topics["objects"], state_group)
        self.skills = skills_for(self.profile)
        self.library: SkillLibrary
        if self.profile.world == "household":
            layout = HouseholdLayout.load()
            view = RosHouseholdView(self, self.profile.topics["objects"], "sim/states", self.arm, layout, state_group)
            self.library = HouseholdSkills(self.profile, self.arm, RosBase(self.arm), view, layout)
        else:
            self.library = SkillLibrary(self.profile, self.arm, self.objects)
        self._busy = threading.Lock()
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="skill")
        self._running: tuple[str, CancelToken] | None = None
        self._watched: tuple[str, CancelToken, GoalClientWatch] | None = None  # the running goal and its client
        self._estop = False
        self._release = threading.Event()
        self.create_subscription(Bool, self.profile.topics["emergency_stop"], self.on_emergency_stop, COMMAND_QOS,
                                 callback_group=state_group)
        goals = ReentrantCallbackGroup()
        self._servers = [
            ActionServer(
                self, action_type, f"skills/{name}", execute_callback=self._executor_for(name, action_type, to_kwargs),
                goal_callback=lambda _goal: GoalResponse.ACCEPT, cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                callback_group=goals, result_timeout=RESULT_TIMEOUT,
            )
            for name, (action_type, to_kwargs) in self.skills.items()
        ]
        self.create_service(ReleaseHandover, "skills/release_handover", self.on_release_handover, callback_group=goals)
        self.create_timer(CLIENT_POLL, self.on_watch_client, callback_group=state_group)
        self.get_logger().info(f"skills ready for {self.profile.name}: {', '.join(self.skills)}")

    def halt(self, reason: str, wait: float = 2.0) -> bool:
        """Stop for good: hold the arm, refuse every later command, and cancel the running goal (its result says
        ``reason``); waits up to ``wait`` s for the skill to end. True when no skill runs any more."""
        running = self._running
        self.get_logger().warning(f"{reason}: holding the arm" + (f" and cancelling the running {running[0]!r} goal" if running else ""))
        self._estop = True
        self.arm.set_stopped(True)
        if running is not None:
            running[1].cancel(reason=f"canceled: {reason}")
        until = time.monotonic() + wait
        while self._running is not None and time.monotonic() < until:
            time.sleep(0.01)
        return self._running is None

    def close(self) -> None:
        """Halt a running skill, and destroy the action servers too: destroy_node() leaves them on the graph."""
        if self._running is not None:
            self.halt("the skills node is closing")
        for server in self._servers:
            server.destroy()
        self._servers = []
        self._workers.shutdown(wait=False, cancel_futures=True)

    def _executor_for(self, name: str, action_type: type, to_kwargs: Callable[[Any], dict[str, Any]]) -> Callable:
        async def execute(goal_handle: Any) -> Any:
            # the skill blocks for seconds: it runs on a worker thread while this coroutine waits, so
            # the node's callbacks (joint states, e-stop, cancel) keep flowing on any executor,
            # including a single-threaded one (much cheaper per goal than a multi-threaded one)
            work = self._workers.submit(self._run, name, goal_handle, to_kwargs(goal_handle.request))
            outcome = await wait_for_worker(self, work)
            result = action_type.Result(result=skill_result(outcome))
            if name == "gripper":
                result.holding, result.width = outcome.holding, outcome.width
            if outcome.success:
                goal_handle.succeed()
            elif outcome.code == ErrorCode.CANCELED and goal_handle.is_cancel_requested:
                goal_handle.canceled()
            else:
                goal_handle.abort()
            return result

        return execute

    def _run(self, name: str, goal_handle: Any, kwargs: dict[str, Any]) -> SkillOutcome:
        """The skill as a ``skill.execute`` span of the caller's trace (the goal's trace_parent)."""
        attributes = {"skill.action": name, "skill.arguments": arguments_text(kwargs)}
        with span("skill.execute", attributes, parent=goal_handle.request.trace_parent, node=self.get_name()) as current:
            outcome = self._execute(name, goal_handle, kwargs)
            set_attributes(current, {"skill.code": int(outcome.code), "skill.result": outcome.message or "ok",
                                     "skill.duration_s": outcome.duration})
            if not outcome.success:
                fail(current, outcome.message)
            return outcome

    def _execute(self, name: str, goal_handle: Any, kwargs: dict[str, Any]) -> SkillOutcome:
        if self._estop:
            return SkillOutcome(False, ErrorCode.EMERGENCY_STOP,
                                f"emergency stop is active; publish false on {self.profile.topics['emergency_stop']} to release it", 0.0)
        if not self._busy.acquire(blocking=False):
            running = self._running[0] if self._running else "another skill"
            return SkillOutcome(False, ErrorCode.BUSY, f"skill {running!r} is running; wait for its result or cancel it", 0.0)
        token = CancelToken(poll=lambda: goal_handle.is_cancel_requested)
        self._running = (name, token)
        watch = GoalClientWatch(lambda: self._feedback_subscribers(name), lambda node: self._sends_goals(name, node))
        self._watched = (name, token, watch)
        try:
            if name in HANDOVERS:
                self._release.clear()
                kwargs["release"] = self._release

            def feedback(stage: str, progress: float) -> None:
                goal_handle.publish_feedback(self.skills[name][0].Feedback(feedback=SkillFeedback(stage=stage, progress=float(progress))))

            return self.library.run(name, cancel=token, feedback=feedback, **kwargs)
        finally:
            self._running = self._watched = None
            self._busy.release()

    def on_watch_client(self) -> None:
        """Cancel the running goal once its action client left the graph: nobody is there to read the result."""
        watched = self._watched
        if watched is None or watched[1].cancelled:
            return
        name, token, watch = watched
        left = watch.left()
        if left:
            self.get_logger().warning(f"the client of the running {name!r} goal ({left}) left the ROS graph: "
                                      "cancelling the goal and holding the arm")
            token.cancel(reason=f"canceled: its action client ({left}) left the ROS graph")

    def _feedback_subscribers(self, name: str) -> dict[tuple[int, ...], NodeName]:
        """Every subscription to skills/<name>'s feedback topic on the graph now, by GID."""
        topic = self.resolve_topic_name(f"skills/{name}/_action/feedback")
        return {tuple(info.endpoint_gid): (info.node_name, info.node_namespace) for info in self.get_subscriptions_info_by_topic(topic)}

    def _sends_goals(self, name: str, node: NodeName) -> bool:
        """Whether ``node`` has a client of skills/<name>'s send_goal service (it is an action client, not a listener)."""
        service = self.resolve_service_name(f"skills/{name}/_action/send_goal")
        try:
            return any(client == service for client, _ in self.get_client_names_and_types_by_node(*node))
        except (NodeNameNonExistentError, RuntimeError):  # not (yet) known by name: look again next time
            return False

    def on_emergency_stop(self, msg: Bool) -> None:
        if msg.data and not self._estop:
            self.get_logger().warning("emergency stop: cancelling all goals and holding position")
        self._estop = bool(msg.data)
        self.arm.set_stopped(self._estop)
        if self._estop:
            running = self._running
            if running is not None:
                running[1].cancel(emergency=True)

    def on_release_handover(self, request: ReleaseHandover.Request, response: ReleaseHandover.Response) -> ReleaseHandover.Response:
        running = self._running
        if running is None or running[0] not in HANDOVERS:
            response.success, response.message = False, "no handover is running; start one with the handover action"
        else:
            self._release.set()
            response.success, response.message = True, "releasing"
        return response


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot skills``."""
    return run_nodes([SkillsNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
