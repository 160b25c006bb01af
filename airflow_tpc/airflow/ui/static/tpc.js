// airflow-tpc pages: follow Airflow's colour mode, and abort through an in-page dialog.
// (Airflow's external-view iframe is sandboxed without allow-modals: the browser's confirm is
// blocked there, so the confirmation is a <dialog>.)
(function () {
  "use strict";
  function theme() {
    try {  // same-origin iframe inside Airflow's UI: use the UI's own mode
      const cls = window.parent.document.documentElement.classList;
      if (window.parent !== window && (cls.contains("dark") || cls.contains("light"))) {
        return cls.contains("dark") ? "dark" : "light";
      }
    } catch (e) { /* not framed by Airflow */ }
    return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  document.documentElement.dataset.theme = theme();

  let pending = null;
  function say(text, isError) {
    const message = document.getElementById("tpc-message");
    message.textContent = text;
    message.classList.toggle("error", Boolean(isError));
  }
  window.tpcAskAbort = function (button) {
    pending = button;
    document.getElementById("tpc-abort-txn").textContent =
      button.dataset.txn + " of " + button.dataset.target;
    document.getElementById("tpc-abort-dialog").showModal();
  };
  window.tpcCancelAbort = function () {
    pending = null;
    document.getElementById("tpc-abort-dialog").close();
  };
  window.tpcConfirmAbort = async function () {
    const button = pending;
    pending = null;
    document.getElementById("tpc-abort-dialog").close();
    if (!button) { return; }
    const csrf = document.querySelector('meta[name="tpc-csrf"]').content;
    button.disabled = true;
    try {
      const response = await fetch(button.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-Airflow-TPC": csrf},
        // The transaction's full identity (task or target + namespace, epoch, attempt,
        // txn id): a run holds the same epoch and attempt in every target it writes.
        body: button.dataset.identity,
      });
      const body = await response.json().catch(() => ({}));
      if (!response.ok) {
        const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body);
        say("Abort failed (" + response.status + "): " + detail, true);
        button.disabled = false;
        return;
      }
      if (body.refused && body.refused.length) {
        say("Not aborted: " + body.refused.map((r) => r.error).join("; "), true);
        button.disabled = false;
        return;
      }
      // A group's abort answers with its group (every member aborted with it).
      const what = body.group ? "group " + body.group : body.target;
      if (body.outcome === "already aborted") {
        say(body.txn_id + " of " + what + " was already aborted.", false);
      } else {
        say("Aborted " + body.txn_id + " of " + what + ".", false);
      }
      window.location.reload();
    } catch (err) {
      say("Abort failed: " + err, true);
      button.disabled = false;
    }
  };
})();
