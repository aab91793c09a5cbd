// The built-in tools a metered request may give the model, classified as the Python SDK
// classifies them (src/earmark/client/wire_*.py, tests/client/test_tools.py): every tool type
// of the installed openai, @anthropic-ai/sdk, @google/genai and Bedrock runtime packages is
// in its route's table (read from the packages' .d.ts files by the TypeScript compiler), and
// a request that gives the model a tool whose fee Earmark cannot hold is refused before
// anything is held or sent, naming the tool, while a tool that bills tokens only, or a fee
// Earmark holds, is sent: OpenAI's Chat and Responses and Anthropic's Messages against the
// Python fakes (FAKE_OPENAI_URL, FAKE_ANTHROPIC_URL), Azure OpenAI's On Your Data, Gemini and
// Bedrock against an in-process fake (test/fakes.mjs).
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import { BedrockRuntimeClient, ConverseCommand, InvokeModelCommand } from '@aws-sdk/client-bedrock-runtime';
import { GoogleGenAI } from '@google/genai';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import OpenAI, { AzureOpenAI } from 'openai';
import ts from 'typescript';
import { BEDROCK_TOOL_KINDS } from '../dist/esm/bedrock.js';
import { EndpointNotMeteredError, ModalityNotMeteredError, ToolNotMeteredError, metered } from '../dist/esm/index.js';
import { responseUsage } from '../dist/esm/openai-background.js';
import { ANTHROPIC_TOOLS, anthropicRouting, messagesUsage } from '../dist/esm/routes-anthropic.js';
import { GEMINI_TOOLS, geminiUsage, googleRouting } from '../dist/esm/routes-google.js';
import { CHAT_TOOLS, CHAT_TOOL_PARAMETERS, NAMESPACE_TOOLS, RESPONSES_TOOLS, openaiRouting } from '../dist/esm/routes-openai.js';
import { TOKENS_ONLY, classified } from '../dist/esm/routes.js';
import { json, serve } from './fakes.mjs';
import { FAKE_ANTHROPIC_URL, FAKE_OPENAI_URL, NEVER_SENT, RATES, client, ledger, putPrice, usdBudget, wireSpy } from './helpers.mjs';

const PACKAGE = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const settings = { toolCallsMax: 10 };
const FUNCTION = { type: 'function', name: 'look', parameters: {}, strict: true };
const IMAGES = { type: 'image_generation' };
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens.
const QUESTION = 'One line on row locks.';

// The installed packages' tool types, as their .d.ts files declare them.

/**
 * The types of the packages' declarations the tests read, by alias: a source of the test's
 * own, compiled (types only, nothing emitted) as though it were a file of this package, so
 * that each import resolves to the installed package's .d.ts. The unions are types only, not
 * reachable at runtime, so the compiler reads them as Python's typing reads its packages'.
 */
const DECLARATIONS = `
import type { ChatCompletionTool, ChatCompletionCreateParamsBase } from 'openai/resources/chat/completions/completions';
import type { Tool, NamespaceTool, FunctionShellTool, ResponseCreateParamsBase } from 'openai/resources/responses/responses';
import type { ToolUnion } from '@anthropic-ai/sdk/resources/messages/messages';
import type { BetaToolUnion } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { Tool as GeminiTool } from '@google/genai';
import type { Tool as BedrockTool } from '@aws-sdk/client-bedrock-runtime';
export type ChatTools = ChatCompletionTool;
export type ChatParams = ChatCompletionCreateParamsBase;
export type ResponsesTools = Tool;
export type ResponsesParams = ResponseCreateParamsBase;
export type NamespaceTools = NamespaceTool['tools'][number];
export type ShellEnvironments = NonNullable<FunctionShellTool['environment']>;
export type AnthropicTools = ToolUnion;
export type AnthropicBetaTools = BetaToolUnion;
export type GeminiTools = GeminiTool;
export type BedrockTools = BedrockTool;
`;
let compiled = null;

