"""``Client.connect``: from what the caller gives (endpoints, identity, CURVE keys,
config) to a connected :class:`~client.session.Session`, failing fast when no broker
listens (see :mod:`client.reach`)."""

from __future__ import annotations

import logging
import os
from typing import Callable

from schemas.attention import HOST, INBOUND_POLICIES
from schemas.config import Config, load_config
from schemas.errors import error_text
from schemas.limits import CALL_TIMEOUT_S, MAX_CWD_CHARS
from schemas.paths import data_dir, router_endpoint
from schemas.names import CONTROL
from schemas.protocol import SESSION_KINDS

from . import autostart, reach
from .history import History
from .inbox import DEFAULT_LIMIT_BYTES
from .keys import resolve as resolve_keys
from .session import ConnectError, Session

_log = logging.getLogger("intercom.client")
_reported_config_problems: set[str] = set()


def endpoint_list(endpoint: str | list[str] | tuple[str, ...]) -> list[str]:
    """Endpoints to try in turn: a list, or text with commas (``INTERCOM_ENDPOINT``)."""
    parts = endpoint.split(",") if isinstance(endpoint, str) else list(endpoint)
    endpoints = [part.strip() for part in parts if part and part.strip()]
    if not endpoints:
        raise ValueError("endpoint names no broker")
    return endpoints


def working_directory(cwd: str | os.PathLike | None = None) -> str | None:
    """What a session says its working directory is: ``cwd``, else this process's;
    None when there is none to say (deleted, or past the hello's bound). Bytes that
    are not UTF-8 are replaced, so the hello can always be encoded."""
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:           # the directory was removed under the process
            return None
    cwd = os.fspath(cwd)
    try:
        raw = cwd.encode("utf-8", "surrogateescape")   # undecodable bytes of a path
    except UnicodeEncodeError:
        raw = cwd.encode("utf-8", "surrogatepass")     # any other lone surrogate
    cwd = raw.decode("utf-8", "replace")
    return cwd if len(cwd) <= MAX_CWD_CHARS else None


def listening_first(endpoints: list[str], grace_s: float) -> list[str]:
    """``endpoints`` turned to start with the first one where a broker listens.

    Raises ConnectError: ``unknown_host`` when none listens and a host name among
    them does not resolve, else ``no_broker``."""
    nobody = unknown = None
    for index, one in enumerate(endpoints):
        lookup = reach.unresolved(one, grace_s)
        if lookup is not None:
            unknown = unknown or lookup
            continue
        nobody = reach.nobody_listens(one, grace_s)
        if nobody is None:   # start with the first broker that listens
            return endpoints[index:] + endpoints[:index]
    if unknown is not None:
        raise ConnectError(*unknown)
    raise ConnectError("no_broker", error_text("no_broker", endpoint=",".join(endpoints),
                                               detail=nobody))


