// Rows of an async evaluator, many in flight at once (a run frame's in_flight; runtimes/PROTOCOL.md).
//
// The host sends in_flight N > 1 only for an evaluator it detected as async (an async function, or
// one that returns a promise). Contract, as in the Python harness (evaluator_harness/inflight.py):
//
// * rows start in order, at most N awaiting at once; a row whose call returns a plain value is done
//   at once;
// * each row has its own output budget: console and process.stdout/stderr writes go to the row whose
//   async context wrote them (an AsyncLocalStorage); past output_limit the row's further output is
//   dropped and its reply is output_limit (the worker stays: unlike a one-at-a-time run, no exit);
// * each row has its own timer: timeout_s after it started, a row still pending is answered `timeout`;
//   a promise cannot be cancelled, so it goes on in the background: if it has not settled GRACE_MS
//   after the run's last row, the run's last reply carries `retire` and the worker leaves after it
//   (the host starts a fresh one). Code that blocks the event loop stops every row; the host's own
//   timer ends the worker;
// * a rejection is the row's `error` reply with the user's line; process.exit() in a row retires the
//   worker after that row's reply (the host runs the rest elsewhere);
// * replies are written in row order, as soon as a row and every row before it are done; plain ok
//   replies join `results` frames in a flush_ms run; stray processes are reaped once, at the end.

import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';

export const rowStore = new AsyncLocalStorage(); // the running row's output budget
const GRACE_MS = 50;
const BULK_VALUE = 4 * 1024;

// deps: {harness, key, request, flushMs, limit, timeoutMs, toWire, encode, hold, holdBulk, flush,
//        failure, exitCode: () => number | null, isOutputLimit: (err) => boolean, isMemory: (err) => boolean}
// Resolves true when the worker must leave after the run (its last reply says so).
export function runInFlight(cases, deps) {
  const { harness, request, limit, timeoutMs } = deps;
  const bulk = deps.flushMs > 0;
  const rows = new Map(); // index -> {reply | null}
  const pendingTimedOut = new Set(); // promises answered `timeout` that have not settled
  let next = 0; // the next row to start
  let nextReply = 0;
  let running = 0;
  let retire = false;
  let wake = null;
  const keepAlive = setInterval(() => {}, 1 << 30); // a loop with only pending promises must not exit

  const settle = (index, row, reply) => {
    if (row.reply !== null) return;
    const b = row.budget;
    reply.duration_ms = Math.round((performance.now() - row.start) * 1e6) / 1e6;
    if (b.overflow && reply.status !== 'memory_limit' && reply.status !== 'timeout') {
      delete reply.value;
      row.json = null;
      Object.assign(reply, { status: 'output_limit', error: deps.failure('OutputLimit', `stdout+stderr exceeded ${b.limit} bytes`) });
    }
    reply.stdout = b.out.join('');
    reply.stderr = b.err.join('');
    reply.truncated = b.overflow;
    if (b.exited !== undefined) { // this row called process.exit(): the worker leaves after its reply
      if (reply.status === 'ok') {
        Object.assign(reply, { status: 'error', error: deps.failure('ProcessExit', `the evaluator called process.exit(${b.exited})`) });
      }
      reply.retire = true;
    }
    row.reply = reply;
    if (row.timer) clearTimeout(row.timer);
    if (wake) wake();
  };
  const valueReply = (row, value) => {
    const wire = deps.toWire(value);
    const text = deps.encode(wire);
    const size = Buffer.byteLength(text, 'utf8');
    if (size > harness.config.result_limit) {
      const message = `the returned value is ${size} bytes of JSON; the cap is ${harness.config.result_limit}`;
      return { type: 'result', status: 'output_limit', error: deps.failure('OutputLimit', message) };
    }
    row.json = text;
    return { type: 'result', status: 'ok', value: wire };
  };
  const errorReply = (err) => {
    if (deps.isOutputLimit(err)) return { type: 'result', status: 'ok', value: null }; // overflow: settle()
    const status = deps.isMemory(err) ? 'memory_limit' : 'error';
    return { type: 'result', status, error: harness.errorInfo(err) };
  };

  const start = (index) => {
    const row = { reply: null, json: null, start: performance.now(), timer: null,
                  budget: { limit: harness.config.output_limit, used: 0, overflow: false, out: [], err: [] } };
    rows.set(index, row);
    if (harness.loadError !== null) {
      settle(index, row, { type: 'result', status: 'error', error: harness.loadError });
      return;
    }
    let value;
    try {
      value = rowStore.run(row.budget, () => harness.fn(...harness.args(cases[index], deps.key)));
    } catch (err) {
      settle(index, row, errorReply(err));
      return;
    }
    if (value === null || typeof value !== 'object' || typeof value.then !== 'function') {
      settle(index, row, valueReply(row, value));
      return;
    }
    running += 1;
    let finished = false;
    const done = (reply) => {
      finished = true;
      pendingTimedOut.delete(value);
      if (row.reply !== null) return;
      running -= 1;
      settle(index, row, reply);
    };
    Promise.resolve(value).then((v) => done(valueReply(row, v)), (err) => done(errorReply(err)));
    if (timeoutMs > 0) {
      row.timer = setTimeout(() => {
        if (finished || row.reply !== null) return;
        running -= 1;
        pendingTimedOut.add(value);
        const message = `the evaluation exceeded timeout_s=${timeoutMs / 1000}`;
        settle(index, row, { type: 'result', status: 'timeout', error: deps.failure('Timeout', message) });
      }, timeoutMs);
    }
  };

  const emit = (last) => {
    for (;;) {
      const row = rows.get(nextReply);
      if (row === undefined || row.reply === null) return;
      const index = nextReply;
      rows.delete(index);
      nextReply += 1;
      const reply = row.reply;
      const final = last && rows.size === 0 && next >= cases.length;
      if (final && pendingTimedOut.size > 0) reply.retire = true;
      reply.index = index;
      reply.id = request;
      if (bulk && row.json !== null && row.json.length <= BULK_VALUE && reply.status === 'ok' && !reply.retire
          && reply.stdout === '' && reply.stderr === '' && !reply.truncated) {
        deps.holdBulk(index, request, row.json, reply.duration_ms);
      } else {
        deps.hold(reply);
      }
      if (reply.retire) {
        retire = true;
        return;
      }
    }
  };

  return (async () => {
    try {
      for (;;) {
        // no row starts once one called process.exit() (the worker leaves after that row's reply)
        while (!retire && deps.exitCode() === null && running < limit && next < cases.length) start(next++);
        if (retire || ((next >= cases.length || deps.exitCode() !== null) && running === 0)) break;
        emit(false);
        if (retire) break;
        deps.flush();
        if (running === 0 && (next >= cases.length || deps.exitCode() !== null)) break;
        await new Promise((resolve) => { wake = resolve; });
        wake = null;
      }
      if (!retire && pendingTimedOut.size > 0) {
        await new Promise((resolve) => setTimeout(resolve, GRACE_MS));
      }
      if (!retire) emit(true);
      deps.reap();
      deps.flush();
      return retire;
    } finally {
      clearInterval(keepAlive);
      for (const row of rows.values()) if (row.timer) clearTimeout(row.timer);
    }
  })();
}
