// The reviewer page: asks the API for the next assignment, takes a judgment by mouse or keyboard,
// and submits it with a client key so that a retry never makes a second judgment.
(function () {
  "use strict";
  const root = document.getElementById("review");
  const slug = root.dataset.slug;
  const minRationale = Number(root.dataset.minRationale);
  const form = document.getElementById("judgment-form");
  const rationale = document.getElementById("rationale");
  const message = document.getElementById("message");
  const criteriaList = document.getElementById("criteria-choices");
  let current = null; // the assignment on screen
  let clientKey = null; // one per attempt at judging `current`
  let cursor = 0; // which criterion row the H/L/T keys set
  let busy = false;

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function newClientKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  async function api(method, path, body) {
    const response = await fetch(`/api/v1/${path}`, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    return { status: response.status, data, headers: response.headers };
  }

  function say(text, kind) {
    message.textContent = text || "";
    message.className = `message ${kind || ""}`;
  }

  // A complaint about the form is stale once the reviewer changes it.
  function clearComplaint() {
    if (message.classList.contains("error") && current) say("");
  }

  function showProgress(progress) {
    document.getElementById("progress").textContent =
      `Judged ${progress.judged} · ${progress.remaining}${progress.remaining_is_at_least ? "+" : ""} left`;
  }

  function renderCriteria(criteria) {
    document.getElementById("criteria-version").textContent = `(version ${criteria.version})`;
    document.getElementById("instructions").textContent = criteria.instructions;
    // Each criterion's text sits with its own left/right/tie choice, so the reviewer reads and picks in one place.
    criteriaList.replaceChildren(...criteria.items.map((item, i) => {
      const row = document.createElement("li");
      row.className = "criterion";
      row.dataset.key = item.key;
      const text = document.createElement("p");
      const key = document.createElement("strong");
      key.textContent = item.key;
      text.append(key, ` ${item.text}`);
      const options = document.createElement("div");
      options.className = "options";
      for (const [value, label, hint] of [["left", "Left", "H"], ["right", "Right", "L"], ["tie", "Tie", "T"]]) {
        const option = document.createElement("label");
        const radio = document.createElement("input");
        radio.type = "radio";
        radio.name = `criterion-${item.key}`;
        radio.value = value;
        radio.addEventListener("change", () => moveCursor(i));
        const kbd = document.createElement("kbd");
        kbd.className = "hint";
        kbd.textContent = hint;
        option.append(radio, ` ${label} `, kbd);
        options.append(option);
      }
      row.append(text, options);
      return row;
    }));
    moveCursor(0);
  }

  function criterionRows() {
    return criteriaList.querySelectorAll(".criterion");
  }

  function moveCursor(index, { reveal = false } = {}) {
    const rows = criterionRows();
    if (!rows.length) return;
    cursor = Math.max(0, Math.min(rows.length - 1, index));
    rows.forEach((row, i) => row.classList.toggle("cursor", i === cursor));
    if (reveal) rows[cursor].scrollIntoView({ block: "nearest" });
  }

  function show(assignment) {
    current = assignment;
    clientKey = newClientKey();
    form.reset();
    // A chat prompt shows who said each turn; a one-message prompt is just its text.
    const labelled = assignment.prompt.length > 1;
    document.getElementById("prompt").replaceChildren(...assignment.prompt.map((m) => {
      const turn = document.createElement("div");
      turn.className = "turn";
      if (labelled) {
        const role = document.createElement("div");
        role.className = "turn-role";
        role.textContent = m.role;
        turn.append(role);
      }
      const body = document.createElement("div");
      body.innerHTML = m.html; // sanitised on the server
      turn.append(body);
      return turn;
    }));
    document.getElementById("left").innerHTML = assignment.left.html; // sanitised on the server
    document.getElementById("right").innerHTML = assignment.right.html;
    renderCriteria(assignment.criteria);
    showProgress(assignment.progress);
    form.hidden = false;
    document.getElementById("done").hidden = true;
    // Submitting from the rationale box (Ctrl+Enter) would leave it focused, and the next pair's
    // shortcut keys would be typed into it instead of choosing.
    if (form.contains(document.activeElement)) document.activeElement.blur();
    window.scrollTo(0, 0);
  }

  async function loadNext() {
    const { status, data, headers } = await api("GET", `projects/${slug}/assignments/next`);
    if (status === 204) {
      current = null;
      form.hidden = true;
      document.getElementById("done").hidden = false;
      if (form.contains(document.activeElement)) document.activeElement.blur();
      const judged = headers.get("X-Judged");
      document.getElementById("progress").textContent = `Judged ${judged} · 0 left`;
      return;
    }
    if (status !== 200) { say((data && data.detail) || `Could not load the next pair (${status}).`, "error"); return; }
    show(data);
  }

  function setRadio(name, value) {
    const radio = form.querySelector(`input[name="${name}"][value="${value}"]`);
    if (radio) radio.checked = true;
  }

  function collect() {
    const choice = form.querySelector("input[name=choice]:checked");
    const strength = form.querySelector("input[name=strength]:checked");
    const criteria = {};
    for (const row of criterionRows()) {
      const picked = row.querySelector("input:checked");
      if (picked) criteria[row.dataset.key] = picked.value;
    }
    return {
      choice: choice ? choice.value : "",
      strength: strength ? Number(strength.value) : null,
      criteria,
      rationale: rationale.value,
      client_key: clientKey,
    };
  }

  function problem(judgment) {
    if (!judgment.choice) return "Choose left, right, tie or both bad (A, D, S, X).";
    if (["left", "right"].includes(judgment.choice) && !judgment.strength) return "Say how strongly: 1, 2 or 3.";
    const missing = current.criteria.items.filter((item) => !judgment.criteria[item.key]).map((item) => item.key);
    if (missing.length) return `Choose left, right or tie for: ${missing.join(", ")} (J/K to move, H/L/T to choose).`;
    if (judgment.rationale.trim().length < minRationale) return `Write at least ${minRationale} characters on why (R).`;
    return null;
  }

  async function submit() {
    if (!current || busy) return;
    const judgment = collect();
    const wrong = problem(judgment);
    if (wrong) { say(wrong, "error"); return; }
    busy = true;
    try {
      const { status, data } = await api("POST", `assignments/${current.id}/judgment`, judgment);
      if (status === 201) { say("Saved.", "ok"); await loadNext(); return; }
      if (status === 410 || status === 409) { say(data.detail, "error"); await loadNext(); return; }
      say((data && data.detail) || `Not saved (${status}); try again.`, "error");
    } catch (err) {
      say("Network problem: not saved yet. Submit again; it will not be counted twice.", "error");
    } finally {
      busy = false;
    }
  }

  async function undo() {
    if (busy) return;
    busy = true;
    try {
      const { status, data } = await api("POST", `projects/${slug}/judgments/undo`);
      if (status === 200) { show(data); say("Your last judgment was withdrawn; judge it again.", "ok"); }
      else say((data && data.detail) || `Could not undo (${status}).`, "error");
    } finally {
      busy = false;
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); submit(); });
  form.addEventListener("change", clearComplaint);
  document.getElementById("undo").addEventListener("click", undo);
  document.getElementById("undo-when-done").addEventListener("click", undo);

  const choiceKeys = { a: "left", arrowleft: "left", d: "right", arrowright: "right", s: "tie", x: "both_bad" };
  const criterionKeys = { h: "left", l: "right", t: "tie" };
  document.addEventListener("keydown", (event) => {
    const key = event.key.toLowerCase();
    if (key === "enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); submit(); return; }
    if (event.target === rationale) {
      if (key === "escape") rationale.blur();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (key === "u") { event.preventDefault(); undo(); return; }
    if (!current) return;
    if (key in choiceKeys) { setRadio("choice", choiceKeys[key]); }
    else if (["1", "2", "3"].includes(key)) { setRadio("strength", key); }
    else if (key === "j") { moveCursor(cursor + 1, { reveal: true }); }
    else if (key === "k") { moveCursor(cursor - 1, { reveal: true }); }
    else if (key in criterionKeys) {
      const row = criterionRows()[cursor];
      if (row) { setRadio(`criterion-${row.dataset.key}`, criterionKeys[key]); moveCursor(cursor + 1, { reveal: true }); }
    } else if (key === "r") { rationale.focus(); }
    else return;
    event.preventDefault();
    clearComplaint();
  });

  loadNext();
})();
