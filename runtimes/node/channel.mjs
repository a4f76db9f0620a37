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

export function recv() {
  const header = readExact(4);
  if (header === null) return null;
  const size = header.readUInt32BE(0);
  if (size > MAX_REQUEST) return null;
  const body = readExact(size);
  return body === null ? null : parse(body.toString('utf8'));
}

const held = []; // replies not written yet (a run with flush_ms, see harness.mjs)
let heldBytes = 0;
let heldSince = 0;

// Queue a frame for the next flush().
export function hold(message) {
  const body = Buffer.from(stringify(message), 'utf8');
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, 4);
  if (held.length === 0) heldSince = performance.now();
  held.push(frame);
  heldBytes += frame.length;
}

// Bytes held and milliseconds since the oldest held frame was queued.
export function heldState() {
  return { bytes: heldBytes, ageMs: held.length ? performance.now() - heldSince : 0 };
}

// Write every held frame, in order.
export function flush() {
  if (held.length === 0) return;
  const frame = held.length === 1 ? held[0] : Buffer.concat(held);
  held.length = 0;
  heldBytes = 0;
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
