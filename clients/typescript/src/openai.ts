// @earmark/client/openai, kept for the workers that import metered() from here: metered()
// now meters OpenAI and Anthropic clients alike and lives at the package's root, with the
// errors it throws.
export { metered, type FetchLike, type MeterableClient, type MeterOptions } from './metered.js';
export { EndpointNotMeteredError, HoldCappedError, SocketNotMeteredError, StreamCappedError } from './errors.js';
export { RefusedError } from './types.js';
