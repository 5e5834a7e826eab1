"""Distilled knowledge in the console: the "What I know" block in the prompt and learned skill parameters
as an object's defaults (teachbot.interaction.knowledge), with the real knowledge base, MiniLM and the
classic descriptor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from teachbot.console.prompt import PromptBuilder
from teachbot.interaction.examples import MemoryUnavailable
from teachbot.interaction.knowledge import ConsoleKnowledge, FallbackKnowledge, Found, LocalKnowledge, named_object
from teachbot.knowledge import ColourDepthDescriptor, KnowledgeEntry, KnowledgeRetriever, KnowledgeStore
from teachbot.language.prompts import CURRENT_HEADER, EXAMPLE_HEADER
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.llm.base import SYSTEM_END
from teachbot.skills.parameters import SkillParameters


@pytest.fixture(scope="module")
def minilm():
    from teachbot.memory import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()  # the bundled all-MiniLM-L6-v2, offline
    embedder.warm_up()
    return embedder


def patch(rgb: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    """A 24x24 crop of one colour with a little sensor noise."""
    noise = np.random.default_rng(seed).integers(-6, 7, size=(24, 24, 3))
    return np.clip(np.array(rgb)[None, None, :] + noise, 0, 255).astype(np.uint8)


@pytest.fixture()
def knowledge(tmp_path: Path, minilm):
    store = KnowledgeStore(tmp_path / "knowledge")
    descriptor = ColourDepthDescriptor()
    store.add(KnowledgeEntry(kind="preference", text="The person wants the robot to announce each move before it moves."))
    store.add(KnowledgeEntry(kind="constraint", text="Fragile things go on the left side of the shelf.",
                             task="put the glass on the shelf"))
    store.add(KnowledgeEntry(kind="skill_parameter", text="Grasp the red cup 2 cm higher.", task="put the red cup in the bowl",
                             object="red cup", skill="put_first_on_second", scope="object",
                             parameters={"grasp_height_offset": 0.02},
                             image_embedding=descriptor.embed(patch((200, 30, 30))), image_model=descriptor.name))
    images = {"red cup": patch((200, 30, 30), 1), "crimson mug": patch((205, 35, 28), 2), "blue bowl": patch((30, 40, 200), 3)}
    retriever = KnowledgeRetriever(store, minilm, descriptor)
    logs: list[str] = []
    declared = SkillParameters.load("tabletop").declared
    console = ConsoleKnowledge(LocalKnowledge(retriever, lambda name: descriptor.embed(images[name]) if name in images else None),
                               declared, logs.append, inject=True)  # the labelled option: learned parameters applied silently
    return console, store, logs


def test_named_object_is_the_longest_scene_name_in_the_words() -> None:
    objects = ["cup", "red cup", "blue bowl"]
    assert named_object("please put the red cup in the blue bowl", objects) == "red cup"
    assert named_object("wipe the table", objects) == ""


def test_the_block_shows_preferences_always_and_task_knowledge_for_a_similar_task(knowledge) -> None:
    console, _, _ = knowledge
    shelf = console.block(["put the wine glass on the shelf"], ["wine glass", "shelf"])
    assert shelf.splitlines()[0] == "# What I know:"
    assert "announce each move" in shelf and "Fragile things go on the left" in shelf
    other = console.block(["wipe the kitchen table"], ["sponge"])
    assert "announce each move" in other and "Fragile" not in other and "2 cm higher" not in other
    assert console.block([], []) == ""


def test_the_block_sits_before_the_examples_and_survives_their_trimming(knowledge) -> None:
    console, _, _ = knowledge

    class Examples:
        def examples(self, profile, instructions, k):
            return [">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'stack the blocks'}"]

    builder = PromptBuilder.for_profile(RobotApi.load("tabletop"), Examples(), 4,
                                        knowledge=lambda said: console.block(said, ["wine glass"]))
    transcript = Transcript.parse(">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'put the wine glass on the shelf'}")
    prompt = builder.build(transcript)
    after_system = prompt.split(SYSTEM_END, 1)[1]
    block_at, example_at = after_system.index("# What I know:"), after_system.index(EXAMPLE_HEADER)
    assert block_at < example_at < after_system.index(CURRENT_HEADER)
    assert builder.last_block.startswith("# What I know:")


def test_learned_parameters_become_the_objects_defaults_by_name_and_by_looks(knowledge) -> None:
    """By name always; by looks (another name) only in the same kind of task: the tasks compared with the
    objects' names masked ("put the object in the bowl")."""
    console, _, logs = knowledge
    calls: list[tuple[str, str, dict]] = []

    def put_first_on_second(obj_name: str, target: str, **parameters: float) -> str:
        calls.append((obj_name, target, parameters))
        return "success"

    functions = console.wrap({"put_first_on_second": put_first_on_second, "say": print})
    assert functions["say"] is print  # not a parameterised skill: untouched
    console.block(["put the red cup into the bowl"], ["red cup", "crimson mug", "blue bowl"])  # the request now
    functions["put_first_on_second"]("red cup", "blue bowl")
    functions["put_first_on_second"]("crimson mug", "blue bowl")  # another name, the same looks, a similar task
    functions["put_first_on_second"]("blue bowl", "red cup")  # looks different: the defaults stay
    functions["put_first_on_second"]("red cup", "blue bowl", grasp_height_offset=-0.01)  # the LLM's keyword wins
    functions["put_first_on_second"](obj_name="red cup", target="blue bowl")
    console.block(["wipe the shelf with the crimson mug"], [])  # another kind of task: looks alone are not enough ...
    functions["put_first_on_second"]("crimson mug", "top left corner")
    functions["put_first_on_second"]("red cup", "top left corner")  # ... but this very object by name is
    assert [c[2] for c in calls] == [{"grasp_height_offset": 0.02}, {"grasp_height_offset": 0.02}, {},
                                     {"grasp_height_offset": -0.01}, {"grasp_height_offset": 0.02}, {},
                                     {"grasp_height_offset": 0.02}]
    assert any("put_first_on_second('red cup') uses learned parameters: grasp_height_offset=0.02" in line for line in logs)
    assert [(name, thing) for name, thing, _ in console.applied] == [
        ("put_first_on_second", "red cup"), ("put_first_on_second", "crimson mug"), ("put_first_on_second", "red cup"),
        ("put_first_on_second", "red cup")]
    assert console.applied_values("put_first_on_second", "crimson mug") == {"grasp_height_offset": 0.02}
    assert console.applied_values("put_first_on_second", "blue bowl") == {}


