// A job's results: paged in input order from the service, or — once a filter (status, passed, label)
// or a sort by score is chosen — every row read (pages of 1000, up to MAX_ROWS) and filtered here.
// Label and reason are columns of their own, as in the CSV export.

import { api, describe } from "./api";
import { brief, fill, h, num, option } from "./dom";
import { generationCell } from "./jobtarget";
import { replayCell } from "./reproduce";
import { statusBadge } from "./results";
import { sinkBadges } from "./sinks";
import type { Job, JobResultItem, RowPage } from "./types";

const PAGE = 50;
const FETCH = 1000;
const MAX_ROWS = 20_000; // read for filtering at most; beyond, the view says it filtered the first ones

type Sort = "index" | "score-asc" | "score-desc";

export class JobResults {
  readonly element = h("div", { class: "job-results" });
  private job: Job | null = null;
  private offset = 0;
  private all: JobResultItem[] | null = null; // every row read, while a filter or sort is on
  private total = 0;
  private readonly statusSelect = h("select", { "aria-label": "filter by status", onchange: () => this.changed() }, option("", "any status"), ["ok", "error", "invalid_result", "timeout", "memory_limit", "output_limit", "sandbox_error"].map((s) => option(s, s)));
  private readonly passedSelect = h("select", { "aria-label": "filter by passed", onchange: () => this.changed() }, option("", "passed or not"), option("true", "✓ passed"), option("false", "✗ failed"), option("none", "no verdict"));
  private readonly labelSelect = h("select", { "aria-label": "filter by label", onchange: () => this.changed() }, option("", "any label"));
  private readonly sortSelect = h("select", { "aria-label": "sort results", onchange: () => this.changed() }, option("index", "input order"), option("score-asc", "score ↑ (lowest first)"), option("score-desc", "score ↓ (highest first)"));
  private readonly body = h("div", {});

  /** Show ``job``'s results (from the first row, filters kept when it is the same job). */
  show(job: Job): void {
    const same = this.job?.id === job.id;
    this.job = job;
    if (!same) {
      this.offset = 0;
      this.all = null;
      // never the previous job's rows under this job's header (a Replay clicked there would be that job's)
      this.element.removeAttribute("data-results-of");
      fill(this.body, h("p", { class: "muted" }, "loading results…"));
    }
    const labels = Object.keys(job.aggregate?.labels ?? {}).sort();
    const chosen = this.labelSelect.value;
    fill(this.labelSelect, option("", "any label"), labels.map((l) => option(l, l, l === chosen)), option("(none)", "(no label)", chosen === "(none)"));
    void this.load(!same || job.status === "queued" || job.status === "running");
  }

  private filtering(): boolean {
    return Boolean(this.statusSelect.value || this.passedSelect.value || this.labelSelect.value || this.sortSelect.value !== "index");
  }

  private changed(): void {
    this.offset = 0;
    void this.load(false);
  }

  private keep(item: JobResultItem): boolean {
    const r = item.result;
    const status = this.statusSelect.value;
    const passed = this.passedSelect.value;
    const label = this.labelSelect.value;
    if (status && r.status !== status) return false;
    if (passed === "none" ? r.passed !== null : passed && String(r.passed) !== passed) return false;
    if (label === "(none)" ? Boolean(r.label) : label && r.label !== label) return false;
    return true;
  }

  /** Every row (at most MAX_ROWS), read again when ``fresh`` (a running job's rows grow). */
  private async everyRow(job: Job, fresh: boolean): Promise<JobResultItem[]> {
    if (this.all && !fresh) return this.all;
    const rows: JobResultItem[] = [];
    let offset: number | null = 0;
    while (offset !== null && rows.length < MAX_ROWS) {
      const page: RowPage<JobResultItem> = await api<RowPage<JobResultItem>>("GET", `/v1/jobs/${encodeURIComponent(job.id)}/results?offset=${offset}&limit=${FETCH}`);
      rows.push(...page.data);
      this.total = page.total;
      offset = page.next_offset;
    }
    this.all = rows;
    return rows;
  }

