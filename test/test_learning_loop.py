"""The learning loop end to end in simulation, scripted LLMs, the real MiniLM embedder:
the robot makes a mistake, the person complains, learn_from_interaction() stores an improved example
through the improvement and memory nodes, and the next similar request's prompt holds that example."""

from __future__ import annotations

import threading
import time

import pytest
from rclpy.executors import SingleThreadedExecutor
from timing import deadline, pytest_timeout

from teachbot.llm.scripted import ScriptedModel
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.nodes.improvement_node import ImprovementNode
from teachbot.nodes.interaction_manager_node import InteractionManagerNode
from teachbot.nodes.memory_node import MemoryNode
from teachbot.nodes.perception_node import PerceptionNode
from teachbot.recording.scripted_sessions import IMPROVED, SCENE  # the learning episode of test/bags/

pytestmark = pytest.mark.timeout(pytest_timeout(480))



def wait_until(predicate, timeout=60.0, what="condition"):
    until = deadline(timeout)
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_correction_is_learned_and_used_for_the_next_request(client, ros_context, tmp_path):
    client.reset(scene_yaml=SCENE)
    config = MemoryConfig.from_mapping({"memory": {
        "store": {"seeds_dir": "memory_store", "learned_dir": str(tmp_path / "learned")},
        "embedding": {"cache_dir": str(tmp_path / "cache")}, "retrieval": {"k": 4}}})
    memory = EpisodicMemory.open(config)
    robot = ScriptedModel([  # the console itself runs the first wait_for_trigger()
        "put_first_on_second('red block', 'blue bowl')",
        "wait_for_trigger()",
        "learn_from_interaction()",
        "wait_for_trigger()",
        "put_first_on_second('green block', 'yellow bowl')",
        "wait_for_trigger()",
    ])
    teacher = ScriptedModel([
        'The person wanted another block.\n```json\n{"problem": true, "description": "The robot took the red block, '
        'but the person meant the green block."}\n```',
        "When the person says 'the block', take the green block.",
        "Whenever the person does not say which block.",
        IMPROVED,
    ])
    # the console's object functions read perception/objects (config/interaction.yaml), so perception runs too
    nodes = [PerceptionNode(), MemoryNode(memory), ImprovementNode(model=teacher, mode="improve"),
             InteractionManagerNode(interaction_model=robot, function_model=ScriptedModel([]), dialog_timeout=60.0,
                                    examples_k=4)]
    im = nodes[-1]
    executor = SingleThreadedExecutor()
    for node in nodes:
        executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        wait_until(lambda: im.improve_client.service_is_ready() and im.retrieve_client.service_is_ready(), what="services")
        im.dialog.put_user("put the block in the blue bowl")
        wait_until(lambda: robot.served >= 2, what="the mistake")
        im.dialog.put_user("No, I meant the green block. Remember that next time.")
        wait_until(lambda: robot.served >= 4, what="learning")
        assert len(memory.store.list(source="learned")) == 1
        im.dialog.put_user("put the block in the yellow bowl")
        wait_until(lambda: robot.served >= 6, what="the second request")
        im.dialog.close()
        wait_until(lambda: "'success'" in im.session.transcript.render().split("yellow bowl')")[-1], what="result")
    finally:
        for node in nodes:
            getattr(node, "close", lambda: None)()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        for node in nodes:
            node.destroy_node()

    learned = memory.store.list(source="learned")[0]
    assert learned.transcript == IMPROVED
    assert learned.problem.startswith("The robot took the red block")
    assert learned.scope == "Whenever the person does not say which block."
    assert learned.author_model and learned.embedding_model and learned.episode_id == im.core.episode_id
    assert learned.instructions == ("put the block in the blue bowl",)
    # the robot said what it will do differently, in one sentence
    assert any(s.startswith("Got it. Next time: when the person says") for s in im.dialog.said)
    transcript = im.session.transcript.render()
    assert ">>> learn_from_interaction()" in transcript
    # before learning the prompt had no learned lesson; the prompt for the next request has it, scoped
    before, after = robot.prompts[0], robot.prompts[4]
    assert IMPROVED not in before
    assert IMPROVED in after
    assert "# learned lesson, applies Whenever the person does not say which block" in after
    assert after.index(IMPROVED) < after.index("# Current interaction")
    world = {o.name: o for o in client.world_state().objects}
    assert world["green block"].supported_by == "yellow bowl"
