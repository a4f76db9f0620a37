// The Online screen: rules (list, create, pause/resume, delete), a per-rule chart over time, a live
// feed of the latest traces with their scores, and one trace's view (traceview.ts).
//
// The feed polls GET /v1/traces every FEED_MS while the screen is shown and the tab is visible:
// one timer at a time, re-armed only after the previous poll answered, cleared when the screen
// is left or the tab hidden (setVisible / visibilitychange), so nothing runs in the background.

import { api, describe } from "./api";
import { budgetUse } from "./budgetuse";
import { statsChart } from "./chart";
import { fill, h, num, option, toast, when } from "./dom";
import { statusBadge } from "./results";
import { traceView } from "./traceview";
import type { AttributeCondition, Evaluator, OnlineRule, OnlineScore, Page, RuleFilter, RuleStats, TraceDetail, TraceSummary } from "./types";

const FEED_MS = 3000;
const FEED_LIMIT = 25;
const RANGES: [string, number, number][] = [
  // label, range (s), bucket (s)
  ["last 15 minutes", 900, 30],
  ["last hour", 3600, 60],
  ["last 24 hours", 86_400, 1800],
  ["last 7 days", 604_800, 21_600],
];

/** A rule's filter in one line ("every trace" when it has none). */
export function filterSummary(filter: RuleFilter | null): string {
  const parts: string[] = [];
  if (filter?.service_name) parts.push(`service = ${filter.service_name}`);
  if (filter?.span_name) parts.push(`span = ${filter.span_name}`);
  for (const c of filter?.attributes ?? []) parts.push(c.exists !== undefined && c.exists !== null ? `${c.key} ${c.exists ? "exists" : "absent"}` : `${c.key} = ${JSON.stringify(c.equals)}`);
  return parts.length ? parts.join(", ") : "every trace";
}

/** What a person typed as a condition's value: a number or true/false as JSON, "quoted" text as
 * that text (so "200" stays a string); anything else as typed. */
