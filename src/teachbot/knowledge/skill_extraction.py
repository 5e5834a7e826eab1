"""Skill-level knowledge of DROC's extractor: which skills were corrected, and reading the model's answer.

The paper's extractor runs after each skill: for every skill call the person corrected at skill level (a
``# correction: skill-level`` note, written by the correction handler, followed by the re-run statement),
:func:`corrected_skills` gives one :class:`CorrectedSkill` per (skill, object) with the person's words, the
re-run call and the later calls of the same skill on the same object, each with what the console printed.
The extractor shows it to the model with the skill prompt (``prompts/droc_extract_skill.txt``), apart from
the plan prompt; :func:`read_skill_answer` reads its answer (reasoning first, then one JSON object) with the
project's one JSON reader. ``CorrectedSkill.values`` are the final values the calls wrote: the rules
ablation (``knowledge.extraction.rule_skill_knowledge``) stores those without a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teachbot.knowledge.correction import call_subject, one_line, person_said, skill_calls
from teachbot.language.json_reply import read_json
from teachbot.language.transcript import NOTE_PREFIX, Transcript
from teachbot.skills.parameters import SkillParameters

SKILL_NOTE = NOTE_PREFIX + "skill-level"
ANSWER_KEYS = ("parameters", "object_state")


@dataclass
class CorrectedSkill:
    """One (skill, object) corrected at skill level: ``sources`` the person's corrections, ``calls`` the re-run
    call and the later calls of the skill on the object (``>>> `` statement and its output), ``values`` the
    declared parameters those calls wrote, last value winning."""

    skill: str
    object: str
    sources: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)


def corrected_skills(parsed: Transcript, skills: Sequence[str], parameters: SkillParameters) -> list[CorrectedSkill]:
    """Every (skill, object) of ``parsed`` corrected at skill level, in the order of their first correction."""
    entries = parsed.entries
    reruns: dict[int, str] = {}  # entry index of a re-run statement -> the correction sentence
    for i, entry in enumerate(entries):
        if any(line.strip().startswith(SKILL_NOTE) for line in entry.text.splitlines()):
            following = next((j for j in range(i + 1, len(entries)) if entries[j].kind == "code"), None)
            if following is not None:
                reruns[following] = one_line(person_said(parsed, i))
    groups: dict[tuple[str, str], CorrectedSkill] = {}
    located = skill_calls(parsed, skills, parameters)
    calls = [call for _, call in located]
    for index, call in located:
        subject = call_subject(call, calls) or call.object  # place_object: the object it put down
        key = (call.skill, subject.strip().casefold())
        if index not in reruns and key not in groups:
            continue
        group = groups.setdefault(key, CorrectedSkill(call.skill, subject))
        if index in reruns and reruns[index] and reruns[index] not in group.sources:
            group.sources.append(reruns[index])
        declared = parameters.declared(call.skill)
        group.values.update({k: v for k, v in call.kwargs.items() if k in declared})
        printed = entries[index + 1].text if index + 1 < len(entries) and entries[index + 1].kind == "output" else ""
        group.calls.append(f">>> {entries[index].text}" + (f"\n{printed}" if printed else ""))
    return list(groups.values())


def read_skill_answer(raw: str) -> dict[str, Any] | None:
    """The skill prompt's answer: the first JSON object (after the reasoning) with "parameters" or
    "object_state", its "parameters" a mapping (empty when it has none); None when there is no such object."""
    found = read_json(raw, ANSWER_KEYS)
    if found is None:
        return None
    values = found.get("parameters")
    if values in (None, ""):
        values = {}
    if not isinstance(values, Mapping):
        return None
    state = found.get("object_state")
    return {"parameters": dict(values), "object_state": one_line(str(state)) if isinstance(state, str) else ""}
