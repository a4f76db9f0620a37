// The harness's framed channel: requests on fd 3, replies on fd 4 (see harness.mjs).
// A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Reads and writes
// are synchronous: between cases nothing else may run, and a reply is on its way before the
// next case starts.

import fs from 'node:fs';

// Taken before user code loads: a user module replacing JSON.stringify or fs.writeSync later does
// not reach the channel.
const { readSync, writeSync } = fs;
const { stringify, parse } = JSON;

const IN = 3;
const OUT = 4;
const MAX_REQUEST = 2 ** 31;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

function readExact(n) {
  const buf = Buffer.allocUnsafe(n);
  let off = 0;
  while (off < n) {
    let got;
    try {
      got = readSync(IN, buf, off, n - off, null);
    } catch (err) {
      if (err.code === 'EAGAIN') {
        Atomics.wait(sleeper, 0, 0, 1);
        continue;
      }
      if (err.code === 'EOF' || err.code === 'EBADF') return null;
      throw err;
    }
    if (got === 0) return null;
    off += got;
  }
  return buf;
}

// A copy of the last request's bytes in memory shared with the harness's supervising thread (see
// harness.mjs: after the evaluator's thread is ended mid-run, the supervisor reads the run it was
// answering from here and hands its remaining cases to the next thread): [u32 length][bytes], the
// length 0 when the request did not fit.
let frames = null;
export function shareFrames(buffer) {
  frames = buffer;
}

export function recv() {
  const header = readExact(4);
  if (header === null) return null;
  const size = header.readUInt32BE(0);
  if (size > MAX_REQUEST) return null;
  const body = readExact(size);
  if (body === null) return null;
  if (frames !== null) {
    const fits = size + 4 <= frames.length;
    if (fits) body.copy(frames, 4);
    frames.writeUInt32BE(fits ? size : 0, 0);
  }
  return parse(body.toString('utf8'));
}

// The request last copied by shareFrames' buffer (null: none, or it did not fit).
export function sharedFrame(buffer) {
  const size = buffer.readUInt32BE(0);
  return size === 0 ? null : parse(buffer.subarray(4, 4 + size).toString('utf8'));
}

// With sync (the docker backend sets it; the process backend orders raw output by its pipes), each write of replies is announced on the raw output (fd 2) first by a
// sync mark carrying the write's number, which every frame of that write carries as "seq": the host
// attributes raw output to a reply only once it has read the reply's mark (runtimes/PROTOCOL.md).
let sync = false;
let writes = 0;
let seq = '';

// The count of writes, in memory shared by the harness's threads (so a supervisor's reply and a
// restarted thread's go on numbering where the last left off): counter[0].
let counter = null;
export function shareWrites(int32) {
  counter = int32;
  writes = Atomics.load(counter, 0);
}

export function enableSync() {
  sync = true;
  if (counter !== null) writes = Atomics.load(counter, 0);
  seq = `,"seq":${writes + 1}`;
}

function withSeq(text) {
  return seq === '' ? text : text.slice(0, -1) + seq + '}';
}

const held = []; // replies not written yet (a run with flush_ms, see harness.mjs)
let heldBytes = 0;
let heldSince = 0;
// The open "results" frame: consecutive plain ok replies held as one (runtimes/PROTOCOL.md).
const BULK_BYTES = 32 * 1024;
let bulk = { values: [], durations: [], first: 0, id: null, bytes: 0 };

function push(text) {
  const body = Buffer.from(text, 'utf8');
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, 4);
  if (held.length === 0 && bulk.values.length === 0) heldSince = performance.now();
  held.push(frame);
  heldBytes += frame.length;
}

// Turn the open "results" frame, if any, into a held frame (replies stay in order).
function closeBulk() {
  if (bulk.values.length === 0) return;
  const { values, durations, first, id, bytes } = bulk;
  bulk = { values: [], durations: [], first: 0, id: null, bytes: 0 };
  heldBytes -= bytes;
  const since = heldSince;
  push(`{"type":"results","id":${stringify(id)},"index":${first}${seq},"values":[${values.join(',')}],`
    + `"durations":[${durations.join(',')}]}`);
  heldSince = since;
}

// Queue a frame for the next flush().
export function hold(message) {
  closeBulk();
  push(withSeq(stringify(message)));
}

// Hold the reply of case `index` of request `id` (ok, nothing printed) in the open "results" frame:
// `valueJson` is its value's JSON, `durationMs` a finite number.
export function holdBulk(index, id, valueJson, durationMs) {
  if (bulk.values.length
      && (bulk.bytes >= BULK_BYTES || id !== bulk.id || index !== bulk.first + bulk.values.length)) closeBulk();
  if (bulk.values.length === 0) {
    if (held.length === 0) heldSince = performance.now();
    bulk.first = index;
    bulk.id = id;
  }
  const duration = String(durationMs);
  bulk.values.push(valueJson);
  bulk.durations.push(duration);
  const size = valueJson.length + duration.length + 2;
  bulk.bytes += size;
  heldBytes += size;
}

// The JSON of `value` by the encoder taken before user code loaded.
export function encode(value) {
  return stringify(value);
}

// A copy of the JSON data `value` (by the functions taken before user code loaded).
export function copy(value) {
  return parse(stringify(value));
}

// Bytes held and milliseconds since the oldest held reply was queued.
export function heldState() {
  const any = held.length || bulk.values.length;
  return { bytes: heldBytes, ageMs: any ? performance.now() - heldSince : 0 };
}

// Write every held frame, in order.
export function flush() {
  closeBulk();
  if (held.length === 0) return;
  const frame = held.length === 1 ? held[0] : Buffer.concat(held);
  held.length = 0;
  heldBytes = 0;
  writes = counter === null ? writes + 1 : Atomics.add(counter, 0, 1) + 1;
  if (sync) {
    try {
      writeSync(2, `\0evaluator-host-sync:${writes}\0`);
    } catch {
      // fd 2 closed by the user's code: the host waits for the mark in vain and the reply times out
    }
    seq = `,"seq":${writes + 1}`;
  }
  let off = 0;
  while (off < frame.length) {
    try {
      off += writeSync(OUT, frame, off, frame.length - off);
    } catch (err) {
      if (err.code !== 'EAGAIN') throw err;
      Atomics.wait(sleeper, 0, 0, 1);
    }
  }
}

// Write a frame now (after any held ones).
export function send(message) {
  hold(message);
  flush();
}
