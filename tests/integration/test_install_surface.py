"""What a newcomer runs after ``pip install``: the console scripts ``intercom`` and
``intercom-broker``, the README's MCP line as written, and ``intercom mcp`` (or
``python -m client mcp``) on an install without the ``mcp`` extra: one line and
exit 2, as ``top``, metrics and PostgreSQL say what they miss.

The console scripts are those of the suite's own install (``pip install -e
'.[test]'``), found beside the interpreter running the suite: a venv that is not
activated has them there, not on PATH. A checkout whose install predates them fails
here, saying to reinstall."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import wait_listening

from .cli_helpers import CLI
from .conftest import ROOT, child_env

pytestmark = pytest.mark.timeout(120)

# Imported first by any interpreter with this directory on its path: `mcp` and
# `mcp_types` (the SDK) then fail to import exactly as when they are not installed.
WITHOUT_MCP = '''
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("mcp", "mcp_types"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
'''
HINT = "pip install 'intercom-bus[mcp]'"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"}}}


def scripts_dir() -> str:
    return sysconfig.get_path("scripts")


def console_script(name: str) -> str:
    """The absolute path of an installed console script of this package."""
    found = shutil.which(name, path=os.pathsep.join(
        [scripts_dir(), str(Path(sys.executable).parent)]))
    assert found, f"no {name} console script beside {sys.executable}: pip install -e '.[test]'"
    return found


def test_both_console_scripts_are_installed_and_run_client_and_broker(home):
    intercom, intercom_broker = console_script("intercom"), console_script("intercom-broker")
    env = child_env(home)
    env.pop("PYTHONPATH")                        # what the install alone provides
    version = subprocess.run([intercom, "--version"], capture_output=True, text=True,
                             env=env, cwd=home, timeout=60)
    same = subprocess.run([*CLI, "--version"], capture_output=True, text=True,
                          env=child_env(home), cwd=ROOT, timeout=60)
    assert version.returncode == 0 and version.stdout == same.stdout != "", (version, same)
    endpoint = f"ipc://{home}/broker.sock"
    broker = subprocess.Popen([intercom_broker, "--data-dir", str(home), "--endpoint", endpoint,
                               "--pub-endpoint", f"ipc://{home}/presence.sock"],
                              env=env, cwd=home, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_listening(endpoint, broker)
        assert broker.poll() is None, "intercom-broker exited at once"
        status = subprocess.run([intercom, "--endpoint", endpoint, "--json", "status"],
                                capture_output=True, text=True, env=env, cwd=home, timeout=60)
        assert status.returncode == 0 and json.loads(status.stdout)["connected"], status
    finally:
        if broker.poll() is None:
            os.kill(broker.pid, signal.SIGTERM)
        assert broker.wait(15) == 0


@pytest.mark.parametrize("how", ["python -m client", "intercom"])
def test_mcp_without_the_sdk_is_one_install_line_and_exit_2(home, how):
    shim = home / "without-mcp"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(WITHOUT_MCP)
    command = [*CLI] if how == "python -m client" else [console_script("intercom")]
    env = child_env(home, PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]))
    done = subprocess.run([*command, "mcp", "--name", "x"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, cwd=ROOT, timeout=60)
    assert (done.returncode, done.stdout) == (2, ""), done
    (line,) = done.stderr.splitlines()
    assert line == ("client mcp: the MCP server needs the MCP SDK (No module named "
                    f"'mcp_types'): {HINT}"), line


def readme_mcp_command() -> str:
    """The command the README's MCP line gives the host (after ``--``)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("claude mcp add intercom -- ")]
    return line.split(" -- ", 1)[1]


def test_the_readmes_mcp_line_works_as_written_whatever_python3_and_cwd(bus, home):
    """The command after ``claude mcp add intercom --``, run by a shell whose PATH has the
    install's scripts but a ``python3`` that is another interpreter (here: one that
    fails), from a project whose own ``client`` package would shadow this one for
    ``python -m client``: it serves MCP, with the described tools."""
    elsewhere = home / "bin"
    elsewhere.mkdir()
    (elsewhere / "python3").write_text("#!/bin/sh\necho 'not this install' >&2\nexit 97\n")
    (elsewhere / "python3").chmod(0o755)
    project = home / "project"
    (project / "client").mkdir(parents=True)
    (project / "client" / "__init__.py").write_text("raise ImportError('a project of its own')\n")
    env = child_env(home, INTERCOM_DATA_DIR=str(home / "data"),
                    PATH=os.pathsep.join([str(elsewhere), scripts_dir(), "/usr/bin", "/bin"]))
    env.pop("PYTHONPATH")
    command = readme_mcp_command()
    assert re.fullmatch(r'"\$\(command -v intercom\)" mcp --name \S+', command), command
    proc = subprocess.Popen(["bash", "-c", f'exec {command} "$@"', "bash", "--endpoint",
                             bus.endpoint, "--group", bus.group, "--no-push"],
                            cwd=project, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        lines = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
        proc.stdin.write(b"".join((json.dumps(m) + "\n").encode() for m in lines))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        listed = json.loads(proc.stdout.readline())
        tools = {t["name"]: t for t in listed["result"]["tools"]}
        action = tools["intercom"]["inputSchema"]["properties"]["action"]
        assert "pending: " in action["description"], action
        proc.stdin.close()
        assert proc.wait(15) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
