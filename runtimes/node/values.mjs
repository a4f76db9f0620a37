// JSON-safe values for the host: the markers of runtimes/PROTOCOL.md (`$nonfinite`,
// `$undefined`, `$unserializable`), plus JS's own cases (BigInt as a number, Date as an ISO
// string, absent properties dropped as JSON does). Normalization happens on the host.

export function toWire(value, depth = 0, seen = new Set()) {
  if (depth > 64) return { $unserializable: 'structure nested deeper than 64 levels' };
  if (value === null) return null;
  switch (typeof value) {
    case 'undefined':
      return { $undefined: true };
    case 'boolean':
    case 'string':
      return value;
    case 'number':
      if (Number.isFinite(value)) return value;
      return { $nonfinite: Number.isNaN(value) ? 'nan' : value > 0 ? 'inf' : '-inf' };
    case 'bigint':
      return Number(value); // exact within 2^53, as Python's ints; a float beyond, as Python's
    case 'function':
      return { $unserializable: 'function' };
    case 'symbol':
      return { $unserializable: 'symbol' };
    default:
      break;
  }
  if (seen.has(value)) return { $unserializable: 'circular structure' };
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    return toWire(value.valueOf(), depth, seen);
  }
  seen.add(value);
  try {
    if (Array.isArray(value)) {
      return value.map((item) => (item === undefined ? null : toWire(item, depth + 1, seen)));
    }
    if (ArrayBuffer.isView(value) && !(value instanceof DataView)) {
      return Array.from(value, (item) => toWire(item, depth + 1, seen));
    }
    if (value instanceof Map || value instanceof Set || value instanceof WeakMap || value instanceof WeakSet ||
        value instanceof Promise || value instanceof RegExp || value instanceof Error ||
        value instanceof ArrayBuffer || value instanceof DataView) {
      return { $unserializable: value.constructor.name };
    }
    if (typeof value.toJSON === 'function') return toWire(value.toJSON(), depth, seen);
    const out = {};
    for (const k of Object.keys(value)) {
      const item = value[k];
      if (item === undefined && !(depth === 0 && k === 'score')) continue; // JSON drops absent values
      out[k] = toWire(item, depth + 1, seen);
    }
    return out;
  } finally {
    seen.delete(value);
  }
}

