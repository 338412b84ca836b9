"""The memory inspector (``/ui``) in a real browser (headless Chromium): a key typed in, a
user's facts, search explained per retriever, an edit and an erase that the API then shows,
what a non-admin key is not offered, a wrong key, and data that holds markup shown as text.
Each main view is kept as a screenshot under ``test-artifacts/ui/``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.stores.memory_docs.files import documents
from tests.support.api import ACME_ADMIN_KEY, ACME_KEY, ALICE_PERSONAL_KEY, GLOBEX_KEY, auth
from tests.support.browser import screenshot

WAIT_S = 20
XSS_IMG = '"><img src=x onerror="window.__pwned = 1">'
XSS_SCRIPT = "<script>window.__pwned = 2</script>"
BIG_TOOL_RESULT = "Lisbon forecast: sunny\n" * 1500  # over the 20,000 characters kept inline


def api(url: str, key: str = ACME_KEY) -> httpx.Client:
    return httpx.Client(base_url=url, headers=auth(key), timeout=30)


def seed(url: str) -> dict[str, str]:
    """Alice's session and facts (one with its provenance), and another tenant's user."""
    with api(url) as client:
        said = "I moved to Lisbon last spring and I walk my dog Pixel every morning"
        call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        messages = [
            {"role": "user", "content": said},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": BIG_TOOL_RESULT},
        ]
        client.post(
            "/v1/sessions/s1/messages", json={"user_id": "alice", "messages": messages}
        ).raise_for_status()
        facts = [
            {
                "text": "Alice lives in Lisbon",
                "key": "user.city",
                "kind": "fact",
                "importance": 8,
                "tags": ["home"],
                "source": {"origin": "chat", "session_id": "s1", "messages": [0], "text": said},
            },
            {"text": "Alice has a dog called Pixel", "kind": "fact", "tags": ["pets"]},
            {"text": "Alice prefers window seats on flights", "kind": "preference"},
            {"text": "Alice walks the dog every morning", "kind": "procedure", "importance": 3},
        ]
        body = {"user_id": "alice", "session_id": "s1", "facts": facts}
        results = client.post("/v1/memories", json=body).json()["results"]
        again = {"text": "Alice has a dog named Pixel", "source": "chat"}  # another wording
        merged = client.post("/v1/memories", json={"user_id": "alice", "facts": [again]}).json()
        assert merged["results"][0]["status"] == "merged"
        client.post(
            "/v1/memories", json={"user_id": "bob", "facts": [{"text": "Bob likes tea"}]}
        ).raise_for_status()
    with api(url, GLOBEX_KEY) as other:
        other.post(
            "/v1/memories", json={"user_id": "mallory", "facts": [{"text": "Mallory's secret"}]}
        ).raise_for_status()
    return {f["text"]: r["id"] for f, r in zip(facts, results, strict=True)}


def wait(driver, condition, message: str = ""):
    return WebDriverWait(driver, WAIT_S).until(lambda d: condition(d), message)


def open_page(driver, url: str, key: str) -> None:
    driver.get(f"{url}/ui")
    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{url}/ui")
    field = driver.find_element(By.ID, "key-input")
    field.send_keys(key, Keys.ENTER)
    wait(driver, lambda d: d.find_element(By.ID, "whoami").is_displayed(), "no sign-in")


def owner_button(driver, user: str):
    selector = f'#owner-list button[data-scope="user"][data-owner="{user}"]'
    return wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, selector), user)[0]


def pick_user(driver, user: str) -> None:
    owner_button(driver, user).click()
    wait(driver, lambda d: d.find_element(By.ID, "owner-title").text == f"User {user}")


def tab(driver, view: str) -> None:
    driver.find_element(By.ID, f"tab-{view}").click()


def fact_rows(driver) -> list:
    return driver.find_elements(By.CSS_SELECTOR, "#facts-body tr[data-id]")


def test_a_wrong_key_gets_a_clear_message_and_no_data(browser, ui_app):
    _, url = ui_app
    browser.get(f"{url}/ui")
    browser.execute_script("sessionStorage.clear()")
    browser.find_element(By.ID, "key-input").send_keys("not-a-key-at-all", Keys.ENTER)
    error = wait(browser, lambda d: d.find_element(By.ID, "error").is_displayed() and d)
    text = error.find_element(By.ID, "error").text
    assert "This API key was refused" in text and "unknown API key" in text
    assert not browser.find_element(By.ID, "app").is_displayed()
    assert browser.execute_script("return sessionStorage.length") == 0
    screenshot(browser, "wrong-key")


def test_a_users_facts_with_provenance_and_only_its_own_tenant(browser, ui_app):
    _, url = ui_app
    ids = seed(url)
    open_page(browser, url, ACME_KEY)
    assert "Tenant acme" in browser.find_element(By.ID, "whoami").text
    assert browser.execute_script("return sessionStorage.length") == 1
    owners = browser.find_element(By.ID, "owner-list").text
    assert "alice" in owners and "4 stored" in owners and "bob" in owners
    assert "mallory" not in owners and "Mallory" not in browser.page_source
    pick_user(browser, "alice")
    wait(browser, lambda d: len(fact_rows(d)) == 4)
    with api(url) as client:
        listed = client.get("/v1/memories", params={"user_id": "alice"}).json()["items"]
    shown = [r.find_element(By.CSS_SELECTOR, "td.text").text for r in fact_rows(browser)]
    assert shown == [f["text"] for f in listed]
    lisbon = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{ids["Alice lives in Lisbon"]}"]')
    assert "user.city" in lisbon.text and "home" in lisbon.text and "origin: chat" in lisbon.text
    assert "I moved to Lisbon last spring" in lisbon.find_element(By.CSS_SELECTOR, ".said").text
    pixel = browser.find_element(
        By.CSS_SELECTOR, f'tr[data-id="{ids["Alice has a dog called Pixel"]}"]'
    )
    phrasing = pixel.find_element(By.CSS_SELECTOR, ".phrasing").text
    assert phrasing == "also recorded as: Alice has a dog named Pixel (chat)"
    screenshot(browser, "facts")

    # a filter narrows the table as the API's filter does
    browser.find_element(By.CSS_SELECTOR, 'input[name="kind"][value="preference"]').click()
    browser.find_element(By.CSS_SELECTOR, "#filter-form button[type=submit]").click()
    wait(browser, lambda d: len(fact_rows(d)) == 1)
    assert "window seats" in fact_rows(browser)[0].text

    # pages: two per page, the next page by the API's cursor
    browser.find_element(By.CSS_SELECTOR, 'input[name="kind"][value="preference"]').click()
    browser.execute_script(
        "const s = document.querySelector('select[name=limit]');"
        "s.append(new Option('2', '2', true, true));"
    )
    browser.find_element(By.CSS_SELECTOR, "#filter-form button[type=submit]").click()
    wait(browser, lambda d: len(fact_rows(d)) == 2)
    browser.find_element(By.ID, "page-next").click()
    wait(browser, lambda d: "Page 2" in d.find_element(By.ID, "page-info").text)
    assert [r.find_element(By.CSS_SELECTOR, "td.text").text for r in fact_rows(browser)] == [
        f["text"] for f in listed[2:4]
    ]
    assert not browser.find_element(By.ID, "page-next").is_enabled()

    # the provenance's session link opens the session it came from
    browser.find_element(By.ID, "page-prev").click()
    wait(browser, lambda d: "Page 1" in d.find_element(By.ID, "page-info").text)
    if not browser.find_elements(By.CSS_SELECTOR, ".session-link"):
        browser.find_element(By.ID, "page-next").click()
    link = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".session-link"))[0]
    link.click()
    wait(browser, lambda d: "Session s1" in d.find_element(By.ID, "session-detail").text)
    assert "I walk my dog Pixel" in browser.find_element(By.ID, "session-detail").text
    assert "calls weather({})" in browser.find_element(By.ID, "session-detail").text
    # the big tool result was evicted from the session: the page reads it back
    evicted = browser.find_element(By.CSS_SELECTOR, "#session-detail .message.role-tool button")
    evicted.click()
    shown = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "pre.evicted:not([hidden])"))
    assert shown[0].get_attribute("textContent") == BIG_TOOL_RESULT
    screenshot(browser, "session")


def test_search_shows_each_legs_rank_as_the_api_answers(browser, ui_app):
    _, url = ui_app
    seed(url)
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "alice")
    tab(browser, "search")
    query = "where does Alice live with her dog"
    browser.find_element(By.ID, "search-query").send_keys(query)
    browser.find_element(By.ID, "search-k").clear()
    browser.find_element(By.ID, "search-k").send_keys("3", Keys.ENTER)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#alone .leg li"))
    body = {"user_id": "alice", "query": query, "top_k": 3}
    with api(url) as client:
        hybrid = client.post("/v1/memories/search", json=body).json()["hits"]
        alone = {
            leg: client.post("/v1/memories/search", json={**body, "mode": leg}).json()["hits"]
            for leg in ("bm25", "dense")
        }
    rows = browser.find_elements(By.CSS_SELECTOR, "#search-body tr.hit")
    assert [r.get_attribute("data-id") for r in rows] == [h["id"] for h in hybrid]
    assert len(hybrid) == 3
    for row, hit in zip(rows, hybrid, strict=True):
        for leg in ("bm25", "dense"):
            rank = row.find_element(By.CSS_SELECTOR, f'td.leg-rank[data-leg="{leg}"]').text
            assert rank == (str(hit["ranks"][leg]) if hit["ranks"][leg] is not None else "—")
            score = row.find_element(By.CSS_SELECTOR, f'td.leg-score[data-leg="{leg}"]').text
            if hit["scores"][leg] is not None:
                assert score == f"{hit['scores'][leg]:.4f}"
        assert row.find_element(By.CSS_SELECTOR, "td.fused").text == f"{hit['score']:.4f}"
    for leg, hits in alone.items():
        items = browser.find_elements(By.CSS_SELECTOR, f'#alone .leg[data-leg="{leg}"] li')
        assert [i.get_attribute("data-id") for i in items] == [h["id"] for h in hits], leg
    assert "recalled" in browser.find_element(By.ID, "search-summary").text
    screenshot(browser, "search")


def test_an_edit_in_the_page_is_what_the_api_then_holds(browser, ui_app):
    _, url = ui_app
    ids = seed(url)
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "alice")
    wait(browser, lambda d: len(fact_rows(d)) == 4)
    dog = ids["Alice has a dog called Pixel"]
    browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{dog}"] button.edit').click()
    form = browser.find_element(By.CSS_SELECTOR, "tr.editor form")
    importance = form.find_element(By.NAME, "importance")
    importance.clear()
    importance.send_keys("9")
    tags = form.find_element(By.NAME, "tags")
    tags.clear()
    tags.send_keys("pets, family")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: "Saved" in d.find_element(By.ID, "status").text)
    with api(url) as client:
        stored = client.get(f"/v1/memories/{dog}", params={"user_id": "alice"}).json()
    assert (stored["importance"], stored["tags"]) == (9, ["pets", "family"])
    assert stored["text"] == "Alice has a dog called Pixel"

    # a new text is a new fact: recorded with the old one's metadata, the old one deleted
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-id="{dog}"] button.edit'))
    browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{dog}"] button.edit').click()
    text = browser.find_element(By.CSS_SELECTOR, "tr.editor textarea[name=text]")
    text.clear()
    text.send_keys("Alice has two dogs, Pixel and Byte")
    browser.find_element(By.CSS_SELECTOR, "tr.editor button[type=submit]").click()
    wait(browser, lambda d: "Recorded the new fact" in d.find_element(By.ID, "status").text)
    with api(url) as client:
        facts = client.get("/v1/memories", params={"user_id": "alice"}).json()["items"]
        gone = client.get(f"/v1/memories/{dog}", params={"user_id": "alice"})
    assert gone.status_code == 404
    new = next(f for f in facts if f["text"] == "Alice has two dogs, Pixel and Byte")
    assert (new["importance"], new["tags"]) == (9, ["pets", "family"])
    screenshot(browser, "edit")


def test_an_admin_erases_a_user_and_sees_the_receipt(browser, ui_app):
    _, url = ui_app
    seed(url)
    open_page(browser, url, ACME_ADMIN_KEY)
    pick_user(browser, "alice")
    tab(browser, "manage")
    browser.find_element(By.ID, "erase-confirm").send_keys("alice")
    browser.find_element(By.ID, "erase-submit").click()
    wait(browser, lambda d: d.find_element(By.ID, "receipt").is_displayed())
    field = lambda name: browser.find_element(By.CSS_SELECTOR, f'dd[data-field="{name}"]').text  # noqa: E731
    assert (field("tenant_id"), field("user_id")) == ("acme", "alice")
    assert field("by").startswith("key:")
    facts_row = browser.find_elements(By.CSS_SELECTOR, '#receipt-table tr[data-store^="facts."]')
    assert facts_row and facts_row[0].find_element(By.CSS_SELECTOR, "td").text == "4"
    assert int(field("total")) >= 4 + 1  # the facts and the session at least
    screenshot(browser, "erase-receipt")
    with api(url, ACME_ADMIN_KEY) as client:
        users = [u["user_id"] for u in client.get("/v1/users").json()["users"]]
        again = client.delete("/v1/users/alice")
    assert "alice" not in users and again.status_code == 404
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, '[data-owner="alice"]'))


def test_a_non_admin_key_is_not_offered_the_erase_and_the_api_refuses_it(browser, ui_app):
    _, url = ui_app
    seed(url)
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "alice")
    tab(browser, "manage")
    wait(browser, lambda d: d.find_element(By.ID, "forget-form").is_displayed())
    assert not browser.find_element(By.ID, "erase-form").is_displayed()
    assert not browser.find_element(By.ID, "erase-submit").is_displayed()
    screenshot(browser, "manage-user-key")
    with api(url) as client:
        refused = client.delete("/v1/users/alice")
        left = client.get("/v1/memories", params={"user_id": "alice"}).json()["items"]
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert len(left) == 4


def test_markup_in_the_data_is_shown_as_text_and_never_runs(browser, ui_app):
    services, url = ui_app
    with api(url) as client:
        client.post(
            "/v1/sessions/x1/messages",
            json={"user_id": "eve", "messages": [{"role": "user", "content": XSS_SCRIPT}]},
        ).raise_for_status()
        fact = {
            "text": XSS_IMG,
            "key": XSS_SCRIPT,
            "tags": [XSS_IMG],
            "source": {"session_id": "x1", "messages": [0], "text": XSS_SCRIPT},
        }
        body = {"user_id": "eve", "facts": [fact, {"text": XSS_SCRIPT}]}
        client.post("/v1/memories", json=body).raise_for_status()
    docs = documents(services.memory_docs, services.settings.workspace)
    docs.write(RuntimeContext("acme", "eve"), f"# Eve {XSS_SCRIPT}\n\n- {XSS_IMG}\n", check=False)
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "eve")
    wait(browser, lambda d: len(fact_rows(d)) == 2)
    texts = [r.find_element(By.CSS_SELECTOR, "td.text").text for r in fact_rows(browser)]
    assert sorted(texts) == sorted([XSS_IMG, XSS_SCRIPT])
    assert not browser.find_elements(By.CSS_SELECTOR, "#main img, #main script")
    tab(browser, "memory")
    doc = wait(browser, lambda d: XSS_IMG in d.find_element(By.ID, "memory-doc").text and d)
    assert doc.find_element(By.CSS_SELECTOR, "#memory-doc h3").text == f"Eve {XSS_SCRIPT}"
    tab(browser, "sessions")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "button.session"))[0].click()
    wait(browser, lambda d: XSS_SCRIPT in d.find_element(By.ID, "session-detail").text)
    tab(browser, "search")
    browser.find_element(By.ID, "search-query").send_keys("img onerror script", Keys.ENTER)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#search-body tr.hit"))
    # a user id with markup is refused by the API, and the refusal is text
    browser.find_element(By.ID, "open-user").send_keys(XSS_IMG, Keys.ENTER)
    error = wait(browser, lambda d: d.find_element(By.ID, "error").is_displayed() and d)
    assert "invalid_id" in error.find_element(By.ID, "error").text
    assert browser.find_element(By.ID, "owner-title").text == f"User {XSS_IMG}"
    assert browser.execute_script("return window.__pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "#main img, #main script")
    screenshot(browser, "markup-as-text")


def test_memory_md_and_facts_over_time(browser, ui_app):
    services, url = ui_app
    ctx = RuntimeContext("acme", "carol")
    now = datetime.now(UTC)
    days = [now - timedelta(days=2), now - timedelta(days=2), now]
    facts = [
        Fact(text="Carol runs on Sundays", kind="procedure", created_at=days[0]),
        Fact(text="Carol likes green tea", kind="preference", created_at=days[1]),
        Fact(text="Carol lives in Oslo", kind="fact", created_at=days[2]),
    ]
    services.longterm.record(ctx, facts)
    docs = documents(services.memory_docs, services.settings.workspace)
    memory_md = '# Memory\n\n## Carol\n\n- lives in **Oslo** <!-- {"of": []} -->\n- drinks `tea`\n'
    docs.write(ctx, memory_md, check=False)
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "carol")
    tab(browser, "memory")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#memory-doc li"))
    items = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#memory-doc li")]
    assert items == ["lives in Oslo", "drinks tea"]
    assert browser.find_element(By.CSS_SELECTOR, "#memory-doc li strong").text == "Oslo"
    headings = browser.find_elements(By.CSS_SELECTOR, "#memory-doc h3, #memory-doc h4")
    assert [h.text for h in headings] == ["Memory", "Carol"]
    screenshot(browser, "memory-md")
    tab(browser, "timeline")
    bars = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart rect[data-day]"))
    drawn = {(b.get_attribute("data-day"), b.get_attribute("data-kind")) for b in bars}
    with api(url) as client:
        params = {"user_id": "carol", "include_inactive": "true"}
        listed = client.get("/v1/memories", params=params).json()["items"]
    assert drawn == {(f["created_at"][:10], f["kind"]) for f in listed}
    assert {(d.date().isoformat(), f.kind) for d, f in zip(days, facts, strict=True)} <= drawn
    # the day between is on the axis too: three days, one with nothing recorded
    title = browser.find_element(By.CSS_SELECTOR, "#chart svg title").get_attribute("textContent")
    assert f"{len(listed)} facts over 3 days" in title
    rows = browser.find_elements(By.CSS_SELECTOR, "#chart-table tbody tr")
    assert len(rows) == 2  # the table lists the days with facts
    screenshot(browser, "timeline")


def test_a_narrow_screen_keeps_one_column_and_keyboard_use(browser, ui_app):
    _, url = ui_app
    seed(url)
    browser.set_window_size(390, 844)
    try:
        open_page(browser, url, ACME_KEY)
        pick_user(browser, "alice")
        wait(browser, lambda d: len(fact_rows(d)) == 4)
        aside = browser.find_element(By.CSS_SELECTOR, "aside.owners").rect
        main = browser.find_element(By.ID, "main").rect
        assert main["y"] > aside["y"] + aside["height"] - 1  # stacked, not side by side
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= 390
        # the views are tabs a keyboard moves between
        browser.find_element(By.ID, "tab-facts").send_keys(Keys.ARROW_RIGHT)
        active = browser.switch_to.active_element
        assert active.get_attribute("id") == "tab-search"
        assert browser.find_element(By.ID, "view-search").is_displayed()
        screenshot(browser, "narrow")
    finally:
        browser.set_window_size(1280, 900)


def test_the_page_runs_no_inline_script_and_breaks_no_policy(browser, ui_app):
    """Everything the page does is in its served script: the browser reports no CSP
    violation (an inline handler or script would be one) and no script error."""
    _, url = ui_app
    seed(url)
    browser.get_log("browser")  # what earlier tests left
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "alice")
    for view in ("search", "memory", "sessions", "timeline", "manage", "facts"):
        tab(browser, view)
    wait(browser, lambda d: len(fact_rows(d)) == 4)
    problems = [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" or "Content Security Policy" in entry["message"]
    ]
    assert problems == []


@pytest.mark.parametrize("key", [ACME_KEY, GLOBEX_KEY])
def test_a_tenant_sees_only_its_own_users(browser, ui_app, key):
    _, url = ui_app
    seed(url)
    open_page(browser, url, key)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#owner-list button"))
    owners = browser.find_element(By.ID, "owner-list").text
    mine, theirs = ("alice", "mallory") if key == ACME_KEY else ("mallory", "alice")
    assert mine in owners and theirs not in owners


# -- what a user sees at a laptop's width --------------------------------------------------------

LAPTOP = (1366, 768)


def _rect(driver, element) -> dict[str, float]:
    return driver.execute_script("return arguments[0].getBoundingClientRect().toJSON()", element)


def _lines(driver, element) -> int:
    """How many lines the element's text takes on screen."""
    return driver.execute_script(
        "const r = document.createRange(); r.selectNodeContents(arguments[0]);"
        "return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size;",
        element,
    )


