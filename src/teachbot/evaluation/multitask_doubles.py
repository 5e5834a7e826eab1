"""The coordinator double of the multi-task benchmark: proves the mechanics offline, not any model.

``CoordinatorDouble`` reads everything it acts on from its prompt, as an interaction LLM would: the tasks
of the base prompt's task block, whether the robot API offers the task memory (``begin_task``), the
person's newest words and the console's outputs of the current conversation. Its common sense (which
object types are fruits, what colour a banana is) is the task-memory config's categories and the household
catalog, what any chat model knows.

- With memory it calls ``begin_task(task)`` on a request and does the ``remaining`` steps of the working
  memory the console printed; asked about earlier work, it calls ``retrieve_working_memory(task)`` and
  answers from it.
- Without memory it lists the objects at the task's place (``list_objects(place)``) and plans every step
  of the task's goals for them, skipping only what this conversation's transcript shows it did; asked
  about earlier work, it answers from this conversation's transcript or says it does not remember.

So without memory it redoes steps after a break and forgets what happened in another conversation; it is
never made to fail on purpose.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from teachbot.evaluation.doubles import WAIT, current_transcript, literal_call
from teachbot.language.transcript import Transcript, person_outputs, utterance_text
from teachbot.llm.scripted import ScriptedModel
from teachbot.taskmemory.specs import ObjectInfo, TaskMemoryConfig, TaskSpec

DONT_KNOW = "I do not remember that."
NOTHING = "Nothing."
_STEP = re.compile(r"^(put|give|point at|stack) the (.+?)(?: into (.+)| to the person| on the tower)?$")
_TASK_LINE = re.compile(r"^- ([a-z0-9_]+): (.+)$")
_STOP = {"the", "a", "an", "and", "of", "to", "on", "in", "into", "at", "now", "please", "first", "then", "every", "all",
         "is", "what", "for", "you", "me", "it", "that", "this", "so", "far", "do", "left", "which", "have", "are"}


def stem(word: str) -> str:
    word = word.lower()
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def words(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-zA-Z]+", text) if w.lower() not in _STOP}


def task_block(prompt: str) -> dict[str, str]:
    """name -> description of the base prompt's task list."""
    out: dict[str, str] = {}
    inside = False
    for line in prompt.splitlines():
        if line.startswith("Tasks you know"):
            inside = True
            continue
        if inside:
            match = _TASK_LINE.match(line)
            if match:
                out[match.group(1)] = match.group(2)
            elif (not line.startswith("    ") or not line.strip()) and out:
                break
    return out


def which_task(text: str, tasks: Mapping[str, str]) -> str:
    """The task whose name and description share the most words with ``text`` ('' when none shares any)."""
    said = words(text)
    scored = sorted(((len(said & words(f"{name.replace('_', ' ')} {desc}")), name) for name, desc in tasks.items()), reverse=True)
    return scored[0][1] if scored and scored[0][0] > 0 else ""


def literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None