def test_an_undeclared_learned_parameter_is_never_passed(tmp_path: Path, minilm) -> None:
    store = KnowledgeStore(tmp_path / "k")
    store.add(KnowledgeEntry(kind="skill_parameter", text="Wipe the table four times.", object="table", skill="wipe",
                             scope="object", parameters={"wipe_passes": 4, "pressure": 9.0}))
    console = ConsoleKnowledge(LocalKnowledge(KnowledgeRetriever(store, minilm)), SkillParameters.load("household").declared)
    assert console.learned_parameters("wipe", "table") == {"wipe_passes": 4}
    assert console.learned_parameters("wipe", "counter") == {}
    assert console.learned_parameters("say", "table") == {}


def test_the_block_is_cached_until_forgotten_and_a_new_entry_then_shows(knowledge) -> None:
    console, store, _ = knowledge
    first = console.block(["put the wine glass on the shelf"], [])
    store.add(KnowledgeEntry(kind="robot_constraint", text="The arm cannot reach the top shelf."))
    assert console.block(["put the wine glass on the shelf"], []) == first
    console.forget()
    assert "cannot reach the top shelf" in console.block(["put the wine glass on the shelf"], [])


def test_fallback_reads_locally_when_the_memory_service_is_away(knowledge) -> None:
    console, _, _ = knowledge
    lines: list[str] = []

    class Away:
        def find(self, *args, **kwargs) -> Found:
            raise MemoryUnavailable("the memory service memory/retrieve_knowledge is not running")

    fallback = FallbackKnowledge(Away(), console.source, lines.append)
    assert "announce each move" in fallback.find("wipe the table").block
    assert lines == ["the memory service memory/retrieve_knowledge is not running; reading the knowledge base in this process instead"]
    quiet = ConsoleKnowledge(Away(), SkillParameters.load("tabletop").declared, lines.append)
    assert quiet.block(["wipe the table"], []) == "" and "no knowledge for this request" in lines[-1]


def test_place_parameters_follow_the_object_in_the_hand(tmp_path: Path, minilm) -> None:
    store = KnowledgeStore(tmp_path / "k")
    descriptor = ColourDepthDescriptor()
    looks = {"red mug": descriptor.embed(patch((200, 30, 30))), "glass": descriptor.embed(patch((40, 60, 210)))}
    store.add(KnowledgeEntry(kind="skill_parameter", text="Put the red mug further left.", task="put the red mug on the table",
                             object="red mug", skill="place_object", scope="object", parameters={"place_offset_across": 0.03},
                             image_embedding=looks["red mug"], image_model=descriptor.name))
    console = ConsoleKnowledge(LocalKnowledge(KnowledgeRetriever(store, minilm, descriptor), looks.get),
                               SkillParameters.load("household").declared, inject=True)
    calls: list[tuple[str, dict]] = []
    functions = console.wrap({"grasp": lambda object_name, **p: calls.append(("grasp", p)) or "success",
                              "place_object": lambda location, **p: calls.append((location, p)) or "success"})
    console.block(["put the red mug on the table"], ["red mug", "glass"])
    functions["grasp"]("red mug")
    functions["place_object"]("table")  # the mug in the hand: its learned offset
    functions["grasp"]("glass")
    functions["place_object"]("table")  # a glass, which looks different: the same location, not the same knowledge
    assert calls == [("grasp", {}), ("table", {"place_offset_across": 0.03}), ("grasp", {}), ("table", {})]
    assert list(console.applied) == [("place_object", "red mug", {"place_offset_across": 0.03})]


def test_silent_injection_is_a_labelled_option_off_by_default(tmp_path: Path, minilm) -> None:
    from teachbot.interaction.knowledge import inject_configured

    assert inject_configured() is False  # config/knowledge.yaml: the model writes learned values itself
    store = KnowledgeStore(tmp_path / "k")
    store.add(KnowledgeEntry(kind="skill_parameter", text="Grasp the red block higher.", task="stack the red block",
                             object="red block", skill="put_first_on_second", scope="object", parameters={"grasp_height_offset": 0.02}))
    calls: list[dict] = []
    functions = {"put_first_on_second": lambda a, b, **p: calls.append(p) or "success"}
    quiet = ConsoleKnowledge(LocalKnowledge(KnowledgeRetriever(store, minilm)), SkillParameters.load("tabletop").declared)
    assert "grasp_height_offset=0.02" in quiet.block(["stack the red block on the blue block"], ["red block", "blue block"])  # shown
    quiet.wrap(functions)["put_first_on_second"]("red block", "blue block")
    loud = ConsoleKnowledge(LocalKnowledge(KnowledgeRetriever(store, minilm)), SkillParameters.load("tabletop").declared, inject=True)
    loud.block(["stack the red block on the blue block"], ["red block", "blue block"])
    loud.wrap(functions)["put_first_on_second"]("red block", "blue block")
    assert calls == [{}, {"grasp_height_offset": 0.02}] and list(quiet.applied) == []
