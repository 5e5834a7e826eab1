"""DROC end to end in the console, offline, in the tabletop simulation (issue 13, the offline proofs).

The robot grasps a block too high and fails; the person (judging the simulator's ground truth) says
"a bit lower" twice; the correction handler re-runs the call with a lower grasp each time (the second
compounds on the first) and the second retry succeeds in the simulation. At the end of the task the
extractor distils a skill-parameter entry with the block's crop descriptor from the camera; in the next
task the learned value is that block's default (the LLM writes no keyword) and the grasp succeeds at
once, while a block of another colour keeps the skill's default.

The models are doubles whose answers depend on their prompts: the interaction double copies the too-high
grasp only when its prompt holds no knowledge of the block, the correction double reads the person's
words from its prompt and answers in a fenced block with prose around it, as chat models do.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from teachbot.console.session import SessionConfig
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.evaluation.doubles import current_transcript
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.core import ENDED
from teachbot.interaction.knowledge import ConsoleKnowledge, LocalKnowledge
from teachbot.knowledge import (
    ColourDepthDescriptor,
    CorrectionHandler,
    KnowledgeExtractor,
    KnowledgeRetriever,
    KnowledgeStore,
    crop_object,
)
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.language.prompts import CURRENT_HEADER
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import person_outputs
from teachbot.learning.improver import Improver
from teachbot.learning.learner import Learner
from teachbot.llm.base import SYSTEM_END
from teachbot.llm.scripted import ScriptedModel
from teachbot.simrobot.direct import DirectArm, DirectSkills, WorldObjects
from teachbot.skills.library import SkillLibrary
from teachbot.skills.parameters import SkillParameters
from teachbot.world.scene import scene_from_yaml

SCENE = """
objects:
  - {category: block, color: red, position: [-0.1, -0.45]}
  - {category: block, color: green, position: [0.12, -0.6]}
  - {category: bowl, color: blue, position: [0.1, -0.35]}
"""
TOO_HIGH = 0.04  # the fingers close above a 4 cm block (measured: 0.03 fails too, 0.02 holds it)


class Person(DialogChannel):
    """Asks for one block in the blue bowl; at each return of control judges the simulator's ground truth."""

    def __init__(self, world, block: str) -> None:
        super().__init__(timeout=5.0)
        self.world, self.block = world, block
        self.request = f"put the {block} in the blue bowl"
        self.started = False
        self.corrections = 0

    def done(self) -> bool:
        objects = {o.name: o for o in self.world.objects()}
        block, bowl = objects[self.block].position, objects["blue bowl"].position
        return bool(np.linalg.norm(block[:2] - bowl[:2]) < 0.05 and block[2] < bowl[2] + 0.05)

    def wait_for_trigger(self) -> dict:
        if not self.started:
            self.started = True
            return {"type": "dialog", "text": self.request}
        if self.done() or self.corrections >= 3:
            raise SessionEnded("the person is satisfied")
        self.corrections += 1
        return {"type": "dialog", "text": "You closed the gripper above the block. Grasp it a bit lower."}


def interaction(prompt: str) -> str:
    """Types the task's call after the request (too high a grasp unless the prompt knows better), then waits."""
    transcript = current_transcript(prompt)
    said = sorted(person_outputs(transcript.entries))
    if len(said) == 1 and said[-1] == len(transcript.entries) - 1:
        request = transcript.instructions()[0]
        block = re.search(r"the (\w+ block)", request).group(1)
        shown = prompt.split(SYSTEM_END, 1)[1].split(CURRENT_HEADER, 1)[0]  # the knowledge block and examples
        known = "# What I know:" in shown and block in shown
        keyword = "" if known else f", grasp_height_offset={TOO_HIGH}"
        return f"put_first_on_second('{block}', 'blue bowl'{keyword})"
    return "wait_for_trigger()"


def correction(prompt: str) -> str:
    """Reads the person's words out of the handler's prompts; answers as a chat model does. What the correction
    depends on (the first step): "a bit lower" says everything itself, (c)."""
    if 'Correction: "' in prompt:
        return "(c)" if "lower" in prompt.rsplit('Correction: "', 1)[1] else "(a)"
    said = prompt.rsplit("The person now says:", 1)[1].split("\n", 1)[0]
    call = re.findall(r"put_first_on_second\('(\w+ block)'", prompt)
    if "lower" in said and call:
        return ("The grasp was too high, so the skill's grasp height must come down a little.\n```json\n"
                '{"correction": true, "level": "skill", "history": "last", "skill": "put_first_on_second", '
                f'"object": "{call[-1]}", "parameter": "grasp_height_offset", "direction": "-", "amount": "small", '
                '"value": null, "absolute": false, "constraint": ""}\n```')
    return '{"correction": false, "level": "none", "history": "none"}'


