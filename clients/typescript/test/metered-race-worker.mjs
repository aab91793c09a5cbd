// One racing worker process for tests/clients/test_typescript.py: it calls the fake OpenAI
// (FAKE_OPENAI_URL) through metered() on BUDGET until Earmark refuses, plain or streaming
// (MODE), and prints what it did as one JSON line.
import OpenAI from 'openai';
import { EarmarkClient, RefusedError, metered } from '../dist/esm/index.js';

const [budgetId, mode] = [process.argv[2], process.argv[3]];
const earmark = new EarmarkClient();
const openai = new OpenAI({ baseURL: process.env.FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 30_000 });
const llm = metered(openai, earmark, budgetId);
const request = { model: 'gpt-4o', max_tokens: 400, messages: [{ role: 'user', content: 'x'.repeat(4_000) }] };
const done = { calls: 0, refused: 0, streamed: mode === 'stream' };
for (;;) {
  try {
    if (mode === 'stream') {
      for await (const _ of await llm.chat.completions.create({ ...request, stream: true })) {
        // Reading the whole stream is what settles it.
      }
    } else {
      await llm.chat.completions.create(request);
    }
  } catch (error) {
    if (!(error instanceof RefusedError)) throw error;
    done.refused += 1;
    break;
  }
  done.calls += 1;
}
earmark.close();
console.log(JSON.stringify(done));
