// Node.js evaluator harness for JavaScript and TypeScript (no npm dependencies; framing: channel.mjs,
// returned values made JSON-safe: values.mjs, job rows → cases: rows.mjs, user errors: errors.mjs).
//
// Started once per worker as `node [flags] harness.mjs CONFIG_JSON`, by a launcher that has
// already moved the host's channel to private descriptors: requests arrive on fd 3, replies
// leave on fd 4; fd 0 is /dev/null and fd 1 and 2 both go to the host's raw-output drain, so
// nothing the user's code writes can reach the reply channel. Frames, messages and the reply
// envelope are exactly those of runtimes/PROTOCOL.md; a run with in_flight > 1 (an async evaluator)
// is answered by inflight.mjs, many rows awaiting at once.
//
// The process's main thread only supervises (supervisor.mjs): this same file runs again as a
// worker_threads Worker, the evaluator's thread, which loads the user's code and does all of the above;
// the supervisor ends it at a case's timeout or when its heap overflows, answers that case, and starts a
// fresh one (the process stays warm). Nothing below with an effect runs in the main thread.
//
// Config: code_path (or a load frame with code), language ("javascript" | "typescript"),
// interface, module ("esm" | "cjs") and entry ({kind: "binding" | "default" | "exports", name})
// as the host's inspector (runtimes/node/inspect.cjs) found them, node_modules (the runtime's
// packages, or null), work_dir (a private writable folder), output_limit, result_limit,
// reap_strays, memory_mb (the evaluator thread's heap limit: supervisor.mjs).
//
// The code it gets is what the host's inspector compiled from the user's (runtimes/node/
// inspect.cjs: TypeScript through Node's own type transform with an inline source map, so
// errors name the user's own TS line; ES imports as CommonJS requires, lines kept). It is
// written to work_dir and loaded from there; a `node_modules` link next to it resolves both
// `import` and `require` of the pinned packages; normalization of values happens on the host.

import fs from 'node:fs';
import path from 'node:path';
import nodeModule from 'node:module';
import childProcess from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { copy, enableSync, encode, flush, heldState, hold, holdBulk, recv, send, shareFrames, sharedFrame, shareWrites }
  from './channel.mjs';
import { caseMarks, supervise } from './supervisor.mjs';
import { rowStore, runInFlight } from './inflight.mjs';
import { pickedCases } from './rows.mjs';
import { errorInfo, failure, isMemory } from './errors.mjs';
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
    realExit(0); // in the evaluator's thread: the thread ends, and the supervisor exits with its code
  }
  throw new OutputLimitExceeded('stdout+stderr exceeded the output cap');
}

if (!isMainThread) {
  for (const [name, which, fd] of [['stdout', 'out', 1], ['stderr', 'err', 2]]) {
    Object.defineProperty(process, name, { configurable: true, enumerable: true, value: new CaptureStream(which, fd) });
  }
}

// -- processes the user's code starts --------------------------------------------------------
let spawned = false;
if (!isMainThread) {
  for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
    const original = childProcess[name];
    childProcess[name] = function (...args) {
      spawned = true;
      return original.apply(this, args);
    };
  }
  nodeModule.syncBuiltinESMExports();
}

const marks = isMainThread ? null : caseMarks(workerData); // what the supervisor watches (supervisor.mjs)

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
    const dir = path.dirname(this.file || this.config.code_path || '/');
    return errorInfo(err, dir, this.shownName, err instanceof ProcessExitCalled ? 'ProcessExit' : null);
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

  async runCase(c, correctAnswerKey) {
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
        let value = entrypoint(...this.args(c, correctAnswerKey));
        if (value !== null && typeof value === 'object' && typeof value.then === 'function') {
          // a promise that never settles must be a timeout (the host's), not an exit of an idle loop
          const keepAlive = setInterval(() => {}, 1 << 30);
          try {
            value = await value;
          } finally {
            clearInterval(keepAlive);
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

  async serve(resume) {
    reapStrays(this.config);
    // a fresh thread after the supervisor ended a case goes on with that run's remaining cases
    let from = 0;
    let resumed = resume ? sharedFrame(Buffer.from(workerData.framesSab)) : null;
    if (resumed !== null) {
      from = resume.index;
      parentPort.postMessage({ loaded: true }); // the supervisor answers the ended case, then lets us go on
      marks.waitToGo();
    } else {
      send({ type: 'ready', load_error: this.loadError, soft_timeouts: true });
    }
    for (;;) {
      const message = resumed ?? recv();
      resumed = null;
      if (message === null || message.op !== 'run') return;
      const key = message.correct_answer_key || 'correct_answer';
      const cases = message.cases ?? pickedCases(message.rows || [], message.pick || {}, copy);
      request = message.id ?? null;
      const flushMs = Number(message.flush_ms) || 0;
      const inFlight = Number(message.in_flight) > 1;
      marks.run(Number(message.timeout_s || 0) * 1000, flushMs === 0 && !inFlight);
      if (inFlight) { // an async evaluator: many rows awaiting at once (inflight.mjs)
        const leave = await runInFlight(cases, { harness: this, key, request, flushMs, limit: Number(message.in_flight),
          timeoutMs: Number(message.timeout_s || 0) * 1000, toWire, encode, hold, holdBulk, flush, failure,
          reap: () => reapStrays(this.config), exitCode: () => exitCode, isMemory,
          isOutputLimit: (err) => err instanceof OutputLimitExceeded });
        if (leave) return; else continue;
      }
      for (let index = from; index < cases.length; index++) {
        running = index;
        marks.starts(index);
        const reply = await this.runCase(cases[index], key);
        marks.ends();
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
      from = 0;
      flush();
    }
  }
}

let exitCode = null;
if (!isMainThread) {
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
}

async function main() {
  const { config, load, resume } = workerData;
  shareWrites(new Int32Array(workerData.stateSab));
  shareFrames(Buffer.from(workerData.framesSab));
  if (config.sync) enableSync();
  config.output_limit = Number(config.output_limit || 1 << 20);
  config.result_limit = Number(config.result_limit || 1 << 20);
  process.setSourceMapsEnabled(true);
  const harness = new Harness(config);
  let code;
  if (config.code_path) {
    code = fs.readFileSync(config.code_path, 'utf8');
  } else {
    // an unbound worker: wait for its evaluator (a thread started after another was ended: its frame)
    const message = load ?? recv();
    if (message === null || message.op !== 'load') realExit(0);
    if (load === null) {
      if (message.ack) send({ type: 'loading' }); // alive, before the user's code loads
      parentPort.postMessage({ load: message }); // kept by the supervisor for the next thread
    }
    code = message.code;
    const { op, ack, code: _code, env, ...rest } = message;
    // the workspace secrets the evaluator lists (and, with egress, the proxy variables): its env
    Object.assign(process.env, env || {});
    harness.configure(rest);
  }
  await harness.load(code);
  await harness.serve(resume);
  realExit(0);
}

const failed = (err) => { fs.writeSync(2, `harness failure: ${err && err.stack}\n`); realExit(70); };
if (isMainThread) supervise(new URL(import.meta.url), JSON.parse(process.argv[2] || '{}')).catch(failed);
else main().catch(failed);
