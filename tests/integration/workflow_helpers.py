"""Helpers for the workflow-stage integration tests (a plain module, not a test file).

A host registers a run (``register_run`` joins ``workflow:<runId>``), stage sessions
connect with ``kind="stage"`` bound to their canonical path, and everything else is
the ``intercom`` tool. ``connect`` is the fixture from tests/conftest.py (or any
callable with its signature).

Waiting rules: nothing sleeps. A session's own request round trip is the barrier for
everything it sent before on the same connection (``sync``), a live "marker" send is
the barrier for "nothing else was queued for this stage" (pre-start entries are
handed over right after the welcome, before anything sent later), and every wait on
a message or event has a deadline.
"""

from __future__ import annotations

import uuid

from schemas.errors import ERRORS

RECEIVE_S = 10.0


# -- names and answers -----------------------------------------------------------------------

def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


def path(run: str, *segments: str) -> str:
    return "/".join((f"workflow:{run}", *segments))


def ok(result: dict) -> dict:
    assert isinstance(result, dict) and result.get("ok") is True, result
    return result


def assert_refused(result: dict, code: str, text: str | None = None, *,
                   starts: bool = False) -> None:
    """A refusal with ``code`` and exactly ``text`` (with ``starts``: beginning with it,
    as a text that goes on with guidance for this caller)."""
    assert isinstance(result, dict) and result.get("ok") is False, result
    assert result.get("code") == code, result
    assert result.get("code") in ERRORS, result
    assert isinstance(result.get("error"), str) and result["error"], result
    if text is not None:
        assert result["error"].startswith(text) if starts else result["error"] == text, result


# -- sessions --------------------------------------------------------------------------------

# The grants hosts were given (stage path -> grant): what a real host hands the stage
# sessions it launches.
GRANTS: dict[str, str] = {}


def granted(result: dict) -> dict:
    """Keep the grants of a register_run / add_stages answer; returns the answer."""
    GRANTS.update(result.get("grants") or {})
    return result


def host_run(connect, stages: list[dict], name: str = "host") -> tuple:
    """A host session that registered a fresh run; returns (host, run id)."""
    host = connect(name)
    run = new_run_id()
    result = granted(ok(host.register_run(run, stages)))
    assert f"workflow:{run}" in result["groups"], result
    return host, run


def start_stage(connect, run: str, stage: str, transcript: str | None = None, **kwargs):
    """A stage session bound to ``workflow:<run>/<stage>`` (nested: "a/b"), launched
    with the grant its host got."""
    name = kwargs.pop("name", stage.rsplit("/", 1)[-1])
    kwargs.setdefault("grant", GRANTS.get(path(run, stage)))
    return connect(name, kind="stage", stage=path(run, stage),
                   transcript=transcript or f"{name}-{uuid.uuid4().hex[:6]}", **kwargs)


# -- sending and receiving -------------------------------------------------------------------

def send(session, to: str, message: str) -> dict:
    return session.intercom(action="send", to=to, message=message)


def queue(session, to: str, message: str) -> dict:
    result = ok(send(session, to, message))
    assert result.get("queued") is True, result
    return result


def send_for_id(session, to: str, message: str) -> tuple[str, dict]:
    """A send and the message id its answer names (the id a sender correlates with).

    Queued and delivered answers both carry ``messageId`` (see
    test_queued_send_answer_carries_its_message_id), so the public call suffices.
    """
    answer = ok(send(session, to, message))
    assert isinstance(answer.get("messageId"), str) and answer["messageId"], answer
    return answer["messageId"], answer


def take(session, count: int, timeout: float = RECEIVE_S) -> list[dict]:
    """The next ``count`` inbound messages (each taken into context with receive())."""
    got = []
    for _ in range(count):
        msg = session.receive(timeout)
        assert msg is not None, f"only {len(got)} of {count} messages arrived: {[m['message'] for m in got]}"
        got.append(msg)
    return got


def sync(session) -> None:
    """A round trip: the broker has handled everything this session sent before."""
    ok(session.intercom(action="status"))


def assert_nothing_queued_for(stage_session, sender, target: str) -> None:
    """The stage's next message is a live marker sent now: nothing else was owed to it."""
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    result = ok(send(sender, target, marker))
    assert result.get("delivered") is True, result
    msg = stage_session.receive(RECEIVE_S)
    assert msg is not None, "the live marker never arrived"
    assert msg["message"] == marker, f"expected only the marker, got {msg['message']!r} first"
    assert not msg.get("receivedBeforeStart"), msg


# -- list rows and events --------------------------------------------------------------------

def run_row(session, run: str) -> dict:
    rows = ok(session.intercom(action="list")).get("workflows", [])
    matching = [r for r in rows if r["runId"] == run]
    assert len(matching) == 1, rows
    return matching[0]


def stage_row(row: dict, name: str) -> dict:
    matching = [s for s in row["stages"] if s["name"] == name]
    assert len(matching) == 1, row["stages"]
    return matching[0]


def states_by_id(row: dict) -> dict[str, str]:
    return {s["messageId"]: s["state"] for s in row["deliveryStates"]}


def events_now(session) -> list[dict]:
    """Every event the broker sent ``session`` before answering a round trip now."""
    sync(session)
    events = []
    while (event := session.next_event(0)) is not None:
        events.append(event)
    return events


def undeliverable(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("event") == "undeliverable"]
