// What a person types on a call's page stays in this browser tab until the run records their
// decision: a reload, a session that ended, or a page left open and come back to keep it.
// Drafts live in sessionStorage (this tab only), under the call page's own address.
(function () {
  "use strict";
  // Times in the reader's own time zone (the page says UTC without script).
  var localTimes = function () {
    Array.prototype.forEach.call(document.querySelectorAll("time[data-local]"), function (t) {
      var at = new Date(t.getAttribute("datetime"));
      if (isNaN(at.getTime())) { return; }
      t.title = t.textContent;
      t.textContent = at.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
      t.removeAttribute("data-local");
    });
  };
  localTimes();
  document.body.addEventListener("htmx:afterSettle", localTimes);
  var PREFIX = "hitl-draft ";
  var store;
  try { store = window.sessionStorage; } catch (e) { return; }
  var body = document.body;
  var done = body.getAttribute("data-drafts-done");
  if (done) {
    var ended = [];  // collected first: the storage's key order may change as keys go
    for (var i = 0; i < store.length; i++) {
      var k = store.key(i);
      if (k && k.indexOf(PREFIX + done + " ") === 0) { ended.push(k); }
    }
    ended.forEach(function (k) { store.removeItem(k); });
  }
  var page = body.getAttribute("data-draft-key");
  if (!page) { return; }
  var fields = document.querySelectorAll("form[data-draft] textarea, form[data-draft] input, form[data-draft] select");
  Array.prototype.forEach.call(fields, function (field) {
    if (field.type === "hidden" || !field.name) { return; }
    var key = PREFIX + page + " " + field.form.getAttribute("data-draft") + " " + field.name;
    var kept = store.getItem(key);
    if (kept !== null) {
      if (field.type === "checkbox") { field.checked = kept === "1"; } else { field.value = kept; }
    }
    var save = function () {
      store.setItem(key, field.type === "checkbox" ? (field.checked ? "1" : "0") : field.value);
    };
    field.addEventListener("input", save);
    field.addEventListener("change", save);
  });
})();

// Keyboard shortcuts (the legend on each page names them). A key never decides anything by
// itself: it moves the focus to a button (Enter then presses it) or follows a link.
(function () {
  "use strict";
  var typing = function (el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  };
  var rowLinks = function () {
    return Array.prototype.slice.call(document.querySelectorAll("#inbox a[id^='go-']"));
  };
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) { return; }
    var key = e.key;
    if (key === "/") {
      var search = document.querySelector("input[name=q]");
      if (search) { e.preventDefault(); search.focus(); }
      return;
    }
    if (key === "j" || key === "k") {
      var links = rowLinks();
      if (!links.length) { return; }
      var at = links.indexOf(document.activeElement);
      var next = key === "j" ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
      e.preventDefault();
      links[at < 0 ? 0 : next].focus();
      return;
    }
    var target = document.querySelector("[data-shortcut='" + key + "']:not([disabled])");
    if (!target) { return; }
    e.preventDefault();
    if (target.tagName === "A") { target.click(); return; }
    if (target.tagName === "SUMMARY") {
      target.parentElement.open = true;
      var first = target.parentElement.querySelector("textarea, input:not([type=hidden]), select");
      if (first) { first.focus(); }
      return;
    }
    target.focus();
  });
})();
