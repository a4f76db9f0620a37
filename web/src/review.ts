// The Review screen (issue 53): the workspace's review queues with their progress and a New queue form; a queue
// opened shows one item at a time — what the evaluator judged (a rule's trace, or the job row's inputs/outputs),
// its answer, the item's verdict and history — and takes one key per verdict: p pass, f fail, s skip, n a note
// (Enter gives it), ←/→ or j/k move. Progress and the agreement so far follow each verdict. Export downloads
// the verdicts beside the answers; "Turn verdicts into fixtures" makes them the evaluator's tests.

import { agreementStats, fetchAgreement, noVerdicts } from "./agreement";
import { api, describe, download } from "./api";
import { fill, h, json, num, toast, when } from "./dom";
import type { TraceDict } from "./onlinetypes";
import { QueueForm, selectText } from "./reviewform";
import type { FixturesAdded, ItemList, ReviewItem, ReviewQueue, Verdict } from "./reviewtypes";
import { statusBadge } from "./results";
import { spanTree } from "./traceview";

const MAX_ITEMS = 10_000; // a queue's limit (MAX_QUEUE_ITEMS)

const q = (id: string) => encodeURIComponent(id);

function sourceText(queue: ReviewQueue): string {
  return queue.source.rule_id ? `rule ${queue.source.rule_id}` : `job ${queue.source.job_id ?? ""}`;
}

function passedText(passed: boolean | null): HTMLElement {
  if (passed === null) return h("span", { class: "muted" }, "no passed");
  return h("span", { class: passed ? "pass" : "fail" }, passed ? "✓ pass" : "✗ fail");
}

function isTrace(value: unknown): value is TraceDict {
  return !!value && typeof value === "object" && "spans" in value;
}

export class ReviewScreen {
  readonly element: HTMLElement;
  private readonly listBody = h("tbody");
  private readonly detail = h("div", { class: "detail review-detail" });
  private readonly form = new QueueForm((queue) => {
    toast(`Queue ${queue.name}: ${queue.items} item(s)`);
    void this.refresh();
    void this.open(queue.id);
  });
  private readonly note = h("input", { type: "text", class: "verdict-note", "aria-label": "note", placeholder: "n: a note (Enter gives it)", onkeydown: (e: KeyboardEvent) => this.noteKey(e) });
  private readonly progress = h("div", { class: "review-progress" });
  private readonly agreementBox = h("div", { class: "review-agreement", "aria-label": "agreement so far" });
  private readonly itemBox = h("div", { class: "review-item" });
  private readonly fixturesBox = h("div", { class: "fixtures-answer" });
  private queue: ReviewQueue | null = null;
  private items: ReviewItem[] = [];
  private index = 0;
  private busy = false;

  constructor() {
    this.element = h(
      "section",
      { class: "screen review", id: "screen-review" },
      h(
        "div",
        { class: "split" },
        h(
          "div",
          { class: "list" },
          h(
            "div",
            { class: "panel" },
            h("header", { class: "section-head" }, h("h3", {}, "Review queues"), h("button", { class: "small", onclick: () => void this.refresh() }, "Refresh")),
            h("table", { class: "rules-list queue-list" }, h("thead", {}, h("tr", {}, ["name", "source", "selection", "progress"].map((t) => h("th", {}, t)))), this.listBody),
          ),
          this.form.element,
        ),
        this.detail,
      ),
    );
    fill(this.detail, h("p", { class: "muted" }, "Open a queue to review its items, or make one from a job's results or a rule's scores."));
  }

  async refresh(): Promise<void> {
    void this.form.refresh();
    await this.refreshList();
  }

  private async refreshList(): Promise<void> {
    try {
      const page = await api<{ data: ReviewQueue[] }>("GET", "/v1/review-queues?limit=200");
      fill(
        this.listBody,
        page.data.length
          ? page.data.map((queue) =>
              h(
                "tr",
                { "data-queue": queue.id, class: queue.id === this.queue?.id ? "selected" : "", tabindex: 0, onclick: () => void this.open(queue.id), onkeydown: (e: KeyboardEvent) => e.key === "Enter" && void this.open(queue.id) },
                h("td", {}, queue.name),
                h("td", { class: "mono" }, queue.source.rule_id ? "rule" : "job", h("span", { class: "muted" }, ` ${queue.source.rule_id ?? queue.source.job_id ?? ""}`)),
                h("td", {}, selectText(queue.select), queue.sample < 1 ? h("span", { class: "muted" }, ` · sample ${num(queue.sample)}`) : null, h("span", { class: "muted" }, ` · limit ${queue.limit}`)),
                h("td", { class: "num", "data-col": "progress" }, `${queue.reviewed} / ${queue.items}`),
              ),
            )
          : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No queues yet: make one below.")),
      );
    } catch (exc) {
      fill(this.listBody, h("tr", {}, h("td", { colspan: 4, class: "error-text" }, describe(exc))));
    }
  }

