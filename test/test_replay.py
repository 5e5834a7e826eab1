"""Replay regression: the shipped bags replay through `teachbot replay --check` with no LLM and no person,
repeated replays of one bag give identical transcripts (three; ten in make test-slow), and a deliberately changed prompt is reported as the
first divergence with a diff (non-zero exit status). The replays run as `teachbot` subprocesses on a
ROS domain of their own, so they never meet this test session's stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.llm.base import prompt_digest
from teachbot.llm.replay_model import ReplayModel
from teachbot.recording.bag import ObjectRecord, RecordedCompletion, RecordedSession, WorldRecord
from teachbot.recording.compare import compare_transcripts, compare_worlds

ROOT = Path(__file__).resolve().parents[1]
BAGS = ROOT / "test" / "bags"
SHIPPED = ["plain_task", "corrected_task", "learning_episode"]
HOUSEHOLD = ["household_bring_juice", "household_clean_table", "household_slowly_to_counter"]  # issue 11's demonstrations
TEACHBOT = [sys.executable, "-m", "teachbot.cli"]
SHORTEST = "plain_task"


def _teachbot(*args: str, share: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # a domain of its own
    env["PYTHONPATH"] = str(ROOT / "src")
    if share is not None:
        env["TEACHBOT_SHARE"] = str(share)
    return subprocess.run([*TEACHBOT, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


# ----------------------------------------------------------------------------- ROS-free parts


def _record(prompt: str, text: str, role: str = "interaction") -> RecordedCompletion:
    return RecordedCompletion(role, prompt_digest(prompt), prompt, text, 0)


def test_replay_model_answers_by_digest_and_reports_a_changed_prompt_with_a_diff():
    seen = []
    model = ReplayModel("interaction", [_record("base\n>>> ", "wait_for_trigger()"), _record("base\nmore\n>>> ", "go_home()")],
                        on_divergence=seen.append)
    assert model.generate("base\n>>> ").text == "wait_for_trigger()"
    with pytest.raises(Exception, match="first divergence: interaction prompt #2"):
        model.generate("base\nchanged\n>>> ")
    (divergence,) = seen
    assert "-more" in divergence.diff and "+changed" in divergence.diff
    assert divergence.expected_digest == prompt_digest("base\nmore\n>>> ") and not model.exhausted


def test_transcript_comparison_names_the_first_differing_line():
    assert compare_transcripts([">>> a", "1"], [">>> a", "1"]) is None
    assert "line 2" in compare_transcripts([">>> a", "1"], [">>> a", "2"]).detail
    assert "stops after 1" in compare_transcripts([">>> a", "1"], [">>> a"]).detail
    # a recording cut off by Ctrl-C: the replay's person leaving adds the SessionEnded line only
    assert compare_transcripts([">>> wait_for_trigger()"], [">>> wait_for_trigger()", "SessionEnded: bye"]) is None


def test_world_comparison_relations_exact_positions_within_tolerance():
    def world(x: float, support: str) -> WorldRecord:
        return WorldRecord((ObjectRecord("red block", (x, 0.0, 0.0), support, bool(support), False),), "", -1, 0.0)

    assert compare_worlds(world(0.0, "blue bowl"), world(0.015, "blue bowl")) == []
    assert len(compare_worlds(world(0.0, "blue bowl"), world(0.05, "blue bowl"))) == 1
    assert any("supported_by" in d.detail for d in compare_worlds(world(0.0, "blue bowl"), world(0.0, "")))


# ----------------------------------------------------------------------------- whole-stack replays


@pytest.mark.timeout(pytest_timeout(600))
def test_shipped_bags_replay_with_check():
    result = _teachbot("replay", *(str(BAGS / n) for n in SHIPPED), "--check", "--quiet")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("OK: ") == len(SHIPPED)


@pytest.mark.timeout(pytest_timeout(900))
def test_household_demonstrations_replay_with_check():
    """Bring me some juice, clean the table, go to the counter slowly (learned, scoped to the counter):
    each replays in the household simulation with the recorded transcript and the recorded world."""
    result = _teachbot("replay", *(str(BAGS / n) for n in HOUSEHOLD), "--check", "--quiet")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("OK: ") == len(HOUSEHOLD)


@pytest.mark.timeout(pytest_timeout(900))
@pytest.mark.parametrize("times", [3, pytest.param(10, marks=pytest.mark.slow)])
def test_repeated_replays_give_identical_transcripts(tmp_path, times):
    """Replays of one bag in one process agree with the recording and with each other: three in make test,
    ten in make test-slow (the same check, more repetitions)."""
    result = _teachbot("replay", str(BAGS / SHORTEST), "--check", "--quiet", "--times", str(times), "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = [RecordedSession.load(p) for p in sorted(tmp_path.iterdir())]
    assert len(runs) == times
    recorded = RecordedSession.load(BAGS / SHORTEST)
    assert all(run.transcript == recorded.transcript for run in runs)
    assert all([c.prompt_digest for c in run.completions] == [c.prompt_digest for c in recorded.completions] for run in runs)


@pytest.mark.timeout(pytest_timeout(600))
def test_a_changed_prompt_is_caught_as_the_first_divergence_with_a_diff(tmp_path):
    share = tmp_path / "share"
    for name in ("config", "prompts"):
        shutil.copytree(ROOT / name, share / name)
    shutil.copytree(ROOT / "memory_store", share / "memory_store", ignore=shutil.ignore_patterns("learned", ".embedding_cache"))
    prompt = share / "prompts" / "console_tabletop.txt"
    lines = prompt.read_text().splitlines(keepends=True)
    lines.insert(1, "Always double-check the bowl's colour.\n")
    prompt.write_text("".join(lines))
    result = _teachbot("replay", str(BAGS / SHORTEST), "--check", "--quiet", share=share)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "DIVERGED: first divergence: interaction prompt #1" in result.stdout
    assert "+Always double-check the bowl's colour." in result.stdout
    assert "--- recorded prompt" in result.stdout and "+++ replayed prompt" in result.stdout
