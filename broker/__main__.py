"""``python -m broker``: start a broker with its database in the data directory."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # structlog imports its optional pretty-printers whenever they are installed (rich
    # with pygments and attrs, colorama, better_exceptions): about a fifth of the CPU a
    # broker spends before it serves. It renders JSON lines, or plain text on a
    # terminal, and needs none of them, so this process does not import them.
    for _optional in ("rich", "colorama", "better_exceptions"):
        sys.modules.setdefault(_optional, None)

import argparse  # noqa: E402  (after the guard above, as everything below)
import signal  # noqa: E402
from pathlib import Path  # noqa: E402

from schemas.bounds import BOUNDS
from schemas.config import load_config
from schemas.limits import ADOPT_GRACE_S, LEASE_S, LIVENESS_S, MIN_LIVENESS_S, RECLAIM_WINDOW_S
from schemas.paths import data_dir, database_path, ensure_data_dir, pub_endpoint, router_endpoint

from .core import Limits
from .logs import configure, get_logger
from .curve import create_keys
from .server import Broker, BrokerSettings, StartupError
from .startup import remove_pid_file, write_pid_file
from broker.store.urls import is_postgres


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m broker",
                                     description="Run the Intercom bus broker.")
    parser.add_argument("--data-dir", type=Path, help="directory for sockets and database "
                        "(default $INTERCOM_DATA_DIR or ~/.intercom)")
    parser.add_argument("--endpoint", help="ROUTER endpoint (default $INTERCOM_ENDPOINT or "
                        "ipc://<data-dir>/broker.sock)")
    parser.add_argument("--pub-endpoint", help="PUB endpoint for presence (default "
                        "$INTERCOM_PUB_ENDPOINT or ipc://<data-dir>/presence.sock)")
    parser.add_argument("--db", help="the database: a SQLite file, or postgresql://USER@HOST:PORT/DB "
                        "for brokers on several hosts (default $INTERCOM_DB, the config file's "
                        "db, else <data-dir>/intercom.db)")
    parser.add_argument("--db-schema", metavar="NAME", help="PostgreSQL: the bus's schema in the "
                        "database, one per bus (default the URL's ?schema=, else intercom)")
    parser.add_argument("--advertise", metavar="tcp://HOST:PORT", help="the endpoint other brokers "
                        "and redirected clients reach this one at (default: --endpoint, unless "
                        "it binds a wildcard)")
    parser.add_argument("--config", type=Path, help="intercom config.json (default "
                        "~/.atomic/agent/intercom/config.json, then ~/.pi/agent/intercom/config.json)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])
    parser.add_argument("--curve", type=Path, metavar="DIR",
                        help="CURVE keys made by 'python -m broker keys --dir DIR': the broker's "
                        "pair, and the allowed clients' public keys in DIR/clients (SIGHUP re-reads them)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a TCP endpoint beyond loopback without CURVE (logged, shown in status)")
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"],
                        help="SQLite synchronous mode (FULL survives power loss too); PostgreSQL "
                        "commits as its server's synchronous_commit says")
    parser.add_argument("--lease-s", type=_positive_float, default=LEASE_S, metavar="SECONDS",
                        help="the lease of this broker's row in the database and of host "
                        f"sessions (default {LEASE_S:g}); the two flags below override one each")
    parser.add_argument("--host-lease-s", type=_positive_float, metavar="SECONDS",
                        help="how long a run whose host left stays as it was before it is "
                        "dormant (default: --lease-s)")
    parser.add_argument("--broker-lease-s", type=_positive_float, metavar="SECONDS",
                        help="this broker's lease row in the database, renewed every third of it; "
                        "other brokers on the database count it live until it ends "
                        "(default: --lease-s)")
    parser.add_argument("--liveness-s", type=_liveness, default=LIVENESS_S, metavar="SECONDS",
                        help="a session or a linked broker silent this long is gone (default "
                        f"{LIVENESS_S:g}, at least {MIN_LIVENESS_S:g}); clients learn it from the "
                        "welcome and heartbeat every third of it; brokers on one database "
                        "should share it")
    parser.add_argument("--reclaim-window-s", type=_positive_float, default=RECLAIM_WINDOW_S,
                        metavar="SECONDS", help="how long the messages a session's client had "
                        "not acknowledged wait for it after it ended (a client that takes its id "
                        "back gets them) before their senders are told undelivered (default "
                        f"{RECLAIM_WINDOW_S:g})")
    parser.add_argument("--adopt-grace-s", type=_positive_float, default=ADOPT_GRACE_S,
                        metavar="SECONDS", help="how long a dead broker's workflow runs wait "
                        "for their host to fail over to some broker, which then takes them, "
                        f"before any broker does (default {ADOPT_GRACE_S:g})")
    parser.add_argument("--exit-when-idle", type=_positive_float, metavar="SECONDS",
                        help="stop after SECONDS without a session of its own (how a broker "
                        "a client started by itself ends; default: serve until stopped)")
    parser.add_argument("--metrics-port", type=_port, metavar="PORT",
                        help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics (0: a "
                        "free port, logged; needs the 'metrics' extra; default: off)")
    parser.add_argument("--pid-file", type=Path, metavar="PATH",
                        help="write this process's pid there once serving; removed at exit")
    limits = parser.add_argument_group("limits", "what one client may make the broker hold "
                                       "(also config fields; see docs/operations.md)")
    for bound in BOUNDS:
        limits.add_argument(bound.flag, dest=bound.field, type=_positive_int, metavar="N",
                            help=f"{bound.meaning} (default {bound.default}; refused with {bound.code})")
    return parser.parse_args(argv)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535, got {text!r}")
    return int(text)
def _liveness(text: str) -> float:
    value = _positive_float(text)
    if value < MIN_LIVENESS_S:
        raise argparse.ArgumentTypeError(f"expected at least {MIN_LIVENESS_S:g} seconds, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def limits_from(args: argparse.Namespace, config) -> Limits:
    """The bounds in force: a flag beats the config file, which beats the default."""
    chosen = {bound.field: getattr(args, bound.field) or getattr(config, bound.config)
              for bound in BOUNDS}
    return Limits(max_pending_asks=config.maxPendingAsks, ask_timeout_s=config.askTimeout,
                  host_lease_s=args.host_lease_s or args.lease_s, liveness_s=args.liveness_s,
                  adopt_grace_s=args.adopt_grace_s, reclaim_window_s=args.reclaim_window_s,
                  **chosen)


def database_from(args: argparse.Namespace, config, base: Path) -> Path | str:
    """The database in force: --db beats $INTERCOM_DB, which beats the config file's
    ``db``, which beats <data-dir>/intercom.db. A PostgreSQL URL stays text."""
    chosen = args.db or os.environ.get("INTERCOM_DB") or config.db
    if chosen is None:
        return database_path(base)
    return chosen if is_postgres(chosen) else Path(chosen).expanduser()


def refuse(problem: str) -> int:
    """Report a start that cannot happen: one plain line a person can act on (no
    traceback, no log record to parse) and exit status 2."""
    print(f"broker: {problem}", file=sys.stderr)
    return 2


def keys_main(argv: list[str]) -> int:
    """``python -m broker keys --dir DIR [--client NAME ...] [--force]``."""
    parser = argparse.ArgumentParser(prog="python -m broker keys",
                                     description="Create the CURVE key pairs of the broker and its "
                                     "clients that are missing; existing pairs are kept.")
    parser.add_argument("--dir", type=Path, required=True, help="where to write the keys")
    parser.add_argument("--client", action="append", metavar="NAME",
                        help="a client key pair to create (repeatable; default: one named 'client')")
    parser.add_argument("--force", action="store_true",
                        help="replace existing pairs too (every client holding one must get the new one)")
    args = parser.parse_args(argv)
    try:
        for done, path in create_keys(args.dir.expanduser(), args.client or ["client"], args.force):
            note = {"kept": " (exists; --force replaces it)",
                    "replaced": " (the old pair no longer works)"}.get(done, "")
            print(f"{done} {path}{note}")
    except OSError as exc:
        return refuse(f"cannot write keys in {args.dir}: {exc.strerror or exc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:
        return keys_main(argv[1:])
    args = parse_args(argv)
    configure(args.log_level)
    log = get_logger("broker")
    base = args.data_dir.expanduser() if args.data_dir else data_dir()
    try:
        ensure_data_dir(base)
    except OSError as exc:
        return refuse(f"cannot create the data directory {base}: {exc.strerror or exc}; "
                      "pass --data-dir with a directory this user can write")
    config, problem = load_config(args.config)
    if problem:
        log.error("config_rejected", error=problem)
    db = database_from(args, config, base)
    if args.db_schema and not is_postgres(db):
        return refuse(f"--db-schema names a PostgreSQL schema, but the database is the SQLite "
                      f"file {db}; pass a postgresql:// --db, or drop --db-schema")
    settings = BrokerSettings(
        endpoint=args.endpoint or router_endpoint(base=base),
        pub_endpoint=args.pub_endpoint or pub_endpoint(base=base),
        db_path=db,
        db_schema=args.db_schema,
        advertise=args.advertise,
        limits=limits_from(args, config),
        synchronous=args.sync,
        curve_dir=args.curve.expanduser() if args.curve else None,
        insecure=args.insecure,
        data_dir=base,
        broker_lease_s=args.broker_lease_s or args.lease_s,
        exit_when_idle_s=args.exit_when_idle,
        metrics_port=args.metrics_port,
    )
    try:
        broker = Broker(settings)
    except StartupError as exc:
        return refuse(str(exc))
    if args.pid_file is not None:
        try:
            write_pid_file(args.pid_file)
        except StartupError as exc:
            broker.close()
            return refuse(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: broker.stop())
    signal.signal(signal.SIGINT, lambda *_: broker.stop())
    signal.signal(signal.SIGHUP, lambda *_: broker.reload())
    try:
        broker.serve_forever()
    finally:
        broker.close()
        if args.pid_file is not None:
            remove_pid_file(args.pid_file)
    log.info("broker_stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
