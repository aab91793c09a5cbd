// Loads the packed package's ES module build as `import` does, from both of its entry
// points, and prints the kinds of what they export (tests/clients/test_typescript.py).
const root = await import('@earmark/client');
const openai = await import('@earmark/client/openai');
const names = ['metered', 'RefusedError', 'StreamCappedError', 'EndpointNotMeteredError'];
console.log([...names.map((name) => typeof root[name]), typeof openai.metered].join(' '));
