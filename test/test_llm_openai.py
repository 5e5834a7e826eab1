"""OpenAIModel with the real ``openai`` client against test/fake_openai_server.py (127.0.0.1, offline)."""

from __future__ import annotations

import hashlib
import os
import random
import socket

import pytest

pytest.importorskip("openai")

from fake_openai_server import FakeOpenAIServer  # noqa: E402

from teachbot.llm import Completion, LLMError, Model, load_llm_config, model_from_config  # noqa: E402
from teachbot.llm.openai_model import OpenAIModel, is_local_url  # noqa: E402

PROMPT = "objects = ['red block', 'blue bowl']\n>>> "
MODES = ["chat", "completions"]


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


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
    assert (c.prompt_tokens, c.completion_tokens) == (len(PROMPT) // 4, 1)  # the server's usage, not an estimate
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
