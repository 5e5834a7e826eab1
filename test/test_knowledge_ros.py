"""The knowledge base over ROS (DROC): memory/add_knowledge and memory/retrieve_knowledge of the memory
node (all or nothing, the files on disk, the visual filter), perception/describe_object on the tabletop
camera, and the improvement node distilling knowledge (distill_only, and after the improvement chain)
into the memory node, with the objects' crop vectors from perception. Real rclpy nodes in this process."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import rclpy
import ros_graph
from teachbot_interfaces.msg import KnowledgeEntry as KnowledgeEntryMsg
from teachbot_interfaces.msg import MemoryUpdate, ObjectList
from teachbot_interfaces.srv import AddKnowledge, DescribeObject, Improve, RetrieveKnowledge
from timing import pytest_timeout, timeout

from teachbot.knowledge import ColourDepthDescriptor, KnowledgeConfig, KnowledgeEntry, Provenance, similarity
from teachbot.llm.scripted import ScriptedModel
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.store import MemoryStore
from teachbot.nodes.common import LATCHED_QOS
from teachbot.nodes.improvement_node import ImprovementNode
from teachbot.nodes.knowledge_convert import entry_from_msg, entry_to_msg
from teachbot.nodes.memory_node import MemoryNode
from teachbot.nodes.perception_node import PerceptionNode

pytestmark = pytest.mark.timeout(pytest_timeout(500))

DESCRIPTOR = ColourDepthDescriptor(KnowledgeConfig.load().descriptor)  # what config/knowledge.yaml names (classic)


class WordEmbedder:
    """Bag of words hashed into 256 dimensions: similar sentences share words (no model to load)."""

    name = "words-256"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 256), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                rows[i, int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % 256] += 1.0
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms > 0, norms, 1.0)


def crop(colour: tuple[int, int, int], seed: int = 0, step: bool = False) -> tuple[np.ndarray, np.ndarray, None]:
    """A shaded, noisy patch of one colour with a flat top (a block seen from above); ``step``: its upper half
    4 cm deeper (another shape)."""
    rng = np.random.default_rng(seed)
    rgb = np.clip(np.asarray(colour, float) * np.linspace(0.8, 1.05, 24)[None, :, None] + rng.normal(0, 8, (24, 24, 3)), 0, 255)
    depth = np.full((24, 24), 0.7, np.float32)
    if step:
        depth[:12] += 0.04
    return rgb.astype(np.uint8), depth, None


RED, BLUE = (200, 30, 30), (40, 60, 200)
# tools/calibrate_looks.py's threshold for descriptor v2 from the cups alone (Issue 29 item 4): same-pose cups at other
# places and yaws score above it, other-pose cups below (config/knowledge.yaml's 0.672 also weighs the DROC objects' pairs)
CALIBRATED_THRESHOLD = 0.62


def wait_until(predicate, timeout=60.0, what="condition"):
    ros_graph.wait_until(predicate, timeout, what, period=0.05)


def call(client, request, timeout=30.0):
    return ros_graph.call(client, request, timeout)


class Graph(ros_graph.Graph):
    def __init__(self, *nodes, name: str) -> None:
        super().__init__(*nodes, name=name, prefix="knowledge_probe")


@pytest.fixture()
def graphs(ros_context, request):
    made: list[Graph] = []

    def make(*nodes) -> Graph:
        made.append(Graph(*nodes, name=f"{request.node.name[5:30]}_{len(made)}"))
        return made[-1]

    yield make
    for g in made:
        g.close()


def memory_node(tmp_path: Path) -> MemoryNode:
    return MemoryNode(EpisodicMemory(MemoryStore(tmp_path / "learned"), WordEmbedder()), knowledge_dir=str(tmp_path / "knowledge"))


# ---------------------------------------------------------------------------------------------- conversions
def test_entries_round_trip_through_the_message() -> None:
    entry = KnowledgeEntry(id="k1", kind="skill_parameter", text="Grasp the red block higher.", task="stack the blocks",
                           object="red block", skill="put_first_on_second",
                           parameters={"grasp_height_offset": 0.02, "side": "left", "careful": True, "offsets": [0.01, 0]},
                           provenance=Provenance("ep-1", "robot-1", "model-x", "2026-01-02T03:04:05+00:00", ("grab it higher",)),
                           image_embedding=DESCRIPTOR.embed(*crop(RED)), image_model=DESCRIPTOR.name)
    msg = entry_to_msg(entry)
    assert msg.parameter_values == ["0.02", '"left"', "true", "[0.01, 0]"]
    back = entry_from_msg(msg)
    assert back.replace(image_embedding=None) == entry.replace(image_embedding=None)
    assert np.allclose(back.image_embedding, entry.image_embedding, atol=1e-6)  # float32 on the wire


# ---------------------------------------------------------------------------------------------- memory node
def test_add_and_retrieve_knowledge_over_ros(graphs, tmp_path: Path) -> None:
    node = memory_node(tmp_path)
    g = graphs(node)
    updates: list[MemoryUpdate] = []
    g.probe.create_subscription(MemoryUpdate, "/memory/updated", updates.append, LATCHED_QOS)
    add = g.client(AddKnowledge, "/memory/add_knowledge")
    retrieve = g.client(RetrieveKnowledge, "/memory/retrieve_knowledge")
    red = DESCRIPTOR.embed(*crop(RED))
    grasp = KnowledgeEntry(kind="skill_parameter", text="Grasp the red block 2 cm higher.", task="put the red block in the green bowl",
                           object="red block", skill="put_first_on_second", parameters={"grasp_height_offset": 0.02},
                           provenance=Provenance(episode_id="ep-7", source=("grab it higher",)),
                           image_embedding=red, image_model=DESCRIPTOR.name)
    likes = KnowledgeEntry(kind="preference", text="The person wants things handed over on the left.")
    reply = call(add, AddKnowledge.Request(entries=[entry_to_msg(grasp), entry_to_msg(likes)]))
    assert reply.success, reply.message
    assert len(reply.ids) == 2 and reply.message == "stored 2 knowledge entries"
    # the files on disk: one JSON per entry, as KnowledgeStore writes them
    stored = {p.stem: KnowledgeEntry.from_dict(json.loads(p.read_text())) for p in (tmp_path / "knowledge").glob("*.json")}
    assert sorted(stored) == sorted(reply.ids)
    on_disk = stored[reply.ids[0]]
    assert on_disk.parameters == {"grasp_height_offset": 0.02} and on_disk.provenance.episode_id == "ep-7"
    assert on_disk.created and on_disk.image_model == DESCRIPTOR.name and len(on_disk.image_embedding) == len(red)
    wait_until(lambda: updates and updates[-1].action == MemoryUpdate.KNOWLEDGE_ADDED, what="the knowledge update")
    assert updates[-1].example_id == reply.ids[1] and updates[-1].size == 2

    # the same object at hand (another view of a red block): both; a blue thing of another shape: the red block's
    # entry is dropped (the descriptor weighs shape most: Issue 29 item 4)
    task = "put the red block in the bowl"
    near = call(retrieve, RetrieveKnowledge.Request(task=task, object_name="red block", image=DESCRIPTOR.embed(*crop(RED, seed=5)),
                                                    image_model=DESCRIPTOR.name))
    assert near.success, near.message
    assert [e.text for e in near.entries] == [likes.text, grasp.text] and list(near.reasons) == ["always", "task"]
    assert entry_from_msg(near.entries[1]).parameters == {"grasp_height_offset": 0.02} and near.scores[1] > 0.5
    assert near.block.splitlines() == ["# What I know:", f"# - {likes.text}", f"# - {grasp.text} (put_first_on_second: "
                                       "grasp_height_offset=0.02)"]
    far = call(retrieve, RetrieveKnowledge.Request(task=task, object_name="blue block", image=DESCRIPTOR.embed(*crop(BLUE, step=True)),
                                                   image_model=DESCRIPTOR.name))
    assert far.success and [e.text for e in far.entries] == [likes.text]
    # an image of another embedder is not compared (said in the message); filters by kind and skill
    other = call(retrieve, RetrieveKnowledge.Request(task=task, image=[0.1, 0.2], image_model="clip-other"))
    assert other.success and len(other.entries) == 2 and "image of clip-other not compared" in other.message
    only = call(retrieve, RetrieveKnowledge.Request(task=task, kind="skill_parameter"))
    assert [e.text for e in only.entries] == [grasp.text]
    assert [e.text for e in call(retrieve, RetrieveKnowledge.Request(task=task, skill="wipe")).entries] == []
    nothing = call(retrieve, RetrieveKnowledge.Request(task="wipe the table", kind="object_state"))
    assert nothing.success and nothing.block == "" and list(nothing.entries) == []
    bad = call(retrieve, RetrieveKnowledge.Request(task=task, kind="opinion"))
    assert not bad.success and "unknown kind filter 'opinion'" in bad.message


def test_a_bad_entry_refuses_the_whole_request(graphs, tmp_path: Path) -> None:
    node = memory_node(tmp_path)
    g = graphs(node)
    add = g.client(AddKnowledge, "/memory/add_knowledge")
    good = entry_to_msg(KnowledgeEntry(kind="constraint", text="Put blocks into the bowl, not next to it.",
                                       task="put the block in the bowl"))
    cases = {
        "kind": KnowledgeEntryMsg(kind="opinion", text="Blocks are nice."),
        "parameter_values": KnowledgeEntryMsg(kind="skill_parameter", text="Grasp higher.", skill="pick",
                                              parameter_names=["grasp_height_offset"], parameter_values=["left"]),
        "text": KnowledgeEntryMsg(kind="preference", text="  "),
        "image_model": KnowledgeEntryMsg(kind="object_info", text="It is fragile.", object="cup", image_embedding=[0.5]),
    }
    for field, bad in cases.items():
        reply = call(add, AddKnowledge.Request(entries=[good, bad]))
        assert not reply.success and list(reply.ids) == []
        assert reply.message.startswith("nothing stored: entry 1") and f"field '{field}'" in reply.message, reply.message
    assert list((tmp_path / "knowledge").glob("*.json")) == []  # the good first entry was not stored either
    first = call(add, AddKnowledge.Request(entries=[good]))
    assert first.success
    again = call(add, AddKnowledge.Request(entries=[entry_to_msg(KnowledgeEntry(id=first.ids[0], kind="preference", text="x"))]))
    assert not again.success and "already exists" in again.message
    assert not call(add, AddKnowledge.Request(entries=[])).success
    assert len(list((tmp_path / "knowledge").glob("*.json"))) == 1


# ---------------------------------------------------------------------------------------------- perception
SCENE = """objects:
  - {category: block, color: red, position: [-0.12, -0.45]}
  - {category: block, color: green, position: [0.05, -0.62]}
  - {category: bowl, color: blue, position: [0.12, -0.38]}
