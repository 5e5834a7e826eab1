"""kill -9 of the improvement node during learn_from_interaction() (issue 15, item 4).

The memory and improvement nodes run under teachbot.nodes.supervisor, the improvement node's LLM is
test/fake_openai_server.py on 127.0.0.1. The first learn_from_interaction() reaches the LLM, which does not answer;
the improvement node is then killed with SIGKILL: within moments (the 2 s goal is bench/fault_recovery.py's)
the console shows one error line that names the node
(not the "took too long" of a deadline), the supervisor restarts it, and the next learn_from_interaction() stores
its lesson through the memory node. A memory node killed between requests makes the next retrieval give up on
it as quickly. In a child process on a ROS domain of its own, as test_node_kill.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from test_node_kill import DETECTED, run_child
from timing import timeout

FIRST = "the red block belongs in the blue bowl, remember that"
LEARN = "learn_from_interaction()"
VERDICT = '{"problem": true, "description": "The robot did not keep where the red block belongs."}'
BETTER = "Put the red block in the blue bowl when the person asks to tidy up."
SCOPE = "Whenever the person asks to tidy up."
IMPROVED = (f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': '{FIRST}'}}\n"
            ">>> say('I will keep the red block in the blue bowl.')\n>>> wait_for_trigger()")


def test_kill_9_during_learning_one_error_line_then_learning_works_and_retrieval_fails_over() -> None:
    run = run_child(__file__)
    report = [line for line in run.stdout.splitlines() if line.startswith("kill->")]
    print("\n".join(report))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert report


def teacher(body: dict[str, Any]) -> str:
    """The improvement LLM: each prompt of the chain (prompts/improve_*.txt) gets its answer."""
    prompt = "".join(str(m.get("content") or "") for m in body.get("messages", []))
    for marker, answer in (("Did the robot do something wrong", VERDICT), ("Write the whole interaction again", IMPROVED),
                           ("Under which condition", SCOPE), ("How can the robot do better", BETTER)):
        if marker in prompt:
            return answer
    raise AssertionError(f"an improvement prompt the test does not know: {prompt[:200]!r}")


def scenario() -> None:
    """Kill the improvement node while its first learning call waits for the LLM; learn again after the restart."""
    from fake_openai_server import FakeOpenAIServer
    from test_node_kill import Stack, await_restart, kill, wait_until

    from teachbot.interaction import MemoryUnavailable

    with FakeOpenAIServer() as server:
        server.respond = teacher
        server.script("delay:120")  # the first request hangs: the kill comes meanwhile
        llm = {"llm_backend": "openai", "llm_base_url": server.base_url, "llm_model": "teacher"}
        stack = Stack(nodes=("memory", "improvement"), script=[LEARN, "wait_for_trigger()", LEARN, "wait_for_trigger()"],
                      llm=llm, console={"objects_wait": 0.2})  # no perception: the scene's objects are not waited for
        try:
            stack.speak(FIRST)
            wait_until(lambda: f">>> {LEARN}" in stack.lines(), 30.0, "the learn call")
            before = len(stack.lines())
            killed = kill(stack, "improvement", until=lambda: len(server.requests) == 1)
            wait_until(lambda: len(stack.lines()) > before, 30.0, "the console's error line")
            elapsed, error = time.monotonic() - killed, stack.lines()[before]
            print(f"kill->error improvement during learning: {elapsed:.2f} s: {error}", flush=True)
            assert elapsed <= timeout(DETECTED), f"the error line came {elapsed:.2f} s after kill -9 of the improvement node: {error}"
            assert error.startswith("StackFault: the improvement node left the ROS graph") and LEARN in error, error
            time.sleep(0.5)
            assert [line for line in stack.lines()[before:] if not line.startswith(">>>")][:1] == [error]  # one error line
            await_restart(stack, "improvement", 1, killed)
            stack.speak("please learn that now")
            wait_until(lambda: stack.lines().count(f">>> {LEARN}") == 2 and stack.lines()[-1] != f">>> {LEARN}", 60.0,
                       "the second learn call")
            lines = stack.lines()
            after = lines[len(lines) - 1 - lines[::-1].index(f">>> {LEARN}") + 1]
            assert after == ">>> wait_for_trigger()", lines  # learning printed nothing: no error line
            stored = list(stack.learned.glob("*.json"))
            assert len(stored) == 1 and IMPROVED.splitlines()[2] in stored[0].read_text(), stored
            assert len(server.requests) == 5, "the chain ran once, after the restart (4 prompts), past the killed call"
            # a memory node killed between requests: the next request's retrieval gives up on it at once (the
            # console then reads the store in its own process, teachbot.interaction.FallbackExamples)
            killed = kill(stack, "memory")
            try:
                stack.node._retrieve("tabletop", [FIRST], 4)
            except MemoryUnavailable as exc:
                print(f"kill->retrieval fails over: {time.monotonic() - killed:.2f} s: {exc}", flush=True)
            else:
                raise AssertionError("memory/retrieve answered after its node was killed")
            assert time.monotonic() - killed <= timeout(DETECTED)
        finally:
            stack.close()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from teachbot.ros_env import configure_loopback

    configure_loopback()
    scenario()
