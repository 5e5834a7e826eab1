"""Which knowledge a new task is shown (DROC's retrieval), and the "What I know" block of the prompt.

For a task instruction and, optionally, the object at hand (its name and its crop's image vector):

1. every ``always``-scoped entry (preferences, robot constraints), oldest first;
2. the ``task``- and ``object``-scoped entries whose task or sentence is similar to the instruction
   (cosine of sentence embeddings at least ``text_threshold``, the better of the two keys), plus
   object-scoped entries whose object is the one named (its words all in the name: "cup" matches
   "red cup") or, by image, looks like the one at hand;
3. where the entry and the query both have image vectors of the same embedder, the visual similarity
   filters (below the visual threshold: the entry's object looks different, it is dropped) and
   re-ranks (``(1 - visual_weight) * text + visual_weight * visual``); the best ``k`` are kept, so an
   entry dropped for its looks never takes a place;
4. optionally (``select.enabled`` and a model given) an LLM keeps the candidates that matter
   (``prompts/knowledge_select.txt``); an unreadable answer or a failing model keeps them all.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.knowledge.descriptor import COSINE, DescriptorConfig, ImageEmbedder
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.knowledge.store import KnowledgeStore
from teachbot.llm.base import LLMError, Model
from teachbot.memory.embedding import Embedder, normalise
from teachbot.paths import config_path, share_dir

log = logging.getLogger(__name__)

HEADER = "What I know:"


@dataclass(frozen=True)
class KnowledgeConfig:
    """``config/knowledge.yaml``: retrieval thresholds, the LLM selection switch and the descriptor's settings."""

    k: int = 8
    text_threshold: float = 0.5
    visual_threshold: float = 0.85
    learned_visual_threshold: float = 0.8
    visual_weight: float = 0.5
    select_enabled: bool = False
    select_prompt: str = "knowledge_select.txt"
    select_max_tokens: int = 64
    descriptor: DescriptorConfig = field(default_factory=DescriptorConfig)

    @classmethod
    def load(cls, path: str | Path | None = None) -> KnowledgeConfig:
        path = Path(path) if path else config_path("knowledge.yaml")
        return cls.from_mapping(load_yaml(path), str(path))

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], source: str = "knowledge config") -> KnowledgeConfig:
        """Build from the parsed YAML; a missing key keeps its default, a bad one raises ConfigError naming it."""
        top = _mapping(raw, "knowledge", source)
        retrieval, select, descriptor = (_mapping(top, name, source, f"knowledge.{name}") for name in ("retrieval", "select", "descriptor"))
        defaults, desc_defaults = cls(), DescriptorConfig()

        def value(section: dict[str, Any], key: str, where: str, default: Any, kind: type) -> Any:
            raw_value = section.get(key, default)
            if kind is bool and not isinstance(raw_value, bool):
                raise ConfigError(f"{source}: {where}.{key} must be true or false, got {raw_value!r}")
            try:
                return kind(raw_value)
            except (TypeError, ValueError):
                raise ConfigError(f"{source}: {where}.{key} must be a {kind.__name__}, got {raw_value!r}") from None

        r, s, d = "knowledge.retrieval", "knowledge.select", "knowledge.descriptor"
        config = cls(
            k=value(retrieval, "k", r, defaults.k, int),
            text_threshold=value(retrieval, "text_threshold", r, defaults.text_threshold, float),
            visual_threshold=value(retrieval, "visual_threshold", r, defaults.visual_threshold, float),
            learned_visual_threshold=value(retrieval, "learned_visual_threshold", r, defaults.learned_visual_threshold, float),
            visual_weight=value(retrieval, "visual_weight", r, defaults.visual_weight, float),
            select_enabled=value(select, "enabled", s, defaults.select_enabled, bool),
            select_prompt=value(select, "prompt", s, defaults.select_prompt, str),
            select_max_tokens=value(select, "max_tokens", s, defaults.select_max_tokens, int),
            descriptor=DescriptorConfig(**{key: value(descriptor, key, d, getattr(desc_defaults, key), type(getattr(desc_defaults, key)))
                                           for key in DescriptorConfig.__dataclass_fields__}),
        )
        problems = [text for bad, text in (
            (config.k < 1, "retrieval.k >= 1"),
            (not -1.0 <= config.text_threshold <= 1.0, "-1 <= retrieval.text_threshold <= 1"),
            (not 0.0 <= config.visual_threshold <= 1.0, "0 <= retrieval.visual_threshold <= 1"),
            (not -1.0 <= config.learned_visual_threshold <= 1.0, "-1 <= retrieval.learned_visual_threshold <= 1"),
            (not 0.0 <= config.visual_weight <= 1.0, "0 <= retrieval.visual_weight <= 1"),
            (config.select_max_tokens < 1, "select.max_tokens >= 1"),
            (min(config.descriptor.hue_bins, config.descriptor.saturation_bins, config.descriptor.grey_bins,
                 config.descriptor.depth_bins) < 1, "descriptor bins >= 1"),
            (config.descriptor.depth_range <= 0, "descriptor.depth_range > 0"),
            (not 0.0 < config.descriptor.colour_weight <= 1.0, "0 < descriptor.colour_weight <= 1"),
        ) if bad]
        if problems:
            raise ConfigError(f"{source}: need {', '.join(problems)} (see config/knowledge.yaml)")
        return config


