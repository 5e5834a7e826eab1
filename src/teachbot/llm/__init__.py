"""The LLM layer: one ``Model`` interface, three backends (OpenAI-compatible HTTP, local transformers, scripted).

ROS-free. ``model_from_config(load_llm_config(), role)`` builds the backend that config/llm.yaml names
for a role; ``TransformersModel`` imports transformers and torch only when built, and ``OpenAIModel`` (which
needs the ``openai`` package to import) is loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from teachbot.llm.base import DEFAULT_STOP, Completion, CompletionListener, LLMError, Model, estimate_tokens, prompt_digest, trim_at_stop
from teachbot.llm.factory import BACKENDS, ROLES, load_llm_config, model_from_config, role_settings
from teachbot.llm.scripted import ScriptedModel
from teachbot.llm.transformers_model import TransformersModel

if TYPE_CHECKING:
    from teachbot.llm.openai_model import OpenAIModel

__all__ = [
    "BACKENDS",
    "DEFAULT_STOP",
    "ROLES",
    "Completion",
    "CompletionListener",
    "LLMError",
    "Model",
    "OpenAIModel",
    "ScriptedModel",
    "TransformersModel",
    "estimate_tokens",
    "load_llm_config",
    "model_from_config",
    "prompt_digest",
    "role_settings",
    "trim_at_stop",
]


def __getattr__(name: str) -> object:
    """Lazy access to the backend that pulls in ``openai``."""
    if name == "OpenAIModel":
        from teachbot.llm.openai_model import OpenAIModel  # deferred: openai

        return OpenAIModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
