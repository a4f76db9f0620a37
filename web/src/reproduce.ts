// Issue 35 on the page: a job's runtime lock to download (requirements.txt or package-lock.json, and a
// CycloneDX SBOM) and a stored row replayed on its exact revision and runtime ("identical" or what changed).
// Downloads go through ``download`` (the API key in a header, never in a URL).

import { api, describe, download } from "./api";
import { fill, h, toast } from "./dom";
import type { Replay } from "./types";

/** ``runtime python-…: lock requirements.txt · SBOM (CycloneDX)`` — each a download of GET /v1/runtimes/{id}/lock. */
export function lockView(runtimeId: string): HTMLElement {
  const node = runtimeId.startsWith("node-");
  const save = (format: string, filename: string) => async () => {
    try {
      await download(`/v1/runtimes/${encodeURIComponent(runtimeId)}/lock?format=${format}`, filename);
    } catch (exc) {
      toast(describe(exc), "error");
    }
  };
  const link = (label: string, format: string, filename: string) =>
    h("button", { class: "link", "data-lock": format, onclick: () => void save(format, filename)() }, label);
  return h(
    "p",
    { class: "runtime-lock muted" },
    "runtime ",
    h("code", { class: "runtime-id" }, runtimeId),
    " · lock: ",
    node ? link("package-lock.json", "package-lock", "package-lock.json") : link("requirements.txt", "requirements", "requirements.txt"),
    " · ",
    link("SBOM (CycloneDX)", "cyclonedx", `${runtimeId}.cdx.json`),
    " · ",
    link("JSON", "json", `${runtimeId}.lock.json`),
  );
}

/** A row's "Replay" button: runs POST /v1/results/replay and shows the verdict in its place. */
export function replayCell(jobId: string, index: number): HTMLElement {
  const cell = h("td", { class: "replay-cell" });
  const button = h(
    "button",
    {
      class: "link",
      title: "run this row again on the job's revision and runtime, and compare",
      onclick: async () => {
        button.disabled = true;
        button.textContent = "replaying…";
        try {
          const replay = await api<Replay>("POST", "/v1/results/replay", { job_id: jobId, index });
          fill(
            cell,
            replay.identical
              ? h("span", { class: "replay-verdict pass", title: `revision ${replay.revision} on ${replay.runtime_id}` }, "✓ identical")
              : h("span", { class: "replay-verdict fail", title: replay.differences.join("\n") }, "✗ differs: ", replay.differences.join("; ")),
          );
        } catch (exc) {
          fill(cell, h("span", { class: "replay-verdict error-text" }, describe(exc)));
        }
      },
    },
    "Replay",
  );
  cell.append(button);
  return cell;
}