/** The checker and the declared type of each alias of DECLARATIONS (compiled once). */
function declared() {
  if (compiled !== null) return compiled;
  const file = path.join(PACKAGE, 'test', '__tool_types__.ts');
  const options = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, skipLibCheck: true, noEmit: true };
  const host = ts.createCompilerHost(options);
  const read = host.getSourceFile.bind(host);
  const exists = host.fileExists.bind(host);
  host.getSourceFile = (name, language, ...rest) => (name === file ? ts.createSourceFile(name, DECLARATIONS, language) : read(name, language, ...rest));
  host.fileExists = (name) => name === file || exists(name);
  const program = ts.createProgram([file], options, host);
  const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  assert.deepEqual(problems, [], 'the packages declare the types the test reads');
  const checker = program.getTypeChecker();
  const types = new Map();
  for (const statement of program.getSourceFile(file).statements) {
    if (ts.isTypeAliasDeclaration(statement)) types.set(statement.name.text, checker.getTypeAtLocation(statement.name));
  }
  compiled = { checker, types };
  return compiled;
}

function members(type) {
  return type.isUnion() ? type.types : [type];
}

/** The string literals a type allows (null and undefined aside). */
function literals(checker, type) {
  return members(checker.getNonNullableType(type)).filter((each) => each.isStringLiteral()).map((each) => each.value);
}

/** The values of the `type` field of each member of an alias's union, by member: what a
 * request may name each tool's type. */
function typeLiterals(alias) {
  const { checker, types } = declared();
  const found = new Map();
  for (const member of members(types.get(alias))) {
    const field = checker.getPropertyOfType(member, 'type');
    found.set(checker.typeToString(member), field ? literals(checker, checker.getTypeOfSymbol(field)) : []);
  }
  return found;
}

/** The tool types the aliases' members name that table does not list (a member with no type
 * literal at all is listed by its name: it could not be classified). */
function unclassified(aliases, table) {
  const missing = new Set();
  for (const alias of aliases) {
    for (const [member, values] of typeLiterals(alias)) {
      if (values.length === 0) missing.add(member);
      for (const value of values) if (!Object.hasOwn(table, value)) missing.add(value);
    }
  }
  return [...missing].sort();
}

/** The fields of an alias's object type. */
function fields(alias) {
  const { checker, types } = declared();
  return checker.getPropertiesOfType(types.get(alias)).map((field) => field.name);
}

/** The field each member of an alias's union requires: the one key that names its kind. */
function requiredFields(alias) {
  const { checker, types } = declared();
  return members(types.get(alias)).flatMap((member) =>
    checker.getPropertiesOfType(member).filter((field) => (field.flags & ts.SymbolFlags.Optional) === 0).map((field) => field.name),
  );
}

/** The error a route throws reading body; fails when it throws none. */
function refusal(route, body) {
  try {
    route.call(body, settings);
  } catch (error) {
    return error;
  }
  assert.fail(`not refused: ${JSON.stringify(body.tools ?? body)}`);
}

const responsesRoute = () => openaiRouting('/v1/responses', '/v1');
const chatRoute = () => openaiRouting('/v1/chat/completions', '/v1');
const messagesRoute = () => anthropicRouting('/v1/messages', '');

test('every Responses tool type of the installed openai, and every tool a namespace groups, is classified', () => {
  assert.deepEqual(unclassified(['ResponsesTools'], RESPONSES_TOOLS), []);
  assert.deepEqual(unclassified(['NamespaceTools'], NAMESPACE_TOOLS), []);
  assert.ok(typeLiterals('ResponsesTools').size > 10, 'the Responses Tool union was read');
});

test('every Chat tool type and tool or search parameter of the installed openai is classified', () => {
  const known = new Set(['tools', 'tool_choice', 'parallel_tool_calls', 'max_tool_calls']);
  const named = [...fields('ChatParams'), ...fields('ResponsesParams')].filter((name) => name.includes('tool') || name.includes('search'));
  assert.deepEqual(unclassified(['ChatTools'], CHAT_TOOLS), []);
  assert.deepEqual([...new Set(named)].filter((name) => !known.has(name) && !Object.hasOwn(CHAT_TOOL_PARAMETERS, name)), []);
  assert.ok(named.includes('web_search_options'), 'the Chat params were read');
});

