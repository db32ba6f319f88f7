"""Runs one scenario file against client drivers (see README.md in this folder).

A *driver* is a child process that speaks JSON lines: each command
``{"id", "cmd", "session", "args"}`` gets one answer ``{"id", "result"}`` (or
``{"id", "crash"}``), possibly out of order. A scenario's *actors* are sessions; each
actor lives in one driver, so the same scenario runs all on one client or mixed
(interop: actors alternate between two clients).

Steps (the ``do`` key; ``as`` names the actor):

* a driver command (``connect``, ``intercom``, ``receive``, ``next_event``,
  ``respond``, ``invoke``, ``grant_child``, ``register_run``, ``add_stages``,
  ``set_stage_state``, ``end_run``, ``set_status``, ``contact_supervisor``,
  ``receipt``, ``mark_seen``, ``close``, ``history``) with ``args``; its result is
  checked against ``expect`` and kept under ``save``. ``async: NAME`` sends it
  without waiting; ``{"do": "await", "name": NAME, "expect": ...}`` waits for it
  later. ``retry: SECONDS`` repeats the command until ``expect`` holds (a wait on a
  reply, or on a receipt's state, with a deadline).
* ``{"do": "restart_broker"}``: stop the broker by its PID and start it again on the
  same data directory and endpoint.

Values: ``${path}`` in a string is replaced by a variable (``u``: unique per run,
``group``, ``endpoint``, ``dataDir``, each actor's connect result under its name,
each ``save``), ``.`` walking into maps and lists; a string that is only ``${path}``
takes the value itself, of any type. ``{"$repeat": [TEXT, N]}`` is TEXT N times.

Expectations (:func:`match`): maps are compared key by key and must have exactly the
keys expected, unless ``"...": true`` is among them; lists element by element;
``{"$type": "string"}`` (``number``, ``integer``, ``bool``, ``list``, ``map``,
``null``) matches by type, ``{"$re": REGEX}`` a string, ``{"$absent": true}`` a key
that must not be there, ``{"$contains": [...]}`` a list holding items that match,
``{"$any": true}`` anything.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVERS = {
    # The interpreter running the suite: "python3" from PATH may be another one, without
    # this checkout's dependencies (a venv that is not activated).
    "python": lambda: [sys.executable, str(HERE / "drivers" / "python_driver.py")],
    "node": lambda: ["node", str(HERE / "drivers" / "node_driver.mjs")],
}
STEP_TIMEOUT_S = 30.0          # a command's answer, at most (asks carry their own timeout)
_VAR = re.compile(r"\$\{([^{}]+)\}")
_TYPES = {"string": str, "number": (int, float), "integer": int, "bool": bool, "list": list,
          "map": dict, "null": type(None)}


class ScenarioFailure(AssertionError):
    pass


class Driver:
    """One driver process; answers are collected by a reader thread."""

    def __init__(self, kind: str, env: dict[str, str]) -> None:
        self.kind = kind
        self.proc = subprocess.Popen(DRIVERS[kind](), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                     cwd=ROOT, env=env)
        self.answers: dict[int, dict] = {}
        self.arrived = threading.Condition()
        self.next_id = 0
        self.errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_errors, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            answer = json.loads(line)
            with self.arrived:
                self.answers[answer["id"]] = answer
                self.arrived.notify_all()
        with self.arrived:
            self.arrived.notify_all()

    def _read_errors(self) -> None:
        for line in self.proc.stderr:
            self.errors.append(line.rstrip("\n"))

    def send(self, cmd: str, session: str | None, args: dict) -> int:
        self.next_id += 1
        line = json.dumps({"id": self.next_id, "cmd": cmd, "session": session, "args": args},
                          ensure_ascii=False)
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.next_id

    def wait(self, request: int, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while request not in self.answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and request not in self.answers:
                    raise ScenarioFailure(f"{self.kind} driver gave no answer to command {request} "
                                          f"within {timeout:g} s; stderr: {self.errors[-20:]}")
                self.arrived.wait(min(left, 0.5))
            answer = self.answers.pop(request)
        if "crash" in answer:
            raise ScenarioFailure(f"{self.kind} driver crashed: {answer['crash']}")
        return answer["result"]

    def close(self) -> None:
        """End the driver: stdin closed (it closes its sessions), then its PID signalled."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# -- values and expectations -------------------------------------------------------------

def lookup(variables: dict, path: str) -> Any:
    value: Any = variables
    for part in path.split("."):
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise ScenarioFailure(f"no value at ${{{path}}} (missing {part!r})")
    return value


def substitute(value: Any, variables: dict) -> Any:
    if isinstance(value, str):
        while _VAR.search(value):            # innermost first: ${a.${b}} is allowed
            whole = _VAR.fullmatch(value)
            if whole:
                return lookup(variables, whole.group(1))
            value = _VAR.sub(lambda m: str(lookup(variables, m.group(1))), value)
        return value
    if isinstance(value, list):
        return [substitute(item, variables) for item in value]
    if isinstance(value, dict) and set(value) == {"$repeat"}:
        text, times = value["$repeat"]
        return substitute(text, variables) * times
    if isinstance(value, dict):
        return {substitute(key, variables): substitute(item, variables) for key, item in value.items()}
    return value


