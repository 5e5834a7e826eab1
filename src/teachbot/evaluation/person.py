"""The simulated person of the evaluation: after each return of control, end the run or correct the robot.

The harness checks the task after every ``wait_for_trigger()`` of the console. On success the person
ends the run (or, in ``praise_share`` of runs, says so first, as the core paper allows); on failure they
correct the robot from the task's diagnosis, up to ``max_corrections`` times, then the run fails.

A question of the robot's (``ask()``) is answered from what the person sees (``answer``): the diagnosis of what is
still wrong, so "which block?" gets the block. Two kinds, one interface (``react``, ``answer``):
- ``TemplatePerson``: deterministic sentences (prompts/person_template.yaml) drawn with the run's
  seeded generator, with "remember that next time" in ``remember_share`` of corrections;
- ``LlmPerson``: a user-simulator model (prompts/person_llm.txt) given the goal, the diagnosis, the
  robot's words and the world as a person sees it, never the code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.language.prompts import load_prompt
from teachbot.llm.base import Model
from teachbot.paths import share_dir

KINDS = ("template", "llm")


@dataclass(frozen=True)
class PersonConfig:
    kind: str = "template"
    max_corrections: int = 3  # corrections per run before it counts as a failure
    remember_share: float = 0.5  # of corrections that ask the robot to remember
    praise_share: float = 0.0  # of successful runs where the person says so before ending the run

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"the simulated person is one of {', '.join(KINDS)}, got {self.kind!r}")
        for name in ("remember_share", "praise_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"person {name} must be within 0..1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Reaction:
    """What the person does at a return of control: ``utterance`` to say ('' for none), and whether the run ends."""

    utterance: str
    ends_run: bool


@dataclass(frozen=True)
class Situation:
    """What the person knows at a return of control (never the robot's code)."""

    instruction: str
    success: bool
    diagnosis: str  # the task's plain words for what is wrong ('' on success)
    corrections: int  # corrections given so far in this run
    world: str = ""  # the table as a person sees it, in words
    robot_words: Sequence[str] = ()


def person_rng(split: str, template: str, run: int, seed: int = 0) -> np.random.Generator:
    """The person's random generator for one run: seeded by the run alone (split, template, run and the sweep's scene
    seed), so every method hears the same sentences for the same run, and a resumed sweep too."""
    digest = hashlib.sha256(f"person/{seed}/{split}/{template}/{run}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class TemplatePerson:
    """Sentences from prompts/person_template.yaml; reproducible for a seed."""

    def __init__(self, config: PersonConfig, rng: np.random.Generator, sentences: dict[str, list[str]] | None = None) -> None:
        self.config, self.rng = config, rng
        self.sentences = sentences or load_sentences()

    def _pick(self, kind: str) -> str:
        options = self.sentences[kind]
        return options[int(self.rng.integers(len(options)))]

    def react(self, situation: Situation) -> Reaction:
        if situation.success:
            praise = self.rng.random() < self.config.praise_share
            return Reaction(self._pick("praise") if praise else "", ends_run=True)
        if situation.corrections >= self.config.max_corrections:
            return Reaction("", ends_run=True)
        diagnosis = situation.diagnosis.strip().rstrip(".") or "that is not what I asked for"
        text = self._pick("correction").format(diagnosis=diagnosis, Diagnosis=diagnosis[0].upper() + diagnosis[1:],
                                               instruction=situation.instruction)
        if self.rng.random() < self.config.remember_share:
            text = f"{text} {self._pick('remember')}"
        return Reaction(text, ends_run=False)

    def answer(self, question: str, situation: Situation) -> str:
        """The answer to the robot's question: what the person wants, from what they see is still wrong."""
        if situation.success or not situation.diagnosis.strip():
            return self._pick("answer_done")
        diagnosis = situation.diagnosis.strip().rstrip(".")
        return self._pick("answer").format(diagnosis=diagnosis, Diagnosis=diagnosis[0].upper() + diagnosis[1:],
                                           instruction=situation.instruction.rstrip("."))


class LlmPerson:
    """A user-simulator model; the same ending rules as the template person."""

    def __init__(self, config: PersonConfig, model: Model, rng: np.random.Generator) -> None:
        self.config, self.model, self.rng = config, model, rng
        self.template = load_prompt("person_llm.txt")

    def react(self, situation: Situation) -> Reaction:
        if situation.success or situation.corrections >= self.config.max_corrections:
            praise = situation.success and self.rng.random() < self.config.praise_share
            if not praise:
                return Reaction("", ends_run=True)
            task = "The robot did it right. Tell it so, briefly."
        else:
            remember = self.rng.random() < self.config.remember_share
            task = "Correct the robot: say what is wrong and what you want instead." + (
                " Ask it to remember this for next time." if remember else "")
        return Reaction(self._say(situation, task), ends_run=situation.success)

    def answer(self, question: str, situation: Situation) -> str:
        """The answer to the robot's question, from what the person sees (the same prompt as a reaction)."""
        return self._say(situation, f"The robot asks you: \"{question}\" Answer its question from what you see.")

    def _say(self, situation: Situation, task: str) -> str:
        prompt = (self.template.replace("{instruction}", situation.instruction)
                  .replace("{world}", situation.world or "(not described)")
                  .replace("{diagnosis}", situation.diagnosis or "nothing")
                  .replace("{robot_words}", " / ".join(situation.robot_words) or "nothing")
                  .replace("{task}", task))
        return " ".join(self.model.generate(prompt, stop=()).text.split()).strip().strip('"')


def load_sentences() -> dict[str, list[str]]:
    """prompts/person_template.yaml, checked for its lists."""
    path = share_dir() / "prompts" / "person_template.yaml"
    raw = load_yaml(path)
    keys = ("correction", "remember", "praise", "answer", "answer_done")
    for key in keys:
        if not isinstance(raw.get(key), list) or not raw[key] or not all(isinstance(s, str) for s in raw[key]):
            raise ConfigError(f"{path}: '{key}' must be a non-empty list of sentences")
    return {key: list(raw[key]) for key in keys}
