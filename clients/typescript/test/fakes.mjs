// In-process fake providers for the tests of the providers the Python fakes do not cover
// (Azure OpenAI, Gemini, Bedrock): HTTP servers on 127.0.0.1 port 0 that answer in each
// provider's published wire format and record every request that reached them.
import http from 'node:http';

/** A fake on 127.0.0.1: handle(request, body, response) answers each request, whose
 * method, URL, headers and text body are kept in fake.requests. */
export async function serve(handle) {
  const fake = { requests: [], url: '', close: null };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const request = { method: req.method, url: new URL(req.url, 'http://fake'), headers: req.headers, body };
      fake.requests.push(request);
      Promise.resolve(handle(request, res)).catch((error) => {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: String(error) } }));
      });
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.url = `http://127.0.0.1:${server.address().port}`;
  fake.close = () => new Promise((resolve) => server.close(resolve));
  return fake;
}

export function json(res, status, value, headers = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(value));
}

/** Server-sent events, each `data: <json>`, with lineEnd framing. */
export function sse(res, events, { lineEnd = '\n', cut = false } = {}) {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const event of events) res.write(`data: ${typeof event === 'string' ? event : JSON.stringify(event)}${lineEnd}${lineEnd}`);
  if (cut) res.socket.destroy();
  else res.end();
}
