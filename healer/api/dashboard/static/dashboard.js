// healer dashboard: shows whether the live stream is up. Everything else is htmx + its SSE
// extension (vendored beside this file); pages work without any of it.
(function () {
  "use strict";
  function show(state, text) {
    var el = document.getElementById("live-state");
    if (el) { el.dataset.state = state; el.textContent = text; }
  }
  document.addEventListener("htmx:sseOpen", function () { show("live", "live"); });
  document.addEventListener("htmx:sseError", function () { show("reconnecting", "reconnecting…"); });
  document.addEventListener("htmx:sseClose", function () { show("static", "disconnected — reload"); });
})();
