"""The editor patches that spare a window's build its forced layouts (``pipeline.labelstudio.front.patches``:
``TEXT_MAP_LAZY``, ``TEXT_MAP_DROPPED_UNREAD``, ``PANELS_MEASURED_ONCE``) leave the page as built, in
headless Debian Chromium through the front, patched and with ``RESCUE_NO_BUNDLE_PATCHES=1``: a text's
stored labelled spans are drawn over the same words, the editor reads the same text and offsets from
a text's map, and the side panels take the same layout in a window narrower than their breakpoint;
patched, a window without text regions no longer selects its texts to map them, and the side
panels measure their width once per element instead of at each of their renders."""
from __future__ import annotations

import pytest

from pipeline.labelstudio.front import FrontServer
from tests.helpers import browser_login

pytestmark = pytest.mark.slow

_CONFIG = """<View>
  <Labels name="lab" toName="text"><Label value="Person"/><Label value="Place"/></Labels>
  <Text name="text" value="$text"/>
  <HyperText name="clip" value="$clip" inline="true"/>
  <View idAttr="unit_0"><Choices name="pick" toName="text" choice="single">
    <Choice value="alpha"/><Choice value="beta"/></Choices></View>
</View>"""
_TEXT = "Ann met Bob in Paris.\nThey talked until late."
_REGIONS = [{"from_name": "lab", "to_name": "text", "type": "labels", "id": f"r{i}",
             "value": {"start": s, "end": e, "text": _TEXT[s:e], "labels": [label]}}
            for i, (s, e, label) in enumerate([(0, 3, "Person"), (15, 20, "Place")])]

# before Label Studio's scripts: every range added to the page's selection (each text's map is read
# by selecting the whole text) and every read of the side panels' width, counted from the page's load;
# of those, the reads of the panels' ref callback (the stack's frame above this getter: "ref" in the
# build) and the elements it read. The other reads (the panels' effect and ResizeObserver, 3 or so
# per element) and the number of elements (the editor built 2 or 3 times) follow timing, and so does
# the whole count
_COUNTERS = """(() => {
  window.__addRange = 0; window.__panelWidth = 0; window.__panelRefReads = 0; window.__panelRefElements = [];
  const add = Selection.prototype.addRange;
  Selection.prototype.addRange = function (r) { window.__addRange++; return add.call(this, r); };
  const width = Object.getOwnPropertyDescriptor(Element.prototype, 'clientWidth');
  Object.defineProperty(Element.prototype, 'clientWidth', {configurable: true, get() {
    if (this.classList && this.classList.contains('lsf-sidepanels')) {
      window.__panelWidth++;
      if (/^\\s*at ref \\(/.test(new Error().stack.split('\\n')[2] || '')) {
        window.__panelRefReads++;
        if (!window.__panelRefElements.includes(this)) window.__panelRefElements.push(this);
      }
    }
    return width.get.call(this); }});
})()"""
# what the page shows and what the editor reads from the text's map (offsets, text, a range's offsets)
_READ = """() => {
  const addRange = window.__addRange, panelWidth = window.__panelWidth;  // before this reads a map
  const panelRefReads = window.__panelRefReads, panelElements = window.__panelRefElements.length;
  const a = Htx.annotationStore.selected, text = a.names.get('text');
  const node = [...text.mountNodeRef.current.querySelectorAll('*')].concat([text.mountNodeRef.current])
    .flatMap(e => [...e.childNodes]).find(n => n.nodeType === 3 && n.textContent.includes('Bob'));
  const r = document.createRange(); const at = node.textContent.indexOf('Bob');
  r.setStart(node, at); r.setEnd(node, at + 3);
  const panels = document.querySelector('.lsf-sidepanels');
  return {spans: [...document.querySelectorAll('.htx-highlight')].map(s => s.textContent),
          regions: a.regions.map(x => [x.startOffset, x.endOffset, x.text]),
          middle: text.getTextFromGlobalOffsets({start: 4, end: 20}),
          bob: text.rangeToGlobalOffset(r),
          panels: panels ? panels.className : null,
          addRange, panelWidth, panelRefReads, panelElements};
}"""


