"""What a broker checks and takes before it serves: its ipc locks, its exposure, its
database files' modes, its bound sockets. Each failure is a :class:`StartupError` with
one line a person can act on.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

import zmq

from schemas.endpoints import endpoint_problem
from schemas.limits import MAX_FRAME_BYTES

from .curve import CurveServer, exposed


class StartupError(Exception):
    """The broker cannot start; the message says why in words a person can act on."""


def lock_ipc(endpoint: str) -> int | None:
    """Refuse to start when another broker serves the same ipc path; returns the lock's
    file descriptor (held while the broker lives), None for a non-ipc endpoint.

    Binding an ipc path that is in use silently steals it from the running broker, so
    a lock file beside the socket decides first."""
    if not endpoint.startswith("ipc://"):
        return None
    lock_path = endpoint[len("ipc://"):] + ".lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StartupError(f"cannot create {lock_path}: {exc.strerror}; make its directory "
                           "writable for this user, or pass another --data-dir") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StartupError(f"another broker (pid {holder}) is already serving {endpoint}") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


DB_SUFFIXES = ("", "-wal", "-shm")   # the database file and SQLite's WAL companions


def own_database(path: Path, insecure: bool, warnings: list[str]) -> list[str]:
    """Make sure the database at ``path`` is owner-only before SQLite opens it, wherever
    it lives (``--db`` may be outside the data directory): it holds the grant key,
    drafts and recovered responses. Returns one note per file it tightened.

    A missing file is created 0600 whatever the umask; SQLite gives the ``-wal`` and
    ``-shm`` files it creates the database file's mode. A file (or ``-wal``/``-shm``)
    whose mode lets others read or write it:

    * in a directory others cannot enter (the data directory is 0700: an older broker
      left its files 0644 there), nobody else could reach it: it is made 0600 and noted;
    * in a directory others can enter, it was exposed: the start stops with one line
      saying what to do, unless ``--insecure`` (then it is used as it is and a warning
      is added to ``warnings``).

    Raises StartupError."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError:
        return []    # the store's own open names the problem (directory, read-only ...)
    hidden = not stat.S_IMODE(os.stat(path.parent).st_mode) & 0o011
    notes = []
    for name in (f"{path}{suffix}" for suffix in DB_SUFFIXES):
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except FileNotFoundError:
            continue
        if not mode & 0o077:
            continue
        problem = f"database file {name} is open to other users (mode {mode:04o})"
        if not hidden:
            if not insecure:
                raise StartupError(f"{problem} and holds the grant key and drafts; run "
                                   f"'chmod 600 {path}*', or pass --insecure to accept the risk")
            warnings.append(f"insecure: {problem}")
            continue
        try:
            os.chmod(name, mode & 0o700)
        except OSError as exc:
            raise StartupError(f"{problem} and cannot be made owner-only: {exc.strerror}; "
                               f"run 'chmod 600 {path}*'") from None
        notes.append(f"database file {name} was mode {mode:04o}; made it {mode & 0o700:04o}")
    return notes


def advertised_endpoint(settings, warnings: list[str]) -> str:
    """The ROUTER endpoint other brokers and redirected clients are told (in the lease
    row, link hellos and redirects): ``--advertise``, else the bind. A wildcard bind
    advertised as it is reaches nobody on another host: a warning says so.

    Raises StartupError for an advertised endpoint a client could not connect to."""
    if settings.advertise:
        why = endpoint_problem(settings.advertise)
        if why is not None:
            raise StartupError(f"cannot advertise {settings.advertise!r}: {why}")
        return settings.advertise
    host = settings.endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]") \
        if settings.endpoint.startswith("tcp://") else ""
    if host in WILDCARD_HOSTS:
        warnings.append(f"{settings.endpoint} binds every address, so brokers on other hosts "
                        "and redirected clients cannot reach it by that name; pass "
                        "--advertise tcp://HOST:PORT")
    return settings.endpoint


WILDCARD_HOSTS = ("*", "0.0.0.0", "::")


def check_exposure(settings, curve: bool, warnings: list[str]) -> None:
    """A bind beyond loopback, or an advertised endpoint beyond it, needs CURVE, or the
    operator's explicit --insecure (then a warning is added to ``warnings``)."""
    open_to = [e for e in (settings.endpoint, settings.pub_endpoint, settings.advertise)
               if e and exposed(e)]
    if not open_to or curve:
        return
    if not settings.insecure:
        raise StartupError(f"{open_to[0]} listens beyond this host without authentication; "
                           "create keys with 'python -m broker keys --dir DIR' and start with "
                           "--curve DIR (or pass --insecure to accept the risk)")
    warnings.append(f"insecure: {', '.join(open_to)} accepts unauthenticated clients "
                    "from the network (started with --insecure)")


def bind(ctx: zmq.Context, endpoint: str, pub_endpoint: str,
         curve: CurveServer | None) -> tuple[zmq.Socket, zmq.Socket]:
    """The ROUTER and PUB sockets, bound (CURVE servers when ``curve``).

    Raises StartupError for an endpoint that is not one (before anything is bound)."""
    for where in (endpoint, pub_endpoint):
        why = endpoint_problem(where, bind=True)
        if why is not None:
            raise StartupError(f"cannot bind {where!r}: {why}")
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.sndhwm = 100_000
    router.rcvhwm = 100_000
    # Frames past the limit get an error reply; far past it, libzmq drops the peer
    # before allocating the frame.
    router.maxmsgsize = MAX_FRAME_BYTES * 4
    pub = ctx.socket(zmq.PUB)
    pub.linger = 0
    pub.sndhwm = 100_000
    if curve is not None:
        curve.secure(router)
        curve.secure(pub)
    # ipc socket files are owner-only whatever the umask (set for the bind, checked after).
    old_umask = os.umask(0o177)
    try:
        for sock, where in ((router, endpoint), (pub, pub_endpoint)):
            try:
                sock.bind(where)
            except zmq.ZMQError as exc:
                router.close(0)
                pub.close(0)
                if exc.errno == zmq.EADDRINUSE:
                    raise StartupError(f"{where} is already in use (another broker?)") from None
                raise StartupError(f"cannot bind {where}: {exc.strerror}") from None
            if where.startswith("ipc://"):
                os.chmod(where[len("ipc://"):], 0o600)
    finally:
        os.umask(old_umask)
    return router, pub


def remove_ipc_files(*endpoints: str | None) -> None:
    """The socket files of the ipc ``endpoints`` a stopping broker bound (called while
    it still holds their locks, so no broker that starts now can have bound them)."""
    for where in endpoints:
        if where and where.startswith("ipc://"):
            with contextlib.suppress(OSError):
                os.unlink(where[len("ipc://"):])


def write_pid_file(path: Path) -> None:
    """Say which process serves (for whoever started it detached: see client.autostart).
    Written once the broker has bound its sockets, so a refused start never overwrites
    the pid of the broker that serves. Raises StartupError."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise StartupError(f"cannot write the pid file {path}: {exc.strerror}") from None


def remove_pid_file(path: Path) -> None:
    """Remove the pid file if it still names this process (a later broker may own it)."""
    try:
        if path.read_text().strip() == str(os.getpid()):
            path.unlink()
    except (OSError, ValueError):
        pass
