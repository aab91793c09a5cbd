// A TypeScript user's file, which tests/clients/test_typescript.py type-checks against the
// packed package as an ES module (typed.mts) and as CommonJS (typed.cts): metered() answers
// the provider SDK's own client types, and the errors come from the package's root.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import {
  EarmarkClient,
  EndpointNotMeteredError,
  RefusedError,
  StreamCappedError,
  metered,
} from '@earmark/client';

const earmark = new EarmarkClient();
const llm: OpenAI = metered(new OpenAI({ apiKey: 'k' }), earmark, 'b', { degrade: true });
const claude: Anthropic = metered(new Anthropic({ apiKey: 'k' }), earmark, 'b', {
  outputTokensMax: 1024,
});
const errors: Error[] = [new EndpointNotMeteredError('POST', '/v1/x'), new StreamCappedError('r', 1)];
export { llm, claude, errors, RefusedError };
