"""The replay mode's node set (what ``ros2 launch teachbot replay.launch.py recording:=BAG`` starts) composed
in one process: the replay node plays the recorded person against the interaction manager answering
from the bag's completions, and reports on replay/result whether the session came out as recorded.

Each replay runs this file as a script in a subprocess on a ROS domain of its own (as test_replay.py's
replays do), so its sim node never meets this test session's shared stack of the same name.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from timing import pytest_timeout, timeout

ROOT = Path(__file__).resolve().parents[1]
SHORTEST = ROOT / "test" / "bags" / "plain_task"
RESULT = "replay/result: "


def _replay(bag: Path, tmp_path: Path) -> tuple[int, str, str]:
    """(the replay node's exit status, its replay/result message, the output) of one replay of ``bag``."""
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # a domain of its own
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "test")])
    result = subprocess.run([sys.executable, __file__, str(bag), str(tmp_path / "learned")], capture_output=True,
                            text=True, env=env, timeout=pytest_timeout(300), cwd=ROOT)
    output = result.stdout + result.stderr
    messages = [line[len(RESULT):] for line in result.stdout.splitlines() if line.startswith(RESULT)]
    assert len(messages) == 1, output[-4000:]
    return result.returncode, messages[0].replace("\\n", "\n"), output


def _altered_copy(source: Path, target: Path, topic: str, change: Callable[[Any, int], Any]) -> None:
    """Copy a session bag, passing each message of ``topic`` (and its index) through ``change``."""
    from rosbags.rosbag2 import Reader, Writer
    from rosbags.rosbag2.enums import StoragePlugin

    from teachbot.recording.types import typestore

    store = typestore()
    with Reader(source) as reader, Writer(target, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=store,
                                                   offered_qos_profiles=c.ext.offered_qos_profiles)
                       for c in reader.connections}
        seen = 0
        for connection, stamp, raw in reader.messages():
            if connection.topic.lstrip("/") == topic:
                msg = change(store.deserialize_cdr(raw, connection.msgtype), seen)
                raw, seen = store.serialize_cdr(msg, connection.msgtype), seen + 1
            writer.write(connections[connection.id], stamp, raw)


@pytest.mark.timeout(pytest_timeout(400))
def test_the_replay_node_set_reproduces_the_shortest_bag(tmp_path: Path) -> None:
    status, result, output = _replay(SHORTEST, tmp_path)
    assert result.startswith("OK: "), output[-4000:]
    assert "final world state reproduced" in result and "not compared" not in result
    assert status == 0


@pytest.mark.timeout(pytest_timeout(400))
def test_a_changed_utterance_in_the_bag_is_a_divergence(tmp_path: Path) -> None:
    """The person now asks for another bowl: the transcript shows it, the recorded LLM has no answer."""
    from teachbot.recording.bag import RecordedSession

    bag = tmp_path / "altered"
    _altered_copy(SHORTEST, bag, "dialog/user", lambda msg, _i: dataclasses.replace(msg, text="put the red block in the yellow bowl"))
    altered = RecordedSession.load(bag)
    assert altered.user == ["put the red block in the yellow bowl"]
    assert altered.transcript == RecordedSession.load(SHORTEST).transcript  # what the replay is checked against
    status, result, output = _replay(bag, tmp_path)
    assert result.startswith("DIVERGED: "), output[-4000:]
    assert "DIFFERS transcript: line 2 differs" in result and "yellow bowl" in result
    assert status == 1


@pytest.mark.timeout(pytest_timeout(400))
def test_a_prompt_the_recording_does_not_have_is_a_divergence(tmp_path: Path) -> None:
    """The recorded second interaction prompt altered: the scripted LLM has no completion for the real one."""
    bag = tmp_path / "altered"

    def change(msg: Any, index: int) -> Any:
        return dataclasses.replace(msg, prompt_digest="0" * 64) if index == 1 else msg

    _altered_copy(SHORTEST, bag, "interaction/completions", change)
    status, result, output = _replay(bag, tmp_path)
    assert "DIFFERS" in result and "no recorded completion for prompt digest" in result, output[-4000:]
    assert status == 1


def main(bag: str, learned_dir: str) -> int:
    """Compose the replay mode's node set for ``bag`` in this process, print what arrives on replay/result,
    and return the replay node's exit status (what its process would exit with under ros2 launch)."""
    import threading

    from teachbot.ros_env import configure_loopback

    configure_loopback()
    import rclpy
    from std_msgs.msg import String

    from teachbot.nodes.common import LATCHED_QOS
    from teachbot.nodes.nodeset import node_set
    from teachbot.nodes.stack import InProcessStack

    specs = node_set("replay", {"recording": bag, "camera": False, "memory": learned_dir,
                                "perception_backend": "sim_ground_truth"})
    assert [s.name for s in specs][-3:] == ["improvement", "interaction_manager", "replay"]
    stack = InProcessStack.from_node_set(specs)
    stack.start(wait=timeout(60.0))
    try:
        results: list[str] = []
        arrived = threading.Event()
        listener = rclpy.create_node("replay_listener")
        listener.create_subscription(String, "replay/result", lambda msg: (results.append(msg.data), arrived.set()), LATCHED_QOS)
        stack.add_node(listener)
        if not arrived.wait(timeout(90.0)):
            print("nothing arrived on replay/result", flush=True)
            return 3
        print(RESULT + results[0].replace("\n", "\\n"), flush=True)
        return stack.node("replay").exit_status
    finally:
        stack.stop()


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