class CoordinatorDouble(ScriptedModel):
    """The interaction model of the multi-task benchmark's offline runs (see the module's docstring)."""

    def __init__(self, catalog: Any, config: TaskMemoryConfig | None = None, profile: str = "household") -> None:
        super().__init__(respond=self.answer, name="coordinator-double")
        self.config = config or TaskMemoryConfig.load()
        self.specs: Mapping[str, TaskSpec] = self.config.tasks(profile)
        self.colors = set(catalog.colors)
        self.type_colors = {t: spec.color for t, spec in catalog.types.items()}
        self.types = sorted(self.type_colors, key=len, reverse=True)

    # ------------------------------------------------------------------ reading the prompt
    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        tasks = task_block(prompt) or {n: s.description for n, s in self.specs.items()}
        memory = "def begin_task(" in prompt
        said = [(i, utterance_text(transcript.entries[i].text)) for i in sorted(person_outputs(transcript.entries))]
        if not said:
            return WAIT
        index, words_ = said[-1]
        after = transcript.entries[index + 1:]
        if after and after[-1].kind == "output" and "wait_for_trigger()" in after[-1].text and "Error" in after[-1].text:
            return WAIT  # the person interrupts: hear them
        if words_.rstrip().endswith("?"):
            return self.probe(words_, after, tasks, memory, transcript)
        task = which_task(words_, tasks)
        if not task or task not in self.specs:
            return f"say({'I do not know that task.'!r})" if not _typed(after, "say(") else WAIT
        return self.act(task, after, memory, transcript)

    # ------------------------------------------------------------------ acting
    def act(self, task: str, after: Sequence[Any], memory: bool, transcript: Transcript) -> str:
        spec = self.specs[task]
        if memory:
            anchor = f"begin_task({task!r})"
            if not _typed(after, anchor):
                return anchor
            state = _output_of(after, anchor)
            plan = self.plan_from_memory(state if isinstance(state, dict) else {})
        else:
            anchor = f"list_objects({spec.place!r})"
            if not _typed(after, anchor):
                return anchor
            names = _output_of(after, anchor)
            env = {n: self.guess(n, spec.place) for n in (names if isinstance(names, list) else [])}
            before = Transcript(list(transcript.entries[: len(transcript.entries) - len(after)]))
            plan = self.plan_from_spec(spec, env, self.handled(before))  # what it did before this request is skipped
        held = re.search(r"already holds '([^']+)'", after[-1].text) if after and after[-1].kind == "output" else None
        if held:  # something from before is still in the hand: put it back where it was seen, then go on
            return f"place_object({self.seen_at(held.group(1), transcript)!r})"
        return _next_step(plan, after, anchor)

    def seen_at(self, name: str, transcript: Transcript) -> str:
        """Where the transcript last showed ``name`` standing: a working memory's objects, or a listing by place."""
        entries = transcript.entries
        for i in range(len(entries) - 1, 0, -1):
            if entries[i].kind != "output" or entries[i - 1].kind != "code":
                continue
            value = literal(entries[i].text)
            where = value.get("task_relevant_objects", {}) if isinstance(value, dict) else {}
            if isinstance(where, dict) and where.get(name) not in (None, "robot", "person"):
                return str(where[name])
            listed = _call(entries[i - 1].text)
            if isinstance(value, list) and name in value and listed and listed[0] == "list_objects" and listed[1]:
                return str(listed[1][0])
        return next(iter(self.specs.values())).place or "table"

    def guess(self, name: str, place: str) -> ObjectInfo:
        """An object's type and colour from its name, as common sense reads it ('red cup': a red cup)."""
        lowered = name.lower()
        type_ = next((t for t in self.types if lowered.endswith(t.replace("_", " "))), lowered.split()[-1])
        color = next((w for w in lowered.split() if w in self.colors), self.type_colors.get(type_, ""))
        return ObjectInfo(type_, color, place)

    def plan_from_spec(self, spec: TaskSpec, env: Mapping[str, ObjectInfo], handled: set[str]) -> list[str]:
        category_of = self.config.category_of
        steps: list[tuple[str, str, str]] = []
        for goal in spec.goals:
            for name, info in env.items():
                if goal.selects(info, category_of) and name not in handled:
                    steps.append((goal.kind, name, goal.target))
        return self.statements(steps, base=None)

    def plan_from_memory(self, state: Mapping[str, Any]) -> list[str]:
        steps = []
        for text in state.get("remaining", []):
            match = _STEP.match(str(text))
            if match:
                verb, name, target = match.group(1), match.group(2), match.group(3) or ""
                steps.append(({"put": "into", "give": "give", "point at": "point", "stack": "stack"}[verb], name, target))
        where = state.get("task_relevant_objects", {})
        stacked = [(_STEP.match(str(t)) or [None, None, ""])[2] for t in state.get("done", []) if str(t).startswith("stack ")]
        top = next((n for n in stacked if not any(where.get(o) == n for o in stacked)), None) if stacked else None
        return self.statements(steps, base=top)

    def statements(self, steps: Sequence[tuple[str, str, str]], base: str | None) -> list[str]:
        out: list[str] = []
        top = base
        for kind, name, target in steps:
            if kind == "into":
                out += [f"grasp({name!r})", f"place_object({target!r})"]
            elif kind == "give":
                out += [f"grasp({name!r})", "handover_object_to_human()"]
            elif kind == "point":
                out.append(f"point_at({name!r})")
            elif kind == "stack":
                if top is None:  # the first cube is the tower's base: it stays where it is
                    top = name
                    continue
                out += [f"grasp({name!r})", f"place_object({top!r})"]
                top = name
        return out

    def handled(self, transcript: Transcript) -> set[str]:
        """Objects this conversation's transcript shows were handled (grasped and put, given or pointed at)."""
        out: set[str] = set()
        holding = ""
        entries = transcript.entries
        for i, entry in enumerate(entries):
            if entry.kind != "code":
                continue
            ok = i + 1 < len(entries) and entries[i + 1].kind == "output" and "Error" not in entries[i + 1].text
            call = _call(entry.text)
            if call is None or not ok:
                continue
            name, args = call
            if name == "grasp" and args:
                holding = str(args[0])
            elif name in ("place_object", "handover_object_to_human") and holding:
                out.add(holding)
                holding = ""
            elif name == "point_at" and args:
                out.add(str(args[0]))
        return out

    # ------------------------------------------------------------------ questions about earlier work
    def probe(self, question: str, after: Sequence[Any], tasks: Mapping[str, str], memory: bool, transcript: Transcript) -> str:
        if _typed(after, "say("):
            return WAIT
        task = which_task(question, tasks)
        if memory and task:
            ask = f"retrieve_working_memory({task!r})"
            if not _typed(after, ask):
                return ask
            state = _output_of(after, ask)
            answer = self.answer_from_memory(question, state if isinstance(state, dict) else {})
        else:
            answer = self.answer_from_transcript(question, transcript, task)
        return f"say({answer!r})"

    def answer_from_memory(self, question: str, state: Mapping[str, Any]) -> str:
        q = question.lower()
        if "left" in q:
            remaining = [str(s) for s in state.get("remaining", [])]
            return "Still to do: " + "; ".join(remaining) + "." if remaining else NOTHING
        where = {str(k): str(v) for k, v in state.get("task_relevant_objects", {}).items()}
        if "tower" in q or "pointed" in q:
            verb = "stack " if "tower" in q else "point at "
            names = [(_STEP.match(str(t)) or [None, None, ""])[2] for t in state.get("done", []) if str(t).startswith(verb)]
        else:
            place = _asked_place(q)
            names = [n for n, at in where.items() if at == place]
        return ", ".join(names) + "." if names else NOTHING

    def answer_from_transcript(self, question: str, transcript: Transcript, task: str = "") -> str:
        q = question.lower()
        if "left" in q:
            return self.left_from_transcript(task, transcript)
        placed: dict[str, str] = {}
        pointed: list[str] = []
        holding = ""
        entries = transcript.entries
        for i, entry in enumerate(entries):
            call = _call(entry.text) if entry.kind == "code" else None
            ok = i + 1 < len(entries) and entries[i + 1].kind == "output" and "Error" not in entries[i + 1].text
            if call is None or not ok:
                continue
            if call[0] == "grasp" and call[1]:
                holding = str(call[1][0])
            elif call[0] == "place_object" and holding and call[1]:
                placed[holding], holding = str(call[1][0]), ""
            elif call[0] == "handover_object_to_human" and holding:
                placed[holding], holding = "person", ""
            elif call[0] == "point_at" and call[1]:
                pointed.append(str(call[1][0]))
        if "pointed" in q:
            return ", ".join(dict.fromkeys(pointed)) + "." if pointed else DONT_KNOW
        if not placed:
            return DONT_KNOW
        if "tower" in q:  # what was put on a cube, and the cubes it was put on
            names = list(dict.fromkeys(x for n, at in placed.items() if "cube" in at for x in (at, n)))
        else:
            place = _asked_place(q)
            names = [n for n, at in placed.items() if at == place]
        return ", ".join(names) + "." if names else DONT_KNOW


    def left_from_transcript(self, task: str, transcript: Transcript) -> str:
        """What is left of ``task`` as this conversation shows it: the steps planned from the objects it listed
        at the task's place, less those it handled ('' task, or no listing: it does not remember)."""
        spec = self.specs.get(task)
        listing = f"list_objects({spec.place!r})" if spec else ""
        names = _output_of(transcript.entries, listing) if spec else None
        if spec is None or not isinstance(names, list):
            return DONT_KNOW
        env = {n: self.guess(n, spec.place) for n in names}
        handled = self.handled(transcript)
        left = [n for n in env if n not in handled and any(g.selects(env[n], self.config.category_of) for g in spec.goals)]
        stacking = any(g.kind == "stack" for g in spec.goals)
        if stacking and len(left) == 1 and handled:  # the tower's base stays where it is: it needs no step
            left = []
        return ", ".join(left) + "." if left else NOTHING


