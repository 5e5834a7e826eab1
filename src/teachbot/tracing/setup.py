"""Install the process's tracer provider from config/tracing.yaml: JSONL files per day, and OTLP on request.

One provider per process (OpenTelemetry allows one): the first ``configure`` call installs it and later calls
return the same setup, so an in-process stack of nodes shares it (each node names itself in its spans'
``teachbot.node`` attribute). Spans leave through a BatchSpanProcessor: the calling thread only queues them,
a background thread writes them at most ``export_delay_ms`` later; ``flush()`` writes what is queued now, and
the provider writes the rest when the process exits.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from teachbot.config import ConfigError, dataclass_block, load_yaml
from teachbot.paths import config_path
from teachbot.tracing.jsonl import JsonlSpanExporter
from teachbot.tracing.spans import set_attribute_limit

log = logging.getLogger(__name__)
DIR_ENV, RUN_DIR_ENV = "TEACHBOT_TRACE_DIR", "TEACHBOT_RUN_DIR"
OTLP_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
MAX_QUEUE = 16384  # spans waiting for the writer thread; a burst beyond it drops spans (with a line on stderr)


@dataclass(frozen=True)
class TracingConfig:
    """The ``tracing`` section of config/tracing.yaml (see the file for each key)."""

    enabled: bool = True
    directory: str = ""
    otlp_endpoint: str = ""
    export_delay_ms: int = 500
    max_attribute_chars: int = 4000

    @classmethod
    def load(cls, path: str | Path | None = None) -> TracingConfig:
        source = Path(path) if path is not None else config_path("tracing.yaml")
        block = load_yaml(source).get("tracing") or {}
        config = cls(**dataclass_block(block, cls, str(source), "tracing"))
        if not isinstance(config.enabled, bool):
            raise ConfigError(f"{source}: tracing.enabled must be true or false, got {config.enabled!r}")
        if not isinstance(config.export_delay_ms, int) or config.export_delay_ms < 1:
            raise ConfigError(f"{source}: tracing.export_delay_ms must be a positive integer, got {config.export_delay_ms!r}")
        return config

    def trace_dir(self) -> Path:
        """Where the day files go: TEACHBOT_TRACE_DIR, else ``directory``, else the run directory's traces/."""
        chosen = os.environ.get(DIR_ENV) or self.directory
        if chosen:
            return Path(chosen).expanduser()
        run_dir = os.environ.get(RUN_DIR_ENV)
        if run_dir:
            return Path(run_dir).expanduser() / "traces"
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(state) / "teachbot" / "traces"

    def endpoint(self) -> str:
        return os.environ.get(OTLP_ENV) or self.otlp_endpoint


@dataclass
class Tracing:
    """The installed provider, where its files go and where it sends (``endpoint`` '' when it does not)."""

    provider: TracerProvider | None
    directory: Path
    endpoint: str = ""

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write every span finished so far (True when all were written in time)."""
        return self.provider.force_flush(int(timeout_s * 1000)) if self.provider is not None else True


_installed: Tracing | None = None
_lock = threading.Lock()


def configure(service: str = "teachbot", config: TracingConfig | None = None) -> Tracing:
    """Install the tracer provider of this process (once; later calls return the first setup)."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        config = config or TracingConfig.load()
        set_attribute_limit(config.max_attribute_chars)
        directory = config.trace_dir()
        if not config.enabled:
            _installed = Tracing(None, directory)
            return _installed
        provider = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": os.getpid()}))
        delay = config.export_delay_ms
        provider.add_span_processor(BatchSpanProcessor(JsonlSpanExporter(directory), schedule_delay_millis=delay,
                                                       max_queue_size=MAX_QUEUE))
        endpoint = config.endpoint()
        if endpoint:
            provider.add_span_processor(BatchSpanProcessor(_otlp(endpoint), schedule_delay_millis=delay))
        trace.set_tracer_provider(provider)
        _installed = Tracing(provider, directory, endpoint)
        log.info("tracing: episode traces go to %s%s", directory, f" and {endpoint}" if endpoint else "")
        return _installed


def trace_into(directory: str | Path, service: str) -> Tracing:
    """Write this process's spans, and those of the processes it starts, into ``directory`` (an evaluation's
    ``OUT/traces``): TEACHBOT_TRACE_DIR is set to it before the provider is installed. A process whose provider is
    installed already keeps writing where it does (said in a warning line)."""
    if _installed is None:
        os.environ[DIR_ENV] = str(directory)
    tracing = configure(service)
    if tracing.directory != Path(directory):
        log.warning("tracing: this process already writes its spans to %s; not to %s", tracing.directory, directory)
    return tracing


def installed() -> Tracing | None:
    """The setup ``configure`` installed in this process, or None."""
    return _installed


def flush(timeout_s: float = 5.0) -> bool:
    """Write the spans finished so far, when a provider is installed."""
    return _installed.flush(timeout_s) if _installed is not None else True


def _otlp(endpoint: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # deferred: protobuf, for OTLP only

    return OTLPSpanExporter(endpoint=endpoint)
