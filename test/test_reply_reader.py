"""The tolerant reader of LLM replies (teachbot.language.reply) on a corpus of real reply styles."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from teachbot.language.reply import EMPTY_ERROR, UNCLOSED_ERROR, Reply, first_statement_complete, read_reply

FIXTURES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "fixtures" / "llm_replies.yaml").read_text())
PROSE_HINT = "(write one Python statement after >>>; prose goes in say('...'))"


def by_id(fixtures: list[dict[str, Any]]) -> Any:
    return pytest.mark.parametrize("fixture", fixtures, ids=[f["id"] for f in fixtures])


def _bare_lines(text: str) -> list[str]:
    """The reply's non-blank lines without '>>> '/'... ' prefixes: what is left when nothing is dropped."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        for prefix in (">>> ", "... ", ">>>", "..."):
            if line.startswith(prefix):
                line = line[len(prefix):]
                break
        if line.strip():
            lines.append(line.strip())
    return lines


def _first_complete_prefix(text: str) -> int | None:
    return next((k for k in range(len(text) + 1) if first_statement_complete(text[:k])), None)


# ---------------------------------------------------------------------- the corpus


def test_corpus_covers_every_family():
    assert len(FIXTURES) >= 48
    assert len({f["id"] for f in FIXTURES}) == len(FIXTURES)
    counts = Counter(f["style"] for f in FIXTURES)
    assert set(counts) == {"openai_chat", "llama3_instruct", "qwen25_instruct", "mistral_instruct", "deepseek_r1",
                           "qwen3_thinking", "base_completion", "multi_statement"}
    assert min(counts.values()) >= 6


@by_id(FIXTURES)
def test_fixture_reads_as_expected(fixture):
    reply = read_reply(fixture["text"])
    if "error" in fixture:
        assert reply.statements == ()
        assert reply.error.startswith(fixture["error"])
        assert "\n" not in reply.error
        return
    assert reply.error == ""
    assert list(reply.statements) == fixture["statements"]
    used = [line.strip() for s in reply.statements for line in s.split("\n") if line.strip()]
    if _bare_lines(fixture["text"]) == used:
        assert reply.dropped == ""
    else:
        assert reply.dropped.strip()


@by_id(FIXTURES)
def test_streaming_never_closes_early_on_a_different_statement(fixture):
    """Wherever the stream would be closed, the prefix read so far yields the full reply's first statement."""
    text = fixture["text"]
    full = read_reply(text).statements
    for k in range(len(text) + 1):
        if first_statement_complete(text[:k]):
            assert full, f"complete at {text[:k]!r} but the reply has no statement"
            assert read_reply(text[:k]).statements[0] == full[0], text[:k]


@by_id([f for f in FIXTURES if "stream_stops_at" in f])
def test_streaming_stops_before_the_invented_output_ends(fixture):
    k = _first_complete_prefix(fixture["text"])
    assert k is not None
    assert fixture["text"][:k] == fixture["stream_stops_at"]
    assert k < len(fixture["text"].rstrip())


def test_console_style_fixtures_all_stop_early():
    console_style = [f for f in FIXTURES if f["style"] == "base_completion" and "statements" in f]
    assert console_style and all("stream_stops_at" in f for f in console_style)


@by_id([f for f in FIXTURES if f["style"] in ("deepseek_r1", "qwen3_thinking") and "statements" in f])
def test_streaming_waits_for_the_end_of_reasoning(fixture):
    text = fixture["text"]
    k = _first_complete_prefix(text)
    if k is not None:
        closing = max(text.lower().rfind(tag) for tag in ("</think>", "</thinking>", "</reasoning>"))
        assert k > closing >= 0


# ---------------------------------------------------------------------- reasoning


@pytest.mark.parametrize("tag", ["think", "thinking", "reasoning", "THINK"])
def test_reasoning_blocks_are_dropped(tag):
    reply = read_reply(f"<{tag}>\nget_obj_names() first?\n</{tag}>\nsay('hi')")
    assert reply.statements == ("say('hi')",)
    assert "get_obj_names() first?" in reply.dropped


def test_orphan_closing_tag_drops_everything_before_it():
    reply = read_reply("I could run get_obj_names()\nget_obj_names()\n</think>\nwait_for_trigger()")
    assert reply.statements == ("wait_for_trigger()",)
    assert reply.dropped.startswith("I could run")


def test_answer_on_the_same_line_as_the_closing_tag():
    assert read_reply("<think>short</think>get_obj_names()").statements == ("get_obj_names()",)


def test_unclosed_reasoning_is_an_error_and_reasoning_only_is_empty():
    assert read_reply("<think>\nI will call get_obj_names()\n").error == UNCLOSED_ERROR
    assert read_reply("<think>\nnothing to do\n</think>\n").error.startswith("EmptyCompletion")


@pytest.mark.parametrize("token", ["<|im_end|>", "<|eot_id|>", "</s>", "<|endoftext|>"])
def test_a_leaked_end_of_turn_token_ends_the_reply(token):
    reply = read_reply(f"say('hi'){token}\nsay('again')")
    assert reply.statements == ("say('hi')",)
    assert reply.dropped == f"{token}\nsay('again')"


# ---------------------------------------------------------------------- prose and errors


@pytest.mark.parametrize("text", ["", "   \n", "\r\n"])
def test_empty_reply(text):
    assert read_reply(text) == Reply((), "", EMPTY_ERROR)


@pytest.mark.parametrize("text", ["I will now pick the block.", "Done.", "Okay, let me think about this.\nNot sure yet."])
def test_prose_gives_the_console_syntax_error(text):
    reply = read_reply(text)
    assert reply.statements == ()
    assert reply.error.startswith("SyntaxError: ") and reply.error.endswith(PROSE_HINT)
    assert reply.dropped == text.strip()