def test_text_maps_and_panel_widths_read_when_needed_give_the_same_page(ls_server, ls_client, ls_credentials,
                                                                          monkeypatch, chromium):
    project = ls_client.ensure_project("rescue-test:desk-front-text-map", "text map", _CONFIG)
    data = {"text": _TEXT, "clip": "<b>row</b> one"}
    with_regions, without = ls_client.import_tasks(project.id, [
        {"data": data, "annotations": [{"result": _REGIONS}]}, {"data": data}])

    def page_through(front: FrontServer) -> dict[str, dict]:
        seen = {}
        with chromium() as browser:
            # narrower than the side panels' breakpoint (980 px): their layout depends on the width read
            page = browser.new_page(viewport={"width": 900, "height": 900})
            page.set_default_timeout(120_000)
            page.add_init_script(_COUNTERS)
            browser_login(page, front.url, ls_credentials["LABEL_STUDIO_USERNAME"],
                          ls_credentials["LABEL_STUDIO_PASSWORD"], timeout_ms=60_000)
            drawn = "document.querySelectorAll('.htx-highlight').length >= 2"  # the stored spans
            for name, task, ready in (("regions", with_regions, drawn), ("plain", without, "true")):
                page.goto(f"{front.url}/projects/{project.id}/data?task={task}")
                page.wait_for_function(f"""() => window.Htx && Htx.task && Htx.task.id === {task}
                  && document.querySelector('#unit_0 .lsf-choices input') && {ready}""")
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(500)
                seen[name] = page.evaluate(_READ)
        return seen

    try:
        with monkeypatch.context() as env:
            env.setenv("RESCUE_NO_BUNDLE_PATCHES", "1")
            plain = FrontServer(ls_server.url).start()
            try:
                unpatched = page_through(plain)
            finally:
                plain.stop()
        front = FrontServer(ls_server.url).start()
        try:
            assert "editor-1.23.2" in front.report.applied()
            patched = page_through(front)
        finally:
            front.stop()
    finally:
        ls_client.request("DELETE", f"/api/projects/{project.id}/", "delete the test project")

    for name in ("regions", "plain"):
        same = {k: v for k, v in unpatched[name].items()
                if k not in ("addRange", "panelWidth", "panelRefReads", "panelElements")}
        assert {k: patched[name][k] for k in same} == same, {"unpatched": unpatched[name], "patched": patched[name]}
    # the stored spans are drawn over their words; the map reads the text as shown
    assert unpatched["regions"]["spans"] == ["Ann", "Paris"]
    assert unpatched["regions"]["regions"] == [[0, 3, "Ann"], [15, 20, "Paris"]]
    assert unpatched["plain"]["middle"] == _TEXT[4:20] and unpatched["plain"]["bob"] == [8, 11]
    assert unpatched["plain"]["panels"], "no side panels on the page: nothing compared"
    # as built every text (the HyperText too) selects itself once drawn, in a window without regions
    # too; patched only those whose map is read: in the window with stored regions the text they are
    # on, in the other none
    assert unpatched["plain"]["addRange"] >= 2 and patched["plain"]["addRange"] == 0, (unpatched, patched)
    assert 0 < patched["regions"]["addRange"] < unpatched["regions"]["addRange"], (unpatched, patched)
    # as built the side panels' ref measures its element at every render of the panels (at least two
    # per element: their first effect sets their state), patched once per element; compared per
    # element, since how often a window's build renders them (their reads in all) follows timing
    for name in ("regions", "plain"):
        assert unpatched[name]["panelRefReads"] > unpatched[name]["panelElements"] >= 1, (unpatched, patched)
        assert patched[name]["panelRefReads"] == patched[name]["panelElements"] >= 1, (unpatched, patched)
