"""ScriptedModel (scripts, callables, replay by prompt digest) and the config/llm.yaml factory."""

from __future__ import annotations

import json

import pytest

from teachbot.errors import ConfigError
from teachbot.llm import (
    ROLES,
    Completion,
    LLMError,
    Model,
    ScriptedModel,
    load_llm_config,
    model_from_config,
    prompt_digest,
    role_settings,
    trim_at_stop,
)


def test_prompt_digest_is_sha256_of_utf8():
    assert prompt_digest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert prompt_digest("bowl ü") != prompt_digest("bowl u") and len(prompt_digest("x")) == 64


def test_trim_at_stop_cuts_at_the_earliest():
    assert trim_at_stop("a\n... b\n>>> c", [">>>", "..."]) == ("a\n", True)
    assert trim_at_stop("abc", [">>>", ""]) == ("abc", False)


def test_completions_in_order_prompts_recorded_and_stop_trimmed():
    seen: list[tuple[Completion, str]] = []
    model = ScriptedModel([" get_obj_names()\n>>> extra", " say('hi')\n"], on_completion=lambda c, p: seen.append((c, p)))
    assert isinstance(model, Model)
    first = model.generate("p1")
    second = model.generate("p2", stop=[])
    assert (first.text, second.text) == (" get_obj_names()\n", " say('hi')\n")
    assert first.prompt_digest == prompt_digest("p1") and first.completion_tokens > 0 and first.prompt_tokens == 1
    assert model.prompts == ["p1", "p2"] and list(model.history) == [first, second] and [p for _, p in seen] == ["p1", "p2"]


def test_exhausted_is_a_clear_error():
    model = ScriptedModel(["a"])
    model.generate("p")
    with pytest.raises(LLMError, match=r"^scripted model exhausted after 1 completions; the session asked for more$"):
        model.generate("q")
    model.push("b")
    assert model.generate("r").text == "b"


def test_callable_responder():
    model = ScriptedModel(respond=lambda prompt: f" echo({len(prompt)})\n>>> ")
    assert model.generate("abc").text == " echo(3)\n"


def test_replay_by_digest_in_order_and_misses_name_the_digest():
    prompt = ">>> wait_for_trigger()\n"
    model = ScriptedModel(replay={prompt_digest(prompt): ["first", "second"], prompt_digest("other"): "x"})
    assert model.generate("other").text == "x"
    assert [model.generate(prompt).text for _ in range(2)] == ["first", "second"]
    with pytest.raises(LLMError, match=f"prompt digest {prompt_digest(prompt)}: it was already replayed"):
        model.generate(prompt)
    with pytest.raises(LLMError, match=f"prompt digest {prompt_digest('new')}: it is not in the recording"):
        model.generate("new")


def test_replay_falls_back_to_the_script():
    model = ScriptedModel(["fallback"], replay={prompt_digest("a"): "recorded"})
    assert [model.generate(p).text for p in ("a", "b")] == ["recorded", "fallback"]


def test_from_records(tmp_path):
    path = tmp_path / "session.jsonl"
    records = [{"prompt_digest": prompt_digest("p"), "text": " go()\n", "model": "gpt"}, {"prompt_digest": prompt_digest("q"), "text": ""}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    model = ScriptedModel.from_records(path)
    assert model.generate("q").text == "" and model.generate("p").text == " go()\n"
    path.write_text('{"text": "no digest"}\n')
    with pytest.raises(LLMError, match="line 1: expected a JSON object with 'prompt_digest' and 'text'"):
        ScriptedModel.from_records(path)
    with pytest.raises(LLMError, match="cannot read LLM replay file"):
        ScriptedModel.from_records(tmp_path / "missing.jsonl")


def test_shipped_config_has_every_role():
    raw = load_llm_config()
    for role in ROLES:
        settings = role_settings(raw, role)
        assert settings["backend"] == "openai"
    assert role_settings(raw, "interaction")["temperature"] == 0.0
    assert role_settings(raw, "interaction")["stop"] == [">>>"]
    assert role_settings(raw, "improvement")["stop"] == []


def test_factory_scripted_backend_with_role_override(tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"prompt_digest": prompt_digest("p"), "text": "replayed"}) + "\n")
    raw = {
        "llm": {
            "defaults": {"backend": "scripted", "completions": ["a >>> b"]},
            "roles": {"interaction": {}, "improvement": {"replay": str(replay), "stop": []}},
        }
    }
    interaction = model_from_config(raw, "interaction")
    assert interaction.generate("x").text == "a " and interaction.name == "interaction:scripted"
    assert model_from_config(raw, "improvement").generate("p").text == "replayed"
    assert model_from_config(raw, "function_generation").generate("x").text == "a "  # a known role without overrides


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"llm": {"defaults": {"temprature": 0}}}, "unknown key 'llm.defaults.temprature'"),
        ({"llm": {"defaults": {}, "roles": {"interaction": {"max_tokens": "many"}}}}, "'llm.roles.interaction.max_tokens' must be int"),
        ({"llm": {"defaults": {"temperature": True}}}, "'llm.defaults.temperature' must be a number"),
        ({"llm": {"defaults": {"backend": "gpt"}}}, "backend must be one of openai, transformers, scripted"),
        ({"llm": {"defaults": {"backend": "openai", "model": ""}}}, "set 'model' for LLM role 'interaction'"),
        ({"llm": ["not", "a", "mapping"]}, "'llm' must be a mapping"),
    ],
)
def test_config_errors_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model_from_config(raw, "interaction")


def test_unknown_role():
    with pytest.raises(ConfigError, match="no LLM role 'planner'; roles: function_generation, improvement, interaction"):
        model_from_config({"llm": {"defaults": {"backend": "scripted"}}}, "planner")