@pytest.fixture()
def robot(world, profile, tabletop, tmp_path: Path):
    descriptor = ColourDepthDescriptor()
    from teachbot.config import load_yaml
    from teachbot.paths import config_path
    from teachbot.sim.camera import CameraSpec

    camera = CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])

    def image(name: str):
        frame = world.render(camera)
        body = next(o.body_id for o in world.objects() if o.name == name)
        return descriptor.embed(*crop_object(frame.rgb, frame.depth, frame.segmentation, body))

    from teachbot.memory import SentenceTransformerEmbedder

    api = RobotApi.load("tabletop")
    store = KnowledgeStore(tmp_path / "knowledge")
    parameters = SkillParameters.load("tabletop", profile=profile)
    sizes = lambda name: next((o.size for o in world.objects() if o.name == name), None)  # noqa: E731
    retriever = KnowledgeRetriever(store, SentenceTransformerEmbedder(), descriptor)
    logs: list[str] = []
    knowledge = ConsoleKnowledge(LocalKnowledge(retriever, image), parameters.declared, logs.append, inject=True)  # the option
    learner = Learner.in_process(Improver(ScriptedModel([], name="improvement:none"), api),
                                 extractor=KnowledgeExtractor(None, api, parameters), knowledge=store,
                                 image_of=lambda name: (image(name), descriptor.name))
    handler = CorrectionHandler(ScriptedModel(respond=correction, name="correction:double"), api, parameters,
                                object_size=sizes)
    return {"api": api, "store": store, "knowledge": knowledge, "learner": learner, "handler": handler, "logs": logs}


def episode(world, robot: dict, block: str, lib: SkillLibrary) -> tuple[InteractionCore, Person]:
    person = Person(world, block)
    functions = TabletopRobot(DirectSkills(lib), lambda: {o.name: o.position for o in world.objects()}, person).functions()
    core = InteractionCore(robot["api"], functions, person, ScriptedModel(respond=interaction, name="interaction:double"),
                           config=CoreConfig(session=SessionConfig(max_rounds=12), examples_k=0), learner=robot["learner"],
                           scene_objects=lambda: sorted(o.name for o in world.objects()), knowledge=robot["knowledge"],
                           corrections=robot["handler"], log=robot["logs"].append)
    try:
        assert core.run_episode() == ENDED
    finally:
        core.shutdown()
    return core, person


def test_a_skill_level_correction_retries_and_the_learned_parameter_becomes_the_blocks_default(world, profile, tabletop, robot):
    world.reset(scene_from_yaml(SCENE, tabletop))
    lib = SkillLibrary(profile, DirectArm(world), WorldObjects(world))
    core, person = episode(world, robot, "red block", lib)
    lines = core.session.transcript.render().splitlines()
    assert person.corrections == 2 and person.done()  # two corrections, then the block is in the bowl
    notes = [line for line in lines if line.startswith("# correction: ")]
    assert notes == [  # "a bit lower" says everything itself (no dependence) and starts from where the robot is: it compounds
        "# correction: skill-level, regardless of the history: put_first_on_second('red block', 'blue bowl') again with "
        "grasp_height_offset=0.03 (was 0.04)",
        "# correction: skill-level, regardless of the history: put_first_on_second('red block', 'blue bowl') again with "
        "grasp_height_offset=0.02 (was 0.03)",
    ]
    reruns = [lines[lines.index(note) + 1] for note in notes]  # typed by the console right after its note
    assert reruns == [">>> put_first_on_second('red block', 'blue bowl', grasp_height_offset=0.03)",
                      ">>> put_first_on_second('red block', 'blue bowl', grasp_height_offset=0.02)"]
    assert "closed on nothing" in lines[lines.index(reruns[0]) + 1]
    assert lines[lines.index(reruns[1]) + 1] == "'success'"
    # the end of the task distilled the parameter with the block's looks
    [entry] = robot["store"].list(kind="skill_parameter")
    assert entry.object == "red block" and dict(entry.parameters) == {"grasp_height_offset": 0.02}
    assert entry.image_embedding is not None and entry.image_model == ColourDepthDescriptor().name
    assert "Grasp it a bit lower" in " ".join(entry.provenance.source)

    # the next task: the block elsewhere, the learned grasp is its default and works at once
    moved = SCENE.replace("[-0.1, -0.45]", "[-0.15, -0.55]")
    world.reset(scene_from_yaml(moved, tabletop))
    lib = SkillLibrary(profile, DirectArm(world), WorldObjects(world))
    core, person = episode(world, robot, "red block", lib)
    assert person.corrections == 0 and person.done()
    assert ">>> put_first_on_second('red block', 'blue bowl')" in core.session.transcript.render()
    assert "# What I know:" in core.prompts.last_block and "grasp_height_offset=0.02" in core.prompts.last_block
    assert robot["knowledge"].applied[-1] == ("put_first_on_second", "red block", {"grasp_height_offset": 0.02})

    # looks as descriptor v2 is calibrated (config/knowledge.yaml: shape counts, colour is the distractor): a block of
    # another colour looks alike and gets the knowledge; the bowl, another shape, does not and keeps the default
    applied = len(robot["knowledge"].applied)
    world.reset(scene_from_yaml(SCENE, tabletop))
    lib = SkillLibrary(profile, DirectArm(world), WorldObjects(world))
    robot["knowledge"].forget()
    assert robot["knowledge"].source.find("", "green block", kind="skill_parameter", skill="put_first_on_second").entries
    found = robot["knowledge"].source.find("", "blue bowl", kind="skill_parameter", skill="put_first_on_second")
    assert found.entries == ()
    assert robot["knowledge"].learned_parameters("put_first_on_second", "blue bowl") == {}
    assert len(robot["knowledge"].applied) == applied

