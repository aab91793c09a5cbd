// Azure OpenAI at the wire: OpenAI's routes (routes-openai.ts: the same paths, bodies,
// streams and usage), under the deployment a call names, priced as the deployment's base
// model. An AzureOpenAI client (the openai package) names it in the path
// (/openai/deployments/{deployment}/chat/completions?api-version=...), or, for the paths
// Azure serves without one (/openai/responses) and for Azure's v1 API through a plain
// OpenAI client (/openai/v1/chat/completions), in the body's model. The path wins when both
// are there: it is what Azure serves.
//
// metered(client, earmark, budgetId, { deployments: { 'my-gpt4o': 'gpt-4o' } }) prices a
// call to my-gpt4o as gpt-4o under provider "azure"; a call to a deployment the map does
// not name is refused before it is sent (DeploymentNotMappedError), since Earmark cannot
// tell what it costs. Azure's additions to OpenAI's shapes are passed on unread: a stream's
// first chunk carries only prompt_filter_results, with no choices and no usage, and the
// usage chunk is the one with usage, whatever its choices.
//
// A chat stream through an AzureOpenAI client whose apiVersion predates stream usage (it
// takes no stream_options: a GA version before 2024-10-21, a preview before
// 2024-09-01-preview; hosts.ts streamsUsage) is refused before it is sent
// (StreamUsageNotReportedError): Azure would answer 400 to the stream_options Earmark adds,
// and without them the stream carries no usage, so its hold could only go in doubt.
//
// A call with data_sources (Azure OpenAI On Your Data: the service queries a search index,
// and an embedding deployment for vector search, billed to those resources apart from the
// call's tokens) is refused before anything is held or sent (ToolNotMeteredError), as the
// Python SDK's wire_openai.Deployed refuses it.
import { DeploymentNotMappedError, StreamUsageNotReportedError, ToolNotMeteredError } from './errors.js';
import { streamsUsage } from './hosts.js';
import { isChat } from './routes-openai.js';
import { FREE, isObject, within, type Call, type CallSettings, type Json, type JsonObject, type Route, type Routing } from './routes.js';

// The deployment a path names, after the base URL's own path.
const DEPLOYMENT = /^\/deployments\/((?!\.\.?\/)[^/]+)(?=\/)/;

/** The base model deployments maps name to; throws DeploymentNotMappedError when it maps
 * none. */
export function baseModel(deployments: Readonly<Record<string, string>>, name: string): string {
  if (!Object.hasOwn(deployments, name) || typeof deployments[name] !== 'string' || deployments[name] === '') {
    throw new DeploymentNotMappedError(name);
  }
  return deployments[name];
}

/** Whether a body's field asks for something: present, and not null, false, 0, '', [] or {}
 * (what the Python SDK's truth test passes over). */
function given(value: Json | undefined): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (isObject(value)) return Object.keys(value).length > 0;
  return Boolean(value);
}

/** route, whose calls are priced as the base model of their deployment (named by the path,
 * else by the body's model); a chat stream under an apiVersion that streams no usage
 * refused. */
function deployed(route: Route, deployments: Readonly<Record<string, string>>, fromPath: string | null, apiVersion: string | null): Route {
  return {
    ...route,
    call(body: JsonObject, settings: CallSettings): Call {
      if (given(body.data_sources)) {
        throw new ToolNotMeteredError(
          'data_sources (Azure OpenAI On Your Data)',
          "runs searches and embeddings billed apart from the call's tokens, which Earmark cannot hold",
        );
      }
      const call = route.call(body, settings);
      const model = baseModel(deployments, fromPath ?? call.model);
      if (call.stream && isChat(route) && apiVersion !== null && !streamsUsage(apiVersion)) {
        throw new StreamUsageNotReportedError(apiVersion);
      }
      return { ...call, model };
    },
  };
}

/** routing (OpenAI's), with each metered route's calls priced as their deployment's base
 * model, under apiVersion (an AzureOpenAI client's; null: Azure's v1 API, which takes
 * none). */
export function azureRouting(routing: Routing, deployments: Readonly<Record<string, string>>, apiVersion: string | null = null): Routing {
  return (path, prefix) => {
    const route = routing(path, prefix);
    if (route === FREE || route === null) return route;
    const found = within(path, prefix) ? DEPLOYMENT.exec(path.slice(prefix.length)) : null;
    return deployed(route, deployments, found === null ? null : found[1], apiVersion);
  };
}
