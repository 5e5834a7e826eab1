"""The interaction_manager node: dialog in and out over topics, every statement on the transcript
topic, every completion (with its prompt digest) on the completion topic, robot calls over actions."""

from __future__ import annotations

import re
import threading
import time

import pytest
import rclpy
import ros_graph
from rclpy.executors import SingleThreadedExecutor
from teachbot_interfaces.msg import DialogTurn, LlmCompletion, TranscriptUpdate
from timing import deadline, pytest_timeout

from teachbot.language.prompts import CURRENT_HEADER
from teachbot.language.transcript import utterance_text
from teachbot.llm.base import prompt_digest
from teachbot.llm.scripted import ScriptedModel
from teachbot.nodes.common import COMMAND_QOS
from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS, InteractionManagerNode

pytestmark = pytest.mark.timeout(pytest_timeout(600))
# seconds until a console without a memory node is ready: it opens the example store first, and the sentence
# embedder's imports take about two minutes on a loaded 2-core machine (the first console of the process)
READY = 300.0


def wait_until(predicate, timeout=30.0, what="condition"):
    until = deadline(timeout)
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_person_drives_the_robot_through_the_topics(client, ros_context):
    client.reset(scene_yaml="objects:\n  - {category: block, color: red, position: [-0.1, -0.45]}\n"
                            "  - {category: bowl, color: blue, position: [0.1, -0.35]}\n")
    model = ScriptedModel([
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
        wait_until(lambda: lines == [">>> wait_for_trigger()"], READY, what="the console's own wait_for_trigger()")
        assert model.served == 0  # no LLM call before the person speaks
        speak.publish(DialogTurn(speaker="user", type="dialog", text="put the red block in the blue bowl"))
        wait_until(lambda: model.served >= 4, what="the scripted statements")
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
        assert first.role == "interaction" and first.completion == "say('I will put the red block in the blue bowl.')"
        assert first.prompt_digest == prompt_digest(first.prompt) == prompt_digest(model.prompts[0])
        assert first.cost_usd == 0.0 and first.prompt_tokens > 0
        world = {o.name: o for o in client.world_state().objects}
        assert world["red block"].supported_by == "blue bowl"
    finally:
        node.close()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        node.destroy_node()
        person.destroy_node()


def chat_style_reply(body: dict) -> str:
    """A chat model's answer that depends on the prompt: it reads the person's request and the console's last
    output from the user message and answers as chat models do (a sentence, a fence, a think block)."""
    messages = body["messages"]
    assert messages[0]["role"] == "system" and "robot API is already imported" in messages[0]["content"]
    current = messages[-1]["content"].split(CURRENT_HEADER)[-1].strip().splitlines()
    request = [utterance_text(line) for line in current if line.startswith("{'type': 'dialog'")][-1]
    match = re.search(r"(\w+ block) in the (\w+ bowl)", request)
    last = current[-2] if len(current) >= 2 else ""
    if last.startswith("{'type': 'dialog'") and match:
        return (f"Sure! I'll put the {match[1]} in the {match[2]}.\n```python\nput_first_on_second('{match[1]}', "
                f"'{match[2]}')\n```\nThis picks the block up and places it in the bowl.")
    if last == "'success'":
        return f"```python\nsay('The {match[1]} is in the {match[2]}.')\n```"
    return "<think>\nThe task is done, so I wait for the next request.\n</think>\n\n```python\nwait_for_trigger()\n```"


def test_a_chat_style_endpoint_finishes_a_task_from_the_persons_words(client, ros_context):
    """The node with the real openai client, streaming, against a fake chat model on loopback that fences its
    code, writes prose around it and thinks first: nothing is asked before the person speaks, then the task is done."""
    from fake_openai_server import FakeOpenAIServer

    from teachbot.llm.factory import model_from_config

    client.reset(scene_yaml="objects:\n  - {category: block, color: green, position: [0.12, -0.6]}\n"
                            "  - {category: bowl, color: yellow, position: [-0.12, -0.62]}\n")
    with FakeOpenAIServer() as server:
        server.respond = chat_style_reply
        raw = {"llm": {"defaults": {"backend": "openai", "base_url": server.base_url, "model": "fake", "retries": 0},
                       "roles": {"interaction": {"stream": True}}}}
        node = InteractionManagerNode(interaction_model=model_from_config(raw, "interaction"),
                                      function_model=ScriptedModel([]), dialog_timeout=30.0)
        heard = []
        node.create_subscription(DialogTurn, "dialog/robot", lambda m: heard.append(m.text), COMMAND_QOS)
        speak = node.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        thread = threading.Thread(target=executor.spin, daemon=True)
        thread.start()
        try:
            time.sleep(1.5)  # the console's own wait times out and waits again, several times
            assert server.requests == []
            speak.publish(DialogTurn(speaker="user", type="dialog", text="put the green block in the yellow bowl"))
            wait_until(lambda: heard, READY, what="the robot's report")
            session = node.session
            wait_until(lambda: len(session.transcript.code()) >= 4, what="three statements of the model")
            assert session.transcript.code()[:4] == [
                "wait_for_trigger()", "put_first_on_second('green block', 'yellow bowl')",
                "say('The green block is in the yellow bowl.')", "wait_for_trigger()"]
            assert heard == ["The green block is in the yellow bowl."]
            assert all(r.get("stream") for r in server.requests)
            assert {o.name: o for o in client.world_state().objects}["green block"].supported_by == "yellow bowl"
        finally:
            node.close()
            executor.shutdown(timeout_sec=2.0)
            thread.join(timeout=2.0)
            node.destroy_node()


def test_an_endpoint_that_is_down_is_reported_once_and_not_called_again(ros_context):
    from fake_openai_server import FakeOpenAIServer

    from teachbot.llm.factory import model_from_config

    with FakeOpenAIServer() as server:
        server.script(*["500"] * 50)
        raw = {"llm": {"defaults": {"backend": "openai", "base_url": server.base_url, "model": "fake", "retries": 1,
                                    "backoff_base": 0.05, "backoff_max": 0.1}}}
        node = InteractionManagerNode(interaction_model=model_from_config(raw, "interaction"), namespace="/down",
                                      function_model=ScriptedModel([]), dialog_timeout=0.3, objects_topic="/down/objects")
        heard = []
        node.create_subscription(DialogTurn, "dialog/robot", lambda m: heard.append(m.text), COMMAND_QOS)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        thread = threading.Thread(target=executor.spin, daemon=True)
        thread.start()
        try:
            time.sleep(1.0)
            assert server.requests == []
            node.dialog.put_user("put the red block in the blue bowl")
            wait_until(lambda: heard, READY, what="the robot's message")
            time.sleep(2.0)  # nobody talks: the console waits and the endpoint is left alone
            assert len(server.requests) == 2  # one call and its one retry, nothing after
            assert len(heard) == 1 and heard[0].startswith("I cannot reach my language model")
            assert "HTTP 500" in heard[0]
        finally:
            node.close()
            executor.shutdown(timeout_sec=2.0)
            thread.join(timeout=2.0)
            node.destroy_node()


def test_robot_functions_fail_at_once_when_their_nodes_are_missing(ros_context):
    """No skills node and no object list in this namespace: clear errors in the transcript, no hang."""
    model = ScriptedModel(["get_obj_names()", "put_first_on_second('red block', 'blue bowl')", "learn_from_interaction()",
                           "wait_for_trigger()"])
    node = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), namespace="/lonely",
                                  objects_topic="/lonely/objects")
    node.dialog.put_user("put the red block in the blue bowl")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        wait_until(lambda: node.session is not None, READY, what="the first episode")
        started = time.monotonic()
        session = node.session
        wait_until(lambda: model.served >= 3 and len(session.transcript) >= 8, what="three statements")
        lines = session.transcript.render().splitlines()
    finally:
        node.close()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        node.destroy_node()
    # the property: each missing node is an error line at once (the object list is waited for objects_wait, 5 s),
    # not after a robot call's skill_timeout (120 s); measured from the start of the episode
    assert time.monotonic() - started < 15
    assert lines[3] == "NotAvailableError: no object list has arrived on /lonely/objects; start the perception (or sim) node"
    assert lines[5].startswith("ControllerError: put_first_on_second is not available: no skills node serves")
    assert lines[7].startswith("NotAvailableError: learn_from_interaction() is not available: the improvement node is not running")


