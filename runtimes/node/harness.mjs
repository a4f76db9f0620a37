// Node.js evaluator harness for JavaScript and TypeScript (no npm dependencies; the framing is
// in channel.mjs, the JSON-safe conversion of returned values in values.mjs, the row → case rule
// of job rows in rows.mjs). The protocol is runtimes/PROTOCOL.md.
//
// Started once per worker as `node [flags] harness.mjs CONFIG_JSON`, by a launcher that has
// already moved the host's channel to private descriptors: requests arrive on fd 3, replies
// leave on fd 4; fd 0 is /dev/null and fd 1 and 2 both go to the host's raw-output drain, so
// nothing the user's code writes can reach the reply channel. Frames, messages and the reply
// envelope are exactly those of runtimes/PROTOCOL.md; a run with in_flight > 1 (an async evaluator)
// is answered by inflight.mjs, many rows awaiting at once.
//
// Config: code_path (or a load frame with code), language ("javascript" | "typescript"),
// interface, module ("esm" | "cjs") and entry ({kind: "binding" | "default" | "exports", name})
// as the host's inspector (runtimes/node/inspect.cjs) found them, node_modules (the runtime's
// packages, or null), work_dir (a private writable folder), output_limit, result_limit,
// reap_strays.
//
// The code it gets is what the host's inspector compiled from the user's (runtimes/node/
// inspect.cjs: TypeScript through Node's own type transform with an inline source map, so
// errors name the user's own TS line; ES imports as CommonJS requires, lines kept). It is
// written to work_dir and loaded from there; a `node_modules` link next to it resolves both
// `import` and `require` of the pinned packages. Values are made JSON-safe here (markers as
// in Python); normalization happens on the host.

import fs from 'node:fs';
import path from 'node:path';
import nodeModule from 'node:module';
import childProcess from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import vm from 'node:vm';
import { copy, enableSync, encode, flush, heldState, hold, holdBulk, recv, send } from './channel.mjs';
import { forwardEgress } from './egress.mjs';
import { rowStore, runInFlight } from './inflight.mjs';
import { pickedCases } from './rows.mjs';
import { toWire } from './values.mjs';

const ENTRY = Symbol.for('evaluator-host.entry');
// A run frame's flush_ms (job chunks): replies of fast ok cases are held back and written together
// (see runtimes/PROTOCOL.md, "Ordering"); a slow or failed case's reply goes at once.
const SLOW_CASE_MS = 0.2;
const HELD_BYTES = 64 * 1024;
const BULK_VALUE = 4 * 1024; // a longer value's reply is a frame of its own
const realExit = process.exit.bind(process);

class OutputLimitExceeded extends Error {}
class ProcessExitCalled extends Error {}
class SoftTimeout extends Error {}

