// The desk's front (pipeline.labelstudio.front): registers Label Studio's service worker (/sw.js, with the front's
// cache of Label Studio's build in front of it, static/sw.js) on the login page, so that it caches
// the build while the annotator types; Label Studio's app pages register it themselves.
(function () {
  if ("serviceWorker" in navigator && !navigator.serviceWorker.controller) {
    navigator.serviceWorker.register("__SW_PATH__").catch(function () {});
  }
})();
