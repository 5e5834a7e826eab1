"""Confirm-before-store and the web node over ROS, in this process: improvement/improve with candidate_only stores
nothing and answers with the lesson; with the person's own sentence it writes the lesson from it; the web node
lists, undoes and exports lessons through the memory node's services, publishes the person's words and the end of
the conversation on dialog/user, and shows the pending lesson the manager publishes."""

from __future__ import annotations

import pytest
from ros_graph import Graph, call, wait_until
from teachbot_interfaces.msg import DialogTurn, MemoryUpdate
from teachbot_interfaces.msg import InteractionExample as ExampleMsg
from teachbot_interfaces.srv import Improve
from timing import pytest_timeout
from web_scripted import teacher_model

from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS
from teachbot.nodes.improvement_node import ImprovementNode
from teachbot.nodes.memory_node import MemoryNode, to_msg
from teachbot.nodes.web_node import WebNode

pytestmark = pytest.mark.timeout(pytest_timeout(240))
TRANSCRIPT = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the blue bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'No, I meant the green block. Remember that next time.'}
>>> learn_from_interaction()"""
SCENE = ["blue bowl", "green block", "red block", "yellow block"]


@pytest.fixture()
def graph(ros_context, tmp_path):
    config = MemoryConfig.from_mapping({"memory": {
        "store": {"seeds_dir": str(tmp_path / "seeds"), "learned_dir": str(tmp_path / "learned")},
        "embedding": {"cache_dir": str(tmp_path / "cache")}}})
    (tmp_path / "seeds").mkdir()
    memory = EpisodicMemory.open(config)
    teacher = teacher_model()
    web = WebNode(port=0, confirm_lessons="false")
    g = Graph(MemoryNode(memory, knowledge_dir=str(tmp_path / "knowledge"), tasks_dir=str(tmp_path / "tasks")),
              ImprovementNode(model=teacher, mode="improve", distill=False), web, name="web_ros")
    g.memory, g.teacher, g.web = memory, teacher, web
    yield g
    g.close()


def improve(g: Graph, **fields) -> Improve.Response:
    return call(g.client(Improve, "/improvement/improve"),
                Improve.Request(profile="tabletop", episode_id="ep-7", transcript=TRANSCRIPT, scene_objects=SCENE, **fields), 60)


def test_a_candidate_is_not_stored_and_the_persons_sentence_rewrites_it(graph):
    updates = []
    graph.probe.create_subscription(MemoryUpdate, "/memory/updated", updates.append, LATCHED_QOS)
    candidate = improve(graph, candidate_only=True)
    assert not candidate.stored and candidate.example_id == ""
    assert candidate.example.improvement == "When the person says 'the block', take the green block."
    assert "put_first_on_second('green block', 'blue bowl')" in candidate.example.transcript
    assert candidate.example.episode_id == "ep-7" and candidate.example.source == "learned"
    assert graph.memory.store.list(source="learned") == [] and updates == []

    asked = len(graph.teacher.prompts)
    edited = improve(graph, candidate_only=True, problem=candidate.problem, improvement="Always take the yellow block.")
    assert not edited.stored and edited.example.improvement == "Always take the yellow block."
    assert edited.example.problem == candidate.problem
    assert "put_first_on_second('yellow block', 'blue bowl')" in edited.example.transcript
    assert not any("Did the robot do something wrong" in p for p in graph.teacher.prompts[asked:])
    assert graph.memory.store.list(source="learned") == []

    stored = improve(graph)  # without candidate_only it stores as before, and says which
    assert stored.stored and stored.example.id == stored.example_id
    assert [e.id for e in graph.memory.store.list(source="learned")] == [stored.example_id]


def test_the_web_node_over_the_memory_and_dialog_topics(graph):
    web, heard = graph.web, []
    graph.probe.create_subscription(DialogTurn, "/dialog/user", lambda m: heard.append((m.type, m.text)), COMMAND_QOS)
    pending = graph.probe.create_publisher(ExampleMsg, "/interaction/pending_lesson", LATCHED_QOS)
    wait_until(lambda: web.list_client.service_is_ready() and web.remove_client.service_is_ready(), 20, "memory services")
    assert improve(graph).stored and improve(graph, improvement="Always take the yellow block.").stored
    listed = web.hub.handle({"type": "lessons", "query": ""})[0]["lessons"]
    assert [row["improvement"] for row in listed] == ["Always take the yellow block.",
                                                      "When the person says 'the block', take the green block."]
    assert [row["improvement"] for row in web.hub.handle({"type": "lessons", "query": "yellow"})[0]["lessons"]] == \
        ["Always take the yellow block."]
    assert len(web.hub.export().splitlines()) == 2
    assert "removed the last lesson" in web.hub.handle({"type": "undo"})[0]["text"]
    assert [e.improvement for e in graph.memory.store.list(source="learned")] == [
        "When the person says 'the block', take the green block."]
    wait_until(lambda: web.words.get_subscription_count() > 0, 10, "the probe on dialog/user")
    web.hub.handle({"type": "say", "text": "put the block in the blue bowl"})
    web.hub.handle({"type": "end"})
    wait_until(lambda: len(heard) == 2, 10, "the person's words and the end")
    assert heard == [("dialog", "put the block in the blue bowl"), ("end", "")]
    lesson = graph.memory.store.list(source="learned")[0]
    pending.publish(to_msg(lesson))
    wait_until(lambda: web.hub._pending["lesson"] is not None, 10, "the pending lesson")
    assert web.hub._pending["lesson"]["improvement"] == lesson.improvement
    pending.publish(ExampleMsg())
    wait_until(lambda: web.hub._pending["lesson"] is None, 10, "the lesson answered")
    assert "confirm" in web.hub.status and web.hub.status["nodes"]["memory"] is True
