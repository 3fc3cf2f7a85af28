// What the reviewer and adjudication pages share: calls to /api/v1/ with the session's CSRF token, and a
// fresh client key per judgment or ruling (a retry with the same key is never counted twice).
window.PairwiseApi = (function () {
  "use strict";

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  async function call(method, path, body) {
    const response = await fetch(`/api/v1/${path}`, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    return { status: response.status, data, headers: response.headers };
  }

  // No answer at all (null), or one that says "not now": worth sending again with the same client key.
  // Any other 4xx is a refusal that sending again would not change.
  function notAnswered(result) {
    return result === null || result.status >= 500 || result.status === 408 || result.status === 429;
  }

  function newClientKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16)); // plain http off localhost has no randomUUID
    b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  return { call, newClientKey, notAnswered };
})();
