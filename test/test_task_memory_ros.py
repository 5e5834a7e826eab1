"""The task memory over ROS: the memory node's memory/begin_task, memory/log_task_action and
memory/query_task_memory (in this process; and in a child process killed with SIGKILL and started again on
the same store), and the household interaction manager's client: the world from its perception topics,
every acting call logged, the store opened in its own process while the memory node is away (in a child
process on its own ROS domain: the household skills' action names are the tabletop stack's, other types)."""

from __future__ import annotations

import ast
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import rclpy
import ros_graph
from geometry_msgs.msg import Point, Pose, Vector3
from rclpy.action import ActionServer
from teachbot_interfaces.action import HouseholdSkill
from teachbot_interfaces.msg import DetectedObject, DialogTurn, ObjectList, SkillResult, ThingState, ThingStates, TranscriptUpdate
from teachbot_interfaces.srv import BeginTask, LogTaskAction, QueryTaskMemory
from timing import deadline, pytest_timeout, timeout

from teachbot.llm.scripted import ScriptedModel
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.store import MemoryStore
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, TRANSCRIPT_QOS
from teachbot.nodes.task_memory_client import perceived_environment
from teachbot.nodes.task_memory_service import environment_to_msgs
from teachbot.taskmemory import ObjectInfo, TaskLogStore, TaskMemory, TaskMemoryConfig

pytestmark = pytest.mark.timeout(pytest_timeout(300))

CONFIG = TaskMemoryConfig.load()
SORT_STEPS = ["put the apple into box 1", "put the banana into box 1", "put the red cup into box 2", "put the knife into box 2"]


class FlatEmbedder:
    """Every text the same unit vector: the example store stays empty, nothing to load."""

    name = "flat-8"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.full((len(texts), 8), 8 ** -0.5, dtype=np.float32)


def episodic(root: Path) -> EpisodicMemory:
    return EpisodicMemory(MemoryStore(root / "learned"), FlatEmbedder())


def memory_node(root: Path):
    from teachbot.nodes.memory_node import MemoryNode

    return MemoryNode(episodic(root))  # a store of its own: knowledge and task logs next to it, in root


def table(**at: str) -> dict[str, ObjectInfo]:
    """The sort task's table and the tower's shelf; ``at`` moves objects (apple='box 1')."""
    world = {"apple": ("apple", "red", "table"), "banana": ("banana", "yellow", "table"), "red cup": ("cup", "red", "table"),
             "knife": ("knife", "gray", "table"), "box 1": ("box", "brown", "table"), "box 2": ("box", "brown", "table"),
             "red cube": ("cube", "red", "shelf"), "blue cube": ("cube", "blue", "shelf"),
             "yellow cube": ("cube", "yellow", "shelf")}
    return {n: ObjectInfo(t, c, at.get(n.replace(" ", "_"), a)) for n, (t, c, a) in world.items()}


def wait_until(predicate, timeout=30.0, what="condition"):
    ros_graph.wait_until(predicate, timeout, what, period=0.02)


def call(client, request, timeout=20.0):
    return ros_graph.call(client, request, timeout)


class Graph(ros_graph.Graph):
    def __init__(self, *nodes, name: str) -> None:
        super().__init__(*nodes, name=name, prefix="task_memory_probe")


class Client:
    """The three services, called from a probe node."""

    def __init__(self, probe) -> None:
        self.begin_client = probe.create_client(BeginTask, "/memory/begin_task")
        self.log_client = probe.create_client(LogTaskAction, "/memory/log_task_action")
        self.query_client = probe.create_client(QueryTaskMemory, "/memory/query_task_memory")

    def begin(self, task: str, instruction: str = "", world: dict | None = None) -> BeginTask.Response:
        return call(self.begin_client, BeginTask.Request(task=task, instruction=instruction, environment=environment_to_msgs(world)))

    def log(self, function: str, arguments: list, world: dict | None = None, result: str = "'success'", ok: bool = True,
            **raw: str) -> LogTaskAction.Response:
        """``raw``: args or kwargs as sent (JSON text)."""
        fields = {"args": json.dumps(arguments), "kwargs": "{}", **raw}
        return call(self.log_client, LogTaskAction.Request(function=function, result=result, ok=ok,
                                                           environment=environment_to_msgs(world), **fields))

    def query(self, query: str, task: str = "", limit: int = 0) -> QueryTaskMemory.Response:
        return call(self.query_client, QueryTaskMemory.Request(query=query, task=task, limit=limit))

    def result(self, query: str, task: str = "", limit: int = 0):
        reply = self.query(query, task, limit)
        assert reply.success, reply.message
        return json.loads(reply.result)


