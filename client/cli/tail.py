"""``tail``: follow the broker's PUB socket, as ``mosquitto_sub`` follows a topic.

Plain ``tail`` prints every presence event (topic: the group) and every output
posted to a channel (topic ``channel:<id>``), one readable line each; ``--group G``
only that group's presence, ``--channel ID`` only that channel's outputs; ``--json``
one JSON object per line. It stops after ``--count N`` lines or ``--timeout S``
seconds (the first that comes), or at Ctrl-C.

Where the PUB socket is: ``--pub-endpoint``, else what the broker at ``--endpoint``
says in its welcome (asked on a control connection that is closed before the tail
starts, so the tail never shows it). Either way the tail first waits up to
:data:`PUB_CHECK_S` for the subscription's handshake: an endpoint where no broker
publishes (nothing there, another kind of socket, refused CURVE keys) ends the
command with one line and exit 3 instead of a silent wait.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

import zmq

from schemas.names import CHANNEL_TOPIC_PREFIX, OUTPUT, channel_topic
from schemas.paths import pub_endpoint
from schemas.protocol import unpack_frame

from .. import reach
from ..handshakes import HandshakeWatch
from ..keys import CurveKeys
from .command import Command
from .context import NO_BROKER, OK, REFUSED, USAGE, Cli, Exit

PUB_CHECK_S = 2.0
_POLL_MS = 200           # how often a tail with a deadline looks at the clock


def format_event(topic: str, event: dict) -> str:
    """One line for one presence event."""
    session = event.get("session") or {}
    stamp = time.strftime("%H:%M:%S")
    return (f"{stamp} {topic:<16} {event.get('event', '?'):<16} "
            f"{session.get('name', '?')} {session.get('id', '?')} [{session.get('status', '')}]")


def format_output(event: dict) -> str:
    """One line for one output: channel, sender, final, the content (newlines shown
    as \\n) and the attachment paths."""
    stamp = time.strftime("%H:%M:%S")
    content = str(event.get("content", "")).replace("\\", "\\\\").replace("\n", "\\n")
    paths = [a.get("path", "?") for a in event.get("attachments") or () if isinstance(a, dict)]
    line = (f"{stamp} {event.get('channel', '?')} from {event.get('fromSession', '?')} "
            f"final={str(bool(event.get('final'))).lower()}: {content}")
    return line + (f" [attachments: {', '.join(paths)}]" if paths else "")


def line_for(topic: str, event: dict, as_json: bool, channel: str | None) -> str | None:
    """The line to print for ``event`` published under ``topic``; None to skip it."""
    event = {k: v for k, v in event.items() if k not in ("v", "k")}
    if topic.startswith(CHANNEL_TOPIC_PREFIX) or channel is not None:
        if event.get("event") != OUTPUT:
            return None
        return json.dumps(event, sort_keys=True) if as_json else format_output(event)
    event.setdefault("group", topic)
    return json.dumps(event, sort_keys=True) if as_json else format_event(topic, event)


def check_publisher(sub: zmq.Socket, endpoint: str, has_keys: bool, wait_s: float) -> str | None:
    """Why nothing publishes to ``sub`` (connected to ``endpoint``), or None once its
    handshake succeeded within ``wait_s``; ``sub`` is not connected yet."""
    nobody = reach.nobody_listens(endpoint, 0.0)     # no socket file, a refused port: at once
    if nobody is not None:
        return f"nothing publishes at {endpoint} ({nobody})"
    watch = HandshakeWatch(sub, has_keys, sub.disable_monitor)
    deadline = time.monotonic() + wait_s
    try:
        sub.connect(endpoint)
        while watch.watching:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"nothing publishes at {endpoint} (no broker's PUB socket answered " \
                       f"within {wait_s:g} s)"
            refused = watch.refused(min(left, 0.1))
            if refused is not None:
                return f"the PUB socket at {endpoint} refuses this client: {refused}"
        return None
    finally:
        watch.end()


def tail(endpoint: str, group: str | None, as_json: bool, out: TextIO = sys.stdout,
         max_events: int | None = None, curve: CurveKeys | None = None,
         channel: str | None = None, timeout_s: float | None = None,
         check_s: float | None = PUB_CHECK_S) -> int:
    """Print what the PUB socket at ``endpoint`` publishes (see the module doc) until
    ``max_events`` lines, ``timeout_s`` seconds, or an interrupt. Returns the exit code.
    Raises Exit(NO_BROKER) when nothing publishes there (checked for ``check_s``),
    Exit(USAGE) for an endpoint that cannot work, Exit(REFUSED) when ``timeout_s``
    passed before ``max_events`` lines."""
    unusable = reach.problem(endpoint)
    if unusable is not None:
        raise Exit(USAGE, f"client: {unusable[1]}")
    wanted = channel_topic(channel) if channel is not None else group
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.linger = 0
    sub.rcvhwm = 0
    if curve is not None:
        sub.curve_serverkey = curve.server_key.encode()
        sub.curve_publickey = curve.public_key.encode()
        sub.curve_secretkey = curve.secret_key.encode()
    # Topics are whole names; SUB filters by prefix, so equality is checked below.
    sub.setsockopt(zmq.SUBSCRIBE, wanted.encode() if wanted else b"")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seen = 0
    try:
        if check_s is None:
            sub.connect(endpoint)
        else:
            problem = check_publisher(sub, endpoint, curve is not None, check_s)
            if problem is not None:
                raise Exit(NO_BROKER, f"client: {problem}")
        while max_events is None or seen < max_events:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not sub.poll(min(_POLL_MS, max(1, int(left * 1000)))):
                    continue
            parts = sub.recv_multipart()
            if len(parts) != 2:
                continue
            topic = parts[0].decode(errors="replace")
            if wanted is not None and topic != wanted:
                continue
            try:
                (event,) = unpack_frame(parts[1])
            except Exception:      # whatever a frame holds, the tail goes on
                continue
            line = line_for(topic, event, as_json, channel) if isinstance(event, dict) else None
            if line is not None:
                print(line, file=out, flush=True)
                seen += 1
    finally:
        sub.close()
    if max_events is not None and seen < max_events:
        raise Exit(REFUSED, f"timeout: {seen} of {max_events} lines within {timeout_s:g} s")
    return OK


def _arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--group", type=_topic_name, help="only this group's presence events")
    which.add_argument("--channel", type=_topic_name, help="only the outputs posted to this "
                       "channel id (PUB topic channel:<ID>)")
    parser.add_argument("--pub-endpoint", help="the broker's PUB endpoint (default: what the "
                        "broker at --endpoint says, else $INTERCOM_PUB_ENDPOINT)")
    parser.add_argument("--count", type=_positive_int, metavar="N", help="stop after N lines")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="stop after S seconds (with --count: exit 1 if fewer came)")


def _topic_name(text: str) -> str:
    """A group or channel to follow, trimmed as the broker trims names. An empty one is
    no topic anything is published under, so the tail would wait for nothing: refused
    at once (exit 2)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text.strip()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def run_tail(cli: Cli) -> int:
    args = cli.args
    where = args.pub_endpoint
    if where is None:
        # A control connection: no session, nothing announced, closed before the tail.
        with cli.connect(name=f"{args.name}-tail") as probe:
            where = probe.welcome.get("pubEndpoint") or pub_endpoint()
    return tail(where, args.group, cli.json, cli.out, args.count, cli.curve, args.channel,
                args.timeout)


COMMAND = Command("tail", "follow presence and channel outputs on the broker's PUB socket",
                  run_tail, _arguments)
