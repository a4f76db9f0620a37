// `node runtimes/node/selftest.mjs` exits 0 when the harness loads a compiled evaluator from a
// file, answers a batch over fds 3/4 in order, captures console output per case and reports a
// thrown error with the user's line. No host service needed.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'evh-node-selftest-'));
const codePath = path.join(dir, 'evaluator.cjs');
fs.writeFileSync(codePath, 'function evaluate(inputs, outputs, trace) {\n  console.log("seen", outputs)\n' +
  '  if (outputs === "boom") throw new TypeError("line three")\n  return outputs === inputs.expected\n}\n');
const config = { code_path: codePath, language: 'javascript', interface: 'evaluate', module: 'cjs',
  entry: { kind: 'binding', name: 'evaluate' }, work_dir: path.join(dir, 'work'), node_modules: null };
const harness = path.join(path.dirname(fileURLToPath(import.meta.url)), 'harness.mjs');
const child = spawn(process.execPath, [harness, JSON.stringify(config)], { stdio: ['ignore', 'inherit', 'inherit', 'pipe', 'pipe'] });

const frame = (message) => {
  const body = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length);
  return Buffer.concat([head, body]);
};
let buffer = Buffer.alloc(0);
const replies = [];
child.stdio[4].on('data', (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  while (buffer.length >= 4 && buffer.length >= 4 + buffer.readUInt32BE(0)) {
    const size = buffer.readUInt32BE(0);
    replies.push(JSON.parse(buffer.subarray(4, 4 + size).toString()));
    buffer = buffer.subarray(4 + size);
  }
  if (replies.length === 4) child.stdio[3].end();
});
child.stdio[3].write(frame({ op: 'run', cases: [
  { inputs: { expected: 'a' }, outputs: 'a' }, { inputs: { expected: 'a' }, outputs: 'b' }, { inputs: {}, outputs: 'boom' },
] }));
child.on('exit', (code) => {
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(code, 0);
  assert.deepEqual(replies[0], { type: 'ready', load_error: null, soft_timeouts: true });
  assert.equal(replies[1].value, true);
  assert.equal(replies[1].stdout, 'seen a\n');
  assert.equal(replies[2].value, false);
  assert.equal(replies[3].status, 'error');
  assert.equal(replies[3].error.type, 'TypeError');
  assert.equal(replies[3].error.line, 3);
  console.log('node harness selftest: ok');
});
