// The editor screen: code, live inspection (interface, errors, capabilities, pins), cases, Run, Save.

import { ApiError, api, describe } from "./api";
import { CasesEditor } from "./cases";
import { fill, h, num, option, toast } from "./dom";
import { CodeEditor } from "./editor";
import { type FailedBuild, PinsEditor } from "./pins";
import { aggregateView, resultsTable } from "./results";
import { BuildWatcher, verdict } from "./runview";
import { SIGNATURES, TEMPLATES, capabilitiesView, runErrorBox } from "./editorviews";
import type {
  BatchResponse,
  Capabilities,
  Evaluator,
  Inspection,
  Language,
  Problem,
  Settings,
} from "./types";

export interface Bound {
  id: string;
  name: string;
  revision: number;
}

export class Playground {
  readonly element: HTMLElement;
  readonly cases = new CasesEditor();
  private editor!: CodeEditor;
  private language: Language = "python";
  private readonly pins = new PinsEditor(() => this.language, (delay) => this.changed(delay));
  private bound: Bound | null = null;
  private inspection: Inspection | null = null;
  private inspectSeq = 0;
  private inspectTimer: number | undefined;
  private running = false;
  private failedRuntime: FailedBuild | null = null; // the last run's build failed
  onSaved: () => void = () => undefined;

  private readonly languageSelect = h(
    "select",
    { "aria-label": "language", onchange: () => this.changeLanguage() },
    option("python", "Python"),
    option("javascript", "JavaScript"),
    option("typescript", "TypeScript"),
  );
  private readonly nameInput = h("input", { type: "text", placeholder: "evaluator name", "aria-label": "evaluator name", maxlength: 200 });
  private readonly boundLabel = h("span", { class: "bound muted" }, "new evaluator (not saved)");
  private readonly runButton = h("button", { class: "primary", title: "Run every case (Ctrl+Enter / ⌘+Enter)", onclick: () => void this.run() }, "▶ Run");
  private readonly saveButton = h("button", { onclick: () => void this.save() }, "Save");
  private readonly interfaceLine = h("div", { class: "interface", role: "status", "aria-live": "polite" });
  private readonly problems = h("ul", { class: "problems", "aria-label": "definition errors" });
  private readonly capabilitiesBox = h("div", { class: "capabilities" });
  private readonly warningsBox = h("div", { class: "warnings" });
  private readonly timeoutInput = h("input", { type: "number", min: 0.1, max: 120, step: 0.1, value: "10", "aria-label": "timeout (s)", oninput: () => this.changed() });
  private readonly thresholdInput = h("input", { type: "number", step: 0.05, placeholder: "none", "aria-label": "threshold", oninput: () => this.changed() });
  private readonly policySelect = h("select", { "aria-label": "policy", onchange: () => this.changed() }, option("standard", "standard"), option("restricted", "restricted (Python)"));
  private readonly runState = h("p", { class: "run-state", role: "status", "aria-live": "polite" });
  private readonly resultsBox = h("div", { class: "results-box" });
  private readonly languageOffer = h("div", { class: "language-offer", role: "status", hidden: true });
  private readonly runSection = h("section", { class: "run", id: "run-outcome" }, h("header", { class: "section-head" }, h("h3", {}, "Results"), this.runState), this.resultsBox);

  constructor(dark: boolean) {
    const host = h("div", { class: "editor-host" });
    this.element = h(
      "section",
      { class: "screen playground", id: "screen-editor" },
      h(
        "div",
        { class: "toolbar" },
        this.languageSelect,
        this.nameInput,
        this.boundLabel,
        h("span", { class: "spacer" }),
        h("button", { onclick: () => this.reset(), title: "Start a new evaluator from the template" }, "New"),
        this.saveButton,
        this.runButton,
      ),
      this.languageOffer,
      h(
        "div",
        { class: "workbench" },
        h("div", { class: "code-col" }, host, this.interfaceLine, this.problems),
        h(
          "aside",
          { class: "side" },
          this.pins.element,
          h(
            "section",
            { class: "panel settings" },
            h("h3", {}, "Settings"),
            h("label", {}, "timeout (s) ", this.timeoutInput),
            h("label", {}, "threshold ", this.thresholdInput),
            h("label", {}, "policy ", this.policySelect),
          ),
          h("section", { class: "panel" }, h("h3", {}, "Capability report"), this.capabilitiesBox),
          this.warningsBox,
        ),
      ),
      this.cases.element,
      this.runSection,
    );
    this.editor = new CodeEditor(host, {
      doc: TEMPLATES.python,
      language: "python",
      dark,
      label: "evaluator code",
      onChange: () => {
        this.stale();
        this.schedule();
      },
      onRun: () => void this.run(),
    });
    this.schedule(0);
  }

