"""One episode through the ROS stack, read back as one trace holding the spans of every node, in causal order.

The shipped learning session (test/bags/learning_episode) is replayed by `teachbot replay --check` (a process and a
ROS domain of its own, as a user runs it) through the real nodes (sim, skills,
memory, improvement, interaction manager; the LLM roles answer from the recording): the person asks, the
robot puts the wrong block, the person corrects it and the robot learns; then the next request is done right.
The trace files (TEACHBOT_TRACE_DIR points the command at a folder of the test's) must hold, for the
episode, one trace whose spans come from the interaction manager's process and from the memory, skills and
improvement nodes, joined only through the goals' and requests' trace_parent fields: each server span hangs
under the client span that sent it, every span lies within its parent's time, and the lesson stored by the
learning chain is the id the memory node stored. The retrieval for the next request finds that lesson.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from timing import timeout

from teachbot.recording.bag import RecordedSession
from teachbot.tracing import EPISODE_ID, EPISODE_SPAN
from teachbot.tracing.jsonl import SpanRecord, read_spans
from teachbot.tracing.tree import episodes, render

ROOT = Path(__file__).resolve().parents[1]
BAG = ROOT / "test" / "bags" / "learning_episode"


def children(trace: list[SpanRecord], parent: SpanRecord, name: str = "") -> list[SpanRecord]:
    return [r for r in trace if r.parent_id == parent.span_id and (not name or r.name == name)]


def descendants(trace: list[SpanRecord], parent: SpanRecord) -> list[SpanRecord]:
    found, frontier = [], [parent]
    while frontier:
        kids = [r for p in frontier for r in children(trace, p)]
        found += kids
        frontier = kids
    return found


@pytest.mark.timeout(timeout(600))
def test_a_learning_episode_is_one_trace_across_the_nodes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # a domain of its own
    env.update(PYTHONPATH=str(ROOT / "src"), TEACHBOT_TRACE_DIR=str(tmp_path / "traces"))
    done = subprocess.run([sys.executable, "-m", "teachbot.cli", "replay", str(BAG), "--check", "--quiet"], env=env,
                          capture_output=True, text=True, timeout=timeout(300), cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    spans = read_spans(tmp_path / "traces")  # the command's process wrote them all before it exited
    new = episodes(spans)
    assert len(new) == 1, f"expected the session's one episode, found {new}"
    first = [r for r in spans if r.trace_id == new[0].trace_id]
    text = render(first)
    by_id = {r.span_id: r for r in first}

    # one root, and every other span's parent is in the same trace (nothing dangling, nothing in another trace)
    (root,) = [r for r in first if r.parent_id is None]
    assert root.name == EPISODE_SPAN and root.attributes[EPISODE_ID] == new[0].episode_id
    assert all(r.parent_id in by_id for r in first if r is not root), text
    for record in first:  # causal order: a child lies within its parent's time
        if record.parent_id:
            parent = by_id[record.parent_id]
            assert parent.start_ns <= record.start_ns and record.end_ns <= parent.end_ns, (record.name, parent.name, text)

    nodes = {r.attributes.get("teachbot.node") for r in first} - {None}
    assert {"interaction_manager", "memory", "skills", "improvement"} <= nodes, text

    statements = [r for r in first if r.name == "statement"]
    sources = [r.attributes["console.source"] for r in sorted(statements, key=lambda r: r.start_ns)]
    assert sources[:2] == ["wait_for_trigger()", "put_first_on_second('red block', 'blue bowl')"], text
    assert "learn_from_interaction()" in sources, text
    lines = list(RecordedSession.load(BAG).transcript)  # the replay reproduced it (--check); each statement names its line
    assert all(lines[r.attributes["console.line"]] == ">>> " + r.attributes["console.source"].splitlines()[0] for r in statements)

    # the skill goal: the console's statement -> the client's goal -> the skills node's execution
    goals = sorted((r for r in first if r.name == "skill.goal"), key=lambda r: r.start_ns)
    assert [by_id[g.parent_id].attributes["console.source"] for g in goals] == [
        "put_first_on_second('red block', 'blue bowl')", "put_first_on_second('green block', 'yellow bowl')"], text
    goal = goals[0]
    assert goal.attributes["skill.action"] == "put_first_on_second" and goal.attributes["skill.result"] == "success"
    (executed,) = children(first, goal, "skill.execute")
    assert executed.attributes["teachbot.node"] == "skills" and executed.attributes["skill.code"] == 0
    assert "red block" in executed.attributes["skill.arguments"]

    # the LLM calls: the interaction model's, each under the episode or a statement, with its prompt digest
    calls = [r for r in first if r.name == "llm.call"]
    assert {c.attributes["llm.role"] for c in calls} >= {"interaction", "improvement"}, text
    assert all(len(c.attributes["llm.prompt_digest"]) == 64 and c.attributes["llm.tokens_in"] > 0 for c in calls)

    # retrieval for the prompt, answered by the memory node, with ids and scores
    retrievals = [r for r in first if r.name == "memory.retrieve"]
    assert retrievals and all(r.attributes["teachbot.node"] == "memory" for r in retrievals)
    assert len(retrievals[0].attributes["retrieval.ids"]) == len(retrievals[0].attributes["retrieval.scores"]) > 0

    # the learning chain: learn_from_interaction() -> the improvement node -> its steps -> the memory node's store
    (learn_statement,) = [s for s in statements if s.attributes["console.source"] == "learn_from_interaction()"]
    (served,) = [r for r in descendants(first, learn_statement) if r.name == "improvement.serve"]
    assert served.attributes["teachbot.node"] == "improvement"
    (learning,) = children(first, served, "learning")
    assert learning.attributes["learning.verdict"] == "stored", text
    lesson = learning.attributes["learning.lesson_id"]
    steps = [r.attributes["learning.step"] for r in sorted(children(first, learning, "learning.step"), key=lambda r: r.start_ns)]
    assert steps[0] == "problem" and len(steps) >= 3, steps
    assert all(children(first, step, "llm.call") for step in children(first, learning, "learning.step"))
    stored = [r for r in descendants(first, learning) if r.name == "memory.add"]
    assert [r.attributes["memory.stored_ids"] for r in stored] == [[lesson]], text
    assert stored[0].attributes["teachbot.node"] == "memory"

    # the next request's prompt retrieves the lesson just learned (and no retrieval before it could)
    later = [r for r in retrievals if r.start_ns > learning.end_ns]
    assert later and lesson in later[-1].attributes["retrieval.ids"], text
    assert not any(lesson in r.attributes["retrieval.ids"] for r in retrievals if r.start_ns < learning.start_ns)