// -- soft timeouts --------------------------------------------------------------------------
// A case's synchronous part runs under vm's watchdog: past its timeout, V8 terminates whatever
// JavaScript runs (the user's own function included, whatever context it was compiled in, and no
// try/catch of the user's can hold it), the call throws ERR_SCRIPT_EXECUTION_TIMEOUT here and the
// worker stays warm. The host's hard kill (timeout + margin) stays the backstop, e.g. for a
// promise continuation that blocks the event loop.
const callScript = new vm.Script('call()', { filename: 'evaluator-host:call' });
const callContext = vm.createContext({ call: null });
function callWithin(thunk, ms) {
  if (!(ms > 0)) return thunk();
  callContext.call = thunk;
  try {
    return callScript.runInContext(callContext, { timeout: Math.max(1, Math.ceil(ms)) });
  } catch (err) {
    if (err && err.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') throw new SoftTimeout(`the evaluation exceeded ${ms} ms`);
    throw err;
  } finally {
    callContext.call = null;
  }
}

// -- captured output ------------------------------------------------------------------------
// process.stdout/stderr are replaced before anything creates the real ones (which would switch
// the shared fds 1/2 to non-blocking mode): writes land in the running case's capped buffer.
// Console swallows errors thrown by a stream, so the cap cannot be enforced by throwing alone:
// past it, the case is answered (output_limit) and the worker leaves at once.
let budget = null; // the running case's {limit, used, overflow, out: [], err: []}
let valueJson = null; // the JSON of the value the last case returned (null: none, or not an ok value)
let running = null; // index of the case being evaluated, for an answer from inside a write
let request = null; // id of the run message being answered (echoed in every reply)

const current = () => budget ?? rowStore.getStore() ?? null; // in an in_flight run: the writing row's
class CaptureStream extends Writable {
  constructor(which, fd) {
    super({ decodeStrings: false });
    this.which = which;
    this.fd = fd;
    this.isTTY = false;
    this.columns = 80;
  }

  _write(chunk, encoding, callback) {
    capture(this.which, chunk);
    callback();
  }
}

function capture(which, chunk) {
  const budget = current();
  if (budget === null) return;
  const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
  const size = Buffer.byteLength(text, 'utf8');
  const room = budget.limit - budget.used;
  if (size <= room) {
    budget.used += size;
    budget[which].push(text);
    return;
  }
  if (room > 0) budget[which].push(Buffer.from(text, 'utf8').subarray(0, room).toString('utf8'));
  budget.used = budget.limit;
  budget.overflow = true;
  if (running !== null) {
    const message = `stdout+stderr exceeded ${budget.limit} bytes`;
    send({ type: 'result', index: running, id: request, status: 'output_limit', error: failure('OutputLimit', message),
           stdout: budget.out.join(''), stderr: budget.err.join(''), truncated: true, duration_ms: 0, retire: true });
    process.reallyExit(0);
  }
  throw new OutputLimitExceeded('stdout+stderr exceeded the output cap');
}

for (const [name, which, fd] of [['stdout', 'out', 1], ['stderr', 'err', 2]]) {
  Object.defineProperty(process, name, { configurable: true, enumerable: true, value: new CaptureStream(which, fd) });
}

// -- processes the user's code starts --------------------------------------------------------
let spawned = false;
for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
  const original = childProcess[name];
  childProcess[name] = function (...args) {
    spawned = true;
    return original.apply(this, args);
  };
}
nodeModule.syncBuiltinESMExports();

function reapStrays(config) {
  // Only in a pid namespace of our own (a container, or the process backend's namespaces):
  // kill(-1) reaches every process there but this one and its init.
  if (!config.reap_strays || !spawned) return;
  spawned = false;
  try {
    process.kill(-1, 'SIGKILL');
  } catch {
    // ESRCH: nothing left
  }
}

// -- errors -------------------------------------------------------------------------------
const isMemory = (err) => err instanceof RangeError && /allocation failed/i.test(String(err.message));
function failure(type, message) {
  return { type, message, line: null, traceback: '' };
}

class Harness {
  constructor(config) {
    this.config = config;
    this.fn = null;
    this.loadError = null;
    this.file = null; // the module file actually imported
  }

  configure(more) {
    Object.assign(this.config, more);
  }

  // the file name stack traces show (TS frames are source-mapped to the user's .ts lines)
  get shownName() {
    return this.config.language === 'typescript' ? 'evaluator.ts' : 'evaluator.js';
  }