test('every tool type of the installed @anthropic-ai/sdk, beta.messages\' too, is classified', () => {
  assert.deepEqual(unclassified(['AnthropicTools', 'AnthropicBetaTools'], ANTHROPIC_TOOLS), []);
  assert.ok(typeLiterals('AnthropicBetaTools').size > 20, 'the BetaToolUnion was read');
});

test('every tool kind of the installed @google/genai is classified: MCP servers as tokens, partner search refused', () => {
  const kinds = fields('GeminiTools');
  assert.ok(kinds.includes('googleSearch') && kinds.includes('functionDeclarations'), 'the Tool fields were read');
  assert.deepEqual(kinds.filter((kind) => !Object.hasOwn(GEMINI_TOOLS, kind)), []);
  const route = googleRouting('/v1beta/models/gemini-x:generateContent', '');
  const body = (tool) => ({ contents: [{ parts: [{ text: 'hi' }] }], tools: [tool] });
  for (const kind of ['exaAiSearch', 'parallelAiSearch']) {
    const error = refusal(route, body({ [kind]: {} }));
    assert.deepEqual([error instanceof ToolNotMeteredError, error.tool], [true, kind]);
  }
  assert.equal(route.call(body({ mcpServers: [] }), settings).model, 'gemini-x');
});

test('a Gemini file that names no mimeType is refused unsent, and billed audio tokens leave the call in doubt', () => {
  const route = googleRouting('/v1beta/models/gemini-x:generateContent', '');
  const error = refusal(route, { contents: [{ parts: [{ fileData: { fileUri: 'u' } }] }] });
  assert.ok(error instanceof ModalityNotMeteredError, String(error));
  const usage = { promptTokenCount: 10, candidatesTokenCount: 5 };
  const details = (modality) => [{ modality: 'TEXT', tokenCount: 8 }, { modality, tokenCount: 2 }];
  const found = [
    geminiUsage({ ...usage, promptTokensDetails: details('AUDIO') }),
    geminiUsage({ ...usage, cacheTokensDetails: details('AUDIO') }),
    geminiUsage({ ...usage, promptTokensDetails: details('IMAGE') })?.inputTokens,
  ];
  assert.deepEqual(found, [null, null, 10]);
});

test('every tool kind of the installed Bedrock runtime is classified: toolSpec and cachePoint pass, systemTool is refused', () => {
  const kinds = requiredFields('BedrockTools').filter((kind) => kind !== '$unknown');
  assert.deepEqual(kinds.filter((kind) => kind !== 'systemTool' && !BEDROCK_TOOL_KINDS.includes(kind)), []);
  assert.ok(kinds.includes('systemTool') && kinds.includes('toolSpec'), 'the Tool union was read');
});

test('every held fee is one the answer counts, so no held fee settles at nothing', () => {
  const fees = (table) => [...new Set(Object.keys(table).map((type) => classified(table, { type }, type).fee))].filter(Boolean);
  const usage = { input_tokens: 1, output_tokens: 1 };
  for (const fee of fees(RESPONSES_TOOLS)) {
    assert.equal(responseUsage({ usage, output: [{ type: `${fee}_call` }] }).toolCalls?.[fee], 1, fee);
  }
  for (const fee of fees(ANTHROPIC_TOOLS)) {
    assert.equal(messagesUsage({ ...usage, server_tool_use: { [`${fee}_requests`]: 1 } }).toolCalls?.[fee], 1, fee);
  }
  assert.deepEqual([fees(RESPONSES_TOOLS).sort(), fees(ANTHROPIC_TOOLS)], [['code_interpreter', 'file_search', 'web_search'], ['web_search']]);
});

// What each route holds, passes and refuses, on its own.

test('a Responses image_generation tool is refused naming it: reason, about and message as in Python', () => {
  const error = refusal(responsesRoute(), { model: 'm', input: 'hi', tools: [FUNCTION, { type: 'web_search' }, IMAGES] });
  assert.deepEqual(
    [error.tool, error.about, error.reason, error instanceof EndpointNotMeteredError, error.message.startsWith('the image_generation tool bills each image')],
    ['image_generation', { tool: 'image_generation' }, 'TOOL_NOT_METERED', true, true],
  );
});

