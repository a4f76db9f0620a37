'use strict';
// Host-side JS/TS inspector: parses evaluator code and reports its interface. Never runs it.
//
// Started by the host (evaluator_host/definitions/js_inspect.py) as
//   node --expose-internals --disable-warning=ExperimentalWarning inspect.cjs
// because Node's bundled parsers are internal modules: acorn (a real ECMAScript parser) and
// amaro (the swc-based TypeScript transform behind module.stripTypeScriptTypes, whose errors
// carry line and column). Requests and answers are JSON lines on stdin/stdout:
//
//   → {"language": "javascript" | "typescript", "code": "..."}
//   ← {"ok": true, "interface": "evaluate" | "legacy" | "main", "entrypoint": "evaluate" | "main",
//      "line": N, "module": "esm" | "cjs", "entry": {"kind": "binding" | "default" | "exports",
//      "name": "evaluate" | null}, "async": true | false}
//   ← {"ok": false, "kind": "syntax" | "interface", "message": "...", "line": N | null, "column": N | null}
//
// Entry kinds, as the harness fetches the function: "binding" — a top-level declaration
// (function, const/let/var, export function, export default function NAME); "default" —
// the module's default export; "exports" — module.exports (name null) or module.exports[name].

const readline = require('node:readline');
const { SourceMap } = require('node:module');
const acorn = require('internal/deps/acorn/acorn/dist/acorn');
const amaro = require('internal/deps/amaro/dist/index');

const ACCEPTED =
  'define exactly one entrypoint at top level: evaluate(inputs, outputs, trace) | ' +
  'evaluate(app_params, inputs, output, correct_answer) (legacy) | main(variables) returning {"score": ...}';
const NAMES = new Set(['evaluate', 'main']);
const METRIC_PYTHON_ONLY =
  'NeMo-style Metric classes (output_spec() + compute_scores()) run in Python only, as NeMo\'s ' +
  'nemo_evaluator_sdk is Python: use language "python", or define evaluate(inputs, outputs, trace) here';

// A top-level class (exported or not) with output_spec and compute_scores methods: a NeMo metric,
// which only the Python family runs (evaluator_host/definitions/interfaces.py).
function hasMetricClass(tree) {
  for (const node of tree.body) {
    const decl = node.type.startsWith('Export') && node.declaration ? node.declaration : node;
    const classes = decl.type === 'ClassDeclaration' || decl.type === 'ClassExpression' ? [decl]
      : decl.type === 'VariableDeclaration' ? decl.declarations.map((d) => d.init).filter((i) => i && i.type === 'ClassExpression')
        : [];
    for (const cls of classes) {
      const names = new Set(cls.body.body.map((m) => m.key && (m.key.name || m.key.value)));
      if (names.has('output_spec') && (names.has('compute_scores') || names.has('computeScores'))) return true;
    }
  }
  return false;
}

class Rejected extends Error {
  constructor(kind, message, line = null, column = null) {
    super(message);
    this.kind = kind;
    this.line = line;
    this.column = column;
  }
}

// How deeply code may nest (levels of acorn's tree below the Program; `const x = a + a + a` is 5 deep).
// The parsers recurse: acorn gives up near a few thousand levels, amaro's swc (WebAssembly) overflows the
// stack and leaves its instance broken ("memory access out of bounds" for every later call), and the host
// bounds Python at 100 levels (evaluator_host/definitions/nesting.py, the same message).
const MAX_DEPTH = 200;

// a parser or walker that ran out of stack (acorn: "Not enough stack space"; V8: RangeError; swc: a trap)
const isStackError = (err) =>
  err instanceof RangeError || err instanceof WebAssembly.RuntimeError ||
  /stack space|call stack/i.test(String(err && err.message));

function tooDeep(depth, line = null, column = null) {
  const found = depth == null ? 'deeper than the parser can hold' : `depth ${depth}`;
  const where = line ? ` (line ${line})` : '';
  return new Rejected('syntax', `the code is nested too deeply (${found}, at most ${MAX_DEPTH})${where}; split the ` +
    'expression or the nested blocks into smaller pieces (e.g. a loop, an array, or helper functions)', line, column);
}

