// RESCUE landing, added to pages by the desk's front (desk_front/app.py, LANDING_PATH).
(function () {
  if (window.__rescueLanding) return; window.__rescueLanding = true;
})();