test('Responses tools whose fee cannot be held, unclassified and untyped ones are refused, each named', () => {
  const cases = [
    [{ type: 'programmatic_tool_calling' }, 'programmatic_tool_calling'],
    [{ type: 'shell', environment: { type: 'container_auto' } }, 'shell'],
    [{ type: 'shell', environment: { type: 'container_reference' } }, 'shell'],
    [{ type: 'shell', environment: 'somewhere' }, 'shell'],
    [{ type: 'namespace', name: 'n', description: 'd', tools: [IMAGES] }, 'image_generation'],
    [{ type: 'web_search_2027_01_01' }, 'web_search_2027_01_01'],
    [{ type: 'constructor' }, 'constructor'],
    [{ name: 'untyped' }, 'untyped'],
    [{ type: null }, 'untyped'],
    [{ type: 7 }, 'untyped'],
  ];
  for (const [tool, named] of cases) assert.equal(refusal(responsesRoute(), { model: 'm', input: 'hi', tools: [FUNCTION, tool] }).tool, named);
});

test('Responses tools that bill tokens only pass with no fee; fee tools are held by kind', () => {
  const tools = [
    FUNCTION, { type: 'custom', name: 'c' }, { type: 'computer' }, { type: 'computer_use_preview' },
    { type: 'mcp', server_label: 's', server_url: 'https://mcp.example' }, { type: 'tool_search' }, { type: 'local_shell' },
    { type: 'apply_patch' }, { type: 'shell' }, { type: 'shell', environment: { type: 'local' } },
    { type: 'namespace', name: 'n', description: 'd', tools: [FUNCTION] }, 'not a tool',
  ];
  assert.deepEqual(responsesRoute().call({ model: 'm', input: 'hi', tools }, settings).toolCallsMax, {});
  const fees = [{ type: 'web_search_2025_08_26' }, { type: 'web_search_preview_2025_03_11' }, { type: 'file_search' }, { type: 'code_interpreter' }];
  assert.deepEqual(responsesRoute().call({ model: 'm', input: 'hi', tools: fees, max_tool_calls: 3 }, settings).toolCallsMax, { web_search: 3, file_search: 3, code_interpreter: 3 });
});

test('every hosted shell environment of the installed openai is refused, and a local one passes', () => {
  const environments = [...typeLiterals('ShellEnvironments').values()].flat();
  const passing = environments.filter((type) => classified(RESPONSES_TOOLS, { type: 'shell', environment: { type } }, 'shell') === TOKENS_ONLY);
  assert.deepEqual([passing, environments.length > 1], [['local'], true]);
});

test('Chat web_search_options and a tool type Chat does not have are refused; function and custom tools pass', () => {
  const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
  const options = refusal(chatRoute(), { ...body, web_search_options: {} });
  assert.deepEqual([options.tool, options.why.slice(0, 27)], ['web_search_options', 'bills a search fee per call']);
  assert.equal(refusal(chatRoute(), { ...body, tools: [{ type: 'web_search' }] }).tool, 'web_search');
  const tools = [{ type: 'function', function: { name: 'f', parameters: {} } }, { type: 'custom', custom: { name: 'c' } }];
  assert.deepEqual(chatRoute().call({ ...body, tools, web_search_options: null }, settings).toolCallsMax, {});
});

