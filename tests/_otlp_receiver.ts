/**
 * A small OTLP/HTTP receiver: what an OpenTelemetry Collector's `otlphttp` receiver accepts on
 * `/v1/metrics`, `/v1/traces` and `/v1/logs`, kept in memory. `http/json` payloads are decoded
 * (the OTLP JSON encoding); `http/protobuf` ones are counted (requests and bytes) only. The tests
 * point the service's `OTEL_EXPORTER_OTLP_ENDPOINT` at it; an operator can run it to see what the
 * service exports, with no collector installed: `deno run --allow-net tests/_otlp_receiver.ts [port]`
 * listens on 127.0.0.1 (port 4318 by default) and prints each JSON export.
 *
 * @module
 */

/** An OTLP attribute value (JSON encoding). */
export interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
}

/** An OTLP key-value pair. */
export interface KeyValue {
  key: string;
  value: AnyValue;
}

/** One data point of a sum, gauge or histogram (the fields the tests read). */
export interface DataPoint {
  attributes?: KeyValue[];
  asInt?: string | number;
  asDouble?: number;
  count?: string | number;
  sum?: number;
  startTimeUnixNano?: string;
  timeUnixNano?: string;
}

/** One metric of an export. */
export interface Metric {
  name: string;
  unit?: string;
  description?: string;
  sum?: { dataPoints: DataPoint[]; aggregationTemporality?: number; isMonotonic?: boolean };
  gauge?: { dataPoints: DataPoint[] };
  histogram?: { dataPoints: DataPoint[]; aggregationTemporality?: number };
}

/** One span of an export. */
export interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  attributes?: KeyValue[];
}

/** One log record of an export. */
export interface LogRecord {
  severityNumber?: number;
  severityText?: string;
  body?: AnyValue;
  traceId?: string;
  spanId?: string;
  attributes?: KeyValue[];
}

/** What the receiver holds: every decoded item, and per path the raw requests and bytes. */
export interface Received {
  metrics: Metric[];
  spans: Span[];
  logs: LogRecord[];
  /** Every JSON body as received, for excerpts and for searching every value. */
  bodies: unknown[];
  /** Requests and bytes per path, whatever the encoding. */
  requests: Map<string, { count: number; bytes: number }>;
}

/** A running receiver. */
export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  endpoint: string;
  /** What arrived so far. */
  received: Received;
  /** Stops listening. */
  close(): Promise<void>;
}

/** Options of {@linkcode startReceiver}. */
export interface ReceiverOptions {
  /** Port to listen on (default 0: any free port). */
  port?: number;
  /** Called with each decoded JSON export. */
  onExport?: (path: string, body: unknown) => void;
  /** Delay before answering each request, in ms: a slow collector. */
  delayMs?: number;
  /**
   * What to keep of the decoded exports: `all` (default), or `metrics` (and log records) for a
   * benchmark: every export is still decoded, as a collector would, but spans and bodies are dropped.
   */
  keep?: "all" | "metrics";
}

/** Starts a receiver on 127.0.0.1. */
export function startReceiver(options: ReceiverOptions = {}): OtlpReceiver {
  const received: Received = { metrics: [], spans: [], logs: [], bodies: [], requests: new Map() };
  // Closing ends the delays of a slow collector, so that it does not wait for them.
  const closing = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: options.port ?? 0, onListen: () => {} },
    async (request) => {
      const path = new URL(request.url).pathname;
      const bytes = new Uint8Array(await request.arrayBuffer());
      const seen = received.requests.get(path) ?? { count: 0, bytes: 0 };
      received.requests.set(path, { count: seen.count + 1, bytes: seen.bytes + bytes.length });
      if (request.headers.get("content-type")?.includes("json")) {
        const body = JSON.parse(new TextDecoder().decode(bytes));
        if (options.keep !== "metrics") received.bodies.push(body);
        if (options.keep !== "metrics" || path !== "/v1/traces") collect(received, path, body);
        options.onExport?.(path, body);
      }
      if (options.delayMs) await delay(options.delayMs, closing.signal);
      const json = request.headers.get("content-type")?.includes("json");
      return new Response(json ? "{}" : new Uint8Array(), {
        headers: { "content-type": json ? "application/json" : "application/x-protobuf" },
      });
    },
  );
  return {
    endpoint: `http://127.0.0.1:${server.addr.port}`,
    received,
    close: () => {
      closing.abort();
      return server.shutdown();
    },
  };
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

// deno-lint-ignore no-explicit-any
type Json = any;

/** Adds the metrics, spans or log records of one OTLP JSON export. */
function collect(received: Received, path: string, body: Json): void {
  if (path === "/v1/metrics") {
    for (const resource of body.resourceMetrics ?? []) {
      for (const scope of resource.scopeMetrics ?? []) {
        received.metrics.push(...scope.metrics ?? []);
      }
    }
  } else if (path === "/v1/traces") {
    for (const resource of body.resourceSpans ?? []) {
      for (const scope of resource.scopeSpans ?? []) received.spans.push(...scope.spans ?? []);
    }
  } else if (path === "/v1/logs") {
    for (const resource of body.resourceLogs ?? []) {
      for (const scope of resource.scopeLogs ?? []) received.logs.push(...scope.logRecords ?? []);
    }
  }
}

/** The value of attribute `key` (strings and numbers as they are), or undefined. */
export function attribute(
  attributes: KeyValue[] | undefined,
  key: string,
): string | number | boolean | undefined {
  const value = attributes?.find((pair) => pair.key === key)?.value;
  if (value === undefined) return undefined;
  if (value.intValue !== undefined) return Number(value.intValue);
  return value.stringValue ?? value.doubleValue ?? value.boolValue;
}

/** Every data point of the metrics named `name`, across exports. */
export function pointsOf(received: Received, name: string): DataPoint[] {
  return received.metrics.filter((metric) => metric.name === name).flatMap((metric) =>
    metric.sum?.dataPoints ?? metric.gauge?.dataPoints ?? metric.histogram?.dataPoints ?? []
  );
}

/** A point's value: its int or double, or a histogram's count. */
export function valueOf(point: DataPoint): number {
  return Number(point.asInt ?? point.asDouble ?? point.count ?? 0);
}

if (import.meta.main) {
  const receiver = startReceiver({
    port: Number(Deno.args[0] ?? 4318),
    onExport: (path, body) => {
      // deno-lint-ignore no-console
      console.log(path, JSON.stringify(body, null, 2));
    },
  });
  // deno-lint-ignore no-console
  console.error(`OTLP/HTTP receiver (http/json) on ${receiver.endpoint}`);
}
