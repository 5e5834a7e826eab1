#!/usr/bin/env python3
"""LLM calls while nobody talks: the console must leave the endpoint alone until a person speaks.

The interaction manager node (real openai client, streaming) runs against a fake OpenAI-compatible
endpoint on loopback, with a short dialog timeout so that the console's own wait_for_trigger() times
out and waits again many times. Three phases, each with ``--seconds`` of silence (default 60):

1. healthy endpoint, nobody talks: LLM requests counted (goal 0);
2. endpoint failing (HTTP 500 on every request), one utterance, the robot's answer, then nobody talks:
   requests (goal: the one call and its 2 retries, 3, nothing after the robot's message) and the robot's
   messages (goal 1);
3. endpoint gone (its port closed), one utterance, the robot's answer, then nobody talks: robot messages (goal 1).

Each phase starts once the console is ready (its first ``wait_for_trigger()`` on interaction/transcript; before
it the console opens the example store and loads the embedding model, a minute on a loaded machine), and the
silence after an utterance is counted from the robot's first message, so a short --seconds still sees the whole
exchange. No console within 180 s, or no answer within 120 s, ends the phase.

Usage: python bench/idle_llm_calls.py [--seconds 60] [--smoke]
"""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import _common as C

C.setup()

READY_TIMEOUT = 180.0  # seconds for the console to be ready (the example store opened, its model loaded)
ANSWER_TIMEOUT = 120.0  # seconds from the utterance to the robot's first message


def wait_for(predicate: Callable[[], object], timeout: float) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds passed; whether it holds."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(predicate())


def load_fake_server() -> Any:
    """test/fake_openai_server.py, imported by path (the test helpers are not a package)."""
    spec = importlib.util.spec_from_file_location("fake_openai_server", C.REPO / "test" / "fake_openai_server.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there any more


def phase(base_url: str, seconds: float, speak: str | None, namespace: str) -> dict[str, Any]:
    """One interaction manager against ``base_url``; returns what the robot said and when."""
    from rclpy.executors import SingleThreadedExecutor
    from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate

    from teachbot.llm.factory import model_from_config
    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.common import COMMAND_QOS, TRANSCRIPT_QOS
    from teachbot.nodes.interaction_manager_node import InteractionManagerNode

    raw = {"llm": {"defaults": {"backend": "openai", "base_url": base_url, "model": "fake", "retries": 2,
                                "backoff_base": 0.2, "backoff_max": 1.0, "timeout": 5.0, "stream": True}}}
    node = InteractionManagerNode(interaction_model=model_from_config(raw, "interaction"), function_model=ScriptedModel([]),
                                  namespace=namespace, dialog_timeout=0.5, objects_topic=f"{namespace}/objects")
    heard: list[tuple[float, str]] = []
    node.create_subscription(DialogTurn, "dialog/robot", lambda m: heard.append((time.monotonic(), m.text)), COMMAND_QOS)
    transcript: list[str] = []
    node.create_subscription(TranscriptUpdate, "interaction/transcript", lambda m: transcript.extend(m.lines), TRANSCRIPT_QOS)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        if not wait_for(lambda: transcript, READY_TIMEOUT):
            C.say(f"  {namespace}: the console was not ready after {READY_TIMEOUT:g} s")
        if speak:
            node.dialog.put_user(speak)
            wait_for(lambda: heard, ANSWER_TIMEOUT)
        time.sleep(seconds)
    finally:
        node.close()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        node.destroy_node()
    return {"heard": heard}


def main() -> None:
    parser = C.parser(__doc__.split("\n\n")[0], runs=None, smoke={"seconds": 2.0})
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase (default 60)")
    args = parser.parse_args()
    import rclpy

    rclpy.init()
    fake = load_fake_server()
    try:
        with fake.FakeOpenAIServer() as server:
            phase(server.base_url, args.seconds, None, "/idle")
            healthy = len(server.requests)
        C.say(f"healthy endpoint, nobody talking for {args.seconds:g} s: {healthy} LLM requests")

        with fake.FakeOpenAIServer() as server:
            server.script(*["500"] * 10_000)
            result = phase(server.base_url, args.seconds, "put the red block in the blue bowl", "/failing")
            after = len(server.requests)  # one call and its 2 retries at most: nothing after the robot's message
        failing_messages = len(result["heard"])
        C.say(f"failing endpoint (HTTP 500), one utterance, its answer, then {args.seconds:g} s of silence: {after} requests "
              f"(one call with its retries), {failing_messages} robot message(s): {[m for _, m in result['heard']]}")

        result = phase(closed_port_url(), args.seconds, "put the red block in the blue bowl", "/gone")
        gone_messages = len(result["heard"])
        C.say(f"endpoint gone (port closed), one utterance, its answer, then {args.seconds:g} s of silence: "
              f"{gone_messages} robot message(s): {[m for _, m in result['heard']]}")
    finally:
        rclpy.shutdown()
    C.emit({
        "benchmark": "idle_llm_calls", "seconds": args.seconds,
        "healthy_idle_requests": healthy, "goal_healthy_idle_requests": 0,
        "failing_requests_total": after, "goal_failing_requests_total": 3,
        "failing_robot_messages": failing_messages, "gone_robot_messages": gone_messages, "goal_robot_messages": 1,
        "meets_goal": healthy == 0 and failing_messages == 1 and gone_messages == 1 and after <= 3,
        "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