"""
MOVED = """objects:
  - {category: block, color: red, position: [0.1, -0.6], yaw: 0.7}
  - {category: block, color: green, position: [-0.15, -0.4]}
  - {category: bowl, color: blue, position: [0.12, -0.38]}
"""


@pytest.fixture()
def perception(client, sim_camera, ros_context):
    """A perception node on the shared stack's camera, seeing SCENE."""
    client.reset(scene_yaml=SCENE)
    node = PerceptionNode()
    yield node


def see(g: Graph, names: set[str], stamp_after: float = -1.0) -> None:
    lists: list[ObjectList] = []
    g.probe.create_subscription(ObjectList, "/perception/objects", lists.append, LATCHED_QOS)

    def seen() -> bool:
        return bool(lists) and {o.name for o in lists[-1].objects} == names and all(
            o.last_seen.sec + o.last_seen.nanosec * 1e-9 > stamp_after for o in lists[-1].objects)

    wait_until(seen, what=f"perception to see {sorted(names)}")


def test_describe_object_on_the_tabletop_camera(graphs, perception, client) -> None:
    g = graphs(perception)
    describe = g.client(DescribeObject, "/perception/describe_object")
    see(g, {"red block", "green block", "blue bowl"})

    def vector(name: str) -> np.ndarray:
        reply = call(describe, DescribeObject.Request(name=name))
        assert reply.success, reply.message
        assert reply.image_model == DESCRIPTOR.name and len(reply.embedding) == DESCRIPTOR.config.size
        return np.asarray(reply.embedding)

    red, green, bowl = vector("red block"), vector("green block"), vector("blue bowl")
    # the shape counts most (descriptor v2, Issue 29 item 4): another block, of another colour, is nearer than the bowl
    assert similarity(red, bowl) < CALIBRATED_THRESHOLD and similarity(red, green) > similarity(red, bowl)
    missing = call(describe, DescribeObject.Request(name="purple block"))
    assert not missing.success and "unknown object 'purple block'" in missing.message and "red block" in missing.message
    # the same block elsewhere on the table, turned: it still looks alike
    client.reset(scene_yaml=MOVED)
    time.sleep(0.5)
    wait_until(lambda: np.linalg.norm(perception.scene.get("red block").position[:2] - [0.1, -0.6]) < 0.02
               if perception.scene.get("red block") is not None else False, what="perception to see the moved block")
    again = vector("red block")
    assert similarity(red, again) >= CALIBRATED_THRESHOLD, similarity(red, again)  # turned, it shows other faces
    assert similarity(again, vector("blue bowl")) < CALIBRATED_THRESHOLD


