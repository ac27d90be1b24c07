/* Clock times in the reader's own time zone: every <time datetime="..." data-clock> written as
 * "14:02 UTC" by the server becomes "15:02" here. No inline code (the CSP forbids it); without
 * JavaScript the UTC time stays. The dashboard calls it again on the help card it replaces. */
(function () {
  "use strict";
  function localize(root) {
    var found = (root || document).querySelectorAll("time[data-clock]");
    Array.prototype.forEach.call(found, function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (isNaN(when.getTime())) { return; }
      el.textContent = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      el.title = when.toLocaleString();
    });
  }
  window.userlandLocalTimes = localize;
  localize(document);
}());
