"""ROS 2 node ``web``: the person's web page (teachbot.web) bridged to the ROS graph.

In:  dialog/user and dialog/robot (DialogTurn), interaction/transcript (TranscriptUpdate), the object list
     (config/interaction.yaml's objects_topic), the camera image (sensor_msgs/Image; config/web.yaml, by default
     perception's colour topic; subscribed only while a page shows it), the robot profile's emergency stop
     (std_msgs/Bool), memory/updated (MemoryUpdate), interaction/pending_lesson (InteractionExample: the lesson
     waiting for the person's answer; an empty one when none waits); the episode traces, from their files
     (config/tracing.yaml's folder: teachbot.web.traces), not from a topic.
Out: dialog/user (the person's words; type ``end`` ends the conversation, type ``answer:<id>`` is a button's answer to
     the robot's question of that id, which a robot turn of type ``question:<kind>:<id>`` named), the emergency stop.
Uses memory/list and memory/remove for the lessons panel, and the interaction manager's ``confirm_lessons``
parameter for confirm-before-store (set to config/web.yaml's value once the manager is up; the page's switch
changes it). The page itself (Starlette on uvicorn) runs on its own thread; see teachbot.web.app for its guards.
"""

from __future__ import annotations

import threading
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from sensor_msgs.msg import Image
from std_msgs.msg import Bool
from teachbot_interfaces.msg import DialogTurn, InteractionExample, MemoryUpdate, ObjectList, TranscriptUpdate
from teachbot_interfaces.srv import ListExamples, RemoveExample

from teachbot.config import load_yaml, resolve_config
from teachbot.language.dialog import answer_type, turn_question
from teachbot.memory.example import LEARNED
from teachbot.memory.example import InteractionExample as Example
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, TRANSCRIPT_QOS, refuse_duplicate, run_nodes
from teachbot.nodes.memory_node import from_msg
from teachbot.robot_profile import RobotProfile
from teachbot.web.app import PageApp
from teachbot.web.config import WebConfig
from teachbot.web.frames import FrameSource
from teachbot.web.hub import Hub, RobotUnavailable
from teachbot.web.server import WebServer

SERVICE_TIMEOUT = 5.0  # seconds a memory or parameter call may take
MANAGER = "interaction_manager"
WATCHED = ("interaction_manager", "memory", "improvement", "skills", "perception")  # shown as up / down on the page


