// Rendering of evaluation results, aggregates and diffs, shared by every screen.

import { diffLines } from "diff";
import { brief, h, json, num } from "./dom";
import type { Aggregate, EvaluationResult, Histogram } from "./types";

export function statusBadge(status: string): HTMLElement {
  return h("span", { class: `badge status-${status}` }, status);
}

function passedCell(passed: boolean | null): HTMLElement {
  if (passed === null) return h("span", { class: "muted" }, "—");
  return h("span", { class: passed ? "pass" : "fail" }, passed ? "✓ passed" : "✗ failed");
}

function outputsCell(outputs: Record<string, number>): HTMLElement {
  const names = Object.keys(outputs);
  if (!names.length) return h("span", { class: "muted" }, "—");
  return h("ul", { class: "kv" }, ...names.map((k) => h("li", {}, h("b", {}, k), ` ${num(outputs[k])}`)));
}

/** One result's long parts (details, stdout, stderr, traceback, warnings) as collapsible blocks. */
function extras(result: EvaluationResult): HTMLElement {
  const blocks: HTMLElement[] = [];
  const block = (title: string, text: string, open = false) =>
    h("details", { class: "block", open }, h("summary", {}, title), h("pre", {}, text));
  if (Object.keys(result.details).length) blocks.push(block("details", json(result.details)));
  if (result.stdout) blocks.push(block("stdout", result.stdout, true));
  if (result.stderr) blocks.push(block("stderr", result.stderr, true));
  if (result.error?.traceback) blocks.push(block("traceback", result.error.traceback));
  if (result.truncated) blocks.push(h("p", { class: "warn" }, "output truncated"));
  for (const warning of result.warnings) blocks.push(h("p", { class: "warn" }, `⚠ ${warning}`));
  return h("div", { class: "extras" }, blocks);
}

/** A results table; ``onLine`` makes an error's line a link (it highlights the line in the editor). */
export function resultsTable(
  results: EvaluationResult[],
  options: { onLine?: (line: number) => void; indexes?: number[] } = {},
): HTMLElement {
  const rows = results.map((result, i) => {
    const error = result.error;
    const where =
      error?.line && options.onLine
        ? h("button", { class: "link", onclick: () => options.onLine?.(error.line as number) }, `line ${error.line}`)
        : error?.line
          ? `line ${error.line}`
          : null;
    return h(
      "tr",
      { class: `result status-${result.status}`, "data-status": result.status },
      h("td", { class: "num" }, String(options.indexes?.[i] ?? i + 1)),
      h("td", {}, statusBadge(result.status)),
      h("td", { class: "num score" }, num(result.score)),
      h("td", {}, passedCell(result.passed)),
      h("td", {}, outputsCell(result.outputs)),
      h(
        "td",
        { class: "reason" },
        result.label ? h("span", { class: "badge label" }, result.label) : null,
        result.reason ? h("span", {}, ` ${result.reason}`) : null,
        !result.label && !result.reason ? h("span", { class: "muted" }, "—") : null,
      ),
      h(
        "td",
        { class: "wide" },
        error ? h("p", { class: "error-text" }, h("b", {}, error.type), `: ${error.message} `, where) : null,
        extras(result),
      ),
      h("td", { class: "num muted" }, `${num(result.duration_ms, 1)} ms`),
    );
  });
  return h(
    "table",
    { class: "results" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ...["#", "status", "score", "passed", "outputs", "reason / label", "error, details, output", "time"].map((t) =>
          h("th", {}, t),
        ),
      ),
    ),
    h("tbody", {}, rows),
  );
}

function bar(label: string, fraction: number, text: string, cls = ""): HTMLElement {
  const width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return h(
    "div",
    { class: `hbar ${cls}` },
    h("span", { class: "hbar-label" }, label),
    h("span", { class: "hbar-track" }, h("span", { class: "hbar-fill", style: `width: ${width}` })),
    h("span", { class: "hbar-value" }, text),
  );
}

