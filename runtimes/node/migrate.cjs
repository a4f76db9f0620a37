'use strict';
// Host-side JS/TS migrator: rewrites a legacy evaluate(app_params, inputs, output, correct_answer)
// into evaluate(inputs, outputs, trace), keeping every other byte. Never runs the code.
//
// Started by evaluator_host/migration/js.py as
//   node --expose-internals --disable-warning=ExperimentalWarning migrate.cjs
// with one JSON request per line on stdin, one answer per line on stdout:
//
//   → {"language": "javascript" | "typescript", "code": "...", "correct_answer_key": "correct_answer"}
//   ← {"ok": true, "changed": bool, "code": "...", "interface_before": "...", "interface_after": "...",
//      "rules": [...], "notes": [{"line": N | null, "message": "..."}],
//      "reads": {"output": bool, "correct_answer": bool, "app_params": ["key", ...]}}   (legacy code only:
//      what it reads of a case; a parameter that is a pattern counts as read)
//   ← {"ok": false, "kind": "syntax" | "interface" | "refused", "message": "...", "line": N | null, "column": N | null}
//
// How: the code is parsed with the inspector's parser and detector (Node's acorn). TypeScript first goes
// through Node's own type stripping ("strip-only"), which blanks the types with spaces, so every offset of
// the parse is an offset in the user's TypeScript. What type stripping cannot remove (an enum, a
// namespace, a parameter property's modifiers) is found by the TypeScript compiler's own parser (the
// `typescript` package pinned in evaluator_host/migration/typescript, whose node_modules/typescript path
// is argv[2]; loaded only when needed, as for a return type below), which keeps offsets too, and blanked
// for the parse only (the code keeps it: the harness runs TypeScript through Node's transform). The rewrite is a list of splices at those offsets:
// the parameter list, a prologue after the opening brace, the returns of numeric strings. TypeScript
// annotations are kept (`output: string` → `outputs: string`) and `trace: unknown` is added; a return
// type is `unknown` (`Promise<unknown>`) once a return value is rewritten (it no longer is the declared
// string). Rules, in order:
//   numeric-string-returns  a returned numeric string literal becomes the number; a value built as a
//                           string (template, String(), .toFixed(), +"…") is wrapped in __legacyScore()
//   signature-prologue      the default: (inputs, outputs, trace) and `let output = outputs; …`
//   adapter                 the legacy function kept whole: renamed (declarations) or wrapped
//                           (expressions: arrows with an expression body, default exports, …)
const readline = require('node:readline');
const amaro = require('internal/deps/amaro/dist/index');
const { Rejected, brokenTransform, detect, isStackError, parse, tooDeep, transformTs } = require('./inspect.cjs');
// what the TypeScript compiler's parser finds (spans type stripping cannot remove, return types) and the splicer
const { applyEdits, stripped, tsFacts } = require('./migrate_ts.cjs');


const TODO = 'TODO[evaluator-migrate]';
const NEW = ['inputs', 'outputs', 'trace'];
const APP_TODO = `// ${TODO}: v2 has no app_params (Agenta always passed {}); read these values from inputs or settings`;
const NUMERIC = /^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$/;
const STRING_METHODS = new Set(['toFixed', 'toPrecision', 'toString', 'trim', 'toLowerCase', 'toUpperCase', 'join',
  'padStart', 'padEnd', 'toExponential']);

const isFunction = (n) => n && ['FunctionExpression', 'ArrowFunctionExpression', 'FunctionDeclaration'].includes(n.type);

// every node under `node` with its parent; `enter` returning false skips the children
function walk(node, enter, parent = null) {
  if (!node || typeof node.type !== 'string') return;
  if (enter(node, parent) === false) return;
  for (const key of Object.keys(node)) {
    if (key === 'loc') continue;
    const value = node[key];
    if (Array.isArray(value)) value.forEach((v) => walk(v, enter, node));
    else if (value && typeof value === 'object' && typeof value.type === 'string') walk(value, enter, node);
  }
}

// identifiers that are references (not property names or object keys)
function references(root) {
  const found = [];
  walk(root, (node, parent) => {
    if (node.type !== 'Identifier' || !parent) return;
    if (parent.type === 'MemberExpression' && parent.property === node && !parent.computed) return;
    if ((parent.type === 'Property' || parent.type === 'MethodDefinition' || parent.type === 'PropertyDefinition') &&
        parent.key === node && !parent.computed && !parent.shorthand) return;
    found.push(node);
  });
  return found;
}