function typedValue(text: string): string | number | boolean {
  const trimmed = text.trim();
  if (/^(-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|"[^"]*")$/.test(trimmed)) return JSON.parse(trimmed) as string | number | boolean;
  return text;
}

/** A time of today as the time only; an older one with its date. */
function recent(date: string): string {
  const at = new Date(date);
  return at.toDateString() === new Date().toDateString() ? at.toLocaleTimeString() : at.toLocaleString();
}

export class OnlineScreen {
  readonly element: HTMLElement;
  private rules: OnlineRule[] = [];
  private evaluators = new Map<string, Evaluator>();
  private selectedRule: string | null = null;
  private openTrace: string | null = null;
  private timer: number | undefined;
  private shown = false;
  private live = true;
  private confirming: string | null = null;
  private traceSeen = "";

  private readonly rulesBody = h("tbody");
  private readonly counts = new Map<string, Record<string, number>>(); // rule id -> its decisions, last hour
  private readonly budgets = new Map<string, string>(); // rule id -> its budget use now ("2/600 scores a minute")
  private readonly nameInput = h("input", { type: "text", "aria-label": "rule name", placeholder: "e.g. helpfulness" });
  private readonly evaluatorSelect = h("select", { "aria-label": "evaluator for the rule", onchange: () => void this.loadRevisions() });
  private readonly revisionSelect = h("select", { "aria-label": "revision for the rule" });
  private readonly rateInput = h("input", { type: "number", min: 0, max: 1, step: 0.05, value: "1", "aria-label": "sampling rate" });
  private readonly serviceInput = h("input", { type: "text", "aria-label": "filter: service name", placeholder: "any service" });
  private readonly spanInput = h("input", { type: "text", "aria-label": "filter: span name", placeholder: "any root span" });
  private readonly conditions = h("div", { class: "conditions" });
  private readonly inputsPath = h("input", { type: "text", "aria-label": "inputs path", placeholder: "e.g. span.attributes.ag.data.inputs" });
  private readonly outputsPath = h("input", { type: "text", "aria-label": "outputs path", placeholder: "e.g. root.attributes.ag.data.outputs" });
  private readonly formError = h("div", { class: "form-error", role: "alert" });
  private readonly rangeSelect = h("select", { "aria-label": "chart range", onchange: () => void this.loadChart() }, RANGES.map(([label], i) => option(String(i), label, i === 1)));
  private readonly chartTitle = h("h3", {}, "Scores over time");
  private readonly chartBox = h("div", { class: "chart-box" });
  private readonly feedBody = h("tbody");
  private readonly liveState = h("span", { class: "muted live-state", role: "status" });
  private readonly liveButton = h("button", { class: "small", onclick: () => this.toggleLive() }, "Pause live updates");
  private readonly traceBox = h("div", { class: "trace-box" });

  constructor() {
    this.element = h(
      "section",
      { class: "screen online", id: "screen-online" },
      h(
        "div",
        { class: "split" },
        h(
          "div",
          { class: "online-left" },
          this.traceBox, // first in the left column and sticky: an opened trace shows beside the feed, in view
          h(
            "section",
            { class: "panel" },
            h("header", { class: "section-head" }, h("h3", {}, "Rules"), h("button", { class: "small", onclick: () => void this.refresh() }, "Refresh")),
            h("table", { class: "rules-list" }, h("thead", {}, h("tr", {}, ...["name", "evaluator", "sampling", "filter", "state", "last hour", ""].map((t) => h("th", {}, t)))), this.rulesBody),
          ),
          h(
            "form",
            { class: "panel rule-form", "aria-label": "new rule", onsubmit: (e: Event) => { e.preventDefault(); void this.create(); } },
            h("h3", {}, "New rule"),
            h("p", { class: "hint" }, "Every finished trace that matches the filter (and the sampling) is scored once by the evaluator."),
            h("div", { class: "form-grid" },
              h("label", {}, "name ", this.nameInput),
              h("label", {}, "evaluator ", this.evaluatorSelect),
              h("label", {}, "revision ", this.revisionSelect),
              h("label", {}, "sampling rate ", this.rateInput),
            ),
            h("fieldset", {}, h("legend", {}, "Filter (empty: every trace)"), h("div", { class: "form-grid" }, h("label", {}, "service name ", this.serviceInput), h("label", {}, "span name ", this.spanInput)), this.conditions, h("button", { type: "button", class: "small", onclick: () => this.addCondition() }, "+ attribute condition")),
            h("fieldset", {}, h("legend", {}, "Mapping (optional): trace paths for inputs / outputs"), h("p", { class: "hint" }, "Paths like root.attributes.ag.data.inputs or span[name=llm].outputs (docs/online.md). Left empty: the root span's ag.data, GenAI or OpenInference inputs/outputs, else the first span's that has them."), h("div", { class: "form-grid" }, h("label", {}, "inputs ", this.inputsPath), h("label", {}, "outputs ", this.outputsPath))),
            this.formError,
            h("div", { class: "toolbar" }, h("button", { class: "primary", type: "submit" }, "Create rule")),
          ),
        ),
        h(
          "div",
          {},
          h("section", { class: "panel" }, h("header", { class: "section-head" }, this.chartTitle, h("span", { class: "spacer" }), this.rangeSelect), this.chartBox),
          h(
            "section",
            { class: "panel" },
            h("header", { class: "section-head" }, h("h3", {}, "Live feed"), this.liveState, h("span", { class: "spacer" }), this.liveButton),
            h("table", { class: "feed", "aria-label": "latest traces" }, h("thead", {}, h("tr", {}, ...["last span", "trace", "spans", "scores"].map((t) => h("th", {}, t)))), this.feedBody),
          ),
        ),
      ),
    );
    fill(this.chartBox, h("p", { class: "muted" }, "Pick a rule to see its scores over time."));
    document.addEventListener("visibilitychange", () => this.schedule());
  }

  /** Called by the shell when the screen is shown or left: polling runs only while shown. */
  setVisible(shown: boolean): void {
    this.shown = shown;
    this.schedule();
  }

  async refresh(): Promise<void> {
    await this.loadRules(); // first: the feed and the chart name rules
    await Promise.all([this.loadFeed(), this.loadChart()]);
  }

  private ruleName(id: string): string {
    const rule = this.rules.find((r) => r.id === id);
    return rule ? (rule.name ?? rule.id) : id;
  }

  private evaluatorName(id: string): string {
    return this.evaluators.get(id)?.name ?? id;
  }

  // -- polling ---------------------------------------------------------------------------------

  private schedule(): void {
    window.clearTimeout(this.timer);
    this.timer = undefined;
    const running = this.shown && this.live && !document.hidden;
    this.liveState.textContent = running ? `live · every ${FEED_MS / 1000} s` : this.live ? "paused (not visible)" : "paused";
    this.liveButton.textContent = this.live ? "Pause live updates" : "Resume live updates";
    if (running) this.timer = window.setTimeout(() => void this.tick(), FEED_MS);
  }

  private async tick(): Promise<void> {
    this.timer = undefined;
    if (!this.shown || !this.live || document.hidden) return;
    await Promise.all([this.loadFeed(), this.loadChart(), this.openTrace ? this.loadTrace(this.openTrace, false) : null]);
    if (this.timer === undefined) this.schedule(); // not re-armed meanwhile (setVisible, a toggle)
  }

  private toggleLive(): void {
    this.live = !this.live;
    this.schedule();
  }

  // -- rules -----------------------------------------------------------------------------------

  private async loadRules(): Promise<void> {
    try {
      const [rules, evaluators] = await Promise.all([api<Page<OnlineRule>>("GET", "/v1/online-rules?limit=200"), api<Page<Evaluator>>("GET", "/v1/evaluators?limit=200")]);
      this.rules = rules.data;
      this.evaluators = new Map(evaluators.data.map((e) => [e.id, e]));
      const chosen = this.evaluatorSelect.value;
      fill(this.evaluatorSelect, evaluators.data.length ? evaluators.data.map((e) => option(e.id, `${e.name} (${e.language}, r${e.revision})`, e.id === chosen)) : option("", "no evaluators yet: save one in the Editor"));
      await this.loadRevisions();
      if (this.selectedRule && !this.rules.some((r) => r.id === this.selectedRule)) this.selectedRule = null;
      if (!this.selectedRule && this.rules.length) this.selectedRule = this.rules[0].id;
      this.renderRules();
      void this.loadCounts();
    } catch (exc) {
      fill(this.rulesBody, h("tr", {}, h("td", { colspan: 7, class: "error-text" }, describe(exc))));
    }
  }

  /** Each rule's decisions over the last hour (its /stats, one bucket), shown in its row. */
  private async loadCounts(): Promise<void> {
    const since = new Date(Date.now() - 3600_000).toISOString();
    await Promise.all(
      this.rules.map(async (r) => {
        try {
          const stats = await api<RuleStats>("GET", `/v1/online-rules/${encodeURIComponent(r.id)}/stats?bucket=3600&since=${encodeURIComponent(since)}`);
          this.counts.set(r.id, { ...(stats.decisions ?? {}), ...Object.fromEntries(Object.entries(stats.pending ?? {}).filter(([, n]) => n > 0)) });
          const use = budgetUse(stats.pace); // budgetuse.ts
          if (use) this.budgets.set(r.id, use);
          else this.budgets.delete(r.id);
        } catch {
          this.counts.delete(r.id);
        }
      }),
    );
    this.renderRules();
  }

  private countsCell(id: string, name: string): HTMLElement {
    const counts = this.counts.get(id);
    const parts = counts ? Object.entries(counts).filter(([, n]) => n > 0) : [];
    const budget = this.budgets.get(id);
    return h(
      "td",
      { class: "counts" },
      h("span", { "aria-label": `decisions of ${name}` }, parts.length ? parts.map(([k, n]) => `${k.replace("_", " ")} ${n}`).join(" · ") : h("span", { class: "muted" }, counts ? "none" : "…")),
      budget ? h("div", { class: "budget", "aria-label": `budget use of ${name}` }, budget) : null,
    );
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

  private renderRules(): void {
    if (!this.rules.length) {
      fill(this.rulesBody, h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No rules yet: create one below; every trace it matches gets scored.")));
      return;
    }
    fill(
      this.rulesBody,
      this.rules.map((r) => {
        const name = r.name ?? r.id;
        const actions =
          this.confirming === r.id
            ? [h("span", {}, "Delete? "), h("button", { class: "small danger", onclick: () => void this.remove(r) }, "Yes, delete"), h("button", { class: "small", onclick: () => { this.confirming = null; this.renderRules(); } }, "No")]
            : [
                h("button", { class: "small", "aria-label": `${r.enabled ? "pause" : "resume"} ${name}`, onclick: () => void this.setEnabled(r, !r.enabled) }, r.enabled ? "Pause" : "Resume"),
                h("button", { class: "small danger", "aria-label": `delete ${name}`, onclick: () => { this.confirming = r.id; this.renderRules(); } }, "Delete"),
              ];
        return h(
          "tr",
          { class: r.id === this.selectedRule ? "selected" : "", tabindex: 0, "data-rule": r.id, "data-enabled": String(r.enabled), title: "show this rule's chart", onclick: (e: Event) => (e.target as HTMLElement).closest("button") || this.selectRule(r.id), onkeydown: (e: KeyboardEvent) => e.key === "Enter" && e.target === e.currentTarget && this.selectRule(r.id) },
          h("td", {}, h("b", {}, name)),
          h("td", {}, this.evaluatorName(r.evaluator_id), h("span", { class: "muted" }, r.revision !== null ? ` r${r.revision}` : " latest")),
          h("td", { class: "num" }, `${num(r.sampling_rate * 100, 1)} %`),
          h("td", { class: "filter-summary" }, filterSummary(r.filter), r.mapping && (r.mapping.inputs || r.mapping.outputs) ? h("span", { class: "badge", title: JSON.stringify(r.mapping) }, "mapped") : null),
          h("td", {}, h("span", { class: `badge ${r.enabled ? "status-ok" : "status-queued"}` }, r.enabled ? "enabled" : "paused")),
          this.countsCell(r.id, name),
          h("td", { class: "actions" }, actions),
        );
      }),
    );
  }

  private selectRule(id: string): void {
    this.selectedRule = id;
    this.renderRules();
    void this.loadChart();
  }

  private addCondition(condition: AttributeCondition = { key: "", equals: "" }): void {
    const key = h("input", { type: "text", "aria-label": "attribute key", placeholder: "e.g. deployment.environment", value: condition.key });
    const value = h("input", { type: "text", "aria-label": "attribute value", placeholder: "prod (or 200, true)", value: condition.equals === undefined ? "" : String(condition.equals) });
    const op = h("select", { "aria-label": "condition", onchange: () => (value.hidden = op.value !== "equals") }, option("equals", "equals", true), option("exists", "exists"), option("absent", "is absent"));
    const row: HTMLElement = h("div", { class: "condition" }, key, op, value, h("button", { type: "button", class: "small", "aria-label": "remove condition", onclick: () => row.remove() }, "✕"));
    this.conditions.append(row);
    key.focus();
  }

  private ruleBody(): Record<string, unknown> {
    const body: Record<string, unknown> = { evaluator_id: this.evaluatorSelect.value, sampling_rate: Number(this.rateInput.value) };
    if (this.nameInput.value.trim()) body.name = this.nameInput.value.trim();
    if (this.revisionSelect.value) body.revision = Number(this.revisionSelect.value);
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

  private async create(): Promise<void> {
    fill(this.formError);
    if (!this.evaluatorSelect.value) return void fill(this.formError, h("div", { class: "error-box" }, "Save an evaluator first (Editor screen), then pick it here."));
    try {
      const rule = await api<OnlineRule>("POST", "/v1/online-rules", this.ruleBody());
      toast(`Rule ${rule.name ?? rule.id} created`);
      this.selectedRule = rule.id;
      this.nameInput.value = "";
      await this.loadRules();
      await this.loadChart();
    } catch (exc) {
      fill(this.formError, h("div", { class: "error-box" }, `Could not create the rule: ${describe(exc)}`));
    }
  }

  private async setEnabled(rule: OnlineRule, enabled: boolean): Promise<void> {
    try {
      await api<OnlineRule>("PATCH", `/v1/online-rules/${encodeURIComponent(rule.id)}`, { enabled });
      toast(`${rule.name ?? rule.id} ${enabled ? "resumed" : "paused"}`);
      await this.loadRules();
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async remove(rule: OnlineRule): Promise<void> {
    this.confirming = null;
    try {
      await api<void>("DELETE", `/v1/online-rules/${encodeURIComponent(rule.id)}`);
      toast(`${rule.name ?? rule.id} deleted (its scores are kept)`);
      if (this.selectedRule === rule.id) this.selectedRule = null;
      await this.loadRules();
      await this.loadChart();
    } catch (exc) {
      toast(describe(exc), "error");
      this.renderRules();
    }
  }

  // -- the chart -------------------------------------------------------------------------------

  private async loadChart(): Promise<void> {
    const id = this.selectedRule;
    if (!id) {
      this.chartTitle.textContent = "Scores over time";
      return void fill(this.chartBox, h("p", { class: "muted" }, "Create a rule to see its scores over time."));
    }
    const [, range, bucket] = RANGES[Number(this.rangeSelect.value)] ?? RANGES[1];
    // since: a whole number of buckets back, so the buckets stay put between two polls
    const since = new Date((Math.floor(Date.now() / 1000 / bucket) * bucket - range + bucket) * 1000).toISOString();
    this.chartTitle.textContent = `Scores over time · ${this.ruleName(id)}`;
    try {
      const stats = await api<RuleStats>("GET", `/v1/online-rules/${encodeURIComponent(id)}/stats?bucket=${bucket}&since=${encodeURIComponent(since)}`);
      if (this.selectedRule === id) fill(this.chartBox, statsChart(stats, `scores of ${this.ruleName(id)}`));
    } catch (exc) {
      fill(this.chartBox, h("p", { class: "error-text" }, describe(exc)));
    }
  }

  // -- the feed and a trace --------------------------------------------------------------------

  private scoreChip(score: OnlineScore): HTMLElement {
    const state = score.state === "done" ? (score.status ?? "done") : score.state;
    const verdict = score.passed === null ? "" : score.passed ? " ✓" : " ✗";
    return h(
      "span",
      { class: `chip ${score.passed === false || (score.state === "done" && score.status !== "ok") ? "bad" : ""}`, "data-rule": score.rule_id, "data-state": score.state, title: `${this.ruleName(score.rule_id)}: ${state}${score.label ? ` · ${score.label}` : ""}` },
      h("span", { class: "chip-rule" }, this.ruleName(score.rule_id)),
      score.state === "done" && score.status === "ok" ? h("b", { class: "chip-score" }, `${num(score.score)}${verdict}`) : statusBadge(state),
      score.label ? h("span", { class: "badge label" }, score.label) : null,
    );
  }

  private async loadFeed(): Promise<void> {
    try {
      const page = await api<Page<TraceSummary>>("GET", `/v1/traces?limit=${FEED_LIMIT}`);
      if (!page.data.length) return void fill(this.feedBody, h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No traces yet: point an OpenTelemetry exporter at this service (docs/online.md).")));
      fill(
        this.feedBody,
        page.data.map((t) =>
          h(
            "tr",
            { tabindex: 0, class: t.trace_id === this.openTrace ? "selected" : "", "data-trace": t.trace_id, "data-state": t.state, onclick: () => void this.loadTrace(t.trace_id, true), onkeydown: (e: KeyboardEvent) => e.key === "Enter" && void this.loadTrace(t.trace_id, true) },
            h("td", { class: "muted", title: t.last_span_at ? when(t.last_span_at) : "" }, t.last_span_at ? recent(t.last_span_at) : "—"),
            h("td", {}, h("b", {}, t.root_name ?? "(no root yet)"), t.service_name ? h("span", { class: "muted" }, ` · ${t.service_name}`) : null, h("div", { class: "mono muted trace-id" }, t.trace_id)),
            h("td", { class: "num" }, t.span_count ?? "—"),
            h("td", { class: "chips" }, t.scores.length ? t.scores.map((s) => this.scoreChip(s)) : h("span", { class: "muted" }, t.state === "routed" ? "no rule matched" : t.state)),
          ),
        ),
      );
    } catch (exc) {
      fill(this.feedBody, h("tr", {}, h("td", { colspan: 4, class: "error-text" }, describe(exc))));
    }
  }

  private async loadTrace(traceId: string, opening: boolean): Promise<void> {
    if (opening) this.openTrace = traceId;
    try {
      const detail = await api<TraceDetail>("GET", `/v1/traces/${encodeURIComponent(traceId)}`);
      if (this.openTrace !== traceId) return;
      const seen = JSON.stringify(detail);
      if (opening || seen !== this.traceSeen) fill(this.traceBox, traceView(detail, (id) => this.ruleName(id), () => this.closeTrace())); // unchanged: keep what is unfolded
      this.traceSeen = seen;
      for (const row of this.feedBody.querySelectorAll<HTMLElement>("tr[data-trace]")) row.classList.toggle("selected", row.dataset.trace === traceId);
      if (opening) this.traceBox.scrollIntoView({ block: "nearest" });
    } catch (exc) {
      if (opening) fill(this.traceBox, h("div", { class: "error-box", role: "alert" }, describe(exc)));
    }
  }

  private closeTrace(): void {
    this.openTrace = null;
    fill(this.traceBox);
    for (const row of this.feedBody.querySelectorAll<HTMLElement>("tr.selected")) row.classList.remove("selected");
  }
}
