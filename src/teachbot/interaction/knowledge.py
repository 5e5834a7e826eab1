"""Distilled knowledge in the console (DROC): the prompt's "What I know" block and learned skill parameters.

A ``KnowledgeSource`` answers ``find(task, object_name, kind, skill)`` with the knowledge entries that
apply and their rendered block: the memory node's ``memory/retrieve_knowledge`` (through the
interaction manager) or the same store read in this process (``LocalKnowledge``). ``FallbackKnowledge``
tries the first and falls back to the second, as the examples do, so learned knowledge never silently
vanishes from the prompt when the memory node is slow.

``ConsoleKnowledge`` is what the console uses:

- ``block(instructions, objects)``: the "What I know" block for the newest request, with the scene
  object it names (if any) as the object at hand; cached until the request changes or the store learns;
- ``wrap(functions)``, only with ``inject`` (a labelled option, off by default:
  ``knowledge.console.inject_learned_parameters`` in config/knowledge.yaml): each parameterised robot
  function (its skill declares parameters in config/skill_parameters.yaml) silently takes the learned
  ``skill_parameter`` values for the thing it acts on (its first argument, or for place_object the object
  the newest grasp took; by name, or by looks through the source's image lookup) as that object's
  defaults; a keyword the LLM writes always wins. Without it (DROC's way) the learned values reach the
  robot only through the model: the block shows them and the model writes them as keywords.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.interaction.examples import MemoryUnavailable
from teachbot.knowledge.correction import HELD_BY
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.knowledge.retriever import render
from teachbot.paths import config_path

log = logging.getLogger(__name__)

BLOCK_PREFIX = "# "  # the block sits in a Python console prompt: comment lines

APPLIED_KEPT = 200  # learned-parameter uses remembered (applied_values, the DROC evaluation's record)


@dataclass(frozen=True)
class Found:
    """What a knowledge source found: the entries (best first, always-scoped ones first), their block and,
    per entry, why it was retrieved (``always``, ``task``: a similar task, ``object``: the object by name or looks)."""

    entries: tuple[KnowledgeEntry, ...] = ()
    block: str = ""
    reasons: tuple[str, ...] = ()


class KnowledgeSource(Protocol):
    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        """The entries for ``task`` (and ``object_name``, compared by name and, where the source can see it,
        by looks), filtered by ``kind``/``skill`` when given; raises MemoryUnavailable when it cannot answer."""
        ...


class LocalKnowledge:
    """The knowledge base opened in this process: a ``KnowledgeRetriever`` and an optional image lookup.

    ``image_of(name)`` gives the named object's crop vector from the retriever's image embedder (None when
    it is not in view); without it, objects are matched by name only.
    """

    def __init__(self, retriever: Any, image_of: Callable[[str], Any] | None = None) -> None:
        self.retriever, self.image_of = retriever, image_of

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        image = None
        if object_name and self.image_of is not None:
            try:
                image = self.image_of(object_name)
            except Exception as exc:  # noqa: BLE001 - no picture: compare by name only
                log.info("knowledge: no image of %r (%s); matching by name", object_name, exc)
        found = [r for r in self.retriever.retrieve(task, object_name, image)
                 if (not kind or r.entry.kind == kind) and (not skill or r.entry.skill == skill)]
        entries = tuple(r.entry for r in found)
        return Found(entries, render(list(entries), BLOCK_PREFIX), tuple(r.reason for r in found))


class FallbackKnowledge:
    """``remote`` first; on MemoryUnavailable the ``local`` source, logged once each way."""

    def __init__(self, remote: KnowledgeSource, local: KnowledgeSource, log_line: Callable[[str], None]) -> None:
        self.remote, self.local, self.log = remote, local, log_line
        self.using_local = False

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        try:
            found = self.remote.find(task, object_name, kind, skill)
        except MemoryUnavailable as exc:
            if not self.using_local:
                self.log(f"{exc}; reading the knowledge base in this process instead")
                self.using_local = True
            return self.local.find(task, object_name, kind, skill)
        if self.using_local:
            self.log("memory service answers again; retrieving knowledge through it")
            self.using_local = False
        return found


def inject_configured() -> bool:
    """``knowledge.console.inject_learned_parameters`` of config/knowledge.yaml (false when absent)."""
    raw = (load_yaml(config_path("knowledge.yaml")).get("knowledge") or {}).get("console") or {}
    value = raw.get("inject_learned_parameters", False)
    if not isinstance(value, bool):
        raise ConfigError(f"config/knowledge.yaml: knowledge.console.inject_learned_parameters must be true or false, got {value!r}")
    return value


def named_object(text: str, objects: Sequence[str]) -> str:
    """The scene object ``text`` names first (the thing a request acts on comes first: "put the red cup in
    the bowl"); among names at the same place the longest ("red cup" over "cup"); '' when none."""
    said = " " + " ".join(re.findall(r"[a-z0-9]+", text.casefold())) + " "
    found = []
    for name in objects:
        phrase = " ".join(re.findall(r"[a-z0-9]+", name.casefold()))
        at = said.find(f" {phrase} ") if phrase else -1
        if at >= 0:
            found.append((at, -len(phrase), name))
    return min(found)[2] if found else ""


class ConsoleKnowledge:
    """The console's view of the knowledge base (see the module docstring).

    ``declared(skill)`` gives the names of the parameters a skill declares (SkillParameters.declared);
    ``log`` takes one-line notices (e.g. the learned defaults a call used); ``inject``: learned parameters
    applied silently by ``wrap`` (None: as config/knowledge.yaml says, off unless set).
    """

    def __init__(self, source: KnowledgeSource, declared: Callable[[str], Mapping[str, Any]],
                 log_line: Callable[[str], None] = lambda _line: None, inject: bool | None = None) -> None:
        self.source, self.declared, self.log = source, declared, log_line
        self.inject = inject_configured() if inject is None else inject
        self._cache: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self.task = ""  # the newest request (the task learned parameters are retrieved for)
        # (function, object, learned values used), newest last; bounded: a console loop must not grow the node
        self.applied: deque[tuple[str, str, dict[str, Any]]] = deque(maxlen=APPLIED_KEPT)
        self.held = ""  # what the newest successful grasp took (place_object's parameters are about it)

    def forget(self) -> None:
        """Drop cached blocks (a new episode, or the store learned something)."""
        with self._lock:
            self._cache.clear()

    def block(self, instructions: Sequence[str], objects: Sequence[str] = ()) -> str:
        """The "What I know" block for the newest request ('' when nothing applies or nobody spoke yet)."""
        if not instructions:
            return ""
        task = self.task = instructions[-1]
        key = (task, named_object(task, objects))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        try:
            block = self.source.find(*key).block
        except MemoryUnavailable as exc:
            self.log(f"no knowledge for this request: {exc}")
            return ""
        with self._lock:
            self._cache[key] = block
        return block

    def learned_parameters(self, skill: str, object_name: str) -> dict[str, Any]:
        """The learned values of ``skill``'s declared parameters for ``object_name``: from the best entry the
        retrieval finds for the newest request and this object (a similar task, the object by name, or an object
        that looks like it)."""
        declared = self.declared(skill)
        if not declared or not object_name:
            return {}
        try:
            found = self.source.find(self.task, object_name, kind="skill_parameter", skill=skill)
        except MemoryUnavailable as exc:
            self.log(f"no learned parameters for {skill}({object_name!r}): {exc}")
            return {}
        for entry in found.entries:
            values = {k: v for k, v in entry.parameters.items() if k in declared}
            if values:
                return values
        return {}

    def applied_values(self, skill: str, object_name: str) -> dict[str, Any]:
        """The learned values the newest call of ``skill`` on ``object_name`` used ({} when none)."""
        for name, thing, values in reversed(self.applied):
            if name == skill and thing == object_name:
                return dict(values)
        return {}

    def wrap(self, functions: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """``functions`` with every parameterised skill function taking learned defaults (see the module docstring);
        unchanged without ``inject``."""
        out = dict(functions)
        if not self.inject:
            return out
        for name, fn in functions.items():
            if self.declared(name):
                out[name] = self._with_defaults(name, fn)
        return out

    def _with_defaults(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        try:
            first = next(iter(inspect.signature(fn).parameters))
        except (StopIteration, TypeError, ValueError):
            first = ""

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            thing = args[0] if args else kwargs.get(first, "")
            if name in HELD_BY:  # about the object in the hand, not the location named
                thing = self.held
            if isinstance(thing, str) and thing:
                learned = {k: v for k, v in self.learned_parameters(name, thing).items() if k not in kwargs}
                if learned:
                    values = ", ".join(f"{k}={v!r}" for k, v in learned.items())
                    self.log(f"{name}({thing!r}) uses learned parameters: {values}")
                    self.applied.append((name, thing, learned))
                    kwargs = {**learned, **kwargs}
            result = fn(*args, **kwargs)
            if name in HELD_BY.values():
                self.held = args[0] if args and isinstance(args[0], str) else str(kwargs.get(first, ""))
            elif name in HELD_BY:
                self.held = ""
            return result

        return call