def _asked_place(question: str) -> str:
    if "given me" in question or "handed me" in question:
        return "person"
    match = re.search(r"(?:in|on) (?:the )?([a-z0-9 ]+?)\??$", question.strip())
    return match.group(1) if match else ""


def _call(source: str) -> tuple[str, list[Any]] | None:
    call = literal_call(source)
    return (call[0], call[1]) if call else None


def _typed(entries: Sequence[Any], prefix: str) -> bool:
    return any(e.kind == "code" and e.text.startswith(prefix) for e in entries)


def _output_of(entries: Sequence[Any], statement: str) -> Any:
    for i, e in enumerate(entries):
        if e.kind == "code" and e.text == statement and i + 1 < len(entries) and entries[i + 1].kind == "output":
            return literal(entries[i + 1].text)
    return None


def _next_step(plan: Sequence[str], entries: Sequence[Any], anchor: str) -> str:
    """The plan's next statement: the plan advances over each of its statements typed after ``anchor`` (a
    failed one too: it is not tried again), except one that failed because the hand was full (tried again
    after the hand is emptied); statements outside the plan (putting something down) do not move it."""
    start = next(i for i, e in enumerate(entries) if e.kind == "code" and e.text == anchor)
    pointer = 0
    for i in range(start + 1, len(entries)):
        entry = entries[i]
        if entry.kind != "code" or pointer >= len(plan) or entry.text != plan[pointer]:
            continue
        output = entries[i + 1].text if i + 1 < len(entries) and entries[i + 1].kind == "output" else ""
        if "already holds" not in output:
            pointer += 1
    return plan[pointer] if pointer < len(plan) else WAIT
