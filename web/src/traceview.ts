// One trace as GET /v1/traces/{trace_id} answers it: the span tree (name, duration, status, key
// attributes inline and every attribute folded), the inputs/outputs the evaluators got, and each
// rule's result (score, passed, label, details, the error with its line when the evaluator failed).

import { fill, h, json, num, when } from "./dom";
import { statusBadge } from "./results";
import { sinkBadges } from "./sinks";
import type { Decision, OnlineScore, TraceDetail, TraceDict, TraceSpan } from "./onlinetypes";

/** Attributes worth seeing without unfolding, first found first shown. */
const KEY_ATTRIBUTES = [
  "gen_ai.request.model",
  "gen_ai.response.model",
  "gen_ai.operation.name",
  "gen_ai.usage.input_tokens",
  "gen_ai.usage.output_tokens",
  "ag.metrics.unit.tokens.total",
  "ag.metrics.unit.costs.total",
  "llm.model_name",
  "openinference.span.kind",
  "http.route",
  "http.response.status_code",
];
const INLINE = 3;

/** ISO 8601 with microseconds → microseconds since the epoch (Date keeps only milliseconds). */
function micros(iso: string): number {
  const fraction = /\.(\d+)/.exec(iso)?.[1] ?? "";
  const whole = Date.parse(iso.replace(/\.\d+/, ""));
  return whole * 1000 + Number((fraction + "000000").slice(0, 6));
}

export function duration(span: { start_time: string; end_time: string }): string {
  const us = micros(span.end_time) - micros(span.start_time);
  if (!Number.isFinite(us)) return "—";
  if (us < 1000) return `${us} µs`;
  if (us < 1_000_000) return `${num(us / 1000, 1)} ms`;
  return `${num(us / 1_000_000, 2)} s`;
}

/** Nested attributes back to their dotted keys (``""`` is a value that is also a prefix). */
export function flatten(value: Record<string, unknown>, prefix = ""): [string, unknown][] {
  const out: [string, unknown][] = [];
  for (const [key, child] of Object.entries(value)) {
    const path = key === "" ? prefix : prefix ? `${prefix}.${key}` : key;
    if (child && typeof child === "object" && !Array.isArray(child)) out.push(...flatten(child as Record<string, unknown>, path));
    else out.push([path, child]);
  }
  return out;
}

