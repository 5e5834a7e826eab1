"""Who may use the page: the token (checked as bytes, malformed ones refused) and, on loopback without a token, the
user of the connecting process (read from the kernel's socket table).

Why the peer's uid, and why from ``/proc/net/tcp``: a browser cannot connect to a Unix socket, so ``SO_PEERCRED`` is
out; ``/proc/*/fd`` of another user's process cannot be read, so following a socket's inode to its process fails
exactly for the clients to refuse. The socket table itself names the uid that created each socket, for every user,
without any process being readable: the client's end of a loopback connection is the row whose local address is the
client's and whose remote address is the server's. A process of the same user as the page could read its token file
or attach a debugger to it anyway, so "the same user" is the trust boundary; any other user is refused. Where the table
cannot be read or the row is not found (another OS, another network namespace), the answer is "unknown", which is
refused: a token is the way in then.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import struct
from collections.abc import Callable
from pathlib import Path

MAX_TOKEN_CHARS = 256  # a longer offer is malformed, not compared
TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))

PeerLookup = Callable[[tuple[str, int], tuple[str, int]], "int | None"]


def token_matches(offered: str, token: str) -> bool:
    """Whether ``offered`` is ``token``: printable ASCII of a sane length compared in constant time; anything else
    (non-ASCII, control characters, too long) is simply not the token (never an error)."""
    if not token or not offered or len(offered) > MAX_TOKEN_CHARS:
        return False
    if not (offered.isascii() and offered.isprintable()):
        return False
    return hmac.compare_digest(offered.encode("ascii"), token.encode("ascii"))


def _address(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of the socket table ('0100007F:1F90'; IPv6 as four host-order words) as (ip, port)."""
    host, _, port = text.partition(":")
    raw = b"".join(struct.pack("=I", int(host[i:i + 8], 16)) for i in range(0, len(host), 8))
    return ipaddress.ip_address(raw), int(port, 16)


def _normal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def peer_uid(client: tuple[str, int], server: tuple[str, int], tables: tuple[Path, ...] = TABLES) -> int | None:
    """The uid owning the client's end of the TCP connection ``client`` -> ``server``, or None when not found."""
    want = ((_normal(ipaddress.ip_address(client[0])), int(client[1])),
            (_normal(ipaddress.ip_address(server[0])), int(server[1])))
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 8:
                continue
            try:
                local, remote = _address(parts[1]), _address(parts[2])
            except ValueError:
                continue
            if ((_normal(local[0]), local[1]), (_normal(remote[0]), remote[1])) == want:
                return int(parts[7])
    return None


def same_user(lookup: PeerLookup = peer_uid, owner: int | None = None) -> Callable[[object], bool]:
    """A check of an ASGI connection: whether its client is a process of ``owner`` (default: this process's uid)."""
    uid = os.geteuid() if owner is None else owner

    def check(conn: object) -> bool:
        scope = getattr(conn, "scope", {})
        client, server = scope.get("client"), scope.get("server")
        if not client or not server:
            return False
        try:
            return lookup(tuple(client), tuple(server)) == uid
        except ValueError:  # not an IP address (a Unix socket, a test client)
            return False

    return check