def test_closing_does_not_wait_for_an_llm_call_in_flight(ros_context):
    """Issue 31: close() abandons an LLM call that does not answer (a stand-in model that blocks until released):
    the console thread has ended when close() returns, while the call still blocks; the answer that comes after
    runs no statement and the robot says nothing. Before, close() waited 5 s and returned with the thread in the call."""
    entered, release = threading.Event(), threading.Event()

    def blocking(_prompt: str) -> str:
        entered.set()
        release.wait(READY)  # bounds a hang only: released by the test
        return "say('too late')"

    model = ScriptedModel(respond=blocking)
    node = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), namespace="/closing",
                                  objects_topic="/closing/objects")
    heard = []
    node.create_subscription(DialogTurn, "dialog/robot", lambda m: heard.append(m.text), COMMAND_QOS)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    closed = False
    try:
        node.dialog.put_user("put the red block in the blue bowl")
        wait_until(entered.is_set, READY, what="the LLM call")
        session = node.session
        started, closed = time.monotonic(), True
        node.close()
        took = time.monotonic() - started
        print(f"close() took {took:.3f} s with the LLM call in flight")
        assert not node._thread.is_alive(), "close() returned with the console thread still in the LLM call"
        assert not release.is_set() and model.served == 0  # the call is still in flight: abandoned, not answered
        release.set()
        wait_until(lambda: model.served == 1, what="the late answer")
        time.sleep(0.5)  # a statement run from the late answer would show within this
        assert "too late" not in session.transcript.render() and heard == []
    finally:
        release.set()
        if not closed:
            node.close()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        node.destroy_node()