@pytest.mark.parametrize("word", ["Sure", "Okay", "Certainly"])
def test_a_bare_word_is_prose_when_more_follows_and_a_statement_when_alone(word):
    assert read_reply(f"{word}\nget_obj_names()").statements == ("get_obj_names()",)
    assert read_reply(f"{word}\n\nI will wait.").error.startswith("SyntaxError")
    assert read_reply(word).statements == (word,)  # the console answers it with a NameError


@pytest.mark.parametrize("line", ["not sure", "Answer: get_obj_names()", "- done", "Output: 'success'"])
def test_prose_that_parses_is_not_a_statement(line):
    assert read_reply(f"{line}\nsay('hi')").statements == ("say('hi')",)


def test_inline_backticks_only_when_nothing_else():
    assert read_reply("Calling `get_obj_names()` now.").statements == ("get_obj_names()",)
    assert read_reply("I use `say` to talk, so `say('hi')` it is.").statements == ("say('hi')",)
    assert read_reply("Calling `get_obj_names()` now.\nwait_for_trigger()").statements == ("wait_for_trigger()",)
    assert read_reply("```python get_obj_names()```").statements == ("get_obj_names()",)


# ---------------------------------------------------------------------- output and several statements


def test_literals_after_the_first_statement_are_output():
    reply = read_reply("get_obj_names()\n['red block']\n'success'\n42\nNone\nsay('ok')")
    assert reply.statements == ("get_obj_names()", "say('ok')")
    assert reply.dropped == "['red block']\n'success'\n42\nNone"


def test_a_literal_typed_after_the_prompt_is_a_statement():
    assert read_reply(">>> get_obj_names()\n>>> 'hello'").statements == ("get_obj_names()", "'hello'")


def test_console_text_unprompted_lines_after_a_statement_are_output():
    text = ">>> get_obj_names()\nred block\nsay('not a statement: output')\n>>> say('yes')"
    assert read_reply(text).statements == ("get_obj_names()", "say('yes')")


def test_invented_traceback_is_dropped():
    text = "get_obj_pos('cup')\nTraceback (most recent call last):\n  File \"<console>\", line 1\nValueError: unknown object 'cup'"
    reply = read_reply(text)
    assert reply.statements == ("get_obj_pos('cup')",)
    assert reply.dropped.endswith("unknown object 'cup'")


def test_first_fence_with_code_wins_over_an_output_fence():
    text = "The objects are:\n```\n['red block', 'blue bowl']\n```\nSo:\n```python\nput_first_on_second('red block', 'blue bowl')\n```"
    assert read_reply(text).statements == ("put_first_on_second('red block', 'blue bowl')",)


# ---------------------------------------------------------------------- blocks


@pytest.mark.parametrize("end", ["\n\nsay('x')", "\nsay('x')", "\n>>> say('x')", "\n... \nsay('x')"])
def test_a_block_ends_at_a_blank_line_a_dedent_or_a_prompt(end):
    for body in ("\n    say(o)", "\n...     say(o)"):
        reply = read_reply("for o in get_obj_names():" + body + end)
        assert reply.statements == ("for o in get_obj_names():\n    say(o)", "say('x')")


def test_dedented_clauses_and_blank_lines_inside_a_block():
    text = "if x:\n    a()\n\n    b()\nelse:\n    c()\nd()"
    assert read_reply(text).statements == ("if x:\n    a()\n\n    b()\nelse:\n    c()", "d()")


def test_brackets_carry_a_statement_over_lines():
    text = "put_first_on_second(\n    'red block',\n'blue bowl')\n'success'"
    assert read_reply(text).statements == ("put_first_on_second(\n    'red block',\n'blue bowl')",)


def test_an_indented_reply_is_dedented():
    text = "    for o in objs:\n        say(o)\n    get_obj_names()"
    assert read_reply(text).statements == ("for o in objs:\n    say(o)", "get_obj_names()")


def test_windows_line_endings_and_trailing_whitespace():
    reply = read_reply(">>> for o in objs:   \r\n...     say(o)  \r\n... \r\n'x'\r\n")
    assert reply.statements == ("for o in objs:\n    say(o)",)


# ---------------------------------------------------------------------- streaming


@pytest.mark.parametrize("text", [
    "", "get_obj_names()", "get_obj_names()\n", "get_obj_names()\n.", "get_obj_names()\n..", "get_obj_names()\n... ",
    "get_obj_names()\n ", "get_obj_names()\n\t", "put_first_on_second(\n'red block',\n",
    "<think>\nget_obj_names()\n['a']\n", "<think>\nget_obj_names()\n['a']\n</thi",
    "Sure! Here is the statement:\n", "Let me check the objects.\nget_obj_names()\n['a']",
    "for o in objs:\n    say(o)\n", "for o in objs:\n    say(o)\n\n", "for o in objs:\n    say(o)\n\n  ",
    "if x:\n    a()\nel", "if x:\n    a()\nelse", "```python\nget_obj_names()",
])
def test_not_complete_yet(text):
    assert not first_statement_complete(text)


@pytest.mark.parametrize("text", [
    "get_obj_names()\n[", "get_obj_names()\n'", "get_obj_names()\n>", "get_obj_names()\n\n",
    "```python\nget_obj_names()\n`", "```python\nget_obj_names()\n```\n", ">>> get_obj_names()\n>>> ",
    "for o in objs:\n    say(o)\n'", "for o in objs:\n    say(o)\n\n'", "if x:\n    a()\nelsewhere",
    "<think>\nhm\n</think>\nSure, here it is:\nget_obj_names()\nThat lists them.",
])
def test_complete(text):
    assert first_statement_complete(text)