// Rejected (tooDeep) when `tree` nests past MAX_DEPTH; iterative, so any depth is safe to measure. The place is
// the first node past the bound (in the order of the walk); the depth is the deepest.
function checkDepth(tree) {
  let deepest = 0;
  let first = null;
  const stack = [[tree, 0]];
  while (stack.length) {
    const [node, depth] = stack.pop();
    if (depth > deepest) deepest = depth;
    if (depth > MAX_DEPTH && first === null) first = node;
    for (const key in node) {
      if (key === 'loc') continue;
      const value = node[key];
      if (Array.isArray(value)) {
        for (const item of value) if (item && typeof item.type === 'string') stack.push([item, depth + 1]);
      } else if (value && typeof value.type === 'string') stack.push([value, depth + 1]);
    }
  }
  if (first !== null) throw tooDeep(deepest, first.loc ? first.loc.start.line : null, first.loc ? first.loc.start.column + 1 : null);
}

// swc's instance is left broken by a stack overflow: the answer says so, and the process ends after it
function brokenTransform() {
  const err = tooDeep(null);
  err.restart = true;
  return err;
}

function transformTs(code) {
  let out;
  try {
    out = amaro.transformSync(code, { mode: 'transform', sourceMap: true, filename: 'evaluator.ts' });
  } catch (err) {
    if (isStackError(err)) throw brokenTransform();
    const line = Number.isInteger(err.startLine) ? err.startLine : null;
    const column = Number.isInteger(err.startColumn) ? err.startColumn + 1 : null;
    const where = line ? ` (line ${line}${column ? `, column ${column}` : ''})` : '';
    throw new Rejected('syntax', `TypeScript: ${err.message || err}${where}`, line, column);
  }
  const payload = out.map ? (typeof out.map === 'string' ? JSON.parse(out.map) : out.map) : null;
  return { code: out.code, map: payload ? new SourceMap(payload) : null, payload };
}

// acorn's tree of `code` (as a module, else as a script), at most MAX_DEPTH deep; Rejected otherwise
function parse(code) {
  const tree = parseAny(code);
  checkDepth(tree);
  return tree;
}

function parseAny(code) {
  const options = { ecmaVersion: 'latest', locations: true, allowHashBang: true };
  try {
    return acorn.parse(code, { ...options, sourceType: 'module', allowAwaitOutsideFunction: true });
  } catch (moduleError) {
    if (isStackError(moduleError)) throw tooDeep(null);
    try {
      return acorn.parse(code, { ...options, sourceType: 'script', allowReturnOutsideFunction: false });
    } catch (scriptError) {
      if (isStackError(scriptError)) throw tooDeep(null);
      const err = /\b(import|export)\b/.test(code) ? moduleError : scriptError;
      const loc = err.loc || {};
      const message = String(err.message).replace(/ \(\d+:\d+\)$/, '');
      throw new Rejected('syntax', `${message} (line ${loc.line}, column ${(loc.column ?? 0) + 1})`, loc.line ?? null,
        loc.column == null ? null : loc.column + 1);
    }
  }
}

const isFunction = (node) =>
  node && (node.type === 'FunctionExpression' || node.type === 'ArrowFunctionExpression' ||
           node.type === 'FunctionDeclaration');

// The one function a factory returns (`() => (a, b, c) => ...`, or one top-level `return function`), or null.
function returnedFunction(factory) {
  if (!isFunction(factory)) return null;
  if (factory.body.type !== 'BlockStatement') return isFunction(factory.body) ? factory.body : null;
  const returned = factory.body.body.filter((s) => s.type === 'ReturnStatement');
  return returned.length === 1 && isFunction(returned[0].argument) ? returned[0].argument : null;
}

// module.exports / exports (as an assignment target), or module.exports.X / exports.X
function exportsTarget(node) {
  const isModuleExports = (n) =>
    n.type === 'MemberExpression' && !n.computed && n.object.type === 'Identifier' && n.object.name === 'module' &&
    n.property.type === 'Identifier' && n.property.name === 'exports';
  const isExports = (n) => n.type === 'Identifier' && n.name === 'exports';
  if (isModuleExports(node)) return { whole: true };
  if (node.type === 'MemberExpression' && (isModuleExports(node.object) || isExports(node.object))) {
    const name = node.computed ? (node.property.type === 'Literal' ? String(node.property.value) : null)
      : node.property.name;
    return name == null ? null : { whole: false, name };
  }
  return null;
}

