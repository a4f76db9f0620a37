// A tiny DOM builder: h("button", {class: "primary", onclick: run}, "Run").

export type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, unknown>;

const PROPS = new Set(["value", "checked", "disabled", "hidden", "selected", "textContent", "title", "open"]);

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value as EventListener);
    } else if (PROPS.has(name)) {
      (el as unknown as Record<string, unknown>)[name] = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Element, children: (Child | Child[])[]): void {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace every child of ``el``. */
export function fill(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

export function option(value: string, label: string, selected = false): HTMLOptionElement {
  return h("option", { value, selected }, label);
}

/** A number for people: at most ``digits`` decimals, no trailing zeros. */
export function num(value: number | null | undefined, digits = 3): string {
  if (value === null || value === undefined) return "—";
  return Number(value.toFixed(digits)).toString();
}

export function json(value: unknown): string {
  return JSON.stringify(value, null, 2);
}

/** A short one-line JSON rendering, cut at ``max`` characters. */
export function brief(value: unknown, max = 80): string {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** ``item``'s name, with its id when another item of ``all`` has the same name (names may repeat). */
export function named(item: { id: string; name: string }, all: { id: string; name: string }[]): string {
  const twins = all.filter((other) => other.name === item.name).length;
  return twins > 1 ? `${item.name} · ${item.id}` : item.name;
}

export function when(date: string): string {
  return new Date(date).toLocaleString();
}

let toastTimer: number | undefined;

/** A short message at the bottom of the page (role=status, so screen readers hear it). */
export function toast(message: string, kind: "ok" | "error" = "ok"): void {
  let el = document.getElementById("toast");
  if (!el) {
    el = h("div", { id: "toast", role: "status", "aria-live": "polite" });
    document.body.append(el);
  }
  el.textContent = message;
  el.className = `toast ${kind} shown`;
  window.clearTimeout(toastTimer);
  toastTimer = window.setTimeout(() => el?.classList.remove("shown"), 4000);
}