  private async load(fresh: boolean): Promise<void> {
    const job = this.job;
    if (!job) return;
    try {
      let items: JobResultItem[];
      let label: string;
      let next: number | null;
      if (this.filtering()) {
        const every = await this.everyRow(job, fresh);
        let kept = every.filter((item) => this.keep(item));
        const sort = this.sortSelect.value as Sort;
        if (sort !== "index") {
          const sign = sort === "score-asc" ? 1 : -1;
          kept = [...kept].sort((a, b) => {
            const [x, y] = [a.result.score, b.result.score];
            if (x === null || y === null) return x === y ? a.index - b.index : x === null ? 1 : -1; // no score: last
            return sign * (x - y) || a.index - b.index;
          });
        }
        items = kept.slice(this.offset, this.offset + PAGE);
        next = this.offset + PAGE < kept.length ? this.offset + PAGE : null;
        const of = every.length < this.total ? ` (filtered from the first ${every.length} of ${this.total} rows)` : ` of ${every.length} rows`;
        label = kept.length ? `${this.offset + 1}–${this.offset + items.length} of ${kept.length} matching${of}` : `no row matches${of}`;
      } else {
        this.all = null;
        const page = await api<RowPage<JobResultItem>>("GET", `/v1/jobs/${encodeURIComponent(job.id)}/results?offset=${this.offset}&limit=${PAGE}`);
        items = page.data;
        next = page.next_offset;
        const last = items.length ? items[items.length - 1].index + 1 : this.offset;
        label = items.length ? `rows ${items[0].index + 1}–${last} of ${page.total}` : `no results (of ${page.total} rows)`;
      }
      if (this.job?.id !== job.id) return; // another job was opened meanwhile
      this.render(job, items, label, next);
    } catch (exc) {
      fill(this.body, h("div", { class: "error-box" }, describe(exc)));
      this.frame();
    }
  }

  private frame(): void {
    if (this.element.firstChild) return;
    fill(
      this.element,
      h(
        "section",
        { class: "panel" },
        h("h3", {}, "Results"),
        h("div", { class: "toolbar result-filters" }, "show ", this.statusSelect, this.passedSelect, this.labelSelect, " sort by ", this.sortSelect),
        this.body,
      ),
    );
  }

  private render(job: Job, items: JobResultItem[], label: string, next: number | null): void {
    this.frame();
    this.element.setAttribute("data-results-of", job.id); // whose rows these are
    const generated = Boolean(job.target);
    const sent = Boolean(job.sinks?.length);
    const pager = h(
      "div",
      { class: "toolbar pager" },
      h("button", { disabled: this.offset === 0, onclick: () => { this.offset = Math.max(0, this.offset - PAGE); void this.load(false); } }, "← Previous"),
      h("span", { class: "page-label" }, label),
      h("button", { disabled: next === null, onclick: () => { this.offset = next ?? this.offset; void this.load(false); } }, "Next →"),
    );
    const headings = ["#", "status", "score", "passed", "label", ...(generated ? ["generation"] : []), "outputs", "reason / error", ...(sent ? ["sinks"] : []), "row", "replay"];
    fill(
      this.body,
      pager,
      h(
        "div",
        { class: "table-scroll" }, // a wide table scrolls in its own box: the page never grows past the window
        h(
        "table",
        { class: "results job-results-table" },
        h("thead", {}, h("tr", {}, headings.map((t) => h("th", {}, t)))),
        h(
          "tbody",
          {},
          items.map(({ index, row, result, generation, sinks }) =>
            h(
              "tr",
              { class: `status-${result.status}`, "data-index": String(index) },
              h("td", { class: "num" }, String(index + 1)),
              h("td", {}, statusBadge(result.status)),
              h("td", { class: "num score" }, num(result.score)),
              h("td", {}, result.passed === null ? "—" : result.passed ? h("span", { class: "pass" }, "✓") : h("span", { class: "fail" }, "✗")),
              h("td", { class: "label-cell" }, result.label ? h("span", { class: "badge label" }, result.label) : "—"),
              generated ? generationCell(generation) : null,
              h("td", { class: "mono" }, Object.entries(result.outputs).map(([k, v]) => `${k}=${num(v)}`).join(" ") || "—"),
              h("td", { class: "reason-cell" }, result.error ? h("span", { class: "error-text" }, `${result.error.type}: ${brief(result.error.message, 120)}${result.error.line ? ` (line ${result.error.line})` : ""}`) : result.reason ?? "—"),
              sent ? h("td", { class: "sinks-cell" }, sinkBadges(sinks) ?? "—") : null,
              h("td", { class: "mono muted", title: JSON.stringify(row) }, brief(row, 60)),
              replayCell(job.id, index),
            ),
          ),
        ),
        ),
      ),
    );
  }
}