# ---------------------------------------------------------------------------------------------- improvement
TRANSCRIPT = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the red block in the blue bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'you grabbed the red block too low, it slipped; and I always want blocks in the bowl, never next to it'}
>>> learn_from_interaction()"""
OBJECTS = ["red block", "green block", "blue bowl"]
DISTILLED = json.dumps([
    {"kind": "object_info", "text": "The red block is slippery; grasp it firmly.", "object": "red block", "skill": "",
     "parameters": {}, "scope": "object"},
    {"kind": "constraint", "text": "Put blocks into the bowl, never next to it.", "object": "", "skill": "", "parameters": {},
     "scope": "task"},
    {"kind": "preference", "text": "The person likes purple.", "object": "purple block", "skill": "", "parameters": {},
     "scope": "always"},  # not in the scene: dropped by the extractor
])
CHAIN = ['{"problem": true, "description": "The robot grasped the red block too low."}',
         "Grasp the red block higher.", "Whenever the robot grasps blocks.",
         TRANSCRIPT.replace(">>> learn_from_interaction()", ">>> wait_for_trigger()")]


class Teacher(ScriptedModel):
    """Answers the extraction prompt with DISTILLED, the improvement chain's prompts in order with CHAIN."""

    def __init__(self) -> None:
        self.chain = 0
        self.extractions = 0
        super().__init__(respond=self._answer, name="teacher:scripted")

    def _answer(self, prompt: str) -> str:
        if "Distil what the robot should remember" in prompt:
            self.extractions += 1
            return f"Here is what to remember:\n```json\n{DISTILLED}\n```"
        self.chain += 1
        return CHAIN[(self.chain - 1) % len(CHAIN)]


