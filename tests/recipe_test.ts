/**
 * The VM recipe as shipped enforces one limit per caller (issue 29): two service processes with the
 * environment of deploy/discovery@.service (its `Environment=` lines, `%i` the instance's port, its
 * `StateDirectory=` a temporary folder) and the flags `deno task compile` bakes into the binary,
 * behind real nginx from deploy/nginx.conf, with `/etc/discovery/env` holding only
 * `PUBLIC_BASE_URL`. One caller sending requests one after another is admitted the limit, no more
 * than {@linkcode BOUND} over it; so is one that spent part of its window before a rolling restart
 * of both instances (deploy/README.md's loop), and one that did before a one-port handover
 * (`REUSE_PORT=true`, deploy/README.md, "One port").
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { request as httpRequest } from "node:http";
import { get, nginxErrorLog, noNginx, startNginx } from "./_nginx.ts";
import { freePort } from "./_redis.ts";
import type { ServiceProcess } from "./_service_process.ts";
import { startInstance } from "./_recipe.ts";
import { checkControls, checkReportMode } from "./_controls.ts";

/** The limit with the unit's environment: the default, 60 per 60 s. */
const LIMIT = 60;
/**
 * The most a caller may be admitted over the limit in one window (lib/limit/README.md, "Which store
 * to pick": 10% of the default limit).
 */
const BOUND = 6;

/** How many of `count` requests sent one after another through `port` from `from` were admitted. */
async function admitted(port: number, from: string, count: number): Promise<number> {
  let ok = 0;
  for (let i = 0; i < count; i++) {
    const { status } = await get(port, from);
    assert.ok(status === 200 || status === 429, `status ${status}`);
    if (status === 200) ok++;
  }
  return ok;
}

Deno.test({
  name:
    `the VM recipe as shipped: one limit per caller across two instances, a rolling restart and a one-port handover${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn(t) {
    const stateDir = Deno.makeTempDirSync();
    const ports: [number, number] = [freePort(), freePort()];
    const instances: ServiceProcess[] = [];
    try {
      for (const port of ports) instances.push(await startInstance(port, stateDir));
      const nginx = await startNginx(ports);
      try {
        await t.step("100 requests one after another from one caller", async () => {
          const count = await admitted(nginx.port, "127.0.0.2", 100);
          assert.ok(count >= LIMIT && count <= LIMIT + BOUND, `admitted ${count} of 100`);
        });

        await t.step("40 requests, a rolling restart of both instances, 60 more", async () => {
          const before = await admitted(nginx.port, "127.0.0.3", 40);
          assert.equal(before, 40);
          // deploy/README.md, "Rolling restart": stop one, start it, wait until it answers, next.
          for (const index of [0, 1]) {
            instances[index]!.kill("SIGTERM");
            assert.equal(await instances[index]!.exited, 0);
            instances[index] = await startInstance(ports[index]!, stateDir);
            const direct = await fetch(`${instances[index]!.url}/api/v1/platform`);
            await direct.body?.cancel();
            assert.equal(direct.status, 200);
          }
          const after = await admitted(nginx.port, "127.0.0.3", 60);
          assert.ok(before + after <= LIMIT + BOUND, `admitted ${before} + ${after} of 100`);
        });
      } finally {
        await nginx.stop();
      }
    } finally {
      for (const instance of instances) await instance.stop();
    }

    await t.step("40 requests, a one-port handover, 60 more", async () => {
      // deploy/README.md, "One port": the operator's file adds PORT and REUSE_PORT=true; callers
      // reach the instances directly, so the peer address is the caller.
      const port = freePort();
      const onePort = { PORT: String(port), REUSE_PORT: "true" };
      const old = await startInstance(port, stateDir, { env: onePort });
      let fresh: ServiceProcess | undefined;
      try {
        const before = await admitted(port, "127.0.0.4", 40);
        assert.equal(before, 40);
        fresh = await startInstance(port, stateDir, { env: onePort });
        old.kill("SIGTERM");
        assert.equal(await old.exited, 0);
        const after = await admitted(port, "127.0.0.4", 60);
        assert.ok(before + after <= LIMIT + BOUND, `admitted ${before} + ${after} of 100`);
      } finally {
        await old.stop();
        await fresh?.stop();
      }
    });
    Deno.removeSync(stateDir, { recursive: true });
  },
});

/** A raw HTTP/1.1 GET on its own connection: the status line, the fields and the body. */
async function rawGet(port: number): Promise<{ status: number; fields: Headers; body: string }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(
    new TextEncoder().encode(
      "GET /api/v1/platform HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ),
  );
  const text = await new Response(conn.readable).text();
  const [head = "", body = ""] = text.split("\r\n\r\n");
  const [statusLine = "", ...lines] = head.split("\r\n");
  const fields = new Headers();
  for (const line of lines) {
    const at = line.indexOf(":");
    fields.append(line.slice(0, at), line.slice(at + 1).trim());
  }
  return { status: Number(statusLine.split(" ")[1]), fields, body };
}

Deno.test({
  name:
    `the VM recipe's nginx refuses a 21st request in progress from one address with the service's Error JSON, Retry-After and RateLimit fields${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    // An upstream that holds every request until told to answer: 20 stay in progress.
    const upstream = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const held: Deno.Conn[] = [];
    const { promise: twenty, resolve: reachedTwenty } = Promise.withResolvers<void>();
    const accepting = (async () => {
      for await (const conn of upstream) {
        held.push(conn);
        if (held.length === 20) reachedTwenty();
      }
    })();
    const nginx = await startNginx([upstream.addr.port, upstream.addr.port]);
    try {
      const inProgress = Array.from({ length: 20 }, () => rawGet(nginx.port));
      await twenty;
      const refused = await rawGet(nginx.port);
      assert.equal(refused.status, 429);
      assert.equal(refused.fields.get("content-type"), "application/json");
      const body = JSON.parse(refused.body);
      assert.deepEqual(Object.keys(body.error), ["code", "message", "hint"]);
      assert.equal(body.error.code, "rate_limited");
      assert.equal(refused.fields.get("retry-after"), "1");
      assert.equal(refused.fields.get("ratelimit"), '"conn";r=0;t=1');
      assert.equal(refused.fields.get("ratelimit-policy"), '"conn";q=20;w=1');
      for (const name of ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"]) {
        assert.ok(refused.fields.has(name), name);
      }
      assert.equal(refused.fields.get("access-control-allow-origin"), "*");
      // The held requests are answered; an answer of the service passes through untouched.
      const answer =
        "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
      for (const conn of held) {
        await conn.write(new TextEncoder().encode(answer)).catch(() => {});
        conn.close();
      }
      const passed = await Promise.all(inProgress);
      assert.ok(passed.every((response) => response.status === 429 && response.body === "{}"));
      assert.ok(passed.every((response) => !response.fields.has("ratelimit")));
    } finally {
      await nginx.stop();
      upstream.close();
      await accepting.catch(() => {});
    }
  },
});

