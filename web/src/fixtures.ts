// The evaluators screen's fixtures and compare views: a revision's code beside its fixtures (what each
// expects, what it gave on save, run them again), and two revisions compared on the same rows, shown as a
// diff (each flipped row: base's outcome struck out, head's added).

import { api, describe } from "./api";
import { brief, fill, h, num, option } from "./dom";
import type { Case, CompareResponse, CompareSide, Evaluator, FixtureOutcome, FixtureReport } from "./types";

function expected(e: Evaluator["fixtures"][number]["expect"]): string {
  const parts: string[] = [];
  if (e.score !== undefined && e.score !== null) parts.push(`score ${e.score}${e.tolerance ? ` ± ${e.tolerance}` : ""}`);
  if (e.passed !== undefined && e.passed !== null) parts.push(`passed ${e.passed}`);
  if (e.label !== undefined && e.label !== null) parts.push(`label ${JSON.stringify(e.label)}`);
  parts.push(`status ${e.status ?? "ok"}`);
  return parts.join(", ");
}

function outcomeCell(outcome: FixtureOutcome | undefined): HTMLElement {
  if (!outcome) return h("td", { class: "muted" }, "—");
  if (outcome.passed) return h("td", { class: "fixture-pass" }, "✓ pass");
  return h("td", { class: "fixture-fail" }, h("strong", {}, "✗ fail"), ...outcome.problems.map((p) => h("div", { class: "muted" }, p)), outcome.error ? h("div", { class: "error-text" }, brief(outcome.error, 160)) : null);
}

