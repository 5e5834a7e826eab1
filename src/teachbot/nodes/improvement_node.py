"""ROS 2 node ``improvement``: learn_from_interaction() behind the service improvement/improve.

Runs the improvement chain (teachbot.learning.improver) with the improvement LLM of config/llm.yaml
and stores an accepted lesson through the memory node's memory/add service, with provenance.

Each request has a deadline (its ``deadline``, wall clock; when zero, now + ``learning.deadline``). The
chain stops at it, and a lesson is stored only while at least ``learning.store_margin`` seconds are left:
a caller that gave up at its deadline never finds a lesson stored behind its back.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from teachbot_interfaces.msg import InteractionExample, LlmCompletion
from teachbot_interfaces.srv import AddExample, Improve

from teachbot.config import load_yaml, resolve_config
from teachbot.console.registry import RobotApi
from teachbot.console.transcript import Transcript
from teachbot.learning.improver import Improver, Lesson, deadline_message
from teachbot.llm.base import Model
from teachbot.llm.factory import model_from_config
from teachbot.nodes.common import TRANSCRIPT_QOS, completion_publisher, refuse_duplicate, run_nodes, wait_for_worker
from teachbot.nodeset import LLM_PARAMETERS, llm_settings


class ImprovementNode(Node):
    """Serves improvement/improve; one lesson at a time."""

    def __init__(self, model: Model | None = None, **overrides: Any) -> None:
        """ROS parameters (also keyword arguments): config, llm_config, llm_backend, llm_model, llm_base_url;
        any other keyword overrides a key of the learning section (e.g. ``mode``)."""
        super().__init__("improvement")
        for name, default in (("config", "learning"), *((key, "") for key in LLM_PARAMETERS)):
            self.declare_parameter(name, str(overrides.pop(name, default)))
        cfg = load_yaml(resolve_config(str(self.get_parameter("config").value)))["learning"]
        cfg.update(overrides)
        refuse_duplicate(self)
        self.mode = str(cfg["mode"])
        self.deadline = float(cfg.get("deadline", 120.0))  # seconds, for a request without a deadline
        self.store_margin = float(cfg.get("store_margin", 2.0))
        llm = {k: str(self.get_parameter(k).value) for k in LLM_PARAMETERS}
        self.model = model or model_from_config(llm_settings(**llm), "improvement")
        # every LLM call of the chain, with its prompt digest, so a recorded session can be replayed
        add = getattr(self.model, "add_listener", None)
        if add is not None:
            publisher = self.create_publisher(LlmCompletion, "improvement/completions", TRANSCRIPT_QOS)
            add(completion_publisher(self, publisher, "improvement"))
        self._improvers: dict[str, Improver] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="improve")
        self.memory = self.create_client(AddExample, "memory/add", callback_group=ReentrantCallbackGroup())
        self.create_service(Improve, "improvement/improve", self.on_improve, callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(f"improvement ready: mode {self.mode}, model {self.model.name}")

    def _improver(self, profile: str) -> Improver:
        if profile not in self._improvers:
            self._improvers[profile] = Improver(self.model, RobotApi.load(profile), self.mode)
        return self._improvers[profile]

    def _monotonic_deadline(self, stamp: Any) -> tuple[float, float]:
        """The request's deadline on time.monotonic() and the seconds it allowed from now."""
        wall = stamp.sec + stamp.nanosec * 1e-9
        seconds = self.deadline if wall <= 0 else wall - time.time()
        return time.monotonic() + seconds, seconds

    async def on_improve(self, request: Improve.Request, response: Improve.Response) -> Improve.Response:
        deadline, seconds = self._monotonic_deadline(request.deadline)
        if seconds <= 0:
            return self._refuse(response, deadline_message(seconds))
        # the LLM chain takes seconds: it runs on a worker thread while the executor keeps spinning
        # (the memory client's answer must be able to arrive on a single-threaded executor)
        profile = request.profile or "tabletop"
        work = self._workers.submit(self._learn, profile, request.transcript, list(request.scene_objects), deadline)
        try:
            lesson = await wait_for_worker(self, work)
        except Exception as exc:  # noqa: BLE001 - an LLM outage is an answer, not a crash
            return self._refuse(response, f"could not learn: {type(exc).__name__}: {exc}")
        response.problem, response.improvement, response.scope = lesson.problem, lesson.improvement, lesson.scope
        response.improved_transcript = lesson.transcript
        for note in lesson.notes:
            self.get_logger().info(f"episode {request.episode_id or '?'}: {note}")
        if not lesson.ok:
            return self._refuse(response, lesson.reason, "lesson discarded: ")
        left = deadline - time.monotonic()
        if left < self.store_margin:  # the caller gives up at the deadline: store nothing it would not hear of
            message = deadline_message(seconds) if left <= 0 else (
                f"the learning call reached its deadline of {seconds:.1f} s (under {self.store_margin:g} s left to store "
                "the lesson); nothing was stored")
            return self._refuse(response, message)
        example = InteractionExample(
            profile=profile, source="learned", transcript=lesson.transcript,
            instructions=Transcript.parse(lesson.transcript).instructions(), problem=lesson.problem,
            improvement=lesson.improvement, scope=lesson.scope, episode_id=request.episode_id, author_model=self.model.name,
        )
        now = datetime.now(UTC).timestamp()
        example.created.sec, example.created.nanosec = int(now), int((now % 1) * 1e9)
        stored = await self.memory.call_async(AddExample.Request(example=example)) if self.memory.service_is_ready() else None
        response.stored = stored is not None and stored.success
        response.example_id = stored.id if stored is not None else ""
        if response.stored:
            response.message = lesson.reason
            self.get_logger().info(f"lesson stored as {response.example_id}: {lesson.reason}")
        else:
            response.message = "the lesson could not be stored: " + (stored.message if stored else "the memory node is not running")
            self.get_logger().warning(response.message)
        return response

    def _refuse(self, response: Improve.Response, message: str, log_prefix: str = "") -> Improve.Response:
        """Answer stored=False with ``message``, logged as one info line."""
        response.stored, response.message = False, message
        self.get_logger().info(log_prefix + message)
        return response

    def _learn(self, profile: str, transcript: str, scene_objects: list[str], deadline: float) -> Lesson:
        with self._lock:  # a request queued behind another keeps its own deadline running
            return self._improver(profile).learn(
                transcript, scene_objects=scene_objects, deadline=deadline, cancelled=self._closing.is_set
            )

    def close(self) -> None:
        self._closing.set()  # a running chain stops before its next LLM call
        self._workers.shutdown(wait=False, cancel_futures=True)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot improvement``."""
    return run_nodes([ImprovementNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