def test_the_facts_table_fits_a_laptop_screen(browser, ui_app):
    """At 1366 px every column, provenance and actions included, is on screen without
    scrolling sideways, and a date stays on one line."""
    _, url = ui_app
    seed(url)
    browser.set_window_size(*LAPTOP)
    try:
        open_page(browser, url, ACME_KEY)
        pick_user(browser, "alice")
        wait(browser, lambda d: len(fact_rows(d)) == 4)
        screenshot(browser, "facts-1366")
        viewport = browser.execute_script("return document.documentElement.clientWidth")
        headers = browser.find_elements(By.CSS_SELECTOR, "#facts-table thead th")
        offscreen = [h.text for h in headers if _rect(browser, h)["right"] > viewport + 0.5]
        assert offscreen == [], offscreen
        assert [h.text for h in headers][-2:] == ["Provenance", "Actions"]
        wrap = browser.find_element(By.CSS_SELECTOR, "#view-facts .table-wrap")
        scroll = browser.execute_script(
            "return [arguments[0].scrollWidth, arguments[0].clientWidth]", wrap
        )
        assert scroll[0] <= scroll[1] + 1, scroll  # no sideways scrolling (a border's rounding)
        for row in fact_rows(browser):
            created = row.find_element(By.CSS_SELECTOR, "td.created")
            assert _lines(browser, created) == 1, created.text
            assert "confidence 1.00" in row.find_element(By.CSS_SELECTOR, "td.state").text
    finally:
        browser.set_window_size(1280, 900)