function short(value: unknown, max = 60): string {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function statusOf(span: TraceSpan): HTMLElement {
  const code = span.status_code.replace("STATUS_CODE_", "").toLowerCase();
  const cls = code === "error" ? "status-error" : code === "ok" ? "status-ok" : "";
  return h("span", { class: `badge ${cls}`, title: span.status_message || span.status_code }, code);
}

function spanNode(span: TraceSpan, scored: Set<string>): HTMLElement {
  const attributes = flatten(span.attributes);
  const known = new Map(attributes);
  const inline = KEY_ATTRIBUTES.filter((k) => known.has(k)).slice(0, INLINE);
  const children = Object.values(span.children);
  const service = flatten(span.resource).find(([k]) => k === "service.name")?.[1];
  return h(
    "li",
    { class: "span-node", "data-span": span.span_id, "data-name": span.name },
    h(
      "div",
      { class: `span-row${scored.has(span.span_id) ? " evaluated" : ""}` },
      h("span", { class: "span-name" }, span.name),
      statusOf(span),
      h("span", { class: "span-duration muted" }, duration(span)),
      service ? h("span", { class: "badge" }, String(service)) : null,
      scored.has(span.span_id) ? h("span", { class: "badge role", title: "the span the rules evaluated" }, "evaluated") : null,
      inline.map((k) => h("span", { class: "span-attr mono" }, `${k}=${short(known.get(k), 30)}`)),
    ),
    span.status_message ? h("p", { class: "error-text span-message" }, span.status_message) : null,
    attributes.length || span.events.length
      ? h(
          "details",
          { class: "span-attrs" },
          h("summary", {}, `${attributes.length} attribute(s)${span.events.length ? `, ${span.events.length} event(s)` : ""}`),
          h("dl", { class: "attr-list" }, attributes.flatMap(([k, v]) => [h("dt", { class: "mono" }, k), h("dd", { class: "mono" }, short(v, 400))])),
          span.events.length ? h("ul", { class: "kv" }, span.events.map((e) => h("li", {}, h("b", {}, e.name), ` ${when(e.time)}`))) : null,
        )
      : null,
    children.length ? h("ul", { class: "span-tree" }, children.map((c) => spanNode(c, scored))) : null,
  );
}

function passedText(passed: boolean | null): HTMLElement {
  if (passed === null) return h("span", { class: "muted" }, "—");
  return h("span", { class: passed ? "pass" : "fail" }, passed ? "✓ passed" : "✗ failed");
}

/** One rule's result; at session level, a button opens the session when ``openSession`` is given. */
export function scoreCard(score: OnlineScore, ruleName: string, openSession?: (sessionId: string) => void): HTMLElement {
  const result = score.result;
  const error = result?.error ?? null;
  const state = score.state === "done" ? (score.status ?? "done") : score.state;
  return h(
    "section",
    { class: "score-card", "data-rule": score.rule_id, "data-state": score.state, "aria-label": `result of ${ruleName}` },
    h(
      "header",
      { class: "section-head" },
      h("h4", {}, ruleName),
      statusBadge(state),
      h("span", { class: "score-value", title: "score" }, num(score.score)),
      passedText(score.passed),
      score.label ? h("span", { class: "badge label" }, score.label) : null,
      sinkBadges(score.sinks),
      h("span", { class: "spacer" }),
      h("span", { class: "muted" }, score.revision !== null ? `r${score.revision}` : "", score.duration_ms !== null ? ` · ${num(score.duration_ms, 1)} ms` : "", score.scored_at ? ` · ${when(score.scored_at)}` : ""),
    ),
    score.session_id && openSession
      ? h("p", { class: "session-link" }, "Scored with its session ", h("button", { class: "link mono", "aria-label": `open the scored session ${score.session_id}`, onclick: () => openSession(score.session_id ?? "") }, score.session_id), score.current === false ? h("span", { class: "badge superseded" }, "superseded") : null)
      : null,
    score.state === "dropped" ? h("p", { class: "warn" }, "Dropped: the scoring backlog was full when this trace was routed (counted in /metrics).") : null,
    error
      ? h(
          "div",
          { class: "error-box", role: "alert" },
          h("b", {}, error.type),
          `: ${error.message}`,
          error.line ? h("span", { class: "error-line" }, ` (line ${error.line})`) : null,
          error.traceback ? h("details", {}, h("summary", {}, "traceback"), h("pre", {}, error.traceback)) : null,
        )
      : null,
    result?.reason ? h("p", {}, result.reason) : null,
    result && Object.keys(result.details ?? {}).length ? h("details", { class: "block" }, h("summary", {}, "details"), h("pre", {}, json(result.details))) : null,
    result && Object.keys(result.outputs ?? {}).length ? h("p", { class: "mono" }, Object.entries(result.outputs).map(([k, v]) => `${k}=${num(v)}`).join("  ")) : null,
    result?.stdout ? h("details", { class: "block" }, h("summary", {}, "stdout"), h("pre", {}, result.stdout)) : null,
    result?.stderr ? h("details", { class: "block" }, h("summary", {}, "stderr"), h("pre", {}, result.stderr)) : null,
    score.runtime_id ? h("p", { class: "runtime muted" }, `runtime ${score.runtime_id}`) : null,
  );
}

/** A stored trace dict's span tree alone (the Review screen shows the trace a rule's item judged; ``scored``:
 * the span a span-level score is of, marked). */
export function spanTree(trace: TraceDict, scored: string[] = []): HTMLElement {
  const roots = Object.values(trace.spans ?? {});
  if (!roots.length) return h("p", { class: "muted" }, "No spans in this trace.");
  return h("ul", { class: "span-tree root", "aria-label": "span tree" }, roots.map((r) => spanNode(r, new Set(scored))));
}

const GOOD = new Set(["scored"]);
const WAITING = new Set(["not_ready", "queued", "running", "retrying", "delayed"]);

/** Each rule's decision for this trace (and, at span level, each span's) with its reason. */
function decisionsTable(decisions: Decision[], ruleName: (id: string) => string): HTMLElement {
  if (!decisions.length) return h("p", { class: "muted" }, "No rules in this workspace.");
  return h(
    "table",
    { class: "decisions", "aria-label": "decisions" },
    h("thead", {}, h("tr", {}, ...["rule", "target", "decision", "reason"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      decisions.map((d) =>
        h(
          "tr",
          { "data-rule": d.rule_id, "data-decision": d.decision },
          h("td", {}, ruleName(d.rule_id)),
          h("td", { class: "mono muted" }, d.target ?? "trace"),
          h("td", {}, h("span", { class: `badge ${GOOD.has(d.decision) ? "status-ok" : WAITING.has(d.decision) ? "status-queued" : "status-error"}` }, d.decision.replace("_", " "))),
          h("td", { class: "reason" }, d.reason, d.attempts > 1 ? h("span", { class: "muted" }, ` (${d.attempts} attempts)`) : null),
        ),
      ),
    ),
  );
}

/** The session ids the trace's spans carry under ``keys`` (span attributes, then resource attributes; per
 * span the first key found, as routing reads them: docs/online.md, "Session level"). */
export function sessionIdsOf(roots: TraceSpan[], keys: string[]): string[] {
  const found = new Set<string>();
  const walk = (span: TraceSpan): void => {
    const own = new Map([...flatten(span.resource), ...flatten(span.attributes)]);
    const key = keys.find((k) => typeof own.get(k) === "string" && own.get(k) !== "");
    if (key) found.add(String(own.get(key)));
    Object.values(span.children).forEach(walk);
  };
  roots.forEach(walk);
  return [...found];
}

/** The trace view; ``ruleName`` names a rule id (its name, or the id of a deleted rule); ``openSession``
 * opens a session: the one a session-level score is of, or one the trace's spans name under
 * ``sessionKeys``. */
export function traceView(detail: TraceDetail, ruleName: (id: string) => string, onClose: () => void, openSession?: (sessionId: string) => void, sessionKeys: string[] = []): HTMLElement {
  const roots = Object.values(detail.trace?.spans ?? {});
  const sessions = openSession ? sessionIdsOf(roots, sessionKeys) : [];
  const scored = new Set(detail.scores.map((s) => s.span_id).filter((s): s is string => !!s));
  const box = h("div", { class: "trace-body" });
  fill(
    box,
    h("h4", {}, "Spans"),
    roots.length ? h("ul", { class: "span-tree root", "aria-label": "span tree" }, roots.map((r) => spanNode(r, scored))) : h("p", { class: "muted" }, "No spans stored (retention may have removed them)."),
    h(
      "div",
      { class: "io" },
      h("div", {}, h("h4", {}, "inputs (as the evaluator got them)"), h("pre", { class: "io-value", "aria-label": "trace inputs" }, json(detail.inputs ?? null))),
      h("div", {}, h("h4", {}, "outputs"), h("pre", { class: "io-value", "aria-label": "trace outputs" }, json(detail.outputs ?? null))),
    ),
    h("h4", {}, "Why each rule did or didn't score it"),
    decisionsTable(detail.decisions ?? [], ruleName),
    h("h4", {}, "Rules' results"),
    detail.scores.length ? detail.scores.map((s) => scoreCard(s, ruleName(s.rule_id), openSession)) : h("p", { class: "muted" }, "No rule scored this trace (none matched, it was not sampled, or it is not ready yet)."),
  );
  return h(
    "section",
    { class: "panel trace-view", "data-trace": detail.trace_id, "data-state": detail.state, "aria-label": "trace" },
    h("header", { class: "section-head" }, h("h3", {}, "Trace "), h("span", { class: "mono muted" }, detail.trace_id), statusBadge(detail.state), h("span", { class: "spacer" }), h("button", { class: "small", "aria-label": "close the trace", onclick: onClose }, "✕ Close")),
    sessions.length && openSession ? h("p", { class: "session-link" }, "In session ", sessions.map((id) => h("button", { class: "link mono", "aria-label": `open session ${id}`, onclick: () => openSession(id) }, id))) : null,
    box,
  );
}
