"""TransformersModel on a tiny GPT-2 built offline: a BPE tokenizer trained here and 2 layers of 32 units,
overfitted for a few seconds on one console transcript so greedy decoding is predictable."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from teachbot.llm import LLMError, Model, model_from_config, prompt_digest  # noqa: E402
from teachbot.llm.transformers_model import TransformersModel  # noqa: E402

TRANSCRIPT = ">>> get_obj_names()\n['red block', 'blue bowl']\n>>> say('done')\n"
EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TRANSCRIPT] * 10, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS)

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    ids = torch.tensor([tokenizer(TRANSCRIPT * 3)["input_ids"]])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1, "the tiny model did not learn its transcript"

    path = tmp_path_factory.mktemp("tiny_gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_load_from_path_and_generate_until_stop(tiny_model_dir):
    model = TransformersModel(tiny_model_dir, max_tokens=40)
    assert isinstance(model, Model)
    prompt = TRANSCRIPT + ">>> get_obj_names()\n"
    c = model.generate(prompt)
    assert c.text == "['red block', 'blue bowl']\n"  # stopped at the next '>>>', which is trimmed
    assert c.finish_reason == "stop" and c.completion_tokens < 40
    assert c.prompt_tokens == len(model._tokenizer(prompt)["input_ids"]) and c.prompt_digest == prompt_digest(prompt)
    assert c.latency > 0 and list(model.history) == [c]


def test_without_stop_runs_to_max_tokens(tiny_model_dir):
    model = TransformersModel(tiny_model_dir, max_tokens=12, stop=())
    c = model.generate(TRANSCRIPT)
    assert c.completion_tokens == 12 and c.finish_reason == "length"
    assert c.text.startswith(">>> get_obj_names()")  # the stop string survives when no stop is asked for


def test_custom_stop_and_sampling(tiny_model_dir):
    model = TransformersModel(tiny_model_dir, max_tokens=30)
    assert model.generate(TRANSCRIPT + ">>> get_obj_names()\n", stop=["blue"]).text == "['red block', '"
    sampled = model.generate(TRANSCRIPT, temperature=1.0, max_tokens=5, stop=[])
    assert 0 < sampled.completion_tokens <= 5


def test_prompt_longer_than_context_is_a_clear_error(tiny_model_dir):
    model = TransformersModel(tiny_model_dir, max_tokens=16)
    with pytest.raises(LLMError, match="tokens and max_tokens is 16, but .* takes 128; retrieve fewer examples"):
        model.generate(TRANSCRIPT * 20)


def test_missing_path_names_the_config_key(tmp_path):
    raw = {"llm": {"defaults": {"backend": "transformers", "model_path": str(tmp_path / "nope")}}}
    with pytest.raises(LLMError, match=r"config/llm.yaml: llm.defaults.model_path: no model directory at '.*nope'"):
        model_from_config(raw, "interaction")
    raw["llm"]["roles"] = {"improvement": {"model_path": ""}}
    with pytest.raises(LLMError, match=r"llm.roles.improvement.model_path: no model directory at '\(empty\)'"):
        model_from_config(raw, "improvement")


def test_folder_without_weights_is_a_clear_error(tmp_path):
    with pytest.raises(LLMError, match="model_path: cannot load a causal LM from"):
        TransformersModel(tmp_path)


def test_factory_builds_it(tiny_model_dir):
    raw = {"llm": {"defaults": {"backend": "transformers", "model_path": str(tiny_model_dir), "max_tokens": 40}}}
    model = model_from_config(raw, "function_generation")
    assert model.name == f"function_generation:{tiny_model_dir.name}"
    assert model.generate(TRANSCRIPT + ">>> get_obj_names()\n").text == "['red block', 'blue bowl']\n"
