"""The improvement service answers when its node spins alone on an executor with no other traffic
(as under ros2 launch, one process per node): the LLM chain's worker thread must wake the executor.
It honours each request's deadline: after it, nothing reaches memory/add."""

from __future__ import annotations

import threading
import time

import pytest
import rclpy
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from teachbot_interfaces.srv import AddExample, Improve
from timing import deadline, pytest_timeout, timeout

from teachbot.llm.scripted import ScriptedModel
from teachbot.nodes.improvement_node import ImprovementNode

pytestmark = pytest.mark.timeout(pytest_timeout(120))

TRANSCRIPT = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the blue bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'no, I meant the green block; remember that'}
>>> learn_from_interaction()"""


def test_improve_answers_without_other_traffic(ros_context):
    # the chain stops at the second answer (the script runs out): an LLM failure is an answer too
    teacher = ScriptedModel(["The robot took the red block, but the person meant the green block."])
    node = ImprovementNode(model=teacher, mode="improve")
    caller = rclpy.create_node("improve_caller", namespace="/improvement_wake_test")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        client = caller.create_client(Improve, "/improvement/improve")
        done = threading.Event()
        assert client.wait_for_service(timeout_sec=timeout(10.0))
        future = client.call_async(Improve.Request(profile="tabletop", transcript=TRANSCRIPT))
        future.add_done_callback(lambda _f: done.set())
        caller_exec = SingleThreadedExecutor()
        caller_exec.add_node(caller)
        # the caller only spins until the answer arrives; the improvement node has no timers or
        # subscriptions, so only the worker's completion can wake its executor
        until = deadline(20.0)
        while not done.is_set() and time.monotonic() < until:
            caller_exec.spin_once(timeout_sec=0.1)
        assert done.is_set(), "the improvement service never answered: its executor was not woken"
        assert teacher.served == 1
        response = future.result()
        assert not response.stored and response.message.startswith("could not learn"), response
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        caller.destroy_node()


# ------------------------------------------------------------------ deadlines
# realistic answers of an improvement LLM: the verdict as fenced JSON after a sentence, the transcript in a fence
VERDICT = ("The person asked for 'the block' and the robot guessed the red one.\n"
           '```json\n{"problem": true, "description": "The robot took the red block, but the person meant the green block."}\n```')
BETTER = "When the person says 'the block', take the green block."
SCOPE = "Whenever the person does not say which block."
IMPROVED = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the blue bowl'}
>>> put_first_on_second('green block', 'blue bowl')
'success'
>>> wait_for_trigger()"""
CHAIN = [VERDICT, BETTER, SCOPE, f"Here is how it should have gone:\n\n```python\n{IMPROVED}\n```"]
SCENE = ["red block", "green block", "blue bowl", "yellow bowl"]


