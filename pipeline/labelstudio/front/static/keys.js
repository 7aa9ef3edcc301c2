// RESCUE annotators' keys, added to every page by the desk's front (served at /__rescue__/keys.js).
// Keyboard-first by the WAI-ARIA patterns: each choice list is ONE Tab stop (roving tabindex) with
// the arrow keys inside it; a form is a unit_<i> (a row) or a voice_<v> ("Who is each voice?"). A voice's
// pre-filled name is a proposal like a row's pre-filled value (its "accept" box is "proposal-voice_<v>_is").
//
// Three plain scripts, loaded in this order (pipeline.labelstudio.front.comfort.KEYS_FILES), share one object,
// window.__rescueKeys:
// * keys.js (this one): the forms, their fields and proposals, which form the keys act on, the check
//   of Label Studio's hooks and the page's tidying (the choices' marks, the proposals' look);
// * keys-input.js: what each key and each edit does;
// * keys-page.js: the page around the forms (a refused submit, the route into a round, playing rows,
//   the instructions, legible speaker names, no project-making buttons).
//
// Key state belongs to the window on screen: Label Studio shows the next task (window) without
// reloading the page and every window reuses the forms' ids (unit_0, ...), so the form the keys act
// on is kept as an element with the task it belongs to, and a task change forgets it.
//
// Before it does anything on a task page the script checks every hook of Label Studio's page it
// relies on (HOOKS); if one is missing it shows a banner and does nothing at all: never silently wrong.
(function () {
  if (window.__rescueKeys) return;
  // R.state: "unchecked" (no RESCUE form seen yet), "on", or "off" (a hook is missing)
  var R = window.__rescueKeys = {state: "unchecked", onTaskChange: [], always: [], whenOn: []};
  var style = document.createElement("style");
  style.textContent = [
    // Label Studio's automatic hotkey marks ([1], [q], ...) name keys that act on the first forms only
    ".lsf-choices sup.lsf-hint { display: none; }",
    // a visible focus ring on whatever has the keyboard's focus (WCAG 2.4.7); a choice's own input is
    // transparent (antd draws the box beside it), so its ring goes round the choice's label
    ":focus-visible, .ant-checkbox-wrapper:has(input:focus-visible) { outline: 3px solid #0b57d0 !important;" +
    " outline-offset: 2px !important; border-radius: 3px; }",
    ".ant-checkbox-wrapper input:focus-visible { outline: none !important; }",
    // a kept text's Edit and Delete actions show on hover only (opacity 0): shown when they have the focus
    ".lsf-textarea__actions:focus-within { opacity: 1 !important; pointer-events: auto !important; }",
    // every choice shows the key that picks it (a list of rows: the row number it is labelled with)
    "label[data-rescue-key]::before { content: attr(data-rescue-key); display: inline-block; min-width: 1.4em;" +
    " margin-right: 4px; padding: 0 3px; border: 1px solid #bbb; border-radius: 3px; font: 11px monospace;" +
    " color: #444; text-align: center; }",
    // a pre-filled value not yet accepted is a proposal: its own look and the word "proposed"
    "[data-rescue-proposed] { outline: 2px dashed #d48806; outline-offset: 2px; background: #fffbe6;" +
    " border-radius: 3px; }",
    "[data-rescue-proposed]::before { content: 'proposed'; display: inline-block; margin: 0 6px 2px 0;" +
    " padding: 0 5px; border-radius: 3px; background: #ffe58f; color: #613400; font: italic 12px sans-serif; }",
    ".rescue-why { color: #a8071a; background: #fff1f0; border: 1px solid #ffa39e; border-radius: 3px;" +
    " padding: 2px 6px; margin: 4px 0; font-size: 13px; }",
    // only what the work needs: the editor's side column (Info/History, Regions/Relations: no
    // regions, relations or history in these rounds) is not shown and its width goes to the forms
    ".lsf-sidepanels__wrapper { display: none !important; }",
    ".lsf-sidepanels { padding-left: 0 !important; padding-right: 0 !important; }",
    // toasts do not pile up: the newest one of each viewport is shown
    '[class*="toast-viewport--"] > *:not(:last-child) { display: none !important; }'
  ].join("\n");
  document.head.appendChild(style);
  var FORM = R.FORM = '[id^="unit_"], [id^="voice_"]';
  var FIELD = R.FIELD = ".lsf-choices, .lsf-text-area, .lsf-number";
  // a field's "accept" box (ls_config.proposal_box: shown where the push proposed that field's value),
  // and the "pre-fill checked" box of a form pushed before proposals were per field
  var PROPOSAL = R.PROPOSAL = '[id^="proposal-"], [id^="prefill-checked_"]';
  // the form the keys act on (outlined): its element, its id (Label Studio may draw it anew within the
  // same window) and the window (task) it belongs to
  var current = null;  // {el, id, task}
  function taskNow() {
    var t = window.Htx && window.Htx.task;
    return location.pathname + "#" + (t && t.id != null ? t.id : "");
  }
  var seenTask = taskNow();
  function fresh() {  // a task change (the next window, another round, a reload) forgets the last one's state
    var now = taskNow();
    if (now === seenTask) return;
    seenTask = now;
    if (current && current.el.isConnected) current.el.style.outline = "";
    current = null;
    R.onTaskChange.forEach(function (forget) { forget(); });  // the other scripts' state of that window
  }
  function chosenForm() {  // the outlined form of the window on screen, or null
    fresh();
    if (!current || current.task !== seenTask) return null;
    if (current.el.isConnected) return current.el;
    var again = document.getElementById(current.id);  // drawn anew in this same window
    if (again) current.el = again;
    return again;
  }
  function formOf(el) { return el && el.closest ? el.closest(FORM) : null; }
  function visible(el) { return !!(el && el.getClientRects().length); }
  function inView(el) {  // on screen now (a key changes nothing that is not)
    if (!visible(el)) return false;
    var r = el.getBoundingClientRect();
    return r.bottom > 0 && r.top < window.innerHeight && r.right > 0 && r.left < window.innerWidth;
  }
  function editing(el) {
    if (!el) return false;
    if (el.isContentEditable || el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && ["checkbox", "radio", "button", "submit"].indexOf(el.type) < 0;
  }
  function mark(form) {
    fresh();
    var old = current && current.el;
    if (old && old !== form) old.style.outline = "";
    if (form) {
      current = {el: form, id: form.id, task: seenTask};
      form.style.outline = "2px solid #1677ff"; form.style.outlineOffset = "2px";
    }
  }
  document.addEventListener("focusin", function (e) {
    if (R.state !== "on") return;
    var f = formOf(e.target); if (f) mark(f);
    var g = e.target.closest && e.target.closest(".lsf-choices"); if (g && !g.closest(PROPOSAL)) rove(g);
  }, true);
  document.addEventListener("pointerdown", function (e) {
    if (R.state !== "on") return;
    var f = formOf(e.target); if (f) mark(f);
  }, true);
  function onScreen() {  // no form chosen yet: the first one on screen, or null
    var all = document.querySelectorAll(FORM);
    for (var i = 0; i < all.length; i++) if (inView(all[i])) return all[i];
    return null;
  }
  function start() {  // a window's first form: "Who is each voice?" where it has it, else the first row
    return document.getElementById("voice_0") || document.getElementById("unit_0");
  }
  function choices(group) {
    return group ? Array.prototype.slice.call(group.querySelectorAll("input[type=checkbox], input[type=radio]")) : [];
  }
  // Label Studio's component or model behind an element, from React's fiber: the first of the element's
  // fiber and its parents (at most `depth`) for which pick(fiber) gives something
  function fiberFind(el, depth, pick) {
    var key = el && Object.keys(el).find(function (k) { return k.indexOf("__reactFiber") === 0; });
    for (var f = key && el[key], i = 0; f && i < depth; f = f["return"], i++) {
      var it = pick(f);
      if (it) return it;
    }
    return null;
  }
  // Label Studio's model of a control (name, choice single/multiple, requiredmessage)
  function modelOf(el) {
    return fiberFind(el, 25, function (f) { var it = f.memoizedProps && f.memoizedProps.item; return it && it.name ? it : null; });
  }
  function single(group) { var m = modelOf(group); return !!(m && m.choice === "single"); }
  function labelOf(input) { var l = input.closest("label"); return l ? l.textContent.trim() : ""; }
  // a list labelled by row numbers ("12 · Ann: first words", the rows that show a relation): the row
  // numbers, which are its keys; else null (its keys are positions: 1-9, 0 the 10th, - the last)
  function rowNumbers(group) {
    var all = choices(group), rows = [];
    for (var i = 0; i < all.length; i++) {
      var m = /^(\d+) \u00b7 /.exec(labelOf(all[i]));
      if (!m) return null;
      rows.push(m[1]);
    }
    return rows.length ? rows : null;
  }
  function positionKey(i, n) { return i < 9 ? String(i + 1) : i === 9 ? "0" : i === n - 1 ? "-" : ""; }
  function keyMarks(group) {  // each choice shows the key that picks it (a row number is shown already)
    var all = choices(group), rows = rowNumbers(group);
    all.forEach(function (c, i) {
      var l = c.closest("label"); if (!l) return;
      var k = rows ? "" : positionKey(i, all.length);
      if (k && l.getAttribute("data-rescue-key") !== k) l.setAttribute("data-rescue-key", k);
      else if (!k && l.hasAttribute("data-rescue-key")) l.removeAttribute("data-rescue-key");
    });
  }
  // roving tabindex: a list's one Tab stop is its focused choice, else its ticked one, else its first
  function rove(group) {
    var all = choices(group); if (!all.length) return;
    var a = document.activeElement;
    var stop = all.indexOf(a) >= 0 ? a : (all.filter(function (c) { return c.checked; })[0] || all[0]);
    all.forEach(function (c) { var t = c === stop ? "0" : "-1"; if (c.getAttribute("tabindex") !== t) c.setAttribute("tabindex", t); });
  }
  // a form's fields in order (a list, a text, a number), the hidden ones and the "accept" boxes left out
  function fields(form) {
    return Array.prototype.filter.call(form.querySelectorAll(FIELD), function (f) {
      return visible(f) && !f.closest(PROPOSAL);
    });
  }
  // a field's "accept" box (its view has the id "proposal-" + the field's control name), and whether the
  // field holds a proposal nobody accepted yet (the box shown and not ticked)
  function proposalOf(f) {
    var m = f && modelOf(f), form = formOf(f);
    return m && form ? form.querySelector('[id="proposal-' + m.name + '"]') : null;
  }
  function unaccepted(f) {
    var p = proposalOf(f), box = p && p.querySelector("input");
    return !!(box && !box.checked && visible(p));
  }
  function accept(f) {  // ticks this field's "accept" box (of this field only)
    var p = proposalOf(f), box = p && p.querySelector("input");
    if (box && !box.checked && visible(p)) box.click();
    if (f && f.removeAttribute) f.removeAttribute("data-rescue-proposed");
  }
  function fieldNamed(form, name) {  // a field found again by its control's name (Label Studio redraws them)
    return form ? fields(form).filter(function (x) { var m = modelOf(x); return m && m.name === name; })[0] : null;
  }
  function todo(f) { return !answered(f) || unaccepted(f); }  // still to do: no answer, or a proposal to accept
  function answered(f) {
    if (f.classList.contains("lsf-choices")) return choices(f).some(function (c) { return c.checked; });
    if (f.classList.contains("lsf-number")) { var n = f.querySelector("input"); return !!(n && n.value !== ""); }
    var t = f.querySelector("textarea");
    return !(t && visible(t)) && !!f.querySelector(".lsf-textarea__region");
  }
  function focusField(f) {
    var t;
    if (f.classList.contains("lsf-choices")) { rove(f); t = choices(f).filter(function (c) { return c.tabIndex === 0; })[0]; }
    else {
      t = f.querySelector("textarea");
      if (!visible(t)) t = f.querySelector('input, button[aria-label="Edit Region"]');
    }
    if (!t) return false;
    t.focus({preventScroll: true});
    t.scrollIntoView({block: "nearest"});
    return true;
  }
  // after a field is answered: the form's next field still without an answer (the re-render awaited)
  function advance(form, index, tries) {
    var all = fields(form);
    for (var j = index + 1; j < all.length; j++) if (todo(all[j])) { focusField(all[j]); return; }
    if ((tries || 0) < 5) { setTimeout(function () { advance(form, index, (tries || 0) + 1); }, 30); return; }
    var a = document.activeElement;  // nothing left: the focus stays in this form (Enter: the next form)
    if ((!a || a === document.body) && all[index]) focusField(all[index]);
  }
  function go(form) {  // to a form: its first field without an answer, else its first field
    mark(form); form.scrollIntoView({block: "center"});
    var all = fields(form);
    var f = all.filter(todo)[0] || all[0];
    if (!f || !focusField(f)) { var first = form.querySelector("input, textarea"); if (first) first.focus({preventScroll: true}); }
  }
  function submitButton() {
    var b = document.querySelector('button[aria-label="Submit current annotation"], button[aria-label="Update current annotation"]');
    return b || Array.prototype.find.call(document.querySelectorAll("button"), function (x) {
      return visible(x) && /^(Submit|Update)$/.test(x.textContent.trim());
    });
  }

  // every hook of Label Studio's task page the keys rely on, checked once the page shows a RESCUE form
  var HOOKS = [
    ["Label Studio's task (window.Htx.task)", function () {
      var t = window.Htx && window.Htx.task; return !!(t && t.id != null && t.dataObj);
    }],
    ["a form's choice list with its boxes (.lsf-choices input)", function () { return choices(firstList()).length > 0; }],
    ["a choice's label (label > input)", function () { var c = choices(firstList())[0]; return !!(c && c.closest("label")); }],
    ["Label Studio's model of a list (React's fiber, item.name)", function () { return !!modelOf(firstList()); }],
    ["the Submit button", function () { return !!submitButton(); }]
  ];
  function firstList() { return document.querySelector('[id^="unit_"] .lsf-choices, [id^="voice_"] .lsf-choices'); }
  var firstSeen = 0;
  function ready() {  // whether the keys may act: the hooks found (checked once), never with one missing
    if (R.state !== "unchecked") return R.state === "on";
    if (!document.querySelector(FORM)) return false;
    var missing = HOOKS.filter(function (h) { try { return !h[1](); } catch (x) { return true; } })
      .map(function (h) { return h[0]; });
    if (!missing.length) { R.state = "on"; return true; }
    // a page still being drawn: looked at again for a few seconds before the keys give up
    if (!firstSeen) firstSeen = Date.now();
    if (Date.now() - firstSeen < 6000) { setTimeout(tidy, 500); return false; }
    R.state = "off";
    style.remove();  // nothing else of the keys either
    if (current && current.el) current.el.style.outline = "";
    var banner = document.createElement("div");
    banner.className = "rescue-off"; banner.setAttribute("role", "alert");
    banner.setAttribute("style", "position: fixed; top: 0; left: 0; right: 0; z-index: 100000; padding: 6px 12px;" +
      " background: #fff1f0; color: #a8071a; border-bottom: 2px solid #a8071a; font: 14px sans-serif;");
    banner.textContent = "keyboard helpers are off: this Label Studio page changed (not found: " + missing.join("; ") +
      "). Label Studio's own keys and the mouse work as usual.";
    document.body.appendChild(banner);
    if (window.console) console.warn("RESCUE keys: off, not found: " + missing.join("; "));
    return false;
  }

  // The page's tidying: what Label Studio draws gets the keys' marks. Everything read first (the
  // layout computed once), then everything written: reading layout after each write would make the
  // browser lay the whole page out again for each field. Nodes already as wanted are not touched.
  var pending = 0, since = 0;
  function tidy() {
    pending = 0; since = 0;
    if (R.state === "off") return;
    var on = ready();
    R.always.forEach(function (job) { job(); });  // (keys-page.js: the instructions, names, buttons, route)
    if (!on) return;
    fresh();
    var lists = [], looks = [];
    document.querySelectorAll(".lsf-choices").forEach(function (g) { if (!g.closest(PROPOSAL)) lists.push(g); });
    // a proposal not yet accepted has its own look (the word "proposed" before it)
    document.querySelectorAll(FIELD).forEach(function (f) {
      if (f.closest(PROPOSAL) || !formOf(f)) return;
      var p = unaccepted(f);
      if (p !== f.hasAttribute("data-rescue-proposed")) looks.push([f, p]);
    });
    lists.forEach(function (g) { rove(g); keyMarks(g); });
    looks.forEach(function (x) {
      if (x[1]) x[0].setAttribute("data-rescue-proposed", ""); else x[0].removeAttribute("data-rescue-proposed");
    });
    // an "accept" box is no Tab stop (the key a on its field, or the mouse); a text's Add button and a
    // kept text's Delete button: by mouse (Shift+Enter adds; a kept text's one Tab stop is its Edit button)
    document.querySelectorAll('[id^="proposal-"] input, .lsf-text-area form button, ' +
      '.lsf-textarea__actions button[aria-label="Delete Region"]').forEach(function (b) {
      if (b.getAttribute("tabindex") !== "-1") b.setAttribute("tabindex", "-1");
    });
    R.whenOn.forEach(function (job) { job(); });  // (keys-page.js: a refused submit's reason)
  }
  // debounced: once the page has been still for 80 ms (at least every 400 ms while it keeps changing),
  // not once per mutation: a task page makes thousands while its forms are built
  new MutationObserver(function () {
    var now = Date.now();
    if (!since) since = now;
    clearTimeout(pending);
    pending = setTimeout(tidy, now - since > 400 ? 0 : 80);
  }).observe(document.documentElement, {childList: true, subtree: true});

  // what the other two scripts use
  [taskNow, fresh, chosenForm, formOf, visible, inView, editing, mark, onScreen, start, choices, fiberFind, modelOf,
   single, rowNumbers, rove, fields, unaccepted, accept, fieldNamed, todo, answered, focusField, advance, go,
   submitButton, ready, tidy].forEach(function (fn) { R[fn.name] = fn; });
})();
