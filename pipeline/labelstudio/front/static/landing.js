// RESCUE landing, added to every page by the desk's front (pipeline/labelstudio/front/app.py, LANDING_PATH).
// Comfort, never security: it only arranges what the person's own desk already shows them.
// * The login form has the focus, and a login goes to the person's rounds (the project list)
//   instead of Label Studio's Home, where nothing has the focus.
// * The project list shows the rounds in annotation order (transcript -> strategy), the first one
//   focused (Enter opens it, and Enter again on the data manager's "Label All Tasks": two keys),
//   each card without the pipeline's project key ("rescue-project:round/scenario/person").
// * The data manager shows no Import or Export (the pipeline brings the tasks and takes the answers).
(function () {
  if (window.__rescueLanding) return; window.__rescueLanding = true;
  // the rounds in annotation order: annotation_schemas/rounds (tests/desk_front/test_landing.py checks)
  var ROUNDS = ["transcript", "emotion", "viewpoints", "relation", "strategy"];
  // a project's key, the last line of its description: rescue-<kind>:round/scenario[/...] (the
  // front knows no kinds of people: any kind the push writes)
  var KEY = /^rescue-[a-z]+:([^/\s]+)\/([^/\s]+)(?:\/\S+)?$/;
  var LOGIN = /^\/user\/login\/?$/;

  if (LOGIN.test(location.pathname)) {
    var form = document.getElementById("login-form");
    if (form) {  // Label Studio's own next is Home ("/"): the rounds instead; a link's own next stays
      var to = new URL(form.getAttribute("action") || location.href, location.href);
      var next = to.searchParams.get("next");
      if (!next || next === "/") { to.searchParams.set("next", "/projects/"); form.setAttribute("action", to.pathname + to.search); }
    }
    var email = document.querySelector("input[name=email]");
    var box = email && email.value ? document.querySelector("input[name=password]") : email;
    if (box && (!document.activeElement || document.activeElement === document.body)) box.focus();
    return;
  }

  var acted = false;  // the person pressed a key or the pointer on this page: their focus is theirs
  function act() { acted = true; }
  document.addEventListener("keydown", act, true);
  document.addEventListener("pointerdown", act, true);
  var path = location.pathname;  // a page of Label Studio's app opened without a reload starts unacted

  function rank(link) {
    var i = ROUNDS.indexOf(link.getAttribute("data-rescue-round") || "");
    return i < 0 ? ROUNDS.length : i;
  }
  function rounds() {
    var list = document.querySelector(".lsf-projects-page__list");
    if (!list) return;
    var links = Array.prototype.filter.call(list.children, function (a) { return a.matches("a.lsf-projects-page__link"); });
    links.forEach(function (a) {
      var d = a.querySelector(".lsf-project-card__description");
      // (the list's first answer may come without descriptions: looked at again as they come)
      if (!d || !/rescue-[a-z]+:/.test(d.textContent)) return;
      var found = null;
      var kept = d.textContent.split("\n").filter(function (line) {
        var m = KEY.exec(line.trim()); if (m) found = m; return !m;
      });
      if (!found) return;
      a.setAttribute("data-rescue-round", found[1]);
      a.setAttribute("data-rescue-scenario", found[2]);
      d.textContent = kept.join("\n").trim();
    });
    var sorted = links.map(function (a, i) { return [rank(a), a.getAttribute("data-rescue-scenario") || "", i, a]; })
      .sort(function (x, y) { return x[0] - y[0] || (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0) || x[2] - y[2]; })
      .map(function (x) { return x[3]; });
    // React keys the cards by project: moved, they stay where they are put until the list itself changes.
    // Moving the focused card blurs it: the person's focus goes back where it was
    if (sorted.some(function (a, i) { return a !== links[i]; })) {
      var had = document.activeElement;
      sorted.forEach(function (a) { list.appendChild(a); });
      if (had && had !== document.body && document.activeElement !== had && list.contains(had)) had.focus();
    }
    if (!acted && sorted[0] && document.activeElement !== sorted[0]) sorted[0].focus();
  }
  function hideTransfer(b) {  // the data manager's Import and Export buttons
    if (b.style.display !== "none" && /^(Import|Export)$/.test(b.textContent.trim())) b.style.display = "none";
  }
  function hideTransfers(records) {  // in what changed (the whole page at first): not the page again per change
    if (!records) { document.querySelectorAll("button, a").forEach(hideTransfer); return; }
    records.forEach(function (m) {
      var b = m.target.closest && m.target.closest("button, a");  // a button's text drawn anew
      if (b) hideTransfer(b);
      m.addedNodes.forEach(function (n) {
        if (n.nodeType !== 1) return;
        if (n.matches("button, a")) hideTransfer(n);
        if (n.firstElementChild) n.querySelectorAll("button, a").forEach(hideTransfer);
      });
    });
  }
  function tidy() {
    if (location.pathname !== path) { path = location.pathname; acted = false; }
    if (/^\/projects\/?$/.test(location.pathname)) rounds();
  }
  var DATA = /^\/projects\/\d+\/data\/?$/;
  var pending = 0;
  new MutationObserver(function (records) {
    // at once (before the page is painted): the buttons are never seen, nor pressed
    if (DATA.test(location.pathname)) hideTransfers(records);
    if (!pending) pending = setTimeout(function () { pending = 0; tidy(); }, 40);
  }).observe(document.documentElement, {childList: true, subtree: true});
  tidy();
  if (DATA.test(location.pathname)) hideTransfers();
})();