// An async function, or one whose every return hands back a promise: `new Promise(...)`, `x.then(...)`
// (`.catch`, `.finally`), `Promise.all(...)` and the like, or `fetch(...)`. Its rows may run many at once.
function isAsync(fn) {
  if (fn.async) return true;
  const promised = (node) => {
    if (!node) return false;
    if (node.type === 'AwaitExpression') return false;
    if (node.type === 'NewExpression') return node.callee.type === 'Identifier' && node.callee.name === 'Promise';
    if (node.type !== 'CallExpression') return false;
    const callee = node.callee;
    if (callee.type === 'Identifier') return callee.name === 'fetch';
    if (callee.type !== 'MemberExpression' || callee.computed) return false;
    if (callee.object.type === 'Identifier' && callee.object.name === 'Promise') return true;
    return ['then', 'catch', 'finally'].includes(callee.property.name);
  };
  if (fn.body.type !== 'BlockStatement') return promised(fn.body);
  const returns = [];
  const walk = (node) => {
    if (!node || typeof node.type !== 'string' || isFunction(node)) return; // a nested function's returns are its own
    if (node.type === 'ReturnStatement') returns.push(node.argument);
    for (const key of Object.keys(node)) {
      const value = node[key];
      if (Array.isArray(value)) value.forEach(walk);
      else if (value && typeof value.type === 'string' && key !== 'loc') walk(value);
    }
  };
  fn.body.body.forEach(walk);
  return returns.length > 0 && returns.every(promised);
}

function detect(tree) {
  const bindings = new Map(); // top-level name -> function node (or null when not a function)
  const found = []; // {name, fn, line, entry}
  const factoryCalls = new Map(); // entrypoint name -> the call of a top-level factory it is bound to
  let esm = false;

  const declare = (decl) => {
    if (!decl) return;
    if (decl.type === 'FunctionDeclaration' && decl.id) bindings.set(decl.id.name, decl);
    if (decl.type === 'VariableDeclaration') {
      for (const d of decl.declarations) {
        if (d.id.type === 'Identifier') bindings.set(d.id.name, isFunction(d.init) ? d.init : null);
        if (d.id.type === 'Identifier' && NAMES.has(d.id.name) && d.init && d.init.type === 'CallExpression' &&
            d.init.callee.type === 'Identifier') factoryCalls.set(d.id.name, d.init);
      }
    }
    if (decl.type === 'ClassDeclaration' && decl.id) bindings.set(decl.id.name, null);
  };
  for (const node of tree.body) {
    if (node.type === 'ImportDeclaration' || node.type.startsWith('Export')) esm = true;
    declare(node);
    if (node.type === 'ExportNamedDeclaration') declare(node.declaration);
    if (node.type === 'ExportDefaultDeclaration' && node.declaration.type === 'FunctionDeclaration' &&
        node.declaration.id) bindings.set(node.declaration.id.name, node.declaration);
  }
  // `const evaluate = makeEvaluator()`: the arity is the one of the function the factory returns
  for (const [name, call] of factoryCalls) {
    if (bindings.get(name) === null) bindings.set(name, returnedFunction(bindings.get(call.callee.name)));
  }
  for (const name of NAMES) {
    const fn = bindings.get(name);
    if (fn !== undefined && fn !== null) found.push({ name, fn, entry: { kind: 'binding', name } });
  }
  const resolve = (node) => (node && node.type === 'Identifier' ? bindings.get(node.name) ?? null : node);
  const add = (name, fnNode, entry, line) => {
    const fn = resolve(fnNode);
    if (!isFunction(fn)) return;
    if (found.some((f) => f.fn === fn)) return; // the same function, already found by its binding
    found.push({ name, fn, entry, line });
  };
  for (const node of tree.body) {
    if (node.type === 'ExportDefaultDeclaration') {
      const decl = node.declaration;
      const named = decl.id && NAMES.has(decl.id.name) ? decl.id.name : null;
      const ref = decl.type === 'Identifier' && NAMES.has(decl.name) ? decl.name : null;
      add(named || ref || null, decl, { kind: 'default', name: null }, node.loc.start.line);
    }
    if (node.type === 'ExpressionStatement' && node.expression.type === 'AssignmentExpression' &&
        node.expression.operator === '=') {
      const target = exportsTarget(node.expression.left);
      const value = node.expression.right;
      if (!target) continue;
      if (target.whole && value.type === 'ObjectExpression') {
        for (const prop of value.properties) {
          if (prop.type !== 'Property' || prop.computed) continue;
          const key = prop.key.type === 'Identifier' ? prop.key.name : String(prop.key.value);
          if (NAMES.has(key)) add(key, prop.value, { kind: 'exports', name: key }, prop.loc.start.line);
        }
      } else if (target.whole) {
        const fn = resolve(value);
        const name = (fn && fn.id && NAMES.has(fn.id.name) ? fn.id.name : null) ||
          (value.type === 'Identifier' && NAMES.has(value.name) ? value.name : null);
        add(name, value, { kind: 'exports', name: null }, node.loc.start.line);
      } else if (NAMES.has(target.name)) {
        add(target.name, value, { kind: 'exports', name: target.name }, node.loc.start.line);
      }
    }
  }
  const named = found.filter((f) => f.name);
  const anonymous = found.filter((f) => !f.name);
  const chosen = named.length ? named : anonymous;
  const names = new Set(chosen.map((f) => f.name));
  if (chosen.length === 0 && hasMetricClass(tree)) throw new Rejected('interface', METRIC_PYTHON_ONLY);
  if (chosen.length === 0) throw new Rejected('interface', `no evaluate() or main() is defined at top level; ${ACCEPTED}`);
  if (names.has('evaluate') && names.has('main')) {
    throw new Rejected('interface', `both evaluate() and main() are defined at top level; ${ACCEPTED}`);
  }
  if (chosen.length > 1 && !names.has(null)) {
    // e.g. `function evaluate` and `exports.evaluate = other`: two different functions
    throw new Rejected('interface', `${[...names][0]}() is defined more than once; ${ACCEPTED}`,
      chosen[1].fn.loc.start.line);
  }
  const { name, fn, entry } = chosen[0];
  const line = fn.loc.start.line;
  const params = fn.params;
  if (params.some((p) => p.type === 'RestElement')) {
    if (name !== 'main') throw new Rejected('interface', `evaluate() must take plain positional parameters; ${ACCEPTED}`, line);
  }
  let iface;
  if (name === 'main') iface = 'main';
  else if (params.length === 3) iface = 'evaluate';
  else if (params.length === 4) iface = 'legacy';
  else if (name === null && params.length <= 1) iface = 'main';
  else {
    throw new Rejected('interface',
      `${name || 'the default export'}() takes ${params.length} parameter(s); ${ACCEPTED}`, line);
  }
  const result = { interface: iface, entrypoint: iface === 'main' ? 'main' : 'evaluate', line, entry,
                  module: esm ? 'esm' : 'cjs', async: isAsync(fn) };
  Object.defineProperty(result, 'fn', { value: fn, enumerable: false }); // for migrate.cjs, never answered
  return result;
}