def test_the_sidebar_counts_what_the_list_shows(browser, ui_app):
    """A superseded fact is stored but not listed: the sidebar says how many are stored, and
    the list says how many it hides and how to see them."""
    _, url = ui_app
    with api(url) as client:
        for text in ("Dana lives in Porto", "Dana lives in Braga"):  # the second supersedes
            body = {"user_id": "dana", "facts": [{"text": text, "key": "user.city"}]}
            client.post("/v1/memories", json=body).raise_for_status()
        body = {"user_id": "dana", "facts": [{"text": "Dana sings"}]}
        client.post("/v1/memories", json=body).raise_for_status()
    open_page(browser, url, ACME_KEY)
    count = owner_button(browser, "dana").find_element(By.CSS_SELECTOR, ".count").text
    assert count == "3 stored"
    pick_user(browser, "dana")
    wait(browser, lambda d: len(fact_rows(d)) == 2)
    info = browser.find_element(By.ID, "page-info").text
    assert "2 shown" in info and "1 more stored" in info, info


def test_a_session_of_one_message_says_one_message(browser, ui_app):
    _, url = ui_app
    with api(url) as client:
        said = {"user_id": "erin", "messages": [{"role": "user", "content": "hello"}]}
        client.post("/v1/sessions/only/messages", json=said).raise_for_status()
    open_page(browser, url, ACME_KEY)
    pick_user(browser, "erin")
    tab(browser, "sessions")
    button = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "button.session"))[0]
    assert button.text.startswith("only: 1 message,"), button.text
    button.click()
    detail = wait(browser, lambda d: "Session only" in d.find_element(By.ID, "session-detail").text)
    assert detail