@pytest.fixture()
def graphs(ros_context, request):
    made: list[Graph] = []

    def make(*nodes) -> Graph:
        made.append(Graph(*nodes, name=f"{request.node.name[5:25]}_{len(made)}"))
        return made[-1]

    yield make
    for g in made:
        g.close()


# ---------------------------------------------------------------------------------------------- memory node
def test_begin_log_and_query_over_ros(graphs, tmp_path: Path) -> None:
    g = graphs(memory_node(tmp_path))
    tm = Client(g.probe)
    # a task not begun, before the node was told any world: its spec, nothing to do yet
    fresh = tm.result("working", "tower")
    assert fresh["status"] == "not started" and fresh["remaining"] == []
    begun = tm.begin("Sorting", "sort the table please", table())
    assert begun.success and begun.task == "sort", begun.message
    memory = json.loads(begun.working_memory)
    assert memory["status"] == "active" and memory["instruction"] == "sort the table please"
    assert memory["remaining"] == SORT_STEPS and memory["source"] == "extractor"
    assert tm.log("grasp", ["apple"], table(apple="robot")).task == "sort"
    placed = tm.log("place_object", ["box 1"], table(apple="box 1"))
    assert placed.success and placed.task == "sort" and placed.message == "logged under sort"
    failed = tm.log("grasp", ["banana"], result="RuntimeError: the banana slipped", ok=False)  # no world: the last one
    assert failed.success and failed.task == "sort"

    working = tm.result("working", "sort")
    assert working["done"] == SORT_STEPS[:1] and working["remaining"] == SORT_STEPS[1:] and working["status"] == "active"
    assert working["task_relevant_objects"] == {"apple": "box 1", "banana": "table", "red cup": "table", "knife": "table"}
    actions = tm.result("declarative", "sort")
    assert [a["action"] for a in actions] == ["grasp('apple')", "place_object('box 1')", "grasp('banana')"]
    assert actions[1]["after"]["apple"] == "box 1" and actions[2]["result"] == "RuntimeError: the banana slipped"
    assert actions[2]["after"]["apple"] == "box 1"  # logged with the world the node was told last
    assert [a["step"] for a in tm.result("declarative", "sort", limit=1)] == [3]
    assert tm.result("tasks") == [{"task": "sort", "status": "active", "progress": "1 of 4 steps done; next: put the banana "
                                   "into box 1", "instruction": "sort the table please"}]
    # a task not begun is read against the newest world: the shelf's three cubes
    tower = tm.result("working", "tower")
    assert tower["status"] == "not started" and len(tower["remaining"]) == 3
    # the node's answers are the core's own: the same store read in this process says the same
    local = TaskMemory(tmp_path / "tasks", CONFIG, "household", lambda: table(apple="box 1"))
    assert {k: v for k, v in working.items() if k != "source"} == local.working("sort").to_console()
    assert actions == local.declarative("sort")
    recalled = tm.result("recall", "sort")  # retrieve_declarative_memory's answer: the state extracted from the log
    assert recalled["environment_state"] == ["banana", "red cup", "knife"] and recalled["task_state"] == {"box 1": ["apple"]}
    assert recalled["recent_actions"][2]["result"] == "failed: RuntimeError: the banana slipped"
    assert recalled == local.recall("sort")


def test_bad_requests_get_a_message_that_says_what_to_do(graphs, tmp_path: Path) -> None:
    g = graphs(memory_node(tmp_path))
    tm = Client(g.probe)
    nothing = tm.log("grasp", ["apple"], table())
    assert nothing.success and nothing.task == "" and "no task has begun" in nothing.message
    assert tm.begin("sort", "", table()).success
    cases = [
        (tm.query("working", "laundry"), ["no task is called 'laundry'", "current_tasks()", "sort"]),
        (tm.query("declarative", ""), ["name a task"]),
        (tm.query("everything"), ["unknown query 'everything'", "tasks, working, declarative"]),
        (tm.log("grasp", [], args="grasp apple"), ["args is not JSON", "JSON list"]),
        (tm.log("grasp", [], args='{"object": "apple"}'), ["args must be a JSON list"]),
        (tm.log("grasp", [], kwargs="[1]"), ["kwargs must be a JSON object"]),
        (tm.log(" ", ["apple"]), ["function is empty"]),
        (tm.begin("", "", table()), ["name a task"]),
    ]
    for reply, words in cases:
        assert not reply.success and all(w in reply.message for w in words), reply.message
    twice = BeginTask.Request(task="sort", environment=environment_to_msgs(table()) * 2)
    reply = call(tm.begin_client, twice)
    assert not reply.success and "names 'apple' twice" in reply.message
    # nothing of that was logged, and the node still answers
    assert [a["action"] for a in tm.result("declarative", "sort")] == []
    assert [t["task"] for t in tm.result("tasks")] == ["sort"]


