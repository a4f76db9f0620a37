// The Review screen's New queue form: a source (an online rule or a job), what it selects (a score below or
// above, failed only, labels, statuses, or everything), a sample share and a limit. The service checks the
// body: its 422 is shown in the form, on the field it names.

import { api, ApiError, describe } from "./api";
import { fill, h, option } from "./dom";
import type { OnlineRule } from "./onlinetypes";
import type { QueueCreate, QueueSelect, ReviewQueue } from "./reviewtypes";
import type { Evaluator, Job, Page } from "./types";

const SELECTS: [string, string][] = [
  ["", "every answer"],
  ["score_below", "score below"],
  ["score_above", "score above"],
  ["failed", "failed only (passed = false)"],
  ["label_in", "labels (comma-separated)"],
  ["status_in", "statuses (comma-separated)"],
];

/** ``select``'s condition as words ("score < 0.5"). */
export function selectText(select: QueueSelect | null): string {
  if (!select) return "every answer";
  if (select.score_below !== undefined && select.score_below !== null) return `score < ${select.score_below}`;
  if (select.score_above !== undefined && select.score_above !== null) return `score > ${select.score_above}`;
  if (select.passed !== undefined && select.passed !== null) return select.passed ? "passed only" : "failed only";
  if (select.label_in) return `label in ${select.label_in.join(", ")}`;
  if (select.status_in) return `status in ${select.status_in.join(", ")}`;
  return "every answer";
}

const list = (text: string) => text.split(",").map((t) => t.trim()).filter(Boolean);

export class QueueForm {
  readonly element: HTMLElement;
  private readonly name = h("input", { type: "text", "aria-label": "queue name", placeholder: "low scores of March", required: true });
  private readonly kind = h("select", { "aria-label": "source kind", onchange: () => this.fillSources() }, option("job", "a job's results"), option("rule", "an online rule's scores"));
  private readonly source = h("select", { "aria-label": "source" });
  private readonly selectKind = h("select", { "aria-label": "select", onchange: () => this.showValue() }, SELECTS.map(([v, l]) => option(v, l)));
  private readonly selectValue = h("input", { type: "text", "aria-label": "select value", placeholder: "0.5" });
  private readonly sample = h("input", { type: "number", min: 0, max: 1, step: 0.05, value: "1", "aria-label": "sample" });
  private readonly limit = h("input", { type: "number", min: 1, step: 1, value: "100", "aria-label": "limit" });
  private readonly error = h("p", { class: "error-text", role: "alert" });
  private rules: OnlineRule[] = [];
  private jobs: Job[] = [];
  private names = new Map<string, string>();

  constructor(private readonly onCreated: (queue: ReviewQueue) => void) {
    this.element = h(
      "form",
      { class: "panel rule-form queue-form", "aria-label": "new review queue", novalidate: true, onsubmit: (e: Event) => { e.preventDefault(); void this.create(); } },
      h("header", { class: "section-head" }, h("h3", {}, "New queue")),
      h(
        "div",
        { class: "form-grid" },
        h("label", {}, "name", this.name),
        h("label", {}, "source", this.kind),
        h("label", {}, "rule or job", this.source),
        h("label", {}, "select", this.selectKind),
        h("label", { class: "select-value" }, "value", this.selectValue),
        h("label", {}, "sample (share 0–1)", this.sample),
        h("label", {}, "limit (items)", this.limit),
      ),
      this.error,
      h("div", { class: "toolbar" }, h("button", { class: "primary", type: "submit" }, "Create queue")),
    );
    this.showValue();
  }

  /** Read the workspace's rules, jobs and evaluator names for the source picker. */
  async refresh(): Promise<void> {
    try {
      const [rules, jobs, evaluators] = await Promise.all([
        api<Page<OnlineRule>>("GET", "/v1/online-rules?limit=200"),
        api<Page<Job>>("GET", "/v1/jobs?limit=100"),
        api<Page<Evaluator>>("GET", "/v1/evaluators?limit=200"),
      ]);
      this.rules = rules.data;
      this.jobs = jobs.data;
      this.names = new Map(evaluators.data.map((e) => [e.id, e.name]));
    } catch (exc) {
      this.error.textContent = describe(exc);
    }
    this.fillSources();
  }

  private fillSources(): void {
    const chosen = this.source.value;
    const evaluator = (id: string) => this.names.get(id) ?? id;
    const options =
      this.kind.value === "rule"
        ? this.rules.map((r) => option(r.id, `${r.name ?? r.id} · ${evaluator(r.evaluator_id)}`, r.id === chosen))
        : this.jobs.map((j) => option(j.id, `${j.id} · ${evaluator(j.evaluator_id)} r${j.revision} · ${j.status} · ${j.progress.total} rows`, j.id === chosen));
    fill(this.source, options.length ? options : option("", this.kind.value === "rule" ? "no rules yet" : "no jobs yet"));
  }

  private showValue(): void {
    const kind = this.selectKind.value;
    const label = this.selectValue.parentElement;
    if (label) label.style.display = kind === "" || kind === "failed" ? "none" : ""; // .form-grid label is flex: hidden alone would not hide it
    this.selectValue.placeholder = kind === "label_in" ? "wrong, off-topic" : kind === "status_in" ? "error, timeout" : "0.5";
  }

  /** The body the form describes; the service checks it (a number field left empty is sent as text it refuses). */
  private body(): QueueCreate {
    const body: QueueCreate = { name: this.name.value.trim(), source: this.kind.value === "rule" ? { rule_id: this.source.value } : { job_id: this.source.value } };
    const value = this.selectValue.value.trim();
    const number = (text: string): number => (text === "" || Number.isNaN(Number(text)) ? (text as unknown as number) : Number(text));
    const kind = this.selectKind.value;
    let select: QueueSelect | undefined;
    if (kind === "score_below") select = { score_below: number(value) };
    else if (kind === "score_above") select = { score_above: number(value) };
    else if (kind === "failed") select = { passed: false };
    else if (kind === "label_in") select = { label_in: list(value) };
    else if (kind === "status_in") select = { status_in: list(value) };
    if (select) body.select = select;
    body.sample = number(this.sample.value.trim());
    body.limit = number(this.limit.value.trim());
    return body;
  }

  private async create(): Promise<void> {
    this.error.textContent = "";
    try {
      const queue = await api<ReviewQueue>("POST", "/v1/review-queues", this.body());
      this.name.value = "";
      this.onCreated(queue);
    } catch (exc) {
      const field = exc instanceof ApiError && typeof exc.body.field === "string" ? ` (${exc.body.field})` : "";
      this.error.textContent = `${describe(exc)}${field}`;
    }
  }
}