def improve(g: Graph, **fields) -> Improve.Response:
    client = g.client(Improve, "/improvement/improve")
    wall = time.time() + timeout(30.0)
    request = Improve.Request(profile="tabletop", episode_id="ep-42", transcript=TRANSCRIPT, scene_objects=OBJECTS, **fields)
    request.deadline.sec, request.deadline.nanosec = int(wall), int((wall % 1) * 1e9)
    return call(client, request, timeout=40.0)


def test_the_improvement_node_distils_knowledge_into_memory(graphs, perception, tmp_path: Path) -> None:
    teacher = Teacher()
    memory = memory_node(tmp_path)
    g = graphs(perception, memory, ImprovementNode(model=teacher, mode="improve", robot_id="panda-test"))
    see(g, set(OBJECTS))
    g.client(DescribeObject, "/perception/describe_object").wait_for_service(timeout_sec=timeout(10.0))
    g.nodes[2].knowledge.wait_for_service(timeout_sec=timeout(10.0))

    reply = improve(g, distill_only=True)
    assert reply.stored, reply.message
    assert list(reply.knowledge) == ["The red block is slippery; grasp it firmly.", "Put blocks into the bowl, never next to it."]
    assert len(reply.knowledge_ids) == 2 and reply.improved_transcript == "" and reply.example_id == ""
    assert teacher.extractions == 1 and teacher.chain == 0  # no improvement chain for distill_only
    entries = {e.text: e for e in memory.knowledge.store.list()}
    assert sorted(entries) == sorted(reply.knowledge)
    block = entries["The red block is slippery; grasp it firmly."]
    assert block.id in reply.knowledge_ids and block.kind == "object_info" and block.task == "put the red block in the blue bowl"
    p = block.provenance
    assert (p.episode_id, p.robot_id, p.model) == ("ep-42", "panda-test", "teacher:scripted") and "slipped" in p.source[0]
    # the red block's crop vector from perception came with it: a red block's view finds it, the bowl's does not (a green
    # block is the red block's shape and, past config/knowledge.yaml's calibrated 0.672, may get its knowledge)
    assert block.image_model == DESCRIPTOR.name and block.image_embedding is not None
    assert entries["Put blocks into the bowl, never next to it."].image_embedding is None  # about no object
    retrieve = g.client(RetrieveKnowledge, "/memory/retrieve_knowledge")
    describe = g.client(DescribeObject, "/perception/describe_object")
    for name, found in (("red block", True), ("blue bowl", False)):
        view = call(describe, DescribeObject.Request(name=name))
        reply_k = call(retrieve, RetrieveKnowledge.Request(task="hand me that", object_name="", image=view.embedding,
                                                           image_model=view.image_model, kind="object_info"))
        assert reply_k.success and ([e.id for e in reply_k.entries] == [block.id]) is found, (name, reply_k)

    # a learn_from_interaction() request: the chain's lesson (memory/add) and the distilled knowledge
    reply = improve(g)
    assert reply.stored and reply.example_id, reply.message
    assert teacher.chain == 4 and teacher.extractions == 2
    assert len(reply.knowledge) == 2 and len(memory.knowledge.store) == 4 and len(memory.memory.store.list(source="learned")) == 1


