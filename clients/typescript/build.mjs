// Builds the client into dist/: src/schema.ts generated from the service's OpenAPI document (a file,
// or a URL such as http://127.0.0.1:8000/openapi.json: the first argument, else $EVALUATOR_HOST_URL's
// /openapi.json, else the default service's), type-checked and declarations emitted by tsc, bundled
// to one ES module (platform node) by esbuild. The pinned typescript and esbuild are the playground's
// (web/node_modules, `make install`) unless this folder has its own node_modules (`npm ci` here).
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { schemaOf } from "./generate.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const modules = existsSync(`${here}node_modules/esbuild`) ? `${here}node_modules` : `${here}../../web/node_modules`;
const source = process.argv[2] ?? `${(process.env.EVALUATOR_HOST_URL ?? "http://127.0.0.1:8000").replace(/\/+$/, "")}/openapi.json`;
const openapi = /^https?:/.test(source) ? await (await fetch(source)).json() : JSON.parse(readFileSync(source, "utf8"));
writeFileSync(`${here}src/schema.ts`, schemaOf(openapi));
rmSync(`${here}dist`, { recursive: true, force: true });
const require = createRequire(`${modules}/`);
execFileSync(process.execPath, [`${modules}/typescript/bin/tsc`, "-p", `${here}tsconfig.json`], { stdio: "inherit" });
const { build } = await import(require.resolve("esbuild"));
await build({
  entryPoints: [`${here}src/index.ts`],
  bundle: true,
  format: "esm",
  platform: "node",
  target: ["node18"],
  outfile: `${here}dist/index.js`,
  logLevel: "warning",
});
