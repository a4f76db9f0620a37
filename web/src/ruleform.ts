// The Online screen's New rule form: evaluator, revision, sampling, the target level (trace, span or
// session: for a session its key and quiet period), the filter (at span level: which spans are scored),
// the mapping; "Try on stored traces" scores the form's body now on the latest matching stored targets
// (POST /v1/online-rules/test, nothing stored) and shows each result BEFORE "Create rule".
//
// An error of either call (a 422 of a field) is shown in the form, never swallowed (novalidate: the
// service's message, not the browser's bubble, says what is wrong with a number); a try that matched
// nothing says so plainly, not as an empty table.

import { api, describe } from "./api";
import { fill, h, num, option, toast } from "./dom";
import type { AttributeCondition, OnlineRule, RuleFilter, RuleTarget, RuleTestAnswer, RuleTestResult } from "./onlinetypes";
import { statusBadge } from "./results";
import type { Evaluator, Page } from "./types";

/** The session keys a session-level rule reads when it names none (docs/online.md, "Session level"). */
export const DEFAULT_SESSION_KEYS = ["session.id", "gen_ai.conversation.id", "langfuse.session.id"];
export const DEFAULT_QUIET_S = 300;
const TRY_LIMIT = 20;

const LEVEL_HINTS: Record<RuleTarget["level"], string> = {
  trace: "Every finished trace that matches the filter (and the sampling) is scored once by the evaluator.",
  span: "Every span that matches the filter is scored once (e.g. each LLM call): the evaluator gets that span's inputs/outputs and the whole trace.",
  session: "Traces that share a session id are scored together once no span of them came for the quiet period; new traces score the session again.",
};

/** A rule's filter in one line ("every trace" when it has none). */
export function filterSummary(filter: RuleFilter | null): string {
  const parts: string[] = [];
  if (filter?.service_name) parts.push(`service = ${filter.service_name}`);
  if (filter?.span_name) parts.push(`span = ${filter.span_name}`);
  for (const c of filter?.attributes ?? []) parts.push(c.exists !== undefined && c.exists !== null ? `${c.key} ${c.exists ? "exists" : "absent"}` : `${c.key} = ${JSON.stringify(c.equals)}`);
  return parts.length ? parts.join(", ") : "every trace";
}

/** A rule's target in a few words: "trace", "span", "session (key, quiet 300 s)". */
export function targetSummary(target: RuleTarget | undefined): string {
  if (!target || target.level === "trace") return "trace";
  if (target.level === "span") return "span";
  return `session (${target.session_key ?? "default key"}, quiet ${target.quiet_s ?? 300} s)`;
}

/** What a person typed as a condition's value: a number or true/false as JSON, "quoted" text as
 * that text (so "200" stays a string); anything else as typed. */
