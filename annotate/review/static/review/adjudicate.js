// The adjudication page: asks the API for the next split pair, shows every reviewer's judgment in the
// adjudicator's own left/right order, and submits a ruling with a client key (a retry is not a second one).
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

  function card(title, judgment) {
    const box = document.createElement("article");
    box.className = "vote";
    box.append(text("h3", title));
    const pick = SIDE[judgment.choice] || judgment.choice;
    box.append(text("p", judgment.strength ? `${pick}, ${STRENGTH[judgment.strength]}` : pick, "pick"));
    const entries = Object.entries(judgment.criteria || {});
    if (entries.length) {
      const list = document.createElement("dl");
      for (const [key, value] of entries) list.append(text("dt", key), text("dd", SIDE[value] || value));
      box.append(list);
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
    document.getElementById("left").innerHTML = data.left.html; // sanitised on the server
    document.getElementById("right").innerHTML = data.right.html;
    document.getElementById("votes").textContent = "(" + Object.entries(data.votes)
      .filter(([, n]) => n).map(([choice, n]) => `${SIDE[choice]} ${n}`).join(" · ") + ")";
    document.getElementById("judgments").replaceChildren(...data.judgments.map((j) => card(j.reviewer, j)));
    const earlier = document.getElementById("earlier");
    earlier.hidden = !data.earlier_rulings.length;
    document.getElementById("earlier-rulings").replaceChildren(
      ...data.earlier_rulings.map((r) => card(`Ruling ${r.revision} by ${r.adjudicator}`, r)));
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
