// RESCUE annotators' keys, part 2 of 3 (after keys.js, which it needs): what each key and each edit does.
// A proposed value is accepted by the key a on its field, or by an edit of that field, and of that
// field only (ls_config.proposal_box); a number key picks the choice that shows it (in a list of rows,
// the row number); Enter goes from form to form; p plays the row; Ctrl+Enter submits from anywhere.
(function () {
  var R = window.__rescueKeys;
  if (!R || R.input) return; R.input = true;
  var FIELD = R.FIELD, PROPOSAL = R.PROPOSAL;
  var taskNow = R.taskNow, chosenForm = R.chosenForm, formOf = R.formOf, inView = R.inView, editing = R.editing,
    mark = R.mark, onScreen = R.onScreen, start = R.start, choices = R.choices, fiberFind = R.fiberFind,
    modelOf = R.modelOf, single = R.single, rowNumbers = R.rowNumbers, rove = R.rove, fields = R.fields,
    unaccepted = R.unaccepted, accept = R.accept, fieldNamed = R.fieldNamed, advance = R.advance,
    focusField = R.focusField, go = R.go, submitButton = R.submitButton, ready = R.ready;
  function clearWhy() { if (R.clearWhy) R.clearWhy(); }  // (keys-page.js)

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
  // a form pushed before proposals were per field has one "pre-fill checked" box, which any change in
  // the form ticks
  function edited(e) {  // a choice clicked (Label Studio's choices fire no change event) or text typed
    var t = e.target;
    if (R.state !== "on" || !t || !t.closest) return;
    if (t.closest(PROPOSAL)) { setTimeout(R.tidy, 0); return; }  // an "accept" box itself (by mouse): the look follows
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
    return fiberFind(el, 15, function (f) {
      var c = f.stateNode;
      return c && typeof c.save === "function" && typeof c.startEditing === "function" ? c : null;
    });
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
  R.onTaskChange.push(function () { keep = null; typed = null; });

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
    if (R.state === "off") return;
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
        var to2 = unit || start();
        var first = to2 && fields(to2).filter(function (f) { return f.classList.contains("lsf-choices"); })[0];
        if (first) { mark(to2); focusField(first); }
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
