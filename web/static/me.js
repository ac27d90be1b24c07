/* "My environments", live: the page's sections follow the server-sent event stream (/me/stream)
 * without a reload: a member of staff who joins shows at once with the button to end it, an
 * environment that wakes, an assignment handed out, collected or given feedback. Only sections
 * whose HTML changed are swapped, and what the student was typing (the help message) is kept.
 * No framework and no inline code (the CSP forbids it); without JavaScript the page works as it
 * is, and its "Refresh" link reloads it. */
(function () {
  "use strict";
  var region = document.getElementById("me-live");
  if (!region || !window.EventSource || !window.JSON) { return; }
  var live = document.getElementById("live");
  var source = new EventSource(region.getAttribute("data-stream"));
  function setLive(on) { if (live) { live.hidden = !on; } }
  source.addEventListener("open", function () { setLive(true); });
  source.addEventListener("error", function () { setLive(false); });  // EventSource retries by itself

  var format = window.Intl ? new Intl.DateTimeFormat(undefined, {weekday: "short", day: "numeric",
    month: "short", year: "numeric", hour: "2-digit", minute: "2-digit"}) : null;
  function localize(root) {
    if (window.userlandLocalTimes) { window.userlandLocalTimes(root); }
    if (!format) { return; }
    Array.prototype.forEach.call(root.querySelectorAll("time[datetime]:not([data-clock])"), function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (!isNaN(when.getTime())) { el.title = el.textContent; el.textContent = format.format(when); }
    });
  }

  function keyed(root) {
    var out = [];
    Array.prototype.forEach.call(root.children, function (el) {
      var key = el.getAttribute("data-live");
      if (key) { out.push([key, el]); }
    });
    return out;
  }

  // What the student typed or has focus on, by the field's id, to put back after a swap.
  function typed() {
    var values = {};
    Array.prototype.forEach.call(region.querySelectorAll("input[type=text][id], textarea[id]"), function (el) {
      if (el.value) { values[el.id] = el.value; }
    });
    var active = document.activeElement;
    return { values: values, focus: active && region.contains(active) && active.id ? active.id : "" };
  }
  function restore(saved) {
    Object.keys(saved.values).forEach(function (id) {
      var el = document.getElementById(id);
      if (el && !el.value) { el.value = saved.values[id]; }
    });
    if (saved.focus) {
      var el = document.getElementById(saved.focus);
      if (el && document.activeElement !== el) { el.focus(); }
    }
  }

  // The HTML the server last sent for each section: at first the page's own render, read before
  // localtime.js writes local times into it (this script runs first), so the stream's first
  // event, the same render, swaps nothing.
  var sent = {};
  keyed(region).forEach(function (pair) { sent[pair[0]] = pair[1].outerHTML; });

  source.addEventListener("page", function (event) {
    var data;
    try { data = JSON.parse(event.data); } catch (e) { return; }
    if (!data || typeof data.html !== "string") { return; }
    var holder = document.createElement("div");
    holder.innerHTML = data.html;
    var fresh = keyed(holder);
    var current = keyed(region);
    var saved = typed();
    var sameKeys = fresh.length === current.length && fresh.every(function (pair, i) {
      return pair[0] === current[i][0];
    });
    if (!sameKeys) {
      // A section came or went (a first environment, an assignment): the whole part is redrawn.
      region.innerHTML = "";
      sent = {};
      fresh.forEach(function (pair) {
        sent[pair[0]] = pair[1].outerHTML;
        region.appendChild(pair[1]);
        localize(pair[1]);
      });
    } else {
      fresh.forEach(function (pair, i) {
        var html = pair[1].outerHTML;
        if (sent[pair[0]] === html) { return; }
        sent[pair[0]] = html;
        region.replaceChild(pair[1], current[i][1]);
        localize(pair[1]);
      });
    }
    restore(saved);
  });
}());
