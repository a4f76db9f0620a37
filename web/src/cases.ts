// The cases editor: a few rows as a table, or the same cases as JSON; shared by every screen.

import { h, fill, json } from "./dom";
import type { Case } from "./types";

type Mode = "table" | "json";
interface Row {
  inputs: string;
  outputs: string;
  trace: string;
  app_params: string;
}

function toRow(c: Partial<Case> | undefined): Row {
  return { inputs: JSON.stringify(c?.inputs ?? {}), outputs: show(c?.outputs), trace: show(c?.trace), app_params: show(c?.app_params) };
}

const DEFAULT_CASES: Case[] = [
  { inputs: { correct_answer: "Paris" }, outputs: "Paris" },
  { inputs: { correct_answer: "Paris" }, outputs: "paris, France" },
];

/** A cell's text as a value: JSON when it parses, else the text itself (outputs are often plain text). */
function loose(text: string): unknown {
  const trimmed = text.trim();
  if (trimmed === "") return null;
  try {
    return JSON.parse(trimmed);
  } catch {
    return text;
  }
}

function show(value: unknown): string {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

export class CasesEditor {
  readonly element: HTMLElement;
  private mode: Mode = "table";
  private rows: Row[];
  private readonly body = h("div", { class: "cases-body" });
  private readonly error = h("p", { class: "error-text", role: "alert" });
  private readonly tabs: Record<Mode, HTMLButtonElement>;

  constructor(initial: Case[] = DEFAULT_CASES) {
    this.rows = initial.map(toRow);
    this.tabs = {
      table: h("button", { class: "tab", role: "tab", onclick: () => this.switchTo("table") }, "Table"),
      json: h("button", { class: "tab", role: "tab", onclick: () => this.switchTo("json") }, "JSON"),
    };
    this.element = h(
      "section",
      { class: "cases", "aria-label": "cases" },
      h(
        "header",
        { class: "section-head" },
        h("h3", {}, "Cases"),
        h("div", { class: "tabs small", role: "tablist" }, this.tabs.table, this.tabs.json),
        h("span", { class: "hint" }, "inputs, trace and app_params are JSON; outputs are JSON when they parse, else text"),
      ),
      this.body,
      this.error,
    );
    this.render();
  }

  /** The cases as the API takes them; throws with a readable message when a cell is not valid JSON. */
  cases(): Case[] {
    if (this.mode === "json") this.readJson();
    return this.rows.map((row, i) => {
      const inputs = row.inputs.trim() === "" ? {} : this.parse(row.inputs, `case ${i + 1}: inputs`);
      const trace = row.trace.trim() === "" ? null : this.parse(row.trace, `case ${i + 1}: trace`);
      const appParams = row.app_params.trim() === "" ? null : this.parse(row.app_params, `case ${i + 1}: app_params`);
      return { inputs, outputs: loose(row.outputs), trace, app_params: appParams };
    });
  }

  setCases(cases: Case[]): void {
    this.rows = cases.map(toRow);
    this.render();
  }

  private parse(text: string, where: string): unknown {
    try {
      return JSON.parse(text);
    } catch (exc) {
      throw new Error(`${where} is not valid JSON: ${(exc as Error).message}`);
    }
  }

  private readJson(): void {
    const area = this.body.querySelector("textarea");
    if (!area) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(area.value);
    } catch (exc) {
      throw new Error(`the cases are not valid JSON: ${(exc as Error).message}`);
    }
    const list = Array.isArray(parsed) ? parsed : [parsed];
    this.rows = list.map((c: Partial<Case>) => toRow(c));
  }

  private switchTo(mode: Mode): void {
    if (mode === this.mode) return;
    try {
      if (this.mode === "json") this.readJson();
      this.mode = mode;
      this.error.textContent = "";
      this.render();
    } catch (exc) {
      this.error.textContent = (exc as Error).message;
    }
  }

  private render(): void {
    this.tabs.table.setAttribute("aria-selected", String(this.mode === "table"));
    this.tabs.json.setAttribute("aria-selected", String(this.mode === "json"));
    if (this.mode === "json") {
      const asJson = this.rows.map((row) => {
        const out: Record<string, unknown> = {};
        try {
          out.inputs = JSON.parse(row.inputs || "{}");
        } catch {
          out.inputs = row.inputs;
        }
        out.outputs = loose(row.outputs);
        if (row.trace.trim()) out.trace = loose(row.trace);
        if (row.app_params.trim()) out.app_params = loose(row.app_params);
        return out;
      });
      fill(this.body, h("textarea", { class: "code json-cases", rows: 10, spellcheck: "false", "aria-label": "cases as JSON", value: json(asJson) }));
      return;
    }
    const cell = (row: Row, key: keyof Row, label: string, i: number) =>
      h("textarea", {
        class: `cell ${key}`,
        rows: 2,
        spellcheck: "false",
        "aria-label": `case ${i + 1} ${label}`,
        value: row[key],
        oninput: (e: Event) => {
          row[key] = (e.target as HTMLTextAreaElement).value;
          this.validateCell(e.target as HTMLTextAreaElement, key);
        },
      });
    fill(
      this.body,
      h(
        "table",
        { class: "cases-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "inputs (JSON)"), h("th", {}, "outputs"), h("th", {}, "trace (JSON, optional)"), h("th", {}, "app_params (JSON, legacy)"), h("th", {}))),
        h(
          "tbody",
          {},
          this.rows.map((row, i) =>
            h(
              "tr",
              {},
              h("td", { class: "num" }, String(i + 1)),
              h("td", {}, cell(row, "inputs", "inputs", i)),
              h("td", {}, cell(row, "outputs", "outputs", i)),
              h("td", {}, cell(row, "trace", "trace", i)),
              h("td", {}, cell(row, "app_params", "app_params", i)),
              h("td", {}, h("button", { class: "icon", title: "remove this case", "aria-label": `remove case ${i + 1}`, onclick: () => { this.rows.splice(i, 1); this.render(); } }, "×")),
            ),
          ),
        ),
      ),
      h("button", { class: "small", onclick: () => { this.rows.push({ inputs: "{}", outputs: "", trace: "", app_params: "" }); this.render(); } }, "+ Add case"),
    );
  }

  private validateCell(area: HTMLTextAreaElement, key: keyof Row): void {
    if (key === "outputs") return;
    const text = area.value.trim();
    let ok = true;
    if (text) {
      try {
        JSON.parse(text);
      } catch {
        ok = false;
      }
    }
    area.classList.toggle("invalid", !ok);
    area.title = ok ? "" : "not valid JSON";
  }
}
