(function () {
  "use strict";
  var box = document.getElementById("lti");
  var d = box.dataset;
  var framed = window.top !== window.self;
  function show(id) { var el = document.getElementById(id); if (el) { el.hidden = false; } }
  function hide(id) { var el = document.getElementById(id); if (el) { el.hidden = true; } }
  function go(url) {
    if (!framed) { window.location.replace(url); return; }
    var link = document.getElementById("open");
    link.href = url;
    hide("working");
    show("framed");
    link.addEventListener("click", function () { hide("framed"); show("opened"); });
  }
  function storageWindow() {
    var target = d.storageTarget || "_parent";
    var base = window.opener || window.parent;
    if (target !== "_parent") {
      try { if (base.frames[target]) { return base.frames[target]; } } catch (e) { /* cross-origin */ }
    }
    return base;
  }
  function ask(subject, message, done) {
    var id = "userland-" + Math.random().toString(36).slice(2);
    var answered = false;
    function finish(reply) { if (!answered) { answered = true; done(reply); } }
    window.addEventListener("message", function handler(event) {
      var m = event.data;
      if (!m || typeof m !== "object" || m.message_id !== id || m.subject !== subject + ".response") { return; }
      if (event.origin !== d.platformOrigin) { return; }
      window.removeEventListener("message", handler);
      finish(m.error ? null : m);
    });
    message.subject = subject;
    message.message_id = id;
    try { storageWindow().postMessage(message, d.platformOrigin); } catch (e) { finish(null); return; }
    window.setTimeout(function () { finish(null); }, 4000);
  }
  if (d.mode === "continue") {
    go(d.url);
  } else if (d.mode === "storage-put") {
    ask("lti.put_data", { key: d.key, value: d.value }, function () { window.location.replace(d.url); });
  } else if (d.mode === "storage-get") {
    ask("lti.get_data", { key: d.key }, function (reply) {
      if (reply && typeof reply.value === "string" && reply.value) {
        go(d.url + "&proof=" + encodeURIComponent(reply.value));
      } else if (framed) {
        hide("working"); show("restart");
      } else {
        hide("working"); show("failed");
      }
    });
  } else if (d.mode === "close") {
    // LTI Dynamic Registration: tell the LMS the registration is done (it closes this frame).
    var lms = window.opener || window.parent;
    if (lms && lms !== window) { lms.postMessage({ subject: "org.imsglobal.lti.close" }, "*"); }
  } else if (d.mode === "restart") {
    hide("working");
    show(framed ? "restart" : "failed");
  }
}());