  /** Open queue ``id``: every item (in the order added), at its first pending one. */
  async open(id: string): Promise<void> {
    try {
      const queue = await api<ReviewQueue>("GET", `/v1/review-queues/${q(id)}`);
      const items: ReviewItem[] = [];
      let cursor: string | null = null;
      do {
        const pageOf: ItemList = await api<ItemList>("GET", `/v1/review-queues/${q(id)}/items?limit=1000${cursor ? `&cursor=${q(cursor)}` : ""}`);
        items.push(...pageOf.data);
        cursor = pageOf.next_cursor;
      } while (cursor && items.length < MAX_ITEMS);
      this.queue = queue;
      this.items = items;
      this.index = Math.max(0, items.findIndex((i) => i.state === "pending"));
    } catch (exc) {
      fill(this.detail, h("p", { class: "error-text", role: "alert" }, describe(exc)));
      return;
    }
    for (const row of this.listBody.querySelectorAll("tr")) row.classList.toggle("selected", row.dataset.queue === id);
    this.fixturesBox.replaceChildren();
    this.renderQueue();
    void this.showAgreement();
    this.showItem();
  }

  private renderQueue(): void {
    const queue = this.queue;
    if (!queue) return;
    fill(
      this.detail,
      h(
        "div",
        { class: "panel review-queue", "data-queue": queue.id },
        h("header", { class: "section-head" }, h("h2", {}, queue.name), h("span", { class: "muted mono" }, queue.id)),
        h("p", { class: "muted" }, `${sourceText(queue)} · evaluator ${queue.evaluator_id} · ${selectText(queue.select)}${queue.sample < 1 ? ` · sample ${num(queue.sample)}` : ""} · limit ${queue.limit}`),
        this.progress,
        h("h4", {}, "Agreement so far (the evaluator's latest revision)"),
        this.agreementBox,
        h(
          "div",
          { class: "toolbar" },
          h("button", { onclick: () => void this.open(queue.id), title: "a rule's queue fills as its scores arrive" }, "Reload items"),
          h("button", { onclick: () => void this.export("csv") }, "Export CSV"),
          h("button", { onclick: () => void this.export("jsonl") }, "Export JSONL"),
          h("button", { onclick: () => void this.toFixtures(), title: "every reviewed item becomes a fixture of the evaluator: a revision that disagrees with people is refused at save" }, "Turn verdicts into fixtures"),
        ),
        this.fixturesBox,
        h("p", { class: "hint review-keys" }, h("kbd", {}, "p"), " pass · ", h("kbd", {}, "f"), " fail · ", h("kbd", {}, "s"), " skip · ", h("kbd", {}, "n"), " note (Enter gives it) · ", h("kbd", {}, "←"), h("kbd", {}, "→"), " / ", h("kbd", {}, "k"), h("kbd", {}, "j"), " move"),
        this.itemBox,
      ),
    );
    this.renderProgress();
  }

  private renderProgress(): void {
    const queue = this.queue;
    if (!queue) return;
    fill(
      this.progress,
      h("progress", { max: Math.max(queue.items, 1), value: queue.reviewed, "aria-label": "reviewed" }),
      h("span", { class: "progress-text", "data-reviewed": String(queue.reviewed), "data-items": String(queue.items) }, ` ${queue.reviewed} / ${queue.items} reviewed`),
    );
  }

  private async showAgreement(): Promise<void> {
    const queue = this.queue;
    if (!queue) return;
    try {
      const answer = await fetchAgreement(queue.evaluator_id);
      if (queue !== this.queue) return;
      fill(this.agreementBox, "agreement" in answer ? agreementStats(answer.agreement) : noVerdicts(answer.none));
    } catch (exc) {
      fill(this.agreementBox, h("p", { class: "error-text" }, describe(exc)));
    }
  }

