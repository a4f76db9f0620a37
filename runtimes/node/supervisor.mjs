// The harness's supervising thread: the process's main thread runs no user code. It starts the
// harness proper (harness.mjs again, as a worker_threads Worker: the *evaluator's thread*), which
// reads requests on fd 3 and writes replies on fd 4 itself, so the warm path never crosses threads.
//
// What the supervisor adds (runtimes/PROTOCOL.md, "Timeouts" and "Memory"):
//
// * soft timeouts: while a case of a one-at-a-time run runs, the evaluator's thread marks it in shared
//   memory (state: active, its index, the run's timeout, its start); a case still running past its
//   timeout — a `while (true) {}`, or a promise that never settles — has its thread terminated
//   (Worker.terminate stops a runaway loop), is answered `timeout` here, and a fresh thread loads the
//   evaluator again and goes on with the run's remaining cases: the process, the worker the host
//   holds, stays warm. The ended case is answered once the fresh thread has loaded the evaluator (so
//   the host's next case is not the one that waits for that start);
// * heap limits: the evaluator's thread runs under resourceLimits (maxOldGenerationSizeMb: the family's
//   heap_mb, 3/4 of memory_mb); a heap overflow ends the thread (ERR_WORKER_OUT_OF_MEMORY), not the
//   process, and the running case is answered `memory_limit` the same way;
// * a case is ended only by a compare-and-swap on its mark (1 running → 2 being ended): a case that
//   finishes at that moment never writes its reply (its thread waits to be terminated), so every case
//   has exactly one reply;
// * the writes counter of the sync marks (channel.mjs) is shared, so the numbering goes on across
//   threads; the request being answered is copied to shared memory as it arrives (channel.mjs
//   shareFrames), so the remaining cases survive the thread;
// * a run that cannot be resumed that way (held replies, flush_ms; rows in flight, in_flight > 1; a
//   request too large for the copy) ends the process instead, as before: the host's own timer and
//   its rerun of unanswered rows handle it. So does the evaluator's thread ending any other way (EOF,
//   process.exit, a harness failure): the process exits with its code.
//
// The host's hard kill (timeout + margin) and the sandbox's memory limit stay the backstops.

import { Worker } from 'node:worker_threads';
import { forwardEgress } from './egress.mjs';
import { enableSync, send, shareWrites, sharedFrame } from './channel.mjs';

// state slots (Int32); slot 0 is the channel's writes counter (channel.mjs shareWrites)
const ACTIVE = 1; // 0 idle, 1 a case runs, 2 the supervisor ends it
const INDEX = 2; // the running case's index in its run
const TIMEOUT_MS = 3; // the run's timeout_s in ms (0: none)
const RESUMABLE = 4; // 1: the run may go on in a fresh thread after a case is ended
const GO = 5; // a fresh thread resuming a run waits for 1 here: the ended case's reply is written

// The evaluator's thread's side of the marks (harness.mjs): `data` is its workerData.
export function caseMarks(data) {
  const state = new Int32Array(data.stateSab);
  const startAt = new Float64Array(data.startSab);
  return {
    run(timeoutMs, resumable) { // a run frame arrived
      Atomics.store(state, TIMEOUT_MS, Math.round(timeoutMs));
      Atomics.store(state, RESUMABLE, resumable ? 1 : 0);
    },
    starts(index) {
      state[INDEX] = index;
      startAt[0] = Date.now();
      Atomics.store(state, ACTIVE, 1);
    },
    ends() {
      // 2: the supervisor is ending this case (answered there): this thread must write nothing more
      if (Atomics.compareExchange(state, ACTIVE, 1, 0) === 2) for (;;) Atomics.wait(state, ACTIVE, 2);
    },
    waitToGo() {
      while (Atomics.load(state, GO) === 0) Atomics.wait(state, GO, 0);
    },
  };
}
const FRAME_COPY = 16 << 20; // the largest request the supervisor can resume from
const realExit = process.exit.bind(process);

