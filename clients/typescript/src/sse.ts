// Splits a server-sent event stream into events as its bytes arrive, shows each to a
// route's tally (which reads the provider's usage from it), and gives back the text of the
// events the tally keeps, unchanged, so that the provider SDK parses what the provider sent.
import { SSE_EVENT_CHARS_MAX } from './limits.js';
import type { Json, Tally } from './routes.js';

export class Events {
  private buffer = '';
  // A carriage return at the end of a chunk may be the first half of a CRLF.
  private pendingCR = false;
  private readonly decoder = new TextDecoder();
  private readonly encoder = new TextEncoder();

  constructor(readonly tally: Tally) {}

  /** The bytes of the whole events that chunk completes and the tally keeps. */
  feed(chunk: Uint8Array): Uint8Array {
    this.buffer += this.lines(this.decoder.decode(chunk, { stream: true }));
    if (this.buffer.length > SSE_EVENT_CHARS_MAX) {
      // An event this large is not one a provider sends: pass it on unread rather than
      // hold it in memory.
      const out = this.buffer;
      this.buffer = '';
      return this.encoder.encode(out);
    }
    let kept = '';
    for (let end = this.buffer.indexOf('\n\n'); end >= 0; end = this.buffer.indexOf('\n\n')) {
      const raw = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      if (this.keep(raw)) kept += `${raw}\n\n`;
    }
    return this.encoder.encode(kept);
  }

  /** What is left when the stream ends: an event cut short, passed on for the SDK to judge. */
  rest(): Uint8Array {
    let out = this.buffer + this.lines(this.decoder.decode());
    if (this.pendingCR) out += '\n';
    this.buffer = '';
    this.pendingCR = false;
    const last = out.endsWith('\n\n') ? out.slice(0, -2) : out;
    // A last event whose blank line never came is still read for its usage.
    if (last.trim() !== '' && !this.keep(last)) return new Uint8Array();
    return this.encoder.encode(out);
  }

  /** text with its line ends as LF: SSE allows CRLF, CR and LF. */
  private lines(text: string): string {
    let joined = this.pendingCR ? `\r${text}` : text;
    this.pendingCR = joined.endsWith('\r');
    if (this.pendingCR) joined = joined.slice(0, -1);
    return joined.replace(/\r\n?/g, '\n');
  }

  private keep(raw: string): boolean {
    let name = '';
    const data: string[] = [];
    for (const line of raw.split('\n')) {
      if (line.startsWith('event:')) name = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    const joined = data.join('\n');
    if (joined.trim() === '' || joined.trim() === '[DONE]') return true;
    let parsed: Json;
    try {
      parsed = JSON.parse(joined) as Json;
    } catch {
      // Not JSON: the SDK decides what it means; it carries no usage.
      return true;
    }
    return this.tally.keep(name, parsed);
  }
}
