"""An episode's trace read back from the day files, as a tree: for ``teachbot trace show`` and the web page.

``episodes`` lists the episodes found (newest last): on the robot each is a trace of its own; in an evaluation
the episodes of one run hang under its ``evaluation.run`` span. ``episode_trace`` picks an episode by its id (a
prefix is enough) or the newest (its span and everything under it), or a whole trace by its id (an evaluation
run's, as results.jsonl names it); ``render`` prints it as an indented tree with each span's start (seconds after
the first began), duration, node and its telling attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from teachbot.errors import ConfigError
from teachbot.tracing.jsonl import SpanRecord
from teachbot.tracing.spans import EPISODE_ID, EPISODE_SPAN, NODE

# The attributes worth a line's room, by span name (the rest are in the file and the page).
SHOWN = {
    "llm.call": ("llm.role", "llm.model", "llm.tokens_in", "llm.tokens_cached", "llm.tokens_out", "llm.cost_usd",
                 "llm.finish_reason"),
    "statement": ("console.source", "console.result"),
    "skill.goal": ("skill.action", "skill.arguments", "skill.result"),
    "skill.execute": ("skill.action", "skill.result"),
    "memory.retrieve": ("retrieval.ids", "retrieval.scores"),
    "knowledge.retrieve": ("retrieval.ids", "retrieval.scores"),
    "memory.add": ("memory.stored_ids",),
    "knowledge.add": ("memory.stored_ids",),
    "issue.check": ("issue.query", "issue.verdict"),
    "approval": ("approval.question", "approval.answer"),
    "learning": ("learning.verdict", "learning.lesson_id", "learning.reason"),
    "learning.step": ("learning.step", "learning.verdict"),
    "evaluation.run": ("evaluation.kind", "evaluation.method", "evaluation.task", "evaluation.trial"),
    EPISODE_SPAN: (EPISODE_ID, "episode.reason"),
}


@dataclass(frozen=True)
class EpisodeSummary:
    """One episode found in the trace files."""

    episode_id: str
    trace_id: str
    start_ns: int
    seconds: float
    spans: int


def episodes(spans: Sequence[SpanRecord]) -> list[EpisodeSummary]:
    """The episodes among ``spans`` (their ``episode`` spans, with how many spans each holds), oldest first."""
    children = _children(spans)
    found = [EpisodeSummary(str(r.attributes.get(EPISODE_ID, "")), r.trace_id, r.start_ns, r.seconds,
                            1 + len(_below(children, r))) for r in spans if r.name == EPISODE_SPAN]
    return sorted(found, key=lambda e: e.start_ns)


Children = dict[tuple[str, str | None], list[SpanRecord]]


def _children(spans: Sequence[SpanRecord]) -> Children:
    """Each span's children, by (trace id, parent span id): built once for every lookup of ``_below``."""
    children: Children = {}
    for record in spans:
        children.setdefault((record.trace_id, record.parent_id), []).append(record)
    return children


def _below(children: Children, top: SpanRecord) -> list[SpanRecord]:
    """The spans under ``top`` (its trace's spans whose chain of parents reaches it)."""
    found, frontier = [], [top.span_id]
    while frontier:
        kids = [r for parent in frontier for r in children.get((top.trace_id, parent), [])]
        found += kids
        frontier = [r.span_id for r in kids]
    return found


def episode_trace(spans: Sequence[SpanRecord], which: str = "") -> list[SpanRecord]:
    """The spans of one episode (its span and all under it), by start time: ``which`` an episode id (or its prefix), or
    '' for the newest episode; or a whole trace when ``which`` is a trace id. A ConfigError says what there is when
    nothing matches."""
    whole = sorted((r for r in spans if which and r.trace_id == which), key=lambda r: (r.start_ns, r.end_ns))
    if whole:
        return whole
    known = [r for r in sorted(spans, key=lambda r: r.start_ns) if r.name == EPISODE_SPAN]
    if not known:
        raise ConfigError("no episode traces found; run an episode first (tracing.enabled in config/tracing.yaml), "
                          "or point --dir (TEACHBOT_TRACE_DIR) at the traces folder")
    if not which:
        chosen = known[-1]
    else:
        matches = [r for r in known if str(r.attributes.get(EPISODE_ID, "")).startswith(which)]
        if len(matches) != 1:
            some = ", ".join(str(r.attributes.get(EPISODE_ID, "")) for r in known[-5:])
            problem = "no episode" if not matches else f"{len(matches)} episodes"
            raise ConfigError(f"{problem} matches {which!r}; the newest are: {some} (`teachbot trace list` lists them all)")
        chosen = matches[0]
    return sorted([chosen, *_below(_children(spans), chosen)], key=lambda r: (r.start_ns, r.end_ns))


def ordered(trace: Sequence[SpanRecord]) -> list[tuple[int, SpanRecord]]:
    """(depth, span) in tree order: each span after its parent, siblings by start time. A span whose parent is not in
    the files (a node whose spans were not written yet) hangs at the top."""
    ids = {r.span_id for r in trace}
    children: dict[str | None, list[SpanRecord]] = {}
    for record in trace:
        parent = record.parent_id if record.parent_id in ids else None
        children.setdefault(parent, []).append(record)
    out: list[tuple[int, SpanRecord]] = []

    def walk(parent: str | None, depth: int) -> None:
        for child in sorted(children.get(parent, []), key=lambda r: (r.start_ns, r.end_ns)):
            out.append((depth, child))
            walk(child.span_id, depth + 1)

    walk(None, 0)
    return out


def render(trace: Sequence[SpanRecord], width: int = 160) -> str:
    """The trace as an indented tree, one line per span: start offset, duration, name, node, attributes."""
    if not trace:
        return ""
    origin = min(r.start_ns for r in trace)
    lines = []
    for depth, record in ordered(trace):
        node = record.attributes.get(NODE, "")
        shown = [f"{key.split('.', 1)[-1]}={_short(record.attributes[key])}" for key in SHOWN.get(record.name, ())
                 if key in record.attributes]
        failed = f" ERROR {record.status_message}" if record.status == "error" else ""
        head = (f"{(record.start_ns - origin) / 1e9:8.3f}s {record.seconds * 1000:9.1f} ms  {'  ' * depth}{record.name}"
                f"{f' [{node}]' if node else ''}")
        line = f"{head}  {' '.join(shown)}{failed}".rstrip()
        lines.append(line if len(line) <= width else line[: width - 3] + "...")
    return "\n".join(lines)


def _short(value: object) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= 60 else text[:57] + "...")