def match(expected: Any, actual: Any, where: str = "result") -> list[str]:
    """Every way ``actual`` differs from ``expected`` (see the module docstring)."""
    if isinstance(expected, dict) and len(expected) == 1 and next(iter(expected)).startswith("$"):
        (op, arg), = expected.items()
        if op == "$type":
            ok = isinstance(actual, _TYPES[arg]) and not (arg in ("number", "integer")
                                                           and isinstance(actual, bool))
            return [] if ok else [f"{where}: {actual!r} is not of type {arg}"]
        if op == "$re":
            ok = isinstance(actual, str) and re.search(arg, actual) is not None
            return [] if ok else [f"{where}: {actual!r} does not match /{arg}/"]
        if op == "$any":
            return []
        if op == "$contains":
            if not isinstance(actual, list):
                return [f"{where}: {actual!r} is not a list"]
            return [f"{where}: no item matches {item!r} in {actual!r}" for item in arg
                    if all(match(item, one) for one in actual)]
        raise ScenarioFailure(f"unknown matcher {op}")
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected a map, got {actual!r}"]
        problems = []
        partial = expected.get("...") is True
        for key, want in expected.items():
            if key == "...":
                continue
            if want == {"$absent": True}:
                if key in actual:
                    problems.append(f"{where}.{key}: should be absent, is {actual[key]!r}")
            elif key not in actual:
                problems.append(f"{where}.{key}: missing (have {sorted(actual)})")
            else:
                problems += match(want, actual[key], f"{where}.{key}")
        if not partial:
            extra = sorted(set(actual) - set(expected))
            if extra:
                problems.append(f"{where}: unexpected keys {extra}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {len(expected)} items, got {actual!r}"]
        problems = []
        for index, (want, got) in enumerate(zip(expected, actual)):
            problems += match(want, got, f"{where}[{index}]")
        return problems
    if expected != actual or isinstance(expected, bool) != isinstance(actual, bool):
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return []


# -- running --------------------------------------------------------------------------

def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def actors_of(scenario: dict) -> list[str]:
    """Actors in order of first appearance."""
    seen: list[str] = []
    for step in scenario["steps"]:
        actor = step.get("as")
        if actor and actor not in seen:
            seen.append(actor)
    return seen


class Run:
    """One run of one scenario. ``placement(actor)`` names the driver of each actor;
    ``restart()`` restarts the broker (for ``restart_broker`` steps)."""

    def __init__(self, scenario: dict, drivers: dict[str, Driver], placement: dict[str, str],
                 variables: dict, restart: Callable[[], None] | None = None) -> None:
        self.scenario = scenario
        self.drivers = drivers
        self.placement = placement
        self.vars = {"u": uuid.uuid4().hex[:8], "group": f"conf-{uuid.uuid4().hex[:8]}", **variables}
        self.restart = restart
        self.pending: dict[str, tuple[Driver, int, dict]] = {}

    def run(self) -> None:
        for index, step in enumerate(self.scenario["steps"]):
            label = f"step {index + 1} ({step.get('do')} as {step.get('as')})"
            try:
                self.step(step)
            except ScenarioFailure as exc:
                raise ScenarioFailure(f"{self.scenario.get('title', '')}: {label}: {exc}") from None

    def step(self, step: dict) -> None:
        do = step["do"]
        if do == "restart_broker":
            assert self.restart is not None, "this scenario needs its own broker"
            self.restart()
            return
        if do == "await":
            driver, request, pending_step = self.pending.pop(step["name"])
            result = driver.wait(request, step.get("timeout", STEP_TIMEOUT_S))
            self.check({**pending_step, **step}, result)
            return
        actor = step["as"]
        driver = self.drivers[self.placement[actor]]
        args = substitute(step.get("args", {}), self.vars)
        if do == "connect":
            args.setdefault("endpoint", self.vars["endpoint"])
            args.setdefault("timeout", 15)
        if "async" in step:
            self.pending[step["async"]] = (driver, driver.send(do, actor, args), step)
            return
        deadline = time.monotonic() + step.get("retry", 0)
        while True:
            result = driver.wait(driver.send(do, actor, args), step.get("timeout", STEP_TIMEOUT_S))
            if time.monotonic() >= deadline or not self.problems(step, result):
                break
        if do == "connect" and isinstance(result, dict) and result.get("ok"):
            self.vars[actor] = result
        self.check(step, result)

    def problems(self, step: dict, result: Any) -> list[str]:
        if "expect" not in step:
            return []
        return match(substitute(step["expect"], self.vars), result)

    def check(self, step: dict, result: Any) -> None:
        problems = self.problems(step, result)
        if problems:
            raise ScenarioFailure("\n  ".join([json.dumps(result, ensure_ascii=False)[:2000], *problems]))
        if "save" in step:
            self.vars[step["save"]] = result


def driver_env() -> dict[str, str]:
    """A child's environment: this checkout importable, no intercom variables."""
    drop = ("ATOMIC_INTERCOM_GROUP", "PI_INTERCOM_GROUP", "INTERCOM_DATA_DIR", "INTERCOM_ENDPOINT",
            "INTERCOM_PUB_ENDPOINT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return env


def run_scenario(scenario: dict, kinds: list[str], variables: dict,
                 restart: Callable[[], None] | None = None) -> None:
    """Run ``scenario`` with its actors placed on ``kinds`` in turn (one kind: all on
    that client; two: alternating, the first actor on the first kind)."""
    actors = actors_of(scenario)
    placement = {actor: kinds[index % len(kinds)] for index, actor in enumerate(actors)}
    drivers = {kind: Driver(kind, driver_env()) for kind in dict.fromkeys(kinds)}
    try:
        Run(scenario, drivers, placement, variables, restart).run()
    finally:
        for driver in drivers.values():
            driver.close()
