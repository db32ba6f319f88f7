"""The conformance driver of the Python client: JSON lines in, JSON lines out.

Each input line is a command ``{"id", "cmd", "session", "args"}`` (see
``tests/conformance/README.md``); each output line answers one command by its id:
``{"id", "result"}``, or ``{"id", "crash"}`` when the driver itself failed. Commands
run on their own threads, so a blocking ``ask`` does not hold up the others; the
runner waits for each answer before its next step unless a step is asynchronous.
Argument names are the language-neutral camelCase of the scenario files.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from client import Client, ConnectError  # noqa: E402

_sessions: dict[str, object] = {}
_histories: dict[str, list[dict]] = {}
_out = threading.Lock()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def connect(session: str, args: dict) -> dict:
    history = _histories.setdefault(session, [])
    kwargs = {_snake(k): v for k, v in args.items()}
    try:
        opened = Client.connect(history=history.append, **kwargs)
    except ConnectError as exc:
        return {"ok": False, "code": exc.code, "error": str(exc)}
    _sessions[session] = opened
    return {"ok": True, "id": opened.id, "welcome": opened.welcome}


def _host(method: str, *names: str, **options: str):
    def call(s, args):
        positional = [args.get(name) for name in names]
        keywords = {snake: args[camel] for camel, snake in options.items() if camel in args}
        return getattr(s, method)(*positional, **keywords)
    return call


COMMANDS = {
    "intercom": lambda s, a: s.intercom(**a),
    "receive": lambda s, a: s.receive(a.get("timeout")),
    "next_event": lambda s, a: s.next_event(a.get("timeout")),
    "respond": lambda s, a: s.respond(**a),
    "invoke": lambda s, a: s.invoke(a.get("session"), a.get("reason")),
    "grant_child": lambda s, a: s.grant_child(),
    "register_run": _host("register_run", "runId", "stages", postMortem="post_mortem"),
    "add_stages": _host("add_stages", "runId", "stages", "parent"),
    "set_stage_state": _host("set_stage_state", "runId", "stage", "state"),
    "end_run": _host("end_run", "runId"),
    "set_status": lambda s, a: s.set_status(a["status"]),
    "receipt": lambda s, a: s.receipt(a.get("messageId")),
    "mark_seen": lambda s, a: s.mark_seen(a.get("messageId")),
    "contact_supervisor": lambda s, a: s.contact_supervisor(a.get("message"), a.get("attachments"),
                                                            a.get("timeout")),
    "close": lambda s, a: s.close(),
}


def run(request: dict) -> None:
    try:
        cmd, session, args = request["cmd"], request.get("session"), request.get("args") or {}
        if cmd == "connect":
            result = connect(session, args)
        elif cmd == "history":
            result = list(_histories.get(session, []))
        else:
            result = COMMANDS[cmd](_sessions[session], args)
        line = json.dumps({"id": request["id"], "result": result}, ensure_ascii=False)
    except Exception:
        line = json.dumps({"id": request.get("id"), "crash": traceback.format_exc()})
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            threading.Thread(target=run, args=(json.loads(line),), daemon=True).start()
    for opened in list(_sessions.values()):
        opened.close()


if __name__ == "__main__":
    main()
