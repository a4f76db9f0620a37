// The editor screen's fixed texts and its pure views: each language's template, each interface's
// signature, the capability report, and a failed run's error box (playground.ts puts them on screen).

import { ApiError, describe } from "./api";
import { h } from "./dom";
import type { Capabilities, Interface, Language } from "./types";

export const TEMPLATES: Record<Language, string> = {
  python: `def evaluate(inputs, outputs, trace):
    """1.0 for the exact answer (ignoring case and spaces), 0.5 when the answer only mentions it."""
    expected = inputs["correct_answer"].strip().lower()
    got = str(outputs).strip().lower()
    score = 1.0 if got == expected else 0.5 if expected in got else 0.0
    return {"score": score, "reason": f"expected {expected!r}, got {got!r}"}
`,
  javascript: `function evaluate(inputs, outputs, trace) {
  const expected = inputs.correct_answer.trim().toLowerCase();
  const got = String(outputs).trim().toLowerCase();
  return { score: got === expected ? 1 : 0, reason: \`expected \${expected}, got \${got}\` };
}
`,
  typescript: `export function evaluate(inputs: { correct_answer: string }, outputs: string, trace: unknown) {
  const expected = inputs.correct_answer.trim().toLowerCase();
  const got = String(outputs).trim().toLowerCase();
  return { score: got === expected ? 1 : 0, reason: \`expected \${expected}, got \${got}\` };
}
`,
};

export const SIGNATURES: Record<Interface, string> = {
  evaluate: "evaluate(inputs, outputs, trace)",
  legacy: "evaluate(app_params, inputs, output, correct_answer) — legacy: the Migrate screen rewrites it",
  main: "main(…) — parameters bound by name from the inputs",
  metric: "NeMo Metric class: output_spec() + compute_scores(metric_input) — each output a named score",
};

const KIND_TITLES: Record<string, string> = {
  network: "Network (fails: the sandbox has none)",
  filesystem: "Filesystem",
  subprocess: "Subprocesses",
  environment: "Environment",
  dynamic_code: "Dynamic code",
  native: "Native code",
};

/** The capability report: each kind found, its lines as buttons (``goto`` moves the editor there). */
export function capabilitiesView(capabilities: Capabilities, goto: (line: number) => void): HTMLElement[] {
  const kinds = Object.entries(capabilities).filter(([, items]) => items.length);
  if (!kinds.length) return [h("p", { class: "muted" }, "nothing found: no network, files, subprocesses, environment, dynamic or native code")];
  return kinds.map(([kind, items]) =>
    h(
      "div",
      { class: `capability cap-${kind}` },
      h("h4", {}, KIND_TITLES[kind] ?? kind),
      h("ul", {}, items.map((item) => h("li", {}, h("button", { class: "link", onclick: () => goto(item.line) }, `line ${item.line}`), " ", h("code", {}, item.detail)))),
    ),
  );
}

/** A failed run's error, once: the message's first line, then the rest (or the installer's output). */
export function runErrorBox(exc: unknown): HTMLElement {
  if (!(exc instanceof ApiError)) return h("div", { class: "error-box", role: "alert" }, h("p", {}, describe(exc)));
  const [first, ...rest] = describe(exc).split("\n");
  const output = typeof exc.body.output === "string" ? exc.body.output.trim() : "";
  const more = rest.join("\n").trim() || output;
  const suggestions = Array.isArray(exc.body.suggestions) ? (exc.body.suggestions as string[]) : [];
  return h(
    "div",
    { class: "error-box", role: "alert" },
    h("p", {}, first),
    more ? h("pre", {}, more) : null,
    suggestions.filter((hint) => !more.includes(hint)).map((hint) => h("p", {}, hint)),
  );
}
