"""ROS 2 node ``improvement``: learn_from_interaction() behind the service improvement/improve.

Runs the improvement chain (teachbot.learning.improver) with the improvement LLM of config/llm.yaml
and stores an accepted lesson through the memory node's memory/add service, with provenance.
"""

from __future__ import annotations

import threading
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
from teachbot.learning.improver import Improver
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
        llm = {k: str(self.get_parameter(k).value) for k in LLM_PARAMETERS}
        self.model = model or model_from_config(llm_settings(**llm), "improvement")
        # every LLM call of the chain, with its prompt digest, so a recorded session can be replayed
        add = getattr(self.model, "add_listener", None)
        if add is not None:
            publisher = self.create_publisher(LlmCompletion, "improvement/completions", TRANSCRIPT_QOS)
            add(completion_publisher(self, publisher, "improvement"))
        self._improvers: dict[str, Improver] = {}
        self._lock = threading.Lock()
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="improve")
        self.memory = self.create_client(AddExample, "memory/add", callback_group=ReentrantCallbackGroup())
        self.create_service(Improve, "improvement/improve", self.on_improve, callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(f"improvement ready: mode {self.mode}, model {self.model.name}")

    def _improver(self, profile: str) -> Improver:
        if profile not in self._improvers:
            self._improvers[profile] = Improver(self.model, RobotApi.load(profile), self.mode)
        return self._improvers[profile]

    async def on_improve(self, request: Improve.Request, response: Improve.Response) -> Improve.Response:
        # the LLM chain takes seconds: it runs on a worker thread while the executor keeps spinning
        # (the memory client's answer must be able to arrive on a single-threaded executor)
        work = self._workers.submit(self._learn, request.profile or "tabletop", request.transcript)
        try:
            lesson = await wait_for_worker(self, work)
        except Exception as exc:  # noqa: BLE001 - an LLM outage is an answer, not a crash
            response.stored, response.message = False, f"could not learn: {type(exc).__name__}: {exc}"
            return response
        response.problem, response.improvement, response.scope = lesson.problem, lesson.improvement, lesson.scope
        response.improved_transcript = lesson.transcript
        if not lesson.ok:
            response.stored, response.message = False, lesson.reason
            return response
        example = InteractionExample(
            profile=request.profile or "tabletop", source="learned", transcript=lesson.transcript,
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
        else:
            response.message = "the lesson could not be stored: " + (stored.message if stored else "the memory node is not running")
        return response

    def _learn(self, profile: str, transcript: str) -> Any:
        with self._lock:
            return self._improver(profile).learn(transcript)

    def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot improvement``."""
    return run_nodes([ImprovementNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
