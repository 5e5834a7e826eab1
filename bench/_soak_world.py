"""The soak's robot, person and models (bench/soak.py): scripted doubles that read their prompt.

The robot takes the block the person meant only when its prompt holds a learned example for this very
request, otherwise the wrong one; the person corrects it once and asks to remember; the teacher (the
improvement chain's model) writes the corrected transcript. Skills are a fake that moves objects in a
dict at once, or the in-process tabletop sim (``SimSkills``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachbot.errors import ErrorCode
from teachbot.evaluation.doubles import current_transcript, literal_call, prompt_examples
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.language.transcript import Transcript, person_outputs, utterance_text
from teachbot.memory.embedding import normalise
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import InteractionExample
from teachbot.recording.scripted_sessions import SCENE
from teachbot.skills.library import SkillOutcome
from teachbot.world.scene import TabletopConfig, scene_from_yaml

WAIT, LEARN = "wait_for_trigger()", "learn_from_interaction()"
MEANT, GUESS = "green block", "red block"  # the block the person means; the robot's guess without a lesson
BOWLS = ("blue bowl", "yellow bowl")
CORRECTION = "No, I meant the {meant}. Remember that next time."
LOOP = "while True:\n    pass"
SAYS, SAY_CHARS = 40, 1500
CHATTY = f"for i in range({SAYS}):\n    say('part ' + str(i) + ': ' + 'bla ' * {SAY_CHARS // 4 - 3})"
TOO_LONG = "say('x' * 5000)"  # over bounds.max_say_chars: an error line, nothing said
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


class HashEmbedder:
    """A hashing embedder (no model to load), the short form's stand-in for MiniLM: words, word pairs
    and the whole text hashed into 512 dimensions, so two different requests practically never tie."""

    name = "soak-hash-512"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 512), dtype=np.float32)
        for row, text in zip(rows, texts):
            words = re.findall(r"\w+", text.lower())
            for token in [*words, *(" ".join(pair) for pair in zip(words, words[1:])), text]:
                row[int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "little") % 512] += 1.0
        return normalise(rows)


class FakeSkills:
    """Skills that put an object where it is asked at once, on a dict of object positions."""

    def __init__(self, table: TabletopConfig) -> None:
        self.scene = {o.name: [*o.position, 0.02] for o in scene_from_yaml(SCENE, table).objects}
        self.positions: dict[str, list[float]] = {}
        self.reset()

    def reset(self) -> None:
        self.positions = {name: list(xyz) for name, xyz in self.scene.items()}

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> SkillOutcome:
        obj, target = fields.get("object_name"), fields.get("target_name")
        if name != "put_first_on_second" or obj not in self.positions or (target and target not in self.positions):
            return SkillOutcome(False, ErrorCode.UNKNOWN_OBJECT, f"unknown object {obj!r} or {target!r}", 0.0)
        where = self.positions[target] if target else [*fields["target_point"], 0.0]
        self.positions[obj] = [where[0], where[1], where[2] + 0.04]
        return SkillOutcome(True, ErrorCode.SUCCESS, "success", 0.0)


class SimSkills:
    """The PyBullet tabletop sim in this process (``--sim``): the skill library on a world reset each episode."""

    def __init__(self, table: TabletopConfig) -> None:
        from teachbot.robot_profile import RobotProfile
        from teachbot.sim.world import TabletopWorld
        from teachbot.simrobot.direct import DirectArm, DirectSkills, WorldObjects
        from teachbot.skills.library import SkillLibrary

        self.table, profile = table, RobotProfile.load("panda_sim")
        self.world = TabletopWorld(profile, table)
        self.reset()
        self.skills = DirectSkills(SkillLibrary(profile, DirectArm(self.world), WorldObjects(self.world)))

    @property
    def positions(self) -> dict[str, list[float]]:
        return {o.name: [float(v) for v in o.position] for o in self.world.objects()}

    def reset(self) -> None:
        self.world.reset(scene_from_yaml(SCENE, self.table))

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> SkillOutcome:
        return self.skills.call(name, timeout, **fields)

    def close(self) -> None:
        self.world.close()


@dataclass(frozen=True)
class Episode:
    """What the person asks for in one episode; ``kind`` pick, loop or chatty."""

    index: int
    kind: str
    request: str
    recall: bool = False  # a pick request learned before: the robot must get it right at once


class Person(DialogChannel):
    """The scripted person: the episode's request first; after the robot acted, a correction when it
    moved the wrong block (once), else the end of the episode."""

    def __init__(self) -> None:
        super().__init__(timeout=5.0)
        self.episode: Episode | None = None
        self.pending = ""
        self.moves: list[tuple[str, str]] = []  # (object, target) the robot put this episode
        self.corrected = False

    def begin(self, episode: Episode) -> None:
        self.episode, self.pending, self.moves, self.corrected = episode, episode.request, [], False

    @property
    def satisfied(self) -> bool:
        return self.episode is not None and any(obj == MEANT and target in self.episode.request for obj, target in self.moves)

    def wait_for_trigger(self) -> dict:
        if self.pending:
            text, self.pending = self.pending, ""
            return {"type": "dialog", "text": text}
        if self.episode is not None and self.episode.kind == "pick" and self.moves and not self.satisfied and not self.corrected:
            self.corrected = True
            return {"type": "dialog", "text": CORRECTION.format(meant=MEANT)}
        raise SessionEnded("the person is done")


def spoken(number: int) -> str:
    """``number`` in digit words ("one two" for 12). Every request differs, but from a few episodes on
    they hold no new word: the tokenizer of MiniLM keeps native memory per new word (~7.6 MB over the
    first 1 000 new words, then ~0.1 KiB each), which is no growth of the console."""
    return " ".join(DIGITS[int(d)] for d in str(number))


def _person_words(transcript: Transcript) -> list[tuple[int, str]]:
    return [(i, utterance_text(transcript.entries[i].text)) for i in sorted(person_outputs(transcript.entries))]


def _statements_since(transcript: Transcript, index: int) -> int:
    return sum(1 for e in transcript.entries[index + 1:] if e.kind == "code")


def _bowl(request: str) -> str:
    return next((bowl for bowl in BOWLS if bowl in request), BOWLS[0])


def _learned_block(prompt: str, request: str) -> str | None:
    """The block an example in the prompt put for exactly this request, if there is one."""
    for example in prompt_examples(prompt):
        said = _person_words(example)
        if not said or said[0][1] != request:
            continue
        for entry in example.entries[said[0][0] + 1:]:
            call = literal_call(entry.text) if entry.kind == "code" else None
            if call and call[0] == "put_first_on_second" and call[1]:
                return str(call[1][0])
    return None


def robot_answer(prompt: str) -> str:
    """The interaction model: one statement for the console prompt, from what it holds."""
    transcript = current_transcript(prompt)
    said = _person_words(transcript)
    if not said:
        return WAIT
    request, (last_at, last) = said[0][1], said[-1]
    step = _statements_since(transcript, last_at)
    if request.startswith("count"):
        return LOOP if step == 0 else WAIT
    if request.startswith("tell"):
        return (CHATTY, TOO_LONG, WAIT)[min(step, 2)]
    bowl = _bowl(request)
    if len(said) == 1:  # the request: a learned example decides the block, else the guess
        block = _learned_block(prompt, request) or GUESS
        return f"put_first_on_second({block!r}, {bowl!r})" if step == 0 else WAIT
    if step == 0 and "remember" in last.lower():
        return LEARN
    return f"put_first_on_second({MEANT!r}, {bowl!r})" if step == 1 else WAIT


def teacher_answer(prompt: str) -> str:
    """The improvement model: the chain's four answers, the improved transcript from the interaction."""
    if "Answer with one JSON object" in prompt:
        return '```json\n{"problem": true, "description": "The robot took the red block, but the person meant the green block."}\n```'
    if "How can the robot do better" in prompt:
        return f"When the person says 'the block', take the {MEANT}."
    if "Under which condition" in prompt:
        return "Whenever the person does not say which block."
    history = prompt.split("The robot's interaction:\n\n", 1)[1].split("\n\nThe problem:", 1)[0]
    request = _person_words(Transcript.parse(history))[0][1]
    lines = [f">>> {WAIT}", repr({"type": "dialog", "text": request}),
             f">>> put_first_on_second({MEANT!r}, {_bowl(request)!r})", "'success'", f">>> {WAIT}"]
    return "```python\n" + "\n".join(lines) + "\n```"


class RecordingMemory:
    """The episodic memory as the learner sees it, noting every example added (id -> example)."""

    def __init__(self, memory: EpisodicMemory) -> None:
        self.memory = memory
        self.added: dict[str, InteractionExample] = {}

    def add(self, example: InteractionExample) -> str:
        example_id = self.memory.add(example)
        self.added[example_id] = example
        return example_id
