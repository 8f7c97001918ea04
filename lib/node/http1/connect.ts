/**
 * CONNECT on Node's entry. Node hands a CONNECT's socket to the server's `connect` event, and closes
 * it unanswered when no one listens; Deno hands the request to the handler, which answers 405 (the
 * service knows the method and allows it nowhere: RFC 9110 section 9.3.6 asks a proxy for a tunnel).
 * This listener does what Deno does: the handler's answer for the URL of the authority-form target
 * (`http://host:port`, whose path is `/`), written on the socket, which is then closed: Node does not
 * take a socket it handed over back to its parser. A target of another form is Deno's parser's 400.
 * It is answered after the responses to the requests before it on its connection (`in_flight.ts`).
 *
 * @module
 */

import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { whenAnswered } from "./in_flight.ts";
import { RawFields } from "./raw_fields.ts";
import { writeRawResponse } from "./raw_response.ts";
import { peerOf } from "./peer.ts";
import { urlOf } from "./request_target.ts";
import type { ClientErrorOptions } from "./client_error.ts";

/** Creates the server's `connect` listener. */
export function createConnectListener(
  options: ClientErrorOptions,
): (request: IncomingMessage, socket: Socket) => void {
  return (request, socket) => {
    answerConnect(request, socket, options).catch((failure) => {
      options.onError(failure);
      socket.destroy();
    });
  };
}

async function answerConnect(
  request: IncomingMessage,
  socket: Socket,
  { handler, fallback }: ClientErrorOptions,
): Promise<void> {
  socket.pause();
  await whenAnswered(socket);
  const method = request.method ?? "CONNECT";
  const url = urlOf(method, request.url ?? "", request.headers.host, fallback());
  const headers = new RawFields(request.rawHeaders);
  const info = peerOf(socket);
  const response = url === undefined
    ? await handler.refuse("bad_request", { method, url, headers }, info)
    : await handler({ method, url, headers } as unknown as Request, info);
  await writeRawResponse(socket, response, {
    version: request.httpVersion === "1.0" ? "1.0" : "1.1",
    head: false,
  });
}
