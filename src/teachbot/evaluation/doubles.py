"""Stand-in models that prove the evaluation harness offline. They prove the harness, not any model.

Each reads what it needs from the prompt it is given (the current transcript, the retrieved examples)
and is told the run's expert plan by the harness (``begin_run``), as an oracle agent in ravens is:

- ``OracleModel``: types the task's expert statements, then ``wait_for_trigger()``: s = i = 100, n = 0.
- ``ErrOnceModel``: first claims to be done without acting; after the person's correction it follows
  the plan: i = 0, s = 100, n = 1.
- ``ImitatorModel``: imitates the example in its prompt whose request is most like the current one,
  carrying the differing words of the two requests over into the example's string literals; with no
  example close enough it says it does not know. After a correction it calls
  ``learn_from_interaction()`` when asked to remember, then follows the plan. So it succeeds at once
  only when its prompt holds a fitting example: with learning, from the second run of a template on.
- ``TeacherModel``: the improvement chain's model: a JSON verdict, one-sentence lesson and scope, and
  the improved interaction (the first request, then the plan, then ``wait_for_trigger()``).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any

from teachbot.language.prompts import CURRENT_HEADER, EXAMPLE_HEADER
from teachbot.language.transcript import Transcript, person_outputs, utterance_text
from teachbot.llm.base import SYSTEM_END
from teachbot.llm.scripted import ScriptedModel

WAIT = "wait_for_trigger()"
LEARN = "learn_from_interaction()"
REMEMBER = re.compile(r"\bremember\b|\bin mind\b", re.I)  # the person asks the robot to learn


def current_transcript(prompt: str) -> Transcript:
    """The current interaction of a console prompt (after its header, without the final ``>>> ``)."""
    text = prompt.split(CURRENT_HEADER, 1)[-1]
    return Transcript.parse(text.rstrip().removesuffix(">>>").rstrip())


def prompt_examples(prompt: str) -> list[Transcript]:
    """The example interactions of a console prompt, in prompt order."""
    between = prompt.split(SYSTEM_END, 1)[-1].split(CURRENT_HEADER, 1)[0]
    chunks = [c.strip() for c in between.split(EXAMPLE_HEADER)[1:] if c.strip()]  # [0]: the knowledge block, if any
    return [Transcript.parse("\n".join(line for line in c.splitlines() if not line.startswith("# "))) for c in chunks]


def literal_call(source: str) -> tuple[str, list[Any], dict[str, Any]] | None:
    """``name(args, kwargs)`` of a statement that is one call of a plain name with literal arguments; else None."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except ValueError:
        return None
    return node.func.id, args, kwargs


def person_words(transcript: Transcript) -> list[tuple[int, str]]:
    """(entry index, words) of every person output, oldest first."""
    return [(i, utterance_text(transcript.entries[i].text)) for i in sorted(person_outputs(transcript.entries))]


def steps_since(transcript: Transcript, index: int, skip: Sequence[str] = (LEARN,)) -> int:
    """Statements typed after entry ``index`` (not counting ``skip``)."""
    return sum(1 for e in transcript.entries[index + 1:] if e.kind == "code" and e.text not in skip)


class _PlanModel(ScriptedModel):
    def __init__(self, name: str) -> None:
        super().__init__(respond=self.answer, name=name)
        self.plan: list[str] = []

    def begin_run(self, plan: Sequence[str]) -> None:
        self.plan = list(plan)

    def follow(self, transcript: Transcript, since: int) -> str:
        step = steps_since(transcript, since)
        return self.plan[step] if step < len(self.plan) else WAIT

    def answer(self, prompt: str) -> str:
        raise NotImplementedError


class OracleModel(_PlanModel):
    def __init__(self) -> None:
        super().__init__("interaction:oracle")

    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        said = person_words(transcript)
        return self.follow(transcript, said[-1][0]) if said else WAIT


class ErrOnceModel(_PlanModel):
    def __init__(self) -> None:
        super().__init__("interaction:err-once")

    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        said = person_words(transcript)
        if len(said) <= 1:
            return "say('Done.')" if steps_since(transcript, said[-1][0] if said else 0) == 0 else WAIT
        return self.follow(transcript, said[-1][0])


class ImitatorModel(_PlanModel):
    """See the module docstring; ``threshold`` is the word overlap an example's request needs."""

    def __init__(self, threshold: float = 0.6) -> None:
        super().__init__("interaction:imitator")
        self.threshold = threshold

    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        said = person_words(transcript)
        if not said:
            return WAIT
        last_index, last_words = said[-1]
        if len(said) > 1:  # corrected: learn when asked to, then do as the plan says
            if REMEMBER.search(last_words) and steps_since(transcript, last_index, skip=()) == 0:
                return LEARN
            return self.follow(transcript, last_index)
        lines = self.imitation(prompt_examples(prompt), last_words)
        step = steps_since(transcript, last_index)
        if lines is None:
            return "say('I do not know how to do that.')" if step == 0 else WAIT
        return lines[step] if step < len(lines) else WAIT

    def imitation(self, examples: list[Transcript], request: str) -> list[str] | None:
        """The statements of the closest example after its first request, adapted to ``request``."""
        return imitate(examples, request, self.threshold)