  /** Ctrl/Cmd+Enter anywhere on the screen runs. */
  handleKey(event: KeyboardEvent): void {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !event.defaultPrevented) {
      event.preventDefault();
      void this.run();
    }
  }

  get code(): string {
    return this.editor.code;
  }

  get currentLanguage(): Language {
    return this.language;
  }

  /** Load a stored evaluator's revision into the editor (saving then adds a revision to it). */
  open(evaluator: Evaluator): void {
    this.hideOffer();
    this.bound = { id: evaluator.id, name: evaluator.name, revision: evaluator.revision };
    this.nameInput.value = evaluator.name;
    this.setLanguage(evaluator.language);
    this.editor.code = evaluator.code;
    this.pins.set(evaluator.packages);
    this.timeoutInput.value = String(evaluator.settings.timeout_s ?? 10);
    this.thresholdInput.value = evaluator.settings.threshold == null ? "" : String(evaluator.settings.threshold);
    this.policySelect.value = evaluator.settings.policy ?? "standard";
    this.renderBound();
    fill(this.resultsBox);
    this.runState.textContent = "";
    this.schedule(0);
  }

  /** Load code that is not stored yet (the Migrate screen's rewrite): Save then makes a new evaluator. */
  openUnsaved(definition: { language: Language; code: string; packages?: Record<string, string>; settings?: Settings; name?: string }): void {
    this.hideOffer();
    this.bound = null;
    this.nameInput.value = definition.name ?? "";
    this.setLanguage(definition.language);
    this.editor.code = definition.code;
    this.pins.set(definition.packages ?? {});
    const settings = definition.settings ?? {};
    this.timeoutInput.value = String(settings.timeout_s ?? 10);
    this.thresholdInput.value = settings.threshold == null ? "" : String(settings.threshold);
    this.policySelect.value = settings.policy ?? "standard";
    this.renderBound();
    fill(this.resultsBox);
    this.runState.textContent = "";
    this.schedule(0);
  }

  private reset(): void {
    this.hideOffer();
    this.bound = null;
    this.nameInput.value = "";
    this.editor.code = TEMPLATES[this.language];
    this.pins.set({});
    this.renderBound();
    this.schedule(0);
  }

  private renderBound(): void {
    this.boundLabel.textContent = this.bound
      ? `editing ${this.bound.name} · from revision ${this.bound.revision} (Save adds a new revision)`
      : "new evaluator (not saved)";
    this.saveButton.textContent = this.bound ? "Save revision" : "Save";
  }

  private setLanguage(language: Language): void {
    this.language = language;
    this.languageSelect.value = language;
    this.editor.setLanguage(language);
  }

  /** Another language: the template replaces the other language's untouched template; edited code
   * stays, and the page offers the template (the code is almost never valid in the new language). */
  private changeLanguage(): void {
    const next = this.languageSelect.value as Language;
    const before = this.language;
    const code = this.editor.code.trim();
    const untouched = code === "" || Object.values(TEMPLATES).some((t) => t.trim() === code);
    this.setLanguage(next);
    if (untouched) this.editor.code = TEMPLATES[next];
    else if (next !== before) this.offerTemplate(before, next);
    this.schedule(0);
  }

  private offerTemplate(before: Language, next: Language): void {
    const title = (l: Language) => ({ python: "Python", javascript: "JavaScript", typescript: "TypeScript" })[l];
    const sameFamily = before !== "python" && next !== "python"; // JavaScript runs as TypeScript too
    this.languageOffer.hidden = false;
    fill(
      this.languageOffer,
      h("span", {}, `The editor still holds your ${title(before)} code${sameFamily ? "" : `, which will not run as ${title(next)}`}. `),
      h("button", { class: "small primary", onclick: () => { this.editor.code = TEMPLATES[next]; this.hideOffer(); this.schedule(0); } }, `Replace it with the ${title(next)} template`),
      h("button", { class: "small", onclick: () => this.hideOffer() }, "Keep my code"),
      h("button", { class: "small", onclick: () => { this.setLanguage(before); this.hideOffer(); this.schedule(0); } }, `Back to ${title(before)}`),
    );
  }

  private hideOffer(): void {
    this.languageOffer.hidden = true;
    fill(this.languageOffer);
  }

  /** The definition changed: the shown results are of other code, so they go (and inspect again). */
  private changed(delay = 250): void {
    this.stale();
    this.schedule(delay);
  }

  private stale(): void {
    if (this.running || !this.resultsBox.childElementCount) return;
    fill(this.resultsBox);
    this.editor.markErrorLine(null);
    this.runState.className = "run-state stale muted";
    this.runState.textContent = "The code or its settings changed since the last run: Run again to see results.";
  }

  settings(): Settings {
    const settings: Settings = { timeout_s: Number(this.timeoutInput.value) || 10, policy: this.policySelect.value as Settings["policy"] };
    if (this.thresholdInput.value.trim() !== "") settings.threshold = Number(this.thresholdInput.value);
    return settings;
  }

  private definition(): { language: Language; code: string; packages: Record<string, string>; settings: Settings } {
    return { language: this.language, code: this.editor.code, packages: this.pins.packages(), settings: this.settings() };
  }

  /** Inspect after the user pauses typing (250 ms), and only the latest answer counts. */
  schedule(delay = 250): void {
    window.clearTimeout(this.inspectTimer);
    this.inspectTimer = window.setTimeout(() => void this.inspect(), delay);
  }

  private async inspect(): Promise<void> {
    const seq = ++this.inspectSeq;
    try {
      const found = await api<Inspection>("POST", "/v1/inspect", this.definition());
      if (seq !== this.inspectSeq) return;
      this.inspection = found;
      this.showInspection(found);
    } catch (exc) {
      if (seq !== this.inspectSeq) return;
      this.inspection = null;
      const problem: Problem = { type: exc instanceof ApiError ? exc.type : "Error", message: describe(exc), line: null, column: null };
      this.showProblems([problem]);
      this.interfaceLine.className = "interface bad";
      this.interfaceLine.textContent = "not inspected";
    }
  }

  private showInspection(found: Inspection): void {
    if (found.interface) {
      this.interfaceLine.className = `interface ok iface-${found.interface}`;
      fill(this.interfaceLine, "Detected interface: ", h("code", {}, SIGNATURES[found.interface]), found.interface === "metric" && found.entrypoint ? h("span", { class: "badge iface-metric" }, `metric: ${found.entrypoint}`) : null, found.line ? h("span", { class: "muted" }, ` · line ${found.line}`) : null, found.policy && found.policy !== "standard" ? h("span", { class: "badge" }, `policy: ${found.policy}`) : null);
    } else {
      this.interfaceLine.className = "interface bad";
      this.interfaceLine.textContent = "No interface detected";
    }
    this.showProblems(found.errors);
    this.pins.show(found, found.runtime && this.failedRuntime?.id === found.runtime.id ? this.failedRuntime : null);
    this.showCapabilities(found.capabilities);
    fill(this.warningsBox, found.warnings.map((w) => h("p", { class: "warn" }, `⚠ ${w}`)));
  }

  private showProblems(problems: Problem[]): void {
    this.editor.setProblems(problems);
    fill(
      this.problems,
      problems.map((p) =>
        h(
          "li",
          { class: "problem" },
          h("b", {}, p.type),
          p.line ? " " : null, // outside the button: a button's leading space is not drawn ("SyntaxErrorline 1:37")
          p.line ? h("button", { class: "link", onclick: () => this.editor.goto(p.line as number) }, `line ${p.line}${p.column ? `:${p.column}` : ""}`) : null,
          ` — ${p.line ? p.message.replace(/ \(line \d+(, column \d+)?\)(?=$|;)/, "") : p.message}`, // the button says where
        ),
      ),
    );
  }

  private showCapabilities(capabilities: Capabilities): void {
    fill(this.capabilitiesBox, capabilitiesView(capabilities, (line) => this.editor.goto(line)));
  }

  /** Run every case inline. The outcome is brought into view; the first run of a new package set
   * follows its build (status, time, the log's end) from the runtime resource. */
  async run(): Promise<void> {
    if (this.running) return;
    let cases;
    try {
      cases = this.cases.cases();
    } catch (exc) {
      this.runState.className = "run-state bad";
      this.runState.textContent = (exc as Error).message;
      this.reveal();
      return;
    }
    this.running = true;
    this.runButton.disabled = true;
    this.editor.markErrorLine(null);
    const runtime = this.inspection?.runtime;
    const withPins = Object.keys(this.pins.packages()).length > 0;
    const building = runtime?.built === false && withPins;
    const watcher = building && runtime ? new BuildWatcher(runtime.id) : null;
    if (building && runtime) this.pins.building(runtime.id);
    const started = performance.now();
    const label = building ? "Building packages… (the first run of this package set installs it)" : "Running…";
    this.runState.className = `run-state busy${building ? " building" : ""}`;
    const tick = () => (this.runState.textContent = `${label} ${num((performance.now() - started) / 1000, 1)} s`);
    tick();
    const timer = window.setInterval(tick, 100);
    fill(this.resultsBox, watcher?.element);
    this.reveal();
    try {
      const answer = await api<BatchResponse>("POST", "/v1/evaluate", { ...this.definition(), cases });
      await watcher?.stop();
      const seconds = (performance.now() - started) / 1000;
      const { cls, note } = verdict(answer.aggregate);
      this.runState.className = `run-state ${cls}`;
      this.runState.textContent = `${answer.results.length} case(s) in ${num(seconds, 2)} s${building ? " (packages built)" : ""}${note}`;
      const failed = answer.results.find((r) => r.error?.line);
      if (failed?.error?.line) this.editor.markErrorLine(failed.error.line);
      const log = watcher ? h("details", { class: "block build-details" }, h("summary", {}, "package build"), watcher.element) : null;
      fill(this.resultsBox, aggregateView(answer.aggregate), resultsTable(answer.results, { onLine: (line) => { this.editor.markErrorLine(line); this.editor.goto(line); } }), log);
      if (this.failedRuntime && runtime?.id === this.failedRuntime.id) this.failedRuntime = null;
      // with packages, the Packages panel says where the set stands after the run, whatever the page thought
      // before it: an inspection answered while the run was under way (or from before it) may say "not built
      // yet" of the set this very run used (the service remembers a set a run used: it answers built now)
      if (building || withPins) this.schedule(0);
    } catch (exc) {
      await watcher?.stop();
      this.runState.className = "run-state bad";
      this.runState.textContent = "Not run";
      fill(this.resultsBox, runErrorBox(exc));
      if (exc instanceof ApiError && exc.type === "BuildError") {
        this.failedRuntime = { id: String(exc.body.runtime_id ?? runtime?.id ?? ""), message: exc.message };
        this.schedule(0); // the Packages panel says the build failed
      } else if (building || withPins) this.schedule(0); // the Packages panel says where the build stands now
      if (exc instanceof ApiError && exc.line) this.editor.setProblems([{ type: exc.type, message: exc.message, line: exc.line, column: exc.column }]);
    } finally {
      window.clearInterval(timer);
      this.running = false;
      this.runButton.disabled = false;
      this.reveal();
    }
  }

  /** Bring the run's state and outcome into view (they sit below the editor and the cases). */
  private reveal(): void {
    const box = this.runSection.getBoundingClientRect();
    // its head in the top third of the screen (below the sticky header): the outcome, or a build's log, fits under it
    if (box.top >= 60 && box.top < window.innerHeight / 3) return;
    this.runSection.scrollIntoView({ block: "start", behavior: "auto" });
  }

  /** Save: a new evaluator, or a new revision of the one being edited (PATCH). */
  async save(): Promise<void> {
    const name = this.nameInput.value.trim();
    if (!name) {
      this.nameInput.focus();
      this.nameInput.classList.add("invalid");
      toast("Name the evaluator first", "error");
      return;
    }
    this.nameInput.classList.remove("invalid");
    try {
      const body = { name, ...this.definition() };
      const saved = this.bound
        ? await api<Evaluator>("PATCH", `/v1/evaluators/${encodeURIComponent(this.bound.id)}`, body)
        : await api<Evaluator>("POST", "/v1/evaluators", body);
      this.bound = { id: saved.id, name: saved.name, revision: saved.revision };
      this.renderBound();
      toast(`Saved ${saved.name}, revision ${saved.revision}${saved.warnings.length ? ` — ${saved.warnings.join("; ")}` : ""}`);
      this.onSaved();
    } catch (exc) {
      toast(`Not saved: ${describe(exc)}`, "error");
      if (exc instanceof ApiError && exc.line) this.editor.setProblems([{ type: exc.type, message: exc.message, line: exc.line, column: exc.column }]);
    }
  }
}