  // An error thrown by user code → {type, message, line, traceback}, frames of the user's file only.
  errorInfo(err) {
    if (!(err instanceof Error)) {
      const type = err !== null && typeof err === 'object' ? err.constructor?.name || 'Object' : typeof err;
      let message;
      try {
        message = typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
      } catch {
        message = String(err);
      }
      return { type: `thrown ${type}`, message, line: null, traceback: '' };
    }
    let stack = '';
    try {
      stack = String(err.stack || '');
    } catch {
      stack = '';
    }
    const dir = path.dirname(this.file || this.config.code_path || '/');
    const escaped = dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const frame = new RegExp(`(?:file://)?${escaped}/evaluator\\.(?:mjs|cjs|ts|js|mts|cts):(\\d+)(?::(\\d+))?`);
    let line = null;
    const kept = [];
    for (const text of stack.split('\n')) {
      const match = frame.exec(text);
      if (!match) continue;
      if (line === null) line = Number(match[1]);
      kept.push(text.replace(frame, `${this.shownName}:$1${match[2] ? ':$2' : ''}`));
    }
    let type = err.name || err.constructor?.name || 'Error';
    if (err instanceof ProcessExitCalled) type = 'ProcessExit';
    // Node's "Require stack:" lists the harness's copies of the user's file (each twice when the loader
    // nests): paths inside the sandbox that say nothing the frames (evaluator.js:LINE) do not
    const message = String(err.message).replace(/\nRequire stack:(?:\n- [^\n]*)*/, '');
    const head = `${type}: ${message}`;
    return { type, message, line, traceback: kept.length ? `${head}\n${kept.join('\n')}` : head };
  }

