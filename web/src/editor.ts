// CodeMirror 6 with the three languages, light/dark, definition errors as lint underlines,
// a runtime error's line highlighted, and Ctrl/Cmd+Enter bound to the page's "run".

import { javascript } from "@codemirror/lang-javascript";
import { python } from "@codemirror/lang-python";
import { type Diagnostic, lintGutter, setDiagnostics } from "@codemirror/lint";
import { Compartment, EditorState, type Extension, Prec, StateEffect, StateField } from "@codemirror/state";
import { oneDark } from "@codemirror/theme-one-dark";
import { Decoration, type DecorationSet, EditorView, keymap } from "@codemirror/view";
import { basicSetup } from "codemirror";
import type { Language, Problem } from "./types";

const setErrorLine = StateEffect.define<number | null>();

const errorLine = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(deco, tr) {
    let next = deco.map(tr.changes);
    for (const effect of tr.effects) {
      if (!effect.is(setErrorLine)) continue;
      const line = effect.value;
      if (line === null || line < 1 || line > tr.state.doc.lines) {
        next = Decoration.none;
      } else {
        const at = tr.state.doc.line(line).from;
        next = Decoration.set([Decoration.line({ class: "cm-runtime-error" }).range(at)]);
      }
    }
    if (tr.docChanged && !tr.effects.some((e) => e.is(setErrorLine))) next = Decoration.none;
    return next;
  },
  provide: (field) => EditorView.decorations.from(field),
});

function languageSupport(language: Language): Extension {
  if (language === "python") return python();
  return javascript({ typescript: language === "typescript" });
}

const themes = new Set<CodeEditor>();

/** Switch every editor on the page to dark or light. */
export function setEditorsDark(dark: boolean): void {
  for (const editor of themes) editor.setDark(dark);
}

export class CodeEditor {
  readonly view: EditorView;
  private readonly language = new Compartment();
  private readonly theme = new Compartment();

  constructor(
    parent: HTMLElement,
    options: { doc: string; language: Language; dark: boolean; label: string; onChange?: () => void; onRun?: () => void },
  ) {
    const run = options.onRun;
    this.view = new EditorView({
      parent,
      state: EditorState.create({
        doc: options.doc,
        extensions: [
          Prec.highest(keymap.of(run ? [{ key: "Mod-Enter", run: () => (run(), true) }] : [])),
          basicSetup,
          lintGutter(),
          errorLine,
          this.language.of(languageSupport(options.language)),
          this.theme.of(options.dark ? oneDark : []),
          EditorView.contentAttributes.of({ "aria-label": options.label }),
          EditorView.updateListener.of((update) => {
            if (update.docChanged) options.onChange?.();
          }),
        ],
      }),
    });
    themes.add(this);
  }

  get code(): string {
    return this.view.state.doc.toString();
  }

  set code(text: string) {
    this.view.dispatch({ changes: { from: 0, to: this.view.state.doc.length, insert: text } });
  }

  setLanguage(language: Language): void {
    this.view.dispatch({ effects: this.language.reconfigure(languageSupport(language)) });
  }

  setDark(dark: boolean): void {
    this.view.dispatch({ effects: this.theme.reconfigure(dark ? oneDark : []) });
  }

  /** Underline each problem at its line and column (the whole line when no column is known). */
  setProblems(problems: Problem[]): void {
    const doc = this.view.state.doc;
    const diagnostics: Diagnostic[] = [];
    for (const problem of problems) {
      if (!problem.line || problem.line < 1) continue;
      const line = doc.line(Math.min(problem.line, doc.lines));
      let from = problem.column ? Math.min(line.from + problem.column - 1, line.to) : line.from;
      let to = problem.column ? Math.min(from + 1, line.to) : line.to;
      if (from === to && from > line.from) from -= 1; // the end of a line: mark its last character
      if (from === to && to < doc.length) to += 1;
      diagnostics.push({ from, to, severity: "error", message: `${problem.type}: ${problem.message}`, source: problem.type });
    }
    this.view.dispatch(setDiagnostics(this.view.state, diagnostics));
  }

  /** Highlight ``line`` as where the code failed at run time (null clears it; any edit clears it), and
   * scroll the editor's own scroller to it: the page stays where it is (on the run's outcome). */
  markErrorLine(line: number | null): void {
    this.view.dispatch({ effects: setErrorLine.of(line) });
    const doc = this.view.state.doc;
    if (line === null || line < 1 || line > doc.lines) return;
    this.view.requestMeasure({
      read: (view) => view.lineBlockAt(doc.line(line).from).top,
      write: (top, view) => {
        view.scrollDOM.scrollTop = Math.max(0, top - view.scrollDOM.clientHeight / 2);
      },
    });
  }

  /** Put the cursor at the start of ``line`` and scroll it into view. */
  goto(line: number, focus = true): void {
    const doc = this.view.state.doc;
    if (line < 1 || line > doc.lines) return;
    const at = doc.line(line).from;
    this.view.dispatch({ selection: { anchor: at }, effects: EditorView.scrollIntoView(at, { y: "center" }) });
    if (focus) this.view.focus();
  }
}
