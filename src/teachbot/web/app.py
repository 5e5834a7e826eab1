"""The page's web application (Starlette): the static page, two websockets, the lessons export, an episode's trace,
and its guards.

Routes: ``/`` the page; ``/static/{app.js, style.css, highlight.css}``; ``/lessons.jsonl`` the learned lessons this
robot may read (memory/list: its own and the fleet's; ``teachbot memory export``'s format); ``POST /stop`` the
emergency stop, outside the websockets' budget (a page refused for ``max_clients`` still stops the robot);
``/trace.json?episode=<id>`` an episode's spans as the page's timeline draws them (teachbot.web.traces; no id: the
newest episode; the page itself asks over ``/ws``); websocket ``/ws`` (JSON events out, checked messages in:
teachbot.web.hub and teachbot.web.protocol); websocket ``/ws/camera`` (binary frames: teachbot.web.frames).

Guards: every response carries a strict Content-Security-Policy (scripts and styles only from this server, no
inline code, no eval, no frames, no forms) and no-sniff / no-referrer / no-store headers. Without a token the page
answers only requests addressed to a loopback name (a DNS-rebinding page cannot reach it) from a process of the
server's own user (teachbot.web.auth: another user of the machine is refused); with one, every request needs it:
the page is opened once as ``/?token=...``, which sets a same-site, HTTP-only cookie (``Secure`` over TLS) and
redirects to ``/`` (the token leaves the address bar); a malformed token is a 401. A websocket, and the stop, must
come from the page's own origin (another site open in the person's browser cannot drive the robot). At most
``max_clients`` event websockets and as many camera websockets are served at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from teachbot.web.auth import same_user, token_matches
from teachbot.web.config import WebConfig, is_loopback
from teachbot.web.frames import FrameSource
from teachbot.web.highlight import stylesheet
from teachbot.web.hub import Hub, RobotUnavailable, note
from teachbot.web.protocol import EPISODE_PATTERN, Limits, RateLimit, Refused, parse

COOKIE = "teachbot_token"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"), (b"cache-control", b"no-store"),
           (b"cross-origin-opener-policy", b"same-origin"), (b"cross-origin-resource-policy", b"same-origin")]
STATIC = {"app.js": "text/javascript", "style.css": "text/css", "index.html": "text/html"}
INLINE = ("say", "stop", "resume", "end")  # publishes only: handled at once and in order (a stop never waits)
POLICY_VIOLATION, TRY_AGAIN_LATER = 1008, 1013


def static_text(name: str) -> str:
    """A file of the page (teachbot/web/static/)."""
    return resources.files("teachbot.web").joinpath("static", name).read_text(encoding="utf-8")


class SecurityHeaders:
    """ASGI middleware: the guard headers on every HTTP response."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def guarded(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in HEADERS}
                message["headers"] = [h for h in message.get("headers", []) if h[0].lower() not in names] + HEADERS
            await send(message)

        await self.app(scope, receive, guarded)


