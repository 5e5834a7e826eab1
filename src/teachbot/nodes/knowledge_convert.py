"""Conversions between ``teachbot.knowledge.KnowledgeEntry`` and the ``teachbot_interfaces/KnowledgeEntry`` message.

Skill parameter values travel JSON-encoded (``parameter_values[i]`` is the JSON text of the value of
``parameter_names[i]``: a number, a string, a boolean or a list of numbers). The cached text embedding
is not sent (the memory node keeps its own); the image embedding is sent as float32 (empty: none).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from teachbot_interfaces.msg import KnowledgeEntry as KnowledgeEntryMsg

from teachbot.knowledge.entry import KnowledgeEntry, KnowledgeError, Provenance

__all__ = ["entries_from_msgs", "entry_from_msg", "entry_to_msg"]


def entry_to_msg(entry: KnowledgeEntry) -> KnowledgeEntryMsg:
    """The message of an entry (its text embedding left out)."""
    names = list(entry.parameters)
    values = [json.dumps(list(v) if isinstance(v, tuple) else v) for v in entry.parameters.values()]
    p = entry.provenance
    return KnowledgeEntryMsg(
        id=entry.id, kind=entry.kind, text=entry.text, task=entry.task, object=entry.object, skill=entry.skill,
        parameter_names=names, parameter_values=values, scope=entry.scope, episode_id=p.episode_id, robot_id=p.robot_id,
        model=p.model, created=p.created, source=list(p.source),
        image_embedding=[float(v) for v in entry.image_embedding] if entry.image_embedding is not None else [],
        image_model=entry.image_model if entry.image_embedding is not None else "",
    )


def entry_from_msg(msg: KnowledgeEntryMsg, where: str = "knowledge entry") -> KnowledgeEntry:
    """The entry a message describes; a bad field raises KnowledgeError prefixed with ``where`` and naming the field."""
    try:
        names, values = list(msg.parameter_names), list(msg.parameter_values)
        if len(names) != len(values):
            raise KnowledgeError(f"fields 'parameter_names' and 'parameter_values' differ in length ({len(names)} names, "
                                 f"{len(values)} values)")
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise KnowledgeError(f"field 'parameter_names' names {twice[0]!r} more than once")
        parameters = {}
        for name, text in zip(names, values):
            try:
                parameters[name] = json.loads(text)
            except json.JSONDecodeError:
                raise KnowledgeError(f"field 'parameter_values' for {name!r} is not JSON: {text!r:.60} (strings need quotes, "
                                     "e.g. '\"left\"')") from None
        image = list(msg.image_embedding)
        return KnowledgeEntry(
            id=msg.id, kind=msg.kind, text=msg.text, task=msg.task, object=msg.object, skill=msg.skill, parameters=parameters,
            scope=msg.scope,
            provenance=Provenance(episode_id=msg.episode_id, robot_id=msg.robot_id, model=msg.model, created=msg.created,
                                  source=tuple(msg.source)),
            image_embedding=image or None, image_model=msg.image_model if image else "",
        )
    except KnowledgeError as exc:
        raise KnowledgeError(f"{where}: {exc}") from None


def entries_from_msgs(msgs: Sequence[KnowledgeEntryMsg]) -> list[KnowledgeEntry]:
    """Every message's entry, or a KnowledgeError naming the first bad one (by number and text)."""
    out = []
    for index, msg in enumerate(msgs):
        label = f"entry {index}" + (f" ({msg.text[:40]!r})" if msg.text.strip() else "")
        out.append(entry_from_msg(msg, label))
    return out
