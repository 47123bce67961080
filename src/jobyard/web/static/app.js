// jobyard dashboard: the live parts, and confirmations. A static file (the page's
// Content-Security-Policy allows no inline script).
//
// An element with data-live="URL" is refreshed from URL?fragment=live every few seconds (the
// body's data-refresh, in ms), only while the tab is visible (document.visibilityState), and
// never while the user is typing in it or pressing a button. A fragment holding [data-live-stop] ends the polling.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh") || "3000", 10);
  var regions = Array.prototype.slice.call(document.querySelectorAll("[data-live]"));
  var state = document.getElementById("live-state");
  var timer = null;
  var busy = false;
  // A press on the page (a button's mousedown not yet followed by its click): a region
  // replaced under it would swallow the click, so no region is replaced until it ends.
  var pressed = false;
  document.addEventListener("pointerdown", function () { pressed = true; }, true);
  document.addEventListener("pointerup", function () {
    window.setTimeout(function () { pressed = false; }, 0);  // after the click it makes
  }, true);
  document.addEventListener("pointercancel", function () { pressed = false; }, true);

  function fragmentUrl(url) {
    return url + (url.indexOf("?") >= 0 ? "&" : "?") + "fragment=live";
  }

  function focusedIn(el) {
    var active = document.activeElement;
    return active && active !== body && el.contains(active) &&
      (active.tagName === "INPUT" || active.tagName === "SELECT" || active.tagName === "TEXTAREA");
  }

  function refresh() {
    if (busy || document.visibilityState !== "visible") return;
    var live = regions.filter(function (el) { return el.hasAttribute("data-live"); });
    if (!live.length) { stop(); return; }
    busy = true;
    var pending = live.map(function (el) {
      if (focusedIn(el)) return Promise.resolve();
      return fetch(fragmentUrl(el.getAttribute("data-live")), {
        credentials: "same-origin",
        headers: { "X-Requested-With": "jobyard-live" },
        redirect: "error"
      }).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      }).then(function (html) {
        if (focusedIn(el) || pressed) return;
        // The fragment is the server's own page markup, every job value escaped there.
        el.innerHTML = html;
        if (el.querySelector("[data-live-stop]")) el.removeAttribute("data-live");
        if (state) { state.classList.remove("stale"); state.title = "Updated " + new Date().toLocaleTimeString(); }
      });
    });
    Promise.all(pending).catch(function (err) {
      if (state) { state.classList.add("stale"); state.title = "Not updated: " + err.message; }
    }).then(function () { busy = false; });
  }

  function start() {
    if (timer === null && regions.length) timer = window.setInterval(refresh, every);
  }

  function stop() {
    if (timer !== null) { window.clearInterval(timer); timer = null; }
  }

  if (regions.length && state) state.hidden = false;
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { refresh(); start(); } else { stop(); }
  });
  if (document.visibilityState === "visible") start();

  // A button with data-confirm asks first (bulk actions have a page of their own instead).
  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest ? ev.target.closest("button[data-confirm]") : null;
    if (btn && !window.confirm(btn.getAttribute("data-confirm"))) ev.preventDefault();
  });

  // The enqueue form: show the chosen handler's signature.
  var select = document.getElementById("enqueue-job");
  var sig = document.getElementById("enqueue-signature");
  if (select && sig) {
    select.addEventListener("change", function () {
      var opt = select.options[select.selectedIndex];
      var code = document.createElement("code");
      code.textContent = opt.getAttribute("data-signature") || "";
      sig.replaceChildren(code);
    });
  }
})();
