"""The memory node on the postgres backend (config/memory.yaml's memory.store.backend: postgres): its services
store into and retrieve from the fleet's database, a lesson another robot learned is retrieved within a
second and announced on memory/updated (as its removal), its knowledge base is the database's and its task logs
are copied into it, and closing the node closes the store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ros_graph
import yaml
from pg_server import PgServer, pg_vector  # noqa: F401 - the fixture
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from teachbot_interfaces.msg import InteractionExample as ExampleMsg
from teachbot_interfaces.msg import MemoryUpdate
from teachbot_interfaces.srv import AddExample, AddKnowledge, BeginTask, RetrieveExamples
from test_pg_store import HashEmbedder, learned, transcript

from teachbot.knowledge import KnowledgeEntry
from teachbot.knowledge.pg_store import PgKnowledgeStore
from teachbot.memory.config import MemoryConfig
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.nodes.knowledge_convert import entry_to_msg
from teachbot.nodes.memory_node import MemoryNode
from teachbot.stores.backend import open_memory
from teachbot.taskmemory.pg_log import PgTaskLogStore


@pytest.fixture()
def config_file(pg_vector: PgServer, tmp_path: Path) -> Path:  # noqa: F811
    path = tmp_path / "memory.yaml"
    path.write_text(yaml.safe_dump({"memory": {"store": {
        "backend": "postgres", "dsn": pg_vector.fresh_dsn(), "robot_id": "arm-1", "scope": "fleet", "seeds_dir": "",
        "learned_dir": str(tmp_path / "learned"), "spool_dir": str(tmp_path / "spool"),
        "knowledge_dir": str(tmp_path / "kb"), "tasks_dir": str(tmp_path / "tasks")}}}))
    return path


def test_memory_node_learns_and_retrieves_through_the_fleet_database(ros_context: None, config_file: Path,
                                                                     tmp_path: Path) -> None:
    config = MemoryConfig.load(config_file)
    node = MemoryNode(open_memory(config, HashEmbedder()), config=str(config_file))
    other_robot = PgMemoryStore(config.dsn, robot_id="arm-2", spool_dir=tmp_path / "spool-2", embedder=HashEmbedder())
    graph = ros_graph.Graph(node, name="pg_memory_node")
    updates: list[tuple[int, str]] = []
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    graph.probe.create_subscription(MemoryUpdate, "memory/updated", lambda m: updates.append((m.action, m.example_id)), qos)
    try:
        # the knowledge base is in the fleet's database too, and the task logs are copied into it
        assert isinstance(node.knowledge.store, PgKnowledgeStore) and isinstance(node.tasks.memory.store, PgTaskLogStore)
        told = ros_graph.call(graph.client(AddKnowledge, "memory/add_knowledge"), AddKnowledge.Request(entries=[entry_to_msg(
            KnowledgeEntry(id="tea", kind="preference", text="The visitor likes green tea."))]), 30.0)
        assert told.success, told.message
        other_knowledge = PgKnowledgeStore(config.dsn, tmp_path / "kb-spool-2", robot_id="arm-2")
        assert other_knowledge.get("tea").text == "The visitor likes green tea."
        other_knowledge.close()
        begun = ros_graph.call(graph.client(BeginTask, "memory/begin_task"), BeginTask.Request(task="tidy", instruction="tidy up"),
                               30.0)
        assert begun.success, begun.message
        restored = PgTaskLogStore(tmp_path / "tasks-restored", config.dsn, robot_id="arm-1")
        assert [r.instruction for r in restored.records("tidy")] == ["tidy up"]
        restored.close()
        add, retrieve = graph.client(AddExample, "memory/add"), graph.client(RetrieveExamples, "memory/retrieve")
        msg = ExampleMsg(id="wave", profile="tabletop", source="learned", transcript=transcript("wave at the visitor"))
        answer = ros_graph.call(add, AddExample.Request(example=msg), 30.0)
        assert answer.success, answer.message
        ros_graph.wait_until(lambda: "wave" in other_robot, 1.0, "the lesson at the other robot (NOTIFY)")
        assert other_robot.get("wave").transcript == msg.transcript  # in the database, for every robot

        other_robot.add(learned("bow", "tabletop", "bow to the guest"))
        taught = time.monotonic()
        while True:
            found = ros_graph.call(retrieve, RetrieveExamples.Request(instructions=["bow to the guest"], k=2), 30.0)
            if [e.id for e in found.examples][-1:] == ["bow"]:
                break
            assert time.monotonic() - taught < 1.0, "another robot's lesson did not reach this node within 1 s"
            time.sleep(0.02)
        assert found.scores[-1] == pytest.approx(1.0, abs=1e-4)  # the query is the lesson's own instruction
        # memory/updated tells of the other robot's lessons as of this node's own: each once
        other_robot.remove("bow")
        ros_graph.wait_until(lambda: (MemoryUpdate.REMOVED, "bow") in updates, 2.0, "the other robot's removal announced")
        assert updates == [(MemoryUpdate.KNOWLEDGE_ADDED, "tea"), (MemoryUpdate.ADDED, "wave"), (MemoryUpdate.ADDED, "bow"),
                           (MemoryUpdate.REMOVED, "bow")]
    finally:
        graph.close()
        node.close()
        node.destroy_node()
        other_robot.close()
    assert node.memory.store._listener is not None and not node.memory.store._listener._thread.is_alive()
