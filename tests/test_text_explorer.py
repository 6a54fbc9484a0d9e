"""The explorer page takes a sentence: its nearest words by its vector (``POST /embed``,
then ``POST /most_similar`` with that vector), in a real Chromium against a real
``vecserve serve`` (the fixtures of ``test_explorer.py``)."""

from __future__ import annotations

import httpx

from .test_explorer import KEY, api, browser, neighbours_on_page, open_page, service  # noqa: F401


def test_a_sentence_shows_the_neighbours_of_its_vector(open_page, service):  # noqa: F811
    page = open_page()
    page.locator("#word").fill("the king and queen")
    page.locator("#word").press("Enter")
    got = neighbours_on_page(page)
    auth = {"Authorization": f"Bearer {KEY}"}
    emb = httpx.post(f"{service}/embed", json={"texts": ["the king and queen"]}, headers=auth)
    body = emb.json()
    assert body["tokens"] == [2] and body["unknown"] == [2]  # "the", "and": not in EX
    want = httpx.post(
        f"{service}/most_similar", json={"positive": body["vectors"], "topn": 10}, headers=auth
    ).json()["results"]
    assert got == [(w, f"{s:.4f}") for w, s in want]
    assert "mean of its 2 known tokens (2 unknown)" in page.locator("#neighbours-mode").inner_text()
    assert page.locator("#map-figure").is_hidden()  # the map places words only
    assert api(service, "/embed", text="king")["tokens"] == [1]
