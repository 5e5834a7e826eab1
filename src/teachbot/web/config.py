"""config/web.yaml as a checked dataclass, and the bind rule: loopback only unless a token and TLS are given at start."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from teachbot.config import dataclass_block, load_yaml, resolve_config
from teachbot.errors import ConfigError

TOKEN_ENV = "TEACHBOT_WEB_TOKEN"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class WebConfig:
    """The ``web`` block of config/web.yaml (see that file for what each key does)."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str = ""
    token_file: str = ""
    confirm_lessons: bool = True
    camera_topic: str = ""
    camera_fps: float = 4.0
    camera_width: int = 480
    jpeg_quality: int = 70
    objects_topic: str = ""
    transcript_lines: int = 2000
    dialog_turns: int = 200
    max_clients: int = 8
    max_message_bytes: int = 16384
    messages_per_second: float = 20.0
    max_query_chars: int = 200
    tls_cert: str = ""
    tls_key: str = ""
    max_queue_bytes: int = 4194304
    lessons_page: int = 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = {"str": str, "int": int, "float": (int, float), "bool": bool}[str(f.type)]
            if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
                raise ConfigError(f"config/web.yaml web.{f.name}: expected {str(f.type)}, got {value!r}")
        positive = ("camera_fps", "transcript_lines", "dialog_turns", "max_clients", "max_message_bytes",
                    "messages_per_second", "max_query_chars", "max_queue_bytes", "lessons_page")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"config/web.yaml web.{name}: must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"config/web.yaml web.port: must be 0..65535, got {self.port}")
        if not 1 <= self.jpeg_quality <= 95:
            raise ConfigError(f"config/web.yaml web.jpeg_quality: must be 1..95, got {self.jpeg_quality}")
        if self.camera_width < 0:
            raise ConfigError(f"config/web.yaml web.camera_width: must be 0 or more, got {self.camera_width}")

    @classmethod
    def load(cls, name_or_path: str = "web", **overrides: Any) -> WebConfig:
        """config/web.yaml (or a path) with ``overrides`` (command-line options; None and "" keep the file's value)."""
        path = resolve_config(name_or_path or "web")
        block = dict(dataclass_block(load_yaml(path).get("web", {}), cls, str(path), "web"))
        block.update({k: v for k, v in overrides.items() if v is not None and v != ""})
        if isinstance(block.get("camera_fps"), int):
            block["camera_fps"] = float(block["camera_fps"])
        if isinstance(block.get("messages_per_second"), int):
            block["messages_per_second"] = float(block["messages_per_second"])
        return cls(**block)

    def with_token(self, environ: dict[str, str] | None = None) -> WebConfig:
        """The config with the token resolved (TEACHBOT_WEB_TOKEN, else ``token``, else ``token_file``) and the
        bind rule applied: another address than loopback needs a token and TLS; a token is 16 or more printable
        ASCII characters."""
        env = os.environ if environ is None else environ
        token = env.get(TOKEN_ENV, "").strip() or self.token.strip()
        if not token and self.token_file:
            path = Path(self.token_file).expanduser()
            try:
                token = (path.read_text().splitlines() or [""])[0].strip()
            except OSError as exc:
                raise ConfigError(f"config/web.yaml web.token_file: cannot read {path}: {exc.strerror}") from None
        if token and len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(f"the web page's token must have at least {MIN_TOKEN_CHARS} characters "
                              f"(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(24))')")
        if token and not (token.isascii() and token.isprintable() and " " not in token and ";" not in token):
            raise ConfigError("the web page's token must be printable ASCII without spaces or ';' "
                              "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(24))')")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("config/web.yaml web.tls_cert and web.tls_key (--tls-cert, --tls-key) go together")
        for name in ("tls_cert", "tls_key"):
            path = getattr(self, name)
            if path and not os.access(Path(path).expanduser(), os.R_OK):
                raise ConfigError(f"config/web.yaml web.{name}: cannot read {path}")
        if not is_loopback(self.host):
            if not token:
                raise ConfigError(f"refusing to serve the web page on {self.host}, which is not a loopback address, "
                                  f"without a token: give one at start ({TOKEN_ENV}=..., --token-file FILE, or web.token "
                                  "in config/web.yaml), or serve on 127.0.0.1")
            if not self.tls_cert:
                raise ConfigError(f"refusing to serve the web page on {self.host}, which is not a loopback address, "
                                  "without TLS: the token would cross the network in clear; give --tls-cert FILE "
                                  "--tls-key FILE (web.tls_cert, web.tls_key), or serve on 127.0.0.1")
        return replace(self, token=token)

    @property
    def tls(self) -> bool:
        """Whether the page is served over TLS (https, wss; its cookie is then ``Secure``)."""
        return bool(self.tls_cert and self.tls_key)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or 'localhost') only reaches this machine."""
    if host.strip().lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False
