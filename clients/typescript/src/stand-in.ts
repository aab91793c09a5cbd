// Earmark's errors thrown through a provider SDK. The SDKs' stream helpers
// (chat.completions.stream, responses.stream, messages.stream) pass their own base error
// (OpenAIError, AnthropicError) through as it is and wrap any other error in one, so an
// error metered() raises inside the SDK is thrown as a stand-in: an instance of the SDK's
// base error with the Earmark error's fields, that stands for it. EarmarkClientError's
// instanceof counts a stand-in as the error it stands for, so that
// `error instanceof RefusedError` holds for it, as the Python SDK's errors are subclasses
// of both Earmark's class and the SDK's.

/** Where a stand-in keeps the Earmark error it stands for. */
export const STANDS_FOR = Symbol('earmark.standsFor');

/** An instance of base (the SDK's base error) standing for error: its own fields (message,
 * name, stack, reason, about, refusal...) are error's. */
export function standIn(error: Error, base: new (message: string) => Error): Error {
  const stand = new base(error.message);
  Object.defineProperties(stand, Object.getOwnPropertyDescriptors(error));
  Object.defineProperty(stand, STANDS_FOR, { value: error });
  return stand;
}
