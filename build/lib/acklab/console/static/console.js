// acklab console: keyboard stepping through the comparison. Pages work without this file;
// it only adds j/k and the arrow keys, and keeps the step in the URL (history.replaceState).
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function stepUrl(mode, step) {
    var url = new URL(window.location.href);
    if (mode === "live") {
      url.searchParams.set("step", String(step));
      url.hash = "";
    } else {
      url.hash = "step-" + step;
    }
    return url;
  }

  function setup(root) {
    var mode = root.getAttribute("data-mode");
    var total = parseInt(root.getAttribute("data-steps"), 10) || 0;
    if (total < 1) { return; }
    var current = parseInt(root.getAttribute("data-step"), 10) || 1;

    function show(step, updateUrl) {
      step = Math.min(Math.max(step, 1), total);
      current = step;
      root.setAttribute("data-step", String(step));
      root.querySelectorAll("[data-step]").forEach(function (el) {
        if (el === root) { return; }
        var on = el.getAttribute("data-step") === String(step);
        el.classList.toggle("current", on);
        if (el.tagName === "TR") {
          if (on) { el.setAttribute("aria-current", "step"); } else { el.removeAttribute("aria-current"); }
        }
      });
      if (updateUrl) {
        window.history.replaceState(null, "", stepUrl(mode, step).toString());
      }
    }

    if (mode === "static") {
      var match = /^#step-(\d+)$/.exec(window.location.hash);
      if (match) { show(parseInt(match[1], 10), false); }
    }

    root.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-goto]");
      if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) { return; }
      event.preventDefault();
      show(parseInt(link.getAttribute("data-goto"), 10), true);
    });

    document.addEventListener("keydown", function (event) {
      if (event.altKey || event.ctrlKey || event.metaKey) { return; }
      var tag = (event.target && event.target.tagName) || "";
      if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") { return; }
      var key = event.key;
      if (key === "j" || key === "ArrowDown" || key === "ArrowRight") {
        event.preventDefault();
        show(current + 1, true);
      } else if (key === "k" || key === "ArrowUp" || key === "ArrowLeft") {
        event.preventDefault();
        show(current - 1, true);
      }
    });

    window.addEventListener("hashchange", function () {
      var match = /^#step-(\d+)$/.exec(window.location.hash);
      if (match) { show(parseInt(match[1], 10), false); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-compare]").forEach(setup);
  });
})();