test('Anthropic tools: code execution, the advisor, an unclassified and a non-string type refused; the rest pass, web search held', () => {
  const body = (...tools) => ({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], tools });
  const cases = [
    [{ type: 'code_execution_20250825', name: 'code_execution' }, 'code_execution_20250825'],
    [{ type: 'advisor_20260301', name: 'advisor', model: 'claude-opus' }, 'advisor_20260301'],
    [{ type: 'web_search_20990101', name: 'web_search' }, 'web_search_20990101'],
    [{ type: 'web_search_preview' }, 'web_search_preview'],
    [{ type: 5, name: 'five' }, 'untyped'],
  ];
  for (const [tool, named] of cases) {
    const error = refusal(messagesRoute(), body({ name: 'mine', input_schema: { type: 'object' } }, tool));
    assert.deepEqual([error.tool, error.reason], [named, 'TOOL_NOT_METERED']);
  }
  assert.match(refusal(messagesRoute(), body(cases[0][0])).message, /^the code_execution_20250825 tool bills its container's running time/);
  const passing = body(
    { name: 'mine', input_schema: { type: 'object' } }, { type: null, name: 'also' }, { type: 'custom', name: 'typed' },
    { type: 'web_fetch_20250910', name: 'web_fetch' }, { type: 'bash_20250124', name: 'bash' }, { type: 'memory_20250818', name: 'memory' },
    { type: 'mcp_toolset', mcp_server_name: 's' }, { type: 'tool_search_tool_regex', name: 'ts' },
    { type: 'web_search_20260209', name: 'web_search', max_uses: 3 }, { type: 'web_search_20250305', name: 'web_search' },
  );
  assert.deepEqual(messagesRoute().call(passing, settings).toolCallsMax, { web_search: 3 + 10 });
});

test('Gemini: grounding tools, an unclassified kind and non-text output or audio input are refused; the tools that bill tokens pass', () => {
  const route = googleRouting('/v1beta/models/gemini-x:generateContent', '');
  const contents = [{ role: 'user', parts: [{ text: 'hi' }] }];
  const tools = [
    ['googleSearch', 'googleSearch'], ['google_search_retrieval', 'google_search_retrieval'], ['googleMaps', 'googleMaps'],
    ['enterpriseWebSearch', 'enterpriseWebSearch'], ['retrieval', 'retrieval'], ['fileSearch', 'fileSearch'], ['someNewTool', 'someNewTool'],
  ];
  for (const [kind, named] of tools) {
    const error = refusal(route, { contents, tools: [{ functionDeclarations: [] }, { [kind]: {} }] });
    assert.deepEqual([error instanceof ToolNotMeteredError, error.tool, error.about], [true, named, { tool: named }]);
  }
  assert.match(refusal(route, { contents, tools: [{ googleSearch: {} }] }).message, /^the googleSearch tool bills a fee per grounded prompt/);
  const modalities = [
    [{ generationConfig: { responseModalities: ['TEXT', 'IMAGE'] } }, 'image output'],
    [{ generation_config: { response_modalities: ['AUDIO'] } }, 'audio output'],
    [{ generationConfig: { speechConfig: { voiceConfig: {} } } }, 'audio output'],
    [{ contents: [{ role: 'user', parts: [{ inlineData: { mimeType: 'audio/wav', data: '' } }] }] }, 'audio input'],
  ];
  for (const [asked, named] of modalities) {
    const error = refusal(route, { contents, ...asked });
    assert.deepEqual([error instanceof ModalityNotMeteredError, error instanceof EndpointNotMeteredError, error.about], [true, true, { modality: named }]);
  }
  const passing = { contents, tools: [{ functionDeclarations: [] }, { codeExecution: {} }, { url_context: {} }, { computerUse: {} }], generationConfig: { responseModalities: ['TEXT'] } };
  assert.deepEqual(route.call(passing, settings).toolCallsMax, {});
});

// Through metered clients: refused unsent and unheld, or sent.

/** Asserts error is a ToolNotMeteredError (or a stand-in for one) naming tool. */
function refusedNaming(error, tool) {
  assert.ok(error instanceof ToolNotMeteredError, String(error));
  assert.ok(error instanceof EndpointNotMeteredError, String(error));
  assert.deepEqual([error.tool, error.about, error.reason], [tool, { tool }, 'TOOL_NOT_METERED']);
}

const earmark = client();
const spy = wireSpy(earmark);
const gpt = `gpt-ts-tools-${process.pid}`;
const claude = `claude-ts-tools-${process.pid}`;
const gemini = `gemini-ts-tools-${process.pid}`;
const bedrockClaude = `anthropic.claude-ts-tools-${process.pid}-v1:0`;
const nova = `amazon.nova-ts-tools-${process.pid}-v1:0`;
const azureBase = `gpt-azure-ts-tools-${process.pid}`;
let fake;

