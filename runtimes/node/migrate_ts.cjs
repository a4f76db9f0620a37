'use strict';
// The JS/TS migrator's TypeScript side (migrate.cjs requires it): the TypeScript compiler's parser, loaded on
// first use from argv[2] (JavaScript never needs it), finds what Node's type stripping cannot remove, and the
// splicer every rewrite goes through. Offsets are the user's code's throughout: blanking keeps the length
// and the line breaks. Never runs the code.
const amaro = require('internal/deps/amaro/dist/index');

// The TypeScript compiler (loaded on first use: JavaScript never needs it)
let tsCompiler = null;
function typescript() {
  if (tsCompiler === null) {
    const where = process.argv[2];
    try {
      tsCompiler = require(where);
    } catch (err) {
      const missing = new Error(`the TypeScript parser is not installed at ${where} (make install installs it): ${err.message}`);
      missing.missingParser = true;
      throw missing;
    }
  }
  return tsCompiler;
}

const PROPERTY_MODIFIERS = ['PublicKeyword', 'PrivateKeyword', 'ProtectedKeyword', 'ReadonlyKeyword', 'OverrideKeyword'];

// What the TypeScript parser finds in `code`: `blanks`, the spans type stripping cannot remove (enums and
// namespaces that are not `declare`d, parameter properties' modifiers), and `returnTypes`, each function's
// return type annotation as [start, end] by the offset its body starts at.
function tsFacts(code) {
  const ts = typescript();
  const file = ts.createSourceFile('evaluator.ts', code, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const modifier = (n, kind) => (ts.canHaveModifiers(n) ? ts.getModifiers(n) || [] : []).some((m) => m.kind === ts.SyntaxKind[kind]);
  const blanks = [];
  const returnTypes = new Map();
  const visit = (n) => {
    if ((ts.isEnumDeclaration(n) || (ts.isModuleDeclaration(n) && n.body)) && !modifier(n, 'DeclareKeyword')) {
      blanks.push([n.getStart(file), n.end]);
      return; // nothing inside is the entrypoint's
    }
    if (ts.isParameter(n)) {
      for (const m of (ts.getModifiers(n) || [])) {
        if (PROPERTY_MODIFIERS.some((kind) => m.kind === ts.SyntaxKind[kind])) blanks.push([m.getStart(file), m.end]);
      }
    }
    if (ts.isFunctionLike(n) && n.type && n.body) returnTypes.set(n.body.getStart(file), [n.type.getStart(file), n.type.end]);
    ts.forEachChild(n, visit);
  };
  visit(file);
  return { blanks, returnTypes };
}

// `code` with the spans blanked (spaces; line breaks kept): the same length, the same lines
function blank(code, spans) {
  if (!spans.length) return code;
  return applyEdits(code, spans.map(([start, end]) => [start, end, code.slice(start, end).replace(/[^\r\n\u2028\u2029]/g, ' ')]));
}

// `code` (TypeScript) as the JavaScript acorn parses, at the same offsets: the TypeScript parser's blanks,
// then Node's type stripping
function stripped(code, facts) {
  return amaro.transformSync(blank(code, facts.blanks), { mode: 'strip-only' }).code;
}

function applyEdits(text, edits, base = 0) {
  const pieces = [];
  let at = 0;
  for (const [start, end, replacement] of [...edits].sort((a, b) => a[0] - b[0] || a[1] - b[1])) {
    pieces.push(text.slice(at, start - base), replacement);
    at = end - base;
  }
  pieces.push(text.slice(at));
  return pieces.join('');
}

module.exports = { applyEdits, blank, stripped, tsFacts, typescript };