/** The score histogram as columns (bins over [0, 1], then the scores outside). */
export function histogram(hist: Histogram): HTMLElement {
  const bins = hist.counts.map((count, i) => ({
    label: `${num(hist.edges[i], 1)}–${num(hist.edges[i + 1], 1)}`,
    count,
  }));
  if (hist.below) bins.unshift({ label: "< 0", count: hist.below });
  if (hist.above) bins.push({ label: "> 1", count: hist.above });
  const top = Math.max(1, ...bins.map((b) => b.count));
  return h(
    "figure",
    { class: "histogram", "aria-label": "score histogram" },
    h(
      "div",
      { class: "hist-cols" },
      bins.map((b) =>
        h(
          "div",
          { class: "hist-col", title: `${b.label}: ${b.count}` },
          h("span", { class: "hist-count" }, b.count ? String(b.count) : ""),
          h("span", { class: "hist-bar", style: `height: ${(b.count / top) * 100}%` }),
          h("span", { class: "hist-label" }, b.label),
        ),
      ),
    ),
    h("figcaption", {}, "score distribution"),
  );
}

/** Count, errors, mean score, pass rate; the histogram; each named output's rate; labels. */
export function aggregateView(agg: Aggregate): HTMLElement {
  const stat = (label: string, value: string, cls = "") =>
    h("div", { class: `stat ${cls}` }, h("span", { class: "stat-value" }, value), h("span", { class: "stat-label" }, label));
  const outputs = Object.entries(agg.outputs);
  const labels = Object.entries(agg.labels);
  return h(
    "div",
    { class: "aggregate" },
    h(
      "div",
      { class: "stats" },
      stat("rows", String(agg.count)),
      stat("errors", String(agg.errors), agg.errors ? "bad" : ""),
      stat("mean score", num(agg.score?.mean)),
      stat("pass rate", agg.pass_rate === null ? "—" : `${num(agg.pass_rate * 100, 1)} %`),
      agg.score ? stat("min / max", `${num(agg.score.min)} / ${num(agg.score.max)}`) : null,
    ),
    agg.histogram ? histogram(agg.histogram) : null,
    outputs.length
      ? h(
          "div",
          { class: "outputs-rates" },
          h("h4", {}, "named outputs (mean; a pass rate for booleans)"),
          outputs.map(([name, s]) => bar(name, s.mean ?? 0, `${num((s.mean ?? 0) * 100, 1)} %`)),
        )
      : null,
    labels.length
      ? h(
          "div",
          { class: "labels" },
          h("h4", {}, "labels"),
          labels.map(([name, count]) => bar(name, count / Math.max(1, agg.count), String(count), "label")),
        )
      : null,
  );
}

/** A line diff of two texts, as a unified view with +/- gutters. */
export function diffView(before: string, after: string, titles: [string, string]): HTMLElement {
  const parts = diffLines(before, after);
  const lines: HTMLElement[] = [];
  let added = 0;
  let removed = 0;
  for (const part of parts) {
    const kind = part.added ? "add" : part.removed ? "del" : "same";
    if (part.added) added += part.count ?? 0;
    if (part.removed) removed += part.count ?? 0;
    const text = part.value.endsWith("\n") ? part.value.slice(0, -1) : part.value;
    for (const line of text.split("\n")) {
      lines.push(h("div", { class: `diff-line diff-${kind}` }, h("span", { class: "gutter" }, kind === "add" ? "+" : kind === "del" ? "−" : " "), line));
    }
  }
  return h(
    "div",
    { class: "diff" },
    h("div", { class: "diff-head" }, h("span", { class: "del-title" }, `− ${titles[0]}`), h("span", { class: "add-title" }, `+ ${titles[1]}`), h("span", { class: "muted" }, added || removed ? `+${added} −${removed} line(s)` : "identical")),
    h("pre", { class: "diff-body" }, lines),
  );
}

/** A unified diff text (as /v1/migrate answers it) with colours. */
export function unifiedDiff(text: string): HTMLElement {
  const lines = text.split("\n").map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "same";
    return h("div", { class: `diff-line diff-${kind}` }, line);
  });
  return h("div", { class: "diff" }, h("pre", { class: "diff-body" }, lines));
}

export { brief };
