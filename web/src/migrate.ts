// The migrate screen: legacy 4-argument code → the diff → an equivalence run on the screen's own cases
// (with app_params: what a legacy evaluator may read; prefilled from the evaluator's last job or a
// dataset's rows) → saved as a new revision, or the rewrite opened in the editor.

import { ApiError, api, describe } from "./api";
import { CasesEditor } from "./cases";
import { fill, h, named, num, option, toast } from "./dom";
import { CodeEditor } from "./editor";
import { statusBadge, unifiedDiff } from "./results";
import type { BatchResponse, Case, Dataset, Evaluator, EvaluatorMigrateResponse, FieldMapping, Job, JobResultItem, Language, MigrateResponse, MigrationReads, Page, EvaluationResult, RowPage } from "./types";

export const LEGACY_EXAMPLE = `def evaluate(app_params, inputs, output, correct_answer):
    # the 4-argument interface: correct_answer is inputs["correct_answer"]
    if output.strip().lower() == correct_answer.lower():
        return 1.0
    return 0.0
`;

/** Cases a legacy evaluator meets: app_params set (the migrated code cannot read them: a legacy
 * evaluator that does answers differently, and the equivalence run says so). */
export const MIGRATE_CASES: Case[] = [
  { inputs: { correct_answer: "Paris" }, outputs: "Paris", app_params: { threshold: 0.5 } },
  { inputs: { correct_answer: "Paris" }, outputs: " paris ", app_params: { threshold: 0.9 } },
  { inputs: { correct_answer: "Paris" }, outputs: "Lyon", app_params: {} },
];
const SAMPLE = 10; // rows read to prefill the cases
const EXAMPLES = "example cases with app_params";

/** The app_params keys legacy code reads: ``app_params["k"]``, ``app_params.get("k")`` (Python) and
 * ``app_params.k`` / ``app_params?.k`` (JavaScript, TypeScript). */