@dataclass(frozen=True)
class RetrievedKnowledge:
    """One entry chosen for a task: why (``always``, ``task``, ``object``), its text score, its visual score
    (None when not compared) and the rank score."""

    entry: KnowledgeEntry
    reason: str
    text_score: float = 0.0
    visual_score: float | None = None
    score: float = 0.0


class KnowledgeRetriever:
    """Chooses the knowledge for a task from a ``KnowledgeStore`` (see the module docstring).

    ``text_embedder``: a sentence ``Embedder`` (teachbot.memory; the bundled all-MiniLM-L6-v2 in
    production). ``image_embedder``: the embedder whose vectors the query and the entries carry (None:
    no visual step). ``select_model``: the LLM of the optional selection step (used only when
    ``config.select_enabled``).
    """

    def __init__(self, store: KnowledgeStore, text_embedder: Embedder, image_embedder: ImageEmbedder | None = None,
                 config: KnowledgeConfig | None = None, select_model: Model | None = None) -> None:
        self.store = store
        self.text_embedder = text_embedder
        self.image_embedder = image_embedder
        self.config = config or KnowledgeConfig()
        self.select_model = select_model
        self._vectors: dict[str, np.ndarray] = {}  # key text -> unit vector (of text_embedder)
        self._version = -1
        self._lock = threading.Lock()
        if self.config.select_enabled and select_model is None:
            log.warning("knowledge: select.enabled is true but no model was given; the LLM selection step is skipped")

    @property
    def visual_threshold(self) -> float:
        """The threshold for the image embedder's metric."""
        metric = getattr(self.image_embedder, "metric", "")
        return self.config.learned_visual_threshold if metric == COSINE else self.config.visual_threshold

    def retrieve(self, task: str, object_name: str = "", image: Sequence[float] | np.ndarray | None = None) -> list[RetrievedKnowledge]:
        """The entries for ``task``: always-scoped ones first (oldest first), then the specific ones, best first.

        ``object_name``: the object the task is about, if known; ``image``: its crop's vector from
        ``image_embedder`` (e.g. ``retriever.image_embedder.embed(rgb, depth, mask)``).
        """
        version, entries = self.store.snapshot()
        always = sorted((e for e in entries if e.scope == "always"), key=lambda e: (e.created, e.id))
        specific = [e for e in entries if e.scope != "always"]
        found = [RetrievedKnowledge(e, "always", score=1.0) for e in always]
        candidates = self._candidates(task, object_name, image, specific, version)
        if candidates and self.config.select_enabled and self.select_model is not None:
            keep = select_with_model(self.select_model, task, object_name, [c.entry for c in candidates], self.config)
            candidates = [candidates[i] for i in keep]
        return found + candidates

    def render(self, task: str, object_name: str = "", image: Sequence[float] | np.ndarray | None = None, prefix: str = "") -> str:
        """``render`` of what ``retrieve`` finds."""
        return render([r.entry for r in self.retrieve(task, object_name, image)], prefix)

    # ------------------------------------------------------------------ internals
    def _candidates(self, task: str, object_name: str, image: Any, entries: list[KnowledgeEntry], version: int) -> list[RetrievedKnowledge]:
        if not entries:
            return []
        text_scores = self._text_scores(task, entries, version)
        query_image = np.asarray(image, dtype=np.float32) if image is not None and self.image_embedder is not None else None
        name_words = set(_words(object_name))
        out = []
        for entry, text in zip(entries, text_scores):
            visual = None
            if query_image is not None and entry.image_embedding is not None and entry.image_model == self.image_embedder.name:
                visual = self.image_embedder.similarity(query_image, entry.image_embedding)
                if visual < self.visual_threshold:
                    continue  # the entry's object looks different
            object_words = set(_words(entry.object))
            named = entry.scope == "object" and bool(object_words) and object_words <= name_words
            if text < self.config.text_threshold and not named and not (entry.scope == "object" and visual is not None):
                continue
            weight = self.config.visual_weight if visual is not None else 0.0
            score = (1.0 - weight) * text + weight * (visual if visual is not None else 0.0)
            reason = "task" if text >= self.config.text_threshold else "object"
            out.append(RetrievedKnowledge(entry, reason, text_score=text, visual_score=visual, score=score))
        out.sort(key=lambda r: (-r.score, r.entry.created, r.entry.id))
        return out[: self.config.k]

    def _text_scores(self, task: str, entries: list[KnowledgeEntry], version: int) -> list[float]:
        """Per entry, the best cosine between the task and the entry's keys (its task and its sentence)."""
        with self._lock:
            if version != self._version:  # forget vectors of entries that are gone
                keep = {key for e in entries for key in e.keys}
                self._vectors = {k: v for k, v in self._vectors.items() if k in keep}
                self._version = version
            name = self.text_embedder.name
            for entry in entries:  # vectors the entries carry, from the same model
                if entry.text_embedding is not None and entry.text_model == name and entry.task and entry.task not in self._vectors:
                    self._vectors[entry.task] = normalise(np.asarray([entry.text_embedding]))[0]
            missing = sorted({key for e in entries for key in e.keys} - self._vectors.keys())
            texts = [task, *missing] if task.strip() else missing
            vectors = normalise(self.text_embedder.embed(texts)) if texts else np.zeros((0, 0), dtype=np.float32)
            self._vectors.update(zip(missing, vectors[1:] if task.strip() else vectors))
            if not task.strip():
                return [0.0] * len(entries)
            query = vectors[0]
            return [max((float(self._vectors[key] @ query) for key in e.keys), default=0.0) for e in entries]


