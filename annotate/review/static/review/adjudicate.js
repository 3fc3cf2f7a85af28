// The adjudication page: asks the API for the next split pair, shows the criteria in force and every
// reviewer's judgment in the adjudicator's own left/right order (with the side the reviewer saw), and
// submits a ruling with a client key (a retry is not a second one).
(function () {
  "use strict";
  const api = window.PairwiseApi.call;
  const newClientKey = window.PairwiseApi.newClientKey;
  const root = document.getElementById("adjudicate");
  const slug = root.dataset.slug;
  const minRationale = Math.max(1, Number(root.dataset.minRationale));
  const form = document.getElementById("ruling-form");
  const filter = document.getElementById("queue-filter");
  const message = document.getElementById("message");
  const SIDE = { left: "Left", right: "Right", tie: "Tie", both_bad: "Both bad" };
  const STRENGTH = { 1: "slightly", 2: "clearly", 3: "much" };
  let current = null;
  let clientKey = null;
  let busy = false;

  function say(text, kind) {
    message.textContent = text || "";
    message.className = `message ${kind || ""}`;
  }

  function queryString() {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(filter)) if (String(value).trim()) params.set(name, String(value).trim());
    const text = params.toString();
    return text ? `?${text}` : "";
  }

  function text(tag, content, className) {
    const element = document.createElement(tag);
    element.textContent = content;
    if (className) element.className = className;
    return element;
  }

  // Where its author saw the answer they chose: their rationale's "left" and "right" are their own.
  function seenBy(judgment) {
    const theirs = judgment.as_they_saw;
    if (["left", "right"].includes(judgment.choice)) {
      const also = theirs.same_order ? " too" : "";
      return `Chose the answer shown to you on the ${judgment.choice} (it was on their ${theirs.choice}${also}).`;
    }
    return theirs.same_order ? "Saw the answers in your order."
      : "Saw the answers the other way round (their left was your right).";
  }

  function card(title, judgment, criteriaVersion) {
    const box = document.createElement("article");
    box.className = "vote";
    box.append(text("h3", title));
    const pick = SIDE[judgment.choice] || judgment.choice;
    box.append(text("p", judgment.strength ? `${pick}, ${STRENGTH[judgment.strength]}` : pick, "pick"));
    box.append(text("p", seenBy(judgment), "seen small"));
    const entries = Object.entries(judgment.criteria || {});
    if (entries.length) {
      const list = document.createElement("dl");
      for (const [key, value] of entries) {
        const theirs = judgment.as_they_saw.criteria[key];
        const side = ["left", "right"].includes(value) ? `${SIDE[value]} (their ${theirs})` : (SIDE[value] || value);
        list.append(text("dt", key), text("dd", side));
      }
      box.append(list);
    }
    if (judgment.criteria_version && judgment.criteria_version !== criteriaVersion) {
      box.append(text("p", `Judged under criteria version ${judgment.criteria_version} (now version ${criteriaVersion}).`,
        "criteria-version small muted"));
    }
    if (judgment.rationale_flags && judgment.rationale_flags.length) {
      const flags = document.createElement("p");
      flags.className = "flags";
      for (const flag of judgment.rationale_flags) flags.append(text("span", flag.replace("_", " "), "badge"));
      box.append(flags);
    }
    box.append(text("p", judgment.rationale, "rationale-text"));
    return box;
  }

  // The instructions and criteria in force, as the reviewer page shows them (without the choices).
  function showCriteria(criteria) {
    document.getElementById("criteria-version").textContent = criteria.version ? `(version ${criteria.version})` : "";
    document.getElementById("instructions").textContent = criteria.instructions;
    document.getElementById("criteria-list").replaceChildren(...criteria.items.map((item) => {
      const row = document.createElement("li");
      row.className = "criterion";
      const line = document.createElement("p");
      line.append(text("strong", item.key), ` ${item.text}`);
      row.append(line);
      return row;
    }));
  }

  function show(data) {
    current = data;
    clientKey = newClientKey();
    form.reset();
    document.getElementById("prompt-id").textContent = `(${data.prompt_id})`;
    document.getElementById("prompt").replaceChildren(...data.prompt.map((m) => {
      const turn = document.createElement("div");
      turn.className = "turn";
      if (data.prompt.length > 1) turn.append(text("div", m.role, "turn-role"));
      const body = document.createElement("div");
      body.innerHTML = m.html; // sanitised on the server
      turn.append(body);
      return turn;
    }));
    showCriteria(data.criteria);
    document.getElementById("left").innerHTML = data.left.html; // sanitised on the server
    document.getElementById("right").innerHTML = data.right.html;
    document.getElementById("votes").textContent = "(" + Object.entries(data.votes)
      .filter(([, n]) => n).map(([choice, n]) => `${SIDE[choice]} ${n}`).join(" · ") + ")";
    document.getElementById("judgments").replaceChildren(
      ...data.judgments.map((j) => card(j.reviewer, j, data.criteria.version)));
    const earlier = document.getElementById("earlier");
    earlier.hidden = !data.earlier_rulings.length;
    document.getElementById("earlier-rulings").replaceChildren(
      ...data.earlier_rulings.map((r) => card(`Ruling ${r.revision} by ${r.adjudicator}`, r, data.criteria.version)));
    if (data.queue) {
      document.getElementById("queue").textContent =
        `${data.queue.waiting}${data.queue.waiting_is_at_least ? "+" : ""} more waiting`;
    }
    document.getElementById("pair").hidden = false;
    document.getElementById("done").hidden = true;
    window.scrollTo(0, 0);
  }

  async function loadNext() {
    const { status, data } = await api("GET", `projects/${slug}/adjudications/next${queryString()}`);
    if (status === 204) {
      current = null;
      document.getElementById("pair").hidden = true;
      document.getElementById("done").hidden = false;
      document.getElementById("queue").textContent = "0 waiting";
      return;
    }
    if (status !== 200) { say((data && data.detail) || `Could not load the next pair (${status}).`, "error"); return; }
    show(data);
  }

  async function rule() {
    if (!current || busy) return;
    const choice = form.querySelector("input[name=choice]:checked");
    const strength = form.querySelector("input[name=strength]:checked");
    const rationale = document.getElementById("ruling-rationale").value;
    if (!choice) { say("Choose left, right, tie or both bad.", "error"); return; }
    if (["left", "right"].includes(choice.value) && !strength) { say("Say how strongly: slightly, clearly or much.", "error"); return; }
    if (rationale.trim().length < minRationale) { say(`Write at least ${minRationale} characters on why.`, "error"); return; }
    busy = true;
    try {
      const { status, data } = await api("POST", `adjudications/${current.id}/ruling`, {
        choice: choice.value, strength: strength ? Number(strength.value) : null, rationale, client_key: clientKey,
      });
      if (status === 201) { say(`Ruled: ${SIDE[data.choice]}.`, "ok"); await loadNext(); return; }
      if (status === 409 || status === 410) { say(data.detail, "error"); await loadNext(); return; }
      say((data && data.detail) || `Not saved (${status}); try again.`, "error");
    } catch (err) {
      say("Network problem: not saved yet. Rule again; it will not be counted twice.", "error");
    } finally {
      busy = false;
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); rule(); });
  filter.addEventListener("submit", (event) => { event.preventDefault(); say(""); loadNext(); });
  loadNext();
})();