def test_distill_only_without_a_knowledge_store_switched_off_or_without_perception(graphs, tmp_path: Path) -> None:
    teacher = Teacher()
    lone = ImprovementNode(model=teacher, mode="improve")
    g = graphs(lone)
    reply = improve(g, distill_only=True)
    assert not reply.stored and "no memory node serves memory/add_knowledge" in reply.message and teacher.extractions == 0
    g.close()
    off = ImprovementNode(model=teacher, mode="improve", distill=False)
    g = graphs(off, memory_node(tmp_path))
    off.knowledge.wait_for_service(timeout_sec=timeout(10.0))
    reply = improve(g, distill_only=True)
    assert not reply.stored and "distill parameter is false" in reply.message and teacher.extractions == 0
    g.close()
    # distillation on, a memory node and no perception: the entries are stored without images
    memory, teacher = memory_node(tmp_path / "again"), Teacher()  # a model publishes through its (closed) node's listener
    g = graphs(ImprovementNode(model=teacher, mode="improve"), memory)
    reply = improve(g, distill_only=True)
    assert reply.stored and len(reply.knowledge_ids) == 2 and teacher.extractions == 1, reply.message
    assert all(e.image_embedding is None for e in memory.knowledge.store.list())


# ---------------------------------------------------------------------------------------------- household
def test_describe_object_in_the_household_world():
    """perception/describe_object with observe: world_state (the mast camera's segmentation), in a child process
    on its own ROS domain (the household stack's nodes share names with the tabletop stack of this process)."""
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root / "test"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=pytest_timeout(400))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    assert "ok: household describe_object" in run.stdout, run.stdout


def _household_scenario() -> None:
    from teachbot.ros_env import configure_loopback

    configure_loopback()
    rclpy.init()
    from teachbot.nodes.nodeset import node_set
    from teachbot.nodes.stack import InProcessStack

    specs = node_set("sim", {"world": "household", "real_time_factor": 4.0, "camera": True},
                     only=("sim", "skills", "perception"), extra_parameters={"sim": {"camera_rate": 2.0}})
    stack = InProcessStack.from_node_set(specs)
    stack.start(wait=timeout(60.0))
    probe = rclpy.create_node("describe_probe")
    try:
        assert stack.client.reset(seed=0).success
        perception = stack.node("perception")
        describe = probe.create_client(DescribeObject, "/perception/describe_object")

        def ask(name: str) -> DescribeObject.Response:
            future = describe.call_async(DescribeObject.Request(name=name))
            rclpy.spin_until_future_complete(probe, future, timeout_sec=timeout(20.0))
            assert future.done(), "perception/describe_object did not answer"
            return future.result()

        assert describe.wait_for_service(timeout_sec=timeout(20.0))
        wait_until(lambda: perception.household.visible and len(perception.scene.objects()) > 1, what="the mast camera's view")
        time.sleep(1.5)  # the objects settle after the reset; the robot stands still from now on
        visible = sorted(perception.household.visible)
        hidden = sorted(o.name for o in perception.scene.objects() if o.name not in perception.household.visible)
        seen = ask(visible[0])
        assert seen.success and len(seen.embedding) == DESCRIPTOR.config.size and seen.image_model == DESCRIPTOR.name, seen.message
        time.sleep(1.0)  # two camera frames later
        again = ask(visible[0])
        assert again.success, again.message
        assert similarity(seen.embedding, again.embedding) > 0.95  # the same object in the same view
        out = ask(hidden[0])
        assert not out.success and "not in the camera's view" in out.message, out.message
        unknown = ask("unicorn")
        assert not unknown.success and "unknown object 'unicorn'" in unknown.message
        print(f"ok: household describe_object ({visible[0]} described; {hidden[0]} not in view)")
    finally:
        probe.destroy_node()
        stack.stop()
        rclpy.shutdown()


if __name__ == "__main__":
    _household_scenario()
