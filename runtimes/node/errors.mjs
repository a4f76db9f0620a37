// Errors of the user's code as the protocol reports them (runtimes/PROTOCOL.md, "error"): the
// {type, message, line, traceback} of a thrown value, the user's own frames only.

export const isMemory = (err) => err instanceof RangeError && /allocation failed/i.test(String(err.message));

export function failure(type, message) {
  return { type, message, line: null, traceback: '' };
}

// `err` thrown by code loaded from `dir` (its frames named `shownName`: evaluator.js / evaluator.ts);
// `typeName` overrides the reported type (the harness's ProcessExit).
export function errorInfo(err, dir, shownName, typeName = null) {
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
  const escaped = dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const frame = new RegExp(`(?:file://)?${escaped}/evaluator\\.(?:mjs|cjs|ts|js|mts|cts):(\\d+)(?::(\\d+))?`);
  let line = null;
  const kept = [];
  for (const text of stack.split('\n')) {
    const match = frame.exec(text);
    if (!match) continue;
    if (line === null) line = Number(match[1]);
    kept.push(text.replace(frame, `${shownName}:$1${match[2] ? ':$2' : ''}`));
  }
  const type = typeName ?? (err.name || err.constructor?.name || 'Error');
  // Node's "Require stack:" lists the harness's copies of the user's file (each twice when the loader
  // nests): paths inside the sandbox that say nothing the frames (evaluator.js:LINE) do not
  const message = String(err.message).replace(/\nRequire stack:(?:\n- [^\n]*)*/, '');
  const head = `${type}: ${message}`;
  return { type, message, line, traceback: kept.length ? `${head}\n${kept.join('\n')}` : head };
}
