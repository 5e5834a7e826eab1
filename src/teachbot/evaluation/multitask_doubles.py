"""The coordinator double of the multi-task benchmark: proves the mechanics offline, not any model.

``CoordinatorDouble`` reads everything it acts on from its prompt, as an interaction LLM would: the tasks
of the base prompt's task block (each task's description and reminders, read by the common sense of
teachbot.evaluation.multitask_reading -- never the task memory's specifications), whether the robot API
offers the task memory (``begin_task``), the person's newest words and the console's outputs of the
current conversation.

- With memory it calls ``begin_task(task)`` on a request and does the ``remaining`` steps of the working
  memory the console printed; asked what is left it calls ``retrieve_working_memory(task)``, asked what it
  pointed at or what is in the tower ``retrieve_declarative_memory(task)`` (the state the worker extracted
  from the log), and answers from what it printed.
- Without memory it looks at the task's place (``list_objects(place)``), picks the task's objects by their
  names and plans every step of the task's goals for them, skipping only what this conversation's
  transcript shows it did; asked about earlier work, it answers from this conversation's transcript or says
  it does not remember.
- Either way, asked what is in a container or what the person holds, it looks (``list_objects(there)``).

Its imperfection is the seeded ``slip`` of teachbot.evaluation.multitask_reading (a step forgotten, an
object judged wrongly relevant), the same for every method; it is never made to fail on purpose. A second
seeded parameter, ``wrong_object``, is the paper's commonest coordinator error (pointing at an object that
is neither yellow nor red, a non-fruit put in the bowl, the wrong thing given): the chance that a grasp or
a pointing meant for one object goes to a thing at the task's place that the task is not about, as its
last look there (``list_objects(place)``, which it makes for this when it has not looked yet) listed it.
The draw depends on the case's seed, the task and the object meant only, so every method meets the same
slips; each happens at most once per object in a conversation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from teachbot.evaluation.doubles import WAIT, current_transcript, literal_call
from teachbot.evaluation.multitask_reading import Reader, draw, steps_of
from teachbot.language.transcript import Transcript, person_outputs, utterance_text
from teachbot.llm.scripted import ScriptedModel
from teachbot.taskmemory.specs import TaskMemoryConfig, TaskSpec

DONT_KNOW = "I do not remember that."
NOTHING = "Nothing."
_TASK_LINE = re.compile(r"^- ([a-z0-9_]+): (.+)$")
_ERROR = re.compile(r"^\w*(?:Error|Exception|Interrupted)\b")
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
    return {name: description for name, (description, _) in task_lines(prompt).items()}


def task_lines(prompt: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (description, reminders) of the base prompt's task list (a reminder: an indented '- ' line)."""
    out: dict[str, tuple[str, list[str]]] = {}
    inside, last = False, ""
    for line in prompt.splitlines():
        if line.startswith("Tasks you know"):
            inside = True
            continue
        if inside:
            match = _TASK_LINE.match(line)
            if match:
                last = match.group(1)
                out[last] = (match.group(2), [])
            elif line.startswith("    - ") and last:
                out[last][1].append(line.strip().removeprefix("- "))
            elif out:
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
    """The interaction model of the multi-task benchmark's offline runs (see the module's docstring).
    ``catalog`` and ``config``'s categories are its common sense, ``places`` the house's place names;
    ``slip`` and ``seed`` its imperfection."""

    def __init__(self, catalog: Any, config: TaskMemoryConfig | None = None, places: Sequence[str] = (),
                 slip: float = 0.0, seed: int = 0, wrong_object: float = 0.0) -> None:
        super().__init__(respond=self.answer, name="coordinator-double")
        config = config or TaskMemoryConfig.load()
        if not places:
            from teachbot.world.household_layout import HouseholdLayout  # deferred: the layout's file

            places = HouseholdLayout.load().names()
        self.reader = Reader.of(catalog, config.categories, places)
        self.slip, self.seed, self.wrong_object = slip, seed, wrong_object

    def reseeded(self, seed: int) -> CoordinatorDouble:
        """The same double with another seed (one case of one trial)."""
        other = CoordinatorDouble.__new__(CoordinatorDouble)
        ScriptedModel.__init__(other, respond=other.answer, name="coordinator-double")
        other.reader, other.slip, other.seed, other.wrong_object = self.reader, self.slip, seed, self.wrong_object
        return other

    # ------------------------------------------------------------------ reading the prompt
    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        lines = task_lines(prompt)
        tasks = {n: d for n, (d, _) in lines.items()}
        memory = "def begin_task(" in prompt
        said = [(i, utterance_text(transcript.entries[i].text)) for i in sorted(person_outputs(transcript.entries))]
        if not said:
            return WAIT
        index, words_ = said[-1]
        after = transcript.entries[index + 1:]
        if after and after[-1].kind == "output" and "wait_for_trigger()" in after[-1].text and _ERROR.match(after[-1].text):
            return WAIT  # the person interrupts (an action's error says so, not a memory quoting an old one): hear them
        if words_.rstrip().endswith("?"):
            return self.probe(words_, after, lines, memory, transcript)
        task = which_task(words_, tasks)
        if not task:
            return f"say({'I do not know that task.'!r})" if not _typed(after, "say(") else WAIT
        return self.act(self.reader.read(task, *lines[task]), after, memory, transcript)

    # ------------------------------------------------------------------ acting
    def act(self, spec: TaskSpec, after: Sequence[Any], memory: bool, transcript: Transcript) -> str:
        held = re.search(r"already holds '([^']+)'", after[-1].text) if after and after[-1].kind == "output" else None
        if held:  # something from before is still in the hand: put it back where it was seen, then look again
            return f"place_object({self.seen_at(held.group(1), transcript, spec.place)!r})"
        recent = after[_since_put_back(after):]  # after putting something back the plan starts over from a new look
        if memory:
            anchor = f"begin_task({spec.name!r})"
            if not _typed(recent, anchor):
                return anchor
            state = _output_of(recent, anchor)
            plan = self.plan_from_memory(spec.name, state if isinstance(state, dict) else {})
        else:
            anchor = f"list_objects({spec.place!r})"
            if not _typed(recent, anchor):
                return anchor
            names = _output_of(recent, anchor)
            names = self.reader.relevant(spec, names if isinstance(names, list) else [], self.seed, self.slip)
            before = Transcript(list(transcript.entries[: len(transcript.entries) - len(recent)]))
            plan = self.plan_from_spec(spec, names, self.handled(before))  # what it did before this look is skipped
        instead = self.wrong_objects(spec, plan, transcript, recent, anchor)
        step = _next_step(plan, recent, anchor, instead)
        if step in instead:
            return instead[step] or f"list_objects({spec.place!r})"
        return step

    def wrong_objects(self, spec: TaskSpec, plan: Sequence[str], transcript: Transcript, recent: Sequence[Any],
                      anchor: str) -> dict[str, str]:
        """The plan's grasps and pointings the seeded ``wrong_object`` slip hits -> the statement typed instead,
        on a thing at the task's place that the task is not about (by its last look there; '' when it has not
        looked there yet), unless that slip happened before this plan began."""
        if not self.wrong_object:
            return {}
        entries = transcript.entries
        start = len(entries) - len(recent) + next(i for i, e in enumerate(recent) if e.kind == "code" and e.text == anchor)
        look = f"list_objects({spec.place!r})"
        seen = _last_output(entries, look)
        names = [str(n) for n in seen] if isinstance(seen, list) else []
        mine = set(self.reader.relevant(spec, names)) | {g.target for g in spec.goals}
        candidates = sorted(n for n in names if n not in mine)
        out: dict[str, str] = {}
        for step in plan:
            call = _call(step)
            if call is None or call[0] not in ("grasp", "point_at") or not call[1]:
                continue
            meant = str(call[1][0])
            if draw(self.seed, f"wrong/{spec.name}/{meant}") >= self.wrong_object:
                continue
            if not names:
                if not _typed(entries, look):
                    out[step] = ""  # look first
                continue
            if candidates:
                wrong = candidates[int(draw(self.seed, f"which/{spec.name}/{meant}") * len(candidates))]
                substitute = f"{call[0]}({wrong!r})"
                if not _typed(entries[:start], substitute):
                    out[step] = substitute
        return out

    def seen_at(self, name: str, transcript: Transcript, otherwise: str) -> str:
        """Where the transcript last showed ``name`` standing: a working memory's objects, or a listing by
        place; ``otherwise`` when it never did."""
        entries = transcript.entries
        for i in range(len(entries) - 1, 0, -1):
            if entries[i].kind != "output" or entries[i - 1].kind != "code":
                continue
            value = literal(entries[i].text)
            where = value.get("task_relevant_objects", {}) if isinstance(value, dict) else {}
            if isinstance(where, dict) and where.get(name) not in (None, "", "robot", "person"):
                return str(where[name])
            listed = _call(entries[i - 1].text)
            if isinstance(value, list) and name in value and listed and listed[0] == "list_objects" and listed[1]:
                return str(listed[1][0])
        return otherwise

    def plan_from_spec(self, spec: TaskSpec, names: Sequence[str], handled: set[str]) -> list[str]:
        category_of = self.reader.category_of
        steps: list[tuple[str, str, str]] = []
        for goal in spec.goals:
            for name in names:
                if goal.selects(self.reader.guess(name), category_of) and name not in handled:
                    steps.append((goal.kind, name, goal.target))
        return self.statements(self.kept(spec.name, steps), base=None)

    def plan_from_memory(self, task: str, state: Mapping[str, Any]) -> list[str]:
        steps = steps_of(state, "remaining")
        where = state.get("task_relevant_objects", {})
        stacked = [name for kind, name, _ in steps_of(state, "done") if kind == "stack"]
        top = next((n for n in stacked if not any(where.get(o) == n for o in stacked)), None) if stacked else None
        return self.statements(self.kept(task, steps), base=top)

    def kept(self, task: str, steps: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """The steps it does not forget (each forgotten with chance ``slip``)."""
        return [s for s in steps if not self.slip or draw(self.seed, f"skip/{task}/{s[1]}") >= self.slip]

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
        """Objects this conversation's transcript shows were handled (grasped and put, given or pointed at); a
        thing put back because the hand was full when another was wanted (after 'already holds') was not."""
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
            put_back = name == "place_object" and i and entries[i - 1].kind == "output" and "already holds" in entries[i - 1].text
            if name == "grasp" and args:
                holding = str(args[0])
            elif put_back:
                holding = ""
            elif name in ("place_object", "handover_object_to_human") and holding:
                out.add(holding)
                holding = ""
            elif name == "point_at" and args:
                out.add(str(args[0]))
        return out

    # ------------------------------------------------------------------ questions about earlier work
    def probe(self, question: str, after: Sequence[Any], lines: Mapping[str, tuple[str, list[str]]], memory: bool,
              transcript: Transcript) -> str:
        if _typed(after, "say("):
            return WAIT
        task = which_task(question, {n: d for n, (d, _) in lines.items()})
        q = question.lower()
        there = _asked_place(q)
        if there and "left" not in q and "tower" not in q and "pointed" not in q:  # it can look: both methods do
            look = f"list_objects({there!r})"
            if not _typed(after, look):
                return look
            seen = _output_of(after, look)
            names = [str(n) for n in seen] if isinstance(seen, list) else []
            if there == "person" and task:  # what the person holds for this task: its objects, by name
                spec = self.reader.read(task, *lines[task])
                names = self.reader.relevant(spec, names)
            return f"say({(', '.join(names) + '.' if names else NOTHING)!r})"
        if memory and task:  # what is left: the working memory; what it did (pointed, stacked): the declarative
            ask = f"retrieve_{'working' if 'left' in q else 'declarative'}_memory({task!r})"
            if not _typed(after, ask):
                return ask
            state = _output_of(after, ask)
            state = state if isinstance(state, dict) else {}
            answer = self.answer_from_memory(question, state) if "left" in q else answer_from_declarative(question, state)
        else:
            spec = self.reader.read(task, *lines[task]) if task else None
            answer = self.answer_from_transcript(question, transcript, spec)
        return f"say({answer!r})"

    def answer_from_memory(self, question: str, state: Mapping[str, Any]) -> str:
        """What is left, from a working memory's ``remaining`` steps."""
        remaining = [str(s) for s in state.get("remaining", [])]
        return "Still to do: " + "; ".join(remaining) + "." if remaining else NOTHING

    def answer_from_transcript(self, question: str, transcript: Transcript, spec: TaskSpec | None = None) -> str:
        q = question.lower()
        if "left" in q:
            return self.left_from_transcript(spec, transcript)
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
        # the tower: what was put on a cube, and the cubes it was put on
        names = list(dict.fromkeys(x for n, at in placed.items() if "cube" in at for x in (at, n)))
        return ", ".join(names) + "." if names else DONT_KNOW

    def left_from_transcript(self, spec: TaskSpec | None, transcript: Transcript) -> str:
        """What is left of the task as this conversation shows it: the steps planned from the objects it listed
        at the task's place, less those it handled (no task, or no listing: it does not remember)."""
        listing = f"list_objects({spec.place!r})" if spec else ""
        names = _output_of(transcript.entries, listing) if spec else None
        if spec is None or not isinstance(names, list):
            return DONT_KNOW
        handled = self.handled(transcript)
        left = [n for n in self.reader.relevant(spec, names, self.seed, self.slip) if n not in handled]
        stacking = any(g.kind == "stack" for g in spec.goals)
        if stacking and len(left) == 1 and handled:  # the tower's base stays where it is: it needs no step
            left = []
        return ", ".join(left) + "." if left else NOTHING


def answer_from_declarative(question: str, state: Mapping[str, Any]) -> str:
    """What was pointed at or stacked, from a declarative memory's ``pointed_at`` or ``task_state`` (the tower:
    each cube something stands on, then what stands on it); a memory that holds no state (the worker
    failed) leaves it not remembered."""
    if "task_state" not in state:
        return DONT_KNOW
    if "pointed" in question.lower():
        names = [str(n) for n in state.get("pointed_at") or []]
    else:
        where = state.get("task_state") or {}
        names = list(dict.fromkeys(str(x) for at, on in where.items() if "cube" in str(at) and isinstance(on, list)
                                   for n in on for x in (at, n)))
    return ", ".join(names) + "." if names else NOTHING


def _asked_place(question: str) -> str:
    """The place or container a question asks about ('What is in box 1?': box 1; 'given me': the person)."""
    if "given me" in question or "handed me" in question:
        return "person"
    match = re.search(r"\b(?:is|are) (?:in|on) (?:the )?([a-z0-9 ]+?)\??$", question.strip())
    return match.group(1) if match else ""


def _call(source: str) -> tuple[str, list[Any]] | None:
    call = literal_call(source)
    return (call[0], call[1]) if call else None


def _since_put_back(entries: Sequence[Any]) -> int:
    """The index just past the last statement that put back what the hand held ('already holds' before it), 0 if none."""
    start = 0
    for i, e in enumerate(entries):
        if (e.kind == "code" and e.text.startswith("place_object(") and i and entries[i - 1].kind == "output"
                and "already holds" in entries[i - 1].text):
            start = i + 1
    return start


def _typed(entries: Sequence[Any], prefix: str) -> bool:
    return any(e.kind == "code" and e.text.startswith(prefix) for e in entries)


def _last_output(entries: Sequence[Any], statement: str) -> Any:
    """What the newest typing of ``statement`` printed (None when it was never typed or printed nothing)."""
    for i in range(len(entries) - 2, -1, -1):
        if entries[i].kind == "code" and entries[i].text == statement and entries[i + 1].kind == "output":
            return literal(entries[i + 1].text)
    return None


def _output_of(entries: Sequence[Any], statement: str) -> Any:
    for i, e in enumerate(entries):
        if e.kind == "code" and e.text == statement and i + 1 < len(entries) and entries[i + 1].kind == "output":
            return literal(entries[i + 1].text)
    return None


def _next_step(plan: Sequence[str], entries: Sequence[Any], anchor: str, instead: Mapping[str, str] | None = None) -> str:
    """The plan's next statement: the plan advances over each of its statements typed after ``anchor`` (a
    failed one too: it is not tried again), or the statement typed ``instead`` of it, except one that failed
    because the hand was full (tried again after the hand is emptied); statements outside the plan (putting
    something down) do not move it."""
    start = next(i for i, e in enumerate(entries) if e.kind == "code" and e.text == anchor)
    instead = instead or {}
    pointer = 0
    for i in range(start + 1, len(entries)):
        entry = entries[i]
        if entry.kind != "code" or pointer >= len(plan) or entry.text not in (plan[pointer], instead.get(plan[pointer]) or None):
            continue
        output = entries[i + 1].text if i + 1 < len(entries) and entries[i + 1].kind == "output" else ""
        if "already holds" not in output:
            pointer += 1
    return plan[pointer] if pointer < len(plan) else WAIT
