// RESCUE annotators' keys, added to every page by the desk's front (served at /__rescue__/keys.js).
// Keyboard-first by the WAI-ARIA patterns: each choice list is ONE Tab stop (roving tabindex) with
// the arrow keys inside it; a form is a unit_<i> (a row) or a voice_<v> ("Who is each voice?"). A voice's
// pre-filled name is a proposal like a row's pre-filled value (its "accept" box is "proposal-voice_<v>_is").
//
// Key state belongs to the window on screen: Label Studio shows the next task (window) without
// reloading the page and every window reuses the forms' ids (unit_0, ...), so the form the keys act
// on is kept as an element with the task it belongs to, and a task change forgets it.
//
// Before it does anything on a task page the script checks every hook of Label Studio's page it
// relies on (HOOKS); if one is missing it shows a banner and does nothing at all: never silently wrong.
(function () {
  if (window.__rescueKeys) return; window.__rescueKeys = true;
  var state = "unchecked";  // "unchecked" (no RESCUE form seen yet), "on", or "off" (a hook is missing)
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
  var FORM = '[id^="unit_"], [id^="voice_"]';
  var FIELD = ".lsf-choices, .lsf-text-area, .lsf-number";
  // a field's "accept" box (ls_config.proposal_box: shown where the push proposed that field's value),
  // and the "pre-fill checked" box of a form pushed before proposals were per field
  var PROPOSAL = '[id^="proposal-"], [id^="prefill-checked_"]';
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
    current = null; keep = null; typed = null;
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
    if (state !== "on") return;
    var f = formOf(e.target); if (f) mark(f);
    var g = e.target.closest && e.target.closest(".lsf-choices"); if (g && !g.closest(PROPOSAL)) rove(g);
  }, true);
  document.addEventListener("pointerdown", function (e) {
    if (state !== "on") return;
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
  // Label Studio's model of a control (name, choice single/multiple, requiredmessage), from React's fiber
  function modelOf(el) {
    var key = el && Object.keys(el).find(function (k) { return k.indexOf("__reactFiber") === 0; });
    for (var f = key && el[key], i = 0; f && i < 25; f = f["return"], i++) {
      var it = f.memoizedProps && f.memoizedProps.item;
      if (it && it.name) return it;
    }
    return null;
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
  // typing a row number in a list of rows: "7" picks row 7, "1" "2" row 12 (within a second); a number
  // that more rows start with waits for the next digit (a short while, then it is taken as it is)
  var typed = null;  // {group, text, at, timer}
  function byRow(group, rows, digit, pick) {
    var now = Date.now(), text = digit;
    if (typed && typed.group === group && now - typed.at < 1000) {
      clearTimeout(typed.timer);
      text = typed.text + digit;
      if (!rows.some(function (r) { return r.indexOf(text) === 0; })) text = digit;
    }
    typed = {group: group, text: text, at: now, timer: 0};
    var exact = rows.indexOf(text);
    var longer = rows.some(function (r) { return r !== text && r.indexOf(text) === 0; });
    if (exact >= 0 && !longer) { typed = null; pick(exact); }
    else if (exact >= 0) typed.timer = setTimeout(function () { typed = null; pick(exact); }, 700);
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
  // a proposed value is accepted by the key a on its field, or by an edit of that field, and of that
  // field only (ls_config.proposal_box); a form pushed before proposals were per field has one "pre-fill
  // checked" box, which any change in the form ticks
  function edited(e) {  // a choice clicked (Label Studio's choices fire no change event) or text typed
    var t = e.target;
    if (state !== "on" || !t || !t.closest) return;
    if (t.closest(PROPOSAL)) { setTimeout(tidy, 0); return; }  // an "accept" box itself (by mouse): the look follows
    if (e.type === "click" && (t.type === "checkbox" || t.type === "radio")) remember(t);
    var field = t.closest(FIELD), form = formOf(t);
    if (!field || !form) return;
    if (e.type !== "click" && editing(t)) {
      // text typed: its box is ticked once the text is left. Label Studio closes a text being edited on
      // any click anywhere, the box's click included: ticked at the first key, the text box closed under
      // the person's fingers (the rest of their typing lost)
      if (!t.__rescueTick) {
        var m = modelOf(field);
        t.__rescueTick = {form: form, name: m && m.name};
        var typedIn = taskNow();
        t.addEventListener("focusout", function () {
          var was = t.__rescueTick; t.__rescueTick = null;
          setTimeout(function () {  // after Label Studio kept the text; in this same window only
            if (was && taskNow() === typedIn) acceptTyped(was);
          }, 0);
        }, {once: true});
      }
    } else if (e.type !== "click" || t.type === "checkbox" || t.type === "radio") { accept(field); legacy(form); }
    setTimeout(clearWhy, 0);
  }
  function acceptTyped(was) {
    var form = was.form.isConnected ? was.form : document.getElementById(was.form.id);
    var f = fieldNamed(form, was.name);
    if (f) accept(f);
    legacy(form);
  }
  function legacy(form) {  // the one "pre-fill checked" box of a form pushed before proposals were per field
    var box = form && form.querySelector('[id^="prefill-checked_"] input');
    if (box && !box.checked && box.offsetParent) box.click();
  }
  function textBox(el) {  // Label Studio's component of a text being edited (its save: keep it, close it)
    var key = el && Object.keys(el).find(function (k) { return k.indexOf("__reactFiber") === 0; });
    for (var f = key && el[key], i = 0; f && i < 15; f = f["return"], i++) {
      var c = f.stateNode;
      if (c && typeof c.save === "function" && typeof c.startEditing === "function") return c;
    }
    return null;
  }
  function leaveText(a) {  // a text being typed is kept (Label Studio keeps it on blur) and accepted
    var was = a && a.__rescueTick;
    if (!was) return;
    a.blur();
    acceptTyped(was);
  }
  // Label Studio draws a choice list anew when one of its choices is clicked (by mouse, Space, a number
  // or arrow key): the focused box is replaced and the focus falls to the page, where the next key would
  // act on the form's first list. For a short while after a click the focus comes back to the same
  // choice of the same list, unless it went elsewhere meanwhile.
  var keep = null;  // {form: id, field: index among the form's fields, choice: index, until: ms}
  function remember(input) {
    var form = formOf(input), group = input.closest(".lsf-choices");
    if (!form || !group) return;
    var first = !keep;
    keep = {form: form.id, task: taskNow(), field: fields(form).indexOf(group), choice: choices(group).indexOf(input),
            until: Date.now() + 800};
    if (first) requestAnimationFrame(restore);
  }
  function restore() {
    if (keep && keep.task !== taskNow()) keep = null;  // another window: its forms are not this one's
    if (!keep) return;
    var a = document.activeElement;
    if (a && a !== document.body) {
      var g = a.closest && a.closest(".lsf-choices"), f = g && formOf(g);
      if (!f || f.id !== keep.form) { keep = null; return; }  // moved on (a text, another form, a button)
    } else {
      var form = document.getElementById(keep.form), field = form && fields(form)[keep.field];
      var c = field && choices(field)[keep.choice];
      if (c) { rove(field); c.focus({preventScroll: true}); }
    }
    if (Date.now() < keep.until) requestAnimationFrame(restore); else keep = null;
  }
  ["click", "input", "change"].forEach(function (kind) { document.addEventListener(kind, edited, true); });

  // a refused submit: Label Studio's warning names the first missing field (its requiredMessage); the
  // reason goes next to that field, in words, and the focus to it
  function clearWhy() {
    document.querySelectorAll(".rescue-why").forEach(function (w) {
      var f = w.nextElementSibling;
      if (!f || !f.isConnected || !todo(f)) w.remove();
    });
  }
  function refused(dialog) {
    var text = ((dialog.querySelector(".ant-modal-confirm-content") || {}).textContent || "").trim();
    if (!text) return;
    var all = Array.prototype.filter.call(document.querySelectorAll(FIELD), function (f) { return formOf(f) && visible(f); });
    var matching = all.filter(function (f) {
      var m = modelOf(f); return m && (m.requiredmessage || m.requiredMessage) === text;
    });
    var field = matching.filter(function (f) { return !answered(f); })[0] || matching[0];
    if (!field) return;  // not one of our forms' messages: Label Studio's warning as it is
    var box = field.closest('[id^="proposal-"]');
    if (box) {  // a proposal not accepted: the reason goes to the proposed field itself
      var proposed = fieldNamed(formOf(box), box.id.slice("proposal-".length));
      if (proposed) field = proposed;
    }
    document.querySelectorAll(".rescue-why").forEach(function (w) { w.remove(); });
    var why = document.createElement("div");
    why.className = "rescue-why"; why.setAttribute("role", "alert"); why.textContent = voiceNamed(field, text);
    field.parentNode.insertBefore(why, field);
    var ok = dialog.querySelector(".ant-modal-confirm-btns button");
    if (ok) ok.click();
    mark(formOf(field));
    // once the dialog has closed: closing gives the focus back to where it came from, which on a slow
    // machine came after a fixed wait and took the focus from the field again
    settle(dialog, 0, function () { focusField(field); field.scrollIntoView({block: "center"}); });
  }
  // a voice's message (voice_naming.config_block) cannot name the voice (Label Studio puts no task data in
  // it): beside the field it names the voice, the one the form shows ("The proposed name of voice 'Speaker 2'
  // is not accepted yet: ...")
  function voiceNamed(field, text) {
    var form = formOf(field), m = form && /^voice_(\d+)$/.exec(form.id);
    var voices = (window.Htx && Htx.task && Htx.task.dataObj && Htx.task.dataObj.voices) || [];
    var voice = m && voices[Number(m[1])] && voices[Number(m[1])].voice;
    if (!voice) return text;
    return text.replace("a voice under 'Who is each voice?'", "voice '" + voice + "'")
      .replace(" (the first such voice from the top)", "");
  }
  function settle(dialog, tries, then) {  // the dialog's wrapper gone or hidden (up to 5 s), then 50 ms
    var wrap = dialog.closest(".ant-modal-wrap") || dialog;
    if (tries < 100 && wrap.isConnected && wrap.getClientRects().length) {  // (a fixed wrapper has no offsetParent)
      setTimeout(function () { settle(dialog, tries + 1, then); }, 50); return;
    }
    setTimeout(then, 50);
  }

  // a keyboard route from the project list into the label stream: the list's first project and the
  // data manager's "Label All Tasks" get the focus (Enter opens them); arrow keys walk the projects
  var routed = "";
  function route() {
    var a = document.activeElement, path = location.pathname + location.search;
    if ((a && a !== document.body) || routed === path) return;
    var el = null;
    if (/^\/projects\/?$/.test(location.pathname)) el = document.querySelector("a.lsf-projects-page__link");
    else if (/^\/projects\/\d+\/data\/?$/.test(location.pathname) && !/[?&](task|labeling)=/.test(location.search))
      el = Array.prototype.find.call(document.querySelectorAll("button"), function (b) {
        return visible(b) && b.textContent.trim() === "Label All Tasks";
      });
    if (el) { routed = path; el.focus(); }
  }
  // hearing a row: every play control stops at its row's end. A form's player plays the media with a
  // temporal fragment (#t=start,end), which the browser ends only at its next time update (up to ~0.25 s
  // late): it is paused on the frame that reaches the end. A dialogue line's play button plays Label
  // Studio's one audio of the dialogue from the line's start and goes on into the next lines: the line's
  // own end stops it (Label Studio's own stop and reset, as its unused stopAtTheEnd would).
  function watch(media, end, stopIt) {
    (function frame() {
      if (media.paused) return;
      if (media.currentTime >= end - 0.02) { stopIt(); return; }
      requestAnimationFrame(frame);
    })();
  }
  document.addEventListener("play", function (e) {
    if (state !== "on") return;
    var m = e.target, src = m && m.tagName === "AUDIO" ? (m.currentSrc || m.src || "") : "";
    var t = /#t=([\d.]+),([\d.]+)$/.exec(src);
    if (t) watch(m, Number(t[2]), function () { m.pause(); });
  }, true);
  function paragraphs(el) {  // Label Studio's model of the dialogue (Paragraphs) an element belongs to
    var key = el && Object.keys(el).find(function (k) { return k.indexOf("__reactFiber") === 0; });
    for (var f = key && el[key], i = 0; f && i < 40; f = f["return"], i++) {
      var it = f.memoizedProps && f.memoizedProps.item;
      if (it && it.audioRef && typeof it.stopNow === "function") return it;
    }
    return null;
  }
  function lineOf(button) {  // the dialogue line (its index among the turns) of a line's play button
    var box = button.parentElement, p = box && box.querySelector('[data-testid^="phrase:"]');
    return p ? Number(p.getAttribute("data-testid").split(":")[1]) : -1;
  }
  document.addEventListener("click", function (e) {
    if (state !== "on") return;
    var t = e.target, button = t && t.closest ? t.closest('button[aria-label="play"], button[aria-label="pause"]') : null;
    if (button && !formOf(button)) {
      var line = lineOf(button), model = paragraphs(button);
      if (line < 0 || !model) return;
      setTimeout(function () {  // after Label Studio's own handler has started (or stopped) the line
        var audio = model.audioRef && model.audioRef.current, span = (model.regionsStartEnd || [])[line];
        if (audio && span && model.playingId === line)
          watch(audio, span.end, function () { model.stopNow(); model.reset(); });
      }, 0);
      return;
    }
    // a click on a dialogue line (not a selection of its words) plays that line, and its row's form
    // becomes the outlined one (the keys act on it)
    var phrase = t && t.closest ? t.closest('[data-testid^="phrase:"]') : null;
    var sel = window.getSelection && window.getSelection();
    if (!phrase || (sel && !sel.isCollapsed)) return;
    var play = phrase.parentElement && phrase.parentElement.querySelector('button[aria-label="play"]');
    if (play) play.click();
    var turn = ((paragraphs(phrase) || {})._value || [])[Number(phrase.getAttribute("data-testid").split(":")[1])];
    var units = (window.Htx && Htx.task && Htx.task.dataObj && Htx.task.dataObj.units) || [];
    for (var i = 0; turn && i < units.length; i++)
      if (units[i].row_index === turn.row_index) { var form = document.getElementById("unit_" + i); if (form) mark(form); }
  }, true);

  // the round's instructions: Label Studio opens them each time the label stream is entered; the front
  // lets them open once per project (a round) in this browser, and whenever "Instructions" is pressed
  var asked = 0;
  function askedFor(e) {
    var b = e.target && e.target.closest && e.target.closest("button");
    if (b && b.textContent.trim() === "Instructions" && (e.type === "click" || e.key === "Enter" || e.key === " "))
      asked = Date.now();
  }
  document.addEventListener("click", askedFor, true);
  document.addEventListener("keydown", askedFor, true);
  function instructions() {
    document.querySelectorAll('button[aria-label="Close modal"]').forEach(function (close) {
      if (close.__rescueSeen) return;
      var dialog = close.closest('[role="dialog"]') || close.parentElement.parentElement;
      var m = /^\/projects\/(\d+)/.exec(location.pathname);
      // not yet its text (a dialog still being drawn): looked at again on the next tidy
      if (!m || !dialog || dialog.textContent.trim().indexOf("Labeling Instructions") !== 0) return;
      close.__rescueSeen = true;
      var key = "rescue:instructions-seen:" + m[1];
      var seen = false;
      try { seen = localStorage.getItem(key) === "1"; localStorage.setItem(key, "1"); } catch (x) { return; }
      if (seen && Date.now() - asked > 3000) close.click();
    });
  }
  // speaker names in the dialogue: Label Studio gives each a light colour of its own (3.15:1 on the page
  // for some); each is darkened, same hue, until it reads at 4.5:1 (WCAG AA for its 16px)
  function luminance(c) {
    var v = c.map(function (x) { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
  }
  function rgba(text) { var m = /rgba?\(([^)]+)\)/.exec(text || ""); return m ? m[1].split(",").map(Number) : null; }
  function background(el) {
    for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
      var c = rgba(getComputedStyle(e).backgroundColor);
      if (c && (c.length < 4 || c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  }
  function legible() {
    document.querySelectorAll('span[class*="dialoguename--"]:not([data-rescue-ink])').forEach(function (n) {
      n.setAttribute("data-rescue-ink", "");
      var c = rgba(n.style.color); if (!c) return;
      var bg = background(n.parentElement), a = c.length > 3 ? c[3] : 1;
      var rgb = [0, 1, 2].map(function (i) { return c[i] * a + bg[i] * (1 - a); });
      var lb = luminance(bg), k = 1, out = rgb;
      while (k > 0) {
        out = rgb.map(function (x) { return Math.round(x * k); });
        var l = luminance(out);
        if ((Math.max(l, lb) + 0.05) / (Math.min(l, lb) + 0.05) >= 4.6) break;
        k -= 0.05;
      }
      n.style.color = "rgb(" + out.join(", ") + ")";
    });
  }
  // the annotator's home and project list: no "Create Project" or "Invite Members" (the pipeline makes
  // the projects; each desk is one person's)
  function unclutter() {
    if (!/^\/(projects\/?)?$/.test(location.pathname)) return;
    document.querySelectorAll("button, a").forEach(function (b) {
      if (b.style.display !== "none" && /^(Create Project|Invite Members|Create)$/.test(b.textContent.trim())) b.style.display = "none";
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
    if (state !== "unchecked") return state === "on";
    if (!document.querySelector(FORM)) return false;
    var missing = HOOKS.filter(function (h) { try { return !h[1](); } catch (x) { return true; } })
      .map(function (h) { return h[0]; });
    if (!missing.length) { state = "on"; return true; }
    // a page still being drawn: looked at again for a few seconds before the keys give up
    if (!firstSeen) firstSeen = Date.now();
    if (Date.now() - firstSeen < 6000) { setTimeout(tidy, 500); return false; }
    state = "off";
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
  var pending = 0, since = 0;
  function tidy() {
    pending = 0; since = 0;
    if (state === "off") return;
    var on = ready();
    instructions();
    legible();
    unclutter();
    route();
    if (!on) return;
    fresh();
    document.querySelectorAll(".lsf-choices").forEach(function (g) { if (!g.closest(PROPOSAL)) { rove(g); keyMarks(g); } });
    // an "accept" box is no Tab stop (the key a on its field, or the mouse)
    document.querySelectorAll('[id^="proposal-"] input').forEach(function (b) {
      if (b.getAttribute("tabindex") !== "-1") b.setAttribute("tabindex", "-1");
    });
    // a proposal not yet accepted has its own look (the word "proposed" before it)
    document.querySelectorAll(FIELD).forEach(function (f) {
      if (f.closest(PROPOSAL) || !formOf(f)) return;
      var p = unaccepted(f);
      if (p !== f.hasAttribute("data-rescue-proposed")) {
        if (p) f.setAttribute("data-rescue-proposed", ""); else f.removeAttribute("data-rescue-proposed");
      }
    });
    // a text's Add button and a kept text's Delete button: by mouse (Shift+Enter adds; a kept text's
    // one Tab stop is its Edit button)
    document.querySelectorAll('.lsf-text-area form button, .lsf-textarea__actions button[aria-label="Delete Region"]')
      .forEach(function (b) { if (b.getAttribute("tabindex") !== "-1") b.setAttribute("tabindex", "-1"); });
    document.querySelectorAll(".ant-modal-confirm-warning").forEach(function (d) {
      if (!d.__rescueSeen) { d.__rescueSeen = true; refused(d); }
    });
  }
  // debounced: once the page has been still for 80 ms (at least every 400 ms while it keeps changing),
  // not once per mutation: a task page makes thousands while its forms are built
  new MutationObserver(function () {
    var now = Date.now();
    if (!since) since = now;
    clearTimeout(pending);
    pending = setTimeout(tidy, now - since > 400 ? 0 : 80);
  }).observe(document.documentElement, {childList: true, subtree: true});

  function submitButton() {
    var b = document.querySelector('button[aria-label="Submit current annotation"], button[aria-label="Update current annotation"]');
    return b || Array.prototype.find.call(document.querySelectorAll("button"), function (x) {
      return visible(x) && /^(Submit|Update)$/.test(x.textContent.trim());
    });
  }
  function nextForm(form) {
    var m = /^(unit|voice)_(\d+)$/.exec(form.id);
    var next = m && document.getElementById(m[1] + "_" + (Number(m[2]) + 1));
    return next || (m && m[1] === "voice" ? document.getElementById("unit_0") : null);
  }
  function stop(e) { e.preventDefault(); e.stopImmediatePropagation(); }
  // a number key in the list in focus: a list of rows takes the row number, any other the position
  // (1-9, 0 the 10th, - the last), as each choice shows
  function pickByKey(unit, group, key) {
    var rows = rowNumbers(group), index = fields(unit).indexOf(group);
    var pick = function (i) {
      var g = group.isConnected ? group : fields(unit.isConnected ? unit : document.getElementById(unit.id) || unit)[index];
      var item = g && choices(g)[i];
      if (!item || !inView(g)) return;  // drawn anew meanwhile off screen: nothing changes
      mark(formOf(g));
      var one = single(g);
      if (!(one && item.checked)) item.click();  // a single choice already chosen stays chosen
      else accept(g);  // ... and its key, on a proposal, accepts it
      item.focus({preventScroll: true}); rove(g);
      if (one) setTimeout(function () { advance(formOf(g) || unit, index); }, 0);
    };
    if (rows) { if (/^\d$/.test(key)) byRow(group, rows, key, pick); return; }
    var n = choices(group).length;
    pick(key === "-" ? n - 1 : key === "0" ? 9 : Number(key) - 1);
  }
  // the play key: the row's own player plays the row, and the key again stops it
  function playRow(form) {
    var audio = form && form.querySelector("audio");
    if (!audio) return;
    if (!audio.paused) { audio.pause(); return; }
    document.querySelectorAll("audio").forEach(function (x) { if (x !== audio && !x.paused) x.pause(); });
    var t = /#t=([\d.]+),([\d.]+)$/.exec(audio.currentSrc || audio.src || "");
    if (t && audio.readyState >= 1 && (audio.currentTime < Number(t[1]) - 0.05 || audio.currentTime >= Number(t[2]) - 0.05))
      audio.currentTime = Number(t[1]);  // played to its end before: from the row's start again
    var playing = audio.play();
    if (playing && playing.catch) playing.catch(function () {});
  }
  window.addEventListener("keydown", function (e) {
    if (state === "off") return;
    var t = e.target, a = document.activeElement;
    // off a task page (or before its hooks are found) only the project list's keys
    if (!ready() && !(t && t.classList && t.classList.contains("lsf-projects-page__link"))) return;
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter" && !e.altKey && !e.shiftKey) {
      // submit from anywhere, a focused choice or text included (Label Studio's own key skips inputs)
      var sb = submitButton();
      if (sb && !sb.disabled) { stop(e); leaveText(a); sb.click(); }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "Tab" && t && t.getAttribute && t.getAttribute("data-testid") === "htx-textbox-input") {
      // Label Studio's Tab out of a text being edited closes it without keeping what was typed (its
      // Shift+Enter and a click elsewhere keep it): kept here first, then Tab moves on as usual
      var box = textBox(t);
      if (box) box.save();
    }
    var field = t && t.closest ? t.closest(FIELD) : null, form = formOf(t);
    if (e.key === "Enter" && e.shiftKey && field && form) {
      // Shift+Enter keeps a text (Label Studio adds it) or a number, then the form's next open field
      var index = fields(form).indexOf(field);
      if (field.classList.contains("lsf-number")) stop(e);
      if (index >= 0) setTimeout(function () { advance(form, index); }, 0);
      return;
    }
    if (/^Arrow(Up|Down|Left|Right)$|^Home$|^End$/.test(e.key) && t.classList && t.classList.contains("lsf-projects-page__link")) {
      var links = Array.prototype.slice.call(document.querySelectorAll("a.lsf-projects-page__link"));
      var k = links.indexOf(t), n = links.length;
      var to = e.key === "Home" ? 0 : e.key === "End" ? n - 1 : /Down|Right/.test(e.key) ? (k + 1) % n : (k - 1 + n) % n;
      stop(e); links[to].focus(); return;
    }
    if (editing(t)) return;
    var group = t && t.closest ? t.closest(".lsf-choices") : null;
    if (group && /^Arrow(Up|Down|Left|Right)$|^Home$|^End$/.test(e.key) && choices(group).indexOf(t) >= 0) {
      // radio group / checkbox group: the arrows move in the list (a single-choice list: and choose)
      var all = choices(group), i = all.indexOf(t);
      var j = e.key === "Home" ? 0 : e.key === "End" ? all.length - 1
        : /Down|Right/.test(e.key) ? (i + 1) % all.length : (i - 1 + all.length) % all.length;
      stop(e); all[j].focus(); rove(group);
      if (single(group) && !all[j].checked) all[j].click();
      return;
    }
    var chosen = chosenForm();  // of this window only
    if (!(form || chosen || start())) return;  // not a RESCUE task page: Label Studio's keys as usual
    // the form a key acts on: the one in focus, else the outlined one if it is on screen, else the first on screen
    var unit = form || (chosen && inView(chosen) ? chosen : null) || onScreen();
    if (/^[0-9-]$/.test(e.key)) {
      stop(e);
      if (!group || !formOf(group)) {
        // no list in focus: the focus goes to the first list of the form in view (none in view: of the
        // window's first form), and nothing changes
        var to = unit || start();
        var first = to && fields(to).filter(function (f) { return f.classList.contains("lsf-choices"); })[0];
        if (first) { mark(to); focusField(first); }
        return;
      }
      pickByKey(formOf(group), group, e.key);
    } else if (e.key === "Enter" && !e.shiftKey) {
      if (!form && a && a !== document.body && (a.tagName === "BUTTON" || a.tagName === "A")) return;  // its own Enter
      stop(e);
      // the window's first Enter comes to "Who is each voice?" if it has it, else to the first form on
      // screen; each next one to the following form
      var here = form || chosen;  // (Enter accepts nothing: a proposal is accepted field by field)
      var next = here ? nextForm(here) : (document.getElementById("voice_0") || unit || start());
      if (next) go(next);
    } else if (e.key === "a" && !e.shiftKey) {
      stop(e);
      if (field && form && unaccepted(field)) {  // the proposal in focus is accepted as it is; on to what is left
        var at = fields(form).indexOf(field);
        accept(field);
        setTimeout(clearWhy, 0);
        if (at >= 0) setTimeout(function () { advance(form, at); }, 0);
        return;
      }
      // no proposal in focus: the focus goes to the first proposal of the form in view, nothing is accepted
      var here2 = unit || start(), first2 = here2 && fields(here2).filter(unaccepted)[0];
      if (first2) { mark(here2); focusField(first2); }
    } else if (e.key === "p" && !e.shiftKey) {
      stop(e);
      playRow(unit);
    } else if (/^[a-z]$/i.test(e.key) && !e.shiftKey) {
      e.stopImmediatePropagation();  // Label Studio's automatic hotkeys act on the first forms only
    }
  }, true);
})();