function failure(type, message) {
  return { type, message, line: null, traceback: '' };
}

export async function supervise(harnessUrl, config) {
  if (config.egress) await forwardEgress(config.egress.socket, Number(config.egress.port));
  const stateSab = new SharedArrayBuffer(8 * 4);
  const state = new Int32Array(stateSab);
  const startSab = new SharedArrayBuffer(8);
  const startAt = new Float64Array(startSab);
  const framesSab = new SharedArrayBuffer(FRAME_COPY);
  const frames = Buffer.from(framesSab);
  shareWrites(state);
  if (config.sync) enableSync();
  const memoryMb = Number(config.memory_mb) || 0;
  const resourceLimits = memoryMb > 0 ? { maxOldGenerationSizeMb: Math.max(16, Math.floor((memoryMb * 3) / 4)) } : {};
  let load = null; // the load frame of an unbound worker, once the first thread read it
  let ending = null; // why the supervisor ends the running thread ('timeout'), or null
  let worker = null;
  let pending = null; // the ended case's reply, written once the fresh thread has loaded the evaluator

  const start = (resume) => {
    ending = null;
    let error = null;
    const thread = new Worker(harnessUrl, {
      workerData: { config, load, resume, stateSab, startSab, framesSab },
      resourceLimits,
      stdout: true, // never piped into this thread's process.stdout (which would make fd 1 non-blocking)
      stderr: true,
    });
    thread.stdout.resume();
    thread.stderr.resume();
    thread.on('message', (message) => {
      if (message && message.load) load = message.load;
      if (message && message.loaded && pending !== null) { // the fresh thread is ready: answer, let it go on
        send(pending);
        pending = null;
        Atomics.store(state, GO, 1);
        Atomics.notify(state, GO);
      }
    });
    thread.on('error', (err) => {
      error = err;
    });
    thread.on('exit', (code) => ended(thread, code, error));
    worker = thread;
  };

  const ended = (thread, code, error) => {
    if (thread !== worker) return;
    worker = null;
    const memory = error !== null && error.code === 'ERR_WORKER_OUT_OF_MEMORY';
    const status = ending === 'timeout' ? 'timeout' : memory ? 'memory_limit' : null;
    const active = Atomics.load(state, ACTIVE) !== 0;
    const request = active && Atomics.load(state, RESUMABLE) === 1 ? sharedFrame(frames) : null;
    if (status === null || request === null) realExit(status === null ? code : 0); // the host takes over
    const index = Atomics.load(state, INDEX);
    const timeoutMs = Atomics.load(state, TIMEOUT_MS);
    const error2 = status === 'timeout'
      ? failure('Timeout', `the evaluation exceeded timeout_s=${timeoutMs / 1000}`)
      : failure('MemoryLimit', `the evaluator's heap exceeded ${resourceLimits.maxOldGenerationSizeMb} MB `
        + `(memory_mb=${memoryMb}): ${error.message}`);
    // answered once the fresh thread is ready, so that the host's next case never waits for its start
    pending = { type: 'result', index, id: request.id ?? null, status, error: error2, stdout: '', stderr: '',
                truncated: false, duration_ms: Math.max(0, Date.now() - startAt[0]) };
    Atomics.store(state, ACTIVE, 0);
    Atomics.store(state, GO, 0);
    start({ index: index + 1 }); // the rest of the run, then the next requests, in a fresh thread
  };

  const watch = () => {
    const timeoutMs = Atomics.load(state, TIMEOUT_MS);
    if (worker !== null && timeoutMs > 0 && Atomics.load(state, ACTIVE) === 1
        && Date.now() - startAt[0] > timeoutMs && Atomics.compareExchange(state, ACTIVE, 1, 2) === 1) {
      ending = 'timeout';
      worker.terminate();
    }
    const period = timeoutMs > 0 ? Math.min(250, Math.max(5, timeoutMs / 8)) : 250;
    setTimeout(watch, period).unref();
  };
  start(null);
  watch();
}