# ---------------------------------------------------------------------------------------------- a killed memory node
def child_env(domain: bool = True) -> dict[str, str]:
    """This process's environment for a child running this file; ``domain``: on this ROS domain, else its own."""
    env = {k: v for k, v in os.environ.items() if domain or k != "ROS_DOMAIN_ID"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), env.get("PYTHONPATH", "")])
    return env


class MemoryProcess:
    """The memory node in a child process on this test's ROS domain (this file run as a script)."""

    def __init__(self, root: Path, log: Path) -> None:
        self.log = log
        with log.open("w") as err:
            self.process = subprocess.Popen([sys.executable, __file__, "serve", str(root)], env=child_env(),
                                            stdout=subprocess.PIPE, stderr=err, text=True)
        until = deadline(90.0)
        line = ""
        while "serving" not in line:
            assert self.process.poll() is None, f"the memory process died: {log.read_text()[-3000:]}"
            assert time.monotonic() < until, "the memory process did not start"
            if select.select([self.process.stdout], [], [], 0.2)[0]:
                line = self.process.stdout.readline()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=timeout(10.0))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout(10.0))
            except subprocess.TimeoutExpired:
                self.kill()


def serve(root: Path) -> int:
    from teachbot.nodes.common import run_nodes

    def make():
        node = memory_node(root)
        print("serving", flush=True)
        return node

    return run_nodes([make])


def test_a_killed_memory_node_comes_back_with_the_same_memory(graphs, tmp_path: Path) -> None:
    g = graphs()
    tm = Client(g.probe)
    first = MemoryProcess(tmp_path, tmp_path / "first.log")
    second = None
    try:
        assert tm.begin("sort", "sort the table", table()).success
        assert tm.log("grasp", ["apple"], table(apple="robot")).success
        assert tm.log("place_object", ["box 1"], table(apple="box 1")).success
        assert tm.log("grasp", ["red cup"], table(apple="box 1", red_cup="robot")).success  # answered: on disk
        before = {q: tm.result(q, "sort") for q in ("working", "declarative", "tasks")}
        assert before["working"]["status"] == "active" and before["working"]["remaining"] == SORT_STEPS[1:]
        first.kill()
        second = MemoryProcess(tmp_path, tmp_path / "second.log")
        # the first answer of a just-started server may be lost (its reply writer not matched yet): ask again
        answered = None
        for _ in range(10):
            try:
                answered = call(tm.query_client, QueryTaskMemory.Request(query="tasks"), timeout=2.0)
                break
            except AssertionError:
                continue
        assert answered is not None and answered.success, "the restarted memory node does not answer"
        after = {q: tm.result(q, "sort") for q in ("working", "declarative", "tasks")}
        assert after == before
        # begin_task resumes the unfinished run, in the world it was logged in (the request sends none)
        resumed = tm.begin("sort", "carry on sorting")
        assert resumed.success, resumed.message
        memory = json.loads(resumed.working_memory)
        assert memory["status"] == "active" and memory["remaining"] == before["working"]["remaining"]
        assert memory["instruction"] == "sort the table" and memory["done"] == before["working"]["done"]
        assert memory["task_relevant_objects"]["red cup"] == "robot"
        begins = [r for r in TaskLogStore(tmp_path / "tasks").records("sort") if r.kind == "begin"]
        assert [r.instruction for r in begins] == ["sort the table", "(resumed) carry on sorting"]
    finally:
        first.stop()
        if second is not None:
            second.stop()


