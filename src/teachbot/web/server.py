"""The page's server: uvicorn on its own thread and asyncio loop, on a socket bound before it starts.

Binding first means a port in use is one clear error at start, port 0 gets a free port whose number is known at
once, and the address printed is the one served. With ``tls_cert`` and ``tls_key`` it serves https (and wss).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import uvicorn

from teachbot.errors import ConfigError
from teachbot.web.app import PageApp
from teachbot.web.config import WebConfig

START_TIMEOUT = 10.0  # seconds for uvicorn to start serving


class WebServer:
    """Serves a :class:`PageApp` until :meth:`stop`."""

    def __init__(self, config: WebConfig, page: PageApp) -> None:
        self.config, self.page = config, page
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = config.port

    @property
    def url(self) -> str:
        """The page's address (without its token)."""
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"{'https' if self.config.tls else 'http'}://{host}:{self.port}/"

    def start(self) -> str:
        """Bind, start serving on a thread, return the page's address; a ConfigError when the address is taken."""
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.config.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(f"cannot serve the web page on {self.config.host}:{self.config.port}: {exc.strerror}; "
                              "choose another web.port in config/web.yaml or --port (0: any free port)") from None
        sock.listen(64)
        sock.set_inheritable(True)
        self._sock = sock
        self.port = self.page.port = sock.getsockname()[1]
        tls = ({"ssl_certfile": str(Path(self.config.tls_cert).expanduser()),
                "ssl_keyfile": str(Path(self.config.tls_key).expanduser())} if self.config.tls else {})
        config = uvicorn.Config(self.page.app, log_level="warning", ws="websockets-sansio", lifespan="off", **tls,
                                ws_max_size=self.config.max_message_bytes, ws_ping_interval=20.0, ws_ping_timeout=20.0,
                                server_header=False, date_header=False, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # the process's owner (CLI, node) handles signals
        self._thread = threading.Thread(target=self._run, daemon=True, name="teachbot-web")
        self._thread.start()
        started = threading.Event()

        def check() -> None:
            while not (self._server.started or not self._thread.is_alive()):
                threading.Event().wait(0.02)
            started.set()

        threading.Thread(target=check, daemon=True).start()
        if not started.wait(START_TIMEOUT) or not self._server.started:
            self.stop()
            raise ConfigError(f"the web page's server did not start on {self.url}")
        return self.url

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def stop(self) -> None:
        """Stop serving (open pages are closed) and release the port."""
        if self._server is not None:
            self.page.hub.close()
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
