// RESCUE annotators' keys, part 3 of 3 (after keys.js, which it needs): the page around the forms.
// A refused submit's reason beside the field it names; the keyboard route from the rounds into a
// round's stream; every play control stopping at its row's end; the instructions once per round;
// speaker names legible; no project-making buttons on an annotator's home.
(function () {
  var R = window.__rescueKeys;
  if (!R || R.page) return; R.page = true;
  var FIELD = R.FIELD;
  var formOf = R.formOf, visible = R.visible, mark = R.mark, fiberFind = R.fiberFind, modelOf = R.modelOf,
    fieldNamed = R.fieldNamed, todo = R.todo, answered = R.answered, focusField = R.focusField;

  // a refused submit: Label Studio's warning names the first missing field (its requiredMessage); the
  // reason goes next to that field, in words, and the focus to it
  R.clearWhy = function () {
    document.querySelectorAll(".rescue-why").forEach(function (w) {
      var f = w.nextElementSibling;
      if (!f || !f.isConnected || !todo(f)) w.remove();
    });
  };
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
  R.whenOn.push(function () {
    document.querySelectorAll(".ant-modal-confirm-warning").forEach(function (d) {
      if (!d.__rescueSeen) { d.__rescueSeen = true; refused(d); }
    });
  });
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
    if (R.state !== "on") return;
    var m = e.target, src = m && m.tagName === "AUDIO" ? (m.currentSrc || m.src || "") : "";
    var t = /#t=([\d.]+),([\d.]+)$/.exec(src);
    if (t) watch(m, Number(t[2]), function () { m.pause(); });
  }, true);
  function paragraphs(el) {  // Label Studio's model of the dialogue (Paragraphs) an element belongs to
    return fiberFind(el, 40, function (f) {
      var it = f.memoizedProps && f.memoizedProps.item;
      return it && it.audioRef && typeof it.stopNow === "function" ? it : null;
    });
  }
  function lineOf(button) {  // the dialogue line (its index among the turns) of a line's play button
    var box = button.parentElement, p = box && box.querySelector('[data-testid^="phrase:"]');
    return p ? Number(p.getAttribute("data-testid").split(":")[1]) : -1;
  }
  document.addEventListener("click", function (e) {
    if (R.state !== "on") return;
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
    // instructions closed before the page's tidy saw them (Escape or a click at once, on a busy machine)
    // count as seen all the same
    if (e.type === "click" || e.key === "Escape") instructions();
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
  // for some); each is darkened, same hue, until it reads at 4.5:1 (WCAG AA for its 16px). Every name's
  // colours are read first, then every name written (a write between reads would make the browser
  // compute the page's style again for each name).
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
  function darkened(c, bg) {
    var a = c.length > 3 ? c[3] : 1;
    var rgb = [0, 1, 2].map(function (i) { return c[i] * a + bg[i] * (1 - a); });
    var lb = luminance(bg), k = 1, out = rgb;
    while (k > 0) {
      out = rgb.map(function (x) { return Math.round(x * k); });
      var l = luminance(out);
      if ((Math.max(l, lb) + 0.05) / (Math.min(l, lb) + 0.05) >= 4.6) break;
      k -= 0.05;
    }
    return "rgb(" + out.join(", ") + ")";
  }
  function legible() {
    var names = document.querySelectorAll('span[class*="dialoguename--"]:not([data-rescue-ink])');
    if (!names.length) return;
    var inks = Array.prototype.map.call(names, function (n) {
      var c = rgba(n.style.color);
      return c ? darkened(c, background(n.parentElement)) : null;
    });
    names.forEach(function (n, i) {
      n.setAttribute("data-rescue-ink", "");
      if (inks[i]) n.style.color = inks[i];
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
  R.always.push(instructions, legible, unclutter, route);
})();
