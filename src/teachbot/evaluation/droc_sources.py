"""DROC's evaluation, the knowledge sources of its ablations and the handler that keeps its raw answers.

``AllHistory`` and ``AllHistoryKnowledge`` are ``droc-retrieve-all``'s: every entry shown and every learned
parameter applied, no selection; ``RecordingHandler`` is the correction handler keeping what it answered
(results.jsonl's ``handler``).
"""

from __future__ import annotations

from typing import Any

from teachbot.interaction.knowledge import BLOCK_PREFIX, ConsoleKnowledge, Found
from teachbot.knowledge import Correction, CorrectionHandler
from teachbot.knowledge.retriever import render


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
