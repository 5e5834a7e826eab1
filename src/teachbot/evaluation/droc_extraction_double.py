"""The extraction model's stand-in of the DROC evaluation (``teachbot eval droc --models doubles``).

``ExtractionDouble`` answers the extractor's two prompts from their text. The plan prompt
(prompts/droc_extract.txt): from each correction it takes in (one missed with the noise) the facts its
words state, in the prompt's kinds:
- a wrong object named back ("not the X, I meant the Y") -> a task ``constraint``: when the person says
  the request, they mean the Y, not the X;
- "I don't drink milk" (what the person does not, never or always does) -> a ``preference``, always;
- "open the P first" -> a ``robot_constraint``: things in the P are taken only after opening it, always;
- "fruit goes on the counter" -> a ``preference`` of where such things go, always;
- "the P is full ... put it on the Q instead" -> an ``object_state`` of the P, always.
A plain "try again" states nothing. The skill prompt (prompts/droc_extract_skill.txt) it answers from the
calls that prompt lists: the declared parameters (of the prompt's API block) they wrote, the last value
winning, after a line of reasoning.
"""

from __future__ import annotations

import json
import re
from typing import Any

from teachbot.evaluation.droc_doubles import NoisyReader, Understanding, declared_defaults, parse_call, wrong_object
from teachbot.evaluation.droc_request import FULL, GOES, INSTEAD, OPEN_FIRST
from teachbot.llm.scripted import ScriptedModel

PERSON_DOES_NOT = re.compile(r"\bI (?:don't|do not|never) ([a-z]+) (?:the )?([a-z ]+?)\s*[.,!;]", re.I)


def _fact(kind: str, text: str, obj: str = "", scope: str = "always") -> dict[str, Any]:
    return {"kind": kind, "text": text, "object": obj, "skill": "", "parameters": {}, "scope": scope}


def facts(sentence: str, request: str) -> list[dict[str, Any]]:
    """The facts one correction states (see the module docstring), in the plan prompt's JSON form."""
    out = []
    named = wrong_object(sentence)
    if named is not None:
        wrong, meant = named
        text = f"When the person says '{request}', they mean the {meant}" + (f", not the {wrong}." if wrong else ".")
        out.append(_fact("constraint", text, meant, "task"))
    for verb, thing in PERSON_DOES_NOT.findall(sentence + " "):
        out.append(_fact("preference", f"The person does not {verb} {thing.strip()}.", thing.strip()))
    for place in OPEN_FIRST.findall(sentence):
        out.append(_fact("robot_constraint", f"Things in the {place} can be taken out only after opening it: open the "
                                             f"{place} first.", place))
    full = FULL.search(sentence)
    instead = INSTEAD.search(sentence)
    if full:
        text = f"The {full.group(1)} is full." + (f" Put it on the {instead.group(1)} instead." if instead else "")
        out.append(_fact("object_state", text, full.group(1)))
    elif not named:
        for what, place in GOES.findall(sentence):
            out.append(_fact("preference", f"{what.strip().capitalize()} goes on the {place}.", ""))
    return out


SKILL_CALLS = "The skill's calls after the correction"  # the calls section of prompts/droc_extract_skill.txt


class ExtractionDouble(ScriptedModel, NoisyReader):
    """The extraction model's stand-in (see the module docstring)."""

    def __init__(self, understanding: Understanding | None = None) -> None:
        super().__init__(respond=self.answer, name="extraction:droc-double")
        self.understanding = understanding or Understanding()

    def answer(self, prompt: str) -> str:
        """The plan prompt's answer (a JSON list) or, for the skill prompt, :meth:`skill_answer`."""
        if SKILL_CALLS in prompt:
            return self.skill_answer(prompt)
        request = re.search(r"The person's original request: (.*)", prompt)
        section = prompt.split("The person's corrections:", 1)[-1].split("\n\n", 1)[0]
        corrections = [line[2:].strip() for line in section.splitlines() if line.startswith("- ")]
        items, seen = [], set()
        for sentence in corrections:
            if self.understanding.slips("extract", sentence, fresh=True):
                continue  # missed
            for fact in facts(sentence, request.group(1).strip() if request else "this"):
                if fact["text"] not in seen:
                    seen.add(fact["text"])
                    items.append(fact)
        if not items:
            return "The re-run calls already say what changed; nothing else to remember.\n[]"
        return "Reasoning: what each correction states beyond this moment.\n```json\n" + json.dumps(items, indent=1) + "\n```"

    def skill_answer(self, prompt: str) -> str:
        """The skill prompt's answer, from its text: the declared parameters (the prompt's API block) the listed
        calls of the skill wrote, the last value winning; a missed correction (a slip) gives none."""
        skill = re.search(r"^The skill: (\w+)", prompt, re.M)
        obj = re.search(r"^The object it acted on: (.*)", prompt, re.M)
        name, thing = (skill.group(1) if skill else ""), (obj.group(1).strip() if obj else "")
        said = prompt.split("The person's corrections of this skill:", 1)[-1].split("\n\n", 1)[0].strip()
        missed = self.understanding.slips("extract-skill", said, fresh=True)  # a slip: no parameter read at all
        declared = {} if missed else declared_defaults(prompt, name)
        values: dict[str, Any] = {}
        for line in prompt.split(SKILL_CALLS, 1)[-1].splitlines():
            parsed = parse_call(line[4:]) if line.startswith(">>> ") else None
            if parsed is not None and parsed[0] == name:
                values.update({k: v for k, v in parsed[2].items() if k in declared})
        why = ", ".join(f"{k}={v}" for k, v in values.items()) or "no parameter"
        return (f"Reasoning: the person corrected {name}() on the {thing}; the calls after the correction used {why}, "
                f"the last value of each is what worked.\n```json\n"
                + json.dumps({"skill": name, "object": thing, "parameters": values, "object_state": ""}) + "\n```")