export function appParamKeys(code: string): string[] {
  const keys = new Set<string>();
  for (const m of code.matchAll(/app_params\s*\[\s*["']([^"'\]]+)["']\s*\]/g)) keys.add(m[1]);
  for (const m of code.matchAll(/app_params\s*\.get\(\s*["']([^"']+)["']/g)) keys.add(m[1]);
  for (const m of code.matchAll(/app_params\s*\??\.\s*([A-Za-z_$][\w$]*)/g)) if (m[1] !== "get") keys.add(m[1]);
  return [...keys];
}

/** The example cases with a value for every app_params key ``code`` reads, so a legacy evaluator that
 * reads one (not only ``threshold``) meets it set, and the equivalence run shows the difference. */
export function migrateCases(code: string): Case[] {
  const keys = appParamKeys(code);
  return MIGRATE_CASES.map((c, i) =>
    i < 2 ? { ...c, app_params: { ...(c.app_params as Record<string, unknown>), ...Object.fromEntries(keys.map((k) => [k, i === 0 ? 0.5 : 0.9])) } } : c,
  );
}

/** A dotted path's value in ``row`` (``"response.text"``), as the job's field mapping reads it. */
function at(row: Record<string, unknown>, path: string): unknown {
  if (path in row) return row[path];
  let value: unknown = row;
  for (const part of path.split(".")) {
    if (value === null || typeof value !== "object" || !(part in (value as object))) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/** A dataset row as the case a job would call the evaluator with (jobs/datasets/mapping.py's rule). */
export function rowCase(row: Record<string, unknown>, mapping: FieldMapping | null | undefined): Case {
  const m = mapping ?? {};
  const inputs = m.inputs?.length ? Object.fromEntries(m.inputs.map((c) => [c, at(row, c)])) : row;
  const outputs = m.outputs ? at(row, m.outputs) : "outputs" in row ? row.outputs : row.output;
  const trace = m.trace ? at(row, m.trace) : row.trace;
  const appParams = m.app_params ? at(row, m.app_params) : row.app_params;
  return { inputs, outputs: outputs ?? null, trace: trace ?? null, app_params: appParams ?? null };
}

const ANSWER_NAMES = ["response", "answer", "completion", "generation", "prediction", "predicted", "output_text", "generated", "result", "reply", "text"];
const REFERENCE_NAMES = ["expected", "expected_output", "expected_answer", "reference", "ground_truth", "gold", "target", "label", "correct", "answer"];

/** The columns that look meant for ``wanted``: its spellings (a name containing it) first, then the usual names. */
function didYouMean(wanted: string, columns: string[], known: string[], exclude: string[] = []): string[] {
  const candidates = columns.filter((c) => !exclude.includes(c));
  const stem = wanted.replace(/s$/, "").toLowerCase();
  const close = candidates.filter((c) => c.toLowerCase().includes(stem) || stem.includes(c.toLowerCase()));
  return [...close, ...candidates.filter((c) => known.includes(c.toLowerCase()) && !close.includes(c))].slice(0, 5);
}

/** What the cases do not exercise of what the legacy code reads (migration/coverage.py's rule): ``nothing``
 * names a field null on every case (the run compares nothing), ``warnings`` the fields some cases lack. */
export function coverage(reads: MigrationReads | null | undefined, cases: Case[], key: string): { nothing: string | null; warnings: string[] } {
  const warnings: string[] = [];
  if (!cases.length) return { nothing: "there are no cases: nothing would be compared", warnings };
  if (!reads) return { nothing: null, warnings };
  const columns = [...new Set(cases.flatMap((c) => (c.inputs && typeof c.inputs === "object" && !Array.isArray(c.inputs) ? Object.keys(c.inputs as object) : [])))];
  const obj = (v: unknown) => (v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null);
  const fields: { name: string; legacy: string; value: (c: Case) => unknown; meant: string[]; hint: (m: string[]) => string }[] = [];
  if (reads.output) fields.push({ name: "outputs", legacy: "output", value: (c) => c.outputs, meant: didYouMean("outputs", columns, ANSWER_NAMES, [key]), hint: (m) => (m.length ? `Did you mean the column "${m[0]}" as outputs (the job's field_mapping {"outputs": "${m[0]}"})?` : "Give each case its outputs.") });
  if (reads.correct_answer) fields.push({ name: `inputs["${key}"]`, legacy: "correct_answer", value: (c) => obj(c.inputs)?.[key], meant: didYouMean(key, columns, REFERENCE_NAMES), hint: (m) => (m.length ? `Did you mean the correct_answer key "${m[0]}"?` : `Set the correct_answer key to the column holding the answer (now "${key}").`) });
  for (const name of reads.app_params) fields.push({ name: `app_params["${name}"]`, legacy: "app_params", value: (c) => obj(c.app_params)?.[name], meant: [], hint: () => `Give cases whose app_params has "${name}", or move the value into inputs or settings first.` });
  for (const f of fields) {
    const missing = cases.filter((c) => f.value(c) === null || f.value(c) === undefined).length;
    if (missing === cases.length) {
      const shown = columns.length ? columns.map((c) => `'${c}'`).join(", ") : "none";
      return { nothing: `Nothing compared: ${f.name} (the legacy code's ${f.legacy}) is null or missing on every one of the ${cases.length} case(s), so both versions see nothing there; the cases' columns: ${shown}. ${f.hint(f.meant)}`, warnings };
    }
    if (missing) warnings.push(`${f.name} (the legacy code's ${f.legacy}) is null or missing on ${missing} of ${cases.length} case(s): those do not exercise it`);
  }
  return { nothing: null, warnings };
}

/** Whether two results agree the way the service's differential run compares them. */
function agree(a: EvaluationResult, b: EvaluationResult): boolean {
  const close = (x: number | null, y: number | null) => (x === null || y === null ? x === y : Math.abs(x - y) <= 1e-9);
  const outputs = (r: EvaluationResult) => JSON.stringify(Object.entries(r.outputs).sort());
  return a.status === b.status && close(a.score, b.score) && a.passed === b.passed && outputs(a) === outputs(b) && a.error?.type === b.error?.type;
}

export class MigrateScreen {
  readonly element: HTMLElement;
  private readonly editor: CodeEditor;
  private language: Language = "python";
  private source: Evaluator | null = null;
  private migrated: MigrateResponse | null = null;
  private readonly languageSelect = h("select", { "aria-label": "legacy code language", onchange: () => { this.language = this.languageSelect.value as Language; this.editor.setLanguage(this.language); } }, option("python", "Python"), option("javascript", "JavaScript"), option("typescript", "TypeScript"));
  private readonly evaluatorSelect = h("select", { "aria-label": "stored evaluator", onchange: () => void this.pickEvaluator() });
  private readonly fileInput = h("input", { type: "file", accept: ".py,.js,.mjs,.cjs,.ts,.mts,.cts,text/*", class: "visually-hidden", id: "migrate-file", onchange: () => void this.openFile() });
  private readonly keyInput = h("input", { type: "text", value: "correct_answer", "aria-label": "correct answer key", size: 16 });
  private readonly sourceLabel = h("span", { class: "muted" }, "pasted code");
  private readonly outcome = h("div", { class: "migration" });
  private readonly equivalence = h("div", { class: "equivalence" });
  private readonly nameInput = h("input", { type: "text", placeholder: "name for the new evaluator", "aria-label": "new evaluator name" });
  private readonly cases = new CasesEditor(MIGRATE_CASES);
  private readonly datasetSelect = h("select", { "aria-label": "prefill cases from a dataset", onchange: () => void this.fromDataset() });
  private readonly casesSource = h("span", { class: "muted cases-source" }, EXAMPLES);
  private examplesShown: string | undefined; // the example cases as last set (fitExamples)

  constructor(
    dark: boolean,
    private readonly saved: (evaluator: Evaluator) => void,
    private readonly openInEditor: (definition: { language: Language; code: string; packages?: Record<string, string>; settings?: Evaluator["settings"]; name?: string }) => void,
  ) {
    const host = h("div", { class: "editor-host short" });
    this.element = h(
      "section",
      { class: "screen migrate", id: "screen-migrate" },
      h(
        "div",
        { class: "toolbar" },
        this.languageSelect,
        h("label", { class: "button", for: "migrate-file" }, "Open file…"),
        this.fileInput,
        h("label", {}, "or a stored evaluator ", this.evaluatorSelect),
        h("label", {}, "correct_answer key ", this.keyInput),
        this.sourceLabel,
        h("span", { class: "spacer" }),
        h("button", { class: "primary", onclick: () => void this.migrate() }, "Migrate ▶"),
      ),
      h("p", { class: "hint" }, "Paste a legacy evaluate(app_params, inputs, output, correct_answer) evaluator; Migrate shows the rewrite as a diff, the equivalence run compares both on the cases below (with app_params, which the rewrite cannot read), and Save stores the new code as a revision only when every case agrees."),
      host,
      h(
        "div",
        { class: "migrate-cases" },
        h("div", { class: "toolbar" }, h("b", {}, "Equivalence cases: "), this.casesSource, h("span", { class: "spacer" }), h("label", {}, "prefill from a dataset ", this.datasetSelect), h("button", { class: "small", onclick: () => { this.cases.setCases(migrateCases(this.editor.code)); this.casesSource.textContent = EXAMPLES; this.examplesShown = JSON.stringify(this.cases.cases()); } }, "Example cases")),
        this.cases.element,
      ),
      this.outcome,
      this.equivalence,
    );
    this.editor = new CodeEditor(host, { doc: LEGACY_EXAMPLE, language: "python", dark, label: "legacy evaluator code", onRun: () => void this.migrate() });
  }

  async refresh(): Promise<void> {
    try {
      const datasets = await api<Page<Dataset>>("GET", "/v1/datasets?limit=100");
      const chosen = this.datasetSelect.value;
      fill(this.datasetSelect, option("", "—"), datasets.data.map((d) => option(d.id, `${named(d, datasets.data)} (${d.row_count} rows)`, d.id === chosen)));
    } catch {
      fill(this.datasetSelect, option("", "—"));
    }
    try {
      const page = await api<Page<Evaluator>>("GET", "/v1/evaluators?limit=200");
      fill(this.evaluatorSelect, option("", "—"), page.data.map((e) => option(e.id, `${named(e, page.data)} (${e.interface}, r${e.revision})`, e.id === this.source?.id)));
    } catch {
      fill(this.evaluatorSelect, option("", "—"));
    }
  }

  /** Start from a stored evaluator (its latest revision). */
  load(evaluator: Evaluator): void {
    this.source = evaluator;
    this.language = evaluator.language;
    this.languageSelect.value = evaluator.language;
    this.editor.setLanguage(evaluator.language);
    this.editor.code = evaluator.code;
    this.keyInput.value = evaluator.settings.correct_answer_key ?? "correct_answer";
    this.sourceLabel.textContent = `from ${evaluator.name}, revision ${evaluator.revision}`;
    fill(this.outcome);
    fill(this.equivalence);
    void this.refresh();
    void this.fromRecentJob(evaluator);
  }

  /** The cases of the evaluator's last job (its first rows, mapped as that job mapped them). */
  private async fromRecentJob(evaluator: Evaluator): Promise<void> {
    try {
      const jobs = await api<Page<Job>>("GET", `/v1/jobs?evaluator_id=${encodeURIComponent(evaluator.id)}&limit=1`);
      const job = jobs.data[0];
      if (!job || this.source?.id !== evaluator.id) return;
      const page = await api<RowPage<JobResultItem>>("GET", `/v1/jobs/${encodeURIComponent(job.id)}/results?limit=${SAMPLE}`);
      if (!page.data.length || this.source?.id !== evaluator.id) return;
      this.cases.setCases(page.data.map((item) => rowCase(item.row, job.field_mapping)));
      this.casesSource.textContent = `${page.data.length} row(s) of ${evaluator.name}'s last job ${job.id}`;
    } catch {
      // no job to learn from: the cases shown stay
    }
  }

  /** The first rows of the chosen dataset as cases (its outputs / trace / app_params columns). */
  private async fromDataset(): Promise<void> {
    const id = this.datasetSelect.value;
    if (!id) return;
    try {
      const rows = await api<RowPage<{ index: number; row: Record<string, unknown> }>>("GET", `/v1/datasets/${encodeURIComponent(id)}/rows?limit=${SAMPLE}`);
      this.cases.setCases(rows.data.map((r) => rowCase(r.row, null)));
      const label = this.datasetSelect.selectedOptions[0]?.textContent ?? id;
      this.casesSource.textContent = `${rows.data.length} row(s) of dataset ${label}`;
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async pickEvaluator(): Promise<void> {
    const id = this.evaluatorSelect.value;
    if (!id) {
      this.source = null;
      this.sourceLabel.textContent = "pasted code";
      return;
    }
    try {
      this.load(await api<Evaluator>("GET", `/v1/evaluators/${encodeURIComponent(id)}`));
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async openFile(): Promise<void> {
    const file = this.fileInput.files?.[0];
    if (!file) return;
    const text = await file.text();
    const ext = file.name.split(".").pop() ?? "";
    const language: Language = ["ts", "mts", "cts"].includes(ext) ? "typescript" : ["js", "mjs", "cjs"].includes(ext) ? "javascript" : "python";
    this.source = null;
    this.evaluatorSelect.value = "";
    this.language = language;
    this.languageSelect.value = language;
    this.editor.setLanguage(language);
    this.editor.code = text;
    this.sourceLabel.textContent = `file ${file.name}`;
    this.fileInput.value = "";
  }

  private async migrate(): Promise<void> {
    this.migrated = null;
    fill(this.equivalence);
    this.editor.setProblems([]);
    try {
      const body = { language: this.language, code: this.editor.code, settings: { correct_answer_key: this.keyInput.value || "correct_answer" } };
      const answer = await api<MigrateResponse>("POST", "/v1/migrate", body);
      this.migrated = answer;
      this.fitExamples(body.code);
      this.showMigration(answer);
    } catch (exc) {
      if (exc instanceof ApiError && exc.line) this.editor.setProblems([{ type: exc.type, message: exc.message, line: exc.line, column: exc.column }]);
      fill(this.outcome, h("div", { class: "error-box", role: "alert" }, h("p", {}, describe(exc))));
    }
  }

  /** The example cases, while they are untouched (not rows the user chose or edited), get a value for
   * each app_params key ``code`` reads. */
  private fitExamples(code: string): void {
    if (this.casesSource.textContent !== EXAMPLES) return;
    try {
      const shown = JSON.stringify(this.cases.cases());
      this.examplesShown ??= JSON.stringify(new CasesEditor(MIGRATE_CASES).cases());
      if (shown !== this.examplesShown) return; // edited: the user's cases stay
      this.cases.setCases(migrateCases(code));
      this.examplesShown = JSON.stringify(this.cases.cases());
    } catch {
      // cases that do not parse are the user's, being edited: leave them
    }
  }

  private showMigration(answer: MigrateResponse): void {
    if (!answer.changed) {
      fill(this.outcome, h("p", { class: "ok-box" }, `Nothing to migrate: the code already uses the ${answer.interface_after} interface.`));
      return;
    }
    fill(
      this.outcome,
      h("p", {}, h("span", { class: "badge iface-legacy" }, answer.interface_before), " → ", h("span", { class: "badge iface-evaluate" }, answer.interface_after), h("span", { class: "muted" }, ` rules: ${answer.rules.join(", ")}`)),
      answer.notes.length ? h("ul", { class: "notes" }, answer.notes.map((n) => h("li", { class: "warn" }, n.line ? `line ${n.line}: ` : "", n.message))) : null,
      unifiedDiff(answer.diff),
      h(
        "div",
        { class: "toolbar" },
        h("button", { class: "primary", onclick: () => void this.compare() }, "Equivalence run on these cases"),
        h("button", { onclick: () => this.openMigrated(answer) }, "Open the migrated code in the editor"),
      ),
    );
  }

  /** The rewrite in the Editor, unsaved (its Save makes a new evaluator; the stored one is untouched). */
  private openMigrated(answer: MigrateResponse): void {
    const settings = { ...(this.source?.settings ?? {}) };
    delete settings.correct_answer_key; // the rewrite reads inputs[...] itself
    this.openInEditor({ language: this.language, code: answer.code, packages: this.source?.packages ?? {}, settings, name: this.source ? `${this.source.name} (migrated)` : "" });
  }

  /** Run the legacy and the migrated code on the same cases and show where they differ. */
  private async compare(): Promise<void> {
    const migrated = this.migrated;
    if (!migrated) return;
    let cases;
    try {
      cases = this.cases.cases();
    } catch (exc) {
      fill(this.equivalence, h("p", { class: "error-text" }, (exc as Error).message));
      return;
    }
    fill(this.equivalence, h("p", { class: "run-state busy" }, `Running both versions on ${cases.length} case(s)…`));
    const definition = (code: string) => ({
      language: this.language,
      code,
      packages: this.source?.packages ?? {},
      settings: { ...(this.source?.settings ?? {}), correct_answer_key: this.keyInput.value || "correct_answer" },
      cases,
    });
    try {
      const [before, after] = await Promise.all([
        api<BatchResponse>("POST", "/v1/evaluate", definition(this.editor.code)),
        api<BatchResponse>("POST", "/v1/evaluate", definition(migrated.code)),
      ]);
      const verdicts = before.results.map((b, i) => agree(b, after.results[i]));
      const differing = verdicts.filter((v) => !v).length;
      const cell = (r: EvaluationResult) => h("td", {}, statusBadge(r.status), ` ${num(r.score)}`, r.error ? h("span", { class: "error-text" }, ` ${r.error.type}`) : null);
      // a run that compared nothing is never "agree" (migration/coverage.py): a read field null on every case,
      // or every case an error on both versions
      const covered = coverage(migrated.reads, cases, this.keyInput.value || "correct_answer");
      const bothErrors = before.results.filter((b, i) => b.status !== "ok" && after.results[i].status !== "ok").length;
      let nothing = covered.nothing;
      if (!nothing && !differing && bothErrors === cases.length) {
        const first = before.results[0].error;
        nothing = `Nothing compared: every one of the ${cases.length} case(s) is an error on both versions${first ? ` (e.g. case 1: ${first.type}${first.line ? ` at line ${first.line}` : ""}: ${first.message})` : ""}. Fix the cases or the code so they run.`;
      }
      const warnings = [...covered.warnings, ...(bothErrors && bothErrors < cases.length ? [`${bothErrors} of ${cases.length} case(s) are errors on both versions: only their error type was compared`] : [])];
      const verdict = nothing ?? (differing ? `${differing} of ${cases.length} case(s) differ: not safe to save` : `All ${cases.length} case(s) agree`);
      fill(
        this.equivalence,
        h("p", { class: differing || nothing ? "bad-box" : "ok-box", role: "status" }, verdict),
        warnings.length ? h("ul", { class: "notes" }, warnings.map((w) => h("li", { class: "warn" }, `⚠ ${w}`))) : null,
        h(
          "table",
          { class: "equivalence-table" },
          h("thead", {}, h("tr", {}, ...["#", "legacy", "migrated", ""].map((t) => h("th", {}, t)))),
          h("tbody", {}, before.results.map((b, i) => h("tr", { class: verdicts[i] ? "agree" : "differ" }, h("td", { class: "num" }, String(i + 1)), cell(b), cell(after.results[i]), h("td", {}, verdicts[i] ? h("span", { class: "pass" }, "✓ agree") : h("span", { class: "fail" }, "✗ differ"))))),
        ),
        differing || nothing ? null : this.saveControls(),
      );
    } catch (exc) {
      fill(this.equivalence, h("div", { class: "error-box", role: "alert" }, describe(exc)));
    }
  }

  private saveControls(): HTMLElement {
    const target = this.source ? `as revision ${this.source.revision + 1} of ${this.source.name}` : "as a new evaluator (revision 1: the legacy code, revision 2: the migrated code)";
    return h(
      "div",
      { class: "toolbar" },
      this.source ? null : this.nameInput,
      h("button", { class: "primary", onclick: () => void this.save() }, `Save ${target}`),
    );
  }

  /** The service runs both versions again on the cases and stores the revision only if every one agrees. */
  private async save(): Promise<void> {
    let cases;
    try {
      cases = this.cases.cases();
      let source = this.source;
      if (!source) {
        const name = this.nameInput.value.trim();
        if (!name) {
          this.nameInput.focus();
          toast("Name the evaluator first", "error");
          return;
        }
        source = await api<Evaluator>("POST", "/v1/evaluators", { name, language: this.language, code: this.editor.code, settings: { correct_answer_key: this.keyInput.value || "correct_answer" } });
      }
      const answer = await api<EvaluatorMigrateResponse>("POST", `/v1/evaluators/${encodeURIComponent(source.id)}/migrate`, { cases });
      if (answer.saved && answer.evaluator) {
        toast(`Saved ${answer.evaluator.name} revision ${answer.evaluator.revision} (${answer.compared} case(s) agreed)`);
        this.equivalence.append(h("p", { class: "ok-box", role: "status" }, `Saved as revision ${answer.evaluator.revision} of ${answer.evaluator.name}.`));
        this.load(answer.evaluator);
        this.saved(answer.evaluator);
      } else {
        toast("Nothing saved: the code needed no migration", "error");
      }
    } catch (exc) {
      const rows = exc instanceof ApiError && Array.isArray(exc.body.rows) ? (exc.body.rows as { index: number; fields: string[] }[]) : [];
      this.equivalence.append(h("div", { class: "error-box", role: "alert" }, h("p", {}, describe(exc)), rows.length ? h("ul", {}, rows.map((r) => h("li", {}, `case ${r.index + 1}: ${r.fields.join(", ")} differ`))) : null));
    }
  }
}
