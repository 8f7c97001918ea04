/**
 * The VM recipe's files as tests run them: deploy/discovery@.service's settings, and real nginx from
 * deploy/nginx.conf with loopback ports, temporary paths and short timeouts, in front of service
 * processes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { freePort, waitForPort } from "./_redis.ts";
import { findTool, toolUnavailableReason } from "./_tools.ts";

/** The folder of the files an operator installs. */
export const DEPLOY = join(import.meta.dirname!, "..", "deploy");
/** deploy/discovery@.service as shipped. */
export const UNIT = Deno.readTextFileSync(join(DEPLOY, "discovery@.service"));
/** deploy/nginx.conf as shipped. */
export const NGINX_CONF = Deno.readTextFileSync(join(DEPLOY, "nginx.conf"));

/** The unit's `[Service]` settings, each key with every value it is given. */
export function serviceSettings(unit: string): Map<string, string[]> {
  const section = unit.split(/^\[Service\]$/m)[1]!.split(/^\[/m)[0]!;
  const settings = new Map<string, string[]>();
  for (const line of section.split("\n")) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (match) settings.set(match[1]!, [...settings.get(match[1]!) ?? [], match[2]!]);
  }
  return settings;
}

/** The test's timeouts, in place of the shipped ones (seconds), so that the test is quick. */
export const TEST_TIMEOUT_S = 1;

/**
 * The shipped nginx.conf with loopback ports, temporary paths and short timeouts; the instances'
 * ports replaced by `upstreamPorts` in order.
 */
export function testNginxConf(dir: string, port: number, upstreamPorts: [number, number]): string {
  const substitutions: [RegExp, string][] = [
    [/^user www-data;$/m, ""],
    [/^worker_processes auto;$/m, "worker_processes 1;"],
    [/^pid \/run\/nginx\.pid;$/m, `pid ${join(dir, "nginx.pid")};`],
    [
      /^error_log \/var\/log\/nginx\/error\.log warn;$/m,
      `error_log ${join(dir, "error.log")} info;`,
    ],
    [/^ {8}listen 80;$/m, `        listen 127.0.0.1:${port};`],
    [/^ {8}listen \[::\]:80;$/m, ""],
    [/server 127\.0\.0\.1:8001 /, `server 127.0.0.1:${upstreamPorts[0]} `],
    [/server 127\.0\.0\.1:8002 /, `server 127.0.0.1:${upstreamPorts[1]} `],
    [/client_header_timeout 10s;/, `client_header_timeout ${TEST_TIMEOUT_S}s;`],
    [/client_body_timeout 10s;/, `client_body_timeout ${TEST_TIMEOUT_S}s;`],
    [/keepalive_timeout 15s;/, `keepalive_timeout ${TEST_TIMEOUT_S}s;`],
    [/send_timeout 10s;/, `send_timeout ${TEST_TIMEOUT_S}s;`],
  ];
  let conf = NGINX_CONF;
  for (const [pattern, replacement] of substitutions) {
    // Every substitution must apply: the shipped file is what is tested.
    assert.match(conf, pattern);
    conf = conf.replace(pattern, replacement);
  }
  return conf;
}

/** A GET through nginx from the local address `from`. */
export function get(
  port: number,
  from: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; remaining: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: "127.0.0.1",
      port,
      path: "/api/v1/platform",
      localAddress: from,
      agent: false,
      headers,
    }, (response) => {
      response.resume();
      response.on("end", () =>
        resolve({
          status: response.statusCode!,
          remaining: response.headers["ratelimit-remaining"] as string | undefined,
        }));
    });
    req.on("error", reject);
    req.end();
  });
}

export const noNginx = toolUnavailableReason("nginx", "nginx-light");

/** nginx run from the test configuration on a free loopback port, in front of `upstreams`. */
export async function startNginx(upstreams: [number, number]): Promise<{
  port: number;
  stop(): Promise<void>;
}> {
  const dir = Deno.makeTempDirSync();
  Deno.chmodSync(dir, 0o755);
  const port = freePort();
  Deno.writeTextFileSync(join(dir, "nginx.conf"), testNginxConf(dir, port, upstreams));
  const nginx = new Deno.Command(findTool("nginx")!, {
    args: [
      "-p",
      dir,
      "-c",
      join(dir, "nginx.conf"),
      "-e",
      join(dir, "error.log"),
      "-g",
      "daemon off;",
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(nginx.stderr).text();
  const stop = async () => {
    nginx.kill("SIGQUIT");
    await nginx.status;
    assert.doesNotMatch(await stderr, /\[emerg\]/);
  };
  await waitForPort(port, 5000).catch(async (error) => {
    await stop();
    throw error;
  });
  return { port, stop };
}