class SlowTeacher(ScriptedModel):
    """The scripted chain (again for each request), each answer after ``pause`` seconds."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        super().__init__(respond=self._answer, name="improvement:slow")

    def _answer(self, prompt: str) -> str:
        time.sleep(self.pause)
        return CHAIN[(len(self.prompts) - 1) % len(CHAIN)]


class Graph:
    """An improvement node and a stand-in memory node (counts memory/add calls) on one spinning executor,
    and a caller node that sends improvement/improve requests."""

    def __init__(self, teacher: ScriptedModel, name: str) -> None:
        self.node = ImprovementNode(model=teacher, mode="improve")
        self.memory = rclpy.create_node(f"memory_{name}")
        self.added: list[AddExample.Request] = []
        self.memory.create_service(AddExample, "/memory/add", self._add)
        self.executor = MultiThreadedExecutor(num_threads=2)
        self.executor.add_node(self.node)
        self.executor.add_node(self.memory)
        self.spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self.spinner.start()
        self.caller = rclpy.create_node(f"caller_{name}")
        self.client = self.caller.create_client(Improve, "/improvement/improve")
        assert self.client.wait_for_service(timeout_sec=timeout(10.0))
        assert self.node.memory.wait_for_service(timeout_sec=timeout(10.0))

    def _add(self, request: AddExample.Request, response: AddExample.Response) -> AddExample.Response:
        self.added.append(request)
        response.success, response.id = True, f"learned-{len(self.added)}"
        return response

    def improve(self, deadline_in: float | None) -> Improve.Response:
        request = Improve.Request(profile="tabletop", episode_id="e1", transcript=TRANSCRIPT, scene_objects=SCENE)
        if deadline_in is not None:
            wall = time.time() + deadline_in
            request.deadline.sec, request.deadline.nanosec = int(wall), int((wall % 1) * 1e9)
        future = self.client.call_async(request)
        rclpy.spin_until_future_complete(self.caller, future, timeout_sec=timeout(30.0))
        assert future.done(), "the improvement service never answered"
        return future.result()

    def close(self) -> None:
        self.node.close()
        self.executor.shutdown(timeout_sec=1.0)
        for node in (self.node, self.memory, self.caller):
            node.destroy_node()


@pytest.fixture()
def graph(ros_context, request):
    made: list[Graph] = []

    def make(teacher: ScriptedModel) -> Graph:
        made.append(Graph(teacher, request.node.name.replace("test_", "")[:40]))
        return made[-1]

    yield make
    for g in made:
        g.close()


def test_a_normal_request_stores_the_lesson(graph):
    teacher = SlowTeacher()
    g = graph(teacher)
    response = g.improve(deadline_in=timeout(30.0))
    assert response.stored, response.message
    assert response.example_id == "learned-1" and response.message == BETTER
    assert response.problem == "The robot took the red block, but the person meant the green block."
    assert len(g.added) == 1 and g.added[0].example.transcript == IMPROVED
    assert g.added[0].example.instructions == ["put the block in the blue bowl"] and g.added[0].example.scope == SCOPE
    assert "The objects the robot knew in this scene: red block, green block, blue bowl, yellow bowl." in teacher.prompts[3]
    # no deadline in the request: the node's own (config/learning.yaml) applies, and it stores as well
    assert g.improve(deadline_in=None).stored and len(g.added) == 2


def test_a_deadline_passing_during_the_chain_stores_nothing(graph):
    # the deadline (the product's, on the wall) falls between the first answer (3 s) and the second (6 s): the chain
    # stops before its third call. 1.5 s either side leave room for a loaded machine's delays (not scaled: the
    # ratio is the point)
    teacher = SlowTeacher(pause=3.0)
    g = graph(teacher)
    response = g.improve(deadline_in=4.5)
    assert not response.stored and "deadline" in response.message and "nothing was stored" in response.message
    assert len(teacher.prompts) == 2 and g.added == []


def test_a_chain_finishing_inside_the_store_margin_stores_nothing(graph):
    # four answers in ~4 s, the fourth asked for at ~3 s, 2.5 s before the deadline; then under store_margin (2 s)
    # of the 5.5 s is left. A loaded machine's delays of up to 2.5 s change nothing (not scaled: the margin is not)
    teacher = SlowTeacher(pause=1.0)
    g = graph(teacher)
    response = g.improve(deadline_in=5.5)
    assert not response.stored and "deadline" in response.message and "nothing was stored" in response.message
    assert len(teacher.prompts) == 4 and g.added == []
    assert response.improved_transcript == IMPROVED  # the lesson was good: only its timing refused it


def test_a_deadline_already_past_is_refused_at_once(graph):
    teacher = SlowTeacher()
    g = graph(teacher)
    started = time.monotonic()
    response = g.improve(deadline_in=-1.0)
    assert not response.stored and "deadline had passed" in response.message and "nothing was stored" in response.message
    # at once: no LLM call, and the answer long before the chain's own 120 s deadline (config/learning.yaml)
    assert teacher.prompts == [] and g.added == [] and time.monotonic() - started < 10.0
