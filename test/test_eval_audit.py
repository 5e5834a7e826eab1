"""`teachbot eval show DIR [RUN]`: an evaluation run's story from its result line and its trace (teachbot.evaluation.audit).

The run is traced as the evaluations trace it (evaluation.run > episode > statement, LLM calls with their replies,
retrieval, learning) through the real OpenTelemetry SDK into DIR/traces; the story must name the run, its outcome,
each role's usage, what was retrieved with which score, the lesson stored, and every reply under its call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tracing import Spans, spans  # noqa: F401 - the fixture

from teachbot.cli import main
from teachbot.errors import ConfigError
from teachbot.evaluation.audit import pick, runs, story
from teachbot.tracing import EPISODE_ID, EPISODE_SPAN, evaluation_run, record_span, span
from teachbot.tracing.jsonl import JsonlSpanExporter


def write_run(spans: Spans, out: Path) -> str:  # noqa: F811
    with evaluation_run("cap", method="ours", split="SA-SI", task="block_in_bowl", trial=1) as trace_id, \
            span(EPISODE_SPAN, {EPISODE_ID: "ep0000000001"}):
        with span("memory.retrieve", {"retrieval.ids": ["seed:tabletop/a", "lesson-7"], "retrieval.scores": [0.61, 0.93]}):
            pass
        record_span("llm.call", 0.0, {"llm.role": "interaction", "llm.model": "m1", "llm.tokens_in": 100,
                                      "llm.tokens_out": 7, "llm.cost_usd": 0.002, "llm.reply": "put_first_on_second('red block', 'bowl')"})
        with span("statement", {"console.source": "put_first_on_second('red block', 'bowl')", "console.result": "'success'"}), \
                span("learning", {"learning.verdict": "stored", "learning.lesson_id": "lesson-8"}):
            record_span("llm.call", 0.0, {"llm.role": "improvement", "llm.model": "m2", "llm.tokens_in": 50,
                                          "llm.tokens_out": 5, "llm.cost_usd": 0.001, "llm.reply": "The person wanted the bowl."})
    JsonlSpanExporter(out / "traces").export(spans.memory.get_finished_spans())
    lines = [{"method": "ours", "split": "SA-SI", "template": "block_in_bowl", "run": 0, "outcome": "failure", "returns": []},
             {"method": "ours", "split": "SA-SI", "template": "block_in_bowl", "run": 1, "outcome": "success",
              "instruction": "put the red block in the bowl", "returns": [{"state": "success"}], "extra": {"trace_id": trace_id}}]
    (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return trace_id


def test_a_run_tells_its_story(spans: Spans, tmp_path: Path) -> None:  # noqa: F811
    trace_id = write_run(spans, tmp_path)
    listed = runs(tmp_path)
    assert [(r.number, r.key, r.trace_id) for r in listed] == [
        (1, "ours/SA-SI/block_in_bowl/0", ""), (2, "ours/SA-SI/block_in_bowl/1", trace_id)]
    assert pick(listed, "2") == pick(listed, "ours/SA-SI/block_in_bowl/1")
    text = story(tmp_path, "ours/SA-SI/block_in_bowl/1")
    assert text.splitlines()[0] == "run 2: ours/SA-SI/block_in_bowl/1  outcome: success"
    assert '  instruction: "put the red block in the bowl"' in text
    assert "  improvement: 1 calls to m2, 50 tokens in, 5 out, $0.0010" in text
    assert "  interaction: 1 calls to m1, 100 tokens in, 7 out, $0.0020" in text
    assert "  memory.retrieve: seed:tabletop/a (0.610), lesson-7 (0.930)" in text
    assert "  lesson stored: lesson-8" in text
    tree = text.split("\n\n", 1)[1].splitlines()
    assert [line.split()[3] for line in tree if not line.lstrip().startswith("|")] == [
        "evaluation.run", "episode", "memory.retrieve", "llm.call", "statement", "learning", "llm.call"]
    assert tree[4].strip() == "| put_first_on_second('red block', 'bowl')"  # the reply under its call
    assert "run 1: ours/SA-SI/block_in_bowl/0" in story(tmp_path, "1") and "(no trace" in story(tmp_path, "1")
    with pytest.raises(ConfigError, match="2 runs named 'ours/SA'"):
        story(tmp_path, "ours/SA")
    with pytest.raises(ConfigError, match="no results.jsonl"):
        runs(tmp_path / "elsewhere")


def test_eval_show_command(spans: Spans, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    trace_id = write_run(spans, tmp_path)
    assert main(["eval", "show", str(tmp_path)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[1].split() == ["2", "ours/SA-SI/block_in_bowl/1", "success", trace_id]
    assert main(["eval", "show", str(tmp_path), "2"]) == 0
    assert "lesson stored: lesson-8" in capsys.readouterr().out
