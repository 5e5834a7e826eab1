"""DROC's retrieval order, as its paper has it (Sec. III, "Knowledge Retrieving with R").

``retrieval.order: paper`` in config/knowledge.yaml (``KnowledgeRetriever`` keeps the always-scoped entries
first either way):

1. every ``always``-scoped entry: robot constraints and the person's preferences, whatever the task;
2. the previous tasks of the other entries, numbered, for the LLM to pick those of the new task's category
   (``prompts/droc_select_tasks.txt``, the paper's zero-shot prompt: "open" and "put" are different
   categories); without a model, or when its answer cannot be read, the tasks whose entries' task or
   sentence is similar to the new one (``text_threshold``);
3. of the chosen tasks' entries, every one not about an object (a task's constraint) and, of those about an
   object, the single one whose object looks most like the one at hand (at least the visual threshold);
   without an image of it, those whose object is the one named;
4. object-scoped entries whose object is the one named (what it is, its state), whatever their task,
   unless their looks differ.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

import numpy as np

from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.language.json_reply import json_values
from teachbot.llm.base import LLMError, Model
from teachbot.paths import share_dir

log = logging.getLogger(__name__)

SELECT_TASKS_PROMPT = "droc_select_tasks.txt"


def task_key(task: str) -> str:
    """A task's words as the selection compares them: lower case, single spaces."""
    return " ".join(task.casefold().split())


def previous_tasks(entries: Sequence[KnowledgeEntry]) -> list[str]:
    """The distinct tasks the entries were learned in (oldest entry first; case and spacing ignored)."""
    seen: dict[str, str] = {}
    for entry in sorted(entries, key=lambda e: (e.created, e.id)):
        key = task_key(entry.task)
        if key and key not in seen:
            seen[key] = entry.task.strip()
    return list(seen.values())


def select_tasks(model: Model, task: str, tasks: Sequence[str], prompt_name: str = SELECT_TASKS_PROMPT,
                 max_tokens: int = 64) -> tuple[list[int] | None, str]:
    """The indices (0-based) of ``tasks`` the model puts in ``task``'s category, and its raw answer; None when the
    model fails or the answer holds no list of task numbers."""
    listing = " ".join(f"{i}. {' '.join(t.split())}." for i, t in enumerate(tasks, 1))
    template = (share_dir() / "prompts" / prompt_name).read_text()
    prompt = template.replace("{tasks}", listing).replace("{task}", " ".join(task.split()))
    try:
        answer = model.generate(prompt, stop=(), temperature=0.0, max_tokens=max_tokens).text
    except (LLMError, TimeoutError) as exc:
        log.warning("knowledge: the task selection model failed (%s)", exc)
        return None, ""
    return parse_tasks(answer, len(tasks)), answer


def parse_tasks(answer: str, count: int) -> list[int] | None:
    """The paper's answer ('1: "Yes", 2: [2, 4]', or '1: "No"') as 0-based indices; None when unreadable."""
    if re.search(r'1\s*:\s*"?no\b', answer, re.I) and not re.search(r"\[\s*\d", answer):
        return []
    values = next((v for v in json_values(answer, list) if all(isinstance(x, int) and not isinstance(x, bool) for x in v)), None)
    if values is None:
        return None
    return sorted({v - 1 for v in values if 1 <= v <= count})


def names(entry: KnowledgeEntry, object_name: str) -> bool:
    """Whether ``object_name`` names the entry's object (all its words are among the name's: "cup" in "red cup")."""
    wanted = set(re.findall(r"[a-z0-9]+", entry.object.casefold()))
    return bool(wanted) and wanted <= set(re.findall(r"[a-z0-9]+", object_name.casefold()))


def paper_rows(entries: Sequence[KnowledgeEntry], chosen_tasks: set[str], about_objects: np.ndarray, visual: np.ndarray | None,
               threshold: float, named: Sequence[int], by_text: np.ndarray, object_name: str = "") -> list[tuple[int, str]]:
    """Steps 3 and 4 of the module docstring: (row, reason) of the entries kept, in order. ``visual``: per entry its
    looks' similarity to the object at hand (NaN where not compared; None: no image); ``by_text``: per entry its
    text similarity, which orders the task knowledge; ``named``: the object-scoped entries the object's name names."""
    in_task = [i for i, e in enumerate(entries) if task_key(e.task) in chosen_tasks]
    rows = [(i, "task") for i in sorted((i for i in in_task if not about_objects[i]), key=lambda i: -by_text[i])]
    objects = [i for i in in_task if about_objects[i]]
    if visual is not None and any(not np.isnan(visual[i]) for i in objects):
        compared = [i for i in objects if not np.isnan(visual[i]) and visual[i] >= threshold]
        if compared:
            rows.append((max(compared, key=lambda i: (visual[i], by_text[i])), "object"))
    else:
        rows += [(i, "object") for i in objects if names(entries[i], object_name)]
    taken = {i for i, _ in rows}
    for i in named:
        looks_differ = visual is not None and not np.isnan(visual[i]) and visual[i] < threshold
        if i not in taken and not looks_differ:
            rows.append((i, "object"))
    return rows


def chosen_by_text(entries: Sequence[KnowledgeEntry], text_scores: np.ndarray, threshold: float) -> set[str]:
    """Without the model: the tasks of the entries whose task or sentence is similar to the new task."""
    return {task_key(entries[i].task) for i in np.flatnonzero(text_scores >= threshold).tolist()
            if entries[i].task.strip()}


def choose_tasks(model: Model | None, task: str, entries: Sequence[KnowledgeEntry], fallback: Callable[[], set[str]],
                 prompt_name: str, max_tokens: int) -> tuple[set[str], str]:
    """Step 2: the chosen tasks (normalised) and the model's raw answer ('' without a model)."""
    tasks = previous_tasks(entries)
    if model is None or not tasks or not task.strip():
        return fallback(), ""
    keep, answer = select_tasks(model, task, tasks, prompt_name, max_tokens)
    if keep is None:
        log.warning("knowledge: cannot read the task selection %r; choosing by text similarity", answer[:200])
        return fallback(), answer
    return {task_key(tasks[i]) for i in keep}, answer