def test_a_personal_key_is_not_offered_other_users(browser, ui_app):
    """A personal key reaches its own user alone: no box to open another user by id."""
    _, url = ui_app
    seed(url)
    open_page(browser, url, ALICE_PERSONAL_KEY)
    owner_button(browser, "alice")
    assert not browser.find_element(By.ID, "open-user").is_displayed()
    assert "Open a user by id" not in browser.find_element(By.ID, "app").text
    open_page(browser, url, ACME_KEY)
    assert browser.find_element(By.ID, "open-user").is_displayed()


def _timeline(browser, url: str, user: str) -> None:
    open_page(browser, url, ACME_KEY)
    pick_user(browser, user)
    tab(browser, "timeline")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart rect[data-day]"))


def test_the_legend_shows_every_kind_inside_the_chart(browser, ui_app):
    services, url = ui_app
    now = datetime.now(UTC)
    kinds = ("fact", "preference", "event", "procedure")
    facts = [Fact(f"Frank's {k} number {i}", kind=k, created_at=now) for i, k in enumerate(kinds)]
    services.longterm.record(RuntimeContext("acme", "frank"), facts)
    _timeline(browser, url, "frank")
    chart = _rect(browser, browser.find_element(By.CSS_SELECTOR, "#chart svg"))
    legend = browser.find_elements(By.CSS_SELECTOR, "#chart svg text.legend")
    assert [t.text for t in legend] == list(kinds)
    for text in legend:
        box = _rect(browser, text)
        assert chart["left"] <= box["left"] and box["right"] <= chart["right"], text.text
        assert chart["top"] <= box["top"] and box["bottom"] <= chart["bottom"], text.text
    screenshot(browser, "timeline-legend")


