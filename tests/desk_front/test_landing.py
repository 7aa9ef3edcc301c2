"""Login lands on the person's own rounds (pipeline/labelstudio/front/static/landing.js), through the front of a
real desk in headless Chromium: the login form has the focus, a login goes to the project list
with the rounds in annotation order and the first one focused, no card shows the pipeline's
project key, the data manager shows no Import or Export, and two keys (Enter, Enter) reach the
first round's task stream."""
from __future__ import annotations

import re

import pytest

from pipeline.labelstudio.front import FrontServer
from pipeline.labelstudio.front.app import LANDING_PATH, _STATIC
from pipeline.annotation import push
from pipeline.annotation.rounds import round_names
from tests.annotation.ls_samples import make_sample
from tests.helpers import SCREENSHOTS
from pipeline.paths import DataRoot

_ROUNDS_SHOWN = "() => [...document.querySelectorAll('a.lsf-projects-page__link')].map(a => a.getAttribute('data-rescue-round'))"
_VISIBLE_BUTTONS = ("() => [...document.querySelectorAll('button, a')].filter(b => b.getClientRects().length)"
                    ".map(b => b.textContent.trim())")


def test_the_landing_knows_the_rounds_in_annotation_order():
    """The script's own list of rounds is annotation_schemas/rounds' order (one source of truth,
    checked here since the page cannot read it)."""
    text = (_STATIC / "landing.js").read_text()
    found = re.search(r"var ROUNDS = \[([^\]]*)\]", text)
    assert found, "landing.js has no ROUNDS list"
    assert re.findall(r'"([^"]+)"', found.group(1)) == list(round_names())


def _card(pid: int, title: str, description: str) -> str:
    return (f'<a class="lsf-projects-page__link" href="/projects/{pid}/data"><div class="lsf-project-card">'
            f'<div class="lsf-project-card__title">{title}</div>'
            f'<div class="lsf-project-card__description">{description}</div></div></a>')


def test_the_rounds_are_ordered_and_keys_hidden_on_any_desk(browser):
    """Label Studio's project list as it draws it (its classes, newest first; the descriptions
    coming after the cards), on an annotator's desk and an adjudicator's: the rounds in annotation
    order, couple before family, a project that is not a round's last, no key shown, the first
    round focused; and once the person has pressed a key, the focus stays theirs."""
    cards = [(9, "other", "made by hand"),
             (8, "strategy family", "Therapist support strategy\nrescue-project:strategy/family/a@x.org"),
             (7, "transcript family", "Transcript\nrescue-project:transcript/family/a@x.org"),
             (6, "emotion couple", "Emotion\nrescue-adjudication:emotion/couple"),
             (5, "transcript couple", "Transcript\nrescue-project:transcript/couple/a@x.org")]
    landing = (_STATIC / "landing.js").read_text()
    page = browser.new_page()
    # the list first without descriptions (Label Studio's first answer), then with them
    html = ("<html><body><div class='lsf-projects-page__list'>"
            + "".join(_card(p, t, "") for p, t, _ in cards) + f"</div><script>{landing}</script></body></html>")
    page.route("http://desk.test/**", lambda route: route.fulfill(body=html, content_type="text/html"))
    page.goto("http://desk.test/projects/")
    page.evaluate("""(cards) => cards.forEach(([pid, , d]) => {
        document.querySelector(`a[href="/projects/${pid}/data"] .lsf-project-card__description`).textContent = d; })""",
                  [list(c) for c in cards])
    page.wait_for_function("() => document.activeElement.getAttribute('href') === '/projects/5/data'")
    hrefs = page.evaluate("() => [...document.querySelectorAll('a.lsf-projects-page__link')].map(a => a.getAttribute('href'))")
    assert hrefs == [f"/projects/{p}/data" for p in (5, 7, 6, 8, 9)], hrefs
    text = page.inner_text("body")
    assert "rescue-project:" not in text and "rescue-adjudication:" not in text, text
    assert "Therapist support strategy" in text and "made by hand" in text
    # the person moves on by a key, as a person does: its keydown comes before the focus moves (a
    # focus moved with no key first may be taken back, rightly, by the tidy that the first tidy's own
    # edits left pending). Then the list is drawn again, with a card that sorts last (no card moved):
    # once that card's key is read (that redraw tidied), the focus is still theirs
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.getAttribute('href')") == "/projects/7/data"
    page.evaluate("(card) => document.querySelector('.lsf-projects-page__list').insertAdjacentHTML('beforeend', card)",
                  _card(4, "review couple", "Review\nrescue-project:review/couple/a@x.org"))
    page.wait_for_function("() => document.querySelector(\"a[href='/projects/4/data']\")"
                           ".getAttribute('data-rescue-round') === 'review'")
    hrefs = page.evaluate("() => [...document.querySelectorAll('a.lsf-projects-page__link')].map(a => a.getAttribute('href'))")
    assert hrefs == [f"/projects/{p}/data" for p in (5, 7, 6, 8, 9, 4)], hrefs
    assert page.evaluate("() => document.activeElement.getAttribute('href')") == "/projects/7/data"
    # a new round that sorts first moves every card, the focused one too: the focus stays on it
    page.evaluate("(card) => document.querySelector('.lsf-projects-page__list').insertAdjacentHTML('beforeend', card)",
                  _card(3, "transcript again", "Transcript\nrescue-project:transcript/a-couple/a@x.org"))
    page.wait_for_function("() => document.querySelector('a.lsf-projects-page__link').getAttribute('href') === '/projects/3/data'")
    assert page.evaluate("() => document.activeElement.getAttribute('href')") == "/projects/7/data"


