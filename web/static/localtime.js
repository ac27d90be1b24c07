/* Clock times in the reader's own time zone: every <time datetime="..." data-clock> written as
 * "14:02 UTC" by the server becomes "15:02" here. A range (<span class="clock-range"> holding
 * two of them, "who had access") says its day once: "Fri, Nov 27, 2026, 21:58–21:59", the
 * second day only when it is another. No inline code (the CSP forbids it); without JavaScript
 * the UTC times stay. The dashboard calls it again on the help card it replaces. */
(function () {
  "use strict";
  var dayFormat = {weekday: "short", day: "numeric", month: "short", year: "numeric"};
  function clock(when) { return when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }); }
  function day(when) { return when.toLocaleDateString([], dayFormat); }
  function localize(root) {
    var found = (root || document).querySelectorAll("time[data-clock]");
    Array.prototype.forEach.call(found, function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (isNaN(when.getTime())) { return; }
      el.textContent = clock(when);
      el.title = when.toLocaleString();
    });
    var ranges = (root || document).querySelectorAll(".clock-range");
    Array.prototype.forEach.call(ranges, function (range) {
      var ends = range.querySelectorAll("time[data-clock]");
      if (ends.length !== 2) { return; }
      var from = new Date(ends[0].getAttribute("datetime"));
      var to = new Date(ends[1].getAttribute("datetime"));
      if (isNaN(from.getTime()) || isNaN(to.getTime())) { return; }
      ends[0].textContent = day(from) + ", " + clock(from);
      ends[1].textContent = day(from) === day(to) ? clock(to) : day(to) + ", " + clock(to);
    });
  }
  window.userlandLocalTimes = localize;
  localize(document);
}());
