// The editor screen's Packages panel: the exact pins as rows (name, version), each row's check from the
// last inspection, and a line on the package set they make (built, not built, building, failed).

import { fill, h } from "./dom";
import type { Inspection, Language } from "./types";

interface PinRow {
  name: string;
  version: string;
}

/** A build of the shown package set that failed (its runtime id and the error's message). */
export interface FailedBuild {
  id: string;
  message: string;
}

export class PinsEditor {
  readonly element: HTMLElement;
  private pins: PinRow[] = [];
  private readonly body = h("tbody");
  private readonly runtimeLine = h("p", { class: "runtime muted" });

  /** ``language``: the editor's language now (the placeholders); ``onChange``: a pin changed (the
   * definition is stale; ``delay`` before inspecting again, the editor's default when omitted). */
  constructor(
    private readonly language: () => Language,
    private readonly onChange: (delay?: number) => void,
  ) {
    this.element = h(
      "section",
      { class: "panel pins" },
      h("h3", {}, "Packages"),
      h("table", { class: "pins-table" }, h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "exact version"), h("th", {}, ""), h("th", {}))), this.body),
      h("button", { class: "small", onclick: () => this.add() }, "+ Add package"),
      this.runtimeLine,
    );
    this.render();
  }

  /** Show ``packages`` (name → exact version) as the rows. */
  set(packages: Record<string, string>): void {
    this.pins = Object.entries(packages).map(([name, version]) => ({ name, version }));
    this.render();
  }

  /** The pins with a name, as the API takes them. */
  packages(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const pin of this.pins) if (pin.name.trim()) out[pin.name.trim()] = pin.version;
    return out;
  }

  /** Each named row's check from ``found``, and the package set's line; ``failed``: the last run's build
   * of this very set failed (its rows that check out say so). */
  show(found: Inspection, failed: FailedBuild | null): void {
    const rows = this.body.querySelectorAll<HTMLTableRowElement>("tr[data-pin]");
    let checked = 0;
    rows.forEach((row, i) => {
      const cell = row.querySelector(".pin-state") as HTMLElement;
      if (!this.pins[i]?.name.trim()) {
        fill(cell);
        return;
      }
      const check = found.pins[checked++];
      const buildFailed = failed !== null && check?.ok;
      row.classList.toggle("invalid", check ? !check.ok || buildFailed : false);
      if (!check) fill(cell);
      else if (buildFailed) fill(cell, h("span", { class: "fail pin-error", title: failed.message }, "✗ build failed"));
      else if (check.ok) fill(cell, h("span", { class: "pass", title: `pinned as ${check.normalized}` }, "✓"));
      else fill(cell, h("span", { class: "fail pin-error", title: check.message ?? "" }, "✗ ", check.message ?? "invalid"));
    });
    const runtime = found.runtime;
    this.runtimeLine.classList.toggle("fail", Boolean(failed));
    if (!runtime || !Object.keys(this.packages()).length) {
      this.runtimeLine.textContent = runtime ? "" : "fix the pins to see the package set";
    } else if (failed) {
      this.line(runtime.id, " failed to build (the run's error says why): change a pin and Run again");
    } else if (runtime.built === true) {
      this.line(runtime.id, " is built: runs are warm");
    } else if (runtime.built === false) {
      this.line(runtime.id, " is not built yet: the first run installs it");
    } else {
      this.line(runtime.id, ": the sandbox is unavailable");
    }
  }

  /** The set ``runtimeId`` is being built by the run under way. */
  building(runtimeId: string): void {
    this.line(runtimeId, " is building: the run below follows it");
  }

  private line(runtimeId: string, state: string): void {
    fill(this.runtimeLine, "package set ", h("code", { class: "runtime-id" }, runtimeId), state);
  }

  private add(): void {
    this.pins.push({ name: "", version: "" });
    this.render();
    const inputs = this.body.querySelectorAll<HTMLInputElement>("input.pin-name");
    inputs[inputs.length - 1]?.focus();
  }

  private render(): void {
    const python = this.language() === "python";
    fill(
      this.body,
      this.pins.map((pin, i) =>
        h(
          "tr",
          { "data-pin": String(i) },
          h("td", {}, h("input", { class: "pin-name", type: "text", value: pin.name, placeholder: python ? "numpy" : "lodash", "aria-label": `package ${i + 1} name`, oninput: (e: Event) => { pin.name = (e.target as HTMLInputElement).value; this.onChange(); } })),
          h("td", {}, h("input", { class: "pin-version", type: "text", value: pin.version, placeholder: python ? "1.26.4" : "4.17.21", "aria-label": `package ${i + 1} version`, oninput: (e: Event) => { pin.version = (e.target as HTMLInputElement).value; this.onChange(); } })),
          h("td", { class: "pin-state" }),
          h("td", {}, h("button", { class: "icon", "aria-label": `remove package ${i + 1}`, onclick: () => { this.pins.splice(i, 1); this.render(); this.onChange(0); } }, "×")),
        ),
      ),
    );
    if (!this.pins.length) fill(this.body, h("tr", {}, h("td", { colspan: 4, class: "muted" }, "no packages: the standard library only")));
  }
}