  private showItem(): void {
    const item = this.items[this.index];
    if (!item) {
      fill(this.itemBox, h("p", { class: "muted empty-queue" }, "This queue has no items (nothing its source holds matches its selection yet)."));
      return;
    }
    const history = h("div", { class: "verdict-history" });
    const judged = item.case_error
      ? h("p", { class: "warn" }, item.case_error)
      : isTrace(item.trace) && item.source.rule_id
        ? h("div", {}, h("h4", {}, "Trace ", h("span", { class: "mono muted" }, item.source.trace_id ?? "")), spanTree(item.trace, item.source.span_id ? [item.source.span_id] : []))
        : null;
    fill(
      this.itemBox,
      h(
        "article",
        { class: "panel item-card", "data-item": item.id, "data-state": item.state, "aria-label": "review item" },
        h(
          "header",
          { class: "section-head" },
          h("h3", {}, `Item ${this.index + 1} of ${this.items.length}`),
          h("span", { class: `badge state-${item.state}` }, item.state),
          h("span", { class: "muted mono" }, item.source.job_id ? `row ${item.source.index ?? ""}` : (item.source.target_id ?? "")),
          h("span", { class: "spacer" }),
          h("button", { class: "small", "aria-label": "previous item", onclick: () => this.move(-1) }, "← prev"),
          h("button", { class: "small", "aria-label": "next item", onclick: () => this.move(1) }, "next →"),
        ),
        h(
          "section",
          { class: "evaluator-answer", "aria-label": "the evaluator's answer" },
          h("h4", {}, "The evaluator's answer"),
          h("p", {}, item.status ? statusBadge(item.status) : null, " score ", h("b", { class: "answer-score" }, num(item.score)), " · ", passedText(item.passed), item.label ? [" · ", h("span", { class: "badge label" }, item.label)] : null, h("span", { class: "muted" }, item.revision !== null ? ` · revision ${item.revision}` : "")),
          item.reason ? h("p", { class: "answer-reason" }, item.reason) : null,
        ),
        judged,
        item.case_error ? null : h("div", { class: "io" }, h("div", {}, h("h4", {}, "inputs"), h("pre", { class: "io-value", "aria-label": "item inputs" }, json(item.inputs ?? null))), h("div", {}, h("h4", {}, "outputs"), h("pre", { class: "io-value", "aria-label": "item outputs" }, json(item.outputs ?? null)))),
        !item.source.rule_id && item.trace ? h("details", { class: "block" }, h("summary", {}, "trace"), isTrace(item.trace) ? spanTree(item.trace) : h("pre", {}, json(item.trace))) : null,
        h(
          "section",
          { class: "your-verdict", "aria-label": "verdict" },
          h("h4", {}, "Your verdict"),
          item.verdict ? h("p", { class: "current-verdict" }, passedText(item.verdict.passed), item.verdict.note ? h("span", { class: "verdict-note-text" }, ` “${item.verdict.note}”`) : null, h("span", { class: "muted" }, ` · ${when(item.verdict.created_at)}`)) : h("p", { class: "muted" }, "No verdict yet."),
          h("div", { class: "toolbar" }, h("button", { class: "primary", onclick: () => void this.give(true) }, "Pass (p)"), h("button", { class: "danger", onclick: () => void this.give(false) }, "Fail (f)"), h("button", { onclick: () => this.move(1) }, "Skip (s)"), this.note),
          history,
        ),
      ),
    );
    if (item.verdict) void this.showHistory(item, history);
  }

  private async showHistory(item: ReviewItem, box: HTMLElement): Promise<void> {
    try {
      const verdicts = (await api<{ data: Verdict[] }>("GET", `/v1/review-queues/${q(item.queue_id)}/items/${q(item.id)}/verdict`)).data;
      if (verdicts.length < 2) return;
      fill(
        box,
        h("h4", {}, `History (${verdicts.length} verdicts, newest first)`),
        h("ol", { class: "kv history-list" }, verdicts.map((v) => h("li", { "data-current": String(v.current) }, passedText(v.passed), v.note ? ` “${v.note}”` : "", h("span", { class: "muted" }, ` · ${when(v.created_at)}${v.reviewer ? ` · ${v.reviewer}` : ""}${v.current ? " · current" : " · replaced"}`)))),
      );
    } catch (exc) {
      fill(box, h("p", { class: "error-text" }, describe(exc)));
    }
  }

