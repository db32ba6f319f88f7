"""The Node client as a user installs it, outside this repository (clients/node's
README, "Install"): ``npm pack`` of clients/node, ``npm install`` of that tarball
into a fresh project, and there

* the tarball holds what the package needs and nothing else (no tests);
* an .mjs imports it by name, its dependencies load, and two sessions talk through a
  real broker; the runtime's exports and Session methods are the declared ones;
* the project survives a later ``npm install`` (node_modules removed first);
* ``tsc --strict --noEmit`` (TypeScript from clients/node's lock file) accepts a
  consumer of the whole typed surface, under both ``nodenext`` and ``bundler``
  module resolution, and rejects what it must (its ``@ts-expect-error`` lines).

npm installs offline from its cache where it can (clients/node's ``npm ci`` filled
it); node, npm and tsc missing fail the test, never skip it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from .conftest import NODE_DIR
from .runner import driver_env

HERE = Path(__file__).resolve().parent / "node_install"
PACKAGE = "intercom-bus-client"
NPM_S = 120.0       # one npm command, at most (offline from the cache: a second or two)
RUN_S = 30.0        # the smoke script, or one tsc run, at most

# The package's public surface, as src/index.d.ts declares it and src/index.js has it.
EXPORTS = ["BusError", "Client", "ConnectError", "ERRORS", "LIMITS", "PROTOCOL_VERSION", "Session",
           "TOOL_SCHEMAS", "defaultEndpoint", "endpointList", "errorReply", "errorText", "parse",
           "stringify"]
SESSION_PROPERTIES = ["id", "name", "kind", "keepUntil", "welcome", "groups", "homeGroup", "channel",
                      "connected"]
SESSION_METHODS = ["intercom", "receive", "nextEvent", "receipt", "markSeen", "sendNowait",
                   "inboxStatistics", "setStatus", "markTerminal", "contactSupervisor", "close",
                   "respond", "ackOutput", "listSessions", "invoke", "finishInvocation", "reset",
                   "delete", "registerRun", "takeOver", "addStages", "setStageState", "revokeStage",
                   "grantChild", "endRun", "updateCapabilities", "humanInput", "setInbound", "heldMessages",
                   "releaseHeld", "dropHeld"]
# On Session.prototype, not part of the surface (the types leave them out).
SESSION_INTERNALS = ["hello", "onWelcomed", "waitWelcome", "onInbound", "status", "reply", "ask", "call",
                     "membershipAnswered", "inboxFull"]
TOOL_SCHEMA_NAMES = ["intercom", "respond", "invoke", "wait", "attachment"]
SHIPPED = {"package.json", "README.md", "src/index.d.ts", "src/schemas.json"}


def run(args: list[str], cwd: Path, timeout: float = NPM_S) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=driver_env(),
                          check=False)
    assert done.returncode == 0, f"{' '.join(args)} (in {cwd}) exited {done.returncode}:\n" \
                                 f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def npm() -> str:
    found = shutil.which("npm")
    if found is None:
        pytest.fail("npm is required (Node 20+): apt-get install nodejs npm")
    return found


def surface_checks() -> str:
    """TypeScript that fails to compile unless the declarations name exactly this
    surface (an object literal `satisfies` a Record of all keys: none missing, none extra)."""
    def names(items: list[str]) -> str:
        return "{ " + ", ".join(f"{json.dumps(name)}: true" for name in items) + " }"
    return "\n".join([
        f"export const declaredExports = {names(EXPORTS)} satisfies Record<keyof typeof bus, true>;",
        (f"export const declaredSession = {names(SESSION_PROPERTIES + SESSION_METHODS)} "
         "satisfies Record<keyof Session, true>;"),
        (f"export const declaredSchemas = {names(TOOL_SCHEMA_NAMES)} "
         "satisfies Record<keyof typeof TOOL_SCHEMAS, true>;"),
    ])


@pytest.fixture(scope="module")
def project(node_ready, tmp_path_factory) -> Path:
    """A fresh project (outside the repository) with the packed client installed."""
    base = tmp_path_factory.mktemp("node-install")
    packed = json.loads(run([npm(), "pack", str(NODE_DIR), "--json", "--pack-destination", str(base)],
                            cwd=base).stdout)
    tarball = base / packed[0]["filename"]
    assert tarball.is_file(), packed
    app = base / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "fresh-app", "version": "1.0.0", "private": True,
                                                  "type": "module"}, indent=2))
    run([npm(), "install", "--prefer-offline", "--no-audit", "--no-fund", str(tarball)], cwd=app)
    return app


@pytest.mark.timeout(120)
def test_the_tarball_ships_the_sources_and_types_only(project):
    tarball = next(project.parent.glob(f"{PACKAGE}-*.tgz"))
    with tarfile.open(tarball) as archive:
        files = {name.removeprefix("package/") for name in archive.getnames()}
    assert SHIPPED <= files, sorted(files)
    assert all(name in SHIPPED or (name.startswith("src/") and name.endswith(".js")) for name in files), \
        sorted(files)
    manifest = json.loads((project / "node_modules" / PACKAGE / "package.json").read_text())
    assert manifest["types"] == "src/index.d.ts"
    assert manifest["exports"]["."]["types"] == "./src/index.d.ts"
    dependency = json.loads((project / "package.json").read_text())["dependencies"][PACKAGE]
    assert dependency == f"file:../{tarball.name}", dependency   # the tarball, not a checkout
    assert not (project / "node_modules" / PACKAGE).is_symlink()


def smoke(node: str, app: Path, endpoint: str) -> dict:
    surface = {"exports": EXPORTS, "sessionMembers": SESSION_PROPERTIES + SESSION_METHODS,
               "sessionMethods": SESSION_METHODS, "sessionInternals": SESSION_INTERNALS}
    shutil.copy(HERE / "smoke.mjs", app / "smoke.mjs")
    done = run([node, "smoke.mjs", endpoint, json.dumps(surface)], cwd=app, timeout=RUN_S)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(120)
def test_the_installed_package_talks_to_a_broker_and_has_the_declared_surface(node_ready, project, module_bus):
    seen = smoke(node_ready, project, module_bus.broker.endpoint)
    assert seen["ok"] and seen["receipt"] == "seen", seen
    assert seen["noBrokerAfterS"] < 3, seen
    assert seen["backlogBytes"] > 2**53, seen   # a 64-bit integer arrived exact (BigInt)


@pytest.mark.timeout(120)
def test_a_later_npm_install_keeps_the_package_working(node_ready, project, module_bus):
    shutil.rmtree(project / "node_modules")
    run([npm(), "install", "--prefer-offline", "--no-audit", "--no-fund"], cwd=project)
    assert smoke(node_ready, project, module_bus.broker.endpoint)["receipt"] == "seen"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("resolution", ["nodenext", "bundler"])
def test_tsc_strict_accepts_a_consumer_of_the_whole_typed_surface(node_ready, project, resolution):
    tsc = NODE_DIR / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():
        pytest.fail(f"no {tsc}: typescript is a devDependency of clients/node (npm ci there)")
    source = (HERE / "consumer.ts").read_text().replace("// SURFACE", surface_checks(), 1)
    assert "satisfies Record<keyof Session, true>" in source
    (project / f"consumer-{resolution}.ts").write_text(source)
    module = "nodenext" if resolution == "nodenext" else "esnext"
    (project / f"tsconfig-{resolution}.json").write_text(json.dumps({
        "compilerOptions": {"target": "es2022", "lib": ["es2022"], "module": module,
                            "moduleResolution": resolution, "types": [], "skipLibCheck": False},
        "files": [f"consumer-{resolution}.ts"],
    }, indent=2))
    done = subprocess.run([str(tsc), "-p", f"tsconfig-{resolution}.json", "--strict", "--noEmit"],
                          cwd=project, capture_output=True, text=True, timeout=RUN_S, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert done.stdout.strip() == "", done.stdout