class Client:
    """Entry point: ``Client.connect(name=...)`` returns a connected :class:`Session`."""

    @staticmethod
    def connect(name: str, endpoint: str | None = None, group: str | None = None,
                agent: str | None = None, atomic_session_id: str | None = None,
                kind: str = "interactive", parent: str | Session | None = None, *,
                session_id: str | None = None, stage: str | None = None,
                transcript: str | None = None, notify_undeliverable: bool = True,
                config: Config | None = None, config_path: str | None = None,
                confirm: Callable[[dict], bool] | None = None,
                timeout: float = CALL_TIMEOUT_S, grant: str | None = None,
                identity: dict | None = None,
                history: Callable[[dict], None] | None = None,
                history_file: str | os.PathLike | None = None,
                curve_server_key: str | None = None, curve_public_key: str | None = None,
                curve_secret_key: str | None = None,
                inbox_limit_bytes: int = DEFAULT_LIMIT_BYTES, channel: str | None = None,
                persistent: bool = True, cwd: str | os.PathLike | None = None,
                auto_start: bool = True, act_for: dict | None = None,
                keep_until: str = "read", capabilities: dict | None = None,
                inbound: str | None = None, guard: bool | dict | None = None) -> Session:
        """Open a session and wait for the broker's welcome.

        ``endpoint`` is one broker's ROUTER endpoint or several (a list, or text with
        commas, as ``INTERCOM_ENDPOINT`` may hold): brokers sharing one database. The
        session starts on the first that listens and, when that broker goes silent,
        says hello to the next in turn with its id, reclaim secret and memberships.

        ``session_id`` asks for a previous id back (granted when no live session holds
        it and, if the broker remembers its last holder, this is the same Atomic
        session). A workflow stage connects with ``kind="stage"`` and ``stage`` set to
        its canonical path ``workflow:<runId>/<stage>[/<child>...]``; ``transcript``
        names its conversation (the same one again means no duplicate pre-start
        messages). ``grant`` is what the launcher handed over: a stage's grant from
        ``register_run``/``add_stages``, or a child's from ``grant_child`` (with
        ``parent``). ``identity`` is an ``intercom_session_identity`` history entry: the
        session asks for that id back with its reclaim secret (``session.welcome``
        says ``reclaimed`` and, if not, ``reason``). ``history`` (a callable) and
        ``history_file`` (JSON lines) receive the history entries (see
        :mod:`client.history`). ``curve_*`` (z85 text, or the ``INTERCOM_CURVE_*``
        environment) turn on CURVE. ``inbox_limit_bytes`` bounds what waits for
        ``receive()`` (see :meth:`Session.inbox_statistics`; 0: no bound): past it the
        session stops reading from the broker until messages are taken. Raises ConnectError when the broker refuses
        (``.code``: ``grant_required``, ``invalid_grant``, ``auth_failed``, ...) or does
        not answer, and ValueError for a bad ``kind``, incomplete CURVE keys, or
        ``act_for`` without ``kind="control"``.

        With ``agent``, the session is one conversation of that agent: ``channel`` its
        channel id (``discord:...``, ``remote:...``; default ``internal:<session id>``),
        ``persistent`` whether the broker keeps its record after it leaves (see
        :meth:`Session.respond`, :meth:`Session.invoke`).

        With no ``endpoint`` and no ``$INTERCOM_ENDPOINT`` (the default endpoint in the
        data directory), a client that finds no broker starts one (see
        :mod:`client.autostart`) unless ``auto_start`` is False; an explicit endpoint
        never starts one, and fails at once with ``no_broker``.

        ``cwd`` is the working directory other sessions see in this one's ``list`` row
        (default: this process's, ``os.getcwd()``).

        ``kind="control"`` opens a control connection that no other session lists,
        hears of or can message, and that is never a conversation (no ``agent``,
        ``channel``, ``stage``, ``parent`` or ``grant``): it reads (``list``,
        ``groups``, ``status``, ``list_sessions(agent=...)``, the operator's
        ``overview()``) and sends and asks as itself. With ``act_for`` (a live
        session's ``intercom_session_identity`` entry) it makes ``reply``,
        ``pending``, ``join`` and ``leave`` for that session; see
        ``broker.core.sessions.control``.

        ``keep_until`` says when the broker may forget a live message sent to this
        session: ``"read"`` (default; this client has it) or ``"seen"`` (the program
        took it: :meth:`Session.receive` or, with ``keep_until="seen"``, an explicit
        :meth:`Session.mark_seen`). Until then a message is sent again when the session
        comes back after a blip, a failover or a restart of this process with the same
        ``identity`` (see :meth:`Session.receipt`).

        ``capabilities`` says how a message reaches the agent behind this session
        (``push``, ``hooks``, ``steer``, ``host``; ``host`` defaults to ``python``), shown
        in list rows; ``inbound`` sets its gate for messages from other sessions
        (``accept``, ``hold``, ``refuse``; see :mod:`client.attention`); ``guard``
        turns on the flood and loop guard for its sends (``True``: the defaults of
        :mod:`schemas.attention`, or ``{"perMinute", "exchanges", "pauseS"}``).
        """
        if keep_until not in ("read", "seen"):
            raise ValueError("keep_until must be 'read' or 'seen'")
        if inbound is not None and inbound not in INBOUND_POLICIES:
            raise ValueError(f"inbound must be one of {', '.join(INBOUND_POLICIES)}")
        if kind not in SESSION_KINDS:
            raise ValueError(f"kind must be one of {', '.join(SESSION_KINDS)}")
        if act_for is not None and kind != CONTROL:
            raise ValueError("act_for is for control connections (kind='control')")
        if config is None:
            config, problem = load_config(config_path)
            if problem and problem not in _reported_config_problems:
                _reported_config_problems.add(problem)     # once per process, not per session
                _log.error("%s", problem)
        if isinstance(parent, Session):
            parent = parent.id
        token = None
        if identity is not None:
            session_id = identity.get("sessionId") or session_id
            token = identity.get("reclaimSecret")
            atomic_session_id = atomic_session_id or identity.get("atomicSessionId")
        curve = resolve_keys(curve_server_key, curve_public_key, curve_secret_key)
        auto = auto_start and endpoint is None and not os.environ.get("INTERCOM_ENDPOINT")
        endpoints = endpoint_list(endpoint or router_endpoint())
        for one in endpoints:
            unusable = reach.problem(one)
            if unusable is not None:
                raise ConnectError(*unusable)
        try:
            # A broker it would start itself is not waited for: it is started at once.
            endpoints = listening_first(endpoints, 0.0 if auto else min(reach.GRACE_S, timeout))
        except ConnectError as exc:
            if not auto or exc.code != "no_broker":
                raise
            autostart.ensure_broker(endpoints[0], data_dir(), config, timeout, config_path)
        endpoint = endpoints if len(endpoints) > 1 else endpoints[0]
        session = Session(name=name, endpoint=endpoint, group=group,
                          agent=agent, atomic_session_id=atomic_session_id, kind=kind,
                          parent=parent, config=config, session_id=session_id, stage=stage,
                          transcript=transcript, notify_undeliverable=notify_undeliverable,
                          confirm=confirm, grant=grant, token=token,
                          history=History(history, history_file), curve=curve,
                          inbox_limit_bytes=inbox_limit_bytes, channel=channel,
                          persistent=persistent, cwd=working_directory(cwd),
                          act_for=act_for, keep_until=keep_until,
                          capabilities={HOST: "python", **(capabilities or {})}
                          if kind != CONTROL else None,
                          inbound=inbound, guard=guard)
        session._wait_welcome(timeout)
        return session




__all__ = ["Client", "endpoint_list"]
