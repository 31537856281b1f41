// rdmem inspector: the few things a page cannot do without a script. Everything else is plain HTML.
"use strict";
(function () {
  const base = document.body.dataset.base;
  const status = document.getElementById("status");
  const say = (text) => { status.textContent = text; setTimeout(() => { if (status.textContent === text) status.textContent = ""; }, 6000); };

  // Actions are JSON requests from this page: no other site can forge them.
  async function post(path, body) {
    const res = await fetch(base + "/api/" + path, {
      method: "POST", credentials: "same-origin", headers: { "content-type": "application/json" }, body: JSON.stringify(body || {}),
    });
    if (!res.ok) {
      let message = res.status + " " + res.statusText;
      try { message = (await res.json()).error.message; } catch (e) { /* not JSON */ }
      throw new Error(message);
    }
    return res;
  }

  // Budget, query and policy redraw the page when they change (the form works without this too).
  for (const form of document.querySelectorAll("form[data-autosubmit]")) {
    form.addEventListener("change", (event) => { if (event.target.matches("select, input[type=number]")) form.requestSubmit(); });
  }

  // Delete, behind a confirmation that says it is permanent.
  const dialog = document.getElementById("confirm");
  let pending = null;
  for (const button of document.querySelectorAll("[data-delete]")) {
    button.hidden = false;
    button.addEventListener("click", () => {
      const { session, id } = button.dataset;
      pending = { session, id: id || null, button };
      const results = id && document.getElementById("msg-" + id)?.querySelector(":scope > ol.results");
      dialog.querySelector("#confirm-text").textContent = id
        ? `Delete message \u2068${id}\u2069 of session “\u2068${session}\u2069”? It leaves the session, its search index and every future context.`
          + (results ? " Its tool results stay: delete each of them too to remove them." : "")
        : `Delete session “\u2068${session}\u2069” and every message in it?`;
      dialog.querySelector("#confirm-error").textContent = "";
      dialog.showModal();
    });
  }
  dialog.addEventListener("close", () => { if (pending && pending.button.isConnected) pending.button.focus(); });
  dialog.querySelector("[data-confirm]").addEventListener("click", async () => {
    const what = pending;
    try {
      await post("delete", { session: what.session, id: what.id });
    } catch (err) {
      dialog.querySelector("#confirm-error").textContent = err.message;
      return;
    }
    dialog.close();
    if (!what.id) { location.href = base + "/?deleted=" + encodeURIComponent(what.session); return; }
    const row = document.getElementById("msg-" + what.id);
    if (row) {  // a tool call's results stay stored: they stay shown, where the page shows them on its next load
      const results = row.querySelector(":scope > ol.results");
      if (results) row.after(...results.children);
      row.remove();
    }
    say(`Deleted message \u2068${what.id}\u2069.`);
  });

  // Sign in and out.
  const login = document.getElementById("login");
  if (login) {
    login.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await post("login", { key: login.elements.key.value });
        location.href = login.dataset.next;
      } catch (err) { say(err.message); login.elements.key.setAttribute("aria-invalid", "true"); }
    });
  }
  for (const button of document.querySelectorAll("[data-logout]")) {
    button.hidden = false;
    button.addEventListener("click", async () => { await post("logout"); location.href = base + "/login"; });
  }

  // The rate-distortion curve is computed in the background: show it when it is there.
  const curve = document.querySelector("[data-curve-pending]");
  if (curve) {
    const poll = async () => {
      const res = await fetch(curve.dataset.src, { credentials: "same-origin" });
      const holder = document.createElement("div");
      holder.innerHTML = await res.text();
      const fresh = holder.querySelector("#curve");
      if (fresh) document.getElementById("curve").replaceWith(fresh);
      if (res.status === 202) setTimeout(poll, 2000);
    };
    setTimeout(poll, 1500);
  }
})();
