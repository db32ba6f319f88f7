// A real broker process for the Node tests: `python3 -m broker` from this checkout,
// on ipc sockets in a fresh short tmp dir, stopped by its own PID.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

export async function startBroker(...extra) {
  const dir = mkdtempSync("/tmp/ic-");
  const endpoint = `ipc://${dir}/broker.sock`;
  const log = openSync(`${dir}/broker.log`, "a");
  const proc = spawn("python3", ["-m", "broker", "--data-dir", dir, "--endpoint", endpoint,
    "--pub-endpoint", `ipc://${dir}/presence.sock`, ...extra],
  { cwd: ROOT, env: { ...process.env, PYTHONPATH: ROOT, HOME: dir }, stdio: ["ignore", log, log] });
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  const deadline = performance.now() + 20_000;
  while (!existsSync(`${dir}/broker.sock`)) { // polling for the socket to appear, not a settle
    if (proc.exitCode !== null || performance.now() > deadline) throw new Error(`broker did not start; see ${dir}/broker.log`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    dir, endpoint,
    async stop(signal = "SIGTERM") {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
