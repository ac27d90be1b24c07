/* The class dashboard, live: rows follow the server-sent event stream without a reload.
 * No framework and no inline code (the CSP forbids it). Without JavaScript, or when the stream
 * cannot be opened, the page still works as it is: the "Refresh" link reloads it. */
(function () {
  "use strict";
  var table = document.getElementById("students");
  if (!table || !window.EventSource || !window.JSON) { return; }
  var live = document.getElementById("live");
  var stale = document.getElementById("stale");
  var empty = document.getElementById("empty");
  var counts = document.getElementById("counts");
  var showing = document.getElementById("showing");
  var source = new EventSource(table.getAttribute("data-stream"));

  function setLive(on) { if (live) { live.hidden = !on; } }
  source.addEventListener("open", function () { setLive(true); });
  source.addEventListener("error", function () { setLive(false); });  // EventSource retries by itself
  source.addEventListener("gone", function () { source.close(); setLive(false); if (stale) { stale.hidden = false; } });

  function parseBody(html) {
    var holder = document.createElement("table");
    holder.innerHTML = html;
    return holder.querySelector("tbody");
  }

  // What has focus, described so it can be found again in a re-rendered row.
  function describeFocus() {
    var el = document.activeElement;
    if (!el || !table.contains(el)) { return null; }
    var row = el.closest("tr");
    return { name: row ? row.getAttribute("data-name") : "", tag: el.tagName,
             field: el.getAttribute("name") || "", value: el.getAttribute("value") || "" };
  }

  function restoreFocus(focus) {
    if (!focus || (document.activeElement && table.contains(document.activeElement))) { return; }
    var rows = table.querySelectorAll("tr[data-name]");
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-name") !== focus.name) { continue; }
      var candidates = rows[i].querySelectorAll(focus.tag);
      for (var j = 0; j < candidates.length; j++) {
        var c = candidates[j];
        if ((c.getAttribute("name") || "") === focus.field && (c.getAttribute("value") || "") === focus.value) {
          c.focus();
          return;
        }
      }
    }
  }

  function updateCounts(data) {
    if (!counts) { return; }
    counts.textContent = "";
    var strong = document.createElement("strong");
    strong.textContent = String(data.total);
    counts.appendChild(strong);
    var envs = 0;
    data.counts.forEach(function (c) { envs += c[2]; });  // [badge class, words, count]
    counts.appendChild(document.createTextNode(" student" + (data.total === 1 ? "" : "s") + ", "));
    var strongEnvs = document.createElement("strong");
    strongEnvs.textContent = String(envs);
    counts.appendChild(strongEnvs);
    counts.appendChild(document.createTextNode(" environment" + (envs === 1 ? "" : "s") + (envs ? ": " : "")));
    data.counts.forEach(function (c) {
      var badge = document.createElement("span");
      badge.className = "badge " + c[0];
      badge.textContent = c[2] + " " + c[1];
      counts.appendChild(badge);
      counts.appendChild(document.createTextNode(" "));
    });
  }

  // "Select all": every environment listed (hidden without JavaScript).
  var selectAll = document.getElementById("select-all");
  var everyPage = document.getElementById("every-page");
  function boxes() { return table.querySelectorAll("input[type=checkbox][name=names]"); }
  function syncSelectAll() {
    if (!selectAll) { return; }
    var all = boxes(), ticked = 0;
    for (var i = 0; i < all.length; i++) { if (all[i].checked) { ticked++; } }
    selectAll.checked = all.length > 0 && ticked === all.length;
    selectAll.indeterminate = ticked > 0 && ticked < all.length;
    if (everyPage && !selectAll.checked) { everyPage.checked = false; }  // one unticked: not everyone
  }
  if (selectAll) {
    selectAll.hidden = false;
    // With more pages than this one, "select all" means every environment the search lists, on
    // every page: it ticks the form's "every page" box (a course-wide run that asks first).
    selectAll.addEventListener("change", function () {
      Array.prototype.forEach.call(boxes(), function (box) { box.checked = selectAll.checked; });
      selectAll.indeterminate = false;
      if (everyPage) { everyPage.checked = selectAll.checked; }
    });
    table.addEventListener("change", function (event) {
      if (event.target && event.target.name === "names") { syncSelectAll(); }
    });
  }

  // The help card (queue and who is helping), replaced whole; its Join and Done are plain forms.
  source.addEventListener("help", function (event) {
    var data, card = document.getElementById("help");
    try { data = JSON.parse(event.data); } catch (e) { return; }
    if (!card || !data || typeof data.html !== "string") { return; }
    var holder = document.createElement("div");
    holder.innerHTML = data.html;
    var fresh = holder.querySelector("#help");
    if (!fresh) { return; }
    var focused = document.activeElement && card.contains(document.activeElement);
    card.parentNode.replaceChild(fresh, card);
    if (window.userlandLocalTimes) { window.userlandLocalTimes(fresh); }
    if (focused) { fresh.querySelector("h2").setAttribute("tabindex", "-1"); fresh.querySelector("h2").focus(); }
  });

  source.addEventListener("rows", function (event) {
    var data;
    try { data = JSON.parse(event.data); } catch (e) { return; }
    var focus = describeFocus();
    var checked = {};
    Array.prototype.forEach.call(table.querySelectorAll("input[name=names]:checked"), function (box) {
      checked[box.value] = true;
    });
    var existing = {};
    Array.prototype.forEach.call(table.querySelectorAll("tbody.student"), function (body) {
      existing[body.getAttribute("data-login")] = body;
    });
    var previous = table.tHead;
    var keep = {};
    data.order.forEach(function (login) {
      var node = existing[login];
      if (Object.prototype.hasOwnProperty.call(data.rows, login)) {
        var fresh = parseBody(data.rows[login]);
        if (fresh) {
          if (node) { node.parentNode.replaceChild(fresh, node); }
          node = fresh;
        }
      }
      if (!node) { if (stale) { stale.hidden = false; } return; }
      keep[login] = true;
      if (previous.nextElementSibling !== node) { table.insertBefore(node, previous.nextElementSibling); }
      previous = node;
    });
    Object.keys(existing).forEach(function (login) {
      if (!keep[login] && existing[login].parentNode) { existing[login].parentNode.removeChild(existing[login]); }
    });
    Array.prototype.forEach.call(table.querySelectorAll("input[name=names]"), function (box) {
      if (checked[box.value]) { box.checked = true; }
    });
    if (empty) { empty.hidden = data.order.length > 0; }
    updateCounts(data);
    if (showing) {
      showing.textContent = "Showing " + data.environments + " of " + data.matched_environments + " " +
        (data.filtered ? "matching " : "") + "environment" + (data.matched_environments === 1 ? "" : "s") +
        " (" + data.order.length + " of " + data.matched + " student" + (data.matched === 1 ? "" : "s") + ").";
    }
    syncSelectAll();
    restoreFocus(focus);
  });
}());
