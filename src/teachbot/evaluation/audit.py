"""One evaluation run's story, told from its result line and its trace: ``teachbot eval show DIR [RUN]``.

Every evaluation (cap, droc, raider, multitask) writes ``results.jsonl`` in its output directory, each line naming
the trace of its run (``trace_id``; cap keeps it under ``extra``), and the traces themselves in ``DIR/traces``
(teachbot.tracing). ``runs`` lists the lines; ``story`` tells one: what was asked and how it ended, each LLM role's
calls, tokens and cost, the examples retrieved with their scores, the lessons stored or discarded, then the whole
trace as a tree, each model reply under its call. A cap sweep with several trials names its runs with the trial too
(``method/split/template/run/trial-T``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.errors import ConfigError
from teachbot.evaluation.sweep import SWEEP_FILE
from teachbot.tracing.jsonl import SpanRecord, read_spans
from teachbot.tracing.tree import ordered, render

RESULTS = "results.jsonl"
TRACES = "traces"
# the fields that name a run, in the order they are shown, whichever evaluation wrote the line
KEY_FIELDS = ("method", "split", "template", "task", "mode", "first", "second", "iteration", "variant", "id", "run")


@dataclass(frozen=True)
class RunLine:
    """One line of results.jsonl: its number (from 1), the run's name, its trace id and the whole line."""

    number: int
    key: str
    trace_id: str
    data: dict[str, Any]

    @property
    def outcome(self) -> str:
        data = self.data
        if "outcome" in data:
            return str(data["outcome"])
        if "success" in data:
            return "success" if data["success"] else "failure"
        if "det" in data:
            return "detected" if data["det"] else "missed"
        return ""


def runs(directory: str | Path) -> list[RunLine]:
    """The runs of an evaluation directory, in the order they were written."""
    path = Path(directory) / RESULTS
    if not path.is_file():
        raise ConfigError(f"{directory} has no {RESULTS}; pass the --out directory of a `teachbot eval` command")
    lines = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc.msg})") from None
    trials = _trials(Path(directory)) > 1 or any(data.get("trial") for _, data in lines)
    found = []
    for number, data in lines:
        key = "/".join(str(data[k]) for k in KEY_FIELDS if data.get(k) not in (None, ""))
        if trials:
            key += f"/trial-{int(data.get('trial') or 0)}"
        trace_id = str(data.get("trace_id") or (data.get("extra") or {}).get("trace_id") or "")
        found.append(RunLine(number, key, trace_id, data))
    return found


def _trials(directory: Path) -> int:
    """The trials of a cap sweep (its sweep.json); 1 for a sweep without them, or another evaluation's directory."""
    marker = directory / SWEEP_FILE
    try:
        return int(json.loads(marker.read_text()).get("trials", 1)) if marker.is_file() else 1
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return 1


def pick(lines: list[RunLine], which: str) -> RunLine:
    """The run named ``which``: its line number, or its name (``method/split/template/run[/trial-T]`` for cap), or a
    unique prefix of the name."""
    if which.isdigit():
        chosen = [r for r in lines if r.number == int(which)]
    else:
        chosen = [r for r in lines if r.key == which] or [r for r in lines if r.key.startswith(which)]
    if len(chosen) != 1:
        problem = "no run" if not chosen else f"{len(chosen)} runs"
        raise ConfigError(f"{problem} named {which!r}; `teachbot eval show DIR` lists the runs (a line number works too)")
    return chosen[0]


def story(directory: str | Path, which: str) -> str:
    """The story of one run (see the module docstring)."""
    line = pick(runs(directory), which)
    head = [f"run {line.number}: {line.key}  outcome: {line.outcome or '?'}"]
    for key in ("instruction", "returns", "corrections", "said", "stops", "error"):
        if line.data.get(key) not in (None, "", [], ()):
            head.append(f"  {key}: {json.dumps(line.data[key], ensure_ascii=False)}")
    if not line.trace_id:
        return "\n".join([*head, "  (no trace: this line was written before runs were traced)"])
    trace = sorted((r for r in read_spans(Path(directory) / TRACES) if r.trace_id == line.trace_id),
                   key=lambda r: (r.start_ns, r.end_ns))
    if not trace:
        return "\n".join([*head, f"  (trace {line.trace_id} is not in {Path(directory) / TRACES})"])
    return "\n".join([*head, f"  trace: {line.trace_id} ({len(trace)} spans)", *_usage(trace), *_memory(trace), "",
                      _tree_with_replies(trace)])


def _usage(trace: list[SpanRecord]) -> list[str]:
    roles: dict[str, list[SpanRecord]] = {}
    for record in trace:
        if record.name == "llm.call":
            roles.setdefault(str(record.attributes.get("llm.role", "")), []).append(record)
    lines = []
    for role, calls in sorted(roles.items()):
        tokens_in = sum(int(c.attributes.get("llm.tokens_in", 0)) for c in calls)
        tokens_out = sum(int(c.attributes.get("llm.tokens_out", 0)) for c in calls)
        cost = sum(float(c.attributes.get("llm.cost_usd", 0.0)) for c in calls)
        models = sorted({str(c.attributes.get("llm.model", "")) for c in calls})
        lines.append(f"  {role or 'model'}: {len(calls)} calls to {', '.join(models)}, {tokens_in} tokens in, "
                     f"{tokens_out} out, ${cost:.4f}")
    return lines


def _memory(trace: list[SpanRecord]) -> list[str]:
    lines = []
    for record in trace:
        if record.name in ("memory.retrieve", "knowledge.retrieve"):
            pairs = zip(record.attributes.get("retrieval.ids", []), record.attributes.get("retrieval.scores", []))
            lines.append(f"  {record.name}: " + (", ".join(f"{i} ({s:.3f})" for i, s in pairs) or "nothing"))
        elif record.name == "learning":
            outcome = record.attributes.get("learning.lesson_id") or record.attributes.get("learning.reason", "")
            lines.append(f"  lesson {record.attributes.get('learning.verdict', '?')}: {outcome}")
    return lines


def _tree_with_replies(trace: list[SpanRecord]) -> str:
    rendered = render(trace).splitlines()
    out = []
    for (depth, record), text in zip(ordered(trace), rendered):
        out.append(text)
        reply = str(record.attributes.get("llm.reply", "")) if record.name == "llm.call" else ""
        if reply.strip():
            indent = " " * (24 + 2 * depth)
            out += [f"{indent}| {part}" for part in reply.strip().splitlines()]
    return "\n".join(out)
