"""ROS 2 node ``recorder``: writes the session into a rosbag2 (MCAP, or sqlite3) with rosbags.

Records, as serialized CDR straight from the subscriptions (no conversion, no loss): dialog/user and
dialog/robot, interaction/transcript and the LLM completions (interaction/completions,
improvement/completions; transient local, so nothing published before the recorder joined is lost),
every skill action's goal and result (action introspection events) with its status and feedback,
joint_states, the object lists (sim/objects, perception/objects), memory/updated, optionally the
colour camera. It writes the session spec (/teachbot/session) and the simulator's ground truth at
start and stop (/teachbot/world_state) itself; see teachbot.recording.bag.
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import serialize_message
from teachbot_interfaces.srv import GetWorldState

from teachbot.nodes.common import run_nodes
from teachbot.recording.bag import SESSION_TOPIC, WORLD_STATE_TOPIC, WORLD_STATE_TYPE, BagWriter, SessionSpec, TopicSpec
from teachbot.recording.types import action_names
from teachbot.robot_profile import RobotProfile

SKILLS = ("pick", "place", "put_first_on_second", "handover", "move_to", "gripper", "go_home", "wait")
HOUSEHOLD_SKILLS = ("move_to", "grasp", "place_object", "handover_object_to_human", "point_at", "open", "close", "toggle", "slice",
                    "wipe")
_ACTION_TYPES = {"put_first_on_second": "PutFirstOnSecond", "move_to": "MoveTo", "go_home": "GoHome"}
TRANSCRIPT_DEPTH = 500


def default_topics(camera: bool = False, skills_namespace: str = "skills", household: bool = False) -> list[TopicSpec]:
    """The topics a session bag holds (relative names; QoS as their publishers offer it); ``household``:
    the household robot's skills (HouseholdSkill actions) and its things' states."""
    latched = {"depth": 1, "transient_local": True}
    history = {"depth": TRANSCRIPT_DEPTH, "transient_local": True}
    topics = [
        TopicSpec("dialog/user", "teachbot_interfaces/msg/DialogTurn"),
        TopicSpec("dialog/robot", "teachbot_interfaces/msg/DialogTurn"),
        TopicSpec("interaction/transcript", "teachbot_interfaces/msg/TranscriptUpdate", **history),
        TopicSpec("interaction/completions", "teachbot_interfaces/msg/LlmCompletion", **history),
        TopicSpec("improvement/completions", "teachbot_interfaces/msg/LlmCompletion", **history),
        TopicSpec("joint_states", "sensor_msgs/msg/JointState"),
        TopicSpec("sim/objects", "teachbot_interfaces/msg/ObjectList", **latched),
        TopicSpec("perception/objects", "teachbot_interfaces/msg/ObjectList", **latched),
        TopicSpec("memory/updated", "teachbot_interfaces/msg/MemoryUpdate", **latched),
    ]
    known = set(action_names())
    if household:
        topics += [TopicSpec("sim/states", "teachbot_interfaces/msg/ThingStates", **latched),
                   TopicSpec("perception/states", "teachbot_interfaces/msg/ThingStates", **latched)]
    for skill in HOUSEHOLD_SKILLS if household else SKILLS:
        action = "HouseholdSkill" if household else _ACTION_TYPES.get(skill, skill.capitalize())
        if action not in known:
            continue
        base = f"{skills_namespace}/{skill}/_action"
        topics += [
            TopicSpec(f"{base}/send_goal/_service_event", f"teachbot_interfaces/action/{action}_SendGoal_Event", depth=100),
            TopicSpec(f"{base}/get_result/_service_event", f"teachbot_interfaces/action/{action}_GetResult_Event", depth=100),
            TopicSpec(f"{base}/status", "action_msgs/msg/GoalStatusArray", **latched),
            TopicSpec(f"{base}/feedback", f"teachbot_interfaces/action/{action}_FeedbackMessage"),
        ]
    if camera:
        topics += [
            TopicSpec("camera/color/image_raw", "sensor_msgs/msg/Image", depth=5, reliable=False),
            TopicSpec("camera/color/camera_info", "sensor_msgs/msg/CameraInfo", **latched),
        ]
    return topics


def ros_message_class(msgtype: str) -> Any:
    """The rclpy class of a ``pkg/msg/Type`` name, including an action's events and feedback message."""
    package, kind, name = msgtype.split("/")
    module = importlib.import_module(f"{package}.{kind}")
    if kind == "action":
        for suffix, path in (("_SendGoal_Event", ("SendGoalService", "Event")), ("_GetResult_Event", ("GetResultService", "Event")),
                             ("_FeedbackMessage", ("FeedbackMessage",))):
            if name.endswith(suffix):
                impl = getattr(module, name[: -len(suffix)]).Impl
                for part in path:
                    impl = getattr(impl, part)
                return impl
    if kind == "srv" and name.endswith(("_Request", "_Response")):
        service, _, part = name.rpartition("_")
        return getattr(getattr(module, service), part)
    return getattr(module, name)


