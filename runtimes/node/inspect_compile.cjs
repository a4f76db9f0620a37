'use strict';
// The JS/TS inspector's compiler (inspect.cjs requires it): ES module syntax rewritten in place into
// CommonJS, line for line. Never runs the code.
// -- compiling: ES module syntax → CommonJS with TypeScript's esModuleInterop semantics -------
//
// Evaluators are written the way TypeScript users write them (`import * as _ from "lodash"`,
// `import fs from "fs"`), and those mean what tsc with esModuleInterop makes of them: the
// CommonJS module itself, its exports, its default. Node's own ES-module semantics differ for
// CommonJS packages (`import * as _` would hold only `default`), so import and export
// declarations are rewritten in place into require() and exports, keeping every line where it
// was (stack traces and the TypeScript source map stay right). Code that needs real ESM — a
// top-level await or import.meta — is left as it is and run as an ES module.
const HELPERS =
  '\nfunction __evhIsNs(m) { return m !== null && (typeof m === "object" || typeof m === "function") && ' +
  '(m.__esModule === true || m[Symbol.toStringTag] === "Module"); }' +
  '\nfunction __evhDefault(m) { return __evhIsNs(m) ? m.default : m; }' +
  '\nfunction __evhStar(m) { return m; }\n';

function newlines(text) {
  let n = 0;
  for (const ch of text) if (ch === '\n') n += 1;
  return '\n'.repeat(n);
}

function hasTopLevelAwait(node) {
  if (node === null || typeof node !== 'object') return false;
  if (Array.isArray(node)) return node.some(hasTopLevelAwait);
  if (node.type === 'FunctionDeclaration' || node.type === 'FunctionExpression' ||
      node.type === 'ArrowFunctionExpression') return false;
  if (node.type === 'AwaitExpression' || (node.type === 'ForOfStatement' && node.await)) return true;
  for (const key of Object.keys(node)) {
    if (key !== 'loc' && typeof node[key] === 'object' && hasTopLevelAwait(node[key])) return true;
  }
  return false;
}

function needsEsm(code, tree) {
  return /\bimport\.meta\b/.test(code) || hasTopLevelAwait(tree.body);
}

function toCommonJs(code, tree) {
  const edits = []; // [start, end, replacement]
  let counter = 0;
  const source = (node) => JSON.stringify(node.source.value);
  for (const node of tree.body) {
    const text = code.slice(node.start, node.end);
    if (node.type === 'ImportDeclaration') {
      const parts = [];
      const m = `__evhImport${counter++}`;
      parts.push(`${m} = require(${source(node)})`);
      const named = [];
      for (const spec of node.specifiers) {
        if (spec.type === 'ImportDefaultSpecifier') parts.push(`${spec.local.name} = __evhDefault(${m})`);
        else if (spec.type === 'ImportNamespaceSpecifier') parts.push(`${spec.local.name} = __evhStar(${m})`);
        else {
          const imported = spec.imported.type === 'Identifier' ? spec.imported.name : spec.imported.value;
          named.push(imported === spec.local.name ? imported : `${JSON.stringify(imported)}: ${spec.local.name}`);
        }
      }
      if (named.length) parts.push(`{ ${named.join(', ')} } = ${m}`);
      edits.push([node.start, node.end, `const ${parts.join(', ')};${newlines(text)}`]);
    } else if (node.type === 'ExportNamedDeclaration') {
      if (node.declaration) {
        edits.push([node.start, node.declaration.start, '']); // `export const x` → `const x`
      } else if (node.source) {
        const names = node.specifiers.map((s) => {
          const local = s.local.type === 'Identifier' ? s.local.name : s.local.value;
          const exported = s.exported.type === 'Identifier' ? s.exported.name : s.exported.value;
          return `${JSON.stringify(exported)}: { enumerable: true, get: () => __evhReexport${counter}[${JSON.stringify(local)}] }`;
        });
        edits.push([node.start, node.end,
          `const __evhReexport${counter} = require(${source(node)}); Object.defineProperties(exports, { ${names.join(', ')} });${newlines(text)}`]);
        counter += 1;
      } else {
        const names = node.specifiers.map((s) => {
          const local = s.local.name;
          const exported = s.exported.type === 'Identifier' ? s.exported.name : s.exported.value;
          return `${JSON.stringify(exported)}: { enumerable: true, get: () => ${local} }`;
        });
        edits.push([node.start, node.end, `Object.defineProperties(exports, { ${names.join(', ')} });${newlines(text)}`]);
      }
    } else if (node.type === 'ExportDefaultDeclaration') {
      const decl = node.declaration;
      if ((decl.type === 'FunctionDeclaration' || decl.type === 'ClassDeclaration') && decl.id) {
        edits.push([node.start, decl.start, '']); // keeps the top-level binding
        edits.push([node.end, node.end, `; exports.default = ${decl.id.name};`]);
      } else {
        // only the keywords: the expression may start with a parenthesis acorn does not keep
        const keywords = /^export\s+default\s*/.exec(text)[0];
        edits.push([node.start, node.start + keywords.length, `exports.default = ${newlines(keywords)}`]);
      }
    } else if (node.type === 'ExportAllDeclaration') {
      const target = node.exported
        ? `exports[${JSON.stringify(node.exported.type === 'Identifier' ? node.exported.name : node.exported.value)}] = require(${source(node)})`
        : `Object.assign(exports, require(${source(node)}))`;
      edits.push([node.start, node.end, `${target};${newlines(text)}`]);
    }
  }
  // one pass over the code, in order (edits never overlap): linear in its size, however many edits
  const pieces = [];
  let at = 0;
  for (const [start, end, replacement] of edits.sort((a, b) => a[0] - b[0] || a[1] - b[1])) {
    pieces.push(code.slice(at, start), replacement);
    at = end;
  }
  pieces.push(code.slice(at));
  return pieces.join('') + HELPERS;
}

module.exports = { needsEsm, toCommonJs };
