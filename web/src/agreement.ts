// Agreement with people's verdicts (GET /v1/evaluators/{id}/agreement, issue 53): the figures of one revision,
// and a table of them per revision for the Evaluators screen. No verdict yet is the endpoint's 422
// NothingCompared: it is shown as "no verdicts yet" with the service's message, never as zeros or an error.

import { api, ApiError, describe } from "./api";
import { fill, h, num } from "./dom";
import type { Agreement } from "./reviewtypes";

/** An agreement, or why there is none (NothingCompared: no verdict, or none comparable). */
export type AgreementAnswer = { agreement: Agreement } | { none: string };

/** ``revision``'s agreement (null: the latest); NothingCompared comes back as ``none``, other failures throw. */
export async function fetchAgreement(evaluatorId: string, revision: number | null = null): Promise<AgreementAnswer> {
  const query = revision === null ? "" : `?revision=${revision}`;
  try {
    return { agreement: await api<Agreement>("GET", `/v1/evaluators/${encodeURIComponent(evaluatorId)}/agreement${query}`) };
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 422 && exc.type === "NothingCompared") return { none: exc.message };
    throw exc;
  }
}

function pct(value: number): string {
  return `${num(value * 100, 1)}%`;
}

function confusion(a: Agreement): string {
  const c = a.confusion;
  return `tp ${c.tp} · fp ${c.fp} · fn ${c.fn} · tn ${c.tn}`;
}

/** "no verdicts yet" with the service's message (why there is nothing to compare). */
export function noVerdicts(message: string): HTMLElement {
  return h("p", { class: "no-verdicts muted", title: message }, h("b", {}, "No verdicts yet"), ` — ${message}`);
}

/** One revision's figures as a row of stats (the Review screen's "agreement so far"). */
export function agreementStats(a: Agreement): HTMLElement {
  const stat = (label: string, value: string, title = "") => h("div", { class: "stat", title, "data-stat": label }, h("span", { class: "stat-value" }, value), h("span", { class: "stat-label" }, label));
  return h(
    "div",
    { class: "stats agreement", "data-revision": String(a.revision), "aria-label": `agreement of revision ${a.revision}` },
    stat("revision", `r${a.revision}`),
    stat("reviewed", String(a.reviewed)),
    stat("accuracy", pct(a.accuracy), "the evaluator's passed against people's"),
    stat("kappa", a.cohen_kappa === null ? "—" : num(a.cohen_kappa), a.cohen_kappa_reason ?? "Cohen's kappa"),
    stat("confusion", confusion(a), "passed is the positive class; people's verdict is the truth"),
    a.scored ? stat("score MAE", num(a.score_mae), `over ${a.scored} item(s) where both gave a score`) : null,
  );
}

const COLUMNS = ["rev", "reviewed", "accuracy", "kappa", "tp", "fp", "fn", "tn", "score MAE", "run now"];

/** The agreement of each of ``revisions`` (newest first), filled in as each answers. No verdict on the
 * evaluator: "no verdicts yet" (the service's message), once. */
export function agreementPerRevision(evaluatorId: string, revisions: number[]): HTMLElement {
  const box = h("div", { class: "agreement-box", "aria-label": "agreement per revision" }, h("p", { class: "muted" }, "Reading verdicts…"));
  void (async () => {
    const body = h("tbody");
    let shown = false;
    for (const revision of revisions) {
      let answer: AgreementAnswer;
      try {
        answer = await fetchAgreement(evaluatorId, revision);
      } catch (exc) {
        body.append(h("tr", { "data-revision": String(revision) }, h("td", { class: "num" }, String(revision)), h("td", { colspan: COLUMNS.length - 1, class: "error-text" }, describe(exc))));
        continue;
      }
      if ("none" in answer) {
        if (!shown) {
          fill(box, noVerdicts(answer.none));
          return; // no verdict on this evaluator: no revision has anything to compare
        }
        body.append(h("tr", { "data-revision": String(revision) }, h("td", { class: "num" }, String(revision)), h("td", { colspan: COLUMNS.length - 1, class: "muted" }, answer.none)));
        continue;
      }
      const a = answer.agreement;
      const c = a.confusion;
      if (!shown) {
        fill(box, h("table", { class: "stats-table agreement-table" }, h("thead", {}, h("tr", {}, COLUMNS.map((t) => h("th", {}, t)))), body));
        shown = true;
      }
      body.append(
        h(
          "tr",
          { "data-revision": String(a.revision) },
          h("td", { class: "num" }, String(a.revision)),
          h("td", { class: "num", "data-col": "reviewed" }, String(a.reviewed)),
          h("td", { class: "num", "data-col": "accuracy" }, pct(a.accuracy)),
          h("td", { class: "num", "data-col": "kappa", title: a.cohen_kappa_reason ?? "" }, a.cohen_kappa === null ? "—" : num(a.cohen_kappa)),
          [c.tp, c.fp, c.fn, c.tn].map((v, i) => h("td", { class: "num", "data-col": ["tp", "fp", "fn", "tn"][i] }, String(v))),
          h("td", { class: "num" }, num(a.score_mae)),
          h("td", { class: "num muted", title: "items this revision never scored, run on it now (cached: from the result cache)" }, a.ran ? `${a.ran} (${a.cached} cached)` : "—"),
        ),
      );
    }
  })();
  return box;
}
