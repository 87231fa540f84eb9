"""Everything the CLI writes: colour, tables, message formats, progress and summaries.

Colour is used only when the stream is a terminal, ``NO_COLOR`` is unset (or empty) and
``TERM`` is not ``dumb``; ``--color always|never`` overrides the terminal check but
never ``NO_COLOR``. Progress goes to stderr so that stdout stays parseable.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from liftbridge_nats import Message
from liftbridge_nats._messages import ns_to_datetime

from ._hints import cli_hints

# SGR codes; only the few the CLI needs.
_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def colour_enabled(stream: TextIO, mode: str = "auto") -> bool:
    """Whether to colour ``stream`` under ``mode`` (``auto``, ``always`` or ``never``)."""
    if os.environ.get("NO_COLOR"):
        return False
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Console:
    """The CLI's stdout and stderr, with colour decided once per stream."""

    def __init__(
        self, out: TextIO | None = None, err: TextIO | None = None, colour: str = "auto"
    ) -> None:
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self._out_colour = colour_enabled(self.out, colour)
        self._err_colour = colour_enabled(self.err, colour)

    def style(self, text: str, *styles: str, err: bool = False) -> str:
        """``text`` wrapped in the SGR codes of ``styles`` if that stream is coloured."""
        if not styles or not (self._err_colour if err else self._out_colour):
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def print(self, text: str = "") -> None:
        """One line on stdout."""
        self.out.write(text + "\n")
        self.out.flush()

    def write_bytes(self, data: bytes) -> None:
        """Raw bytes on stdout (through its binary buffer when it has one)."""
        self.out.flush()
        buffer = getattr(self.out, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            self.out.write(data.decode("utf-8", errors="replace"))
            self.out.flush()

    def json(self, value: Any) -> None:
        """One compact JSON document on one stdout line."""
        self.print(json.dumps(value, separators=(",", ":"), ensure_ascii=False))

    def info(self, text: str) -> None:
        """A note for people on stderr (never part of parseable output)."""
        self.err.write(text + "\n")
        self.err.flush()

    def error(self, text: str) -> None:
        """An error line on stderr: ``error: ...`` (SDK advice rewritten for the CLI)."""
        self.err.write(f"{self.style('error:', 'bold', 'red', err=True)} {cli_hints(text)}\n")
        self.err.flush()

    @property
    def err_is_tty(self) -> bool:
        """Whether stderr is a terminal (progress bars are drawn only there)."""
        isatty = getattr(self.err, "isatty", None)
        return bool(isatty and isatty())


# ------------------------------------------------------------------ tables


def table(console: Console, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Print rows as left-aligned columns under a bold heading."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    head = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    console.print(console.style(head, "bold"))
    for row in cells:
        console.print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def key_values(console: Console, pairs: Iterable[tuple[str, object]]) -> None:
    """Print ``name: value`` lines with aligned values."""
    items = [(k, str(v)) for k, v in pairs]
    width = max((len(k) for k, _ in items), default=0)
    for key, value in items:
        console.print(f"{console.style((key + ':').ljust(width + 1), 'bold')} {value}")


# ------------------------------------------------------------------ messages

FORMATS = ("text", "raw", "json", "hex")


def bytes_to_json(data: bytes | None) -> str | dict[str, str] | None:
    """UTF-8 text when ``data`` decodes, else ``{"base64": ...}``; None stays None."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def printable(data: bytes) -> str:
    """``data`` as one line of text: UTF-8 where possible, escapes for the rest."""
    text = data.decode("utf-8", errors="backslashreplace")
    return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def message_to_json(msg: Message) -> dict[str, Any]:
    """A stored message as a JSON-ready dict (bytes as text or base64)."""
    return {
        "stream": msg.stream,
        "partition": msg.partition,
        "offset": msg.offset,
        "timestamp": msg.timestamp,
        "time": ns_to_datetime(msg.timestamp).isoformat() if msg.timestamp else None,
        "subject": msg.subject,
        "key": bytes_to_json(msg.key),
        "headers": {k: bytes_to_json(v) for k, v in msg.headers.items()},
        "value": bytes_to_json(msg.value),
    }


def _meta_line(console: Console, msg: Message) -> str:
    parts = [console.style(f"{msg.partition}:{msg.offset}", "cyan")]
    if msg.timestamp:
        stamp = ns_to_datetime(msg.timestamp).isoformat(timespec="milliseconds")
        parts.append(console.style(stamp, "dim"))
    if msg.key is not None:
        parts.append(console.style("key=", "yellow") + printable(msg.key))
    for name, value in msg.headers.items():
        parts.append(console.style(f"{name}=", "green") + printable(value))
    return " ".join(parts)


def hexdump(data: bytes) -> list[str]:
    """Classic 16-bytes-per-line hex dump lines (offset, hex, ASCII)."""
    lines = []
    for start in range(0, len(data), 16):
        chunk = data[start : start + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"  {start:08x}  {hexes:<47}  |{text}|")
    return lines or ["  (empty)"]


def print_message(console: Console, msg: Message, fmt: str) -> None:
    """Print one stored message in ``fmt`` (see ``FORMATS``)."""
    if fmt == "raw":
        console.write_bytes(msg.value + b"\n")
    elif fmt == "json":
        console.json(message_to_json(msg))
    elif fmt == "hex":
        console.print(_meta_line(console, msg) + f" ({len(msg.value)} bytes)")
        for line in hexdump(msg.value):
            console.print(line)
    else:
        console.print(_meta_line(console, msg) + "  " + printable(msg.value))


# ------------------------------------------------------------------ numbers


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of latencies in seconds, returned in milliseconds."""
    values = sorted(latencies_s)
    return {
        "p50_ms": percentile(values, 0.50) * 1e3,
        "p90_ms": percentile(values, 0.90) * 1e3,
        "p99_ms": percentile(values, 0.99) * 1e3,
        "max_ms": (values[-1] * 1e3) if values else float("nan"),
    }


def throughput_line(
    count: int, nbytes: int, seconds: float, latency_ms: Mapping[str, float] | None
) -> str:
    """The closing line of a load run: rate, volume and ack latency percentiles."""
    seconds = max(seconds, 1e-9)
    line = (
        f"{count} messages, {human_bytes(nbytes)} in {seconds:.2f} s: "
        f"{count / seconds:,.0f} msg/s, {human_bytes(nbytes / seconds)}/s"
    )
    if latency_ms is not None and count:
        line += (
            f"; ack latency p50 {latency_ms['p50_ms']:.2f} ms, p90 {latency_ms['p90_ms']:.2f} ms,"
            f" p99 {latency_ms['p99_ms']:.2f} ms, max {latency_ms['max_ms']:.2f} ms"
        )
    return line


# ------------------------------------------------------------------ progress


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second.

    It draws nothing unless stderr is a terminal, so logs and pipes stay clean.
    """

    def __init__(self, console: Console, total: int, label: str = "") -> None:
        self.console = console
        self.total = max(total, 1)
        self.label = label
        self.done = 0
        self.enabled = console.err_is_tty
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._drawn = -1

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units done and redraw if it is time."""
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last_draw >= 0.1 or self.done >= self.total):
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._start, 1e-9)
        fraction = min(self.done / self.total, 1.0)
        width = 30
        filled = int(fraction * width)
        bar = "#" * filled + "-" * (width - filled)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        line = (
            f"\r{self.label}[{self.console.style(bar, 'green', err=True)}] "
            f"{self.done}/{self.total} {fraction:6.1%} {rate:,.0f}/s ETA {eta:4.1f}s"
        )
        self.console.err.write(line)
        self.console.err.flush()
        self._drawn = self.done

    def close(self) -> None:
        """Finish the line (if one was drawn)."""
        if self.enabled:
            if self._drawn != self.done:
                self._draw(time.monotonic())
            self.console.err.write("\n")
            self.console.err.flush()
