// Datasets and jobs: upload (drag and drop), map fields from a preview, start, follow, cancel,
// the aggregate with its histogram, the results paged, NDJSON/CSV downloads; optionally a model
// target that generates each row's outputs first (jobtarget.ts), its usage and each row's generation.

import { api, describe, download } from "./api";
import { brief, fill, h, named, num, option, toast, when } from "./dom";
import { JobResults } from "./jobresults";
import { lockView } from "./reproduce";
import { sinkSummary } from "./sinks";
import { stopView, TargetForm, TargetFormError, usageView } from "./jobtarget";
import { aggregateView, statusBadge } from "./results";
import type { Dataset, Evaluator, FieldMapping, Job, Page, RowPage } from "./types";

type Target = "outputs" | "trace" | "app_params" | "inputs";
const TARGETS: Target[] = ["outputs", "trace", "app_params", "inputs"];
const POLL_MS = 500;
const LIVE_RESULTS_EVERY = 4; // polls: a model-target job's results page is read again while it runs
const LIVE_LIST_EVERY = 4; // polls: "Recent jobs" is read again while a job runs

/** Dotted paths into the object values of ``column`` in ``rows`` (``response.text``), two levels deep. */
export function nestedPaths(rows: Record<string, unknown>[], column: string): string[] {
  const found = new Set<string>();
  const walk = (value: unknown, path: string, depth: number) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return;
    for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
      const next = `${path}.${key}`;
      found.add(next);
      if (depth < 2) walk(inner, next, depth + 1);
    }
  };
  for (const row of rows) walk(row[column], column, 1);
  return [...found].slice(0, 24);
}

export class JobsScreen {
  readonly element: HTMLElement;
  private dataset: Dataset | null = null;
  private mapping: { outputs: string | null; trace: string | null; app_params: string | null; inputs: string[] } = { outputs: null, trace: null, app_params: null, inputs: [] };
  private target: Target = "outputs";
  private job: Job | null = null;
  private poll: number | undefined;
  private ticks = 0;
  private readonly results = new JobResults();
  private readonly uploadName = h("input", { type: "text", placeholder: "name (default: the file's)", "aria-label": "dataset name", maxlength: 200 });

  private readonly fileInput = h("input", { type: "file", accept: ".jsonl,.ndjson,.csv,.json,application/json,text/csv", class: "visually-hidden", id: "dataset-file", onchange: () => void this.uploadFile(this.fileInput.files?.[0]) });
  private readonly drop = h(
    "div",
    { class: "dropzone", tabindex: 0, role: "button", "aria-label": "upload a dataset", onclick: () => this.fileInput.click(), onkeydown: (e: KeyboardEvent) => (e.key === "Enter" || e.key === " ") && this.fileInput.click() },
    h("strong", {}, "Drop a JSONL, CSV or JSON file here"),
    h("span", { class: "muted" }, " or click to choose one"),
  );
  private readonly datasetSelect = h("select", { "aria-label": "dataset", onchange: () => void this.pickDataset(this.datasetSelect.value) });
  private readonly preview = h("div", { class: "preview" });
  private readonly mappingBox = h("div", { class: "mapping" });
  private readonly evaluatorSelect = h("select", { "aria-label": "evaluator for the job", onchange: () => void this.loadRevisions() });
  private readonly revisionSelect = h("select", { "aria-label": "revision for the job" });
  private readonly model = new TargetForm(() => this.renderMapping());
  private readonly startButton = h("button", { class: "primary", onclick: () => void this.start() }, "▶ Start job");
  private readonly jobBox = h("div", { class: "job" });
  private readonly jobsBody = h("tbody");

  constructor() {
    this.drop.addEventListener("dragover", (e) => {
      e.preventDefault();
      this.drop.classList.add("over");
    });
    this.drop.addEventListener("dragleave", () => this.drop.classList.remove("over"));
    this.drop.addEventListener("drop", (e) => {
      e.preventDefault();
      this.drop.classList.remove("over");
      void this.uploadFile(e.dataTransfer?.files?.[0]);
    });
    this.element = h(
      "section",
      { class: "screen jobs", id: "screen-jobs" },
      h(
        "div",
        { class: "split" },
        h(
          "div",
          {},
          h("section", { class: "panel" }, h("h3", {}, "1 · Dataset"), this.drop, this.fileInput, h("label", {}, "name the upload ", this.uploadName), h("label", {}, "or an uploaded one ", this.datasetSelect), this.preview),
          h("section", { class: "panel" }, h("h3", {}, "2 · Map fields"), this.mappingBox),
          h("section", { class: "panel model-target" }, h("h3", {}, "3 · Generate with a model (optional)"), this.model.element),
          h("section", { class: "panel" }, h("h3", {}, "4 · Run"), h("div", { class: "toolbar" }, h("label", {}, "evaluator ", this.evaluatorSelect), h("label", {}, "revision ", this.revisionSelect), this.startButton)),
        ),
        h("div", {}, this.jobBox, h("section", { class: "panel" }, h("header", { class: "section-head" }, h("h3", {}, "Recent jobs"), h("button", { class: "small", onclick: () => void this.refresh() }, "Refresh")), h("table", { class: "jobs-list" }, h("thead", {}, h("tr", {}, ...["status", "progress", "evaluator", "created", "errors"].map((t) => h("th", {}, t)))), this.jobsBody))),
      ),
    );
    this.renderMapping();
  }