class PageApp:
    """The routes over one hub and frame source, guarded as the module docstring says."""

    def __init__(self, config: WebConfig, hub: Hub, frames: FrameSource, max_text_chars: int = 4000,
                 peer: Callable[[HTTPConnection], bool] | None = None) -> None:
        """``peer``: whether a connection comes from a process allowed without a token (default: of this user)."""
        self.config, self.hub, self.frames = config, hub, frames
        self.peer = peer if peer is not None else same_user()
        self.cameras = 0
        self.limits = Limits(max_text_chars, config.max_query_chars, config.max_message_bytes)
        self.port = config.port  # the bound port (set by the server once it has its socket)
        self.static = {name: static_text(name) for name in STATIC}
        self.static["highlight.css"] = stylesheet()
        routes = [Route("/", self.index), Route("/static/{name}", self.asset), Route("/lessons.jsonl", self.export),
                  Route("/stop", self.stop, methods=["POST"]), Route("/trace.json", self.trace),
                  WebSocketRoute("/ws", self.events), WebSocketRoute("/ws/camera", self.camera)]
        self.app = SecurityHeaders(Starlette(routes=routes))

    # ------------------------------------------------------------------ guards
    def _host_ok(self, conn: HTTPConnection) -> bool:
        """Without a token, only requests addressed to a loopback name (against DNS rebinding)."""
        if self.config.token:
            return True
        host = conn.headers.get("host", "")
        name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
        return is_loopback(name.strip("[]")) and port == str(self.port)

    def _authorised(self, conn: HTTPConnection) -> bool:
        if not self._host_ok(conn):
            return False
        if self.config.token:
            return token_matches(conn.cookies.get(COOKIE, ""), self.config.token)
        return self.peer(conn)

    def _same_origin(self, conn: HTTPConnection) -> bool:
        origin, host = conn.headers.get("origin", ""), conn.headers.get("host", "")
        return bool(host) and origin == f"{'https' if self.config.tls else 'http'}://{host}"

    def _refused(self, conn: HTTPConnection) -> Response:
        if self.config.token:
            return PlainTextResponse("this page needs its token: open it once as /?token=<the token given at start>",
                                     status_code=401)
        if not self._host_ok(conn):
            return PlainTextResponse("this page answers only on a loopback address (127.0.0.1, localhost)", status_code=403)
        return PlainTextResponse("this page answers only the browser of the user who runs the robot; another user needs "
                                 "a token (TEACHBOT_WEB_TOKEN or --token-file at start)", status_code=401)

    # ------------------------------------------------------------------ http
    async def index(self, request: Request) -> Response:
        if self.config.token and "token" in request.query_params and self._host_ok(request):
            if not token_matches(request.query_params.get("token", ""), self.config.token):
                return self._refused(request)
            response = RedirectResponse("/", status_code=303)  # the token leaves the address bar and the history
            response.set_cookie(COOKIE, self.config.token, httponly=True, samesite="strict", path="/",
                                secure=self.config.tls)
            return response
        if not self._authorised(request):
            return self._refused(request)
        return Response(self.static["index.html"], media_type="text/html; charset=utf-8")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not self._authorised(request):
            return self._refused(request)
        if name not in self.static or name == "index.html":
            return PlainTextResponse("not found", status_code=404)
        kind = "text/css" if name.endswith(".css") else STATIC[name]
        return Response(self.static[name], media_type=f"{kind}; charset=utf-8")

    async def export(self, request: Request) -> Response:
        if not self._authorised(request):
            return self._refused(request)
        try:
            text = await run_in_threadpool(self.hub.export)
        except RobotUnavailable as exc:
            return PlainTextResponse(str(exc), status_code=503)
        return Response(text, media_type="application/x-ndjson; charset=utf-8",
                        headers={"content-disposition": 'attachment; filename="lessons.jsonl"'})

    async def stop(self, request: Request) -> Response:
        """The emergency stop (only engaging it): outside the websockets and their budget, so that it gets through
        when ``max_clients`` pages hold every websocket. Same origin only (a cross-site form or fetch is refused)."""
        if not self._authorised(request):
            return self._refused(request)
        if not self._same_origin(request):
            return PlainTextResponse("the stop is pressed on the page itself", status_code=403)
        return JSONResponse(self.hub.handle({"type": "stop"}))

    async def trace(self, request: Request) -> Response:
        """An episode's spans (the ``trace`` event a page gets over /ws), for tools and a look by hand."""
        if not self._authorised(request):
            return self._refused(request)
        episode = request.query_params.get("episode", "")
        if not EPISODE_PATTERN.match(episode):
            return PlainTextResponse("not an episode id", status_code=400)
        return JSONResponse(await run_in_threadpool(self.hub.trace, episode))

    # ------------------------------------------------------------------ websockets
    async def _admit(self, ws: WebSocket) -> bool:
        if not (self._authorised(ws) and self._same_origin(ws)):
            await ws.close(code=POLICY_VIOLATION)  # before accept: the handshake is refused (HTTP 403)
            return False
        await ws.accept()
        return True

    async def events(self, ws: WebSocket) -> None:
        """The page's event stream and its messages."""
        if not await self._admit(ws):
            return
        client = self.hub.connect(asyncio.get_running_loop())
        if client is None:
            await ws.send_text(json.dumps(note(f"{self.config.max_clients} pages are open already; close one", error=True)))
            await ws.close(code=TRY_AGAIN_LATER)
            return
        sender = asyncio.create_task(self._pump(ws, client))
        limit = RateLimit(self.config.messages_per_second)
        tasks: set[asyncio.Task] = set()

        def tell(event: dict[str, Any]) -> None:
            client.push(json.dumps(event))

        async def in_pool(message: dict[str, Any]) -> None:
            for event in await run_in_threadpool(self.hub.handle, message):
                tell(event)

        try:
            while True:
                received = await ws.receive()
                if received["type"] == "websocket.disconnect":
                    break
                raw = received.get("text") if received.get("text") is not None else received.get("bytes", b"")
                if not limit.allow(time.monotonic()):
                    tell(note("refused: too many messages; wait a moment", error=True))
                    continue
                try:
                    message = parse(raw, self.limits)
                except Refused as exc:
                    tell(note(f"refused: {exc}", error=True))
                    continue
                if message["type"] in INLINE:
                    for event in self.hub.handle(message):
                        tell(event)
                else:
                    task = asyncio.create_task(in_pool(message))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        except WebSocketDisconnect:
            pass
        finally:
            self.hub.disconnect(client)
            sender.cancel()
            for task in tasks:
                task.cancel()

    async def _pump(self, ws: WebSocket, client: Any) -> None:
        try:
            while True:
                text = await client.next_text()
                if text is None:
                    await ws.close(code=TRY_AGAIN_LATER)
                    return
                await ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError):
            return

    async def camera(self, ws: WebSocket) -> None:
        """The camera's frames, at most config.camera_fps a second, newest first."""
        if self.cameras >= self.config.max_clients:  # counted before accept: no await between the check and the count
            await ws.close(code=TRY_AGAIN_LATER)
            return
        self.cameras += 1
        try:
            if await self._admit(ws):
                await self._frames_to(ws)
        finally:
            self.cameras -= 1

    async def _frames_to(self, ws: WebSocket) -> None:
        gone = asyncio.create_task(ws.receive())  # a page never sends here: this ends when it leaves
        seq, last = 0, 0.0
        self.frames.watch(1)
        try:
            while not gone.done():
                got = await run_in_threadpool(self.frames.next_frame, seq, last, 0.5)
                if got is None or gone.done():
                    continue
                seq, data = got
                last = time.monotonic()
                await ws.send_bytes(data)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self.frames.watch(-1)
            gone.cancel()