// names declared in the function's own scope (var anywhere outside nested functions; let/const/class/
// function at the body's top level)
function ownDeclarations(fn) {
  const names = new Set();
  if (fn.body.type !== 'BlockStatement') return names;
  const addPattern = (p) => walk(p, (n, parent) => {
    if (n.type === 'Identifier' && !(parent && parent.type === 'Property' && parent.key === n && !parent.shorthand) &&
        !(parent && parent.type === 'AssignmentPattern' && parent.right === n)) names.add(n.name);
    if (n.type === 'AssignmentPattern') { addPattern(n.left); return false; }
    return undefined;
  });
  for (const stmt of fn.body.body) {
    if (stmt.type === 'VariableDeclaration') stmt.declarations.forEach((d) => addPattern(d.id));
    if ((stmt.type === 'FunctionDeclaration' || stmt.type === 'ClassDeclaration') && stmt.id) names.add(stmt.id.name);
  }
  walk(fn.body, (n) => {
    if (isFunction(n)) return false;
    if (n.type === 'VariableDeclaration' && n.kind === 'var') n.declarations.forEach((d) => addPattern(d.id));
    return undefined;
  });
  return names;
}

function isStringish(node, fn) {
  if (!node) return false;
  if (node.type === 'Literal') return typeof node.value === 'string';
  if (node.type === 'TemplateLiteral') return true;
  if (node.type === 'CallExpression') {
    const c = node.callee;
    if (c.type === 'Identifier') return c.name === 'String';
    return c.type === 'MemberExpression' && !c.computed && STRING_METHODS.has(c.property.name);
  }
  if (node.type === 'BinaryExpression' && node.operator === '+') return isStringish(node.left, fn) || isStringish(node.right, fn);
  if (node.type === 'ConditionalExpression') return isStringish(node.consequent, fn) || isStringish(node.alternate, fn);
  return false;
}

// the entrypoint's own return values (nested functions skipped); an expression body counts as one
function returnValues(fn) {
  if (fn.body.type !== 'BlockStatement') return [fn.body];
  const values = [];
  walk(fn.body, (n) => {
    if (isFunction(n) || n.type === 'ClassDeclaration' || n.type === 'ClassExpression') return false;
    if (n.type === 'ReturnStatement' && n.argument) values.push(n.argument);
    return undefined;
  });
  return values;
}

// the keys the entrypoint reads of its app_params parameter by a literal name (`p.k`, `p?.k`, `p["k"]`)
function appParamKeys(body, name) {
  const keys = [];
  if (name === null) return keys;
  walk(body, (node) => {
    if (node.type !== 'MemberExpression' || node.object.type !== 'Identifier' || node.object.name !== name) return;
    let key = null;
    if (!node.computed && node.property.type === 'Identifier') key = node.property.name;
    else if (node.computed && node.property.type === 'Literal' && typeof node.property.value === 'string') key = node.property.value;
    if (key !== null && key !== 'hasOwnProperty' && !keys.includes(key)) keys.push(key);
  });
  return keys;
}

// position of the next `ch` (one of `stops`) in the stripped code from `at`, skipping blanks and comments
function scanTo(code, at, stops) {
  let i = at;
  while (i < code.length) {
    if (code.startsWith('//', i)) i = code.indexOf('\n', i) === -1 ? code.length : code.indexOf('\n', i);
    else if (code.startsWith('/*', i)) i = code.indexOf('*/', i) + 2;
    else if (stops.includes(code[i])) return i;
    else i += 1;
  }
  return -1;
}

function lineOf(code, needle) {
  const index = code.indexOf(needle);
  return index === -1 ? null : code.slice(0, index).split('\n').length;
}

