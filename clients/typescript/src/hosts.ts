// Which provider an OpenAI-compatible base URL prices its calls under, and what an Azure
// OpenAI api-version streams. The Python SDK's src/earmark/client/hosts.py, rule for rule.
//
// An OpenAI client (the openai package) pointed at another provider's OpenAI-compatible API
// (DeepSeek, Groq, Mistral, Together, OpenRouter, xAI, Azure) bills at that provider's
// prices, which the price book keeps under genai-prices' provider ids. metered() names the
// provider from the base URL's host when the caller gave no provider option:
// - a host of HOSTS (api.deepseek.com: deepseek, ...), or an Azure OpenAI host (AZURE_HOST,
//   genai-prices' azure pattern): that provider;
// - OpenAI's own API (api.openai.com and its regional hosts, eu.api.openai.com..., or no
//   base URL), and a loopback host (localhost, 127.0.0.0/8, ::1: a local fake, proxy or
//   gateway of OpenAI's API, as the tests run): openai;
// - any other host: none (ProviderNotNamedError), since pricing its calls as OpenAI's models
//   would charge them at rates it does not bill; a local server of open models (vLLM,
//   Ollama) on a loopback host passes provider too, or its models are looked up as OpenAI's.
import { isIP } from 'node:net';
import { ProviderNotNamedError } from './errors.js';

export const OPENAI = 'openai';
export const AZURE = 'azure';

/** OpenAI-compatible APIs by their host, named as genai-prices names them (its provider id;
 * each host is the one its api_pattern matches). */
export const HOSTS: Readonly<Record<string, string>> = {
  'api.openai.com': OPENAI,
  'api.deepseek.com': 'deepseek',
  'api.groq.com': 'groq',
  'api.mistral.ai': 'mistral',
  'api.together.xyz': 'together',
  'openrouter.ai': 'openrouter',
  'api.openrouter.ai': 'openrouter',
  'api.x.ai': 'x-ai',
};
/** OpenAI's own regional hosts (the openai package's data residency: eu.api.openai.com...). */
export const OPENAI_REGIONAL = '.api.openai.com';
/** Azure OpenAI's hosts: genai-prices' azure api_pattern, on the host alone. */
export const AZURE_HOST = /^(?:[^.]*\.)?(?:openai\.azure\.com|azure-api\.net|cognitiveservices\.azure\.com|services\.ai\.azure\.com)$/;
/** The providers whose answers report what the call cost (OpenRouter's usage.cost, in
 * dollars): read, and settled at where the budget counts money (reported.ts). */
export const REPORTS_COST: ReadonlySet<string> = new Set(['openrouter']);

// Azure OpenAI's api-versions that take stream_options (and so stream their usage): the GA
// 2024-10-21 and later, the previews from 2024-09-01-preview (earlier ones answer 400
// "Unrecognized request argument supplied: stream_options"; 2024-08-01-preview is reported
// both ways, and is taken as one that does not). Dates as YYYY-MM-DD, which sort as they run.
export const STREAM_USAGE_SINCE = '2024-10-21';
export const STREAM_USAGE_PREVIEW_SINCE = '2024-09-01';
const API_VERSION = /^(\d{4})-(\d{2})-(\d{2})(-preview)?$/;

/** The base URL's host, lower case, without an IPv6 address's brackets ('' for none, and
 * for a URL that does not parse). */
export function hostOf(baseURL: string): string {
  if (baseURL === '') return '';
  try {
    return new URL(baseURL).hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  } catch {
    return '';
  }
}

function isLoopback(host: string): boolean {
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) {
    // ::1, and an IPv4 loopback address mapped into IPv6 (WHATWG URLs write it in hex).
    const mapped = /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(host);
    return host === '::1' || mapped;
  }
  return false;
}

/** The provider baseURL's host names: a known host's, azure for Azure OpenAI's, openai for
 * OpenAI's own, for none and for a loopback host. Throws ProviderNotNamedError for any
 * other host. */
export function namedProvider(baseURL: string): string {
  const host = hostOf(baseURL);
  if (host === '' || isLoopback(host)) return OPENAI;
  if (Object.hasOwn(HOSTS, host)) return HOSTS[host];
  if (host.endsWith(OPENAI_REGIONAL)) return OPENAI;
  if (AZURE_HOST.test(host)) return AZURE;
  throw new ProviderNotNamedError(host);
}

function isDate(year: number, month: number, day: number): boolean {
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/** Whether Azure OpenAI's apiVersion takes stream_options.include_usage, and so ends a chat
 * stream with its usage. null (Azure's v1 API, /openai/v1/, which takes no api-version)
 * does; so does a version not dated (the v1 API's "latest", "preview"). */
export function streamsUsage(apiVersion: string | null): boolean {
  if (apiVersion === null) return true;
  const found = API_VERSION.exec(apiVersion.trim());
  if (found === null) return true;
  const [, year, month, day, preview] = found;
  if (!isDate(Number(year), Number(month), Number(day))) return true;
  return `${year}-${month}-${day}` >= (preview ? STREAM_USAGE_PREVIEW_SINCE : STREAM_USAGE_SINCE);
}
