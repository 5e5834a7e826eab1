"""DROC's knowledge extractor: typed knowledge entries distilled from an interaction with corrections.

As the paper's extractor, in two prompts kept apart, at ``learn_from_interaction()`` and at the end of each task:

(a) skill level, after each corrected skill: for every skill call corrected at skill level (a ``# correction:
    skill-level`` note, written by the correction handler, followed by the re-run statement) the model reads
    the skill prompt (``prompts/droc_extract_skill.txt``: the correction, the re-run and later calls of the
    skill on the object, the object states known so far), reasons step by step and answers one JSON object:
    the parameter values that worked (one ``skill_parameter`` entry) and the object's state afterwards (an
    ``object_state`` entry, shown to the next skill's prompt: the states are tracked through the episode).
    An answer that cannot be read or holds an undeclared or out-of-range value is counted in ``unread``
    (with the raw answer) and logged, never replaced by anything else. The ablation
    ``knowledge.extraction.rule_skill_knowledge: true`` (off by default), or no model at all, stores instead
    the values the calls wrote, by rule;
(b) plan level: the model reads the plan prompt (``prompts/droc_extract.txt``), reasons, and answers a JSON
    list (constraints, preferences, object information and states); items that do not fit (an unknown kind,
    an object not in the scene, a parameter undeclared or out of range, a repeat of (a)) are dropped; an
    unreadable answer is counted in ``unread`` too.

Every entry carries its provenance (episode, robot, the model or 'rule', when, the person's words) and,
where ``image_of`` gives one, the object's crop embedding. Nothing here raises for the model's sake.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, TeachbotError
from teachbot.knowledge.correction import fill, one_line, parameter_block
from teachbot.knowledge.entry import KINDS, SCOPES, KnowledgeEntry, KnowledgeError, Provenance
from teachbot.knowledge.grounding import number_text, read_section, words
from teachbot.knowledge.skill_extraction import CorrectedSkill, corrected_skills, read_skill_answer
from teachbot.language.json_reply import json_values
from teachbot.language.prompts import load_prompt
from teachbot.language.registry import RobotApi
from teachbot.language.reply import strip_reasoning
from teachbot.language.transcript import Transcript
from teachbot.llm.base import Model
from teachbot.memory.example import utc_now_iso
from teachbot.paths import config_path
from teachbot.skills.parameters import WORLDS, SkillParameters

log = logging.getLogger(__name__)

RULE_MODEL = "rule"  # provenance.model of the entries read from the transcript without a model
# how an entry's sentence names a skill call on an object
VERBS = {"grasp": "Grasp the {}", "put_first_on_second": "Pick up and place the {}", "place_object": "Place things on the {}",
         "open": "Open the {}", "wipe": "Wipe the {}", "move_to": "Drive to the {}"}
ARTICLES = frozenset({"the", "a", "an", "my", "your"})
MAX_SOURCES = 3  # correction sentences quoted in an entry's text

@dataclass(frozen=True)
class ExtractionConfig:
    """``knowledge.extraction`` of config/knowledge.yaml."""

    enabled: bool = True
    prompt: str = "droc_extract.txt"  # the plan-level prompt
    max_tokens: int = 512
    max_entries: int = 5  # plan-level entries the model may add (the skill-level ones come on top)
    skill_prompt: str = "droc_extract_skill.txt"  # the skill-level prompt, one call per corrected skill
    skill_max_tokens: int = 384
    rule_skill_knowledge: bool = False  # the ablation: skill knowledge by rule from the calls, no skill prompt

    @classmethod
    def load(cls, path: str | Path | None = None) -> ExtractionConfig:
        path = Path(path) if path else config_path("knowledge.yaml")
        return cls.from_mapping(load_yaml(path), str(path))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], source: str = "knowledge config") -> ExtractionConfig:
        """Build from the parsed YAML; a missing key keeps its default, a bad or unknown one raises ConfigError naming it."""
        config = read_section(cls, raw, "extraction", source)
        problems = [text for bad, text in ((config.max_tokens < 1, "extraction.max_tokens >= 1"),
                                           (config.skill_max_tokens < 1, "extraction.skill_max_tokens >= 1"),
                                           (config.max_entries < 0, "extraction.max_entries >= 0")) if bad]
        if problems:
            raise ConfigError(f"{source}: need {', '.join(problems)} (see config/knowledge.yaml)")
        return config


class KnowledgeExtractor:
    """Distils knowledge entries from transcripts for one robot API (see the module docstring).

    ``model``: the extraction LLM (None: the rule skill entries only); ``parameters``: the world's skill
    parameters (default: those of the API profile's world, when it names one). ``unread``: the answers that
    could not be used since the extractor was made (``prompt``: 'skill' or 'plan', ``raw``, ``why``)."""

    def __init__(self, model: Model | None, api: RobotApi, parameters: SkillParameters | None = None,
                 config: ExtractionConfig | None = None) -> None:
        self.model = model
        self.api = api
        self.parameters = parameters if parameters is not None else _world_parameters(api)
        self.config = config or ExtractionConfig()
        self.skills = tuple(n for n in api.names if self.parameters is not None and self.parameters.declared(n))
        self.template = load_prompt(self.config.prompt)
        self.skill_template = load_prompt(self.config.skill_prompt)
        self.unread: list[dict[str, str]] = []

    def extract(self, transcript: str, *, scene_objects: Sequence[str] = (), episode_id: str = "", robot_id: str = "",
                image_of: Callable[[str], tuple[Sequence[float], str] | None] | None = None,
                deadline: float | None = None) -> list[KnowledgeEntry]:
        """The entries of ``transcript`` (console text). ``scene_objects``: the names the robot knew (items
        about other objects are dropped; empty: not checked); ``image_of``: an object's crop vector and its
        embedder's name; ``deadline`` (``time.monotonic()``): past it, what is done so far is returned."""
        if not self.config.enabled or _past(deadline):
            return []
        parsed = Transcript.parse(transcript)
        said = [one_line(s) for s in parsed.instructions() if s.strip()]
        if len(said) < 2:
            return []  # only the request: nothing was corrected
        request, corrections = said[0], said[1:]
        created = utc_now_iso()
        if self.model is None or self.config.rule_skill_knowledge:
            entries = self.rule_entries(parsed, request=request, episode_id=episode_id, robot_id=robot_id, created=created)
        else:
            entries = self.skill_entries(parsed, request=request, episode_id=episode_id, robot_id=robot_id,
                                         created=created, deadline=deadline)
        if self.model is not None and self.config.max_entries > 0 and not _past(deadline):
            entries += self._model_entries(parsed, request, corrections, entries, scene_objects, episode_id, robot_id,
                                           created, deadline)
        return _with_images(entries, image_of, deadline)

    def rule_entries(self, transcript: Transcript | str, *, request: str = "", episode_id: str = "", robot_id: str = "",
                     created: str = "") -> list[KnowledgeEntry]:
        """The rules ablation: one skill_parameter entry per (skill, object) corrected at skill level, with the
        final values its calls wrote."""
        parsed = Transcript.parse(transcript) if isinstance(transcript, str) else transcript
        if self.parameters is None:
            return []
        provenance = {"episode_id": episode_id, "robot_id": robot_id, "model": RULE_MODEL, "created": created or utc_now_iso()}
        out = []
        for group in corrected_skills(parsed, self.skills, self.parameters):
            entry = self._skill_entry(group, self._checked(group.skill, group.values), request,
                                      Provenance(source=tuple(group.sources), **provenance))
            if entry is not None:
                out.append(entry)
        return out

    def skill_entries(self, transcript: Transcript | str, *, request: str = "", episode_id: str = "", robot_id: str = "",
                      created: str = "", deadline: float | None = None) -> list[KnowledgeEntry]:
        """(a): the skill prompt once per corrected skill, in order: a skill_parameter entry with the values the
        model read and an object_state entry with the state it gave (shown to the later skills' prompts)."""
        parsed = Transcript.parse(transcript) if isinstance(transcript, str) else transcript
        model = self.model
        if self.parameters is None or model is None:
            return []
        said = [one_line(s) for s in parsed.instructions() if s.strip()]
        request = request or (said[0] if said else "")
        name = getattr(model, "name", "") or ""
        states: dict[str, str] = {}  # object -> its state, as the skill prompts gave it so far
        out: list[KnowledgeEntry] = []
        for group in corrected_skills(parsed, self.skills, self.parameters):
            if _past(deadline):
                log.warning("knowledge extraction: past the deadline before the skill prompt of %s on %r", group.skill, group.object)
                break
            prompt = self.skill_prompt(group, request, states)
            raw = self._generate(prompt, self.config.skill_max_tokens, deadline, "skill")
            if raw is None:
                continue
            answer = read_skill_answer(raw)
            if answer is None:
                self._unread("skill", raw, "no JSON object with \"parameters\" or \"object_state\"")
                continue
            values = self._checked(group.skill, answer["parameters"])
            if len(values) != len(answer["parameters"]):
                self._unread("skill", raw, "a parameter is undeclared or out of its range")
                continue
            provenance = Provenance(episode_id, robot_id, name, created or utc_now_iso(), tuple(group.sources))
            entry = self._skill_entry(group, values, request, provenance)
            if entry is not None:
                out.append(entry)
            if answer["object_state"]:
                states[group.object] = answer["object_state"]
                try:
                    out.append(KnowledgeEntry(kind="object_state", text=answer["object_state"], task=request, object=group.object,
                                              scope="object", provenance=provenance))
                except KnowledgeError as exc:
                    log.warning("knowledge extraction: cannot record the state of %r: %s", group.object, exc)
        return out

    def skill_prompt(self, group: CorrectedSkill, request: str, states: Mapping[str, str] | None = None) -> str:
        """The skill-level prompt for one corrected skill; ``states``: the objects' states known before it."""
        api_block = parameter_block(self.api, self.parameters) if self.parameters is not None else "(no skill takes parameters)"
        fields = {
            "skills": api_block,
            "request": request or "(none)",
            "skill": group.skill,
            "object": group.object or "(none)",
            "states": "\n".join(f"- {obj}: {state}" for obj, state in (states or {}).items()) or "(nothing known)",
            "corrections": "\n".join(f"- {s}" for s in group.sources) or "(none)",
            "calls": "\n".join(group.calls),
        }
        return fill(self.skill_template, fields)

    def prompt(self, transcript: Transcript | str, learned: Sequence[KnowledgeEntry] = (), scene_objects: Sequence[str] = ()) -> str:
        """The plan-level prompt for ``transcript``; ``learned``: the skill-level entries it must not repeat."""
        parsed = Transcript.parse(transcript) if isinstance(transcript, str) else transcript
        said = [one_line(s) for s in parsed.instructions() if s.strip()]
        api_block = parameter_block(self.api, self.parameters) if self.parameters is not None else "(no skill takes parameters)"
        fields = {
            "skills": api_block,
            "objects": ", ".join(scene_objects) if scene_objects else "(not given)",
            "transcript": parsed.render(),
            "request": said[0] if said else "(none)",
            "corrections": "\n".join(f"- {s}" for s in said[1:]) or "(none)",
            "learned": "\n".join(f"- {e.text}" for e in learned) or "(nothing)",
            "max_entries": str(self.config.max_entries),
        }
        return fill(self.template, fields)

    # ------------------------------------------------------------------ internals
    def _model_entries(self, parsed: Transcript, request: str, corrections: list[str], rule: list[KnowledgeEntry],
                       scene_objects: Sequence[str], episode_id: str, robot_id: str, created: str,
                       deadline: float | None) -> list[KnowledgeEntry]:
        """(b): the model's items that pass the checks, at most ``max_entries``; [] when it fails or is too late."""
        model = self.model
        if model is None:
            return []
        prompt = self.prompt(parsed, rule, scene_objects)
        raw = self._generate(prompt, self.config.max_tokens, deadline, "plan")
        if raw is None:
            return []
        items = read_json_items(raw)
        if items is None:
            self._unread("plan", raw, "no JSON list of facts")
            return []
        provenance = Provenance(episode_id, robot_id, getattr(model, "name", "") or "", created, tuple(corrections))
        taken = {(e.skill, e.object.strip().casefold()) for e in rule}
        seen = {(e.kind, e.text.casefold()) for e in rule}
        out: list[KnowledgeEntry] = []
        for item in items:
            if len(out) >= self.config.max_entries:
                break
            entry, reason = self._validated(item, request, scene_objects, provenance, taken, seen)
            if entry is None:
                log.info("knowledge extraction: dropped %r: %s", item, reason)
                continue
            seen.add((entry.kind, entry.text.casefold()))
            if entry.kind == "skill_parameter":
                taken.add((entry.skill, entry.object.strip().casefold()))
            out.append(entry)
        return out

    def _generate(self, prompt: str, max_tokens: int, deadline: float | None, which: str) -> str | None:
        """The model's answer to ``prompt``; None (logged) when it fails or answers past the deadline."""
        model = self.model
        if model is None:
            return None
        timeout = max(0.001, deadline - time.monotonic()) if deadline is not None else None
        try:
            raw = model.generate(prompt, stop=(), temperature=0.0, max_tokens=max_tokens, timeout=timeout).text
        except Exception as exc:  # any backend failure: no entries from this prompt
            log.warning("knowledge extraction: the model failed on the %s prompt (%s)", which, exc)
            return None
        if _past(deadline):
            log.warning("knowledge extraction: the model answered the %s prompt after the deadline", which)
            return None
        return raw

    def _unread(self, which: str, raw: str, why: str) -> None:
        """Count an answer that cannot be used (kept in ``unread``, logged); nothing stands in for it."""
        self.unread.append({"prompt": which, "raw": raw, "why": why})
        log.warning("knowledge extraction: cannot use the model's answer to the %s prompt (%s): %r", which, why, raw[:200])

    def _skill_entry(self, group: CorrectedSkill, values: Mapping[str, float | int], request: str,
                     provenance: Provenance) -> KnowledgeEntry | None:
        if not values:
            return None
        try:
            return KnowledgeEntry(kind="skill_parameter", text=_rule_text(group.skill, group.object, values, group.sources),
                                  task=request, object=group.object, skill=group.skill, parameters=dict(values), scope="object",
                                  provenance=provenance)
        except KnowledgeError as exc:
            log.warning("knowledge extraction: cannot record %s on %r: %s", group.skill, group.object, exc)
            return None

    def _validated(self, item: Mapping[str, Any], request: str, scene_objects: Sequence[str], provenance: Provenance,
                   taken: set[tuple[str, str]], seen: set[tuple[str, str]]) -> tuple[KnowledgeEntry | None, str]:
        kind = "_".join(words(str(item.get("kind") or "")))
        if kind not in KINDS:
            return None, f"unknown kind {item.get('kind')!r}"
        text = one_line(str(item.get("text") or ""))
        if not text:
            return None, "no text"
        obj = one_line(str(item.get("object") or ""))
        if obj and scene_objects and not in_scene(obj, scene_objects):
            return None, f"object {obj!r} is not in the scene"
        if (kind, text.casefold()) in seen:
            return None, "a repeat"
        skill, values = "", {}
        if kind == "skill_parameter":
            skill = str(item.get("skill") or "").strip()
            if skill not in self.skills:
                return None, f"{skill!r} is no skill with parameters"
            raw_values = item.get("parameters")
            if not isinstance(raw_values, Mapping) or not raw_values:
                return None, "no parameters"
            values = self._checked(skill, raw_values)
            if len(values) != len(raw_values):
                return None, "a parameter is undeclared or out of its range"
            if (skill, obj.casefold()) in taken:
                return None, "the re-run skill call already gave it"
        scope = "_".join(words(str(item.get("scope") or "")))
        try:
            return KnowledgeEntry(kind=kind, text=text, task=request, object=obj, skill=skill, parameters=values,
                                  scope=scope if scope in SCOPES else "", provenance=provenance), ""
        except KnowledgeError as exc:
            return None, str(exc)

    def _checked(self, skill: str, values: Mapping[str, Any]) -> dict[str, float | int]:
        """The declared parameters of ``skill`` among ``values`` whose value is in its range (others left out)."""
        declared = self.parameters.declared(skill) if self.parameters is not None else {}
        out: dict[str, float | int] = {}
        for name, value in values.items():
            spec = declared.get(str(name))
            if spec is None:
                continue
            try:
                out[spec.name] = spec.validate(value)
            except TeachbotError:
                continue
        return out


def read_json_items(raw: str) -> list[dict[str, Any]] | None:
    """The objects with a "kind" key in a model's answer (a JSON list, possibly inside reasoning, fences or
    prose, possibly cut short); [] for an explicit empty list; None when nothing can be read."""
    items = [{str(k).strip().lower(): v for k, v in value.items()} for value in json_values(raw)]
    items = [item for item in items if "kind" in item]
    if items:
        return items
    text = strip_reasoning(raw)
    return [] if re.search(r"\[\s*\]", text) else None


def in_scene(name: str, scene_objects: Sequence[str]) -> bool:
    """Whether ``name`` is one of the scene's objects: its words (articles aside) all in one object's
    name, case-insensitively ("cup" is in "red cup")."""
    said = set(words(name)) - ARTICLES
    return bool(said) and any(said <= set(words(obj)) for obj in scene_objects)


def _rule_text(skill: str, obj: str, values: Mapping[str, float | int], sources: Sequence[str]) -> str:
    action = VERBS.get(skill, skill + "() on the {}").format(obj) if obj else f"Use {skill}()"
    settings = ", ".join(f"{name}={number_text(value)}" for name, value in values.items())
    text = f"{action} with {settings}"
    if sources:
        quoted = "; ".join(repr(s[:200]) for s in sources[-MAX_SOURCES:])
        text += f" (learned from: {quoted})"
    return text


def _with_images(entries: list[KnowledgeEntry], image_of: Callable[[str], tuple[Sequence[float], str] | None] | None,
                 deadline: float | None) -> list[KnowledgeEntry]:
    """``entries`` with their object's crop embedding where ``image_of`` gives one (before the deadline)."""
    if image_of is None:
        return entries
    cache: dict[str, tuple[Sequence[float], str] | None] = {}
    out = []
    for entry in entries:
        if entry.object and entry.object not in cache and not _past(deadline):
            try:
                cache[entry.object] = image_of(entry.object)
            except Exception as exc:  # the image source is perception's: a failure leaves the entry without an image
                log.warning("knowledge extraction: no image of %r (%s)", entry.object, exc)
                cache[entry.object] = None
        found = cache.get(entry.object)
        if found:
            try:
                vector, name = found
                entry = entry.replace(image_embedding=vector, image_model=name)
            except (KnowledgeError, TypeError, ValueError) as exc:
                log.warning("knowledge extraction: the image of %r is unusable (%s)", entry.object, exc)
        out.append(entry)
    return out


def _world_parameters(api: RobotApi) -> SkillParameters | None:
    if api.profile not in WORLDS:
        return None
    try:
        return SkillParameters.load(api.profile)
    except ConfigError as exc:
        log.warning("knowledge extraction: no skill parameters for %s (%s); no skill_parameter entries", api.profile, exc)
        return None


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline
