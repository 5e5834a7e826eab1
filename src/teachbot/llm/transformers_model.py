"""Local generation with Hugging Face ``transformers``; weights come from a local directory only.

Greedy decoding when the temperature is 0 (the default), sampling otherwise. Generation stops as soon
as the decoded continuation contains a stop string, and the text is cut before it. ``transformers``
and ``torch`` are imported when a model is built, so the rest of the LLM layer works without them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from teachbot.llm.base import DEFAULT_STOP, Completion, CompletionListener, LLMError, RecordingModel, prompt_digest, trim_at_stop


@lru_cache(maxsize=2)
def _load(path: str, device: str, dtype: str) -> tuple[Any, Any]:
    """Tokenizer and model from ``path``, shared by the roles that name the same weights."""
    import torch  # deferred: torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # deferred: transformers

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch_dtype)
    model.to(device).eval()
    return tokenizer, model


def _stop_criteria(tokenizer: Any, stops: Sequence[str], prompt_len: int) -> Any:
    """StoppingCriteriaList that ends generation once the decoded continuation contains a stop string."""
    import torch  # deferred: torch
    from transformers import StoppingCriteria, StoppingCriteriaList  # deferred: transformers

    class StopOnStrings(StoppingCriteria):
        def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
            done = [any(s in tokenizer.decode(row[prompt_len:], skip_special_tokens=True) for s in stops) for row in input_ids]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StopOnStrings()])


class TransformersModel(RecordingModel):
    """``Model`` over AutoModelForCausalLM + AutoTokenizer loaded from ``model_path`` (no downloads)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
        stop: Sequence[str] = DEFAULT_STOP,
        device: str = "cpu",
        dtype: str = "auto",
        name: str = "",
        config_key: str = "model_path",
        history_size: int = 100,
        on_completion: CompletionListener | None = None,
    ) -> None:
        path = Path(model_path).expanduser()
        if not str(model_path) or not path.is_dir():
            shown = str(model_path) or "(empty)"
            raise LLMError(f"{config_key}: no model directory at {shown!r}; set it to a local save_pretrained() folder")
        super().__init__(name or path.name, history_size=history_size, on_completion=on_completion)
        self.model_path, self.device = path, device
        self.temperature, self.max_tokens, self.stop = temperature, max_tokens, tuple(stop)
        try:
            self._tokenizer, self._model = _load(str(path.resolve()), device, dtype)
        except (OSError, ValueError) as exc:
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise LLMError(f"{config_key}: cannot load a causal LM from {path} ({reason}); check its config and tokenizer files") from None
        self._lock = threading.Lock()

    @property
    def context_length(self) -> int | None:
        cfg = self._model.config
        return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)

    def generate(
        self,
        prompt: str,
        stop: Sequence[str] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        until: Callable[[str], bool] | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Complete ``prompt`` locally; ``None`` arguments take the configured values."""
        import torch  # deferred: torch

        stops, temp, limit = self._sampling(stop, temperature, max_tokens)
        start = time.monotonic()
        inputs = self._tokenizer(prompt, return_tensors="pt").to(self.device)
        prompt_len = int(inputs["input_ids"].shape[1])
        context = self.context_length
        if context and prompt_len + limit > context:
            raise LLMError(
                f"prompt has {prompt_len} tokens and max_tokens is {limit}, but {self.name} takes {context}; "
                "retrieve fewer examples or lower max_tokens"
            )
        kwargs: dict[str, Any] = {"max_new_tokens": limit, "do_sample": temp > 0}
        if temp > 0:
            kwargs["temperature"] = temp
        if stops:
            kwargs["stopping_criteria"] = _stop_criteria(self._tokenizer, stops, prompt_len)
        pad = self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else self._tokenizer.eos_token_id
        with self._lock, torch.inference_mode():
            output = self._model.generate(**inputs, pad_token_id=pad, **kwargs)
        new_tokens = output[0, prompt_len:]
        text, cut = trim_at_stop(self._tokenizer.decode(new_tokens, skip_special_tokens=True), stops)
        eos = self._tokenizer.eos_token_id
        finish = "stop" if cut or (eos is not None and len(new_tokens) and int(new_tokens[-1]) == eos) else "length"
        completion = Completion(
            text=text,
            model=self.name,
            prompt_digest=prompt_digest(prompt),
            prompt_tokens=prompt_len,
            completion_tokens=int(new_tokens.shape[0]),
            latency=time.monotonic() - start,
            finish_reason=finish,
        )
        return self._record(completion, prompt)
