// The row → case rule of job rows (a run frame's "rows" + "pick"), written once for Node; the Python
// one is runtimes/python/evaluator_harness/rows.py (the host's jobs/datasets/mapping.py loads that same file),
// and tests/protocol/rows.json holds the vectors both answer alike.
//
// A case is {inputs, outputs, trace, app_params}: inputs is the row; outputs the named column, or by
// default the row's "outputs" when it has that key, else its "output"; trace and app_params the named
// columns (by default "trace" and "app_params"); a column the row lacks is null; a row that is not an
// object is the case's inputs, every other field null. `own` is applied to a picked object or array
// (the harness: a copy, so that the case's fields share nothing with inputs).

function column(row, name, own) {
  if (!Object.hasOwn(row, name)) return null;
  const value = row[name];
  return own !== null && value !== null && typeof value === 'object' ? own(value) : value;
}

export function caseOf(row, pick, own = null) {
  if (row === null || typeof row !== 'object' || Array.isArray(row)) {
    return { inputs: row, outputs: null, trace: null, app_params: null };
  }
  const outputs = pick.outputs ?? null;
  let picked;
  if (outputs !== null) picked = column(row, outputs, own);
  else picked = Object.hasOwn(row, 'outputs') ? column(row, 'outputs', own) : column(row, 'output', own);
  return {
    inputs: row,
    outputs: picked,
    trace: column(row, pick.trace || 'trace', own),
    app_params: column(row, pick.app_params || 'app_params', own),
  };
}

export function pickedCases(rows, pick, own = null) {
  return rows.map((row) => caseOf(row, pick, own));
}
