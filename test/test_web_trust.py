"""Issue 31 item 7, the page's trust: who may use it on loopback (the connecting process's user), malformed tokens,
TLS and its Secure cookie, the emergency stop outside the websockets' budget, camera websockets counted, a page's
queue bounded in bytes, the lessons panel paged with its updates debounced. Real uvicorn on a free loopback port,
real HTTP and websocket clients, a fake robot behind the hub (no ROS)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from test_web_app import TOKEN, FakeRobot, events
from timing import deadline, pytest_timeout, timeout
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from teachbot.errors import ConfigError
from teachbot.memory.example import InteractionExample
from teachbot.web.app import COOKIE, PageApp
from teachbot.web.auth import peer_uid
from teachbot.web.config import WebConfig
from teachbot.web.frames import FrameSource
from teachbot.web.hub import Hub
from teachbot.web.server import WebServer

pytestmark = pytest.mark.timeout(pytest_timeout(60))
NOBODY = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")  # the venv may not be readable by nobody; the client needs only the stdlib


class Served:
    """A page over a FakeRobot; ``peer`` overrides the same-user check (None: the real one)."""

    def __init__(self, peer=None, **overrides) -> None:
        self.config = WebConfig.load(port=0, **overrides).with_token({})
        self.robot = FakeRobot()
        self.hub = Hub(self.robot, max_clients=self.config.max_clients)
        self.frames = FrameSource(self.config.camera_fps, self.config.camera_width, self.config.jpeg_quality)
        self.server = WebServer(self.config, PageApp(self.config, self.hub, self.frames, 100, peer=peer))
        self.url = self.server.start()
        self.origin = self.url.rstrip("/")

    def ws(self, path="/ws", **kw):
        base = self.url.replace("http", "ws", 1).rstrip("/")
        return connect(base + path, origin=kw.pop("origin", self.origin), **kw)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()


@pytest.fixture()
def certificate(tmp_path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (openssl)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=timeout(30))
    return str(cert), str(key)


# ---------------------------------------------------------------------------------------------- another local user
OTHER_USER_CLIENT = r"""
import http.client, json, socket, sys
port = int(sys.argv[1])
out = {}
for method, path in (("GET", "/"), ("GET", "/lessons.jsonl"), ("POST", "/stop")):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request(method, path, headers={"Origin": f"http://127.0.0.1:{port}"})
    out[method + " " + path] = c.getresponse().status
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
out["ws"] = int(s.recv(100).split()[1])
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/net/tcp").exists() or not SYSTEM_PYTHON.exists(),
                    reason="needs root (and /usr/bin/python3) to run a client as another user")
def test_another_users_client_on_loopback_is_refused_without_a_token():
    """A process of another user (nobody) cannot open the page, its websocket, the lessons export or the stop."""
    with Served() as page:
        ran = subprocess.run([str(SYSTEM_PYTHON), "-I", "-c", OTHER_USER_CLIENT, str(page.server.port)], capture_output=True,
                             text=True, timeout=timeout(30), user=NOBODY, group=NOBODY, extra_groups=[], cwd="/")
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout) == {"GET /": 401, "GET /lessons.jsonl": 401, "POST /stop": 401, "ws": 403}
        assert httpx.get(page.url).status_code == 200  # this user's own browser still opens it
        assert page.robot.stops == []


def test_a_client_the_peer_check_refuses_gets_nothing():
    """The same through the check itself (any user running the tests): no page, no lessons, no stop, no socket."""
    with Served(peer=lambda conn: False) as page:
        index = httpx.get(page.url)
        assert index.status_code == 401 and "token" in index.text
        assert httpx.get(page.url + "lessons.jsonl").status_code == 401
        assert httpx.post(page.url + "stop", headers={"origin": page.origin}).status_code == 401
        for path in ("/ws", "/ws/camera"):
            with pytest.raises(InvalidStatus):
                page.ws(path)
        assert page.robot.stops == [] and page.robot.confirm == []


def test_the_peers_uid_is_read_from_the_socket_table():
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            assert peer_uid(client.getsockname(), server.getsockname()) == os.geteuid()
            assert peer_uid(("127.0.0.1", 1), server.getsockname()) is None


# ---------------------------------------------------------------------------------------------- tokens and TLS
def test_a_malformed_token_is_a_401_not_a_500():
    with Served(token=TOKEN) as page:
        for offered in ("\u00e9" * 20, TOKEN + "\u00e9", "x" * 5000, "", TOKEN[:-1] + "\x00"):
            assert httpx.get(page.url, params={"token": offered}).status_code == 401, offered
        raw_cookie = f"{COOKIE}=".encode() + "\u00e9\u00e9\u00e9\u00e9".encode()
        for path in ("", "lessons.jsonl", "static/app.js"):
            assert httpx.get(page.url + path, headers={"cookie": raw_cookie}).status_code == 401, path
    with pytest.raises(ConfigError, match="printable ASCII"):
        WebConfig.load().with_token({"TEACHBOT_WEB_TOKEN": "\u00e9" * 20})


