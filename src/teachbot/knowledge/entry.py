"""One piece of distilled knowledge (DROC): a short reusable sentence learned from a person's correction.

Kinds and where they apply (DESIGN.md "Corrections knowledge (DROC)"):

==================  =================================================  ==============
kind                example                                            default scope
==================  =================================================  ==============
constraint          "Put fragile things on the left of the shelf."     task
robot_constraint    "The arm cannot reach above the top shelf."        always
preference          "The person likes their coffee without sugar."     always
skill_parameter     "Grasp cups 2 cm higher than the default."         task
object_info         "The red mug is the person's own mug."             object
object_state        "The top drawer is locked."                        object
==================  =================================================  ==============

``scope`` says when an entry is shown: ``always`` (every task), ``task`` (tasks similar to the one it
was learned in) or ``object`` (when the object at hand is, or looks like, the entry's object). An entry
is valid from construction on: a bad value raises KnowledgeError (a ValueError) naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from teachbot.errors import TeachbotError
from teachbot.memory.example import ID_PATTERN, utc_now_iso

KINDS = ("constraint", "robot_constraint", "preference", "skill_parameter", "object_info", "object_state")
SCOPES = ("always", "task", "object")
DEFAULT_SCOPE = {"constraint": "task", "robot_constraint": "always", "preference": "always", "skill_parameter": "task",
                 "object_info": "object", "object_state": "object"}
ParamValue = str | int | float | bool | tuple[int | float, ...]
MAX_TEXT = 1000  # characters of the distilled sentence: knowledge is short by definition

__all__ = ["DEFAULT_SCOPE", "KINDS", "SCOPES", "KnowledgeEntry", "KnowledgeError", "Provenance", "UnknownEntryError", "utc_now_iso"]


class KnowledgeError(TeachbotError, ValueError):
    """A knowledge entry is invalid, or cannot be stored, found or read; the message names the field or id."""


class UnknownEntryError(KnowledgeError, KeyError):
    """No knowledge entry with that id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Provenance:
    """Where an entry came from: the episode, the robot, the model that distilled it, when, and from what.

    ``source``: the correction sentence(s) or transcript lines the entry was distilled from.
    """

    episode_id: str = ""
    robot_id: str = ""
    model: str = ""
    created: str = ""
    source: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("episode_id", "robot_id", "model", "created"):
            _check_str(getattr(self, name), f"provenance.{name}")
        if isinstance(self.source, str):
            object.__setattr__(self, "source", (self.source,))
        elif isinstance(self.source, Sequence):
            object.__setattr__(self, "source", tuple(self.source))
        else:
            raise KnowledgeError(f"field 'provenance.source' must be a list of strings, got {self.source!r:.60}")
        for line in self.source:
            _check_str(line, "provenance.source")

    def to_dict(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "robot_id": self.robot_id, "model": self.model, "created": self.created,
                "source": list(self.source)}

    @classmethod
    def from_dict(cls, data: Any) -> Provenance:
        if not isinstance(data, dict):
            raise KnowledgeError(f"field 'provenance' must be a JSON object, got {data!r:.60}")
        source = data.get("source", [])
        if not isinstance(source, (list, str)):
            raise KnowledgeError(f"field 'provenance.source' must be a list of strings, got {source!r:.60}")
        return cls(episode_id=data.get("episode_id", ""), robot_id=data.get("robot_id", ""), model=data.get("model", ""),
                   created=data.get("created", ""), source=source)


