"""Which knowledge a new task is shown (DROC's retrieval), and the "What I know" block of the prompt.

For a task instruction and, optionally, the object at hand (its name and its crop's image vector):

1. every ``always``-scoped entry (preferences, robot constraints), oldest first;
2. the ``task``- and ``object``-scoped entries whose task or sentence is similar to the instruction
   (cosine of sentence embeddings at least ``text_threshold``, the better of the two keys), plus
   object-scoped entries whose object is the one named (its words all in the name: "cup" matches
   "red cup") or, by image, looks like the one at hand while the entry was learned doing the same kind
   of thing when it is a skill parameter (DROC: task first, then looks; the tasks compared with their
   objects' names masked, so "pick up the brown coaster" teaches "pick up the square drink mat" but not
   "put the mug on the table"; what an object is or its state holds whatever the task);
3. where an entry about an object (object-scoped, or a skill parameter, object information or state) and the
   query both have image vectors of the same embedder (looks say nothing about a task's constraint or a
   preference, whatever object it names), the visual similarity
   filters (below the visual threshold: the entry's object looks different, it is dropped) and
   re-ranks (``(1 - visual_weight) * text + visual_weight * visual``); the best ``k`` are kept, so an
   entry dropped for its looks never takes a place;
4. optionally (``select.enabled`` and a model given) an LLM keeps the candidates that matter
   (``prompts/knowledge_select.txt``); an unreadable answer or a failing model keeps them all.

That is ``retrieval.order: similarity``. ``order: paper`` is DROC's own order (teachbot.knowledge.paper_retrieval):
the always-scoped entries, then the LLM picks the previous tasks of the new task's category (with
``select.enabled`` and a model; else by text similarity), then of those tasks' entries the task knowledge and
the single best visual match among the entries about an object.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.knowledge.descriptor import COSINE, ColourDepthDescriptor, DescriptorConfig, ImageEmbedder
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.knowledge.paper_retrieval import SELECT_TASKS_PROMPT, choose_tasks, chosen_by_text, paper_rows
from teachbot.knowledge.store import KnowledgeStore
from teachbot.language.json_reply import json_values
from teachbot.llm.base import LLMError, Model
from teachbot.memory.embedding import Embedder, normalise
from teachbot.paths import config_path, share_dir

log = logging.getLogger(__name__)

HEADER = "What I know:"
OBJECT_KINDS = ("skill_parameter", "object_info", "object_state")  # knowledge about an object: its looks count


@dataclass(frozen=True)
class KnowledgeConfig:
    """``config/knowledge.yaml``: retrieval thresholds, the LLM selection switch and the descriptor's settings."""

    k: int = 8
    text_threshold: float = 0.5
    visual_threshold: float = 0.672  # config/knowledge.yaml: calibrated by tools/calibrate_looks.py
    learned_visual_threshold: float = 0.8
    visual_weight: float = 0.5
    select_enabled: bool = False
    order: str = "similarity"  # or "paper": DROC's order (teachbot.knowledge.paper_retrieval)
    select_prompt: str = "knowledge_select.txt"
    select_tasks_prompt: str = SELECT_TASKS_PROMPT
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
            order=value(retrieval, "order", r, defaults.order, str),
            select_tasks_prompt=value(select, "tasks_prompt", s, defaults.select_tasks_prompt, str),
            select_prompt=value(select, "prompt", s, defaults.select_prompt, str),
            select_max_tokens=value(select, "max_tokens", s, defaults.select_max_tokens, int),
            descriptor=DescriptorConfig(**{key: value(descriptor, key, d, getattr(desc_defaults, key), type(getattr(desc_defaults, key)))
                                           for key in DescriptorConfig.__dataclass_fields__}),
        )
        problems = [text for bad, text in (
            (config.k < 1, "retrieval.k >= 1"),
            (config.order not in ("similarity", "paper"), "retrieval.order similarity or paper"),
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
        self._index: _Index | None = None
        # per store version: the always-scoped entries (oldest first) and the specific ones, split once
        self._split: tuple[int, tuple[KnowledgeEntry, ...], list[KnowledgeEntry], int] | None = None
        self._lock = threading.Lock()
        self.last_selection = ""  # the task selection model's newest raw answer (order: paper)
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
        with self._lock:
            split = self._split
            if split is None or split[0] != version or split[3] != len(entries):
                always = sorted((e for e in entries if e.scope == "always"), key=lambda e: (e.created, e.id))
                split = self._split = (version, tuple(always), [e for e in entries if e.scope != "always"], len(entries))
        _, always, specific, _ = split
        found = [RetrievedKnowledge(e, "always", score=1.0) for e in always]
        if self.config.order == "paper":
            return found + self._paper(task, object_name, image, specific, version)
        candidates = self._candidates(task, object_name, image, specific, version)
        if candidates and self.config.select_enabled and self.select_model is not None:
            keep = select_with_model(self.select_model, task, object_name, [c.entry for c in candidates], self.config)
            candidates = [candidates[i] for i in keep]
        return found + candidates

    def render(self, task: str, object_name: str = "", image: Sequence[float] | np.ndarray | None = None, prefix: str = "") -> str:
        """``render`` of what ``retrieve`` finds."""
        return render([r.entry for r in self.retrieve(task, object_name, image)], prefix)

    # ------------------------------------------------------------------ internals
    def _paper(self, task: str, object_name: str, image: Any, entries: list[KnowledgeEntry], version: int) -> list[RetrievedKnowledge]:
        """DROC's order (teachbot.knowledge.paper_retrieval): the chosen tasks' knowledge, the best visual match."""
        if not entries:
            return []
        text_scores, index, _ = self._text_scores(task, entries, version, object_name, False)
        model = self.select_model if self.config.select_enabled else None
        chosen, self.last_selection = choose_tasks(
            model, task, entries, lambda: chosen_by_text(entries, text_scores, self.config.text_threshold),
            self.config.select_tasks_prompt, self.config.select_max_tokens)
        visual = None
        if image is not None and self.image_embedder is not None and len(index.image_rows):
            visual = np.full(len(entries), np.nan)
            visual[index.image_rows] = self._visual_scores(np.asarray(image, dtype=np.float32), index)
            visual[~index.about_objects] = np.nan
        rows = paper_rows(entries, chosen, index.about_objects, visual, self.visual_threshold,
                          index.named(set(_words(object_name))), text_scores, object_name)
        return [RetrievedKnowledge(entries[i], reason, text_score=float(text_scores[i]),
                                   visual_score=float(visual[i]) if visual is not None and not np.isnan(visual[i]) else None,
                                   score=float(text_scores[i])) for i, reason in rows[: self.config.k]]

    def _candidates(self, task: str, object_name: str, image: Any, entries: list[KnowledgeEntry], version: int) -> list[RetrievedKnowledge]:
        if not entries:
            return []
        looks = image is not None and self.image_embedder is not None
        text_scores, index, action = self._text_scores(task, entries, version, object_name, looks)
        cfg = self.config
        keep = text_scores >= cfg.text_threshold
        visual = None
        if image is not None and self.image_embedder is not None and len(index.image_rows):
            visual = np.full(len(entries), np.nan)
            visual[index.image_rows] = self._visual_scores(np.asarray(image, dtype=np.float32), index)
            visual[~index.about_objects] = np.nan  # looks matter for knowledge about an object, not about a task
            compared = ~np.isnan(visual)
            # an object entry that looks alike, whatever its object is called, when it was learned doing the same
            # kind of thing (the tasks compared with their objects' names masked: "pick up the {}")
            keep |= compared & index.object_scoped & (action >= cfg.text_threshold)
            keep &= ~(compared & (visual < self.visual_threshold))  # the entry's object looks different
        named = index.named(set(_words(object_name)))
        if named:
            rows = np.asarray(named, dtype=np.int64)
            if visual is not None:  # a named entry whose object looks different is dropped too
                rows = rows[~(~np.isnan(visual[rows]) & (visual[rows] < self.visual_threshold))]
            keep[rows] = True
        rows = np.flatnonzero(keep)
        seen = np.zeros(len(entries), dtype=bool) if visual is None else ~np.isnan(visual)
        looks = np.nan_to_num(visual, nan=0.0) if visual is not None else np.zeros(len(entries))
        weight = np.where(seen, cfg.visual_weight, 0.0)
        scores = (1.0 - weight) * text_scores + weight * looks
        # best first; equal scores: the older entry first (created, then id), as a sort of all candidates would
        best = rows[np.lexsort((index.age_rank[rows], -scores[rows]))][: cfg.k]
        return [RetrievedKnowledge(entries[i], "task" if text_scores[i] >= cfg.text_threshold else "object",
                                   text_score=float(text_scores[i]), visual_score=float(visual[i]) if seen[i] else None,
                                   score=float(scores[i])) for i in best.tolist()]

    def _visual_scores(self, query: np.ndarray, index: _Index) -> np.ndarray:
        """The image embedder's similarity of ``query`` to each entry vector of ``index``, all at once for the
        histogram intersection and cosine metrics (the embedder's own ``similarity`` per entry otherwise)."""
        embedder = self.image_embedder
        matrix = index.image_matrix
        if matrix is None or query.ndim != 1 or matrix.shape[1] != query.shape[0]:
            sizes = sorted({len(index.entries[i].image_embedding) for i in index.image_rows.tolist()})
            raise InvalidArgumentError(f"image vectors of {embedder.name} of sizes {query.size} (the query) and "
                                       f"{', '.join(map(str, sizes))} (stored) cannot be compared")
        q = query.astype(np.float64)
        if isinstance(embedder, ColourDepthDescriptor):  # its similarity: the intersection over the smaller mass
            mass = np.minimum(index.image_mass, q.sum())
            overlap = np.minimum(matrix, q[None, :]).sum(axis=1)
            return np.where(mass > 0, np.clip(overlap / np.where(mass > 0, mass, 1.0), 0.0, 1.0), 0.0)
        if embedder.metric == COSINE:
            norms = index.image_norms * float(np.linalg.norm(q))
            return np.where(norms > 0, np.clip(matrix @ q / np.where(norms > 0, norms, 1.0), -1.0, 1.0), 0.0)
        return np.asarray([embedder.similarity(query, index.entries[i].image_embedding) for i in index.image_rows.tolist()])

    def _text_scores(self, task: str, entries: list[KnowledgeEntry], version: int, object_name: str = "",
                     looks: bool = True) -> tuple[np.ndarray, _Index, np.ndarray]:
        """Per entry, the best cosine between the task and the entry's keys (its task and its sentence); the
        index of ``entries`` (rebuilt when the store's version changes: key vectors embedded once, kept across
        versions); and per entry, how alike the two tasks are with their objects' names masked (skill parameters
        learned in a task; 1 for every other entry, and for all without a task now).

        The masked task is embedded only when it can count: an object is named, the query has looks
        (``looks``), and some object-scoped skill parameter learned in a task has an image vector to compare
        (the only entries whose transfer by looks depends on it); otherwise every entry gets 1."""
        with self._lock:
            index = self._index
            if index is None or version != self._version or len(index.entries) != len(entries):
                index = self._index = self._build(entries, version)
            if not task.strip():
                return np.zeros(len(entries)), index, np.ones(len(entries))  # no task to compare: by looks alone
            masked = looks and bool(object_name.strip()) and index.action_by_looks
            queries = normalise(self.text_embedder.embed([task, mask_object(task, object_name)] if masked else [task]))
            scores = index.key_matrix @ queries[0]
            actions = np.ones(len(entries))
            if masked:  # only the keys that are masked tasks: a few rows of the key matrix
                actions = np.where(index.action_slot >= 0, (index.action_matrix @ queries[1])[np.maximum(index.action_slot, 0)], 1.0)
            return np.maximum(scores[index.first_key], scores[index.second_key]).astype(np.float64), index, actions

    def _build(self, entries: list[KnowledgeEntry], version: int) -> _Index:
        """Caller holds ``_lock``: embed the keys not seen yet, forget those of entries that are gone, index the entries."""
        name = self.text_embedder.name
        keys = {key for e in entries for key in e.keys} | {action_text(e) for e in entries if _has_action(e)}
        self._vectors = {k: v for k, v in self._vectors.items() if k in keys}
        self._version = version
        for entry in entries:  # vectors the entries carry, from the same model
            if entry.text_embedding is not None and entry.text_model == name and entry.task and entry.task not in self._vectors:
                self._vectors[entry.task] = normalise(np.asarray([entry.text_embedding]))[0]
        missing = sorted(keys - self._vectors.keys())
        if missing:
            self._vectors.update(zip(missing, normalise(self.text_embedder.embed(missing))))
        return _Index.build(entries, self._vectors, self.image_embedder)


@dataclass
class _Index:
    """The specific entries of one store version as arrays: key vectors, image vectors, object words."""

    entries: list[KnowledgeEntry]
    key_matrix: np.ndarray  # unique keys x dim (unit rows); a last zero row for entries without keys
    first_key: np.ndarray  # per entry: the row of its first key ...
    second_key: np.ndarray  # ... and of its second (the first again when it has one)
    object_scoped: np.ndarray  # per entry: scope == "object"
    about_objects: np.ndarray  # per entry: object-scoped or of an object kind (skill parameter, object info or state)
    image_rows: np.ndarray  # entries whose image_model is the image embedder's
    image_matrix: np.ndarray | None  # their vectors (None when their lengths differ)
    image_mass: np.ndarray
    image_norms: np.ndarray
    by_word: dict[str, list[int]]  # object word -> object-scoped entries whose object has it
    word_counts: np.ndarray  # per entry: how many distinct words its object has
    age_rank: np.ndarray  # per entry: its place in (created, id) order
    action_key: np.ndarray  # per entry: the row of its task with its object masked (-1: not a skill parameter of a task)
    action_slot: np.ndarray  # per entry: the row of that masked task in action_matrix (-1: none)
    action_matrix: np.ndarray  # the key rows of the masked tasks (unit rows)
    action_by_looks: bool  # an object-scoped entry with a masked task has an image vector of the image embedder

    @classmethod
    def build(cls, entries: list[KnowledgeEntry], vectors: dict[str, np.ndarray], image_embedder: Any) -> _Index:
        actions = [action_text(e) if _has_action(e) else "" for e in entries]
        keys = sorted({key for e in entries for key in e.keys} | {a for a in actions if a})
        row = {key: i for i, key in enumerate(keys)}
        dim = len(next(iter(vectors.values()))) if vectors else 1
        key_matrix = np.zeros((len(keys) + 1, dim), dtype=np.float32)
        for key, i in row.items():
            key_matrix[i] = vectors[key]
        first = np.array([row[e.keys[0]] if e.keys else len(keys) for e in entries], dtype=np.int64)
        second = np.array([row[e.keys[-1]] if e.keys else len(keys) for e in entries], dtype=np.int64)
        name = getattr(image_embedder, "name", None)
        rows = [i for i, e in enumerate(entries) if image_embedder is not None and e.image_embedding is not None
                and e.image_model == name]
        matrix = None
        if rows and len({len(entries[i].image_embedding) for i in rows}) == 1:
            matrix = np.array([entries[i].image_embedding for i in rows], dtype=np.float64)
        age_rank = np.empty(len(entries), dtype=np.int64)
        age_rank[sorted(range(len(entries)), key=lambda i: (entries[i].created, entries[i].id))] = np.arange(len(entries))
        by_word: dict[str, list[int]] = {}
        counts = np.zeros(len(entries), dtype=np.int64)
        for i, e in enumerate(entries):
            if e.scope == "object":
                words = set(_words(e.object))
                counts[i] = len(words)
                for word in words:
                    by_word.setdefault(word, []).append(i)
        action_key = np.array([row[a] if a else -1 for a in actions], dtype=np.int64)
        action_rows, action_slot = np.unique(action_key, return_inverse=True)
        if len(action_rows) and action_rows[0] < 0:  # -1 (no masked task) is the first unique value
            action_rows, action_slot = action_rows[1:], action_slot.reshape(-1) - 1
        object_scoped = np.array([e.scope == "object" for e in entries], dtype=bool)
        with_image = np.zeros(len(entries), dtype=bool)
        with_image[rows] = True
        return cls(entries, key_matrix, first, second, object_scoped,
                   np.array([e.scope == "object" or e.kind in OBJECT_KINDS for e in entries], dtype=bool),
                   np.array(rows, dtype=np.int64), matrix,
                   matrix.sum(axis=1) if matrix is not None else np.zeros(0),
                   np.linalg.norm(matrix, axis=1) if matrix is not None else np.zeros(0), by_word, counts, age_rank,
                   action_key, np.asarray(action_slot, dtype=np.int64).reshape(-1), np.ascontiguousarray(key_matrix[action_rows]),
                   bool((object_scoped & with_image & (action_key >= 0)).any()))

    def named(self, name_words: set[str]) -> list[int]:
        """Object-scoped entries whose object's words are all among ``name_words`` ("cup" is named by "red cup")."""
        hits: dict[int, int] = {}
        for word in name_words:
            for i in self.by_word.get(word, ()):
                hits[i] = hits.get(i, 0) + 1
        return [i for i, n in hits.items() if n == self.word_counts[i]]


MASK = "the object"  # what an object's name becomes when tasks are compared for what is done


def mask_object(text: str, object_name: str) -> str:
    """``text`` with ``object_name`` (and an article before it) replaced by a neutral word: "pick up the red
    spice jar" -> "pick up the object". Unchanged when the name does not occur."""
    words = object_name.split()
    if not words:
        return text
    pattern = r"\b(?:the |a |an |my |your )?" + r"\s+".join(re.escape(w) for w in words) + r"\b"
    return re.sub(pattern, MASK, text, flags=re.IGNORECASE)


def _has_action(entry: KnowledgeEntry) -> bool:
    """A skill parameter learned in a task: it transfers by looks only to the same kind of task (what an
    object is, or its state, holds whatever the task)."""
    return entry.kind == "skill_parameter" and bool(entry.task.strip())


def action_text(entry: KnowledgeEntry) -> str:
    """The entry's task with its object masked (the kind of thing that was being done)."""
    return mask_object(entry.task, entry.object)


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
    """The indices in the first JSON list of ``answer`` outside its reasoning (sorted, unique, those in range);
    None when there is no list of numbers."""
    values = next(json_values(answer, list), None)
    if values is None:
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
