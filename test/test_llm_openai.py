"""OpenAIModel with the real ``openai`` client against test/fake_openai_server.py (127.0.0.1, offline)."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import time

import pytest

pytest.importorskip("openai")

from fake_openai_server import FakeOpenAIServer, pieces  # noqa: E402

from teachbot.errors import ConfigError  # noqa: E402
from teachbot.llm import Completion, LLMError, Model, load_llm_config, model_from_config, role_settings  # noqa: E402
from teachbot.llm.base import SYSTEM_END, plain_prompt  # noqa: E402
from teachbot.llm.capabilities import REGISTRY, Capabilities, diagnose  # noqa: E402
from teachbot.llm.openai_model import OpenAIModel, is_local_url  # noqa: E402

PROMPT = "objects = ['red block', 'blue bowl']\n>>> "
SYSTEM = "You control a robot arm through a Python console.\nfrom robot import get_obj_names"
CONSOLE = f"{SYSTEM}{SYSTEM_END}{PROMPT}"
MODES = ["chat", "completions"]


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def fresh_capabilities():
    """Each test learns about its endpoints from scratch."""
    REGISTRY.clear()
    yield
    REGISTRY.clear()


@pytest.fixture
def warnings_(caplog):
    """The warning lines of the ``teachbot.llm`` logger."""
    caplog.set_level(logging.WARNING, logger="teachbot.llm")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "teachbot.llm" and r.levelno >= logging.WARNING]


def make(server: FakeOpenAIServer, mode: str = "chat", **kwargs) -> tuple[OpenAIModel, list[float]]:
    """A model on the fake server with fast, recorded backoff sleeps."""
    sleeps: list[float] = []
    options = {"retries": 2, "backoff_base": 0.01, "backoff_max": 0.05, "timeout": 5.0, **kwargs}
    model = OpenAIModel("fake-model", mode=mode, base_url=server.base_url, sleep=sleeps.append, rng=random.Random(0), **options)
    return model, sleeps


@pytest.mark.parametrize("mode", MODES)
def test_stop_usage_digest_and_history(server, mode):
    seen: list[tuple[Completion, str]] = []
    model, _ = make(server, mode, on_completion=lambda c, p: seen.append((c, p)))
    assert isinstance(model, Model)
    c = model.generate(PROMPT)
    assert c.text == " get_obj_names()\n"
    assert ">>>" not in c.text and c.finish_reason == "stop"
    assert c.prompt_digest == hashlib.sha256(PROMPT.encode()).hexdigest()
    assert (c.prompt_tokens, c.completion_tokens) == (len(PROMPT) // 4, 5)  # the server's usage: " get" "_obj" "_nam" "es()" "\n"
    assert c.attempts == 1 and c.latency > 0 and c.model == "fake-model"
    assert server.requests[0]["stop"] == [">>>"]
    assert server.paths == ["/v1/chat/completions" if mode == "chat" else "/v1/completions"]
    if mode == "chat":
        assert server.requests[0]["messages"] == [{"role": "user", "content": PROMPT}]
    else:
        assert server.requests[0]["prompt"] == PROMPT
    assert list(model.history) == [c] and seen == [(c, PROMPT)]


@pytest.mark.parametrize("mode", MODES)
def test_stop_trimmed_client_side_when_server_ignores_it(server, mode):
    model, _ = make(server, mode)
    server.script("ignore_stop")
    c = model.generate(PROMPT)
    assert c.text == " get_obj_names()\n" and c.finish_reason == "stop"


def test_explicit_stop_and_no_stop(server):
    server.answer = " x = 1\n# done\n>>> y"
    model, _ = make(server, "completions")
    assert model.generate(PROMPT, stop=["#", ">>>"]).text == " x = 1\n"
    assert server.requests[-1]["stop"] == ["#", ">>>"]
    assert model.generate(PROMPT, stop=[]).text == server.answer
    assert "stop" not in server.requests[-1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("failure", ["429", "500", "delay:1.0"])
def test_retried_then_succeeds(server, mode, failure):
    model, sleeps = make(server, mode, timeout=0.3)
    server.script(failure, "ok")
    c = model.generate(PROMPT)
    assert c.text == " get_obj_names()\n"
    assert c.attempts == 2 and len(server.requests) == 2
    assert len(sleeps) == 1 and 0.005 <= sleeps[0] <= 0.01  # equal jitter on backoff_base
    if failure.startswith("delay"):
        assert c.latency >= 0.3  # wall time includes the timed-out attempt


def test_retries_are_bounded_and_back_off(server):
    model, sleeps = make(server, "chat", retries=3)
    server.script("500", "429", "500", "429", "ok")
    with pytest.raises(LLMError, match=r"still failing after 4 attempts \(last: HTTP 429\)") as info:
        model.generate(PROMPT)
    assert info.value.attempts == 4 and len(server.requests) == 4
    assert len(sleeps) == 3 and sleeps[0] <= sleeps[1] and all(s <= 0.05 for s in sleeps)


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps: list[float] = []
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", retries=2, backoff_base=0.01, sleep=sleeps.append)
    with pytest.raises(LLMError, match="after 3 attempts .*connection failed"):
        model.generate(PROMPT)
    assert len(sleeps) == 2


@pytest.mark.parametrize("mode", MODES)
def test_malformed_json_is_one_clear_error(server, mode):
    model, sleeps = make(server, mode)
    server.script("malformed", "malformed", "malformed")
    with pytest.raises(LLMError, match=r"returned malformed JSON .*; check that it speaks the OpenAI API") as info:
        model.generate(PROMPT)
    assert server.base_url in str(info.value) and "\n" not in str(info.value)
    assert len(server.requests) == 1 and sleeps == []


def test_client_errors_are_not_retried(server):
    model, _ = make(server, "chat")
    server.script("401")
    with pytest.raises(LLMError, match="HTTP 401 .*check the API key"):
        model.generate(PROMPT)
    server.script("404")
    with pytest.raises(LLMError, match="HTTP 404 .*check 'model' \\('fake-model'\\)"):
        model.generate(PROMPT)
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", MODES)
def test_empty_completion_retried_with_higher_temperature(server, mode):
    model, _ = make(server, mode)
    server.script("empty", "ok")
    c = model.generate(PROMPT)
    assert c.text == " get_obj_names()\n" and c.attempts == 2
    assert server.temperatures() == [0.0, 0.1]


def test_empty_completion_gives_up_after_empty_retries(server):
    model, _ = make(server, "completions", empty_retries=2)
    server.script("empty", "empty", "empty", "ok")
    c = model.generate(PROMPT, temperature=0.5)
    assert c.text == "" and c.attempts == 3
    assert server.temperatures() == [0.5, 0.6, 0.7]


def test_retries_inside_empty_retries_are_all_counted(server):
    model, _ = make(server, "chat")
    server.script("empty", "429", "ok")
    assert model.generate(PROMPT).attempts == 3


def test_usage_estimated_when_absent(server):
    model, _ = make(server, "completions")
    server.script("no_usage")
    c = model.generate(PROMPT)
    assert c.prompt_tokens == -(-len(PROMPT) // 4) and c.completion_tokens == -(-len(c.text) // 4)


def test_chat_system_split_and_max_tokens_param(server):
    model, _ = make(server, "chat", system_split="\n#### TRANSCRIPT\n", max_tokens_param="max_completion_tokens", max_tokens=64)
    model.generate("You are a robot.\n#### TRANSCRIPT\n>>> ")
    body = server.requests[0]
    assert body["messages"] == [{"role": "system", "content": "You are a robot."}, {"role": "user", "content": ">>> "}]
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body


def test_chat_sends_the_static_part_as_system_message(server):
    model, _ = make(server, "chat")
    c = model.generate(CONSOLE)
    assert server.requests[0]["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    assert c.prompt_digest == hashlib.sha256(CONSOLE.encode()).hexdigest()  # over the prompt as given, marker included
    model.generate(PROMPT)  # no marker: one user message
    assert server.requests[1]["messages"] == [{"role": "user", "content": PROMPT}]


def test_completions_mode_sends_the_plain_prompt(server):
    model, _ = make(server, "completions")
    c = model.generate(CONSOLE)
    assert server.requests[0]["prompt"] == plain_prompt(CONSOLE) == f"{SYSTEM}\n\n{PROMPT}"
    assert c.prompt_digest == hashlib.sha256(CONSOLE.encode()).hexdigest()


def test_custom_system_split_marker_still_works(server):
    model, _ = make(server, "chat", system_split="\n#### TRANSCRIPT\n")
    model.generate("static\n#### TRANSCRIPT\n>>> ")
    model.generate(CONSOLE)  # the custom marker is absent: SYSTEM_END splits
    assert [m["role"] for m in server.requests[0]["messages"]] == ["system", "user"]
    assert server.requests[1]["messages"][0] == {"role": "system", "content": SYSTEM}


# ------------------------------------------------------------------ capabilities learned from HTTP 400
LEARNED = {  # refused parameter -> (what the retry sends instead, the config line the warning names)
    "stop": (lambda body: "stop" not in body, "stop_supported: false"),
    "temperature": (lambda body: "temperature" not in body, "temperature_supported: false"),
    "max_tokens": (lambda body: "max_tokens" not in body and body["max_completion_tokens"] == 256,
                   "max_tokens_param: max_completion_tokens"),
}


@pytest.mark.parametrize("refused", sorted(LEARNED))
def test_refused_parameter_is_dropped_once_and_remembered(server, warnings_, refused):
    server.refuse = {refused}
    model, sleeps = make(server, "chat")
    c = model.generate(CONSOLE)
    assert c.text == " get_obj_names()\n" and c.finish_reason == "stop"  # stop strings are still cut client-side
    assert len(server.requests) == 2 and c.attempts == 2 and sleeps == []  # exactly one retry, at once
    resent, hint = LEARNED[refused]
    assert not resent(server.requests[0]) and resent(server.requests[1])
    assert len(warnings_()) == 1 and hint in warnings_()[0] and refused in warnings_()[0] and "config/llm.yaml" in warnings_()[0]
    model.generate(CONSOLE)  # the next call does not ask again ...
    other, _ = make(server, "chat")  # ... nor does another model of the same endpoint (another role)
    assert other.generate(CONSOLE).attempts == 1
    assert len(server.requests) == 4 and all(resent(body) for body in server.requests[2:])
    assert len(warnings_()) == 1


def test_400_step_behaviours_are_one_shot(server, warnings_):
    model, _ = make(server, "chat", max_tokens_param="max_tokens")
    server.script("400_stop")
    assert model.generate(PROMPT).attempts == 2 and "stop" not in server.requests[1]
    server.script("400_temperature")
    assert model.generate(PROMPT, temperature=0.7).attempts == 2 and "temperature" not in server.requests[3]
    assert len(warnings_()) == 2


def test_reasoning_model_refusing_stop_and_temperature(server, warnings_):
    server.refuse = {"stop", "temperature", "max_tokens"}
    model, _ = make(server, "chat")
    c = model.generate(CONSOLE)
    assert c.text == " get_obj_names()\n" and c.attempts == 4 and len(warnings_()) == 3
    last = server.requests[-1]
    assert "stop" not in last and "temperature" not in last and last["max_completion_tokens"] == 256
    learned = REGISTRY.learned((server.base_url, "fake-model"))
    assert learned == {"stop_supported": False, "temperature_supported": False, "max_tokens_param": "max_completion_tokens"}


def test_configured_capabilities_send_nothing_forbidden(server, warnings_):
    server.refuse = {"stop", "temperature", "max_tokens"}
    model, _ = make(server, "chat", stop_supported=False, temperature_supported=False, max_tokens_param="max_completion_tokens")
    c = model.generate(CONSOLE, stop=["#", ">>>"])
    assert c.attempts == 1 and len(server.requests) == 1 and warnings_() == []
    body = server.requests[0]
    assert not {"stop", "temperature", "max_tokens"} & body.keys() and body["max_completion_tokens"] == 256


def test_at_most_max_stop_stop_strings_are_sent(server):
    server.answer = " x = 1\n# c\n>>> y"
    model, _ = make(server, "completions", max_stop=2)
    c = model.generate(PROMPT, stop=["zz", "yy", "#", ">>>"])
    assert server.requests[0]["stop"] == ["zz", "yy"] and c.text == " x = 1\n" and c.finish_reason == "stop"


def test_reasoning_effort_and_budget_are_sent(server):
    model, _ = make(server, "chat", reasoning_effort="low", reasoning_budget=1000, max_tokens=64, max_tokens_param="max_completion_tokens")
    model.generate(PROMPT)
    body = server.requests[0]
    assert body["reasoning_effort"] == "low" and body["max_completion_tokens"] == 1064
    plain, _ = make(server, "completions", reasoning_effort="low", max_tokens=64)  # chat only: /v1/completions has no such field
    plain.generate(PROMPT)
    assert "reasoning_effort" not in server.requests[1] and server.requests[1]["max_tokens"] == 64


def test_refused_reasoning_effort_is_dropped(server, warnings_):
    server.refuse = {"reasoning_effort"}
    model, _ = make(server, "chat", reasoning_effort="high")
    assert model.generate(PROMPT).attempts == 2
    assert "reasoning_effort" not in server.requests[1] and 'reasoning_effort: ""' in warnings_()[0]


def test_a_400_naming_nothing_droppable_is_a_clear_error(server, warnings_):
    model, sleeps = make(server, "chat")
    server.script("400")
    with pytest.raises(LLMError, match=r"HTTP 400 \(This model's maximum context length is 8192 tokens.*shorter transcript") as info:
        model.generate(PROMPT)
    assert info.value.attempts == 1 and len(server.requests) == 1 and sleeps == [] and warnings_() == []
    assert "\n" not in str(info.value) and "Error code" not in str(info.value)


def test_a_parameter_refused_again_is_an_error_not_a_loop(server):
    server.refuse = {"max_tokens", "max_completion_tokens"}
    model, _ = make(server, "chat")
    with pytest.raises(LLMError, match="refused 'max_completion_tokens'.*max_tokens_param"):
        model.generate(PROMPT)
    assert len(server.requests) == 2


def test_diagnose_reads_openai_wording():
    caps = Capabilities()
    sent = {"model": "o4-mini", "stop": [">>>"], "temperature": 0.0, "max_tokens": 256}
    stop = diagnose("Unsupported parameter: 'stop' is not supported with this model.", None, sent, caps)
    assert stop is not None and stop.changes == {"stop_supported": False}
    temp = diagnose("Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.",
                    "temperature", sent, caps)
    assert temp is not None and temp.changes == {"temperature_supported": False}
    limit = diagnose("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                     "max_tokens", sent, caps)
    assert limit is not None and limit.changes == {"max_tokens_param": "max_completion_tokens"}
    many = {**sent, "stop": ["a", "b", "c", "d", "e"]}
    short = diagnose("Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length 5 instead.",
                     "stop", many, caps)
    assert short is not None and short.changes == {"max_stop": 4}
    azure = diagnose("Unrecognized request argument supplied: reasoning_effort", None, {**sent, "reasoning_effort": "low"}, caps)
    assert azure is not None and azure.changes == {"reasoning_effort": ""}
    too_large = "max_tokens is too large: 100000. This model supports at most 16384 completion tokens"
    assert diagnose(too_large, "max_tokens", sent, caps) is None  # a value to fix, not a parameter to drop
    assert diagnose("Unsupported parameter: 'top_p' is not supported with this model.", "top_p", sent, caps) is None  # not sent


# ------------------------------------------------------------------ usage
def test_cached_and_reasoning_tokens_are_read(server):
    server.cached_prefix = True
    model, _ = make(server, "chat")
    first = model.generate(CONSOLE)
    second = model.generate(CONSOLE + " get_obj_names()\n['red block']\n>>> ")
    assert first.cached_tokens == 0
    assert second.cached_tokens == (len("<system>" + SYSTEM + "<user>" + PROMPT)) // 4 and second.cached_tokens <= second.prompt_tokens
    server.reasoning = "The user wants the object names, so I call get_obj_names."
    third = model.generate(PROMPT)
    assert third.completion_tokens == len(pieces(third.text)) + len(pieces(server.reasoning))  # reasoning tokens are billed output


# ------------------------------------------------------------------ streaming
STYLES = {  # answers as real models write them: each must give the same text streamed or not
    "base": " get_obj_names()\n['red block', 'blue bowl']\n>>> put_first_on_second('red block', 'blue bowl')\n",
    "fenced": " ```python\nget_obj_names()\n```\nThis lists the objects.\n>>> more",
    "prose": "Sure! I will first look at the table.\n get_obj_names()\n>>>",
    "think": "<think>The user wants names.</think>\n get_obj_names()\n>>> done()",
    "no_stop": " say('hello')",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("style", sorted(STYLES))
def test_streaming_returns_the_same_text_as_a_whole_reply(server, mode, style):
    server.answer = STYLES[style]
    whole, _ = make(server, mode)
    streamed, _ = make(server, mode, stream=True)
    a, b = whole.generate(CONSOLE), streamed.generate(CONSOLE)
    assert b.text == a.text and b.finish_reason == a.finish_reason and b.attempts == 1
    body = server.requests[1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True} and "stream" not in server.requests[0]
    assert b.completion_tokens == len(pieces(a.text))  # the server's usage chunk
    assert b.prompt_tokens == a.prompt_tokens


def test_stop_string_cut_while_streaming_when_the_server_ignores_it(server):
    server.answer = STYLES["base"] + "x = 1\n" * 40
    server.token_delay = 0.005
    model, _ = make(server, "chat", stream=True)
    server.script("ignore_stop")
    c = model.generate(PROMPT)
    assert c.text == " get_obj_names()\n['red block', 'blue bowl']\n" and c.finish_reason == "stop"
    assert c.completion_tokens < len(pieces(server.answer)) // 2  # counted chunks: no usage chunk came


def test_until_closes_the_stream_early(server):
    server.answer = " get_obj_names()\n" + "['red block', 'blue bowl', 'green cup', 'yellow plate']\n" * 6
    server.token_delay = 0.01
    model, _ = make(server, "chat", stream=True)
    c = model.generate(PROMPT, until=lambda text: "\n" in text)
    total = len(pieces(server.answer))
    assert c.finish_reason == "early" and c.text.startswith(" get_obj_names()\n")
    assert c.completion_tokens == len(pieces(c.text)) < total // 4  # chunks received, about one token each
    time.sleep(0.15)  # the server notices the hang-up at its next write or two
    sent = server.chunks_sent
    time.sleep(0.1)
    assert server.chunks_sent == sent < total // 3  # it stopped generating


def test_an_error_in_until_is_the_callers_not_the_endpoints(server):
    model, _ = make(server, "chat", stream=True)

    def broken(text: str) -> bool:
        raise ValueError("bug in the caller")

    with pytest.raises(ValueError, match="bug in the caller"):
        model.generate(PROMPT, until=broken)
    assert len(server.requests) == 1


def test_reasoning_chunks_count_as_generated_tokens(server):
    server.reasoning = "I should list the objects first."
    model, _ = make(server, "chat", stream=True)
    c = model.generate(PROMPT, until=lambda text: text.endswith("\n"))
    assert c.text == " get_obj_names()\n" and c.finish_reason == "early"
    assert c.completion_tokens == len(pieces(server.reasoning)) + len(pieces(c.text))


def test_stream_options_refused_falls_back_to_chunk_counts(server, warnings_):
    server.refuse = {"stream_options"}
    model, _ = make(server, "completions", stream=True)
    c = model.generate(PROMPT)
    assert c.attempts == 2 and "stream_options" not in server.requests[1] and server.requests[1]["stream"] is True
    assert c.text == " get_obj_names()\n" and c.completion_tokens == len(pieces(c.text)) and len(warnings_()) == 1


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_mid_reply_returns_what_arrived(server, mode):
    server.answer = " x = get_obj_names()\n" + "['red block', 'blue bowl']\n" * 4
    model, sleeps = make(server, mode, stream=True)
    server.script("stream_cut")
    c = model.generate(PROMPT)
    assert c.finish_reason == "interrupted" and c.attempts == 1 and sleeps == []
    assert c.text and server.answer.startswith(c.text) and len(c.text) < len(server.answer)


def test_stream_cut_before_anything_usable_is_retried(server):
    server.reasoning = "Let me think about which objects are on the table, and which one is red. " * 3
    model, sleeps = make(server, "chat", stream=True)
    server.script("stream_cut", "ok")
    c = model.generate(PROMPT)
    assert c.text == " get_obj_names()\n" and c.finish_reason == "stop" and c.attempts == 2 and len(sleeps) == 1


# ------------------------------------------------------------------ the caller's deadline
def test_timeout_bounds_the_whole_call(server):
    model, sleeps = make(server, "chat", timeout=5.0, retries=3)
    server.script("delay:2.0", "delay:2.0", "delay:2.0")
    start = time.monotonic()
    with pytest.raises(LLMError, match="deadline passed after 1 attempts .*timed out after 0.4 s"):
        model.generate(PROMPT, timeout=0.4)
    assert time.monotonic() - start < 1.0 and len(server.requests) == 1 and sleeps == []


def test_no_retry_starts_past_the_deadline(server):
    model, sleeps = make(server, "chat", backoff_base=5.0, backoff_max=5.0)
    server.script("500", "ok")
    with pytest.raises(LLMError, match=r"deadline passed after 1 attempts \(last: HTTP 500\)"):
        model.generate(PROMPT, timeout=1.0)
    assert len(server.requests) == 1 and sleeps == []
    assert model.generate(PROMPT, timeout=30.0).text == " get_obj_names()\n"  # time enough: as without a deadline


def test_timeout_bounds_a_stream_waiting_for_its_first_token(server):
    server.first_token_delay = 2.0
    model, _ = make(server, "chat", stream=True, timeout=5.0)
    start = time.monotonic()
    with pytest.raises(LLMError, match="deadline passed"):
        model.generate(PROMPT, timeout=0.4)
    assert time.monotonic() - start < 1.0


def test_config_types_of_the_capability_keys():
    raw = {"llm": {"defaults": {"model": "m", "stream": True, "max_stop": 2, "reasoning_effort": "low", "reasoning_budget": 512,
                                "stop_supported": False, "temperature_supported": False}}}
    settings = role_settings(raw, "interaction")
    assert settings["stream"] is True and settings["max_stop"] == 2
    for key, bad in [("stream", "yes"), ("max_stop", True), ("stop_supported", 0), ("reasoning_budget", 1.5)]:
        with pytest.raises(ConfigError, match=f"'llm.defaults.{key}' must be"):
            role_settings({"llm": {"defaults": {key: bad}}}, "interaction")
    model = model_from_config({"llm": {"defaults": {**raw["llm"]["defaults"], "base_url": "http://127.0.0.1:9/v1"}}}, "interaction")
    assert model.capabilities == Capabilities(stop_supported=False, max_stop=2, temperature_supported=False,
                                              reasoning_effort="low", reasoning_budget=512, stream=True)
    scripted = model_from_config({"llm": {"defaults": {**raw["llm"]["defaults"], "backend": "scripted"}}}, "interaction")
    assert type(scripted).__name__ == "ScriptedModel"  # the other backends ignore the endpoint's keys


def test_api_key_rules(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMError, match="no API key for https://api.openai.com/v1: set the environment variable OPENAI_API_KEY"):
        OpenAIModel("gpt-4o-mini")
    with pytest.raises(LLMError, match="MY_KEY"):
        OpenAIModel("m", base_url="https://llm.example.com/v1", api_key_env="MY_KEY")
    OpenAIModel("m", base_url="http://127.0.0.1:8000/v1")  # local servers take any key
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    assert OpenAIModel("m").base_url == "http://localhost:11434/v1"
    assert is_local_url("http://192.168.1.5:8000/v1") and not is_local_url("https://api.openai.com/v1")


def test_backoff_is_exponential_jittered_and_capped():
    model = OpenAIModel("m", base_url="http://127.0.0.1:1/v1", backoff_base=1.0, backoff_max=5.0, rng=random.Random(1))
    for attempt, nominal in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)]:
        assert nominal / 2 <= model._backoff(attempt, None) <= nominal
    assert model._backoff(1, 3.0) == 3.0 and model._backoff(1, 60.0) == 5.0  # Retry-After, capped


def test_config_roles_against_fake_server(server):
    raw = load_llm_config()
    raw["llm"]["defaults"].update(base_url=server.base_url, mode="completions", backoff_base=0.01)
    interaction = model_from_config(raw, "interaction")
    improvement = model_from_config(raw, "improvement")
    assert interaction.generate(PROMPT).text == " get_obj_names()\n"
    assert improvement.generate(PROMPT).text == server.answer  # improvement writes whole transcripts: no stop
    assert server.requests[0]["temperature"] == 0.0 and server.requests[0]["stop"] == [">>>"]
    assert "stop" not in server.requests[1] and server.requests[1]["max_tokens"] == 2048
    assert server.requests[0]["stream"] is True and "stream" not in server.requests[1]  # the console role streams
    assert interaction.name == "interaction:gpt-4o-mini"


@pytest.mark.skipif(not os.environ.get("TEACHBOT_LLM_BASE_URL"), reason="set TEACHBOT_LLM_BASE_URL (and _MODEL, _MODE) for a real endpoint")
def test_real_endpoint_once():
    model = OpenAIModel(
        os.environ.get("TEACHBOT_LLM_MODEL", "gpt-4o-mini"),
        mode=os.environ.get("TEACHBOT_LLM_MODE", "chat"),
        base_url=os.environ["TEACHBOT_LLM_BASE_URL"],
        max_tokens=32,
        timeout=60.0,
        retries=1,
    )
    c = model.generate("Continue this Python console session with one statement.\n>>> print('hello')\nhello\n>>> ")
    assert ">>>" not in c.text and c.completion_tokens > 0 and c.prompt_tokens > 0
