"""ROS 2 node ``memory``: episodic interaction examples, embedding retrieval, persistence.

Services memory/retrieve, memory/add, memory/list, memory/remove; topic memory/updated (MemoryUpdate,
transient local) announces every change. The store lives in the directories of config/memory.yaml.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from builtin_interfaces.msg import Time
from rclpy.node import Node
from teachbot_interfaces.msg import InteractionExample as ExampleMsg
from teachbot_interfaces.msg import MemoryUpdate
from teachbot_interfaces.srv import AddExample, ListExamples, RemoveExample, RetrieveExamples

from teachbot.errors import TeachbotError
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import InteractionExample
from teachbot.nodes.common import LATCHED_QOS, refuse_duplicate, run_nodes


def to_msg(example: InteractionExample) -> ExampleMsg:
    msg = ExampleMsg(
        id=example.id, profile=example.profile, source=example.source, transcript=example.transcript,
        instructions=list(example.instructions), problem=example.problem, improvement=example.improvement,
        scope=example.scope, episode_id=example.episode_id, author_model=example.author_model,
        embedding_model=example.embedding_model,
    )
    if example.created:
        try:
            stamp = datetime.fromisoformat(example.created).timestamp()
            msg.created = Time(sec=int(stamp), nanosec=int((stamp % 1) * 1e9))
        except ValueError:
            pass
    return msg


def from_msg(msg: ExampleMsg) -> InteractionExample:
    created = ""
    if msg.created.sec:
        created = datetime.fromtimestamp(msg.created.sec + msg.created.nanosec * 1e-9, UTC).isoformat()
    return InteractionExample(
        id=msg.id, profile=msg.profile, source=msg.source or "learned", transcript=msg.transcript,
        instructions=tuple(msg.instructions), problem=msg.problem, improvement=msg.improvement, scope=msg.scope,
        episode_id=msg.episode_id, author_model=msg.author_model, embedding_model=msg.embedding_model, created=created,
    ).with_derived_instructions()


class MemoryNode(Node):
    """Wraps an :class:`EpisodicMemory`; every service answers with a message, never a crash."""

    def __init__(self, memory: EpisodicMemory | None = None, config: str = "", learned_dir: str = "") -> None:
        """``config``: a memory.yaml (default config/memory.yaml); ``learned_dir`` overrides its store.learned_dir."""
        super().__init__("memory")
        self.declare_parameter("config", config)
        self.declare_parameter("learned_dir", learned_dir)
        refuse_duplicate(self)
        self.memory = memory or EpisodicMemory.open(self._config())
        self.memory.sync()
        # load the embedding model now: on the first query it would block this node's executor for seconds
        self.memory.warm_up()
        self.updates = self.create_publisher(MemoryUpdate, "memory/updated", LATCHED_QOS)
        self.create_service(RetrieveExamples, "memory/retrieve", self.on_retrieve)
        self.create_service(AddExample, "memory/add", self.on_add)
        self.create_service(ListExamples, "memory/list", self.on_list)
        self.create_service(RemoveExample, "memory/remove", self.on_remove)
        self.get_logger().info(f"memory ready: {len(self.memory)} examples")

    def _config(self) -> MemoryConfig:
        settings = MemoryConfig.load(str(self.get_parameter("config").value) or None)
        learned = str(self.get_parameter("learned_dir").value)
        return dataclasses.replace(settings, learned_dir=Path(learned).expanduser().resolve()) if learned else settings

    def _announce(self, action: int, example_id: str) -> None:
        self.updates.publish(MemoryUpdate(action=action, example_id=example_id, size=len(self.memory)))

    def on_retrieve(self, request: RetrieveExamples.Request, response: RetrieveExamples.Response) -> RetrieveExamples.Response:
        found = self.memory.retrieve(list(request.instructions), request.profile, int(request.k) or None)
        response.examples = [to_msg(r.example) for r in found]
        response.scores = [float(r.score) for r in found]
        return response

    def on_add(self, request: AddExample.Request, response: AddExample.Response) -> AddExample.Response:
        try:
            response.id = self.memory.add(from_msg(request.example))
        except TeachbotError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success, response.message = True, f"stored as {response.id}"
        self._announce(MemoryUpdate.ADDED, response.id)
        return response

    def on_list(self, request: ListExamples.Request, response: ListExamples.Response) -> ListExamples.Response:
        self.memory.sync()
        try:
            response.examples = [to_msg(e) for e in self.memory.store.list(request.profile, request.source)]
        except TeachbotError as exc:  # e.g. an unknown source filter: answer with nothing, log why
            self.get_logger().warning(f"memory/list: {exc}")
        return response

    def on_remove(self, request: RemoveExample.Request, response: RemoveExample.Response) -> RemoveExample.Response:
        try:
            self.memory.remove(request.id)
        except (TeachbotError, KeyError) as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success, response.message = True, f"removed {request.id}"
        self._announce(MemoryUpdate.REMOVED, request.id)
        return response


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot memory``."""
    return run_nodes([MemoryNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