/** The fixtures table of ``evaluator`` with the outcomes of ``report`` (on save, or run again). */
function fixturesTable(evaluator: Evaluator, report: FixtureReport | null | undefined): HTMLElement {
  if (!evaluator.fixtures.length) return h("p", { class: "muted" }, "No fixtures: save a revision with fixtures [{name, inputs, outputs, expect}] (API, client or CLI) to gate it.");
  const byName = new Map((report?.results ?? []).map((o) => [o.name, o]));
  return h(
    "table",
    { class: "fixtures" },
    h("thead", {}, h("tr", {}, ...["fixture", "inputs", "outputs", "expect", "result"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      evaluator.fixtures.map((f) =>
        h("tr", { "data-fixture": f.name }, h("td", {}, f.name), h("td", { class: "mono" }, brief(f.inputs, 60)), h("td", { class: "mono" }, brief(f.outputs, 60)), h("td", {}, expected(f.expect)), outcomeCell(byName.get(f.name))),
      ),
    ),
  );
}

/** A revision's code and fixtures side by side, with a "Run fixtures" button (``POST …/test``). */
export function codeAndFixtures(revisions: Evaluator[]): HTMLElement {
  const latest = revisions[revisions.length - 1] as Evaluator;
  const pick = h("select", { "aria-label": "revision shown" }, [...revisions].reverse().map((r) => option(String(r.revision), `revision ${r.revision}${r.draft ? " (draft)" : ""}`, r.revision === latest.revision)));
  const box = h("div", { class: "code-fixtures" });
  const state = h("span", { class: "muted" });
  const current = () => revisions.find((r) => String(r.revision) === pick.value) as Evaluator;
  const show = (report?: FixtureReport | null) => {
    const r = current();
    const summary = (report ?? r.fixture_report) ? `${(report ?? r.fixture_report)!.passed} of ${r.fixtures.length} fixtures passed${report ? " (run now)" : " on save"}` : "";
    fill(state, r.draft ? h("span", { class: "badge draft" }, "draft: its fixtures failed on save, never the latest") : null, " ", summary);
    fill(box, h("pre", { class: "code-view mono", "aria-label": "revision code" }, r.code), h("div", { class: "fixtures-view" }, fixturesTable(r, report ?? r.fixture_report)));
  };
  const runAgain = async () => {
    const r = current();
    fill(state, h("span", { class: "run-state busy" }, `Running the fixtures of revision ${r.revision}…`));
    try {
      show(await api<FixtureReport>("POST", `/v1/evaluators/${encodeURIComponent(r.id)}/test`, { revision: r.revision }));
    } catch (exc) {
      fill(state, h("span", { class: "error-text", role: "alert" }, describe(exc)));
    }
  };
  pick.addEventListener("change", () => show());
  const view = h("div", {}, h("div", { class: "toolbar" }, pick, h("button", { onclick: () => void runAgain() }, "Run fixtures"), state), box);
  show();
  return view;
}

function side(s: CompareSide): string {
  const parts = [s.status, `score ${num(s.score)}`, `passed ${s.passed ?? "—"}`];
  if (s.label !== null) parts.push(`label ${s.label}`);
  return parts.join(" · ") + (s.error ? ` · ${brief(s.error, 80)}` : "");
}

function delta(value: number | null | undefined, digits = 3): string {
  if (value === null || value === undefined) return "—";
  return `${value > 0 ? "+" : ""}${num(value, digits)}`;
}

/** Two revisions on the same rows (the editor's cases, or a dataset's first rows), shown as a diff. */
export function compareView(revisions: Evaluator[], cases: () => Case[]): HTMLElement {
  const latest = revisions[revisions.length - 1] as Evaluator;
  const revOptions = (chosen: number) => revisions.map((r) => option(String(r.revision), `revision ${r.revision}`, r.revision === chosen));
  const base = h("select", { "aria-label": "compare base revision" }, revOptions(Math.max(1, latest.revision - 1)));
  const head = h("select", { "aria-label": "compare head revision" }, revOptions(latest.revision));
  const dataset = h("input", { "aria-label": "compare dataset id", placeholder: "dataset id (empty: the editor's cases)", size: 28 });
  const tolerance = h("input", { "aria-label": "score tolerance", type: "number", step: "any", min: "0", value: "0.000001", size: 9 });
  const onlyFlipped = h("input", { type: "checkbox", "aria-label": "only flipped rows", checked: true });
  const out = h("div", { class: "compare-box" });
  let offset = 0;
  const compare = async (more = false) => {
    const body: Record<string, unknown> = { base_revision: Number(base.value), head_revision: Number(head.value), tolerance: Number(tolerance.value) || 0, only_flipped: onlyFlipped.checked, offset: more ? offset : 0, limit: 100 };
    if (dataset.value.trim()) body.dataset_id = dataset.value.trim();
    else {
      try {
        body.cases = cases();
      } catch (exc) {
        fill(out, h("p", { class: "error-text" }, (exc as Error).message));
        return;
      }
    }
    if (!more) fill(out, h("p", { class: "run-state busy" }, `Running revisions ${base.value} and ${head.value} on the same rows…`));
    try {
      render(await api<CompareResponse>("POST", `/v1/evaluators/${encodeURIComponent(latest.id)}/compare`, body), more);
    } catch (exc) {
      fill(out, h("p", { class: "error-text", role: "alert" }, describe(exc)));
    }
  };
  const render = (answer: CompareResponse, more: boolean) => {
    const rows = answer.rows.map((r) =>
      h(
        "tbody",
        { class: r.flipped ? "flipped" : "same", "data-index": String(r.index) },
        h("tr", { class: r.flipped ? "diff-line diff-del" : "diff-line" }, h("td", { class: "num", rowspan: 2 }, String(r.index)), h("td", { class: "gutter" }, r.flipped ? "−" : " "), h("td", { class: "mono" }, side(r.base)), h("td", { rowspan: 2 }, r.fields.join(", ") || "—"), h("td", { class: "num", rowspan: 2 }, delta(r.delta))),
        h("tr", { class: r.flipped ? "diff-line diff-add" : "diff-line" }, h("td", { class: "gutter" }, r.flipped ? "+" : " "), h("td", { class: "mono" }, side(r.head))),
      ),
    );
    offset = answer.next_offset ?? 0;
    const moreButton = answer.next_offset !== null && answer.next_offset !== undefined ? h("button", { class: "small", onclick: () => void compare(true) }, "More rows") : null;
    const existing = out.querySelector("table.compare-rows");
    if (more && existing) {
      existing.append(...rows);
      out.querySelector(".compare-more")?.replaceChildren(...(moreButton ? [moreButton] : []));
      return;
    }
    const d = answer.deltas;
    fill(
      out,
      h("p", { class: "run-state done compare-summary" }, `${answer.flipped.length} of ${answer.compared} rows flipped (revision ${answer.base_revision} → ${answer.head_revision})`),
      h("p", { class: "compare-deltas" }, `pass rate ${num(answer.base.pass_rate)} → ${num(answer.head.pass_rate)} (${delta(d.pass_rate)}) · mean score ${delta(d.mean_score)} · errors ${delta(d.errors, 0)} · flipped: ${Object.entries(d.flipped).map(([k, v]) => `${k} ${v}`).join(", ")}`),
      h("div", { class: "diff" }, h("table", { class: "compare-rows" }, h("thead", {}, h("tr", {}, ...["row", "", `revision ${answer.base_revision} − / revision ${answer.head_revision} +`, "flipped", "Δscore"].map((t) => h("th", {}, t)))), ...rows)),
      h("div", { class: "compare-more" }, moreButton),
    );
  };
  return h(
    "div",
    {},
    h("div", { class: "toolbar" }, "base ", base, " head ", head, dataset, "tolerance ", tolerance, h("label", {}, onlyFlipped, " only flipped rows"), h("button", { class: "primary", onclick: () => void compare() }, "Compare on rows")),
    out,
  );
}
