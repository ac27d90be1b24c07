/* Assignment pages: times in the reader's own time zone, the form's times in the teacher's,
 * and the students' table kept live from the server-sent event stream. No framework, no
 * inline code (the CSP forbids it); without JavaScript every page works as it is, in UTC. */
(function () {
  "use strict";
  var zone = (window.Intl && Intl.DateTimeFormat().resolvedOptions().timeZone) || "";

  function two(n) { return (n < 10 ? "0" : "") + n; }

  // <time datetime="2026-12-07T23:59:00Z"> shown in local time ("Mon 7 Dec 2026, 23:59").
  function localTimes(root) {
    if (!zone || !window.Intl) { return; }
    var format = new Intl.DateTimeFormat(undefined, {weekday: "short", day: "numeric", month: "short",
                                                     year: "numeric", hour: "2-digit", minute: "2-digit"});
    // Clock times (data-clock: "who had access") are localtime.js's, shown as clock ranges.
    var times = root.querySelectorAll("time[datetime]:not([data-clock])");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (!isNaN(when.getTime())) {
        times[i].title = times[i].textContent;
        times[i].textContent = format.format(when);
      }
    }
  }
  localTimes(document);

  // Forms: datetime-local values come in the zone the server used (UTC); show and send them in
  // the browser's own zone instead, and say so.
  function localInput(value, fromZone) {
    if (!value || fromZone !== "UTC") { return value; }
    var when = new Date(value + ":00Z");
    if (isNaN(when.getTime())) { return value; }
    return when.getFullYear() + "-" + two(when.getMonth() + 1) + "-" + two(when.getDate()) + "T" +
      two(when.getHours()) + ":" + two(when.getMinutes());
  }
  var zoneFields = document.querySelectorAll("input[name=zone]");
  for (var z = 0; z < zoneFields.length; z++) {
    var field = zoneFields[z];
    if (!zone || field.value === zone) { continue; }
    var inputs = field.form.querySelectorAll("input[type=datetime-local]");
    for (var j = 0; j < inputs.length; j++) { inputs[j].value = localInput(inputs[j].value, field.value); }
    field.value = zone;
  }
  if (zone) {
    var notes = document.querySelectorAll("#zone-note, .zone-note");
    for (var k = 0; k < notes.length; k++) { notes[k].textContent = "Times are in your time zone (" + zone + ")."; }
  }

  // The live table.
  var table = document.getElementById("assignment-students");
  if (!table || !window.EventSource || !window.JSON) { return; }
  var rows = document.getElementById("assignment-rows");
  var live = document.getElementById("live");
  var source = new EventSource(table.getAttribute("data-stream"));
  function setLive(on) { if (live) { live.hidden = !on; } }
  function setText(id, text) { var el = document.getElementById(id); if (el) { el.textContent = text; } }
  source.addEventListener("open", function () { setLive(true); });
  source.addEventListener("error", function () { setLive(false); });
  source.addEventListener("gone", function () { source.close(); setLive(false); });
  source.addEventListener("table", function (event) {
    var data = JSON.parse(event.data);
    var holder = document.createElement("table");
    holder.innerHTML = "<tbody>" + data.rows + "</tbody>";
    var body = holder.querySelector("tbody");
    localTimes(body);
    rows.innerHTML = body.innerHTML;
    setText("handed-out", data.handedOut || "–");
    setText("collected", data.collected || "–");
    setText("phase", data.phase);
    var badge = document.getElementById("phase");
    if (badge && data.badge) { badge.className = "badge " + data.badge; }
    setText("message", data.message);
    if (typeof data.graded === "string") { setText("graded", data.graded || "–"); }
    var histogram = document.getElementById("score-histogram");
    // The server's own render (its text escaped there), as the rows above.
    if (histogram && typeof data.histogram === "string") { histogram.innerHTML = data.histogram; }
  });
}());