# ----------------------------------------------------------------------------- the emergency stop from the chat client


def test_chat_lines_are_commands_or_words_for_the_robot():
    from teachbot.nodes.chat_client import handle_line

    words, stops, shown = [], [], []
    for line in ("  put the red block in the blue bowl \n", "\n", "/STOP", "/resume", "/help", "/stop please"):
        handle_line(line, words.append, stops.append, shown.append, "/panda/emergency_stop")
    assert words == ["put the red block in the blue bowl", "/stop please"]
    assert stops == [True, False]
    assert shown[0].startswith("EMERGENCY STOP sent on /panda/emergency_stop") and "/resume releases it" in shown[0]
    assert shown[1].startswith("emergency stop released on /panda/emergency_stop")
    assert all(command in shown[2] for command in ("/stop", "/resume", "/help"))


def test_chat_stop_and_resume_publish_on_the_emergency_stop_topic(ros_context):
    from std_msgs.msg import Bool

    from teachbot.nodes.chat_client import line_handler

    chat = rclpy.create_node("chat", namespace="/chat_estop")
    listener = rclpy.create_node("skills_listener", namespace="/chat_estop")
    stops, words, shown = [], [], []
    listener.create_subscription(Bool, "/chat_estop/emergency_stop", lambda m: stops.append(m.data), COMMAND_QOS)
    listener.create_subscription(DialogTurn, "dialog/user", lambda m: words.append(m.text), COMMAND_QOS)
    type_line = line_handler(chat, "/chat_estop/emergency_stop", shown.append)
    graph = ros_graph.Graph(chat, listener, name="chat_estop")
    try:
        wait_until(lambda: chat.count_subscribers("/chat_estop/emergency_stop") and chat.count_subscribers("dialog/user"),
                   what="the listener's subscriptions")
        type_line("/stop\n")
        wait_until(lambda: stops == [True], what="True on the emergency stop topic")
        type_line("hello robot\n")
        type_line("/resume\n")
        wait_until(lambda: stops == [True, False] and words == ["hello robot"], what="False, and the words on dialog/user")
        assert "EMERGENCY STOP sent on /chat_estop/emergency_stop" in shown[0]
    finally:
        graph.close()


def test_the_emergency_stop_cancels_says_so_once_and_refuses_robot_calls_until_released(ros_context):
    """/stop typed in the chat client: the interaction manager cancels the goals in flight, says once that it
    stopped, and the console's robot calls fail with how to release the stop; after /resume they go to the skills
    again (none run in this namespace: the call then fails as not available)."""
    from teachbot.nodes.chat_client import line_handler

    call = "put_first_on_second('red block', 'blue bowl')"
    model = ScriptedModel([call, "wait_for_trigger()", call, "wait_for_trigger()"])
    node = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), namespace="/estop",
                                  objects_topic="/estop/objects", emergency_stop_topic="/estop/emergency_stop",
                                  dialog_timeout=30.0)
    cancels = []
    node.skills.cancel_all = lambda *args, **kwargs: cancels.append(threading.current_thread().name) or []
    chat = rclpy.create_node("chat", namespace="/estop")
    heard = []
    chat.create_subscription(DialogTurn, "dialog/robot", lambda m: heard.append(m.text), COMMAND_QOS)
    type_line = line_handler(chat, "/estop/emergency_stop", lambda _text: None)
    graph = ros_graph.Graph(node, chat, name="estop")  # stops spinning before it closes the node
    try:
        wait_until(lambda: chat.count_subscribers("/estop/emergency_stop") and chat.count_subscribers("/estop/dialog/user"),
                   what="the node's subscriptions")
        type_line("/stop")
        wait_until(lambda: node.estop.engaged and heard and cancels, what="the stop, the robot's words and the cancel")
        type_line("/stop")  # pressed again: already stopped, nothing more is said or cancelled
        type_line("put the red block in the blue bowl")
        wait_until(lambda: model.served >= 2, READY, what="the statements after the words")
        assert heard == ["I stopped: the emergency stop was pressed. I will not move until it is released."]
        assert cancels == ["estop-cancel"]  # on a thread of its own: the cancels' answers need the executor
        lines = node.session.transcript.render().splitlines()
        assert lines[2:4] == [f">>> {call}", (
            "EmergencyStopError: the emergency stop is active, so put_first_on_second did not start; the person releases "
            "it with /resume in teachbot chat (or by publishing false on /estop/emergency_stop); wait for them with "
            "wait_for_trigger()")]
        type_line("/resume")
        wait_until(lambda: not node.estop.engaged, what="the release")
        type_line("try again")
        wait_until(lambda: model.served >= 4, what="the statements after the release")
        lines = node.session.transcript.render().splitlines()
        assert lines[4:7] == [">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'try again'}", f">>> {call}"]
        assert lines[7].startswith("ControllerError: put_first_on_second is not available: no skills node serves")
        assert len(heard) == 1 and len(cancels) == 1
    finally:
        graph.close()