def test_over_tls_the_cookie_is_secure_and_the_token_leaves_the_address(certificate):
    cert, key = certificate
    with Served(token=TOKEN, tls_cert=cert, tls_key=key) as page:
        assert page.url.startswith("https://")
        with httpx.Client(verify=False) as browser:
            opened = browser.get(page.url, params={"token": TOKEN})
            assert opened.status_code == 303 and opened.headers["location"] == "/"
            cookie = opened.headers["set-cookie"]
            assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
            assert browser.get(page.url).status_code == 200  # the cookie it was given
        with pytest.raises(httpx.HTTPError):
            httpx.get(page.url.replace("https", "http", 1), timeout=timeout(3))


def test_off_loopback_the_page_needs_a_token_and_tls(certificate):
    cert, key = certificate
    with pytest.raises(ConfigError, match="without TLS"):
        WebConfig.load(host="0.0.0.0").with_token({"TEACHBOT_WEB_TOKEN": TOKEN})
    with pytest.raises(ConfigError, match="go together"):
        WebConfig.load(tls_cert=cert).with_token({})
    with pytest.raises(ConfigError, match="cannot read"):
        WebConfig.load(tls_cert=cert, tls_key=key + ".missing").with_token({})
    served = WebConfig.load(host="0.0.0.0", tls_cert=cert, tls_key=key).with_token({"TEACHBOT_WEB_TOKEN": TOKEN})
    assert served.tls and served.token == TOKEN


# ---------------------------------------------------------------------------------------------- budgets
def test_the_stop_gets_through_when_every_page_slot_is_taken():
    with Served(max_clients=2) as page, page.ws() as first, page.ws() as second:
        for idle in (first, second):
            events(idle, lambda e: e["type"] == "pending")
        with page.ws() as third:
            assert "pages are open already" in json.loads(third.recv(timeout=timeout(5)))["text"]
        assert httpx.get(page.url).status_code == 200  # the person's page still loads, with its stop button
        pressed = httpx.post(page.url + "stop", headers={"origin": page.origin})
        assert pressed.status_code == 200 and "engaged" in pressed.json()[0]["text"]
        assert page.robot.stops == [True]
        assert events(first, lambda e: e["type"] == "status")[-1]["estop"] is True
        assert httpx.post(page.url + "stop", headers={"origin": "http://evil.example"}).status_code == 403
        assert httpx.post(page.url + "stop").status_code == 403  # no origin: not the page's own button
        assert httpx.get(page.url + "stop").status_code == 405  # only pressing, never a link
        assert page.robot.stops == [True]


def test_camera_websockets_are_counted():
    with Served(max_clients=1) as page:
        with page.ws("/ws/camera"):
            until = deadline(2.0)
            while page.frames.watchers == 0 and time.monotonic() < until:
                time.sleep(0.01)
            with pytest.raises(InvalidStatus):
                page.ws("/ws/camera")
        until = deadline(3.0)
        while page.frames.watchers and time.monotonic() < until:
            time.sleep(0.02)
        with page.ws("/ws/camera"):
            pass  # the slot is free again


def test_a_pages_queue_is_bounded_in_bytes():
    """A page that reads nothing while big events arrive is cut off before 4 MiB wait for it."""
    hub = Hub(FakeRobot())
    loop = asyncio.new_event_loop()
    try:
        client = hub.connect(loop)
        for _ in range(12):
            hub.dialog("robot", "x" * 500_000)
        loop.run_until_complete(asyncio.sleep(0.05))
        assert client.closed
        assert sum(len(t) for t in list(client.queue._queue) if t) <= 4 * 1024 * 1024
    finally:
        loop.close()


# ---------------------------------------------------------------------------------------------- the lessons panel
def test_lessons_come_in_pages():
    with Served() as page:
        page.robot.lessons = [InteractionExample(id=f"l{i:02d}", transcript=f">>> say('{i}')", improvement=f"Lesson {i}.",
                                                 created=f"2026-01-01T10:{i:02d}:00+00:00") for i in range(45)]
        with page.ws() as ws:
            events(ws, lambda e: e["type"] == "pending")
            ws.send(json.dumps({"type": "lessons", "query": ""}))
            first = events(ws, lambda e: e["type"] == "lessons")[-1]
            assert first["total"] == 45 and first["offset"] == 0 and len(first["lessons"]) == 20
            assert first["lessons"][0]["id"] == "l44"
            ws.send(json.dumps({"type": "lessons", "query": "", "offset": 40}))
            last = events(ws, lambda e: e["type"] == "lessons")[-1]
            assert [row["id"] for row in last["lessons"]] == ["l04", "l03", "l02", "l01", "l00"]
            ws.send(json.dumps({"type": "lessons", "query": "", "offset": 999}))
            assert events(ws, lambda e: e["type"] == "lessons")[-1]["offset"] == 40


def test_a_burst_of_memory_updates_is_one_or_two_events_for_a_page():
    """A fleet writing 50 lessons at once does not make every page ask for (and highlight) its list 50 times."""
    with Served() as page, page.ws() as ws:
        events(ws, lambda e: e["type"] == "pending")
        for _ in range(50):  # a fleet's burst of memory/updated
            page.hub.lessons_changed()
        told, end = 0, time.monotonic() + timeout(2.0)
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                told += json.loads(ws.recv(timeout=0.1))["type"] == "lessons_changed"
        assert 1 <= told <= 2