def imitate(examples: list[Transcript], request: str, threshold: float,
            adapt: Callable[[str], str] | None = None) -> list[str] | None:
    """The statements of the example whose first request is most like ``request`` (word overlap at least
    ``threshold``), after that request and up to its next ``wait_for_trigger()``, with the words that differ between
    the two requests carried over into its string literals (``adapt``: see :func:`swap_literals`); None when no
    example is close enough."""
    found = imitate_with_outputs(examples, request, threshold, adapt)
    return None if found is None else [statement for statement, _ in found]


def imitate_with_outputs(examples: list[Transcript], request: str, threshold: float,
                         adapt: Callable[[str], str] | None = None,
                         words: Callable[[str], list[str]] = lambda text: text.lower().split(),
                         ) -> list[tuple[str, str]] | None:
    """As :func:`imitate`, each statement with the output the example shows after it ('' for none); ``words`` splits
    a request into the units that are compared and swapped (default: words)."""
    best, score = None, 0.0
    wanted = words(request)
    for example in examples:
        said = person_words(example)
        if not said:
            continue
        other = words(said[0][1])
        overlap = difflib.SequenceMatcher(a=other, b=wanted).ratio()
        if overlap > score:
            best, score = (example, said[0][0], other), overlap
    if best is None or score < threshold:
        return None
    example, first, other = best
    swaps = phrase_swaps(other, wanted)
    found: list[tuple[str, str]] = []
    entries = example.entries
    for index in range(first + 1, len(entries)):
        entry = entries[index]
        if entry.kind != "code":
            continue
        if entry.text.startswith(("wait_for_trigger(", LEARN)):
            break
        after = entries[index + 1] if index + 1 < len(entries) and entries[index + 1].kind == "output" else None
        found.append((swap_literals(entry.text, swaps, adapt), after.text if after is not None else ""))
    return found


def phrase_swaps(old: list[str], new: list[str]) -> list[tuple[str, str]]:
    """Phrases that differ between two requests, aligned word by word: [('red', 'green'), ('top left corner', 'left side')]."""
    matcher = difflib.SequenceMatcher(a=old, b=new)
    return [(" ".join(old[i1:i2]), " ".join(new[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
            if tag == "replace"]


def swap_literals(source: str, swaps: list[tuple[str, str]], adapt: Callable[[str], str] | None = None) -> str:
    """``source`` with each differing phrase replaced inside its string literals only; ``adapt`` (when given) turns
    each literal's value that the swaps changed into what the model writes instead (a stand-in's misreading)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    spans = sorted({(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)}, reverse=True)
    lines = source.split("\n")
    table = dict(swaps)
    pattern = "|".join(rf"\b{re.escape(old)}\b" for old in sorted(table, key=len, reverse=True))
    for line, col, end_line, end_col in spans:
        if line != end_line:
            continue
        text = lines[line - 1]
        literal = text[col:end_col]
        if table:  # all at once: 'cyan'->'purple' and 'purple'->'pink' must not chain
            swapped = re.sub(pattern, lambda m: table[m.group(0)], literal)
            if adapt is not None and swapped != literal and len(swapped) > 1 and swapped[0] == swapped[-1] in "'\"":
                swapped = swapped[0] + adapt(swapped[1:-1]) + swapped[-1]
            literal = swapped
        lines[line - 1] = text[:col] + literal + text[end_col:]
    return "\n".join(lines)


class TeacherModel(ScriptedModel):
    """The improvement model: a fitting answer for each of the chain's four prompts (told the plan)."""

    def __init__(self) -> None:
        super().__init__(respond=self.answer, name="improvement:teacher")
        self.plan: list[str] = []
        self.request = ""

    def begin_run(self, plan: Sequence[str], request: str = "") -> None:
        self.plan, self.request = list(plan), request

    def answer(self, prompt: str) -> str:
        if '"problem"' in prompt:
            return '```json\n{"problem": true, "description": "The robot did not do what the person asked."}\n```'
        if "How can the robot do better" in prompt:
            return "Do exactly what the request says, for every object it names."
        if "Under which condition" in prompt:
            return "Whenever the person makes this kind of request."
        lines = [f">>> {WAIT}", repr({"type": "dialog", "text": self.request})]
        for statement in self.plan:
            first, *rest = statement.split("\n")
            lines += [f">>> {first}", *(f"... {r}" for r in rest)]
        lines.append(f">>> {WAIT}")
        return "```python\n" + "\n".join(lines) + "\n```"


def begin_run(models: Sequence[Any], plan: Sequence[str], request: str) -> None:
    """Tell every stand-in that wants it the run's plan (real models have no ``begin_run``)."""
    for model in models:
        if isinstance(model, TeacherModel):
            model.begin_run(plan, request)
        elif hasattr(model, "begin_run"):
            model.begin_run(plan)
