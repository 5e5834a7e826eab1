"""DROC's evaluation, the knowledge sources of its ablations and the handler that keeps its raw answers.

``AllHistory`` and ``AllHistoryKnowledge`` are ``droc-retrieve-all``'s: every entry shown and every learned
parameter applied, no selection; ``SavedPlans`` is Ours-R's (the paper's plan-level baseline): no
distillation, the plan that worked for the most similar earlier request; ``RecordingHandler`` is the
correction handler keeping what it answered (results.jsonl's ``handler``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.evaluation.doubles import literal_call, person_words
from teachbot.evaluation.droc_request import is_look
from teachbot.interaction.knowledge import BLOCK_PREFIX, ConsoleKnowledge, Found
from teachbot.knowledge import Correction, CorrectionHandler
from teachbot.knowledge.retriever import HEADER, render
from teachbot.language.transcript import NOTE_PREFIX, Transcript

CONSOLE_ONLY = ("wait_for_trigger", "learn_from_interaction", "say", "ask")


class SavedPlans:
    """Ours-R's memory: the statements that did each earlier request (``save``), in a JSON-lines file.
    ``find`` shows, for a request, the saved plan of the most similar saved request by the text embedding's
    cosine (at least ``threshold``, the knowledge retrieval's text threshold), as one "# What I know:" line:
    no distilled knowledge, no looks, no learned parameters of its own."""

    def __init__(self, path: Path, text_embedder: Any, threshold: float) -> None:
        self.path, self.embedder, self.threshold = Path(path), text_embedder, threshold

    def plans(self) -> list[dict[str, Any]]:
        """Every saved plan, oldest first: {"request", "statements"}."""
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def save(self, request: str, statements: list[str]) -> None:
        """Keep ``statements`` as the plan that did ``request`` (nothing when there are none)."""
        if statements:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps({"request": request, "statements": statements}) + "\n")

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        saved = self.plans()
        if kind or skill or not task or not saved:
            return Found()
        rows = np.asarray(self.embedder.embed([task, *(p["request"] for p in saved)]), dtype=np.float32)
        scores = rows[1:] @ rows[0] / np.maximum(np.linalg.norm(rows[1:], axis=1) * np.linalg.norm(rows[0]), 1e-9)
        best = int(np.argmax(scores))
        if scores[best] < self.threshold:
            return Found()
        plan = saved[best]
        line = f"A plan that worked for '{plan['request']}': {'; '.join(plan['statements'])}"
        return Found((), f"{BLOCK_PREFIX}{HEADER}\n{BLOCK_PREFIX}- {line}", ("task",))


def plan_that_worked(transcript: Transcript) -> list[str]:
    """The robot statements that did the request in the end: the successful ones since the last plan-level
    correction (a replan starts over), a skill-level re-run of a call standing in for that call."""
    said = {i for i, _ in person_words(transcript)}
    plan: list[str] = []
    rerun = False  # the statement after a skill-level note is the console's re-run of the corrected call
    entries = transcript.entries
    for i, entry in enumerate(entries):
        if i in said:
            notes = [line for line in entry.text.splitlines() if line.startswith(NOTE_PREFIX)]
            if any(n.startswith(NOTE_PREFIX + "plan-level") for n in notes):
                plan = []
            rerun = any(n.startswith(NOTE_PREFIX + "skill-level") for n in notes)
        if entry.kind != "code" or i + 1 >= len(entries) or entries[i + 1].kind != "output":
            continue
        text = entry.text.strip()
        if is_look(text) or text.split("(", 1)[0] in CONSOLE_ONLY:
            continue
        if entries[i + 1].text.strip() == "'success'":
            same = [k for k, s in enumerate(plan) if rerun and _call_key(s) == _call_key(text) is not None]
            if same:
                plan[same[-1]] = text
            else:
                plan.append(text)
        rerun = False
    return plan


def _call_key(statement: str) -> tuple[str, str] | None:
    """(function, first argument) of a call statement with literal arguments; None when it is not one."""
    call = literal_call(statement)
    return (call[0], repr(call[1][0]) if call[1] else "") if call else None


class AllHistory:
    """Every entry of the store, newest first (kind/skill filters only): no selection by task or looks."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        entries = sorted(self.store.list(), key=lambda e: (e.created, e.id), reverse=True)
        entries = [e for e in entries if (not kind or e.kind == kind) and (not skill or e.skill == skill)]
        return Found(tuple(entries), render(entries, BLOCK_PREFIX))


class AllHistoryKnowledge(ConsoleKnowledge):
    """Every learned value of a skill's parameters applied to whatever it acts on (the newest value wins)."""

    def learned_parameters(self, skill: str, object_name: str) -> dict[str, Any]:
        declared = self.declared(skill)
        if not declared or not object_name:
            return {}
        values: dict[str, Any] = {}
        for entry in reversed(self.source.find("", object_name, kind="skill_parameter", skill=skill).entries):
            values.update({k: v for k, v in entry.parameters.items() if k in declared})
        return values


class RecordingHandler(CorrectionHandler):
    """The correction handler, keeping what it answered for each correction (for results.jsonl)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[dict[str, Any]] = []

    def handle(self, utterance: str, transcript: Any) -> Correction:
        found = super().handle(utterance, transcript)
        self.answers.append({"utterance": utterance, "dependence_raw": found.dependence_raw, "raw": found.raw,
                             "correction": found.is_correction, "level": found.level, "history": found.history,
                             "statement": found.statement, "constraint": found.constraint})
        return found