// compiling ES module syntax to CommonJS (esModuleInterop semantics): inspect_compile.cjs
const { needsEsm, toCommonJs } = require('./inspect_compile.cjs');

function inspect(request) {
  let code = String(request.code);
  let map = null;
  let payload = null;
  if (request.language === 'typescript') ({ code, map, payload } = transformTs(code));
  let result;
  let tree;
  try {
    tree = parse(code);
    result = detect(tree);
  } catch (err) {
    if (err instanceof Rejected && map && err.line) {
      const entry = map.findEntry(err.line - 1, Math.max(0, (err.column || 1) - 1));
      if (entry && entry.originalLine !== undefined) err.line = entry.originalLine + 1;
    }
    throw err;
  }
  if (map) {
    const entry = map.findEntry(result.line - 1, 0);
    if (entry && entry.originalLine !== undefined) result.line = entry.originalLine + 1;
  }
  let compiled = code;
  if (result.module === 'esm' && !needsEsm(code, tree)) {
    compiled = toCommonJs(code, tree);
    result.module = 'cjs';
    if (result.entry.kind === 'default') result.entry = { kind: 'exports', name: 'default' };
  }
  if (payload) {
    payload.sources = ['evaluator.ts'];
    delete payload.sourcesContent;
    compiled += `\n//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(payload)).toString('base64')}\n`;
  }
  return { ok: true, ...result, compiled };
}

module.exports = { Rejected, brokenTransform, detect, isStackError, parse, tooDeep, transformTs };
if (require.main !== module) return; // required by migrate.cjs: the parser and detector only

// An answer with "restart": true is this process's last (swc's instance is broken): the host starts another.
let broken = false;
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  if (broken) return;
  let answer;
  try {
    answer = inspect(JSON.parse(line));
  } catch (err) {
    if (!(err instanceof Rejected) && isStackError(err)) err = tooDeep(null); // a walker past its stack
    answer = err instanceof Rejected
      ? { ok: false, kind: err.kind, message: err.message, line: err.line, column: err.column }
      : { ok: false, kind: 'syntax', message: `cannot parse the code: ${err && err.message}`, line: null, column: null };
    if (err && err.restart) answer.restart = broken = true;
  }
  process.stdout.write(JSON.stringify(answer) + '\n', () => broken && process.exit(0));
});
