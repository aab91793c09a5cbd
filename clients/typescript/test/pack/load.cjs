// Loads the packed package's CommonJS build as `require` does, from both of its entry
// points, and prints the kinds of what they export (tests/clients/test_typescript.py).
const root = require('@earmark/client');
const openai = require('@earmark/client/openai');
const names = ['metered', 'RefusedError', 'StreamCappedError', 'EndpointNotMeteredError'];
console.log([...names.map((name) => typeof root[name]), typeof openai.metered].join(' '));