# ---------------------------------------------------------------------------------------------- interaction manager
def test_the_world_from_perception() -> None:
    """Boxes and thing states to what is where: in a box, on the table, in the robot's or the person's hand."""
    positions = {"apple": (1.0, 0.0, 0.885), "box 1": (1.0, 0.0, 0.80), "banana": (1.4, 0.2, 0.77), "red cup": (0.0, -1.5, 1.0),
                 "knife": (0.5, 0.5, 1.1)}
    sizes = {"apple": (0.065,) * 3, "box 1": (0.3, 0.3, 0.1), "banana": (0.17, 0.035, 0.035), "red cup": (0.065, 0.065, 0.09),
             "knife": (0.2, 0.02, 0.02)}
    things = {"apple": ("apple", "table", False), "box 1": ("box", "table", False), "banana": ("banana", "table", False),
              "red cup": ("cup", "person", False), "knife": ("knife", "", True)}
    env = perceived_environment(positions, sizes, {}, things, {"red": 1, "brown": 1}, {"apple": "red", "box": "brown",
                                                                                       "banana": "yellow", "knife": "gray"})
    assert env == {"apple": ObjectInfo("apple", "red", "box 1"), "box 1": ObjectInfo("box", "brown", "table"),
                   "banana": ObjectInfo("banana", "yellow", "table"), "red cup": ObjectInfo("cup", "red", "person"),
                   "knife": ObjectInfo("knife", "gray", "robot")}


class FakeHousehold:
    """Perception's topics and the grasp/place_object skills of a table with two boxes, without physics."""

    SIZES = {"apple": (0.065,) * 3, "banana": (0.17, 0.035, 0.035), "red cup": (0.065, 0.065, 0.09),
             "knife": (0.2, 0.02, 0.02), "box 1": (0.3, 0.3, 0.1), "box 2": (0.3, 0.3, 0.1)}
    TYPES = {"apple": "apple", "banana": "banana", "red cup": "cup", "knife": "knife", "box 1": "box", "box 2": "box"}

    def __init__(self) -> None:
        self.node = rclpy.create_node("skills")
        self.position = {"apple": [1.0, 0.3, 0.7825], "banana": [1.0, 0.5, 0.7675], "red cup": [1.0, 0.7, 0.795],
                         "knife": [1.0, 0.9, 0.76], "box 1": [1.5, 0.0, 0.80], "box 2": [1.5, 0.5, 0.80]}
        self.held = ""
        self.objects = self.node.create_publisher(ObjectList, "/perception/objects", LATCHED_QOS)
        self.states = self.node.create_publisher(ThingStates, "/perception/states", LATCHED_QOS)
        self.servers = [ActionServer(self.node, HouseholdSkill, f"skills/{name}", getattr(self, name))
                        for name in ("grasp", "place_object")]
        self.node.create_timer(0.1, self.publish)

    def publish(self) -> None:
        self.objects.publish(ObjectList(objects=[
            DetectedObject(name=n, label=self.TYPES[n], pose=Pose(position=Point(x=p[0], y=p[1], z=p[2])),
                           size=Vector3(x=self.SIZES[n][0], y=self.SIZES[n][1], z=self.SIZES[n][2]))
            for n, p in self.position.items()]))
        self.states.publish(ThingStates(things=[ThingState(name=n, type=self.TYPES[n], place="" if n == self.held else "table",
                                                           held=n == self.held) for n in self.position]))

    def _done(self, goal) -> HouseholdSkill.Result:
        goal.succeed()
        return HouseholdSkill.Result(result=SkillResult(success=True, code=SkillResult.SUCCESS, message="success"))

    def grasp(self, goal) -> HouseholdSkill.Result:
        self.held = goal.request.target
        self.position[self.held] = [0.3, 0.0, 1.2]
        return self._done(goal)

    def place_object(self, goal) -> HouseholdSkill.Result:
        box = self.position[goal.request.target]
        self.position[self.held] = [box[0], box[1], box[2] + 0.05 + self.SIZES[self.held][2] / 2]
        self.held = ""
        return self._done(goal)

    def close(self) -> None:
        for server in self.servers:
            server.destroy()


def transcript_value(lines: list[str], statement: str):
    """The value a statement printed (the lines after it, up to the next statement)."""
    start = lines.index(f">>> {statement}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(">>> ")), len(lines))
    return ast.literal_eval("\n".join(lines[start:end]))


def test_the_interaction_manager_logs_through_the_memory_node_and_falls_back(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, __file__, "manager", str(tmp_path)], env=child_env(domain=False),
                         capture_output=True, text=True, timeout=pytest_timeout(280))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "ok: interaction manager" in run.stdout, run.stdout


