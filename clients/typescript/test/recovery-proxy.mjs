// A Budget proxy for the recovery-profile tests, the twin of tests/client/recovery_profile_proxy.py:
// a real gRPC server on 127.0.0.1 that passes each worker call to the live sidecar byte for
// byte, and lets a test put a fault on the calls of a method (an answer lost after the
// sidecar applied the call, an answer that is no SettleResponse, a refusal, a call held
// until the test lets it go). It records every request it received, with its metadata, so
// that a test can say what left the worker and when.
import { Client as GrpcClient, Metadata, Server, ServerCredentials, credentials, status } from '@grpc/grpc-js';
import { wire } from '../dist/esm/index.js';

const METHODS = ['Reserve', 'Charge', 'Renew', 'Settle'];
const same = (bytes) => bytes;

/** A proxy to upstream on 127.0.0.1 port 0: { target, seen, faults, settles(), close() }.
 * faults[method] are used up one call each; a fault is (request, forward) => answer bytes,
 * and throws { code, details } to refuse. */
export async function startProxy(upstream) {
  const sidecar = new GrpcClient(upstream, credentials.createInsecure());
  const server = new Server();
  const proxy = {
    target: '',
    seen: Object.fromEntries(METHODS.map((m) => [m, []])),
    faults: Object.fromEntries(METHODS.map((m) => [m, []])),
    /** The Settle requests received, decoded, in order. */
    settles: () => proxy.seen.Settle.map(({ request }) => wire.SettleRequest.decode(request)),
    close() {
      server.forceShutdown();
      sidecar.close();
    },
  };
  for (const method of METHODS) {
    const path = `/earmark.v1.Budget/${method}`;
    const handler = (call, callback) => {
      proxy.seen[method].push({ request: call.request, metadata: call.metadata });
      // The worker token goes on; the rest of the metadata is the proxy's own.
      const metadata = new Metadata();
      for (const value of call.metadata.get('authorization')) metadata.add('authorization', value);
      const forward = () =>
        new Promise((resolve, reject) =>
          sidecar.makeUnaryRequest(path, same, same, call.request, metadata, { deadline: Date.now() + 30_000 }, (error, answer) =>
            error ? reject(error) : resolve(answer),
          ),
        );
      const fault = proxy.faults[method].shift() ?? ((request, next) => next());
      Promise.resolve()
        .then(() => fault(call.request, forward))
        .then(
          (answer) => callback(null, answer),
          // A refusal of the sidecar's reaches the worker as it was, its trailers too.
          (error) => callback({ code: error.code ?? status.INTERNAL, details: error.details ?? String(error), metadata: error.metadata }),
        );
    };
    server.register(path, handler, same, same, 'unary');
  }
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  proxy.target = `127.0.0.1:${port}`;
  return proxy;
}

/** The sidecar applies the call; its answer is lost on the way back. */
export function answerLost(code = status.UNAVAILABLE) {
  return async (request, forward) => {
    await forward();
    throw { code, details: 'the proxy lost the answer' };
  };
}

/** The sidecar applies the call; the worker gets body (OK status) instead of its answer. */
export function answeredWith(body) {
  return async (request, forward) => {
    await forward();
    return body;
  };
}

/** The call never reaches the sidecar; the worker gets code. */
export function refused(code, details = 'refused by the proxy') {
  return async () => {
    throw { code, details };
  };
}

/** The call waits for released (a promise) before it goes on to the sidecar. */
export function held(released) {
  return async (request, forward) => {
    await released;
    return forward();
  };
}

/** A promise and the function that resolves it. */
export function gate() {
  let open;
  const opened = new Promise((resolve) => {
    open = resolve;
  });
  return { opened, open };
}
