// The reviewer page: asks the API for the next assignment, takes a judgment by mouse or keyboard,
// and submits it with a client key so that a retry never makes a second judgment. It also says how the
// rationale was written (seconds typing, characters typed and pasted: counts only, never the text),
// shows the expected answer after each item of a qualification round, and the reviewer's own standing.
// A judgment the server did not confirm (no answer, a 5xx, 408 or 429: it may or may not hold it) is kept in
// localStorage and sent again with its client key until the server answers; the server takes a repeat as the
// judgment it stored and says so (Idempotent-Replayed), and the page then says the server already had it.
// Every message about a judgment says what the server holds: "Saved" only after its 201.
// A pair once saved leaves the form at once (a second submit would reuse its client key), and the next
// pair, the standing and the kept judgments are asked for again by themselves until the server answers.
(function () {
  "use strict";
  const { call: api, newClientKey, notAnswered } = window.PairwiseApi;
  const root = document.getElementById("review");
  const slug = root.dataset.slug;
  const minRationale = Number(root.dataset.minRationale);
  const form = document.getElementById("judgment-form");
  const rationale = document.getElementById("rationale");
  const message = document.getElementById("message");
  // What is wrong with the form, shown beside the control it is about (the header may be scrolled away).
  const formProblem = document.getElementById("form-problem");
  const criteriaList = document.getElementById("criteria-choices");
  const decide = document.getElementById("decide");
  const undoButtons = [document.getElementById("undo"), document.getElementById("undo-when-done")];
  let current = null; // the assignment on screen
  let clientKey = null; // one per attempt at judging `current`
  let cursor = 0; // which criterion row the H/L/T keys set
  let busy = false;
  let feedbackShown = false; // a qualification answer's feedback is on screen; Enter goes on
  // Why the last judgment cannot be undone (a qualification answer, or none is left), until the next one
  // is saved; the undo buttons are hidden meanwhile. null: undo is offered.
  let undoBlocked = null;
  const QUALIFICATION_UNDO = "A qualification answer cannot be undone: its expected answer was shown to you.";

  // Kept judgments: one localStorage entry per client key, under this reviewer and this project only,
  // so a shared browser never sends (or counts) another reviewer's.
  const KEPT_PREFIX = `pairwise.kept.${root.dataset.reviewer}.${slug}.`;
  const RETRY_FIRST_MS = 1000;
  const RETRY_MOST_MS = 30000;
  const keptLine = document.getElementById("kept");
  const waiting = document.getElementById("waiting");
  let retryDelay = RETRY_FIRST_MS;
  let retryTimer = null;
  let sending = false;
  let waitingText = null; // what the page said while it waits for the next pair

  function keptKeys() {
    return Object.keys(localStorage).filter((key) => key.startsWith(KEPT_PREFIX));
  }

  function keptEntries() {
    const entries = [];
    for (const key of keptKeys()) {
      try { entries.push(JSON.parse(localStorage.getItem(key))); } catch { localStorage.removeItem(key); }
    }
    return entries.sort((x, y) => x.kept_at - y.kept_at); // in the order they were judged
  }

  function keep(assignmentId, judgment) {
    localStorage.setItem(KEPT_PREFIX + judgment.client_key,
                         JSON.stringify({ assignment: assignmentId, judgment, kept_at: Date.now() }));
    showKept();
  }

  function showKept() {
    const count = keptKeys().length;
    keptLine.textContent = count
      ? `${count} judgment${count === 1 ? "" : "s"} not confirmed by the server yet, kept in this browser` : "";
    keptLine.hidden = !count;
  }

  // How long to wait before asking again: a 503's Retry-After when it says, else `backoff`.
  function retryDelayMs(retryAfter, backoff) {
    const askedMs = Number(retryAfter) * 1000;
    return askedMs > 0 ? Math.min(askedMs, RETRY_MOST_MS) : backoff;
  }

  // Try again later, sooner at first; meanwhile the reviewer may try at once.
  function retryLater(retryAfter) {
    if (retryTimer !== null) return;
    const delay = retryDelayMs(retryAfter, retryDelay);
    retryDelay = Math.min(retryDelay * 2, RETRY_MOST_MS);
    retryTimer = setTimeout(retryNow, delay);
    waiting.hidden = false;
  }

  function retryNow() {
    clearTimeout(retryTimer);
    retryTimer = null;
    waiting.hidden = true;
    resume();
  }

  // A server's one-line detail as a sentence for the page.
  function sentence(text) {
    const line = String(text || "").trim();
    if (!line) return "";
    return line.charAt(0).toUpperCase() + line.slice(1) + (/[.!?]$/.test(line) ? "" : ".");
  }

  function showUndo() {
    for (const button of undoButtons) button.hidden = undoBlocked !== null;
  }

  // Sends the kept judgments, oldest first; true once none is left.
  async function sendKept() {
    if (sending) return false;
    sending = true;
    let saved = 0;
    let repeats = 0; // the server already held these: their earlier answer was lost on the way
    const refused = [];
    try {
      for (const entry of keptEntries()) {
        let result = null;
        try { result = await api("POST", `assignments/${entry.assignment}/judgment`, entry.judgment); } catch { /* no answer */ }
        if (notAnswered(result)) { retryLater(result && result.headers.get("Retry-After")); return false; }
        localStorage.removeItem(KEPT_PREFIX + entry.judgment.client_key);
        const detail = (result.data && result.data.detail) || `status ${result.status}`;
        if (result.status === 201) {
          if (result.headers.get("Idempotent-Replayed") === "true") repeats += 1; else saved += 1;
          undoBlocked = result.data && result.data.feedback ? QUALIFICATION_UNDO : null;
        } else if (result.status === 409) {
          refused.push(`the server already holds a different judgment of that pair, which stands (${detail})`);
        } else {
          refused.push(detail);
        }
      }
      retryDelay = RETRY_FIRST_MS;
      showUndo();
      const plural = (n) => `${n} kept judgment${n === 1 ? "" : "s"}`;
      const told = [
        saved ? `Saved ${plural(saved)}.` : "",
        repeats ? `The server already had ${repeats === 1 ? "your kept judgment" : plural(repeats)}: its answer ` +
          "was lost on the way, and it counts once." : "",
      ].filter(Boolean).join(" ");
      if (refused.length) say(`A kept judgment was not accepted: ${refused.join("; ")}.`, "error");
      else if (told) say(told, "ok");
      return true;
    } finally {
      sending = false;
      showKept();
    }
  }

  // Once the server answers again: the kept judgments first, then the next pair if none is on screen.
  async function resume() {
    if (!(await sendKept())) return;
    if (!current && !feedbackShown) await loadNext();
  }

  // How the rationale came to be: typed, or inserted some other way (paste, drop, an extension).
  // Counts and seconds only; what was typed or pasted is never read or sent.
  const PASTED_INPUT = new Set(["insertFromPaste", "insertFromDrop", "insertFromPasteAsQuotation", "insertFromYank"]);
  const TYPING_PAUSE_MS = 5000; // a longer pause is thinking, not typing
  let typing = null;
  function typingReset() {
    typing = { ms: 0, last: null, typed: 0, pasted: 0, pastes: 0, length: rationale.value.length };
  }
  rationale.addEventListener("input", (event) => {
    const now = performance.now();
    const added = Math.max(0, rationale.value.length - typing.length);
    typing.length = rationale.value.length;
    const kind = event.inputType || "";
    if (!kind.startsWith("insert") && kind !== "") {
      if (typing.last !== null && now - typing.last < TYPING_PAUSE_MS) typing.ms += now - typing.last;
      typing.last = now;
      return; // deleting or formatting: typing time, no characters
    }
    if (kind === "" || PASTED_INPUT.has(kind)) { typing.pasted += added; return; }
    typing.typed += added;
    if (typing.last !== null && now - typing.last < TYPING_PAUSE_MS) typing.ms += now - typing.last;
    typing.last = now;
  });
  rationale.addEventListener("paste", () => { typing.pastes += 1; });
  rationale.addEventListener("drop", () => { typing.pastes += 1; });

  // A sentence that names its keyboard shortcut: the keys go in a .hint span, which the style sheet hides where
  // no keyboard is likely (a phone), and the sentence reads whole either way.
  function keyed(text, keys) {
    const hint = document.createElement("span");
    hint.className = "hint";
    hint.textContent = ` (${keys})`;
    return [text, hint, "."];
  }

  // Plain text, or a keyed() sentence.
  function write(element, text) {
    element.replaceChildren(...(Array.isArray(text) ? text : [text || ""]));
  }

  function say(text, kind) {
    write(message, text);
    message.className = `message ${kind || ""}`;
  }

  // A complaint about the form is stale once the reviewer changes it.
  function clearComplaint() {
    formProblem.hidden = true;
    if (message.classList.contains("error") && current) say("");
  }

  // Beside `place` (inside it for a group of choices), in view, and focus on `control`: at any width the
  // reviewer sees why Ctrl+Enter did not submit, and can fix it at once.
  function complain(text, place, control) {
    write(formProblem, text);
    if (place.matches("fieldset, li")) place.append(formProblem); else place.after(formProblem);
    formProblem.hidden = false;
    if (control) control.focus({ preventScroll: true });
    formProblem.scrollIntoView({ block: "nearest" });
    if (control) control.scrollIntoView({ block: "nearest" });
  }

  // The header's counts (docs/agreement.md, "What the reviewer page counts"): live judgments and the pairs
  // left to judge; during a qualification round, its answers instead, which are not live judgments.
  function showProgress(progress, qualification) {
    document.getElementById("progress").textContent = qualification
      ? `Qualification: ${qualification.answered} of ${qualification.items} answered`
      : `Judged ${progress.judged} · ${progress.remaining}${progress.remaining_is_at_least ? "+" : ""} left`;
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

  function showQualification(q) {
    const line = document.getElementById("qualification");
    if (!q) { line.hidden = true; return; }
    line.textContent = `Qualification round, attempt ${q.attempt} of ${q.attempts}: item ${q.answered + 1} of ${q.items}` +
      ` (${q.correct} right so far; ${Math.round(q.pass_mark * 100)}% needed to pass). You will see the expected answer after each one.`;
    line.hidden = false;
  }

  function show(assignment) {
    current = assignment;
    clientKey = newClientKey();
    form.reset();
    formProblem.hidden = true;
    typingReset();
    hideCards();
    showUndo();
    showQualification(assignment.qualification);
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
    showProgress(assignment.progress, assignment.qualification);
    standingCheck(assignment.progress.judged);
    form.hidden = false;
    document.getElementById("done").hidden = true;
    // Submitting from the rationale box (Ctrl+Enter) would leave it focused, and the next pair's
    // shortcut keys would be typed into it instead of choosing.
    if (form.contains(document.activeElement)) document.activeElement.blur();
    window.scrollTo(0, 0);
  }

  // Nothing judgeable on screen: the pair on it is judged (or gone), so the form goes with it.
  function clearPair() {
    current = null;
    form.hidden = true;
    if (form.contains(document.activeElement)) document.activeElement.blur();
  }

  // `saved`: the judgment just made was stored, and the page says so while it waits for the next pair.
  async function loadNext({ saved = false } = {}) {
    let result = null;
    try { result = await api("GET", `projects/${slug}/assignments/next`); } catch { /* no answer */ }
    if (notAnswered(result)) {
      clearPair();
      waitingText = `${saved ? "Saved. " : ""}The server is not answering; the next pair comes by itself as soon as ` +
        "it is back.";
      say(waitingText, "error");
      retryLater(result && result.headers.get("Retry-After"));
      return;
    }
    if (waitingText !== null && message.textContent === waitingText) say("");
    waitingText = null;
    const { status, data, headers } = result;
    if (status === 204) {
      clearPair();
      showUndo();
      hideCards();
      document.getElementById("done").hidden = false;
      if (form.contains(document.activeElement)) document.activeElement.blur();
      const judged = headers.get("X-Judged");
      document.getElementById("progress").textContent = `Judged ${judged} · 0 left`;
      standingCheck(Number(judged));
      return;
    }
    if ((status === 403 || status === 409) && data && data.detail) { showHeld(data.detail); return; }
    if (status !== 200) {
      clearPair();
      say(`${sentence((data && data.detail) || `Could not load the next pair (${status})`)} Reload the page to try again.`,
          "error");
      return;
    }
    show(data);
  }

  function hideCards() {
    for (const id of ["done", "held", "feedback"]) document.getElementById(id).hidden = true;
    for (const side of ["left", "right"]) document.getElementById(`${side}-note`).hidden = true;
    decide.hidden = false;
    feedbackShown = false;
  }

  function showHeld(text) {
    current = null;
    form.hidden = true;
    hideCards();
    showQualification(null);
    document.getElementById("held-text").textContent = text;
    document.getElementById("held").hidden = false;
  }

  const CHOICE_WORDS = { tie: "a tie", both_bad: "both bad" };

  // The answer to a qualification item, beside the pair it is about: the answers stay on screen, each
  // marked as the expected one and/or the reviewer's own choice; the decision column goes.
  function showFeedback(feedback, judged, chosen) {
    const q = feedback.qualification;
    decide.hidden = true;
    showQualification(null);
    showProgress(judged.progress, q);
    if (form.contains(document.activeElement)) document.activeElement.blur();
    const verdict = document.getElementById("feedback-verdict");
    verdict.textContent = feedback.correct ? "Right." : "Not the expected answer.";
    verdict.className = `verdict ${feedback.correct ? "right" : "wrong"}`;
    document.getElementById("feedback-expected").textContent = ["left", "right"].includes(feedback.expected)
      ? `The expected answer is the one on the ${feedback.expected}.` : `The expected answer: ${feedback.expected}.`;
    document.getElementById("feedback-yours").textContent = ["left", "right"].includes(chosen)
      ? `You chose the one on the ${chosen}.` : `You chose ${CHOICE_WORDS[chosen] || chosen}.`;
    for (const side of ["left", "right"]) {
      const marks = [side === feedback.expected ? "Expected answer" : "", side === chosen ? "Your choice" : ""];
      const note = document.getElementById(`${side}-note`);
      const strong = document.createElement("strong");
      strong.textContent = marks.filter(Boolean).join(" · ");
      note.replaceChildren(strong);
      note.hidden = !strong.textContent;
    }
    document.getElementById("feedback-reason").textContent = feedback.reason ? `Why: ${feedback.reason}` : "";
    const next = {
      continue: `Attempt ${q.attempt}: ${q.correct} of ${q.answered} right so far, ${q.items - q.answered} to go.`,
      live: `You passed the qualification round (${q.correct} of ${q.answered} right). Live pairs come next.`,
      retry: `Attempt ${q.attempt} did not pass (${q.correct} of ${q.answered} right; ${Math.round(q.pass_mark * 100)}% needed). Attempt ${q.attempt + 1} of ${q.attempts} comes next.`,
      held: `You did not pass (${q.correct} of ${q.answered} right; ${Math.round(q.pass_mark * 100)}% needed) and have no attempt left. An admin must let you go on.`,
    }[q.next] || "";
    document.getElementById("feedback-attempt").textContent = next;
    document.getElementById("feedback").hidden = false;
    feedbackShown = true;
    document.getElementById("feedback-continue").focus();
  }

  let standingTimer = null;
  let standingDelay = RETRY_FIRST_MS;
  // What the standing on screen was read at: it says the header's count until the figures show, and then
  // changes only at `next_update_after`; asked for again only when it would say something new.
  let standingShown = null;

  function standingCheck(judged) {
    if (standingShown === null || standingTimer !== null) return; // not loaded yet: on its way
    const due = standingShown.available ? judged >= standingShown.next_update_after : judged !== standingShown.judged;
    if (due) showStanding();
  }

  async function showStanding() {
    clearTimeout(standingTimer);
    standingTimer = null;
    let result = null;
    try { result = await api("GET", `projects/${slug}/standing`); } catch { /* no answer */ }
    const text = document.getElementById("standing-text");
    const figures = document.getElementById("standing-figures");
    if (notAnswered(result)) {
      if (figures.hidden) text.textContent = "Your standing is not loaded yet; the page asks again by itself.";
      const delay = retryDelayMs(result && result.headers.get("Retry-After"), standingDelay);
      standingDelay = Math.min(standingDelay * 2, RETRY_MOST_MS);
      standingTimer = setTimeout(showStanding, delay);
      return;
    }
    standingDelay = RETRY_FIRST_MS;
    const { status, data } = result;
    if (status !== 200 || !data) { text.textContent = "Your standing could not be loaded."; return; }
    standingShown = data;
    if (!data.available) {
      text.textContent = data.reason.charAt(0).toUpperCase() + data.reason.slice(1) + ".";
      figures.hidden = true;
      return;
    }
    const labels = { gold_accuracy: "Gold accuracy", retest_consistency: "Retest consistency",
                     agreement_with_others: "Agreement with others" };
    figures.replaceChildren(...Object.entries(labels).map(([key, label]) => {
      const figure = data.figures[key];
      const box = document.createElement("div");
      box.dataset.figure = key;
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      if (figure.value === null) {
        dd.innerHTML = "—";
        const why = document.createElement("div");
        why.className = "small muted";
        why.textContent = figure.missing;
        dd.append(why);
      } else {
        dd.textContent = `${Math.round(figure.value * 100)}%`;
        const of = document.createElement("div");
        of.className = "small muted";
        of.textContent = `of ${figure.out_of} ${figure.of}`;
        dd.append(of);
      }
      box.append(dt, dd);
      return box;
    }));
    figures.hidden = false;
    // The figures move only every few judgments, so that none gives away the others' choice on one pair.
    text.textContent = `Over your first ${data.figures_after} judgments; next update after ${data.next_update_after}.`;
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
      typing: {
        typing_seconds: Math.round(typing.ms) / 1000, typed_chars: typing.typed,
        pasted_chars: typing.pasted, paste_events: typing.pastes,
      },
    };
  }

  // What the judgment still lacks: [what to say, where to say it, what to focus], or null.
  function problem(judgment) {
    const group = (name) => form.querySelector(`input[name=${name}]`).closest("fieldset");
    if (!judgment.choice) {
      return [keyed("Choose left, right, tie or both bad", "A, D, S, X"), group("choice"), form.querySelector("input[name=choice]")];
    }
    if (["left", "right"].includes(judgment.choice) && !judgment.strength) {
      return [keyed("Say how strongly: slightly, clearly or much", "1, 2, 3"), group("strength"), form.querySelector("input[name=strength]")];
    }
    const missing = current.criteria.items.filter((item) => !judgment.criteria[item.key]).map((item) => item.key);
    if (missing.length) {
      const rows = [...criterionRows()];
      const first = rows.findIndex((row) => row.dataset.key === missing[0]);
      moveCursor(first);
      return [keyed(`Choose left, right or tie for: ${missing.join(", ")}`, "J/K to move, H/L/T to choose"), rows[first],
              rows[first].querySelector("input")];
    }
    if (judgment.rationale.trim().length < minRationale) {
      return [keyed(`Write at least ${minRationale} characters on why`, "R"), rationale, rationale];
    }
    return null;
  }

  async function submit() {
    if (!current || busy) return;
    const judgment = collect();
    const wrong = problem(judgment);
    if (wrong) { complain(...wrong); return; }
    busy = true;
    try {
      let result = null;
      try { result = await api("POST", `assignments/${current.id}/judgment`, judgment); } catch { /* no answer */ }
      if (notAnswered(result)) {
        // Kept, not lost: the pair leaves the screen, and the next comes once this one is sent.
        keep(current.id, judgment);
        clearPair();
        say(`Not confirmed: ${result ? `the server is busy (${result.status})` : "the server did not answer"}. ` +
            "Your judgment is kept in this browser and sent again (with the same key, so it is never counted " +
            "twice) when the server is back.", "error");
        retryLater(result && result.headers.get("Retry-After"));
        return;
      }
      const { status, data } = result;
      if (status === 201) {
        // Stored: nothing on screen may be submitted again under this client key.
        const judged = current;
        current = null;
        undoBlocked = data.feedback ? QUALIFICATION_UNDO : null;
        say(result.headers.get("Idempotent-Replayed") === "true" ? "The server already had it." : "Saved.", "ok");
        if (data.feedback) { showFeedback(data.feedback, judged, data.choice); return; }
        await loadNext({ saved: true });
        return;
      }
      if (status === 410 || status === 409) {
        say(`Not saved. ${sentence(data && data.detail)}`, "error");
        await loadNext();
        return;
      }
      complain(sentence((data && data.detail) || `Not saved (${status}); change what it says and submit again`),
               form.querySelector(".actions"), document.getElementById("submit"));
    } finally {
      busy = false;
    }
  }

  async function undo() {
    if (busy) return;
    if (undoBlocked !== null) { say(undoBlocked, "error"); return; }
    busy = true;
    try {
      // The last judgment may be one kept here: undo only what the server has confirmed, or a withdrawal
      // and a kept copy of the same pair would both be on the way.
      if (keptKeys().length) {
        if (!(await sendKept())) {
          say(keyed("Nothing was undone: your last judgment is not confirmed by the server yet. Undo once it is", "U"),
              "error");
          return;
        }
        // Sent: the timer that would have sent it must not now ask for a next pair beside the undone one.
        clearTimeout(retryTimer);
        retryTimer = null;
        waiting.hidden = true;
      }
      let result = null;
      try { result = await api("POST", `projects/${slug}/judgments/undo`); } catch { /* no answer */ }
      if (notAnswered(result)) {
        say(keyed("The server did not answer, so nothing was undone; try again in a moment", "U"), "error");
        return;
      }
      const { status, data } = result;
      if (status === 200) { show(data); say("Your last judgment was withdrawn; judge it again.", "ok"); return; }
      const why = sentence((data && data.detail) || `Could not undo (${status})`);
      if (status === 409) { undoBlocked = why; showUndo(); } // nothing to undo until the next judgment is saved
      say(why, "error");
    } finally {
      busy = false;
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); submit(); });
  form.addEventListener("change", clearComplaint);
  form.addEventListener("input", clearComplaint);
  document.getElementById("undo").addEventListener("click", undo);
  document.getElementById("undo-when-done").addEventListener("click", undo);
  document.getElementById("retry-now").addEventListener("click", retryNow);
  document.getElementById("feedback-continue").addEventListener("click", () => {
    hideCards();
    say("");
    showStanding();
    loadNext();
  });

  const choiceKeys = { a: "left", arrowleft: "left", d: "right", arrowright: "right", s: "tie", x: "both_bad" };
  const criterionKeys = { h: "left", l: "right", t: "tie" };
  document.addEventListener("keydown", (event) => {
    const key = event.key.toLowerCase();
    if (feedbackShown) {
      if (key === "enter") { event.preventDefault(); document.getElementById("feedback-continue").click(); }
      return;
    }
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

  window.addEventListener("online", resume);

  typingReset();
  showKept();
  resume();
  showStanding();
})();