before(async () => {
  assert.ok(FAKE_OPENAI_URL && FAKE_ANTHROPIC_URL, 'FAKE_OPENAI_URL and FAKE_ANTHROPIC_URL are set by tests/clients/test_typescript.py');
  // One fake for Azure's, Gemini's and Bedrock's paths: each answers its own (a chat
  // completion, a generateContent answer, a Converse one), billing 30 input and 20 output
  // tokens.
  fake = await serve((req, res) => {
    if (/^\/openai\/deployments\/[^/]+\/chat\/completions$/.test(req.url.pathname)) {
      const choice = { index: 0, message: { role: 'assistant', content: 'Row locks.' }, finish_reason: 'stop' };
      return json(res, 200, { id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o', choices: [choice], usage: { prompt_tokens: 30, completion_tokens: 20, total_tokens: 50 } });
    }
    if (/:generateContent$/.test(req.url.pathname)) {
      const candidate = { content: { parts: [{ text: 'Row locks.' }], role: 'model' }, index: 0, finishReason: 'STOP' };
      return json(res, 200, { candidates: [candidate], usageMetadata: { promptTokenCount: 30, candidatesTokenCount: 20, totalTokenCount: 50 } });
    }
    if (/\/converse$/.test(req.url.pathname)) {
      const output = { message: { role: 'assistant', content: [{ text: 'Row locks.' }] } };
      return json(res, 200, { output, stopReason: 'end_turn', usage: { inputTokens: 30, outputTokens: 20, totalTokens: 50 }, metrics: { latencyMs: 1 } });
    }
    return json(res, 400, { message: 'unknown operation' }, { 'x-amzn-errortype': 'ValidationException' });
  });
  await putPrice(earmark, 'openai', gpt);
  await putPrice(earmark, 'anthropic', claude);
  await putPrice(earmark, 'google', gemini);
  await putPrice(earmark, 'aws', `regional.${bedrockClaude}`);
  await putPrice(earmark, 'aws', nova);
  await putPrice(earmark, 'azure', azureBase);
});
after(async () => {
  earmark.close();
  await fake?.close();
});

async function budget(name) {
  const id = await usdBudget(earmark, name, 1_000_000);
  spy.watch(id);
  fake.requests.length = 0;
  return id;
}

/** Asserts nothing reached the wire (the spy's fetch, or the in-process fake) and nothing is
 * held or charged on budget id. */
async function nothingSentOrHeld(id) {
  assert.deepEqual([spy.sent.length, fake.requests.length], [0, 0], 'nothing reached the wire');
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0], 'nothing was held or charged');
}

test('OpenAI: a Responses or Chat tool whose fee cannot be held is refused unsent and unheld; tools that bill tokens are sent', async () => {
  const id = await budget('tools-openai');
  const llm = metered(new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: spy.fetch }), earmark, id);
  const refused = {
    image_generation: () => llm.responses.create({ model: gpt, input: NEVER_SENT, max_output_tokens: 500, tools: [FUNCTION, IMAGES] }),
    shell: () => llm.responses.create({ model: gpt, input: NEVER_SENT, tools: [{ type: 'shell', environment: { type: 'container_auto' } }] }),
    programmatic_tool_calling: () => llm.responses.stream({ model: gpt, input: NEVER_SENT, tools: [{ type: 'programmatic_tool_calling' }] }).finalResponse(),
    web_search_options: () => llm.chat.completions.create({ model: gpt, messages: [{ role: 'user', content: NEVER_SENT }], web_search_options: {} }),
  };
  for (const [tool, call] of Object.entries(refused)) refusedNaming(await call().catch((e) => e), tool);
  await nothingSentOrHeld(id);
  const tools = [FUNCTION, { type: 'mcp', server_label: 's', server_url: 'https://mcp.example', require_approval: 'never' }, { type: 'shell', environment: { type: 'local' } }];
  await llm.responses.create({ model: gpt, input: QUESTION, max_output_tokens: 500, tools });
  await llm.chat.completions.create({ model: gpt, max_tokens: 500, messages: [{ role: 'user', content: QUESTION }], tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] });
  // Each sent once, held for its answer alone: no tool fee.
  assert.deepEqual(spy.sent.map((sent) => [sent.path, sent.state.held]), [['/v1/responses', 8 * 500], ['/v1/chat/completions', 8 * 500]]);
  assert.deepEqual((await ledger(earmark, id)).slice(1), [0, 0]);
});