  private move(step: number): void {
    if (this.busy) return; // a verdict being given moves on by itself
    const next = this.index + step;
    if (next < 0 || next >= this.items.length) return;
    this.index = next;
    this.note.value = "";
    this.showItem();
  }

  /** Give the shown item a verdict (with the note field's text), then show the next item. */
  private async give(passed: boolean): Promise<void> {
    const item = this.items[this.index];
    const queue = this.queue;
    if (!item || !queue || this.busy) return;
    this.busy = true;
    const note = this.note.value.trim();
    try {
      const verdict = await api<Verdict>("POST", `/v1/review-queues/${q(queue.id)}/items/${q(item.id)}/verdict`, note ? { passed, note } : { passed });
      this.items[this.index] = { ...item, state: "reviewed", verdict };
      this.note.value = "";
      this.queue = await api<ReviewQueue>("GET", `/v1/review-queues/${q(queue.id)}`);
      this.renderProgress();
      void this.showAgreement();
      void this.refreshList();
      if (this.index + 1 < this.items.length) this.index += 1;
      this.showItem();
    } catch (exc) {
      toast(describe(exc), "error");
    } finally {
      this.busy = false;
    }
  }

  /** Keys in the note field: Enter gives the note (with the item's current verdict, or — none yet — holds
   * it for the next p or f); Escape leaves the field. */
  private noteKey(e: KeyboardEvent): void {
    if (e.key === "Escape") {
      this.note.blur();
      return;
    }
    if (e.key !== "Enter") return;
    e.preventDefault();
    const current = this.items[this.index]?.verdict;
    this.note.blur();
    if (current) void this.give(current.passed);
    else if (this.note.value.trim()) toast("Note kept: p or f gives the verdict with it");
  }

  /** The screen's keys (main.ts calls this while the Review screen is shown). */
  handleKey(e: KeyboardEvent): void {
    if (!this.queue || e.ctrlKey || e.metaKey || e.altKey) return;
    const target = e.target as HTMLElement | null;
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const actions: Record<string, () => void> = {
      p: () => void this.give(true),
      f: () => void this.give(false),
      s: () => this.move(1),
      n: () => this.note.focus(),
      j: () => this.move(1),
      k: () => this.move(-1),
      ArrowRight: () => this.move(1),
      ArrowDown: () => this.move(1),
      ArrowLeft: () => this.move(-1),
      ArrowUp: () => this.move(-1),
    };
    const action = actions[e.key];
    if (!action) return;
    e.preventDefault();
    action();
  }

  private async export(format: "csv" | "jsonl"): Promise<void> {
    const queue = this.queue;
    if (!queue) return;
    try {
      await download(`/v1/review-queues/${q(queue.id)}/export?format=${format}`, `review-${queue.id}.${format}`);
    } catch (exc) {
      toast(describe(exc), "error");
    }
  }

  private async toFixtures(): Promise<void> {
    const queue = this.queue;
    if (!queue) return;
    fill(this.fixturesBox, h("p", { class: "run-state busy" }, "Turning verdicts into fixtures…"));
    try {
      const added = await api<FixturesAdded>("POST", `/v1/review-queues/${q(queue.id)}/fixtures`, { all_reviewed: true });
      fill(
        this.fixturesBox,
        h("p", { class: "run-state done" }, `Revision ${added.revision} holds ${added.fixtures} fixture(s): ${added.added} added, ${added.replaced} replaced.`),
        added.disagreeing.length
          ? h("div", { class: "warn disagreeing" }, h("p", {}, `The current code disagrees with ${added.disagreeing.length} verdict(s): the next revision must pass them or its save is refused (409 FixturesFailed).`), h("ul", { class: "kv" }, added.disagreeing.map((name) => h("li", { class: "mono" }, name))))
          : h("p", { class: "pass agreeing" }, "The current code agrees with every verdict."),
      );
      void this.showAgreement();
    } catch (exc) {
      fill(this.fixturesBox, h("p", { class: "error-text", role: "alert" }, describe(exc)));
    }
  }
}
