"""The sandbox's wire codec: plain data as tagged JSON in length-prefixed frames.

Shared by the worker (``python -I -S``, which loads this file by path beside
teachbot/sandbox/_sandbox_worker.py) and the parent (teachbot.sandbox.executor); standard library only.
Containers become ``[tag, items]``, bytes ``["b", latin-1 text]``; anything else is refused.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 32  # nesting of plain data crossing the pipe
HEADER = struct.Struct(">I")

_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_UNTAG: dict[str, Callable[[list[Any]], Any]] = {"l": list, "t": tuple, "s": set, "f": frozenset}
PLAIN = "None, bool, int, float, str, bytes, list, tuple, dict, set"


class NotPlainData(TypeError):
    """A value of a type that may not cross between the console and the robot."""

    def __init__(self, type_name: str) -> None:
        super().__init__(f"{type_name} is not plain data")
        self.type_name = type_name


def encode(value: Any, convert: Callable[[Any], Any] | None = None, max_size: int = 8 << 20) -> Any:
    """Tagged JSON tree of plain data; TypeError for anything else, ValueError if larger than ~max_size bytes."""
    left = [max_size]

    def enc(v: Any, depth: int) -> Any:
        kind = type(v)
        left[0] -= len(v) + 2 if kind in (str, bytes, bytearray) else 8
        if left[0] < 0 or depth > MAX_DEPTH:
            raise ValueError("the data is too large or nested too deeply to cross between the console and the robot")
        if v is None or kind in (bool, str, float):
            return v
        if kind is int:
            if v.bit_length() > 12_000:
                raise ValueError("the integer is too large to cross between the console and the robot")
            return v
        if kind in (bytes, bytearray):
            return ["b", bytes(v).decode("latin-1")]
        if kind in _TAGS:
            return [_TAGS[kind], [enc(x, depth + 1) for x in v]]
        if kind is dict:
            return ["d", [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]]
        if convert is not None:
            return enc(convert(v), depth + 1)
        raise NotPlainData(kind.__name__)

    return enc(value, 0)


def decode(tree: Any, depth: int = 0) -> Any:
    """Inverse of encode; ValueError for anything malformed (the parent treats that as a hostile worker)."""
    kind = type(tree)
    if tree is None or kind in (bool, int, float, str):
        return tree
    if kind is not list or len(tree) != 2 or depth > MAX_DEPTH:
        raise ValueError("malformed message")
    tag, body = tree
    if tag == "b" and type(body) is str:
        return body.encode("latin-1")
    if type(body) is not list or (tag != "d" and tag not in _UNTAG):
        raise ValueError("malformed message")
    if tag == "d":
        if not all(type(p) is list and len(p) == 2 for p in body):
            raise ValueError("malformed message")
        try:
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
        except TypeError as exc:
            raise ValueError(f"malformed message: {exc}") from None
    try:
        return _UNTAG[tag]([decode(x, depth + 1) for x in body])
    except TypeError as exc:  # an unhashable set member
        raise ValueError(f"malformed message: {exc}") from None


def pack(message: dict[str, Any]) -> bytes:
    """One length-prefixed JSON frame."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def read_frame(fd: int) -> bytes:
    """Body of the next frame from a blocking fd; EOFError at end of file."""
    def read(n: int) -> bytes:
        chunks = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    return read(HEADER.unpack(read(HEADER.size))[0])


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write one frame to a blocking fd."""
    view = memoryview(pack(message))
    while view:
        view = view[os.write(fd, view) :]
