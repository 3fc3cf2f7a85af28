// The run page follows a queued or running run: every 2 s it reads GET /api/v1/runs/{id} (same origin,
// session cookie) and swaps in the status, step, curves (server-drawn SVG), log tail and error.
(function () {
  "use strict";
  const root = document.getElementById("run");
  if (!root) return;
  const finished = ["succeeded", "failed", "cancelled"];
  const text = (id, value) => { const el = document.getElementById(id); if (el) el.textContent = value; };

  async function poll() {
    let run;
    try {
      const response = await fetch(root.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) return schedule();
      run = await response.json();
    } catch (error) {
      return schedule();
    }
    const status = document.getElementById("run-status");
    status.textContent = run.status;
    status.className = "status status-" + run.status;
    text("run-step", run.steps ?? "—");
    text("run-exit-code", run.exit_code ?? "—");
    text("log-tail", run.log_tail || "");
    text("zero-variance-share", run.zero_variance_share == null ? "—" : run.zero_variance_share.toFixed(3));
    for (const [name, svg] of Object.entries(run.charts || {})) {
      const holder = document.getElementById("chart-" + name);
      if (holder && holder.innerHTML !== svg) holder.innerHTML = svg;  // drawn and escaped by the server
    }
    const error = document.getElementById("run-error");
    error.textContent = run.error || "";
    error.hidden = !run.error;
    if (finished.includes(run.status)) {
      // The lineage, ledger and eval table are complete now: show the page as the server draws it.
      if (root.dataset.status !== run.status) window.location.reload();
      return;
    }
    schedule();
  }
  function schedule() { window.setTimeout(poll, 2000); }
  if (!finished.includes(root.dataset.status)) schedule();
})();
