// The Online screen: rules (list, pause/resume, backfill, delete; the New rule form with its Try is ruleform.ts,
// a rule's backfill backfillpanel.ts), a per-rule chart over time, a live feed of the latest traces with their
// scores, the sessions, and one trace's view (traceview.ts) or one session's (sessionview.ts).
// The feed (and the sessions list) polls GET /v1/traces every FEED_MS while the screen is shown and the tab is
// visible: one timer at a time, re-armed only after the previous poll answered, cleared when the screen is
// left or the tab hidden (setVisible / visibilitychange), so nothing runs in the background. Sink badges: sinks.ts.

import { api, describe } from "./api";
import { budgetUse } from "./budgetuse";
import { statsChart } from "./chart";
import { BackfillPanel } from "./backfillpanel";
import { fill, h, num, option, toast, when } from "./dom";
import type { OnlineRule, OnlineScore, RuleStats, SessionDetail, SessionSummary, TraceDetail, TraceSummary } from "./onlinetypes";
import { statusBadge } from "./results";
import { RuleForm, filterSummary, targetSummary } from "./ruleform";
import { sessionKeys, sessionRows, sessionView } from "./sessionview";
import { traceView } from "./traceview";
import { sinkBadges } from "./sinks";
import type { Evaluator, Page } from "./types";