def interaction_manager_scenario(graphs, tmp_path: Path) -> None:
    """The household console with a scripted coordinator: begin_task, actions logged through the memory node with the
    world from perception, then without it (the same store in the manager's process), then with it again."""
    from teachbot.interaction import LocalExamples
    from teachbot.nodes import interaction_manager_node as manager_module
    from teachbot.nodes.interaction_manager_node import InteractionManagerNode

    # the examples and knowledge read in this process while the memory node is away: no sentence model to load
    manager_module.LocalExamples = lambda learned: LocalExamples(learned, memory=episodic(tmp_path))
    model = ScriptedModel(["begin_task('sort')", "grasp('apple')", "place_object('box 1')", "retrieve_working_memory('sort')",
                           "wait_for_trigger()",
                           "grasp('banana')", "retrieve_working_memory('sort')", "current_tasks()", "wait_for_trigger()",
                           "retrieve_declarative_memory('sort')", "wait_for_trigger()"])
    household = FakeHousehold()
    manager = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), api_profile="household",
                                     memory=str(tmp_path / "learned"), dialog_timeout=60.0)
    memory = graphs(memory_node(tmp_path))
    g = graphs(manager, household.node)
    lines: list[str] = []
    g.probe.create_subscription(TranscriptUpdate, "/interaction/transcript", lambda m: lines.extend(m.lines), TRANSCRIPT_QOS)
    speak = g.probe.create_publisher(DialogTurn, "/dialog/user", COMMAND_QOS)

    def turn(words: str, statements: int) -> None:
        wait_until(lambda: lines and lines[-1] == ">>> wait_for_trigger()", what=f"the console waiting; transcript {lines}")
        wait_until(lambda: speak.get_subscription_count() > 0, what="the dialog subscription")
        speak.publish(DialogTurn(speaker="user", type="dialog", text=words))
        wait_until(lambda: model.served >= statements and lines[-1] == ">>> wait_for_trigger()", timeout=60.0,
                   what=f"{statements} statements; transcript {lines}")

    try:
        wait_until(lambda: manager.task_memory.remote.ready(), what="the memory node's task services")
        turn("please sort the table", 5)
        begun = transcript_value(lines, "begin_task('sort')")
        assert begun["status"] == "active" and begun["remaining"] == SORT_STEPS
        assert begun["instruction"] == "please sort the table"  # the person's words, as the console heard them
        working = transcript_value(lines, "retrieve_working_memory('sort')")
        assert working["done"] == SORT_STEPS[:1] and working["task_relevant_objects"]["apple"] == "box 1"
        assert not manager.task_memory.using_local
        records = TaskLogStore(tmp_path / "tasks").records("sort")
        assert [(r.function, r.environment["apple"].at) for r in records[1:]] == [("grasp", "robot"), ("place_object", "box 1")]

        memory.close()  # the memory node goes away: the same store, opened in the interaction manager's process
        wait_until(lambda: not manager.task_memory.remote.ready(), what="the task services to go")
        turn("how far are we?", 9)
        assert manager.task_memory.using_local
        second = transcript_value(lines[lines.index(">>> grasp('banana')"):], "retrieve_working_memory('sort')")
        assert second["done"] == SORT_STEPS[:1] and second["task_relevant_objects"]["banana"] == "robot"
        assert second["status"] == "active"
        assert transcript_value(lines, "current_tasks()")[0]["task"] == "sort"
        assert [r.function for r in TaskLogStore(tmp_path / "tasks").records("sort")[1:]] == ["grasp", "place_object", "grasp"]

        graphs(memory_node(tmp_path))  # back: the node reads what was logged without it
        wait_until(lambda: manager.task_memory.remote.ready(), what="the task services to come back")
        turn("what did you do?", 11)
        assert not manager.task_memory.using_local
        recalled = transcript_value(lines, "retrieve_declarative_memory('sort')")  # the node's query 'recall'
        assert [a["action"] for a in recalled["recent_actions"]] == ["grasp('apple')", "place_object('box 1')", "grasp('banana')"]
        assert recalled["task_state"] == {"box 1": ["apple"], "robot": ["banana"]} and recalled["source"] == "extractor"
    finally:
        household.close()  # the manager is closed with its graph


def _manager_main(root: Path) -> None:
    from teachbot.ros_env import configure_loopback

    configure_loopback()  # a ROS domain of its own
    rclpy.init()
    made: list[Graph] = []

    def graphs(*nodes) -> Graph:
        made.append(Graph(*nodes, name=f"manager_{len(made)}"))
        return made[-1]

    try:
        interaction_manager_scenario(graphs, root)
        print("ok: interaction manager", flush=True)
    finally:
        for g in made:
            g.close()
        rclpy.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        raise SystemExit(serve(Path(sys.argv[2])))
    _manager_main(Path(sys.argv[2]))
