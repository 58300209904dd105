// Refreshes the page's main part every few seconds: the server renders it,
// this script only swaps it in. Paused while the tab is hidden.
(function () {
  "use strict";
  var every = parseInt(document.body.dataset.refreshMs, 10) || 2000;
  var note = document.getElementById("refreshed");
  function refresh() {
    if (document.hidden) {
      return;
    }
    fetch("?part=main", { cache: "no-store" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        document.getElementById("main").innerHTML = html;
        note.textContent = "refreshed " + new Date().toLocaleTimeString();
        note.className = "muted";
      })
      .catch(function (e) {
        note.textContent = "refresh failed: " + e.message;
        note.className = "alert";
      });
  }
  setInterval(refresh, every);
})();
