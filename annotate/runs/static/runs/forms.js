// Forms that start work (launch, evaluate, compare, make a task set, export, cancel): while the request is in
// flight the button that sent it is disabled and says so, so a second click never sends it twice; a form with
// data-confirm (Cancel run) asks first. A page shown again from the browser's history gets its buttons back.
(function () {
  "use strict";
  const forms = document.querySelectorAll("form[method=post]");
  function buttonsOf(form) {
    return form.querySelectorAll("button[type=submit], button:not([type])");
  }
  for (const form of forms) {
    form.addEventListener("submit", (event) => {
      if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
        event.preventDefault();
        return;
      }
      const sender = event.submitter;
      // After the browser has read the form: a button disabled before that would leave its name=value out.
      setTimeout(() => {
        for (const button of buttonsOf(form)) {
          button.disabled = true;
          button.setAttribute("aria-busy", "true");
        }
        if (sender) {
          sender.dataset.label = sender.textContent;
          sender.textContent = sender.dataset.busy || "Sending…";
        }
      }, 0);
    });
  }
  window.addEventListener("pageshow", (event) => {
    if (!event.persisted) return;
    for (const form of forms) {
      for (const button of buttonsOf(form)) {
        button.disabled = false;
        button.removeAttribute("aria-busy");
        if (button.dataset.label) button.textContent = button.dataset.label;
      }
    }
  });
})();