  // -- loading ------------------------------------------------------------------------------
  prepareSource(code) {
    const { module, entry } = this.config;
    let source = code;
    // ESM code may still `require()` its packages: give it a require of its own (line 1 only
    // grows; lines keep their numbers).
    if (module === 'esm' && /\brequire\s*\(/.test(source) && !/\b(?:const|let|var|function)\s+require\b/.test(source)) {
      source = 'import { createRequire as __evhCreateRequire } from "node:module"; ' +
        'const require = __evhCreateRequire(import.meta.url); ' + source;
    }
    if (entry.kind === 'binding') {
      // Hand the top-level binding to the harness; appended after the last line (before a source map).
      const hook = `\n;globalThis[Symbol.for("evaluator-host.entry")] = ${entry.name};\n`;
      const mapAt = source.lastIndexOf('\n//# sourceMappingURL=');
      source = mapAt >= 0 ? source.slice(0, mapAt) + hook + source.slice(mapAt) : source + hook;
    }
    return source;
  }

  async load(code) {
    budget = { limit: this.config.output_limit, used: 0, overflow: false, out: [], err: [] };
    try {
      const work = this.config.work_dir || path.join(process.cwd(), '.evaluator');
      fs.mkdirSync(work, { recursive: true, mode: 0o700 });
      if (this.config.node_modules) {
        try {
          fs.symlinkSync(this.config.node_modules, path.join(work, 'node_modules'), 'dir');
        } catch (err) {
          if (err.code !== 'EEXIST') throw err;
        }
      }
      this.file = path.join(work, this.config.module === 'esm' ? 'evaluator.mjs' : 'evaluator.cjs');
      fs.writeFileSync(this.file, this.prepareSource(code), { mode: 0o600 });
      const { entry } = this.config;
      let loaded;
      if (this.config.module === 'esm') {
        loaded = await import(pathToFileURL(this.file).href);
      } else {
        loaded = nodeModule.createRequire(this.file)(this.file);
      }
      if (entry.kind === 'binding') this.fn = globalThis[ENTRY];
      else if (entry.kind === 'default') this.fn = loaded.default;
      else this.fn = entry.name ? loaded?.[entry.name] : loaded;
      delete globalThis[ENTRY];
      if (typeof this.fn !== 'function') {
        throw new TypeError(`${entry.name || 'the exported entrypoint'} is not a function`);
      }
    } catch (err) {
      if (err instanceof OutputLimitExceeded) this.loadError = failure('OutputLimit', err.message);
      else this.loadError = this.errorInfo(err);
      this.loadError.stdout = budget.out.join('');
      this.loadError.stderr = budget.err.join('');
    } finally {
      budget = null;
    }
  }

  // -- evaluation ---------------------------------------------------------------------------
  args(c, correctAnswerKey) {
    const { inputs, outputs, trace } = c;
    const iface = this.config.interface;
    if (iface === 'evaluate') return [inputs, outputs, trace];
    if (iface === 'legacy') {
      const correct = inputs !== null && typeof inputs === 'object' ? inputs[correctAnswerKey] ?? null : null;
      return [c.app_params || {}, inputs, outputs, correct];
    }
    const variables = inputs !== null && typeof inputs === 'object' && !Array.isArray(inputs) ? { ...inputs } : {};
    Object.assign(variables, { inputs, outputs, output: outputs, completion: outputs, trace });
    return [variables];
  }

  async runCase(c, correctAnswerKey, timeoutMs = 0) {
    const limits = this.config;
    valueJson = null;
    budget = { limit: limits.output_limit, used: 0, overflow: false, out: [], err: [] };
    const current = budget;
    const reply = { type: 'result', status: 'ok' };
    const start = performance.now();
    try {
      if (this.loadError !== null) {
        Object.assign(reply, { status: 'error', error: this.loadError });
      } else {
        const entrypoint = this.fn; // called unbound: stack frames name the user's function only
        const args = this.args(c, correctAnswerKey);
        let value = callWithin(() => entrypoint(...args), timeoutMs);
        if (value !== null && typeof value === 'object' && typeof value.then === 'function') {
          // a promise that never settles is a timeout, not an exit of an idle loop; it cannot be
          // cancelled: answered at the timeout, the worker retires after it (a fresh one is started)
          const keepAlive = setInterval(() => {}, 1 << 30);
          let timer = null;
          try {
            const left = timeoutMs - (performance.now() - start);
            value = timeoutMs > 0
              ? await Promise.race([value, new Promise((resolve, reject) => {
                timer = setTimeout(() => reject(new SoftTimeout('pending')), Math.max(1, left));
              })])
              : await value;
          } catch (err) {
            if (err instanceof SoftTimeout) reply.retire = true;
            throw err;
          } finally {
            clearInterval(keepAlive);
            if (timer !== null) clearTimeout(timer);
          }
        }
        const wire = toWire(value);
        const text = encode(wire);
        const size = Buffer.byteLength(text, 'utf8');
        if (size > limits.result_limit) {
          const message = `the returned value is ${size} bytes of JSON; the cap is ${limits.result_limit}`;
          Object.assign(reply, { status: 'output_limit', error: failure('OutputLimit', message) });
        } else {
          reply.value = wire;
          valueJson = text;
        }
      }
    } catch (err) {
      if (err instanceof OutputLimitExceeded) {
        // current.overflow is set: reported below
      } else if (err instanceof SoftTimeout) {
        const message = `the evaluation exceeded timeout_s=${timeoutMs / 1000}`;
        Object.assign(reply, { status: 'timeout', error: failure('Timeout', message) });
      } else if (isMemory(err)) {
        Object.assign(reply, { status: 'memory_limit', error: this.errorInfo(err) });
      } else {
        Object.assign(reply, { status: 'error', error: this.errorInfo(err) });
      }
    }
    if (exitCode !== null && reply.status === 'ok') {
      // process.exit() was called and the error it threw was caught by the user's code
      Object.assign(reply, { status: 'error', error: failure('ProcessExit', `the evaluator called process.exit(${exitCode})`) });
    }
    if (exitCode !== null) reply.retire = true; // the pool replaces this worker
    reply.duration_ms = Math.round((performance.now() - start) * 1e6) / 1e6; // whole ns, as in Python: a short repr
    if (current.overflow && reply.status !== 'memory_limit') {
      const message = `stdout+stderr exceeded ${limits.output_limit} bytes`;
      Object.assign(reply, { status: 'output_limit', error: failure('OutputLimit', message) });
    }
    reply.stdout = current.out.join('');
    reply.stderr = current.err.join('');
    reply.truncated = current.overflow;
    budget = null;
    return reply;
  }

  async serve() {
    reapStrays(this.config);
    send({ type: 'ready', load_error: this.loadError, soft_timeouts: true });
    for (;;) {
      const message = recv();
      if (message === null || message.op !== 'run') return;
      const key = message.correct_answer_key || 'correct_answer';
      const cases = message.cases ?? pickedCases(message.rows || [], message.pick || {}, copy);
      request = message.id ?? null;
      const flushMs = Number(message.flush_ms) || 0;
      const timeoutMs = Number(message.timeout_s || 0) * 1000;
      if (Number(message.in_flight) > 1) { // an async evaluator: many rows awaiting at once (inflight.mjs)
        const leave = await runInFlight(cases, { harness: this, key, request, flushMs, limit: Number(message.in_flight),
          timeoutMs, callWithin, toWire, encode, hold, holdBulk, flush, failure,
          reap: () => reapStrays(this.config), exitCode: () => exitCode, isMemory,
          isOutputLimit: (err) => err instanceof OutputLimitExceeded, isTimeout: (err) => err instanceof SoftTimeout });
        if (leave) return; else continue;
      }
      for (let index = 0; index < cases.length; index++) {
        running = index;
        const reply = await this.runCase(cases[index], key, timeoutMs);
        running = null;
        reply.index = index;
        reply.id = request;
        reapStrays(this.config);
        if (flushMs > 0 && valueJson !== null && valueJson.length <= BULK_VALUE && reply.status === 'ok'
            && !reply.retire && reply.stdout === '' && reply.stderr === '' && !reply.truncated) {
          holdBulk(index, request, valueJson, reply.duration_ms); // joins the open "results" frame
        } else {
          hold(reply);
        }
        const state = heldState();
        if (reply.status !== 'ok' || reply.retire || reply.duration_ms >= SLOW_CASE_MS
            || state.bytes >= HELD_BYTES || state.ageMs >= flushMs) flush();
        if (reply.retire) return;
      }
      flush();
    }
  }
}

let exitCode = null;
process.exit = function exit(code) {
  exitCode = code === undefined ? (process.exitCode ?? 0) : code;
  if (rowStore.getStore()) rowStore.getStore().exited = exitCode; // in_flight: which row called it
  throw new ProcessExitCalled(`the evaluator called process.exit(${exitCode})`);
};
// Stray async failures (a rejected promise nobody awaited, a throw in a timer) must not end the
// worker; they are written to the running case's stderr.
process.on('unhandledRejection', (reason) => {
  const budget = current();
  if (budget !== null) budget.err.push(`unhandled rejection: ${reason instanceof Error ? reason.stack : String(reason)}\n`);
});
process.on('uncaughtException', (err) => {
  const budget = current();
  if (budget !== null) budget.err.push(`uncaught exception: ${err instanceof Error ? err.stack : String(err)}\n`);
});

async function main() {
  const config = JSON.parse(process.argv[2] || '{}');
  if (config.sync) enableSync();
  if (config.egress) await forwardEgress(config.egress.socket, Number(config.egress.port));
  config.output_limit = Number(config.output_limit || 1 << 20);
  config.result_limit = Number(config.result_limit || 1 << 20);
  process.setSourceMapsEnabled(true);
  const harness = new Harness(config);
  let code;
  if (config.code_path) {
    code = fs.readFileSync(config.code_path, 'utf8');
  } else {
    const message = recv(); // an unbound worker: wait for its evaluator
    if (message === null || message.op !== 'load') realExit(0);
    if (message.ack) send({ type: 'loading' }); // alive, before the user's code loads
    code = message.code;
    const { op, ack, code: _code, env, ...rest } = message;
    // the workspace secrets the evaluator lists (and, with egress, the proxy variables): its env
    Object.assign(process.env, env || {});
    harness.configure(rest);
  }
  await harness.load(code);
  await harness.serve();
  realExit(0);
}

main().catch((err) => {
  fs.writeSync(2, `harness failure: ${err && err.stack}\n`);
  realExit(70);
});
