"""The explorer page (``GET /``) in a real headless Chromium driven by Playwright.

A real ``vecserve serve`` subprocess answers a small model with structure (clusters, and
king - man + woman = queen); the page is driven by keyboard and mouse and its answers are
compared with the JSON API's. Every request the browser makes must go to the service.
Screenshots of each state are saved under the pytest temp dir (``explorer-screenshots``).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from vecserve.loader import load_arrays, load_file
from vecserve.store import Store

from .api_support import serving
from .helpers import gensim_data, wait_until

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):  # CI installs it (.ci/run); elsewhere: apt-get install chromium
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)

pytestmark = pytest.mark.timeout(180)

LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
CLUSTERS = {
    "animal": ["cat", "dog", "horse", "cow", "sheep", "goat", "mouse", "lion", "tiger", "wolf"],
    "fruit": ["apple", "pear", "plum", "cherry", "banana", "mango", "grape", "lemon", "peach"],
    "city": ["paris", "london", "berlin", "madrid", "rome", "vienna", "oslo", "lisbon"],
    "number": ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"],
}
DIM = 32
KEY = "explorer-key"


def model_arrays() -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(13)
    tokens, rows = [], []
    for words in CLUSTERS.values():
        centre = rng.standard_normal(DIM) * 2
        for w in words:
            tokens.append(w)
            rows.append(centre + rng.standard_normal(DIM))
    person, royal, male, female = (rng.standard_normal(DIM) for _ in range(4))
    for w, v in {
        "man": person + male,
        "woman": person + female,
        "king": person + royal + male,
        "queen": person + royal + female,
        "prince": person + 0.4 * royal + male + 0.6 * rng.standard_normal(DIM),
        "princess": person + 0.4 * royal + female + 0.6 * rng.standard_normal(DIM),
    }.items():
        tokens.append(w)
        rows.append(v + 0.05 * rng.standard_normal(DIM))
    return tokens, np.asarray(rows, dtype=np.float32)


@pytest.fixture(scope="module")
def service(redis_url, tmp_path_factory):
    """``(base_url, api_key)``: a real ``vecserve serve`` with model EX loaded, keys on
    for the API (the page itself needs none)."""
    store = Store.from_url(redis_url)
    store.client.flushall()
    tokens, vectors = model_arrays()
    load_arrays(tokens, vectors, name="EX", store=store, progress=False, source="explorer-test")
    load_file(gensim_data("crime-and-punishment.bin"), name="FT", store=store, progress=False)
    args = ["--redis-url", redis_url, "--default-model", "EX", "--ann", "--log-level", "warning"]
    tmp = tmp_path_factory.mktemp("explorer-serve")
    try:
        with serving(args, tmp, env={"VECSERVE_API_KEYS": KEY}) as (base, _log):
            yield base
    finally:
        store.client.flushall()
        store.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    path = tmp_path_factory.mktemp("explorer-screenshots")
    print(f"explorer screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


def api(base: str, path: str, **params) -> dict:
    r = httpx.get(f"{base}{path}", params=params, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def open_page(browser, service):
    """``open_page(query="", key=True, dark=False)``: a fresh tab on the page. With ``key``
    the tab already holds the API key (as after answering the page's prompt once). Every
    request of every tab is checked to go to the service's own host after the test."""
    contexts, requests = [], []

    def open_(query: str = "", *, key: bool = True, dark: bool = False, wait: bool = True):
        ctx = browser.new_context(
            viewport={"width": 1280, "height": 1000}, color_scheme="dark" if dark else "light"
        )
        contexts.append(ctx)
        if key:
            ctx.add_init_script(f"sessionStorage.setItem('vecserve-api-key', {KEY!r})")
        page = ctx.new_page()
        page.on("request", lambda req: requests.append(req.url))
        page.goto(f"{service}/{query}")
        if key and wait:
            page.wait_for_selector("#model-facts dd")
        return page

    yield open_
    for ctx in contexts:
        ctx.close()
    own = urlsplit(service).netloc
    assert requests, "the page made no request at all"
    assert {urlsplit(u).netloc for u in requests} == {own}, requests


def neighbours_on_page(page) -> list[tuple[str, str]]:
    page.wait_for_selector("#neighbours-table:not([hidden]) tbody tr")
    rows = page.locator("#neighbours-table tbody tr")
    return [
        (rows.nth(i).locator("td.word").inner_text(), rows.nth(i).locator(".score").inner_text())
        for i in range(rows.count())
    ]


def test_typing_a_word_shows_the_api_neighbours_and_a_map(open_page, service, shots):
    page = open_page()
    page.screenshot(path=shots / "01-empty.png", full_page=True)
    assert "EX" in page.locator("#model").inner_text()
    facts = page.locator("#model-facts").inner_text()
    for expected in ("words", "dimension", "codec", "generation", "explorer-test", "f32"):
        assert expected in facts
    page.locator("#word").fill("king")
    page.locator("#word").press("Enter")
    got = neighbours_on_page(page)
    want = api(service, "/most_similar", positive="king", topn=10, model="EX")["results"]
    assert got == [(w, f"{s:.4f}") for w, s in want]
    assert "word=king" in page.url
    # the map: one point per neighbour, plus the word itself
    page.wait_for_selector("#map-figure:not([hidden])")
    assert page.locator("#map .pt.neighbour").count() == len(want)
    assert page.locator("#map .pt.query").count() == 1
    labels = page.locator("#map .pt.neighbour text").all_text_contents()
    assert sorted(labels) == sorted(w for w, _ in want)
    # hover shows word and cosine
    first, score = want[0]
    point = page.locator(f'#map .pt[data-word="{first}"]')
    point.hover()
    assert page.locator("#map .tip text").text_content() == f"{first} · cosine {score:.4f}"
    page.screenshot(path=shots / "02-neighbours-hover.png", full_page=True)
    # keyboard: focus shows the same, Enter explores that word
    point.focus()
    assert first in page.locator("#map .tip text").text_content()
    point.press("Enter")
    page.wait_for_url(f"**word={first}*")
    page.wait_for_selector(f'#map .pt.query[data-word="{first}"]')
    assert page.locator("#word").input_value() == first
    page.screenshot(path=shots / "03-explored-by-click.png", full_page=True)
    # back and forward
    page.go_back()
    page.wait_for_selector('#map .pt.query[data-word="king"]')
    assert page.locator("#word").input_value() == "king"
    page.go_forward()
    page.wait_for_selector(f'#map .pt.query[data-word="{first}"]')


def test_analogy_similarity_and_odd_one_out_answer_like_the_api(open_page, service, shots):
    page = open_page()
    for field, word in (("#a", "man"), ("#b", "king"), ("#c", "woman")):
        page.locator(field).fill(word)
    page.locator("#c").press("Enter")
    want = api(service, "/analogy", a="man", b="king", c="woman", model="EX")
    assert want["answer"] == "queen"
    answer = page.locator("#analogy-result .answer strong")
    answer.wait_for()
    assert answer.inner_text() == want["answer"]
    page.locator("#w1").fill("cat")
    page.locator("#w2").fill("dog")
    page.locator("#w2").press("Enter")
    sim = api(service, "/similarity", w1="cat", w2="dog", model="EX")["similarity"]
    page.wait_for_selector("#similarity-result strong")
    assert page.locator("#similarity-result strong").inner_text() == f"{sim:.4f}"
    page.locator("#odd-words").fill("cat dog paris horse")
    page.locator("#odd-words").press("Enter")
    odd = api(service, "/doesnt_match", words="cat,dog,paris,horse", model="EX")["word"]
    assert odd == "paris"
    page.wait_for_selector("#odd-result strong")
    assert page.locator("#odd-result strong").inner_text() == odd
    page.screenshot(path=shots / "04-analogy-similarity-odd.png", full_page=True)


def test_unknown_word_and_unknown_model_are_named(open_page, shots):
    page = open_page()
    page.locator("#word").fill("qwzxv")
    page.locator("#word").press("Enter")
    error = page.locator("#neighbours-error")
    error.wait_for()
    assert "“qwzxv”" in error.inner_text() and "not in the vocabulary" in error.inner_text()
    assert page.locator("#neighbours-table").is_hidden()
    page.screenshot(path=shots / "05-unknown-word.png", full_page=True)
    page = open_page("?model=NOPE&word=king", wait=False)
    error = page.locator("#model-error")
    error.wait_for()
    assert "“NOPE”" in error.inner_text() and "EX" in error.inner_text()
    assert page.locator("#neighbours-table").is_hidden()  # not repeated in every section
    page.screenshot(path=shots / "06-unknown-model.png", full_page=True)


def test_a_link_with_state_restores_it(open_page, service, shots):
    query = "?word=paris&topn=5&w1=king&w2=queen&a=man&b=king&c=woman&odd=one+two+lion+three"
    page = open_page(query, dark=True)
    got = neighbours_on_page(page)
    want = api(service, "/most_similar", positive="paris", topn=5, model="EX")["results"]
    assert got == [(w, f"{s:.4f}") for w, s in want]
    page.wait_for_selector("#map-figure:not([hidden])")
    assert page.locator("#map .pt.neighbour").count() == 5
    assert page.locator("#word").input_value() == "paris"
    assert page.locator("#topn").input_value() == "5"
    assert (page.locator("#a").input_value(), page.locator("#c").input_value()) == ("man", "woman")
    page.locator("#analogy-result .answer strong").wait_for()
    assert page.locator("#analogy-result .answer strong").inner_text() == "queen"
    page.wait_for_selector("#odd-result strong")
    assert page.locator("#odd-result strong").inner_text() == "lion"
    sim = api(service, "/similarity", w1="king", w2="queen", model="EX")["similarity"]
    page.wait_for_selector("#similarity-result strong")
    assert page.locator("#similarity-result strong").inner_text() == f"{sim:.4f}"
    page.screenshot(path=shots / "07-restored-dark.png", full_page=True)


def test_words_built_from_subwords_are_marked(open_page, service, shots):
    """A fastText model: a word outside its vocabulary is answered and marked as such."""
    page = open_page("?model=FT&word=raskolnikovish&topn=5&w1=raskolnikovish&w2=the")
    got = neighbours_on_page(page)
    want = api(service, "/most_similar", positive="raskolnikovish", topn=5, model="FT")
    assert want["subwords"] == ["raskolnikovish"]
    assert got == [(w, f"{s:.4f}") for w, s in want["results"]]
    note = page.locator("#neighbours-mode .subwords")
    assert note.inner_text() == (
        "subwords \u201craskolnikovish\u201d: not in the vocabulary, built from character n-grams"
    )
    assert "character n-grams" in note.locator(".tag").get_attribute("title")
    page.wait_for_selector("#similarity-result .subwords")
    assert "raskolnikovish" in page.locator("#similarity-result .subwords").inner_text()
    facts = page.locator("#model-facts").inner_text()
    assert "subwords\n3–6-grams, 100 buckets" in facts, facts
    page.screenshot(path=shots / "11-subwords.png", full_page=True)
    # an in-vocabulary word carries no mark
    page = open_page("?model=FT&word=the&topn=5")
    neighbours_on_page(page)
    assert page.locator("#neighbours-mode .subwords").count() == 0


def test_the_page_asks_for_the_api_key_once(open_page, service, shots):
    assert httpx.get(f"{service}/").status_code == 200  # the page itself needs no key
    assert httpx.get(f"{service}/static/app.js").status_code == 200
    assert httpx.get(f"{service}/models").status_code == 401  # its API calls do
    page = open_page("?word=cat", key=False)
    form = page.locator("#key-form")
    form.wait_for()
    page.screenshot(path=shots / "08-key-prompt.png", full_page=True)
    page.locator("#api-key").fill("wrong")
    page.locator("#api-key").press("Enter")
    # A locator waits without evaluating a string in the page, which its CSP forbids.
    page.locator("#key-message", has_text="refused").wait_for()
    page.locator("#api-key").fill(KEY)
    page.locator("#api-key").press("Enter")
    got = neighbours_on_page(page)
    assert got[0][0] in CLUSTERS["animal"]
    assert form.is_hidden()
    assert page.evaluate("sessionStorage.getItem('vecserve-api-key')") == KEY
    page.reload()  # kept for the tab's session: no second prompt
    neighbours_on_page(page)
    assert form.is_hidden()


def test_approximate_neighbours_show_the_measured_recall(open_page, service, shots):
    api(service, "/most_similar", positive="cat", approx="true", model="EX")  # builds the index
    ann = wait_until(
        lambda: (a := api(service, "/models/EX")["ann"])["state"] == "ready" and a,
        interval=0.2,
        what="the ANN index of EX",
    )
    recall = f"{ann['recall_at_10']:.3f}"
    page = open_page("?word=cat&approx=1")
    got = neighbours_on_page(page)
    want = api(service, "/most_similar", positive="cat", topn=10, approx="true", model="EX")
    assert want["approximate"] is True
    assert got == [(w, f"{s:.4f}") for w, s in want["results"]]
    assert page.locator("#approx").is_checked()
    mode = page.locator("#neighbours-mode").inner_text()
    assert "Approximate" in mode and f"recall@10 {recall}" in mode
    assert ann["params"]["kind"] == "hnsw" and "Approximate search (HNSW)" in mode  # small model
    assert f"ready, recall@10 {recall}" in page.locator("#model-facts").inner_text()
    page.wait_for_selector("#map-figure:not([hidden])")
    page.screenshot(path=shots / "10-approximate.png", full_page=True)


def test_redis_down_is_a_readable_message(browser, tmp_path, shots):
    dead = f"unix://{tmp_path / 'nobody.sock'}"  # no server there
    args = ["--redis-url", dead, "--default-model", "EX", "--log-level", "critical"]
    with serving(args, tmp_path) as (base, _log):
        page = browser.new_page()
        try:
            page.goto(f"{base}/?word=cat")
            error = page.locator("#global-error")
            error.wait_for()
            assert "Redis" in error.inner_text()
            page.screenshot(path=shots / "09-redis-down.png", full_page=True)
        finally:
            page.close()


# -- the API docs pages (/docs, /redoc), offline ---------------------------------------------


@pytest.fixture(scope="module")
def docs_service(redis_url, tmp_path_factory):
    """The service's base URL, under uvicorn, with no API key (the docs pages are the API's:
    with keys on they need one too)."""
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    from .api_support import running_app

    settings = Settings(redis_url=redis_url, cache_dir=tmp_path_factory.mktemp("docs-cache"))
    with running_app(create_app(settings)) as base:
        yield base


@pytest.mark.parametrize("page_path", ["/docs", "/redoc"])
def test_the_api_docs_render_with_the_network_off(browser, docs_service, shots, page_path):
    """Every request but the service's own is aborted, as on a machine with no network:
    the page still renders every operation of the OpenAPI document, and the browser
    reports no CSP violation."""
    own = urlsplit(docs_service).netloc
    spec = httpx.get(f"{docs_service}/openapi.json").json()
    operations = [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops]
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    asked, blocked, problems = [], [], []

    def route(r):
        asked.append(r.request.url)
        if urlsplit(r.request.url).netloc == own or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort("internetdisconnected")

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        page.goto(f"{docs_service}{page_path}")
        if page_path == "/docs":
            page.wait_for_selector(".opblock-summary-path", timeout=20_000)
            methods = page.locator(".opblock-summary-method").all_inner_texts()
            paths = page.locator(".opblock-summary-path").all_inner_texts()
            shown = [(m, p.replace("\u200b", "")) for m, p in zip(methods, paths, strict=True)]
            assert sorted(shown) == sorted(operations)
        else:
            page.wait_for_selector("[data-section-id^='operation/']", timeout=20_000)
            ids = page.locator("[data-section-id^='operation/']").evaluate_all(
                "els => els.map(e => e.dataset.sectionId)"
            )
            assert len(set(ids)) == len(operations)
            assert "vecserve" in page.locator("h1").first.inner_text()
        page.screenshot(path=shots / f"docs{page_path.replace('/', '-')}.png", full_page=False)
    finally:
        ctx.close()
    assert not blocked, blocked
    assert {urlsplit(u).netloc for u in asked if u.startswith("http")} == {own}
    # ReDoc's sidebar asks for Redocly's logo from its CDN: the CSP refuses it (the request
    # never leaves the browser) and ReDoc hides the image; nothing else is refused
    refused = [p for p in problems if "Content Security Policy" in p]
    assert not [p for p in refused if "cdn.redoc.ly/redoc/logo-mini.svg" not in p], refused
