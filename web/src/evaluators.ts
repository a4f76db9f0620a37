// The evaluators screen: the list, one evaluator's revisions (drafts marked), a revision's code beside its
// fixtures, agreement with people's verdicts per revision, a diff between any two, two revisions compared on
// the same rows, run a revision by id.

import { agreementPerRevision } from "./agreement";
import { api, describe } from "./api";
import type { CasesEditor } from "./cases";
import { fill, h, named, option, toast, when } from "./dom";
import { codeAndFixtures, compareView } from "./fixtures";
import { aggregateView, diffView, resultsTable } from "./results";
import type { BatchResponse, Evaluator, Page } from "./types";

export class EvaluatorsScreen {
  readonly element: HTMLElement;
  private readonly listBody = h("tbody");
  private readonly detail = h("div", { class: "detail" });
  private selected: string | null = null;
  private revisions: Evaluator[] = [];

  constructor(
    private readonly cases: CasesEditor,
    private readonly openInEditor: (evaluator: Evaluator) => void,
    private readonly migrateIt: (evaluator: Evaluator) => void,
  ) {
    this.element = h(
      "section",
      { class: "screen evaluators", id: "screen-evaluators" },
      h(
        "div",
        { class: "split" },
        h(
          "div",
          { class: "list panel" },
          h("header", { class: "section-head" }, h("h3", {}, "Evaluators"), h("button", { class: "small", onclick: () => void this.refresh() }, "Refresh")),
          h("table", { class: "evaluator-list" }, h("thead", {}, h("tr", {}, ...["name", "language", "interface", "rev", "updated"].map((t) => h("th", {}, t)))), this.listBody),
        ),
        this.detail,
      ),
    );
    fill(this.detail, h("p", { class: "muted" }, "Pick an evaluator to see its revisions."));
  }

