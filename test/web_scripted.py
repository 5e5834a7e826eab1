"""Scripted robot and teacher models whose answers depend on their prompt, for the web page's tests and bench/web.py.

They stand in for real LLMs to prove the page's mechanics (no model quality is claimed). The robot reads the
current interaction at the end of its prompt: a request ``put the [colour] block in the <colour> bowl`` makes it
take the block the newest lesson in its prompt names (the red one when none does), then say what it did; words
with "remember" make it call ``learn_from_interaction()``; otherwise it waits. The teacher answers each prompt of
the improvement chain (prompts/improve_*.txt) from the transcript and the sentence in it, so a lesson edited by
the person yields an improved transcript that does what the person's sentence says.
"""

from __future__ import annotations

import ast
import json
import re

from teachbot.language.prompts import CURRENT_HEADER
from teachbot.llm.scripted import ScriptedModel

_REQUEST = re.compile(r"put the (?:(\w+) )?block in the (\w+) bowl", re.I)
_LESSON = re.compile(r"^# learned lesson[^\n]*$", re.I | re.M)
_COLOUR = re.compile(r"\b(red|green|blue|yellow|orange|purple|pink|cyan|brown|gray|grey|white|black) block", re.I)
_DIALOG = re.compile(r"^\{'type': 'dialog', 'text': (.+)\}$")


def person_turns(transcript: str) -> list[str]:
    """The person's words in a console transcript, in order."""
    turns = []
    for line in transcript.splitlines():
        match = _DIALOG.match(line.strip())
        if match:
            try:
                turns.append(str(ast.literal_eval(match.group(1))))
            except (ValueError, SyntaxError):
                continue
    return turns


def robot_reply(prompt: str) -> str:
    """The robot's next statement for a console prompt (see the module docstring)."""
    examples, _, current = prompt.rpartition(CURRENT_HEADER)
    lines = [line for line in current.rstrip().splitlines() if line.strip() and line.strip() != ">>>"]
    last = lines[-1].strip() if lines else ""
    if last.startswith(">>> say(") or last.startswith(">>> learn_from_interaction()") or last.startswith("'nothing learned"):
        return "wait_for_trigger()"
    if last == "'success'":
        return "say('Done: the block is in the bowl.')"
    said = person_turns(last)
    if not said:
        return "wait_for_trigger()"
    words = said[-1]
    if "remember" in words.lower():
        return "learn_from_interaction()"
    request = _REQUEST.search(words)
    if request is None:
        return "say('I only know how to put a block in a bowl.')"
    taught = [colour for line in _LESSON.findall(examples) for colour in _COLOUR.findall(line)[-1:]]
    block = (request.group(1) or (taught[-1] if taught else "red")).lower()  # the most similar lesson comes last
    return f"put_first_on_second('{block} block', '{request.group(2).lower()} bowl')"


def teacher_reply(prompt: str) -> str:
    """The improvement model's answer to one prompt of the chain (see the module docstring)."""
    transcript = prompt.split("The robot's interaction:", 1)[-1]
    turns = person_turns(transcript)
    correction = turns[-1] if turns else ""
    named = _COLOUR.findall(correction)
    colour = named[-1].lower() if named else "green"
    if "Did the robot do something wrong" in prompt:
        return json.dumps({"problem": True, "description": f"The robot took the wrong block; the person meant the {colour} block."})
    if "How can the robot do better" in prompt:
        return f"When the person says 'the block', take the {colour} block."
    if "Under which condition" in prompt:
        return "Whenever the person does not say which block."
    if "Write the whole interaction again" in prompt:
        better = re.search(r"^How to do better: (.*)$", prompt, re.M)
        chosen = _COLOUR.findall(better.group(1)) if better else []
        block = chosen[-1].lower() if chosen else colour
        request = turns[0] if turns else "put the block in the blue bowl"
        bowl = _REQUEST.search(request)
        target = f"{bowl.group(2).lower()} bowl" if bowl else "blue bowl"
        return "\n".join([">>> wait_for_trigger()", repr({"type": "dialog", "text": request}),
                          f">>> put_first_on_second('{block} block', '{target}')", "'success'", ">>> wait_for_trigger()"])
    return ""


def robot_model() -> ScriptedModel:
    """The interaction model of the page's tests."""
    return ScriptedModel(respond=robot_reply, name="robot:scripted")


def teacher_model() -> ScriptedModel:
    """The improvement model of the page's tests."""
    return ScriptedModel(respond=teacher_reply, name="teacher:scripted")