class WebNode(Node):
    """Serves the page; one thin translation per topic and service (the page's logic is ROS-free)."""

    def __init__(self, config: str = "web", robot_profile: str = "panda_sim", host: str = "", port: int = -1,
                 camera_topic: str = "", objects_topic: str = "", confirm_lessons: str = "", token_file: str = "",
                 tls_cert: str = "", tls_key: str = "") -> None:
        """ROS parameters (also keyword arguments): ``config`` (config/web.yaml or a path), ``robot_profile`` (whose
        emergency stop topic), and overrides of config/web.yaml: ``host``, ``port`` (-1: the file's),
        ``camera_topic``, ``objects_topic``, ``confirm_lessons`` ("true"/"false"; empty: the file's), ``token_file``
        (the token itself is never a parameter: TEACHBOT_WEB_TOKEN, the file, or config/web.yaml), ``tls_cert`` and
        ``tls_key`` (PEM files: the page is served over https)."""
        super().__init__("web")
        for name, default in (("config", config), ("robot_profile", robot_profile), ("host", host), ("port", int(port)),
                              ("camera_topic", camera_topic), ("objects_topic", objects_topic),
                              ("confirm_lessons", str(confirm_lessons)), ("token_file", token_file),
                              ("tls_cert", tls_cert), ("tls_key", tls_key)):
            self.declare_parameter(name, default)
        value = lambda name: self.get_parameter(name).value  # noqa: E731 - a short reader
        confirm = str(value("confirm_lessons")).strip().lower()
        port = int(value("port"))
        self.settings = WebConfig.load(
            str(value("config")), host=str(value("host")), port=None if port < 0 else port,
            camera_topic=str(value("camera_topic")), objects_topic=str(value("objects_topic")),
            confirm_lessons=None if not confirm else confirm in ("true", "1", "yes", "on"),
            token_file=str(value("token_file")), tls_cert=str(value("tls_cert")), tls_key=str(value("tls_key")),
        ).with_token()
        refuse_duplicate(self)
        interaction = load_yaml(resolve_config("interaction"))["interaction"]
        profile = RobotProfile.load(str(value("robot_profile")))
        self.estop_topic = str(interaction.get("emergency_stop_topic") or profile.topics["emergency_stop"])
        self.camera_topic = self.settings.camera_topic or _perception_camera()
        objects_topic = self.settings.objects_topic or str(interaction["objects_topic"])
        max_text = int((interaction.get("bounds") or {}).get("max_heard_chars", 4000))

        self.hub = Hub(self, transcript_lines=self.settings.transcript_lines, dialog_turns=self.settings.dialog_turns,
                       max_clients=self.settings.max_clients, max_queue_bytes=self.settings.max_queue_bytes,
                       lessons_page=self.settings.lessons_page)
        self.hub.update_status(robot=profile.name, camera=self.camera_topic, max_text=max_text)
        self.frames = FrameSource(self.settings.camera_fps, self.settings.camera_width, self.settings.jpeg_quality)
        calls = ReentrantCallbackGroup()
        self.words = self.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
        self.estop = self.create_publisher(Bool, self.estop_topic, COMMAND_QOS)
        self.create_subscription(DialogTurn, "dialog/user", lambda m: self.on_dialog("user", m), COMMAND_QOS)
        self.create_subscription(DialogTurn, "dialog/robot", lambda m: self.on_dialog("robot", m), COMMAND_QOS)
        self.create_subscription(TranscriptUpdate, "interaction/transcript", self.on_transcript, TRANSCRIPT_QOS)
        self.create_subscription(ObjectList, objects_topic, self.on_objects, LATCHED_QOS)
        self.create_subscription(Bool, self.estop_topic, lambda m: self.hub.update_status(estop=bool(m.data)), COMMAND_QOS)
        self.create_subscription(MemoryUpdate, "memory/updated", lambda _m: self.hub.lessons_changed(), LATCHED_QOS)
        self.create_subscription(InteractionExample, "interaction/pending_lesson", self.on_pending, LATCHED_QOS)
        self.list_client = self.create_client(ListExamples, "memory/list", callback_group=calls)
        self.remove_client = self.create_client(RemoveExample, "memory/remove", callback_group=calls)
        self.parameters = AsyncParameterClient(self, MANAGER, callback_group=calls)
        self._camera: Any = None
        self._manager_up = False
        self._confirm_wanted: bool | None = self.settings.confirm_lessons
        self.create_timer(0.5, self.on_tick)
        self.server = WebServer(self.settings, PageApp(self.settings, self.hub, self.frames, max_text))
        try:
            self.url = self.server.start()
        except BaseException:
            self.destroy_node()  # releases the name lock: the constructor never returns to anyone who could
            raise
        shown = self.url + ("?token=<the token>" if self.settings.token else "")
        self.get_logger().info(f"web page on {shown} (camera {self.camera_topic}, emergency stop {self.estop_topic}, "
                               f"episode traces from {self.hub.traces.directory})")

    # ------------------------------------------------------------------ topics
    def on_dialog(self, speaker: str, msg: DialogTurn) -> None:
        if msg.type == "end":
            return  # the page's own "end the conversation", not words
        kind, question = turn_question(msg.type)
        self.hub.dialog(speaker, msg.text, (kind, question) if speaker == "robot" and kind and question else None)

    def on_transcript(self, msg: TranscriptUpdate) -> None:
        self.hub.transcript(msg.episode_id, int(msg.first_line), list(msg.lines))

    def on_objects(self, msg: ObjectList) -> None:
        self.hub.objects([{"name": o.name, "position": [round(o.pose.position.x, 3), round(o.pose.position.y, 3),
                                                        round(o.pose.position.z, 3)]} for o in msg.objects])

    def on_pending(self, msg: InteractionExample) -> None:
        self.hub.pending(from_msg(msg) if msg.transcript else None)

    def on_image(self, msg: Image) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.frames.offer(msg.data, msg.width, msg.height, msg.encoding, msg.step, stamp)

    def on_tick(self) -> None:
        """Subscribe to the camera while a page shows it; which nodes are up; the confirm mode once the manager is."""
        if self.frames.watchers and self._camera is None:
            self._camera = self.create_subscription(Image, self.camera_topic, self.on_image, SENSOR_QOS)
        elif not self.frames.watchers and self._camera is not None:
            self.destroy_subscription(self._camera)
            self._camera = None
        names = set(self.get_node_names())
        up = {name: name in names for name in WATCHED}
        self.hub.update_status(nodes=up, camera_error=self.frames.error)
        if up[MANAGER] and not self._manager_up:  # (again) up: apply the wanted mode, or read the manager's
            self._manager_up = True  # before the thread starts: its failure sets it back, for the next tick to retry
            threading.Thread(target=self._sync_confirm, daemon=True, name="web-confirm").start()
        elif not up[MANAGER]:
            self._manager_up = False

    def _sync_confirm(self) -> None:
        try:
            if self._confirm_wanted is not None:
                self.set_confirm(self._confirm_wanted)
            else:
                self.hub.update_status(confirm=self._get_confirm())
        except RobotUnavailable as exc:
            # the manager's name is on the graph before its parameter services are (a loaded machine: seconds):
            # the next tick tries again, instead of leaving the page's mode unset for as long as the manager runs
            self._manager_up = False
            self.get_logger().info(f"confirm-before-store: {exc}; trying again")

    # ------------------------------------------------------------------ the hub's Robot
    def say(self, text: str) -> None:
        msg = DialogTurn(speaker="user", type="dialog", text=text)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.words.publish(msg)

    def answer(self, question: str, text: str) -> None:
        """A button's answer to the robot's question ``question`` (its id travels in the turn's type)."""
        msg = DialogTurn(speaker="user", type=answer_type(question), text=text)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.words.publish(msg)

    def emergency_stop(self, engaged: bool) -> None:
        self.estop.publish(Bool(data=engaged))

    def end_conversation(self) -> None:
        self.words.publish(DialogTurn(speaker="user", type="end", text=""))

    def list_lessons(self) -> list[Example]:
        reply = self._call(self.list_client, ListExamples.Request(source=LEARNED), "memory/list")
        return [from_msg(m) for m in reply.examples]

    def remove_lesson(self, example_id: str) -> str:
        reply = self._call(self.remove_client, RemoveExample.Request(id=example_id), "memory/remove")
        if not reply.success:
            raise RobotUnavailable(f"could not remove {example_id}: {reply.message}")
        return f"removed lesson {example_id}"

    def set_confirm(self, on: bool) -> str:
        self._confirm_wanted = on
        if not self.parameters.services_are_ready():
            raise RobotUnavailable("the interaction manager is not running: confirm-before-store is set when it starts")
        future = self.parameters.set_parameters([Parameter("confirm_lessons", value=on)])
        result = self._wait(future, "the interaction manager's parameters")
        outcome = result.results[0] if result.results else None
        if outcome is None or not outcome.successful:
            raise RobotUnavailable("the interaction manager refused confirm_lessons: "
                                   + (outcome.reason if outcome is not None else "no answer"))
        self.hub.update_status(confirm=on)
        return ("the robot will ask you before it stores a lesson" if on else
                "the robot stores what it learns without asking you")

    def _get_confirm(self) -> bool | None:
        if not self.parameters.services_are_ready():
            return None
        result = self._wait(self.parameters.get_parameters(["confirm_lessons"]), "the interaction manager's parameters")
        return bool(result.values[0].bool_value) if result.values else None

    def _call(self, client: Any, request: Any, what: str) -> Any:
        if not client.service_is_ready():
            raise RobotUnavailable(f"{what} is not served: is the memory node running?")
        return self._wait(client.call_async(request), what)

    def _wait(self, future: Any, what: str) -> Any:
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(SERVICE_TIMEOUT) or future.result() is None:
            raise RobotUnavailable(f"{what} did not answer within {SERVICE_TIMEOUT:g} s")
        return future.result()

    def close(self) -> None:
        """Stop serving the page (its connections close) before the node goes."""
        self.server.stop()


def _perception_camera() -> str:
    """Perception's colour image topic (config/perception.yaml camera.topics.color)."""
    perception = load_yaml(resolve_config("perception")).get("perception", {})
    return str(((perception.get("camera") or {}).get("topics") or {}).get("color") or "camera/color/image_raw")


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot web``."""
    return run_nodes([WebNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