test('Azure OpenAI: a chat call with data_sources (On Your Data) is refused unsent and unheld; one without them is sent', async () => {
  const id = await budget('tools-azure');
  const azure = new AzureOpenAI({ endpoint: fake.url, apiKey: 'azure-key', apiVersion: '2024-10-21', fetch: spy.fetch, maxRetries: 0 });
  const llm = metered(azure, earmark, id, { deployments: { 'my-gpt': azureBase } });
  const search = { type: 'azure_search', parameters: { endpoint: 'https://search.example', index_name: 'i' } };
  const ask = (text, more = {}) => llm.chat.completions.create({ model: 'my-gpt', max_tokens: 500, messages: [{ role: 'user', content: text }], ...more });
  refusedNaming(await ask(NEVER_SENT, { data_sources: [search] }).catch((e) => e), 'data_sources (Azure OpenAI On Your Data)');
  await nothingSentOrHeld(id);
  await ask(QUESTION, { data_sources: [] });
  assert.deepEqual([fake.requests.length, spy.sent.map((sent) => sent.state.held)], [1, [8 * 500]]);
  assert.deepEqual(await ledger(earmark, id), [2 * 30 + 8 * 20, 0, 0]);
});

test('Anthropic: code execution and the advisor (beta) are refused unsent and unheld; a web search is held at its fee beside tools that bill tokens', async () => {
  const id = await budget('tools-anthropic');
  const llm = metered(new Anthropic({ baseURL: FAKE_ANTHROPIC_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: spy.fetch }), earmark, id);
  const ask = (content) => [{ role: 'user', content }];
  const refused = {
    code_execution_20250825: () => llm.messages.create({ model: claude, max_tokens: 500, messages: ask(NEVER_SENT), tools: [{ type: 'code_execution_20250825', name: 'code_execution' }] }),
    code_execution_20250522: () => llm.messages.stream({ model: claude, max_tokens: 500, messages: ask(NEVER_SENT), tools: [{ type: 'code_execution_20250522', name: 'code_execution' }] }).finalMessage(),
    advisor_20260301: () => llm.beta.messages.create({ model: claude, max_tokens: 500, messages: ask(NEVER_SENT), tools: [{ type: 'advisor_20260301', name: 'advisor', model: 'claude-opus-4-6' }] }),
  };
  for (const [tool, call] of Object.entries(refused)) refusedNaming(await call().catch((e) => e), tool);
  await nothingSentOrHeld(id);
  const tools = [
    { name: 'lookup', input_schema: { type: 'object', properties: {} } },
    { type: 'web_fetch_20250910', name: 'web_fetch' },
    { type: 'bash_20250124', name: 'bash' },
    { type: 'web_search_20250305', name: 'web_search', max_uses: 2 },
  ];
  await llm.messages.create({ model: claude, max_tokens: 500, messages: ask('find row locks'), tools });
  assert.deepEqual(spy.sent.map((sent) => sent.state.held), [8 * 500 + 2 * RATES.search]);
  assert.deepEqual((await ledger(earmark, id)).slice(1), [0, 0]);
});

test('Gemini: a grounding tool and image output are refused unsent and unheld; function declarations and code execution are sent', async () => {
  const id = await budget('tools-gemini');
  const llm = metered(new GoogleGenAI({ apiKey: 'gemini-key', httpOptions: { baseUrl: fake.url, fetch: spy.fetch } }), earmark, id);
  const search = await llm.models.generateContent({ model: gemini, contents: NEVER_SENT, config: { tools: [{ googleSearch: {} }] } }).catch((e) => e);
  refusedNaming(search, 'googleSearch');
  const maps = await llm.models.generateContentStream({ model: gemini, contents: NEVER_SENT, config: { tools: [{ googleMaps: {} }] } }).catch((e) => e);
  refusedNaming(maps, 'googleMaps');
  const image = await llm.models.generateContent({ model: gemini, contents: NEVER_SENT, config: { responseModalities: ['TEXT', 'IMAGE'] } }).catch((e) => e);
  assert.ok(image instanceof ModalityNotMeteredError, String(image));
  assert.deepEqual(image.about, { modality: 'image output' });
  await nothingSentOrHeld(id);
  const tools = [{ functionDeclarations: [{ name: 'lookup', description: 'looks up' }] }, { codeExecution: {} }];
  const reply = await llm.models.generateContent({ model: gemini, contents: QUESTION, config: { maxOutputTokens: 500, tools } });
  assert.equal(reply.text, 'Row locks.');
  assert.deepEqual([fake.requests.length, spy.sent.map((sent) => sent.state.held)], [1, [8 * 500]]);
  assert.deepEqual(await ledger(earmark, id), [2 * 30 + 8 * 20, 0, 0]);
});