  async refresh(): Promise<void> {
    try {
      void this.model.refreshSecrets();
      const [datasets, evaluators] = await Promise.all([
        api<Page<Dataset>>("GET", "/v1/datasets?limit=100"),
        api<Page<Evaluator>>("GET", "/v1/evaluators?limit=200"),
      ]);
      fill(this.datasetSelect, option("", "—"), datasets.data.map((d) => option(d.id, `${named(d, datasets.data)} (${d.row_count} rows, ${when(d.created_at)})`, d.id === this.dataset?.id)));
      const chosen = this.evaluatorSelect.value;
      fill(this.evaluatorSelect, evaluators.data.map((e) => option(e.id, `${named(e, evaluators.data)} (r${e.revision})`, e.id === chosen)));
      this.names = new Map(evaluators.data.map((e) => [e.id, named(e, evaluators.data)]));
      await this.loadRevisions();
      await this.refreshJobs();
    } catch (exc) {
      fill(this.jobsBody, h("tr", {}, h("td", { colspan: 5, class: "error-text" }, describe(exc))));
    }
  }

  private names = new Map<string, string>();

  /** "Recent jobs" (read again every few polls while a job runs, so its row moves too). */
  private async refreshJobs(): Promise<void> {
    const names = this.names;
    try {
      const jobs = await api<Page<Job>>("GET", "/v1/jobs?limit=20");
      fill(
        this.jobsBody,
        jobs.data.map((j) =>
          h(
            "tr",
            { tabindex: 0, "data-job-row": j.id, class: j.id === this.job?.id ? "selected" : "", onclick: () => this.follow(j), onkeydown: (e: KeyboardEvent) => e.key === "Enter" && this.follow(j) },
            h("td", {}, statusBadge(j.status)),
            h("td", { class: "num" }, `${j.progress.done} / ${j.progress.total}`),
            h("td", {}, `${names.get(j.evaluator_id) ?? j.evaluator_id} r${j.revision}`, j.target ? h("span", { class: "badge", title: `outputs generated by ${j.target.model}` }, j.target.model) : null),
            h("td", { class: "muted" }, when(j.created_at)),
            h("td", { class: j.progress.failed ? "num fail" : "num muted", "data-errors": j.progress.failed, title: "rows that ended in an error (a status other than ok)" }, String(j.progress.failed)),
          ),
        ),
      );
      if (!jobs.data.length) fill(this.jobsBody, h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No jobs yet.")));
    } catch (exc) {
      fill(this.jobsBody, h("tr", {}, h("td", { colspan: 5, class: "error-text" }, describe(exc))));
    }
  }

  private async loadRevisions(): Promise<void> {
    const id = this.evaluatorSelect.value;
    if (!id) {
      fill(this.revisionSelect);
      return;
    }
    try {
      const revisions = (await api<Page<Evaluator>>("GET", `/v1/evaluators/${encodeURIComponent(id)}/revisions`)).data;
      fill(this.revisionSelect, option("", "latest", true), [...revisions].reverse().map((r) => option(String(r.revision), `revision ${r.revision} (${r.interface})`)));
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async uploadFile(file: File | undefined): Promise<void> {
    if (!file) return;
    const form = new FormData();
    form.append("file", file, file.name);
    if (this.uploadName.value.trim()) form.append("name", this.uploadName.value.trim());
    fill(this.preview, h("p", { class: "run-state busy" }, `Uploading ${file.name}…`));
    try {
      const dataset = await api<Dataset>("POST", "/v1/datasets", undefined, { raw: form });
      toast(`Uploaded ${dataset.name}: ${dataset.row_count} rows`);
      this.fileInput.value = "";
      this.uploadName.value = "";
      await this.refresh();
      await this.pickDataset(dataset.id);
    } catch (exc) {
      fill(this.preview, h("div", { class: "error-box", role: "alert" }, `${file.name}: ${describe(exc)}`));
    }
  }

  private async pickDataset(id: string): Promise<void> {
    if (!id) return;
    try {
      const [dataset, rows] = await Promise.all([
        api<Dataset>("GET", `/v1/datasets/${encodeURIComponent(id)}`),
        api<RowPage<{ index: number; row: Record<string, unknown> }>>("GET", `/v1/datasets/${encodeURIComponent(id)}/rows?limit=8`),
      ]);
      this.dataset = dataset;
      this.datasetSelect.value = id;
      this.mapping = { outputs: null, trace: null, app_params: null, inputs: [] };
      this.model.setColumns(dataset.columns);
      this.renderPreview(rows.data.map((r) => r.row), rows.total);
      this.renderMapping();
    } catch (exc) {
      fill(this.preview, h("div", { class: "error-box" }, describe(exc)));
    }
  }

  private renderPreview(rows: Record<string, unknown>[], total: number): void {
    const dataset = this.dataset;
    if (!dataset) return;
    const header = dataset.columns.map((col) => {
      const role = this.roleOf(col);
      return h(
        "th",
        { class: `pickable${role ? " mapped" : ""}`, "data-column": col },
        h("button", { class: "column", title: `map ${col} to ${this.target}`, onclick: () => this.pick(col) }, col, role ? h("span", { class: "badge role" }, `→ ${role}`) : null),
      );
    });
    const nested = dataset.columns.flatMap((col) => nestedPaths(rows, col));
    const chip = (path: string) => {
      const role = this.roleOf(path);
      return h("button", { class: `small column nested${role ? " mapped" : ""}`, "data-path": path, title: `map ${path} to ${this.target}`, onclick: () => this.pick(path) }, path, role ? h("span", { class: "badge role" }, `→ ${role}`) : null);
    };
    fill(
      this.preview,
      h("p", { class: "muted" }, `${dataset.name}: ${total} rows, ${dataset.format}. Click a column (or a field inside one) to map it to `, h("b", {}, this.target), "."),
      nested.length ? h("div", { class: "nested-fields", "aria-label": "fields inside columns" }, h("span", { class: "muted" }, "fields inside: "), nested.map(chip)) : null,
      h("div", { class: "scroll" }, h("table", { class: "preview-table" }, h("thead", {}, h("tr", {}, header)), h("tbody", {}, rows.map((row) => h("tr", {}, dataset.columns.map((c) => h("td", { title: brief(row[c], 400) }, brief(row[c] ?? "", 40)))))))),
    );
    this.previewRows = rows;
  }

  private previewRows: Record<string, unknown>[] = [];

  private roleOf(column: string): string | null {
    const roles = (["outputs", "trace", "app_params"] as const).filter((t) => this.mapping[t] === column);
    if (this.mapping.inputs.includes(column)) roles.push("inputs" as never);
    return roles.length ? roles.join(", ") : null;
  }

  private pick(column: string): void {
    if (this.target === "inputs") {
      const at = this.mapping.inputs.indexOf(column);
      if (at >= 0) this.mapping.inputs.splice(at, 1);
      else this.mapping.inputs.push(column);
    } else {
      this.mapping[this.target] = this.mapping[this.target] === column ? null : column;
    }
    this.renderPreview(this.previewRows, this.dataset?.row_count ?? 0);
    this.renderMapping();
  }

  private renderMapping(): void {
    const describeTarget = (t: Target): string => {
      if (t === "inputs") return this.mapping.inputs.length ? this.mapping.inputs.join(", ") : "the whole row (default)";
      const col = this.mapping[t];
      if (t === "outputs" && this.model.on) return `generated by the model${col ? ` (${col} is not used)` : ""}`;
      if (col) return col;
      return t === "outputs" ? "the outputs (or output) column (default)" : `the ${t} column (default)`;
    };
    fill(
      this.mappingBox,
      h("div", { class: "tabs small", role: "radiogroup", "aria-label": "map a clicked column to" }, TARGETS.map((t) => h("button", { class: "tab", role: "radio", "aria-checked": String(t === this.target), "data-target": t, onclick: () => { this.target = t; this.renderMapping(); this.renderPreview(this.previewRows, this.dataset?.row_count ?? 0); } }, t))),
      h("dl", { class: "mapping-summary" }, TARGETS.flatMap((t) => [h("dt", {}, t), h("dd", { "data-mapped": t }, describeTarget(t))])),
    );
  }

  private fieldMapping(): FieldMapping | null {
    const m: FieldMapping = {};
    if (this.mapping.outputs && !this.model.on) m.outputs = this.mapping.outputs;
    if (this.mapping.trace) m.trace = this.mapping.trace;
    if (this.mapping.app_params) m.app_params = this.mapping.app_params;
    if (this.mapping.inputs.length) m.inputs = [...this.mapping.inputs];
    return Object.keys(m).length ? m : null;
  }

  private async start(): Promise<void> {
    if (!this.dataset) {
      toast("Upload or pick a dataset first", "error");
      return;
    }
    if (!this.evaluatorSelect.value) {
      toast("Save an evaluator first (Editor screen)", "error");
      return;
    }
    const body: Record<string, unknown> = { evaluator_id: this.evaluatorSelect.value, dataset_id: this.dataset.id };
    if (this.revisionSelect.value) body.revision = Number(this.revisionSelect.value);
    const mapping = this.fieldMapping();
    if (mapping) body.field_mapping = mapping;
    if (this.model.on) {
      try {
        body.target = this.model.value();
      } catch (exc) {
        if (!(exc instanceof TargetFormError)) throw exc;
        fill(this.jobBox, h("div", { class: "error-box", role: "alert" }, `Model target — ${exc.message}`));
        return;
      }
    }
    try {
      const job = await api<Job>("POST", "/v1/jobs", body);
      this.follow(job);
      void this.refresh();
    } catch (exc) {
      fill(this.jobBox, h("div", { class: "error-box", role: "alert" }, describe(exc)));
    }
  }

  /** Show ``job`` and poll it until it ends. */
  follow(job: Job): void {
    window.clearTimeout(this.poll);
    this.job = job;
    this.renderJob(job);
    if (job.status === "queued" || job.status === "running") this.poll = window.setTimeout(() => void this.tick(), POLL_MS);
    else void this.loadResults();
  }

  private async tick(): Promise<void> {
    const current = this.job;
    if (!current) return;
    try {
      const job = await api<Job>("GET", `/v1/jobs/${encodeURIComponent(current.id)}`);
      if (this.job?.id !== job.id) return;
      this.job = job;
      this.renderJob(job);
      if (job.status === "queued" || job.status === "running") {
        this.poll = window.setTimeout(() => void this.tick(), POLL_MS);
        ++this.ticks;
        if (job.target && this.ticks % LIVE_RESULTS_EVERY === 0) void this.loadResults(); // generations as they come
        if (this.ticks % LIVE_LIST_EVERY === 0) void this.refreshJobs(); // its row in "Recent jobs" moves too
      } else {
        void this.loadResults();
        void this.refresh();
      }
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async cancel(): Promise<void> {
    const job = this.job;
    if (!job) return;
    try {
      const cancelled = await api<Job>("POST", `/v1/jobs/${encodeURIComponent(job.id)}/cancel`);
      this.follow(cancelled);
      void this.refresh();
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }


  private renderJob(job: Job): void {
    const { total, done, failed, cached } = job.progress;
    const fraction = total ? done / total : 0;
    const active = job.status === "queued" || job.status === "running";
    const eta = active && job.rows_per_s ? (total - done) / job.rows_per_s : null;
    fill(
      this.jobBox,
      h(
        "section",
        { class: "panel", "data-job": job.id, "data-status": job.status },
        h("header", { class: "section-head" }, h("h3", {}, "Job "), h("span", { class: "mono muted" }, job.id), statusBadge(job.status)),
        h("div", { class: "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total, "aria-valuenow": done, "aria-label": "job progress" }, h("span", { class: "progress-fill", style: `width: ${fraction * 100}%` }), failed ? h("span", { class: "progress-failed", style: `width: ${(total ? failed / total : 0) * 100}%` }) : null),
        h(
          "p",
          { class: "progress-text" },
          `${done} / ${total} rows`,
          ` · ${job.rows_per_s ? num(job.rows_per_s, 1) : "—"} rows/s`,
          eta !== null ? ` · ETA ${eta < 1 ? "<1" : num(eta, 0)} s` : "",
          " · ",
          h("span", { class: failed ? "fail" : "" }, `${failed} failed`),
          cached ? h("span", { class: "cached", title: "rows answered from the result cache (an earlier identical run)" }, ` · ${cached} from the cache`) : "",
        ),
        usageView(job, () => {
          if (job.target) this.model.load(job.target);
          this.model.element.scrollIntoView({ block: "center" });
        }),
        job.status === "stopped" ? stopView(job) : job.error ? h("div", { class: "error-box" }, `${job.error.type}: ${job.error.message}`) : null,
        sinkSummary(job),
        job.warnings.map((w) => h("p", { class: "warn" }, `⚠ ${w}`)),
        h(
          "div",
          { class: "toolbar" },
          active ? h("button", { class: "danger", onclick: () => void this.cancel() }, "Cancel job") : null,
          h("button", { onclick: () => void this.save("ndjson") }, "Download NDJSON"),
          h("button", { onclick: () => void this.save("csv") }, "Download CSV"),
        ),
        lockView(job.runtime_id),
        job.aggregate ? aggregateView(job.aggregate) : null,
      ),
      this.results.element,
    );
  }

  private async save(format: "ndjson" | "csv"): Promise<void> {
    const job = this.job;
    if (!job) return;
    try {
      await download(`/v1/jobs/${encodeURIComponent(job.id)}/results?format=${format}`, `${job.id}.${format}`);
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async loadResults(): Promise<void> {
    if (this.job) this.results.show(this.job);
  }
}
