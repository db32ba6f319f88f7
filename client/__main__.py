"""``python -m client``: the command line for people and scripts.

``tail`` follows presence on the broker's PUB socket (``tail --channel ID``: the
outputs posted to one channel); ``list``, ``groups``, ``status``, ``send`` and ``ask``
run one intercom call and print the result as JSON; ``sessions --agent A`` lists an
agent's conversations; ``mcp`` serves MCP over stdio as one bus session (see
:mod:`client.mcp_server`). Everything that only looks (``list``, ``groups``, ``status``,
``sessions``, and ``tail``'s question for the PUB endpoint) uses a control connection
(see broker.core.sessions.control): it is listed to nobody, announces no presence and consumes
nothing. ``send`` and ``ask`` still open a short-lived session of their own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import zmq

from schemas.errors import error_reply
from schemas.names import CONTROL, CONTROL_ACTIONS, INTERACTIVE
from schemas.paths import pub_endpoint
from schemas.protocol import unpack_frame

from . import keys, stats_view, top
from .keys import CurveKeys
from .connecting import Client
from .session import ConnectError


def format_event(topic: str, event: dict) -> str:
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


def tail(endpoint: str, group: str | None, as_json: bool, out=sys.stdout,
         max_events: int | None = None, curve: CurveKeys | None = None,
         channel: str | None = None) -> int:
    """Print presence events (or, with ``channel``, that channel's outputs) as they
    happen until interrupted (or ``max_events``)."""
    topic_wanted = f"channel:{channel}" if channel is not None else group
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.rcvhwm = 0
    if curve is not None:
        sub.curve_serverkey = curve.server_key.encode()
        sub.curve_publickey = curve.public_key.encode()
        sub.curve_secretkey = curve.secret_key.encode()
    sub.connect(endpoint)
    # Topics are whole group names; SUB filters by prefix, so check equality here.
    sub.setsockopt(zmq.SUBSCRIBE, topic_wanted.encode() if topic_wanted else b"")
    seen = 0
    try:
        while max_events is None or seen < max_events:
            parts = sub.recv_multipart()
            if len(parts) != 2:
                continue
            topic = parts[0].decode(errors="replace")
            if topic_wanted is not None and topic != topic_wanted:
                continue
            try:
                (event,) = unpack_frame(parts[1])
            except Exception:
                continue
            event = {k: v for k, v in event.items() if k not in ("v", "k")}
            if channel is not None:
                if event.get("event") != "output":
                    continue
                line = json.dumps(event, sort_keys=True) if as_json else format_output(event)
            else:
                event.setdefault("group", topic)
                line = json.dumps(event, sort_keys=True) if as_json else format_event(topic, event)
            print(line, file=out, flush=True)
            seen += 1
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    return 0


def _keys(curve: CurveKeys | None) -> dict:
    return {} if curve is None else {"curve_server_key": curve.server_key,
                                     "curve_public_key": curve.public_key,
                                     "curve_secret_key": curve.secret_key}


def broker_pub_endpoint(args: argparse.Namespace, curve: CurveKeys | None) -> str | None:
    """Where the broker at ``--endpoint`` (or the default) publishes: its welcome says.
    Prints one line and returns None when no broker answers."""
    try:
        # A control connection (a look, no session), and no broker started for it: a
        # subscriber is no session, so it would not keep one alive.
        with Client.connect(name=f"{args.name}-tail", endpoint=args.endpoint, kind=CONTROL,
                            auto_start=False,
                            **_keys(curve)) as probe:
            return probe.welcome.get("pubEndpoint") or pub_endpoint()
    except ConnectError as exc:
        print(f"client: {exc}", file=sys.stderr)
        return None


def one_call(args: argparse.Namespace, params: dict, curve: CurveKeys | None) -> int:
    """One intercom call: a read on a control connection, anything else as a session."""
    kind = CONTROL if params["action"] in CONTROL_ACTIONS else INTERACTIVE
    try:
        session = Client.connect(name=args.name, endpoint=args.endpoint, group=args.as_group,
                                 kind=kind, **_keys(curve))
    except ConnectError as exc:
        print(json.dumps({"ok": False, "code": exc.code, "error": str(exc)}))
        return 1
    with session:
        result = session.intercom(**params)
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result.get("ok") else 1


def list_sessions(args: argparse.Namespace, curve: CurveKeys | None) -> int:
    """Print ``--agent``'s conversations (with ``--channel``: that one's row), read on a
    control connection: it joins no conversation and takes no invocation."""
    try:
        session = Client.connect(name=args.name, endpoint=args.endpoint, group=args.as_group,
                                 kind=CONTROL, **_keys(curve))
    except ConnectError as exc:
        print(json.dumps({"ok": False, "code": exc.code, "error": str(exc)}))
        return 1
    with session:
        result = session.list_sessions(agent=args.agent)
    if result.get("ok") and args.channel is not None:
        rows = [row for row in result["sessions"] if row.get("session") == args.channel]
        result = ({"ok": True, "sessions": rows} if rows else
                  error_reply("channel_not_found", channel=args.channel, agent=args.agent))
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result.get("ok") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client", description="Intercom bus client.")
    parser.add_argument("--endpoint", help="broker ROUTER endpoint (default $INTERCOM_ENDPOINT)")
    parser.add_argument("--name", default="cli", help="session name for one-shot calls")
    parser.add_argument("--as-group", help="home group of the one-shot session")
    parser.add_argument("--curve-dir", help="CURVE keys made by 'python -m broker keys' "
                        "(default: $INTERCOM_CURVE_* keys, else no CURVE)")
    parser.add_argument("--curve-client", default="client",
                        help="which client key pair under CURVE_DIR/clients (default: client)")
    sub = parser.add_subparsers(dest="command", required=True)
    p_tail = sub.add_parser("tail", help="follow presence events")
    which = p_tail.add_mutually_exclusive_group()
    which.add_argument("--group", help="only this group")
    which.add_argument("--channel", help="print the outputs posted to this channel id "
                       "(PUB topic channel:<ID>) instead of presence")
    p_tail.add_argument("--json", action="store_true", help="print JSON lines")
    p_tail.add_argument("--pub-endpoint", help="broker PUB endpoint (default $INTERCOM_PUB_ENDPOINT)")
    for action in ("list", "groups", "status"):
        p = sub.add_parser(action, help=f"intercom {action}")
        if action != "groups":
            p.add_argument("--group")
    for action in ("send", "ask"):
        p = sub.add_parser(action, help=f"intercom {action}")
        p.add_argument("to")
        p.add_argument("message")
    p_sessions = sub.add_parser("sessions", help="an agent's conversations (respond/invoke)")
    p_sessions.add_argument("--agent", required=True)
    p_sessions.add_argument("--channel", help="only this conversation's row (read-only: "
                            "nothing is joined or consumed)")
    p_mcp = sub.add_parser("mcp", help="serve MCP over stdio: this process is one bus session")
    p_mcp.add_argument("--name", required=True, help="the session's name")
    p_mcp.add_argument("--endpoint", default=argparse.SUPPRESS, help="broker ROUTER endpoint "
                       "(default: $INTERCOM_ENDPOINT, else the data directory's, started if none runs)")
    p_mcp.add_argument("--group", help="home group")
    p_mcp.add_argument("--agent", help="be a conversation of this agent (respond, invoke)")
    p_mcp.add_argument("--channel", help="with --agent: the conversation's channel id")
    p_mcp.add_argument("--history-file", help="history JSON lines (default <data dir>/mcp/NAME.jsonl)")
    p_mcp.add_argument("--no-push", action="store_true",
                       help="send no notifications/claude/channel pushes")
    for command in (stats_view, top):       # commands in modules of their own
        command.add_parser(sub)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is not None:
        return args.run(args)
    if args.command == "mcp":
        from .mcp_server import main as serve_mcp   # the optional 'mcp' extra
        return serve_mcp(args)
    try:
        curve = (keys.from_directory(args.curve_dir, args.curve_client) if args.curve_dir
                 else keys.resolve())
    except ValueError as exc:
        print(f"client: {exc}", file=sys.stderr)
        return 2
    if args.command == "tail":
        where = args.pub_endpoint or broker_pub_endpoint(args, curve)
        if where is None:
            return 2
        return tail(where, args.group, args.json, curve=curve, channel=args.channel)
    if args.command == "sessions":
        return list_sessions(args, curve)
    params = {"action": args.command}
    for key in ("group", "to", "message"):
        if getattr(args, key, None) is not None:
            params[key] = getattr(args, key)
    return one_call(args, params, curve)


if __name__ == "__main__":
    sys.exit(main())
