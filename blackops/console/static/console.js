// The BlackOps console's only script: local times, copy buttons, the live tail.
// Everything else works without it (decisions U2).
"use strict";
(function () {
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      if (t.dataset.local) return;
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      var span = document.createElement("span");
      span.className = "local";
      span.textContent = "(" + d.toLocaleString() + ")";
      t.dataset.local = "1";
      t.after(span);
    });
  }
  function copyButtons(root) {
    root.querySelectorAll("button.copy[data-copy]").forEach(function (b) {
      b.hidden = false;
      b.addEventListener("click", function () {
        var text = b.getAttribute("data-copy");
        var done = function () { b.textContent = "Copied"; setTimeout(function () { b.textContent = "Copy"; }, 1500); };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(done);
        } else {
          var area = document.createElement("textarea");
          area.value = text; document.body.appendChild(area); area.select();
          document.execCommand("copy"); area.remove(); done();
        }
      });
    });
  }
  // The server renders instants as "2026-12-01 17:52:55.444218 UTC"; the tail does the same
  // with the journal's "2026-12-01T17:52:55.444218Z".
  function utc(at) {
    return /^\d{4}-\d\d-\d\dT[\d:.]+Z$/.test(at) ? at.replace("T", " ").replace("Z", " UTC") : at;
  }
  // Invisible characters (controls, bidi controls, zero widths, ...) as styled escapes, as
  // the server shows journal values (decisions U23): a stream name cannot spoof another.
  var INVISIBLE = /(?:(?![\t\n])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}])+/gu;
  function escapeOf(c) {
    var n = c.codePointAt(0), hex = n.toString(16);
    return n < 0x10000 ? "\\u" + ("000" + hex).slice(-4) : "\\U" + ("0000000" + hex).slice(-8);
  }
  function visible(parent, value) {
    var text = String(value), last = 0;
    text.replace(INVISIBLE, function (run, at) {
      parent.appendChild(document.createTextNode(text.slice(last, at)));
      var esc = document.createElement("span");
      esc.className = "esc";
      esc.textContent = Array.from(run).map(escapeOf).join("");
      parent.appendChild(esc);
      last = at + run.length;
      return run;
    });
    parent.appendChild(document.createTextNode(text.slice(last)));
  }
  function cell(row, text, code) {
    var td = document.createElement("td");
    if (code) { var c = document.createElement("code"); visible(c, text); td.appendChild(c); }
    else { visible(td, text); }
    row.appendChild(td);
    return td;
  }
  function liveTail() {
    var table = document.getElementById("tail");
    var state = document.getElementById("tail-state");
    if (!table || !window.EventSource) return;
    var body = table.querySelector("tbody");
    var after = table.dataset.after;  // the last id received: where a new source resumes
    var delay = 1000;  // before building a source anew, doubling to 30 s
    function url(extra) {
      return table.dataset.stream + "?after=" + encodeURIComponent(after) + (extra || "");
    }
    function ended(why) {
      state.textContent = "Live tail ended: " + (why || "refused");
    }
    function retry() {
      // The browser does not say why it gave up: ask once. A refusal before a stream
      // begins (a session that expired meanwhile, a lost role, a changed event) is an
      // HTTP status, shown and final; the store still down (503) is tried again later.
      fetch(url("&limit=1&max_seconds=1"), {credentials: "same-origin"}).then(function (answer) {
        // Final only for a refusal (a 4xx but a timeout or too many requests); a 5xx (a
        // proxy's 502 while the server restarts, the store's 503) is tried again later.
        var status = answer.status;
        if (status < 400 || status >= 500 || [408, 425, 429].indexOf(status) >= 0) {
          if (answer.body) answer.body.cancel();
          open();
          return;
        }
        answer.json().then(function (body) {
          ended(body && body.error && body.error.message);
        }, function () { ended("HTTP " + answer.status); });
      }, open);  // the server unreachable: a new source, which fails and waits longer
    }
    function open() {
      var source = new EventSource(url());  // same origin: the session cookie goes with it
      source.onopen = function () {
        delay = 1000;
        state.textContent = "Live: new lines appear at the top.";
      };
      source.onerror = function (event) {
        // A refusal ends the stream with an "error" event carrying its body (a revoked
        // session, a changed event): say why and stop; a dropped connection reconnects.
        // The store being unreachable is no refusal: the server closes and the source
        // reconnects, as after a dropped connection.
        var error = null;
        try { error = event.data ? JSON.parse(event.data).error : null; } catch (e) { error = {}; }
        if (error && error.code !== "backend_unavailable") {
          ended(error.message);
          source.close();
          return;
        }
        if (source.readyState === EventSource.CLOSED) {
          // The browser gave up: a reconnection answered other than 200 and a stream (a 503
          // while the store is still unreachable) fails the source for good. Build it anew
          // later, from the last line received (it said "reconnecting" for ever: found by
          // review).
          var wait = delay;
          delay = Math.min(delay * 2, 30000);
          state.textContent = "Live tail interrupted; reconnecting in " + wait / 1000 + " s…";
          setTimeout(retry, wait);
          return;
        }
        state.textContent = "Live tail interrupted; reconnecting…";
      };
      source.onmessage = function (message) {
        if (message.lastEventId) after = message.lastEventId;
        var line = JSON.parse(message.data);
        var row = document.createElement("tr");
        row.className = "new";
        cell(row, message.lastEventId);
        cell(row, line.type, true);
        var at = document.createElement("time");
        at.setAttribute("datetime", line.at);
        at.textContent = utc(line.at);
        cell(row, "").appendChild(at);
        cell(row, line.stream, true);
        cell(row, (line.context && line.context.tenant) || "-");
        body.insertBefore(row, body.firstChild);
        localTimes(row);
      };
    }
    open();
  }
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    copyButtons(document);
    var zone = document.getElementById("zone");
    if (zone) { zone.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone; zone.parentElement.hidden = false; }
    liveTail();
  });
})();