@dataclass(frozen=True)
class KnowledgeEntry:
    """A distilled fact. ``id`` may be empty until stored (the store generates one).

    ``task``: the instruction it was learned in (the retrieval key with ``text``); ``object``: the name or
    category it is about ('' when general); ``skill``/``parameters``: for ``skill_parameter``, the skill and
    ``{name: value}`` (JSON scalars or lists of numbers). ``image_embedding``: the object's crop descriptor,
    with ``image_model`` naming the embedder that made it (vectors of different embedders are never
    compared). ``text_embedding``/``text_model``: an optional cached embedding of ``task``.
    """

    id: str = ""
    kind: str = ""
    text: str = ""
    task: str = ""
    object: str = ""
    skill: str = ""
    parameters: Mapping[str, ParamValue] = field(default_factory=dict)
    scope: str = ""
    provenance: Provenance = field(default_factory=Provenance)
    image_embedding: tuple[float, ...] | None = None
    image_model: str = ""
    text_embedding: tuple[float, ...] | None = None
    text_model: str = ""

    def __post_init__(self) -> None:
        for name in ("id", "kind", "text", "task", "object", "skill", "scope", "image_model", "text_model"):
            _check_str(getattr(self, name), name)
        if self.id and not ID_PATTERN.match(self.id):
            raise KnowledgeError(f"field 'id': invalid id {self.id!r}; use letters, digits, '_', '-', '.', ':' (at most 128, "
                                 "not starting with '.')")
        if self.kind not in KINDS:
            raise KnowledgeError(f"field 'kind' must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if not self.text.strip():
            raise KnowledgeError("field 'text' is empty; it holds the distilled sentence, e.g. 'Grasp cups 2 cm higher.'")
        if len(self.text) > MAX_TEXT or "\n" in self.text.strip():
            raise KnowledgeError(f"field 'text' must be one short line (at most {MAX_TEXT} characters); got {self.text[:60]!r}...")
        if not self.scope:
            object.__setattr__(self, "scope", DEFAULT_SCOPE[self.kind])
        elif self.scope not in SCOPES:
            raise KnowledgeError(f"field 'scope' must be one of {', '.join(SCOPES)} (or empty for the kind's default); "
                                 f"got {self.scope!r}")
        if not isinstance(self.provenance, Provenance):
            raise KnowledgeError(f"field 'provenance' must be a Provenance, got {type(self.provenance).__name__}")
        object.__setattr__(self, "parameters", MappingProxyType(_parameters(self.parameters)))
        if self.kind == "skill_parameter" and not (self.skill.strip() and self.parameters):
            raise KnowledgeError("a skill_parameter entry needs field 'skill' (the skill's name) and field 'parameters' "
                                 "({name: value}, at least one)")
        if self.scope == "object" and not self.object.strip() and self.image_embedding is None:
            raise KnowledgeError("an object-scoped entry needs field 'object' (a name or category) or field 'image_embedding'")
        for name in ("image_embedding", "text_embedding"):
            object.__setattr__(self, name, _vector(getattr(self, name), name))
        if self.image_embedding is not None and not self.image_model:
            raise KnowledgeError("field 'image_model' is empty; name the embedder of image_embedding (e.g. the descriptor's name)")
        if self.text_embedding is not None and not self.text_model:
            raise KnowledgeError("field 'text_model' is empty; name the sentence embedder of text_embedding")

    # ------------------------------------------------------------------ convenience
    @property
    def keys(self) -> tuple[str, ...]:
        """Texts compared with a new task: the task it was learned in and the sentence itself (non-blank)."""
        return tuple(t for t in (self.task, self.text) if t.strip())

    @property
    def created(self) -> str:
        return self.provenance.created

    def replace(self, **changes: Any) -> KnowledgeEntry:
        """A copy with ``changes``; ``provenance`` may be given as a mapping of its fields to change."""
        if isinstance(changes.get("provenance"), Mapping):
            changes["provenance"] = dataclasses.replace(self.provenance, **changes["provenance"])
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (tuples as lists) that ``from_dict`` reads back to an equal entry."""
        return {
            "id": self.id, "kind": self.kind, "text": self.text, "task": self.task, "object": self.object, "skill": self.skill,
            "parameters": {k: list(v) if isinstance(v, tuple) else v for k, v in self.parameters.items()},
            "scope": self.scope, "provenance": self.provenance.to_dict(),
            "image_embedding": list(self.image_embedding) if self.image_embedding is not None else None,
            "image_model": self.image_model,
            "text_embedding": list(self.text_embedding) if self.text_embedding is not None else None,
            "text_model": self.text_model,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "knowledge entry") -> KnowledgeEntry:
        """Build from a JSON object; unknown keys are ignored; a bad value raises KnowledgeError prefixed with ``where``."""
        if not isinstance(data, dict):
            raise KnowledgeError(f"{where}: expected a JSON object, got {type(data).__name__}")
        try:
            values = {name: data.get(name, "") for name in ("id", "kind", "text", "task", "object", "skill", "scope",
                                                            "image_model", "text_model")}
            parameters = data.get("parameters", {})
            if not isinstance(parameters, dict):
                raise KnowledgeError(f"field 'parameters' must be a JSON object, got {parameters!r:.60}")
            return cls(parameters=parameters, provenance=Provenance.from_dict(data.get("provenance", {})),
                       image_embedding=data.get("image_embedding"), text_embedding=data.get("text_embedding"), **values)
        except KnowledgeError as exc:
            raise KnowledgeError(f"{where}: {exc}") from None


def _check_str(value: Any, name: str) -> None:
    if not isinstance(value, str):
        raise KnowledgeError(f"field '{name}' must be a string, got {value!r:.60}")


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _plain(value: Any) -> int | float:
    """A number as a JSON-able Python int or float (numpy scalars included)."""
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _parameters(raw: Any) -> dict[str, ParamValue]:
    if not isinstance(raw, Mapping):
        raise KnowledgeError(f"field 'parameters' must be a mapping of names to values, got {raw!r:.60}")
    out: dict[str, ParamValue] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name.strip():
            raise KnowledgeError(f"field 'parameters': names must be non-empty strings, got {name!r}")
        if isinstance(value, (list, tuple)) and all(_number(v) for v in value):
            out[name] = tuple(_plain(v) for v in value)
        elif isinstance(value, (str, bool)):
            out[name] = value
        elif _number(value):
            out[name] = _plain(value)
        else:
            raise KnowledgeError(f"field 'parameters.{name}' must be a string, a finite number, a boolean or a list of numbers; "
                                 f"got {value!r:.60}")
    return out


def _vector(raw: Any, name: str) -> tuple[float, ...] | None:
    """``raw`` (a sequence or a numpy array of finite numbers, non-empty) as a tuple of floats; None stays None."""
    if raw is None:
        return None
    if hasattr(raw, "tolist"):  # a numpy array
        raw = raw.tolist()
    if not isinstance(raw, (list, tuple)) or not raw:
        raise KnowledgeError(f"field '{name}' must be a non-empty list of numbers or null, got {raw!r:.60}")
    for value in raw:
        if not _number(value):
            raise KnowledgeError(f"field '{name}' must hold finite numbers only; found {value!r:.60}")
    return tuple(float(v) for v in raw)
