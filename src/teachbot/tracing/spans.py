"""The spans teachbot makes, and the trace context it carries across the ROS boundary.

Every span is made through ``span`` (a context manager: the current span while the block runs, its error
recorded when the block raises) or ``record_span`` (a span that already happened, such as an LLM call whose
latency the backend measured). Attribute values are cut to ``max_attribute_chars`` (config/tracing.yaml), so
a long transcript never bloats a trace. ``trace_parent()`` is the current context as W3C ``traceparent`` text,
which a client puts into a goal's or request's ``trace_parent`` field; the server passes it to ``span(...,
parent=...)`` and its span joins the caller's trace. Without a configured provider (teachbot.tracing.setup)
the OpenTelemetry API hands out non-recording spans: nothing is kept and the cost is a few microseconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER = "teachbot"
EPISODE_SPAN = "episode"
EPISODE_ID = "teachbot.episode_id"
NODE = "teachbot.node"
_PROPAGATOR = TraceContextTextMapPropagator()
_limits = {"chars": 4000}

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float] | Sequence[bool]


def set_attribute_limit(chars: int) -> None:
    """Cut attribute texts to ``chars`` characters from now on (config/tracing.yaml ``max_attribute_chars``)."""
    _limits["chars"] = max(16, int(chars))


def attribute_text(text: str) -> str:
    """``text`` as a span keeps it: cut to the configured length, with the number of characters left out."""
    limit = _limits["chars"]
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, AttributeValue]:
    """OpenTelemetry attribute values: texts cut, sequences of one primitive type, None left out, others as text."""
    clean: dict[str, AttributeValue] = {}
    for key, value in (attributes or {}).items():
        if value is None:
            continue
        if isinstance(value, str):
            clean[key] = attribute_text(value)
        elif isinstance(value, (bool, int, float)):
            clean[key] = value
        elif isinstance(value, (list, tuple)):
            if all(isinstance(v, str) for v in value):
                clean[key] = [attribute_text(v) for v in value]
            elif all(isinstance(v, (bool, int, float)) and not isinstance(v, bool) for v in value) and value:
                clean[key] = [float(v) for v in value] if any(isinstance(v, float) for v in value) else list(value)
            else:
                clean[key] = [attribute_text(str(v)) for v in value]
        else:
            clean[key] = attribute_text(str(value))
    return clean


# one tracer for the process: a proxy until configure() installs the provider, then that provider's (get_tracer
# itself costs a fifth of a span)
_TRACER = trace.get_tracer(TRACER)


def _tracer() -> trace.Tracer:
    return _TRACER


def _parent_context(parent: str) -> otel_context.Context | None:
    if not parent:
        return None
    return _PROPAGATOR.extract({"traceparent": parent})


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, *, parent: str = "", node: str = "",
         kind: trace.SpanKind = trace.SpanKind.INTERNAL) -> Iterator[Span]:
    """A span named ``name`` around the block, current while it runs; ``parent`` a caller's ``trace_parent()`` text
    (a server joining the caller's trace; '' = the current context); ``node`` the ROS node that made it.

    An exception leaving the block is recorded on the span (status ERROR with its message) and raised on."""
    extra = {NODE: node} if node else {}
    with _tracer().start_as_current_span(name, context=_parent_context(parent), kind=kind,
                                         attributes=_clean({**extra, **(attributes or {})})) as current:
        yield current


def set_attributes(current: Span, attributes: Mapping[str, Any]) -> None:
    """Add attributes to a span (texts cut as ``span`` cuts them)."""
    if current.is_recording():
        current.set_attributes(_clean(attributes))


def fail(current: Span, message: str) -> None:
    """Mark a span as failed without an exception (a skill that answered with an error code, a refused request)."""
    if current.is_recording():
        current.set_status(Status(StatusCode.ERROR, attribute_text(message)))


def record_span(name: str, seconds: float, attributes: Mapping[str, Any] | None = None, *, error: str = "") -> None:
    """A span that ended now and lasted ``seconds`` (measured by the caller), a child of the current span."""
    end = time.time_ns()
    start = end - max(0, int(seconds * 1e9))
    done = _tracer().start_span(name, start_time=start, attributes=_clean(attributes))
    if error:
        done.set_status(Status(StatusCode.ERROR, attribute_text(error)))
    done.end(end_time=end)


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """Keyword arguments as one line for a span (``name=value, ...``, values as repr)."""
    return ", ".join(f"{key}={value!r}" for key, value in arguments.items())


def trace_parent() -> str:
    """The current span's context as a W3C ``traceparent`` value ('' when there is no recording span)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", "")


def current_trace_id() -> str:
    """The current trace's id (32 hex digits), '' outside a recording span."""
    found = trace.get_current_span().get_span_context()
    return format(found.trace_id, "032x") if found.is_valid else ""


@contextlib.contextmanager
def evaluation_run(kind: str, **fields: Any) -> Iterator[str]:
    """One run of an evaluation (``kind`` cap, droc, raider, multitask) as the root span of a trace of its own, its
    ``fields`` (method, task, trial, ...) as ``evaluation.*`` attributes; yields the trace id for the run's result line,
    so ``teachbot trace show <trace id>`` shows the run exactly as a live episode on the robot is shown."""
    attributes = {"evaluation.kind": kind, **{f"evaluation.{key}": value for key, value in fields.items()}}
    with _tracer().start_as_current_span("evaluation.run", context=otel_context.Context(), attributes=_clean(attributes)):
        yield current_trace_id()
