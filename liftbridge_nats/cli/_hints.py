"""SDK error messages in the command line's words.

The SDK's errors tell a Python caller what to do ("pass a larger timeout", "check the
name with fetch_metadata()"); on the command line the same advice has to name options
and commands. Every error line the CLI prints goes through :func:`cli_hints`.
"""

from __future__ import annotations

__all__ = ["cli_hints"]

# (what the SDK says, what the CLI says instead); longer phrases first where one
# contains another.
_REWRITES: tuple[tuple[str, str], ...] = (
    ("check the name with fetch_metadata()", "check the name with `liftbridge-nats stream list`"),
    (
        "set_stream_readonly(..., readonly=False) reopens it",
        "`liftbridge-nats stream readonly NAME --off` reopens it",
    ),
    (
        "Make it writable (Client.set_stream_readonly(..., readonly=False)) or publish elsewhere",
        "Make it writable with `liftbridge-nats stream readonly NAME --off`, or publish elsewhere",
    ),
    (
        "if it requires TLS, pass tls=TLSConfig(...)",
        "it may require TLS, which this command line does not speak",
    ),
    ("retry or pass a larger timeout", "retry, or pass a larger --timeout"),
    (
        "the partition was paused; resume_stream() or subscribe(resume=True)",
        "the partition was paused; resume it with `liftbridge-nats stream resume` or read "
        "with --resume",
    ),
    (
        "Create the stream, resume the partition (publish_to_stream does it for you), or "
        "publish again shortly (Publisher(retry=True) does it for you).",
        "Create the stream (`liftbridge-nats stream create`), resume the partition "
        "(`liftbridge-nats stream resume`), or publish again shortly.",
    ),
    (
        "Check the stream (publish_to_stream names readonly partitions and resumes paused "
        "ones), raise the timeout, or publish again.",
        "Check the stream (`liftbridge-nats stream describe`), raise --ack-timeout, or "
        "publish again.",
    ),
    (
        "publish again with expected_offset set to it + 1",
        "publish again with --expected-offset set to it + 1",
    ),
    (
        "To allow more, create the client with a larger max_partitions",
        "To allow more, pass --max-partitions",
    ),
    ("raise max_buffered_bytes", "publish fewer messages at once (--max-inflight)"),
    # One refused message of a run, not the run: the run's counts follow the error.
    ("; nothing was sent", "; that message was not sent"),
    (
        "Connect a new client and create a new Publisher",
        "Check that NATS runs (`liftbridge-nats servers status` for the dev cluster)",
    ),
)


def cli_hints(text: str) -> str:
    """``text`` with the SDK's advice for Python callers replaced by CLI advice."""
    for sdk, cli in _REWRITES:
        if sdk in text:
            text = text.replace(sdk, cli)
    return text
