"""The interaction_manager node: dialog in and out over topics, every statement on the transcript
topic, every completion (with its prompt digest) on the completion topic, robot calls over actions."""

from __future__ import annotations

import threading
import time

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from teachbot_interfaces.msg import DialogTurn, LlmCompletion, TranscriptUpdate

from teachbot.llm.base import prompt_digest
from teachbot.llm.scripted import ScriptedModel
from teachbot.nodes.common import COMMAND_QOS
from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS, InteractionManagerNode

pytestmark = pytest.mark.timeout(120)


def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_person_drives_the_robot_through_the_topics(client, ros_context):
    client.reset(scene_yaml="objects:\n  - {category: block, color: red, position: [-0.1, -0.45]}\n"
                            "  - {category: bowl, color: blue, position: [0.1, -0.35]}\n")
    model = ScriptedModel([
        "wait_for_trigger()",
        "say('I will put the red block in the blue bowl.')",
        "put_first_on_second('red block', 'blue bowl')",
        "learn_from_interaction()",
        "wait_for_trigger()",
    ])
    node = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), dialog_timeout=30.0)
    person = rclpy.create_node("person")
    heard, lines, completions = [], [], []
    person.create_subscription(DialogTurn, "dialog/robot", lambda m: heard.append(m.text), COMMAND_QOS)
    person.create_subscription(TranscriptUpdate, "interaction/transcript", lambda m: lines.extend(m.lines), TRANSCRIPT_QOS)
    person.create_subscription(LlmCompletion, "interaction/completions", completions.append, TRANSCRIPT_QOS)
    speak = person.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    executor.add_node(person)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        wait_until(lambda: person.count_subscribers("dialog/user") > 0, what="the node's dialog subscription")
        wait_until(lambda: model.served >= 1, what="the first completion")
        speak.publish(DialogTurn(speaker="user", type="dialog", text="put the red block in the blue bowl"))
        wait_until(lambda: model.served >= 5, what="the scripted statements")
        wait_until(lambda: any("learn_from_interaction() is not available" in line for line in lines), what="transcript")
        assert heard == ["I will put the red block in the blue bowl."]
        assert lines[:6] == [
            ">>> wait_for_trigger()",
            "{'type': 'dialog', 'text': 'put the red block in the blue bowl'}",
            ">>> say('I will put the red block in the blue bowl.')",
            ">>> put_first_on_second('red block', 'blue bowl')",
            "'success'",
            ">>> learn_from_interaction()",
        ]
        assert lines[6].startswith("NotAvailableError: learn_from_interaction() is not available: the improvement node")
        wait_until(lambda: len(completions) >= 4, what="completion messages")
        first = completions[0]
        assert first.role == "interaction" and first.completion == "wait_for_trigger()"
        assert first.prompt_digest == prompt_digest(first.prompt) == prompt_digest(model.prompts[0])
        world = {o.name: o for o in client.world_state().objects}
        assert world["red block"].supported_by == "blue bowl"
    finally:
        node.close()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        node.destroy_node()
        person.destroy_node()


def test_the_console_runs_on_an_openai_compatible_endpoint(client, ros_context):
    """The same node with the real openai client against a fake OpenAI-compatible server on loopback."""
    from fake_openai_server import FakeOpenAIServer

    from teachbot.llm.factory import model_from_config

    client.reset(scene_yaml="objects:\n  - {category: block, color: green, position: [0.12, -0.6]}\n"
                            "  - {category: bowl, color: yellow, position: [-0.12, -0.62]}\n")
    with FakeOpenAIServer() as server:
        # each answer runs on past the statement, as models do; stop='>>>' and the console cut it
        server.answers.extend([
            " wait_for_trigger()\n{'type': 'dialog', 'text': 'x'}\n>>> get_obj_names()",
            " put_first_on_second('green block', 'yellow bowl')\n'success'\n>>> wait_for_trigger()",
            " wait_for_trigger()",
        ])
        raw = {"llm": {"defaults": {"backend": "openai", "base_url": server.base_url, "model": "fake", "retries": 0}}}
        node = InteractionManagerNode(interaction_model=model_from_config(raw, "interaction"),
                                      function_model=ScriptedModel([]), dialog_timeout=30.0)
        speak = node.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        thread = threading.Thread(target=executor.spin, daemon=True)
        thread.start()
        try:
            wait_until(lambda: len(server.requests) >= 1, what="the first request")
            speak.publish(DialogTurn(speaker="user", type="dialog", text="put the green block in the yellow bowl"))
            wait_until(lambda: len(server.requests) >= 3, what="three completions")
            session = node.session
            wait_until(lambda: "'success'" in session.transcript.render(), what="the skill result")
            assert session.transcript.code()[:2] == ["wait_for_trigger()", "put_first_on_second('green block', 'yellow bowl')"]
            assert all(r.get("stop") == [">>>"] for r in server.requests)
            assert {o.name: o for o in client.world_state().objects}["green block"].supported_by == "yellow bowl"
        finally:
            node.close()
            executor.shutdown(timeout_sec=2.0)
            thread.join(timeout=2.0)
            node.destroy_node()


def test_robot_functions_fail_at_once_when_their_nodes_are_missing(ros_context):
    """No skills node and no object list in this namespace: clear errors in the transcript, no hang."""
    model = ScriptedModel(["get_obj_names()", "put_first_on_second('red block', 'blue bowl')", "learn_from_interaction()"])
    node = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), namespace="/lonely",
                                  objects_topic="/lonely/objects")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        wait_until(lambda: model.served >= 3 and node.session is not None and len(node.session.transcript) >= 6,
                   what="three statements")
        lines = node.session.transcript.render().splitlines()
    finally:
        node.close()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        node.destroy_node()
    assert time.monotonic() - started < 15
    assert lines[1] == "NotAvailableError: no object list has arrived on /lonely/objects; start the perception (or sim) node"
    assert lines[3].startswith("ControllerError: put_first_on_second is not available: no skills node serves")
    assert lines[5].startswith("NotAvailableError: learn_from_interaction() is not available: the improvement node is not running")