const FEED_MS = 3000;
const FEED_LIMIT = 25;
const SESSIONS_LIMIT = 10;
const RANGES: [string, number, number][] = [
  // label, range (s), bucket (s)
  ["last 15 minutes", 900, 30],
  ["last hour", 3600, 60],
  ["last 24 hours", 86_400, 1800],
  ["last 7 days", 604_800, 21_600],
];

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
  private openSession: string | null = null;
  private backfill: BackfillPanel | null = null;
  private timer: number | undefined;
  private shown = false;
  private live = true;
  private confirming: string | null = null;
  private traceSeen = "";

  private readonly rulesBody = h("tbody");
  private readonly counts = new Map<string, Record<string, number>>(); // rule id -> its decisions, last hour
  private readonly budgets = new Map<string, string>(); // rule id -> its budget use now ("2/600 scores a minute")
  private readonly form = new RuleForm(async (rule) => {
    this.selectedRule = rule.id;
    await this.loadRules();
    await this.loadChart();
  });
  private readonly backfillBox = h("div", { class: "backfill-box" });
  private readonly rangeSelect = h("select", { "aria-label": "chart range", onchange: () => void this.loadChart() }, RANGES.map(([label], i) => option(String(i), label, i === 1)));
  private readonly chartTitle = h("h3", {}, "Scores over time");
  private readonly chartBox = h("div", { class: "chart-box" });
  private readonly feedBody = h("tbody");
  private readonly liveState = h("span", { class: "muted live-state", role: "status" });
  private readonly liveButton = h("button", { class: "small", onclick: () => this.toggleLive() }, "Pause live updates");
  private readonly traceBox = h("div", { class: "trace-box" });
  private readonly sessionsBody = h("tbody");

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
          this.backfillBox,
          this.form.element,
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
          h(
            "section",
            { class: "panel" },
            h("header", { class: "section-head" }, h("h3", {}, "Sessions"), h("span", { class: "muted" }, "traces grouped by session id")),
            h("table", { class: "sessions", "aria-label": "sessions" }, h("thead", {}, h("tr", {}, ...["session", "traces", "last span"].map((t) => h("th", {}, t)))), this.sessionsBody),
          ),
        ),
      ),
    );
    fill(this.chartBox, h("p", { class: "muted" }, "Pick a rule to see its scores over time."));
    document.addEventListener("visibilitychange", () => this.setVisible(this.shown)); // the feed, and a backfill followed
  }

  /** Called by the shell when the screen is shown or left: polling runs only while shown. */
  setVisible(shown: boolean): void {
    this.shown = shown;
    this.schedule();
    if (shown) this.backfill?.resume();
  }

  async refresh(): Promise<void> {
    await this.loadRules(); // first: the feed and the chart name rules
    await Promise.all([this.loadFeed(), this.loadChart(), this.loadSessions()]);
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
    await Promise.all([this.loadFeed(), this.loadChart(), this.loadSessions(), this.openTrace ? this.loadTrace(this.openTrace, false) : null, this.openSession ? this.loadSession(this.openSession, false) : null]);
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
      await this.form.setEvaluators(evaluators.data);
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
                h("button", { class: "small", "aria-label": `backfill ${name}`, onclick: () => this.openBackfill(r) }, "Backfill"),
                h("button", { class: "small danger", "aria-label": `delete ${name}`, onclick: () => { this.confirming = r.id; this.renderRules(); } }, "Delete"),
              ];
        return h(
          "tr",
          { class: r.id === this.selectedRule ? "selected" : "", tabindex: 0, "data-rule": r.id, "data-enabled": String(r.enabled), title: "show this rule's chart", onclick: (e: Event) => (e.target as HTMLElement).closest("button") || this.selectRule(r.id), onkeydown: (e: KeyboardEvent) => e.key === "Enter" && e.target === e.currentTarget && this.selectRule(r.id) },
          h("td", {}, h("b", {}, name)),
          h("td", {}, this.evaluatorName(r.evaluator_id), h("span", { class: "muted" }, r.revision !== null ? ` r${r.revision}` : " latest")),
          h("td", { class: "num" }, `${num(r.sampling_rate * 100, 1)} %`),
          h("td", { class: "filter-summary" }, h("span", { class: "badge level", "data-level": r.target?.level ?? "trace" }, targetSummary(r.target)), " ", filterSummary(r.filter), r.mapping && (r.mapping.inputs || r.mapping.outputs) ? h("span", { class: "badge", title: JSON.stringify(r.mapping) }, "mapped") : null),
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

  private openBackfill(rule: OnlineRule): void {
    this.backfill?.stop();
    const close = (): void => {
      this.backfill?.stop();
      this.backfill = null;
      fill(this.backfillBox);
    };
    const ended = (): void => void Promise.all([this.loadFeed(), this.loadChart(), this.loadCounts()]);
    this.backfill = new BackfillPanel(rule, rule.name ?? rule.id, () => this.shown && !document.hidden, close, ended);
    fill(this.backfillBox, this.backfill.element);
    this.backfill.element.scrollIntoView({ block: "nearest" });
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
      if (this.backfill && this.backfillBox.querySelector(`[data-rule="${CSS.escape(rule.id)}"]`)) {
        this.backfill.stop();
        this.backfill = null;
        fill(this.backfillBox);
      }
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
      sinkBadges(score.sinks),
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

  private async loadSessions(): Promise<void> {
    try {
      const page = await api<Page<SessionSummary>>("GET", `/v1/sessions?limit=${SESSIONS_LIMIT}`);
      fill(this.sessionsBody, sessionRows(page.data, this.openSession, (id) => void this.loadSession(id, true)));
    } catch (exc) {
      fill(this.sessionsBody, h("tr", {}, h("td", { colspan: 3, class: "error-text" }, describe(exc))));
    }
  }

  /** One session in the trace box (instead of a trace). */
  private async loadSession(sessionId: string, opening: boolean): Promise<void> {
    if (opening) {
      this.openSession = sessionId;
      this.openTrace = null;
    }
    try {
      const detail = await api<SessionDetail>("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`);
      if (this.openSession !== sessionId) return;
      const seen = JSON.stringify(detail);
      if (opening || seen !== this.traceSeen) fill(this.traceBox, sessionView(detail, (id) => this.ruleName(id), (traceId) => void this.loadTrace(traceId, true), () => this.closeTrace()));
      this.traceSeen = seen;
      for (const row of this.sessionsBody.querySelectorAll<HTMLElement>("tr[data-session]")) row.classList.toggle("selected", row.dataset.session === sessionId);
      if (opening) this.traceBox.scrollIntoView({ block: "nearest" });
    } catch (exc) {
      if (opening) fill(this.traceBox, h("div", { class: "error-box", role: "alert" }, describe(exc)));
    }
  }

  private async loadTrace(traceId: string, opening: boolean): Promise<void> {
    if (opening) {
      this.openTrace = traceId;
      this.openSession = null;
    }
    try {
      const detail = await api<TraceDetail>("GET", `/v1/traces/${encodeURIComponent(traceId)}`);
      if (this.openTrace !== traceId) return;
      const seen = JSON.stringify(detail);
      if (opening || seen !== this.traceSeen) fill(this.traceBox, traceView(detail, (id) => this.ruleName(id), () => this.closeTrace(), (sessionId) => void this.loadSession(sessionId, true), sessionKeys(this.rules))); // unchanged: keep what is unfolded
      this.traceSeen = seen;
      for (const row of this.feedBody.querySelectorAll<HTMLElement>("tr[data-trace]")) row.classList.toggle("selected", row.dataset.trace === traceId);
      if (opening) this.traceBox.scrollIntoView({ block: "nearest" });
    } catch (exc) {
      if (opening) fill(this.traceBox, h("div", { class: "error-box", role: "alert" }, describe(exc)));
    }
  }

  private closeTrace(): void {
    this.openTrace = null;
    this.openSession = null;
    fill(this.traceBox);
    for (const row of [...this.feedBody.querySelectorAll<HTMLElement>("tr.selected"), ...this.sessionsBody.querySelectorAll<HTMLElement>("tr.selected")]) row.classList.remove("selected");
  }
}