function typedValue(text: string): string | number | boolean {
  const trimmed = text.trim();
  if (/^(-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|"[^"]*")$/.test(trimmed)) return JSON.parse(trimmed) as string | number | boolean;
  return text;
}

function short(value: unknown, max = 80): string {
  const text = typeof value === "string" ? value : JSON.stringify(value) ?? "";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function passedCell(passed: boolean | null): HTMLElement {
  if (passed === null) return h("span", { class: "muted" }, "—");
  return h("span", { class: passed ? "pass" : "fail" }, passed ? "✓" : "✗");
}

/** The results of a try: a table, or what was looked at when nothing matched. */
export function tryResults(answer: RuleTestAnswer): HTMLElement {
  if (!answer.matched || !answer.results.length) {
    return h(
      "div",
      { class: "warn try-none", role: "status", "data-matched": "0" },
      h("b", {}, "No stored trace matches this rule yet"),
      ` (looked at ${answer.scanned_traces} stored trace(s)).`,
      answer.message ? h("div", { class: "hint" }, answer.message) : null,
    );
  }
  const failed = answer.results.filter((r) => r.status !== "ok").length;
  const row = (r: RuleTestResult): HTMLElement =>
    h(
      "tr",
      { class: `status-${r.status}`, "data-trace": r.trace_id, "data-status": r.status },
      h("td", { class: "mono", title: r.trace_id }, r.trace_id.slice(0, 12)),
      h("td", { class: "mono" }, r.span_id ?? "—"),
      h("td", { class: "mono" }, r.session_id ?? "—"),
      h("td", {}, statusBadge(r.status)),
      h("td", { class: "num" }, num(r.score)),
      h("td", {}, passedCell(r.passed)),
      h("td", {}, r.label ?? ""),
      h("td", { class: "reason", title: r.reason ?? "" }, short(r.reason ?? "", 120)),
      h("td", { class: "num" }, r.duration_ms === null ? "—" : `${num(r.duration_ms, 1)} ms`),
    );
  return h(
    "div",
    { class: "try-box", "data-matched": String(answer.matched) },
    h(
      "p",
      { class: failed === answer.results.length ? "error-text" : "hint", role: "status" },
      `Scored ${answer.results.length} of ${answer.matched} matching target(s) (looked at ${answer.scanned_traces} stored trace(s)); nothing was stored.`,
      failed ? ` ${failed === answer.results.length ? "Every one" : failed} failed.` : "",
    ),
    h(
      "table",
      { class: "try-results", "aria-label": "try results" },
      h("thead", {}, h("tr", {}, ...["trace", "span", "session", "status", "score", "passed", "label", "reason", "duration"].map((t) => h("th", {}, t)))),
      h("tbody", {}, answer.results.map(row)),
    ),
  );
}

export class RuleForm {
  readonly element: HTMLFormElement;
  private readonly nameInput = h("input", { type: "text", "aria-label": "rule name", placeholder: "e.g. helpfulness" });
  private readonly evaluatorSelect = h("select", { "aria-label": "evaluator for the rule", onchange: () => void this.loadRevisions() });
  private readonly revisionSelect = h("select", { "aria-label": "revision for the rule" });
  private readonly rateInput = h("input", { type: "number", min: 0, max: 1, step: 0.05, value: "1", "aria-label": "sampling rate" });
  private readonly levelSelect = h("select", { "aria-label": "target level", onchange: () => this.showLevel() }, option("trace", "trace (one score per trace)", true), option("span", "span (each matching span)"), option("session", "session (a conversation, once quiet)"));
  private readonly levelHint = h("p", { class: "hint level-hint" });
  private readonly sessionKeyInput = h("input", { type: "text", "aria-label": "session key", placeholder: DEFAULT_SESSION_KEYS.join(", ") });
  private readonly quietInput = h("input", { type: "number", min: 1, step: 1, "aria-label": "quiet seconds", placeholder: String(DEFAULT_QUIET_S) });
  private readonly sessionFields = h("fieldset", { class: "session-fields", hidden: true }, h("legend", {}, "Session"), h("div", { class: "form-grid" }, h("label", {}, "session key ", this.sessionKeyInput), h("label", {}, "quiet period (s) ", this.quietInput)), h("p", { class: "hint" }, `Empty key: the first of ${DEFAULT_SESSION_KEYS.join(", ")} on any span of the trace (resource attributes too). Empty quiet period: ${DEFAULT_QUIET_S} s.`));
  private readonly filterLegend = h("legend", {}, "Filter (empty: every trace)");
  private readonly serviceInput = h("input", { type: "text", "aria-label": "filter: service name", placeholder: "any service" });
  private readonly spanInput = h("input", { type: "text", "aria-label": "filter: span name", placeholder: "any root span" });
  private readonly conditions = h("div", { class: "conditions" });
  private readonly inputsPath = h("input", { type: "text", "aria-label": "inputs path", placeholder: "e.g. span.attributes.ag.data.inputs" });
  private readonly outputsPath = h("input", { type: "text", "aria-label": "outputs path", placeholder: "e.g. root.attributes.ag.data.outputs" });
  private readonly formError = h("div", { class: "form-error", role: "alert" });
  private readonly tryBox = h("div", { class: "try-area", "aria-label": "try", "aria-live": "polite" });
  private readonly tryButton = h("button", { type: "button", class: "try", onclick: () => void this.tryRule() }, "Try on stored traces");

  constructor(private readonly onCreated: (rule: OnlineRule) => Promise<void>) {
    this.element = h(
      "form",
      { class: "panel rule-form", "aria-label": "new rule", novalidate: true, onsubmit: (e: Event) => { e.preventDefault(); void this.create(); } },
      h("h3", {}, "New rule"),
      this.levelHint,
      h("div", { class: "form-grid" }, h("label", {}, "name ", this.nameInput), h("label", {}, "evaluator ", this.evaluatorSelect), h("label", {}, "revision ", this.revisionSelect), h("label", {}, "sampling rate ", this.rateInput), h("label", {}, "level ", this.levelSelect)),
      this.sessionFields,
      h("fieldset", {}, this.filterLegend, h("div", { class: "form-grid" }, h("label", {}, "service name ", this.serviceInput), h("label", {}, "span name ", this.spanInput)), this.conditions, h("button", { type: "button", class: "small", onclick: () => this.addCondition() }, "+ attribute condition")),
      h("fieldset", {}, h("legend", {}, "Mapping (optional): trace paths for inputs / outputs"), h("p", { class: "hint" }, "Paths like root.attributes.ag.data.inputs or span[name=llm].outputs (docs/online.md). Left empty: the root span's ag.data, GenAI or OpenInference inputs/outputs, else the first span's that has them."), h("div", { class: "form-grid" }, h("label", {}, "inputs ", this.inputsPath), h("label", {}, "outputs ", this.outputsPath))),
      this.formError,
      h("div", { class: "toolbar" }, this.tryButton, h("button", { class: "primary", type: "submit" }, "Create rule")),
      this.tryBox,
    );
    this.showLevel();
  }

  /** The workspace's evaluators (the shell's rules load reads them), the chosen one kept. */
  async setEvaluators(evaluators: Evaluator[]): Promise<void> {
    const chosen = this.evaluatorSelect.value;
    fill(this.evaluatorSelect, evaluators.length ? evaluators.map((e) => option(e.id, `${e.name} (${e.language}, r${e.revision})`, e.id === chosen)) : option("", "no evaluators yet: save one in the Editor"));
    await this.loadRevisions();
  }

  private async loadRevisions(): Promise<void> {
    const id = this.evaluatorSelect.value;
    if (!id) return void fill(this.revisionSelect, option("", "latest"));
    try {
      const revisions = (await api<Page<Evaluator>>("GET", `/v1/evaluators/${encodeURIComponent(id)}/revisions`)).data;
      fill(this.revisionSelect, option("", "latest (at scoring time)", true), [...revisions].reverse().map((r) => option(String(r.revision), `revision ${r.revision}`)));
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private level(): RuleTarget["level"] {
    return this.levelSelect.value as RuleTarget["level"];
  }

  private showLevel(): void {
    const level = this.level();
    this.element.dataset.level = level;
    this.levelHint.textContent = LEVEL_HINTS[level];
    this.sessionFields.hidden = level !== "session";
    this.sessionFields.disabled = level !== "session"; // its fields are not part of another level's rule
    this.filterLegend.textContent = level === "span" ? "Span filter: each span that matches is scored (empty: every span)" : level === "session" ? "Filter: the traces that join a session (empty: every trace)" : "Filter (empty: every trace)";
    this.spanInput.placeholder = level === "span" ? "any span, e.g. ChatCompletion" : "any root span";
    fill(this.tryBox); // a try of another level says nothing of this one
  }

  private addCondition(condition: AttributeCondition = { key: "", equals: "" }): void {
    const key = h("input", { type: "text", "aria-label": "attribute key", placeholder: "e.g. openinference.span.kind", value: condition.key });
    const value = h("input", { type: "text", "aria-label": "attribute value", placeholder: "LLM (or 200, true)", value: condition.equals === undefined ? "" : String(condition.equals) });
    const op = h("select", { "aria-label": "condition", onchange: () => (value.hidden = op.value !== "equals") }, option("equals", "equals", true), option("exists", "exists"), option("absent", "is absent"));
    const row: HTMLElement = h("div", { class: "condition" }, key, op, value, h("button", { type: "button", class: "small", "aria-label": "remove condition", onclick: () => row.remove() }, "✕"));
    this.conditions.append(row);
    key.focus();
  }

  /** The form as POST /v1/online-rules's body. */
  body(): Record<string, unknown> {
    const body: Record<string, unknown> = { evaluator_id: this.evaluatorSelect.value, sampling_rate: Number(this.rateInput.value) };
    if (this.nameInput.value.trim()) body.name = this.nameInput.value.trim();
    if (this.revisionSelect.value) body.revision = Number(this.revisionSelect.value);
    const target: RuleTarget = { level: this.level() };
    if (target.level === "session") {
      if (this.sessionKeyInput.value.trim()) target.session_key = this.sessionKeyInput.value.trim();
      if (this.quietInput.value.trim()) target.quiet_s = Number(this.quietInput.value);
    }
    body.target = target;
    const filter: RuleFilter = {};
    if (this.serviceInput.value.trim()) filter.service_name = this.serviceInput.value.trim();
    if (this.spanInput.value.trim()) filter.span_name = this.spanInput.value.trim();
    const conditions: AttributeCondition[] = [];
    for (const row of this.conditions.querySelectorAll<HTMLElement>(".condition")) {
      const [key, op, value] = row.querySelectorAll<HTMLInputElement | HTMLSelectElement>("input, select");
      if (!key.value.trim()) continue;
      conditions.push(op.value === "equals" ? { key: key.value.trim(), equals: typedValue(value.value) } : { key: key.value.trim(), exists: op.value === "exists" });
    }
    if (conditions.length) filter.attributes = conditions;
    if (Object.keys(filter).length) body.filter = filter;
    const mapping: Record<string, string> = {};
    if (this.inputsPath.value.trim()) mapping.inputs = this.inputsPath.value.trim();
    if (this.outputsPath.value.trim()) mapping.outputs = this.outputsPath.value.trim();
    if (Object.keys(mapping).length) body.mapping = mapping;
    return body;
  }

  private ready(): boolean {
    fill(this.formError);
    if (this.evaluatorSelect.value) return true;
    fill(this.formError, h("div", { class: "error-box" }, "Save an evaluator first (Editor screen), then pick it here."));
    return false;
  }

  private async tryRule(): Promise<void> {
    if (!this.ready()) return;
    this.tryButton.disabled = true;
    fill(this.tryBox, h("p", { class: "muted", role: "status" }, "Scoring the latest matching stored targets…"));
    try {
      const answer = await api<RuleTestAnswer>("POST", "/v1/online-rules/test", { ...this.body(), limit: TRY_LIMIT });
      fill(this.tryBox, tryResults(answer));
    } catch (exc) {
      fill(this.tryBox);
      fill(this.formError, h("div", { class: "error-box" }, `Could not try the rule: ${describe(exc)}`));
    } finally {
      this.tryButton.disabled = false;
    }
  }

  private async create(): Promise<void> {
    if (!this.ready()) return;
    try {
      const rule = await api<OnlineRule>("POST", "/v1/online-rules", this.body());
      toast(`Rule ${rule.name ?? rule.id} created`);
      this.nameInput.value = "";
      fill(this.tryBox);
      await this.onCreated(rule);
    } catch (exc) {
      fill(this.formError, h("div", { class: "error-box" }, `Could not create the rule: ${describe(exc)}`));
    }
  }
}
