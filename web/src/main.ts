// The playground's shell: header, screens (hash routed), light/dark, the API-key prompt.

import "./style.css";
import { api, apiKey, describe, onUnauthorized, setApiKey } from "./api";
import { fill, h, toast } from "./dom";
import { setEditorsDark } from "./editor";
import { EvaluatorsScreen } from "./evaluators";
import { JobsScreen } from "./jobs";
import { MigrateScreen } from "./migrate";
import { OnlineScreen } from "./online";
import { Playground } from "./playground";
import { ReviewScreen } from "./review";
import type { Evaluator } from "./types";

type Screen = "editor" | "evaluators" | "migrate" | "jobs" | "online" | "review";
const TITLES: Record<Screen, string> = { editor: "Editor", evaluators: "Evaluators", migrate: "Migrate", jobs: "Datasets & jobs", online: "Online", review: "Review" };
const THEME = "evaluator-host.theme";

function initialDark(): boolean {
  const stored = localStorage.getItem(THEME);
  if (stored) return stored === "dark";
  return window.matchMedia?.("(prefers-color-scheme: dark)").matches ?? false;
}

let dark = initialDark();
document.documentElement.dataset.theme = dark ? "dark" : "light";

const playground = new Playground(dark);
const evaluators = new EvaluatorsScreen(playground.cases, (e) => openInEditor(e), (e) => migrateEvaluator(e));
const migrate = new MigrateScreen(dark, () => void evaluators.refresh(), (definition) => {
  playground.openUnsaved(definition);
  location.hash = "#editor";
});
const jobs = new JobsScreen();
const online = new OnlineScreen();
const review = new ReviewScreen();
const screens: Record<Screen, { element: HTMLElement; refresh?: () => Promise<void>; setVisible?: (shown: boolean) => void }> = {
  editor: playground,
  evaluators,
  migrate,
  jobs,
  online,
  review,
};
playground.onSaved = () => void evaluators.refresh();

function openInEditor(evaluator: Evaluator): void {
  playground.open(evaluator);
  location.hash = "#editor";
}

function migrateEvaluator(evaluator: Evaluator): void {
  migrate.load(evaluator);
  location.hash = "#migrate";
}

const tabs = (Object.keys(TITLES) as Screen[]).map((s) => h("a", { href: `#${s}`, class: "nav-tab", "data-screen": s }, TITLES[s]));
const themeButton = h("button", { class: "icon-text", "aria-label": "switch light/dark", title: "Light / dark", onclick: () => toggleTheme() });
const keyButton = h("button", { class: "icon-text", onclick: () => askForKey() });
const health = h("span", { class: "health muted" });
const main = h("main", {});

function renderChrome(): void {
  themeButton.textContent = dark ? "☀ Light" : "☾ Dark";
  keyButton.textContent = apiKey() ? "API key ✓" : "API key";
  keyButton.title = apiKey() ? "A key is set for this tab" : keysRequired ? "This service needs an API key" : "Optional: this service is open";
}

function toggleTheme(): void {
  dark = !dark;
  localStorage.setItem(THEME, dark ? "dark" : "light");
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  setEditorsDark(dark);
  renderChrome();
}

function current(): Screen {
  const name = location.hash.slice(1) as Screen;
  return name in TITLES ? name : "editor";
}

function show(): void {
  const name = current();
  for (const [key, screen] of Object.entries(screens)) {
    screen.element.hidden = key !== name;
    screen.setVisible?.(key === name); // a screen that polls runs only while shown
  }
  for (const tab of tabs) tab.setAttribute("aria-current", tab.dataset.screen === name ? "page" : "false");
  document.title = `${TITLES[name]} · evaluator-host`;
  void screens[name].refresh?.();
}

// -- the API key -----------------------------------------------------------------------------

const keyInput = h("input", { type: "password", autocomplete: "off", "aria-label": "API key", placeholder: "Bearer key" });
const remember = h("input", { type: "checkbox", "aria-label": "remember on this device" });
const keyError = h("p", { class: "error-text", role: "alert" });
const keyTitle = h("h2", { id: "key-title" }, "API key");
const keyText = h("div", { class: "key-text" });
let keysRequired = false; // the service answered 401: keys are on

/** What the dialog says: a key is required (the service answered 401), or optional on an open service. */
function renderKeyText(): void {
  keyTitle.textContent = keysRequired ? "API key required" : "API key (optional)";
  if (keysRequired) {
    fill(
      keyText,
      h("p", {}, "This service has API keys configured: every /v1 call needs one. The key stays in this browser (this tab, unless you tick remember)."),
      h(
        "p",
        { class: "hint workspace-note" },
        "Each key sees its own workspace. Everything stored before keys were turned on (evaluators, datasets, jobs) is in the default workspace ",
        h("code", {}, "ws_default"),
        ": use a key from EVALUATOR_HOST_API_KEYS to see it.",
      ),
    );
  } else {
    fill(
      keyText,
      h("p", {}, "This service is open: no API keys are configured, so the page works without one (in the default workspace, ws_default). Set a key only to reach a workspace an operator gave you a key for."),
    );
  }
}
const dialog = h(
  "dialog",
  { class: "key-dialog", "aria-labelledby": "key-title" },
  h(
    "form",
    { method: "dialog", onsubmit: (e: Event) => { e.preventDefault(); void saveKey(); } },
    keyTitle,
    keyText,
    keyInput,
    h("label", { class: "check" }, remember, " remember on this device"),
    keyError,
    h("div", { class: "toolbar" }, h("button", { type: "button", onclick: () => { setApiKey(null); renderChrome(); dialog.close(); } }, "Forget key"), h("span", { class: "spacer" }), h("button", { class: "primary", type: "submit" }, "Use this key")),
  ),
);

function askForKey(message = ""): void {
  renderKeyText();
  keyError.textContent = message;
  keyInput.value = "";
  if (!dialog.open) dialog.showModal();
  keyInput.focus();
}

async function saveKey(): Promise<void> {
  const key = keyInput.value.trim();
  if (!key) {
    keyError.textContent = "Type the key first.";
    return;
  }
  setApiKey(key, remember.checked);
  try {
    await api("GET", "/v1/evaluators?limit=1");
  } catch (exc) {
    setApiKey(null);
    keyError.textContent = `That key was refused: ${describe(exc)}`;
    return;
  }
  dialog.close();
  renderChrome();
  toast("API key accepted");
  playground.schedule(0);
  show();
}

onUnauthorized(() => {
  keysRequired = true;
  const had = apiKey();
  if (had) setApiKey(null);
  renderChrome();
  if (!dialog.open) askForKey(had ? "The stored key was refused; type a valid one." : "");
});

// -- boot ------------------------------------------------------------------------------------

const app = document.getElementById("app") as HTMLElement;
fill(
  app,
  h(
    "header",
    { class: "top" },
    h("a", { href: "#editor", class: "brand" }, "evaluator-host"),
    h("nav", { "aria-label": "screens" }, tabs),
    h("span", { class: "spacer" }),
    health,
    keyButton,
    themeButton,
  ),
  main,
  dialog,
);
fill(main, playground.element, evaluators.element, migrate.element, jobs.element, online.element, review.element);
document.addEventListener("keydown", (e) => {
  if (current() === "editor") playground.handleKey(e);
  if (current() === "review") review.handleKey(e);
});
window.addEventListener("hashchange", show);
renderChrome();
show();
fetch("/healthz")
  .then((r) => r.json())
  .then((info: { backend: string; isolation: string }) => {
    health.textContent = `${info.backend} sandbox`;
    health.title = info.isolation;
  })
  .catch(() => (health.textContent = "service unreachable"));
