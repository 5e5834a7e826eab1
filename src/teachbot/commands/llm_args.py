"""The LLM settings of the evaluation commands: config/llm.yaml with the --llm-* overrides, a refusal to call a
paid endpoint without --allow-paid, and a check that each endpoint answers before a run starts."""

from __future__ import annotations

import argparse
import os
from typing import Any

from teachbot.errors import ConfigError
from teachbot.llm.factory import load_llm_config, role_settings
from teachbot.nodes.nodeset import apply_llm_arguments


def llm_config(args: argparse.Namespace) -> dict[str, Any]:
    """config/llm.yaml (or --llm-config) with the --llm-model and --llm-base-url overrides."""
    raw = load_llm_config(args.llm_config or None)
    if args.llm_base_url or args.llm_model:
        raw = apply_llm_arguments(raw, "openai", args.llm_model, args.llm_base_url)
    return raw


def check_endpoint(raw: dict[str, Any], role: str = "interaction") -> str:
    """The ``role``'s endpoint answers (GET /models: no completion, nothing billed); returns its URL."""
    import openai  # deferred: openai

    from teachbot.llm.openai_model import OpenAIModel  # deferred: openai

    settings = role_settings(raw, role)
    if settings["backend"] != "openai":
        return settings["backend"]
    model = OpenAIModel(str(settings.get("model", "")), base_url=str(settings.get("base_url", "")),
                        api_key_env=str(settings.get("api_key_env", "OPENAI_API_KEY")), api_key=str(settings.get("api_key", "")))
    client = openai.OpenAI(base_url=model.base_url, api_key=model._client.api_key, timeout=10.0, max_retries=0)
    try:
        client.models.list()
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        raise ConfigError(f"cannot reach the LLM endpoint {model.base_url} ({type(exc).__name__}); check --llm-base-url "
                          "and that the server is running") from None
    except openai.APIStatusError as exc:
        if exc.status_code in (401, 403):
            raise ConfigError(f"the LLM endpoint {model.base_url} refused the API key (HTTP {exc.status_code}); "
                              "check OPENAI_API_KEY") from None
    return model.base_url


def paid_endpoints(raw: dict[str, Any], roles: tuple[str, ...]) -> list[str]:
    """'role at URL' for each role whose OpenAI-compatible endpoint is not local (it may bill the calls)."""
    from teachbot.llm.openai_model import DEFAULT_BASE_URL, is_local_url  # deferred: openai

    out = []
    for role in roles:
        settings = role_settings(raw, role)
        if settings["backend"] != "openai":
            continue
        url = str(settings.get("base_url") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        if not is_local_url(url):
            out.append(f"{role} at {url}")
    return out


def checked_llm_config(args: argparse.Namespace, roles: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """config/llm.yaml with the --llm-* overrides and a label for the report, once no role would call a paid
    endpoint without --allow-paid and every role's endpoint answers (nothing billed)."""
    raw = llm_config(args)
    paid = paid_endpoints(raw, roles)
    if paid and not args.allow_paid:
        raise ConfigError(f"the models would call a hosted endpoint ({'; '.join(paid)}), which may cost money; pass "
                          "--allow-paid to run it anyway, point --llm-base-url at a local server, or use --models doubles")
    for role in roles:
        check_endpoint(raw, role)
    settings = role_settings(raw, "interaction")
    return raw, f"config: {settings['backend']} {settings.get('model', '') or settings.get('model_path', '')}".strip()