test('Bedrock: a guardrail, optimized latency, a system tool, an unclassified kind and Nova Sonic are refused unsent and unheld; a toolSpec is sent', async () => {
  const id = await budget('tools-bedrock');
  const bedrock = new BedrockRuntimeClient({
    region: 'us-east-1',
    endpoint: fake.url,
    credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'secret' },
    requestHandler: new NodeHttpHandler(),
    maxAttempts: 1,
  });
  const llm = metered(bedrock, earmark, id);
  const messages = (text) => [{ role: 'user', content: [{ text }] }];
  const converse = (more) => llm.send(new ConverseCommand({ modelId: bedrockClaude, messages: messages(NEVER_SENT), ...more }));
  const invoke = (modelId, body, more = {}) => llm.send(new InvokeModelCommand({ modelId, body: JSON.stringify(body), ...more }));
  const claudeBody = (tools) => ({ anthropic_version: 'bedrock-2023-05-31', max_tokens: 50, messages: [{ role: 'user', content: NEVER_SENT }], tools });
  const refused = [
    ['guardrail', () => converse({ guardrailConfig: { guardrailIdentifier: 'g', guardrailVersion: '1' } })],
    ['optimized latency', () => converse({ performanceConfig: { latency: 'optimized' } })],
    ['nova_grounding', () => converse({ toolConfig: { tools: [{ systemTool: { name: 'nova_grounding' } }] } })],
    ['guardrail', () => invoke(bedrockClaude, claudeBody([]), { guardrailIdentifier: 'g', guardrailVersion: '1' })],
    ['optimized latency', () => invoke(bedrockClaude, claudeBody([]), { performanceConfigLatency: 'optimized' })],
    ['code_execution_20250825', () => invoke(bedrockClaude, claudeBody([{ type: 'code_execution_20250825', name: 'code_execution' }]))],
    ['nova_grounding', () => invoke(nova, { schemaVersion: 'messages-v1', messages: messages(NEVER_SENT), toolConfig: { tools: [{ systemTool: { name: 'nova_grounding' } }] } })],
    ['someNewTool', () => invoke(nova, { schemaVersion: 'messages-v1', messages: messages(NEVER_SENT), toolConfig: { tools: [{ someNewTool: {} }] } })],
  ];
  for (const [tool, call] of refused) refusedNaming(await call().catch((e) => e), tool);
  const sonic = await invoke('amazon.nova-sonic-v1:0', { schemaVersion: 'messages-v1', messages: messages(NEVER_SENT) }).catch((e) => e);
  assert.ok(sonic instanceof EndpointNotMeteredError && !(sonic instanceof ToolNotMeteredError), String(sonic));
  await nothingSentOrHeld(id);
  const toolSpec = { name: 'lookup', inputSchema: { json: { type: 'object', properties: {} } } };
  await llm.send(
    new ConverseCommand({
      modelId: bedrockClaude,
      messages: messages(QUESTION),
      inferenceConfig: { maxTokens: 500 },
      performanceConfig: { latency: 'standard' },
      toolConfig: { tools: [{ toolSpec }, { cachePoint: { type: 'default' } }] },
    }),
  );
  assert.deepEqual(fake.requests.map((request) => request.url.pathname), [`/model/${encodeURIComponent(bedrockClaude)}/converse`]);
  assert.deepEqual(await ledger(earmark, id), [2 * 30 + 8 * 20, 0, 0]);
});