  async refresh(): Promise<void> {
    try {
      const page = await api<Page<Evaluator>>("GET", "/v1/evaluators?limit=200");
      fill(
        this.listBody,
        page.data.map((e) =>
          h(
            "tr",
            { class: e.id === this.selected ? "selected" : "", tabindex: 0, "data-id": e.id, onclick: () => void this.select(e.id), onkeydown: (ev: KeyboardEvent) => ev.key === "Enter" && void this.select(e.id) },
            h("td", {}, named(e, page.data) === e.name ? e.name : [e.name, h("span", { class: "muted mono id-note", title: "another evaluator has this name" }, ` ${e.id}`)]),
            h("td", {}, e.language),
            h("td", {}, h("span", { class: `badge iface-${e.interface}` }, e.interface)),
            h("td", { class: "num" }, String(e.revision)),
            h("td", { class: "muted" }, when(e.updated_at)),
          ),
        ),
      );
      if (!page.data.length) fill(this.listBody, h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No evaluators yet: write one in the Editor and Save it.")));
    } catch (exc) {
      fill(this.listBody, h("tr", {}, h("td", { colspan: 5, class: "error-text" }, describe(exc))));
    }
  }

  async select(id: string): Promise<void> {
    this.selected = id;
    for (const row of this.listBody.querySelectorAll("tr")) row.classList.toggle("selected", row.dataset.id === id);
    try {
      this.revisions = (await api<Page<Evaluator>>("GET", `/v1/evaluators/${encodeURIComponent(id)}/revisions`)).data;
    } catch (exc) {
      fill(this.detail, h("p", { class: "error-text" }, describe(exc)));
      return;
    }
    this.renderDetail();
  }

  private renderDetail(): void {
    const newest = this.revisions[this.revisions.length - 1];
    if (!newest) return;
    const latest = [...this.revisions].reverse().find((r) => !r.draft) ?? newest; // a draft is never the latest
    const revOptions = (chosen: number) => this.revisions.map((r) => option(String(r.revision), `revision ${r.revision}`, r.revision === chosen));
    const a = h("select", { "aria-label": "diff from revision", onchange: () => showDiff() }, revOptions(Math.max(1, newest.revision - 1)));
    const b = h("select", { "aria-label": "diff to revision", onchange: () => showDiff() }, revOptions(newest.revision));
    const diffBox = h("div", { class: "diff-box" });
    const byRev = (n: string) => this.revisions.find((r) => String(r.revision) === n) as Evaluator;
    const showDiff = () => {
      const [x, y] = [byRev(a.value), byRev(b.value)];
      const meta = (e: Evaluator) => {
        const packages = Object.entries(e.packages).map(([n, v]) => `${n} ${v}`).join(", ") || "none";
        const settings = Object.entries(e.settings).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ");
        return `language: ${e.language}\npackages: ${packages}\nsettings: ${settings}\n\n`;
      };
      fill(diffBox, diffView(meta(x) + x.code, meta(y) + y.code, [`revision ${x.revision}`, `revision ${y.revision}`]));
    };
    const runRev = h("select", { "aria-label": "revision to run" }, revOptions(latest.revision));
    const runBox = h("div", { class: "results-box" });
    const run = async () => {
      let cases;
      try {
        cases = this.cases.cases();
      } catch (exc) {
        fill(runBox, h("p", { class: "error-text" }, (exc as Error).message));
        return;
      }
      fill(runBox, h("p", { class: "run-state busy" }, `Running revision ${runRev.value}…`));
      try {
        const answer = await api<BatchResponse>("POST", `/v1/evaluators/${encodeURIComponent(latest.id)}/evaluate`, { revision: Number(runRev.value), cases });
        fill(runBox, h("p", { class: "run-state done" }, `revision ${runRev.value}: ${answer.results.length} case(s)`), aggregateView(answer.aggregate), resultsTable(answer.results));
      } catch (exc) {
        fill(runBox, h("p", { class: "error-text", role: "alert" }, describe(exc)));
      }
    };
    const remove = async () => {
      if (!window.confirm(`Delete ${latest.name}? Its revisions stay in the database for history.`)) return;
      try {
        await api("DELETE", `/v1/evaluators/${encodeURIComponent(latest.id)}`);
        toast(`Deleted ${latest.name}`);
        this.selected = null;
        fill(this.detail, h("p", { class: "muted" }, "Pick an evaluator to see its revisions."));
        void this.refresh();
      } catch (exc) {
        toast(describe(exc), "error");
      }
    };
    fill(
      this.detail,
      h(
        "div",
        { class: "panel" },
        h("header", { class: "section-head" }, h("h2", {}, latest.name), h("span", { class: "muted mono" }, latest.id)),
        latest.description ? h("p", {}, latest.description) : null,
        h(
          "div",
          { class: "toolbar" },
          h("button", { onclick: () => this.openInEditor(latest) }, "Open latest in editor"),
          latest.interface === "legacy" ? h("button", { onclick: () => this.migrateIt(latest) }, "Migrate…") : null,
          h("button", { class: "danger", onclick: () => void remove() }, "Delete"),
        ),
        h("h3", {}, "Revisions"),
        h(
          "table",
          { class: "revisions" },
          h("thead", {}, h("tr", {}, ...["rev", "saved (this revision)", "language", "interface", "packages", ""].map((t) => h("th", {}, t)))),
          h(
            "tbody",
            {},
            [...this.revisions].reverse().map((r) =>
              h(
                "tr",
                { "data-revision": String(r.revision) },
                h("td", { class: "num" }, String(r.revision), r.draft ? h("span", { class: "badge draft", title: "its fixtures failed on save: never the latest" }, " draft") : null),
                h("td", { class: "muted", "data-saved": r.updated_at }, when(r.updated_at)),
                h("td", {}, r.language),
                h("td", {}, h("span", { class: `badge iface-${r.interface}` }, r.interface)),
                h("td", { class: "mono" }, Object.entries(r.packages).map(([n, v]) => `${n} ${v}`).join(", ") || "—"),
                h("td", {}, h("button", { class: "small", onclick: () => this.openInEditor(r) }, "Open")),
              ),
            ),
          ),
        ),
        h("h3", {}, "Agreement with reviews"),
        agreementPerRevision(latest.id, [...this.revisions].reverse().slice(0, 10).map((r) => r.revision)),
        h("h3", {}, "Code & fixtures"),
        codeAndFixtures(this.revisions),
        h("h3", {}, "Diff"),
        h("div", { class: "toolbar" }, "from ", a, " to ", b),
        diffBox,
        h("h3", {}, "Compare two revisions on rows"),
        compareView(this.revisions, () => this.cases.cases()),
        h("h3", {}, "Run a revision by id"),
        h("div", { class: "toolbar" }, runRev, h("button", { class: "primary", onclick: () => void run() }, "▶ Run with the editor's cases")),
        runBox,
      ),
    );
    showDiff();
  }
}