@pytest.mark.slow
def test_login_lands_on_the_first_round_and_two_keys_reach_its_stream(desk_factory, chromium):
    email = "landing@rescue.test"
    desks, _ = desk_factory(email)
    password = desks.passwords[email]
    root = desks.root.root
    sample = make_sample("synthetic/landing_001", "couple", 6)
    pids = {}
    # pushed in annotation order: Label Studio lists the newest first (strategy, emotion, transcript)
    for name in ("transcript", "emotion", "strategy"):
        report = push.push_round(desks, name, [sample], [email], k=1, prelabel=None, root=DataRoot(root))
        pids[name] = report.projects[push.project_key(name, "couple", email)]
    front = FrontServer(desks.url(email)).start()
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            page.goto(f"{front.url}/user/login/")
            assert page.locator(f"script[src='{LANDING_PATH}']").count() == 1
            page.wait_for_function("() => document.activeElement && document.activeElement.name === 'email'")
            # the whole login by keys: the e-mail, Tab, the password, Enter
            page.keyboard.type(email)
            page.keyboard.press("Tab")
            page.keyboard.type(password)
            page.keyboard.press("Enter")
            page.wait_for_url(lambda url: "/user/login" not in url, timeout=120_000)
            # the rounds' list; Label Studio adds ?page=1 once the list is drawn
            assert re.search(r"/projects/?(\?page=1)?$", page.url), f"a login lands on {page.url}, not the rounds"
            try:
                page.wait_for_function("() => document.activeElement && document.activeElement.getAttribute"
                                       "('data-rescue-round') === 'transcript'")
            except Exception:
                page.screenshot(path=str(SCREENSHOTS / "landing_projects.png"), full_page=True)
                raise AssertionError(f"the first round has no focus: rounds shown {page.evaluate(_ROUNDS_SHOWN)}, "
                                     f"focus on {page.evaluate('() => document.activeElement.outerHTML.slice(0, 200)')}")
            assert page.evaluate(_ROUNDS_SHOWN) == ["transcript", "emotion", "strategy"]
            assert page.evaluate("() => document.activeElement.getAttribute('href')").rstrip("/") \
                == f"/projects/{pids['transcript']}/data"
            body = page.inner_text("body")
            assert "rescue-project:" not in body, body[:500]
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "landing_projects.png"))

            page.keyboard.press("Enter")  # 1: the first round's data manager
            page.wait_for_function("() => document.activeElement && document.activeElement.textContent.trim()"
                                   " === 'Label All Tasks'")
            shown = page.evaluate(_VISIBLE_BUTTONS)
            assert "Import" not in shown and "Export" not in shown, shown
            page.keyboard.press("Enter")  # 2: its task stream
            page.locator("#unit_0").first.wait_for()
            assert f"/projects/{pids['transcript']}/" in page.url, page.url
    finally:
        front.stop()