Deno.test({
  name:
    `the VM recipe with the operator controls in /etc/discovery/env: two instances behind the real nginx, an exempt caller 200 of 200, an ordinary one 60 of 100, a denied one 403; report mode${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    // The callers of tests/_controls.ts reach nginx from 127.0.<c>.<d> (`relayAs`): the lists name
    // those addresses, none of them the unit's trusted 127.0.0.1.
    const controls = { RATE_LIMIT_EXEMPT: "127.0.2.0/24", RATE_LIMIT_DENY: "127.0.113.66" };
    for (const file of [controls, { RATE_LIMIT_MODE: "report" }]) {
      const stateDir = Deno.makeTempDirSync();
      const ports: [number, number] = [freePort(), freePort()];
      const instances: ServiceProcess[] = [];
      try {
        for (const port of ports) {
          instances.push(await startInstance(port, stateDir, { env: file }));
        }
        const nginx = await startNginx(ports);
        // nginx replaces X-Forwarded-For with the peer it saw: the test's callers come from loopback
        // addresses of their own, through a tiny relay.
        try {
          const url = `http://127.0.0.1:${nginx.port}`;
          const as = (address: string) => ({ "x-test-caller": address });
          const relay = relayAs(url);
          try {
            if ("RATE_LIMIT_MODE" in file) await checkReportMode(relay.url, as);
            else await checkControls(relay.url, as, [LIMIT, LIMIT + BOUND]);
          } finally {
            await relay.close();
          }
        } finally {
          await nginx.stop();
        }
      } finally {
        for (const instance of instances) await instance.stop();
        Deno.removeSync(stateDir, { recursive: true });
      }
    }
  },
});

/**
 * A relay on loopback that sends each request to `target` from the local address the request's
 * `x-test-caller` names (127.0.0.0/8 is all loopback): nginx sees that peer, as it would a client.
 * The test's caller addresses are mapped into 127.0.0.0/8 one for one by their last two octets.
 */
function relayAs(target: string): { url: string; close(): Promise<void> } {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
    const caller = request.headers.get("x-test-caller") ?? "127.0.0.2";
    const [, , c, d] = caller.split(".");
    const path = new URL(request.url).pathname;
    return new Promise<Response>((resolve, reject) => {
      const req = httpRequest({
        host: "127.0.0.1",
        port: Number(new URL(target).port),
        path,
        localAddress: `127.0.${c}.${d}`,
        agent: false,
      }, (response) => {
        const chunks: Uint8Array[] = [];
        response.on("data", (chunk: Uint8Array) => chunks.push(chunk));
        response.on("end", () => {
          const headers = new Headers();
          for (const [name, value] of Object.entries(response.headers)) {
            if (typeof value === "string") headers.set(name, value);
          }
          headers.delete("transfer-encoding");
          headers.delete("connection");
          resolve(new Response(Buffer.concat(chunks), { status: response.statusCode!, headers }));
        });
      });
      // nginx's words for a request it did not answer.
      req.on(
        "error",
        (error) => reject(new Error(`${error}; ${nginxErrorLog(Number(new URL(target).port))}`)),
      );
      req.end();
    });
  });
  return { url: `http://127.0.0.1:${server.addr.port}`, close: () => server.shutdown() };
}
