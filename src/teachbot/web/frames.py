"""Camera images for the page: raw pixels to a small JPEG, and the frame message the page reads.

A frame is one binary websocket message: 4 bytes (big-endian) with the length N of a UTF-8 JSON header, the
header (``seq``, ``stamp``: the image's own stamp in seconds, ``received``: when the bridge got it, wall clock,
``sent``: when it was encoded, ``width``, ``height``), then the JPEG. The page draws the newest frame and
reports nothing back; the latency it shows is display time minus ``received``.
"""

from __future__ import annotations

import io
import json
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image

CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1, "8UC1": 1, "8UC3": 3}


class UnsupportedImage(ValueError):
    """An image encoding or layout the page cannot show; the message says which."""


def to_rgb(data: bytes | memoryview, width: int, height: int, encoding: str, step: int = 0) -> np.ndarray:
    """A sensor_msgs/Image's pixels as an H x W x 3 uint8 RGB array (a copy)."""
    channels = CHANNELS.get(encoding)
    if channels is None:
        raise UnsupportedImage(f"image encoding {encoding!r} is not shown; use one of {', '.join(CHANNELS)}")
    step = step or width * channels
    buffer = np.frombuffer(data, dtype=np.uint8)
    if width <= 0 or height <= 0 or step < width * channels or buffer.size < step * height:
        raise UnsupportedImage(f"a {width}x{height} {encoding} image needs {step * height} bytes, got {buffer.size}")
    rows = buffer[: step * height].reshape(height, step)[:, : width * channels].reshape(height, width, channels)
    if channels == 1:
        return np.repeat(rows, 3, axis=2)
    if encoding.startswith("bgr"):
        return np.ascontiguousarray(rows[:, :, 2::-1])
    return np.ascontiguousarray(rows[:, :, :3])


def encode_jpeg(rgb: np.ndarray, width: int = 0, quality: int = 70) -> tuple[bytes, int, int]:
    """(JPEG bytes, width, height), scaled down to ``width`` pixels wide when it is smaller (0: as is)."""
    image = Image.fromarray(rgb, "RGB")
    if width and image.width > width:
        image = image.resize((width, max(1, round(image.height * width / image.width))), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue(), image.width, image.height


def pack(header: dict[str, float | int], jpeg: bytes) -> bytes:
    """The binary frame message (see the module docstring)."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(head)) + head + jpeg


def unpack(message: bytes) -> tuple[dict[str, float | int], bytes]:
    """The header and the JPEG of a frame message (the page does the same in JavaScript)."""
    (length,) = struct.unpack(">I", message[:4])
    return json.loads(message[4:4 + length]), message[4 + length:]


@dataclass
class _Raw:
    data: bytes
    width: int
    height: int
    encoding: str
    step: int
    stamp: float
    received: float


class FrameSource:
    """The newest camera image, encoded at most ``fps`` times a second and only when a page asks for it.

    ``offer`` is called from the ROS thread with every image (it keeps a reference, nothing else); ``next_frame``
    from the server's thread pool returns the next frame message once the newest image is newer than the last one
    sent and 1/fps has passed since."""

    def __init__(self, fps: float, width: int = 0, quality: int = 70) -> None:
        self.period, self.width, self.quality = 1.0 / fps, width, quality
        self._raw: _Raw | None = None
        self._seq = 0  # images offered
        self._changed = threading.Condition()
        self._encoded: tuple[int, bytes] | None = None  # the newest frame message, shared by every page
        self._encoding = threading.Lock()
        self.error = ""  # why the newest image could not be shown
        self.watchers = 0  # pages showing the camera now (the bridge subscribes to the camera only while one does)

    def watch(self, change: int) -> None:
        """A page started (+1) or stopped (-1) showing the camera."""
        with self._changed:
            self.watchers = max(0, self.watchers + change)

    def offer(self, data: bytes | memoryview, width: int, height: int, encoding: str, step: int, stamp: float) -> None:
        """A new image (from the camera topic's callback)."""
        raw = _Raw(bytes(data), width, height, encoding, step, stamp, time.time())
        with self._changed:
            self._raw = raw
            self._seq += 1
            self._changed.notify_all()

    def next_frame(self, after: int, last_sent: float, timeout: float) -> tuple[int, bytes] | None:
        """(seq, frame message) of an image newer than ``after``, no sooner than a period after ``last_sent``
        (monotonic); None when none came within ``timeout`` seconds."""
        wait = self.period - (time.monotonic() - last_sent)
        if wait > 0:
            time.sleep(min(wait, timeout))
        with self._changed:
            if not self._changed.wait_for(lambda: self._seq > after, timeout=timeout):
                return None
            raw, seq = self._raw, self._seq
        with self._encoding:  # pages watching together share one encoding of each image
            if self._encoded is not None and self._encoded[0] >= seq:
                return self._encoded
            try:
                rgb = to_rgb(raw.data, raw.width, raw.height, raw.encoding, raw.step)
            except UnsupportedImage as exc:
                self.error = str(exc)
                return None
            self.error = ""
            jpeg, width, height = encode_jpeg(rgb, self.width, self.quality)
            header = {"seq": seq, "stamp": raw.stamp, "received": raw.received, "sent": time.time(), "width": width,
                      "height": height}
            self._encoded = (seq, pack(header, jpeg))
            return self._encoded
