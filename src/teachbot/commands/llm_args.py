"""The LLM settings of the evaluation commands: config/llm.yaml with the --llm-* overrides, a refusal to call a
paid endpoint without --allow-paid, and a check that each endpoint answers before a run starts."""

from __future__ import annotations

import argparse
import copy
import dataclasses
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


# the roles an evaluation may give a model of their own, and the flag prefix of each (--improve-model, ...)
ROLE_FLAGS = {"improvement": "improve", "function_generation": "function", "person": "person"}


def add_role_arguments(parser: argparse.ArgumentParser) -> None:
    """--improve-model, --function-model, --person-model with a base URL and an API-key variable each: a role's own
    OpenAI-compatible model (the core paper used GPT-4 to improve even in its GPT-3.5 rows)."""
    for role, flag in ROLE_FLAGS.items():
        parser.add_argument(f"--{flag}-model", default="", metavar="NAME", help=f"the {role} role's model (default: as --llm-model)")
        parser.add_argument(f"--{flag}-base-url", default="", metavar="URL",
                            help=f"the {role} role's endpoint (default: as --llm-base-url)")
        parser.add_argument(f"--{flag}-api-key-env", default="", metavar="VAR", help=f"the variable holding the {role} role's API key")


def apply_role_arguments(raw: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``raw`` with each role given on the command line set to its own openai model (a new dict where one is set)."""
    out = raw
    for role, flag in ROLE_FLAGS.items():
        given = {key: getattr(args, f"{flag}_{attribute}", "") for key, attribute in
                 (("model", "model"), ("base_url", "base_url"), ("api_key_env", "api_key_env"))}
        given = {key: value for key, value in given.items() if value}
        if not given:
            continue
        if out is raw:
            out = copy.deepcopy(raw)
        section = out.setdefault("llm", {}) if "llm" in out or not out else out
        roles = section.setdefault("roles", {}) or {}
        section["roles"] = roles
        inherited = role_settings(out, "interaction") if role == "person" and role not in roles else {}
        base = {k: inherited[k] for k in ("model", "base_url", "api_key_env") if inherited.get(k)}
        roles[role] = {**base, **(roles.get(role) or {}), "backend": "openai", **given}
    return out


def configured_roles(raw: dict[str, Any]) -> dict[str, Any]:
    """The ``llm.roles`` section of a parsed config (the roles given settings of their own)."""
    return (raw.get("llm", raw) or {}).get("roles") or {}


def role_models(raw: dict[str, Any], roles: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """What answers each role (backend, model, base URL; the person: the interaction role's unless it has its own),
    for sweep.json and the report."""
    configured = configured_roles(raw)
    out = {}
    for role in roles:
        settings = role_settings(raw, role if role in configured or role != "person" else "interaction")
        out[role] = {"backend": str(settings["backend"]), "model": str(settings.get("model") or settings.get("model_path") or ""),
                     "base_url": str(settings.get("base_url", ""))}
    return out


def price_table(models: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The prices (USD per million tokens, config/prices.yaml) the report's costs use for these models."""
    from teachbot.llm.pricing import PriceTable  # deferred: loaded when the command runs

    table = PriceTable.load()
    prices: dict[str, Any] = {}
    for settings in models.values():
        price = table.price(settings["model"])
        prices[settings["model"]] = dataclasses.asdict(price) if price is not None else "unknown (counted as 0)"
    return prices
