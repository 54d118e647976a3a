// Datum fleet: what JavaScript adds to pages that work without it.
// - Relative times ("4 min ago") stay current while a page is open.
// - Keyboard: "/" focuses the page's filter; "g" then o/h/r/d/s goes to a
//   page of the navigation; "?" lists the shortcuts.
// Nothing is fetched: the script only rewrites what the page already has.
(function () {
  "use strict";
  function span(s) {
    var d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (s < 60) return s + " s";
    if (s < 3600) return m + " min";
    if (s < 36000 && m > 0) return h + " h " + m + " min";
    if (s < 86400) return h + " h";
    if (d < 10 && h > 0) return d + " d " + h + " h";
    return d + " d";
  }
  function ago(t, now) {
    var d = now - t;
    if (Math.abs(d) < 10) return "just now";
    return d > 0 ? span(d) + " ago" : "in " + span(-d);
  }
  function refresh() {
    var now = Math.floor(Date.now() / 1000);
    var times = document.querySelectorAll("time[data-t]");
    for (var i = 0; i < times.length; i++) {
      var t = parseInt(times[i].getAttribute("data-t"), 10);
      if (!isNaN(t)) times[i].textContent = ago(t, now);
    }
  }
  setInterval(refresh, 30000);

  var pending = false;
  document.addEventListener("keydown", function (e) {
    var el = e.target;
    var typing = el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable);
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") {
      var f = document.querySelector("[data-focus-key='/']");
      if (f) { e.preventDefault(); f.focus(); f.select(); }
      return;
    }
    if (e.key === "?") {
      alert("Shortcuts\n\n/   focus the filter\ng o   overview\ng h   hosts\ng r   rollout\ng d   drift\ng s   stacks");
      return;
    }
    if (pending) {
      pending = false;
      var link = document.querySelector(".nav a[data-key='" + e.key + "']");
      if (link) { e.preventDefault(); link.click(); }
      return;
    }
    if (e.key === "g") { pending = true; setTimeout(function () { pending = false; }, 1500); }
  });
})();