// The top-level statement declaring the entrypoint by name, when there is one: {statement, id, exportEnd,
// inside} (`inside`: the function is within that statement; not so for `const evaluate = makeEvaluator()`).
function declarationOf(tree, fn) {
  for (const stmt of tree.body) {
    const exported = stmt.type === 'ExportNamedDeclaration' || stmt.type === 'ExportDefaultDeclaration';
    const decl = exported ? stmt.declaration : stmt;
    if (!decl) continue;
    const exportEnd = exported ? decl.start : stmt.start;
    if (decl.type === 'FunctionDeclaration' && decl === fn && decl.id) {
      return { statement: stmt, id: decl.id, exportEnd, inside: true };
    }
    if (decl.type !== 'VariableDeclaration') continue;
    for (const d of decl.declarations) {
      if (d.id.type !== 'Identifier' || d.id.name !== 'evaluate' || !d.init) continue;
      if (d.init === fn) return { statement: stmt, id: d.id, exportEnd, inside: true };
      if (d.init.type === 'CallExpression') return { statement: stmt, id: d.id, exportEnd, inside: false };
    }
  }
  return null;
}

function migrate(request) {
  const original = String(request.code);
  const ts = request.language === 'typescript';
  const key = JSON.stringify(String(request.correct_answer_key || 'correct_answer'));
  let code = original;
  let facts = null; // the TypeScript parser's findings, asked for only when needed (it takes a while to load)
  const factsOf = () => facts || (facts = tsFacts(original));
  if (ts) {
    try {
      code = amaro.transformSync(original, { mode: 'strip-only' }).code;
    } catch (err) {
      if (isStackError(err)) throw brokenTransform(); // nested too deeply, and swc is broken from now on
      let refusal = err;
      try { // what type stripping cannot remove (an enum, a namespace): blanked for the parse, found by the parser
        if (factsOf().blanks.length) code = stripped(original, factsOf());
      } catch (again) {
        if (again && again.missingParser) throw again; // an installation fault, not the user's code
        if (isStackError(again)) throw facts ? brokenTransform() : tooDeep(null);
        refusal = again;
      }
      if (code === original) {
        transformTs(original); // a syntax error is reported as the inspector reports it
        const detected = detect(parse(transformTs(original).code));
        if (detected.interface !== 'legacy') return unchanged(original, detected.interface);
        throw new Rejected('refused', 'this TypeScript needs a module transform to run (`import x = require()`, ' +
          `\`export =\`: ${refusal.message}); the migration splices the source. Write it as an ES import or ` +
          'export, or migrate the evaluator by hand.', null, null);
      }
    }
    if (code.length !== original.length) throw new Rejected('refused', 'type stripping moved the code; migrate by hand');
  }
  const tree = parse(code);
  const detected = detect(tree);
  if (detected.interface !== 'legacy') return unchanged(original, detected.interface);
  const fn = detected.fn;
  const params = fn.params;
  const names = params.map((p) => (p.type === 'Identifier' ? p.name : null));
  const body = fn.body;
  const refs = references(body);
  const selfRef = refs.find((r) => r.name === 'evaluate');
  if (selfRef) {
    throw new Rejected('refused', 'evaluate() refers to itself by name (recursion or registration); after the ' +
      'migration that name is the 3-argument entrypoint. Move the recursive part into a helper, then migrate.',
    selfRef.loc.start.line, selfRef.loc.start.column + 1);
  }
  const declared = ownDeclarations(fn);
  let reason = null;
  if (body.type !== 'BlockStatement') reason = 'the entrypoint is an arrow function with an expression body';
  else if (names.includes(null)) reason = 'a parameter is a pattern or has a default';
  else if (names.some((n, i) => NEW.includes(n) && !(i === 1 && n === 'inputs') && !(i === 2 && n === 'outputs'))) {
    reason = 'a legacy parameter would be confused with the new one of that name';
  } else if (names.some((n) => declared.has(n)) || NEW.some((n) => declared.has(n))) {
    reason = 'the body declares a variable named like a parameter';
  } else if (refs.some((r) => NEW.includes(r.name) && !names.includes(r.name))) {
    reason = 'the body reads an outer inputs/outputs/trace, which the new parameter would shadow';
  } else if (refs.some((r) => r.name === 'arguments' || r.name === 'eval')) {
    reason = 'the body reads arguments or calls eval, which would see the new parameters';
  }
  const appRead = names[0] === null || refs.some((r) => r.name === names[0]);
  const readAt = (i) => i >= names.length || names[i] === null || refs.some((r) => r.name === names[i]);
  const reads = { output: readAt(2), correct_answer: readAt(3), app_params: appRead ? appParamKeys(body, names[0]) : [] };
  const rules = [];
  const edits = [];
  const notes = [];
  // numeric-string-returns
  let wrapped = false;
  for (const value of returnValues(fn)) {
    if (value.type === 'Literal' && typeof value.value === 'string' && NUMERIC.test(value.value)) {
      edits.push([value.start, value.end, String(Number(value.value.trim()))]);
    } else if (isStringish(value, fn) && !(value.type === 'Literal')) {
      edits.push([value.start, value.end, `__legacyScore(${original.slice(value.start, value.end)})`]);
      wrapped = true;
    } else continue;
    if (!rules.length) rules.push('numeric-string-returns');
  }
  const returnType = ts && edits.length ? factsOf().returnTypes.get(fn.body.start) : undefined;
  if (returnType && edits.length) { // a rewritten return is no longer the declared type (a string, say)
    edits.push([returnType[0], returnType[1], fn.async ? 'Promise<unknown>' : 'unknown']);
  }
  const annotation = (i) => {
    if (!ts || params[i].type !== 'Identifier') return '';
    const stop = scanTo(code, params[i].end, [',', ')']);
    return original.slice(params[i].end, stop).replace(/\s+$/, '').replace(/^\s*\?/, ''); // optional: not any more
  };
  const traceType = ts ? ': unknown' : '';
  const index = ts ? `(inputs as any)[${key}]` : `inputs[${key}]`; // `as any`: tsc accepts it whatever inputs' type
  const correct = `inputs !== null && typeof inputs === "object" ? ${index} ?? null : null`;
  const newParams = `inputs${annotation(1)}, outputs${annotation(2)}, trace${traceType}`;
  if (reason === null) {
    // signature: from the first parameter to the separator after the last one (a trailing comma stays)
    const stops = params.map((p) => scanTo(code, p.end, [',', ')']));
    const gap = (i) => original.slice(stops[i], params[i + 1].start);
    edits.push([params[0].start, stops[3],
      `inputs${annotation(1)}${gap(0)}outputs${annotation(2)}${gap(1)}trace${traceType}`]);
    // prologue: after the directives, at the start of the line after the brace
    const directives = body.body.filter((s, i) => s.directive !== undefined && body.body.slice(0, i).every((d) => d.directive !== undefined));
    const after = directives.length ? directives[directives.length - 1].end : body.start + 1;
    const lineEnd = code.indexOf('\n', after);
    const first = body.body[directives.length];
    const ann = (i) => (ts && params[i].type === 'Identifier' ? annotation(i) : '');
    // only the names the body reads are rebound (an unread one would be an unused variable)
    const read = names.map((n) => refs.some((r) => r.name === n));
    const lines = [];
    if (read[0]) lines.push(`let ${names[0]}${ann(0)} = {}; ${APP_TODO}`);
    if (names[1] !== 'inputs' && read[1]) lines.push(`let ${names[1]} = inputs;`);
    if (names[2] !== 'outputs' && read[2]) lines.push(`let ${names[2]} = outputs;`);
    if (read[3]) lines.push(`let ${names[3]}${ann(3)} = ${correct};`);
    const closing = body.end - 1;
    if (!lines.length) {
      // nothing to rebind
    } else if (lineEnd !== -1 && lineEnd < closing && (!first || first.start > lineEnd)) {
      const lineStart = first ? code.lastIndexOf('\n', first.start) + 1 : lineEnd + 1;
      const indent = first ? /^[ \t]*/.exec(original.slice(lineStart))[0] : '  ';
      edits.push([lineEnd + 1, lineEnd + 1, lines.map((l) => `${indent}${l}\n`).join('')]);
    } else {
      if (appRead) lines[0] = lines[0].replace(` ${APP_TODO}`, ` /* ${APP_TODO.slice(3)} */`);
      edits.push([after, after, ` ${lines.join(' ')}`]);
    }
    rules.push('signature-prologue');
  } else {
    const legacyCall = (callee) => {
      let call = `${callee}({}, inputs, outputs, ${correct})`;
      if (wrapped && fn.async) call = `__legacyScore(await ${call})`;
      else if (wrapped) call = `__legacyScore(${call})`;
      return call;
    };
    const declaration = declarationOf(tree, fn);
    const returnEdits = edits.splice(0);
    if (declaration && !declaration.inside && returnEdits.length) wrapped = true; // a factory's function stays as it is
    const renamedInside = declaration && declaration.id.start >= fn.start && declaration.id.end <= fn.end;
    if (renamedInside) returnEdits.push([declaration.id.start, declaration.id.end, '_evaluateV1']);
    const inner = applyEdits(original.slice(fn.start, fn.end), returnEdits, fn.start);
    const asyncKw = fn.async && wrapped ? 'async ' : '';
    if (declaration) {
      const { statement, id, exportEnd } = declaration;
      const prefix = original.slice(statement.start, exportEnd);
      edits.push([statement.start, exportEnd, '']);
      if (!renamedInside) edits.push([id.start, id.end, '_evaluateV1']);
      if (declaration.inside) edits.push([fn.start, fn.end, inner]);
      const todo = appRead ? `\n  ${APP_TODO}` : '';
      edits.push([statement.end, statement.end, `\n\n${prefix}${asyncKw}function evaluate(${newParams}) {${todo}\n` +
        `  return ${legacyCall('_evaluateV1')};\n}`]);
    } else {
      edits.push([fn.start, fn.end, `${asyncKw}(${newParams}) => ${legacyCall(`(${inner})`)}`]);
      if (appRead) notes.push({ line: null, message: `${TODO}: the code reads app_params, which is {} from now on` });
    }
    rules.push('adapter');
  }
  let migrated = applyEdits(original, edits);
  if (wrapped) {
    const typed = ts ? ': unknown' : '';
    migrated = migrated.replace(/\n*$/, '\n') +
      `\n// added by evaluator-host migrate: legacy evaluators could return numeric strings ("0.7"); v2 needs the number\n` +
      `function __legacyScore(value${typed})${typed} {\n` +
      `  return typeof value === "string" && ${NUMERIC}.test(value) ? Number(value) : value;\n}\n`;
  }
  let after = migrated;
  try {
    if (ts) after = facts && facts.blanks.length ? stripped(migrated, tsFacts(migrated)) : amaro.transformSync(migrated, { mode: 'strip-only' }).code;
  } catch (err) {
    throw isStackError(err) ? brokenTransform() : err;
  }
  const detectedAfter = detect(parse(after));
  if (detectedAfter.interface !== 'evaluate') throw new Error(`the migration produced a ${detectedAfter.interface} evaluator`);
  if (reason) notes.unshift({ line: lineOf(migrated, 'evaluate(inputs'), message: `the legacy function was kept and a v2 evaluate() calls it: ${reason}` });
  const todoLine = lineOf(migrated, `${TODO}: v2 has no app_params`);
  if (todoLine) notes.push({ line: todoLine, message: 'the code reads app_params, which is {} from now on: take these values from inputs or settings' });
  if (rules.includes('numeric-string-returns')) {
    notes.push({ line: null, message: 'v2 answers invalid_result for strings: returned numeric string literals ' +
      'became numbers, and values built as strings go through a helper doing what the legacy normalization did' });
  }
  return { ok: true, changed: true, code: migrated, interface_before: 'legacy', interface_after: 'evaluate', rules, notes, reads };
}

function unchanged(code, iface) {
  return { ok: true, changed: false, code, interface_before: iface, interface_after: iface, rules: [], notes: [] };
}

// An answer with "restart": true is this process's last (swc's instance is broken by a stack overflow): the
// host runs the requests after it in a new process.
let broken = false;
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  if (broken) return;
  let answer;
  try {
    answer = migrate(JSON.parse(line));
  } catch (err) {
    if (!(err instanceof Rejected) && isStackError(err)) err = tooDeep(null); // a walker past its stack
    answer = err instanceof Rejected
      ? { ok: false, kind: err.kind, message: err.message, line: err.line, column: err.column }
      : { ok: false, kind: 'error', message: `the migration failed: ${err && (err.stack || JSON.stringify(err))}`, line: null, column: null };
    if (err && err.restart) answer.restart = broken = true;
  }
  process.stdout.write(JSON.stringify(answer) + '\n', () => broken && process.exit(0));
});