def render(entries: Sequence[KnowledgeEntry | RetrievedKnowledge], prefix: str = "") -> str:
    """The short "What I know" block for a prompt: a header and one line per entry ('' when there are none).

    ``prefix`` starts every line (e.g. '# ' to put the block in a Python transcript as comments).
    """
    lines = []
    for item in entries:
        entry = item.entry if isinstance(item, RetrievedKnowledge) else item
        text = " ".join(entry.text.split())
        if entry.kind == "skill_parameter":
            pairs = [f"{k}={list(v) if isinstance(v, tuple) else v!r}" for k, v in entry.parameters.items()]
            if not all(pair in text for pair in pairs):  # the sentence may already say them
                text += f" ({entry.skill}: {', '.join(pairs)})"
        lines.append(f"{prefix}- {text}")
    return "\n".join([f"{prefix}{HEADER}", *lines]) if lines else ""


def load_select_prompt(name: str) -> str:
    """Text of ``prompts/<name>``; a missing file raises ConfigError naming the path."""
    path = share_dir() / "prompts" / name
    try:
        return path.read_text()
    except OSError:
        raise ConfigError(f"prompt file not found: {path}; set knowledge.select.prompt in config/knowledge.yaml") from None


def select_with_model(model: Model, task: str, object_name: str, entries: Sequence[KnowledgeEntry],
                      config: KnowledgeConfig | None = None) -> list[int]:
    """DROC's selection step: the LLM answers which of ``entries`` matter for ``task`` as a JSON list of
    their numbers. Returns the indices to keep, in the given order; all of them when the model fails or
    its answer cannot be read (knowledge is not thrown away on a bad answer)."""
    config = config or KnowledgeConfig()
    if not entries:
        return []
    listing = "\n".join(f"{i}. {' '.join(e.text.split())}" for i, e in enumerate(entries))
    prompt = (load_select_prompt(config.select_prompt).replace("{entries}", listing).replace("{task}", task.strip())
              .replace("{object}", object_name.strip() or "(none named)"))
    everything = list(range(len(entries)))
    try:
        answer = model.generate(prompt, stop=(), temperature=0.0, max_tokens=config.select_max_tokens).text
    except (LLMError, TimeoutError) as exc:
        log.warning("knowledge: the selection model failed (%s); keeping all %d candidates", exc, len(entries))
        return everything
    keep = parse_selection(answer, len(entries))
    if keep is None:
        log.warning("knowledge: cannot read the selection model's answer %r; keeping all %d candidates", answer[:200], len(entries))
        return everything
    return keep


def parse_selection(answer: str, count: int) -> list[int] | None:
    """The indices in the first JSON list of ``answer`` (sorted, unique, those in range); None when there is no list of numbers."""
    match = re.search(r"\[[^\[\]]*\]", answer)
    if match is None:
        return None
    try:
        values = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return sorted({v for v in values if 0 <= v < count})


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.casefold())


def _mapping(raw: dict[str, Any], key: str, source: str, dotted: str = "") -> dict[str, Any]:
    value = raw.get(key, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{dotted or key}' must be a mapping, got {value!r}")
    return value