def test_a_fact_far_from_the_rest_does_not_flatten_the_chart(browser, ui_app):
    """One fact decades away (an import of old data) is told apart, not given the axis: the
    days the other facts were recorded on keep readable bars."""
    services, url = ui_app
    now = datetime.now(UTC)
    days = [now - timedelta(days=3), now - timedelta(days=1), now]
    facts = [Fact(f"Gina note {i}", created_at=d) for i, d in enumerate(days)]
    facts.append(Fact("Gina was born", kind="event", created_at=datetime(1990, 5, 17, tzinfo=UTC)))
    services.longterm.record(RuntimeContext("acme", "gina"), facts)
    _timeline(browser, url, "gina")
    bars = browser.find_elements(By.CSS_SELECTOR, "#chart rect[data-day]")
    assert {b.get_attribute("data-day") for b in bars} == {d.date().isoformat() for d in days}
    chart = _rect(browser, browser.find_element(By.CSS_SELECTOR, "#chart svg"))
    assert chart["height"] >= 150, chart  # not squeezed into a strip
    tallest = max(_rect(browser, b)["height"] for b in bars)
    assert tallest >= 60, tallest
    outside = browser.find_element(By.ID, "chart-outside").text
    assert "1 fact outside the chart" in outside and "1990-05-17" in outside, outside
    screenshot(browser, "timeline-outlier")


def test_a_long_history_is_drawn_per_month_at_a_readable_size(browser, ui_app):
    """Two years of facts are two years of monthly bars, every fact in them, not 730 daily
    bars scaled down to hairlines."""
    services, url = ui_app
    start = datetime(2024, 1, 10, tzinfo=UTC)
    facts = [Fact(f"Hana note {i}", created_at=start + timedelta(days=10 * i)) for i in range(73)]
    services.longterm.record(RuntimeContext("acme", "hana"), facts)
    _timeline(browser, url, "hana")
    title = browser.find_element(By.CSS_SELECTOR, "#chart svg title").get_attribute("textContent")
    assert "73 facts over 24 months" in title  # 2024-01 to 2025-12, title
    bars = browser.find_elements(By.CSS_SELECTOR, "#chart rect[data-day]")
    assert {b.get_attribute("data-day")[8:] for b in bars} == {"01"}  # each a month's first day
    chart = _rect(browser, browser.find_element(By.CSS_SELECTOR, "#chart svg"))
    assert chart["height"] >= 150 and min(_rect(browser, b)["width"] for b in bars) >= 10
    assert not browser.find_element(By.ID, "chart-outside").is_displayed()
    screenshot(browser, "timeline-months")
