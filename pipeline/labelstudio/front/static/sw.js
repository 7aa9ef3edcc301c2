// The desk's front (pipeline/labelstudio/front/app.py): Label Studio's build assets from Cache
// Storage. Chrome compiles a script a service worker caches while it installs and keeps the
// compiled code beside it (V8 code cache), so even the first task page after logging in skips
// compiling Label Studio's ~7 MB of JavaScript, and every later page skips the download as well.
// The front serves this in front of Label Studio's own service worker (/sw.js, which its pages
// register and which caches presigned media links; a scope holds one worker) and fills in BUILD
// (Label Studio's version: another build gets another cache) and ASSETS (the build's scripts
// and styles that pages have loaded through the front so far).
const BUILD = "__BUILD__";
const ASSETS = __ASSETS__;
const CACHE = "rescue-ls-" + BUILD;
const ASSET_PATH = /^\/(static|react-app)\//;
const staleClients = new Set();  // pages of another build than the cached one: the network serves them

self.addEventListener("install", (event) => {
  // a new list of the same build: only what is not cached yet is fetched
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    for (const url of ASSETS) {
      if (!(await cache.match(url, {ignoreVary: true}))) await cache.add(url);
    }
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {  // Label Studio's own cache (ls-cache-*) is not ours to clear
    for (const name of await caches.keys()) {
      if (name.startsWith("rescue-ls-") && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin || !ASSET_PATH.test(url.pathname)
      || staleClients.has(event.clientId)) return;  // everything else goes to the network as without a worker
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    const hit = await cache.match(event.request, {ignoreVary: true});
    if (hit) return hit;
    // the same file of another version (main.js?v=...): Label Studio was upgraded; this page must
    // not get the cached chunks of the old build (their names carry no version)
    if (url.search && (await cache.keys()).some((r) => { const u = new URL(r.url); return u.pathname === url.pathname && u.search !== url.search; })) {
      staleClients.add(event.clientId);
      self.registration.update();
    }
    return fetch(event.request);
  })());
});

// Label Studio's own service worker follows.