def qos_of(spec: TopicSpec) -> QoSProfile:
    """The subscription QoS matching a recorded topic's publisher."""
    return QoSProfile(
        depth=spec.depth, history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE if spec.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if spec.transient_local else DurabilityPolicy.VOLATILE,
    )


class RecorderNode(Node):
    """Subscribes to the session topics and appends every message to the bag at ``output``."""

    def __init__(self, output: str = "", storage: str = "mcap", camera: bool = False, namespace: str = "",
                 robot_profile: str = "panda_sim") -> None:
        """``output``: the bag directory to create; ``storage``: mcap or sqlite3; ``camera``: also the colour
        images; ``robot_profile``: whose skills to record (a household robot's differ)."""
        super().__init__("recorder", namespace=namespace)
        self.declare_parameter("output", output)
        self.declare_parameter("storage", storage)
        self.declare_parameter("camera", camera)
        self.declare_parameter("robot_profile", robot_profile)
        household = RobotProfile.load(str(self.get_parameter("robot_profile").value)).world == "household"
        path = str(self.get_parameter("output").value) or time.strftime("recordings/session_%Y%m%d_%H%M%S")
        self.writer = BagWriter(path, str(self.get_parameter("storage").value))
        self.path = self.writer.path
        self.counts: dict[str, int] = {}
        self.world_client = self.create_client(GetWorldState, "sim/get_world_state")
        for spec in default_topics(bool(self.get_parameter("camera").value), household=household):
            full = self.resolve_topic_name(spec.name)
            self.writer.add_topic(TopicSpec(full, spec.msgtype, spec.depth, spec.reliable, spec.transient_local))
            self.create_subscription(ros_message_class(spec.msgtype), full, lambda data, topic=full: self.on_message(topic, data),
                                     qos_of(spec), raw=True)
        self.get_logger().info(f"recording into {self.path}")

    def on_message(self, topic: str, data: bytes) -> None:
        """Append one serialized message, stamped with its arrival time (as ros2 bag record does)."""
        self.writer.write(topic, data, time.time_ns())
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def write_spec(self, spec: SessionSpec) -> None:
        """The session record a replay rebuilds the stack from."""

        self.writer.write_string(SESSION_TOPIC, spec.to_json(), time.time_ns())

    def snapshot_world(self, timeout: float = 5.0) -> Any | None:
        """Write the simulator's ground truth now (None when no simulator answers); call from a non-executor thread."""
        if not self.world_client.wait_for_service(timeout_sec=min(timeout, 1.0)):
            return None
        done = threading.Event()
        future = self.world_client.call_async(GetWorldState.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout) or future.result() is None:
            return None
        response = future.result()
        self.writer.add_topic(TopicSpec(WORLD_STATE_TOPIC, WORLD_STATE_TYPE, depth=2, transient_local=True))
        self.writer.write(WORLD_STATE_TOPIC, serialize_message(response), time.time_ns())
        return response

    def close(self) -> None:
        """Finish the bag (idempotent)."""
        self.writer.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot recorder --ros-args -p output:=DIR``: records until Ctrl-C (no session spec: not replayable)."""
    return run_nodes([RecorderNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
