"""The admin console (/ui) in headless Chromium, driven by Selenium.

Environment: GATEWAY_URL, GATEWAY_MASTER_KEY, GATEWAY_MODEL (a model group
that answers), GATEWAY_FALLBACK_MODEL (a group whose primary fails and falls
back), SCREENSHOT_DIR, GATEWAY_REPLICAS (how many replicas share the
gateway's Redis, 1 without). Logs in (after a wrong password), creates a key
through the form, uses it, finds it listed, sees its request with every
attempt in Logs, the Usage chart and the spend by user, blocks the key and
sees its next request refused, visits every page (a screenshot each), sees
the replicas on Health and where Limits counts, logs out; the browser's
console must stay free of errors.
"""

import json
import os
import sys
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["GATEWAY_URL"].rstrip("/")
MASTER = os.environ["GATEWAY_MASTER_KEY"]
MODEL = os.environ["GATEWAY_MODEL"]
FALLBACK_MODEL = os.environ["GATEWAY_FALLBACK_MODEL"]
SHOTS = os.environ["SCREENSHOT_DIR"]
REPLICAS = int(os.environ.get("GATEWAY_REPLICAS", "1"))
PAGES = ["Keys", "Teams", "Users", "Organizations", "Models", "Usage", "Logs", "Limits", "Health"]


def chat(key, model):
    """POSTs a chat completion with `key`; returns the HTTP status."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(
        f"{BASE}/v1/chat/completions",
        data=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status
    except urllib.error.HTTPError as e:
        return e.code


def driver():
    opts = webdriver.ChromeOptions()
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--disable-gpu", "--no-first-run", "--disable-extensions"]:
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    binary = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
    if os.path.exists(binary):
        opts.binary_location = binary
    service = webdriver.ChromeService(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=opts, service=service)


def main():
    d = driver()
    # Pages re-render their tables after each change: a found element may go
    # stale before it is read, so waits retry.
    wait = WebDriverWait(d, 20, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
    errors = []

    def console_errors(allowed=()):
        for entry in d.get_log("browser"):
            if entry["level"] == "SEVERE" and not any(a in entry["message"] for a in allowed):
                errors.append(entry["message"])

    def shot(name):
        d.save_screenshot(os.path.join(SHOTS, f"{name}.png"))

    def text_appears(text, where=(By.TAG_NAME, "main")):
        wait.until(EC.text_to_be_present_in_element(where, text))

    def click_in_row(action):
        wait.until(lambda _: key_row().find_element(By.CSS_SELECTOR, f"button[data-action='{action}']")
                   .click() or True)

    def key_row():
        return d.find_element(By.CSS_SELECTOR, "tr[data-alias='browser-key']")

    def refilter_shows(text):
        if text in d.find_element(By.ID, "logs-table").text:
            return True
        d.find_element(By.CSS_SELECTOR, "#log-filters button[type='submit']").click()
        return False

    def goto(page):
        d.find_element(By.CSS_SELECTOR, f"nav a[data-page='{page.lower()}']").click()
        wait.until(lambda _: d.find_element(By.TAG_NAME, "h1").text == page)
        wait.until(lambda _: "Loading" not in d.find_element(By.ID, "page").text)

    try:
        d.get(f"{BASE}/ui")
        form = wait.until(EC.presence_of_element_located((By.ID, "login-form")))
        shot("00-login")
        # A wrong password is refused with the gateway's message.
        form.find_element(By.NAME, "password").send_keys("not-the-password")
        d.find_element(By.ID, "login-submit").click()
        text_appears("Invalid credentials", (By.ID, "login-status"))
        console_errors(allowed=("/ui/login",))  # the refused login's 401
        # The master key is the password when UI_PASSWORD is unset.
        pw = d.find_element(By.NAME, "password")
        pw.clear()
        pw.send_keys(MASTER)
        d.find_element(By.ID, "login-submit").click()
        wait.until(lambda _: d.find_element(By.TAG_NAME, "h1").text == "Keys")
        nav = [a.text for a in d.find_elements(By.CSS_SELECTOR, "nav a[data-page]")]
        assert nav == PAGES, nav
        # The session is a cookie the page's scripts cannot read.
        assert "gateway_session" not in d.execute_script("return document.cookie"), "cookie readable"
        assert MASTER not in d.execute_script(
            "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie"
        )

        def usage_cards():
            return d.execute_script(
                "return Object.fromEntries([...document.querySelectorAll('.cards .card')]"
                ".map(c => [c.querySelector('.label').textContent, c.querySelector('.value').textContent]))"
            )

        # Usage before any traffic: nothing counted yet (the chart changes below).
        goto("Usage")
        wait.until(EC.presence_of_element_located((By.ID, "usage-charts")))
        before = usage_cards()
        assert before["Requests in range"] == "0", before
        goto("Keys")

        # Create a key through the form; it is shown once.
        create = wait.until(EC.presence_of_element_located((By.ID, "create-key-form")))
        create.find_element(By.NAME, "key_alias").send_keys("browser-key")
        create.find_element(By.NAME, "max_budget").send_keys("5")
        create.find_element(By.NAME, "rpm_limit").send_keys("100")
        d.find_element(By.ID, "create-key-submit").click()
        new_key = wait.until(EC.visibility_of_element_located((By.ID, "new-key"))).text.strip()
        assert new_key.startswith("sk-"), new_key
        shot("01-new-key")
        d.find_element(By.CSS_SELECTOR, "dialog.modal form button").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "new-key")))
        wait.until(lambda _: all(t in key_row().text for t in ("active", "$5.00")))

        # The key works; a fallback leaves a failed attempt behind.
        assert chat(new_key, MODEL) == 200
        assert chat(new_key, FALLBACK_MODEL) == 200
        # A user's key, for Usage's spend by user.
        req = urllib.request.Request(
            f"{BASE}/user/new",
            data=json.dumps({"user_id": "usage-user", "user_email": "usage@example.com"}).encode(),
            headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as res:
            usage_user_key = json.load(res)["key"]
        assert chat(usage_user_key, MODEL) == 200

        # Logs: the requests, one of them with two attempts.
        goto("Logs")
        # Spend rows are written in batches: filter again until they show.
        WebDriverWait(d, 30, poll_frequency=1, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda _: refilter_shows("2 attempts"))
        shot("07-logs")
        wait.until(lambda _: [tr for tr in d.find_elements(By.CSS_SELECTOR, "#logs-table tbody tr.clickable")
                              if "2 attempts" in tr.text][0].click() or True)
        attempts = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr.attempts")))
        assert "failure" in attempts.text and "success" in attempts.text, attempts.text
        shot("07-logs-attempts")
        # Filter by status: only the failed primary's row stays.
        Select(d.find_element(By.CSS_SELECTOR, "#log-filters select[name='status']")).select_by_value("failure")
        d.find_element(By.CSS_SELECTOR, "#log-filters button[type='submit']").click()

        def only_failures():
            rows = [tr.text for tr in d.find_elements(By.CSS_SELECTOR, "#logs-table tbody tr.clickable")]
            return rows and all("failure" in r and "success" not in r for r in rows)

        wait.until(lambda _: only_failures())

        # Paging, newest first by page token: 12 more requests, 10 rows a
        # page; "Older" shows the next rows (older, none twice), "Newer" the
        # first page again.
        def logged_rows():
            req = urllib.request.Request(f"{BASE}/gateway/logs?page_size=1000",
                                         headers={"Authorization": f"Bearer {MASTER}"})
            with urllib.request.urlopen(req, timeout=30) as res:
                return len(json.load(res)["data"])

        logged = logged_rows()
        for _ in range(12):
            assert chat(MASTER, MODEL) == 200
        WebDriverWait(d, 30, poll_frequency=1).until(lambda _: logged_rows() >= logged + 12)
        filters = d.find_element(By.ID, "log-filters")
        Select(filters.find_element(By.CSS_SELECTOR, "select[name='status']")).select_by_value("")
        Select(filters.find_element(By.CSS_SELECTOR, "select[name='page_size']")).select_by_value("10")
        filters.find_element(By.CSS_SELECTOR, "button[type='submit']").click()

        def shown_page(number):
            pager = d.find_element(By.ID, "logs-pager").text
            if f"Page {number}," not in pager:
                return None
            rows = d.find_elements(By.CSS_SELECTOR, "#logs-table tbody tr.clickable")
            return [(tr.find_elements(By.TAG_NAME, "td")[0].text, tr.get_attribute("data-call")) for tr in rows]

        first = wait.until(lambda _: (lambda p: p if p and len(p) >= 9 and not only_failures() else None)(shown_page(1)))
        times = [t for t, _ in first]
        assert times == sorted(times, reverse=True), times
        d.find_element(By.ID, "logs-older").click()
        second = wait.until(lambda _: shown_page(2))
        assert second, "no older rows"
        assert max(t for t, _ in second) <= min(times), (first, second)
        assert not {c for _, c in first} & {c for _, c in second}, (first, second)
        shot("07-logs-older")
        d.find_element(By.ID, "logs-newer").click()
        again = wait.until(lambda _: shown_page(1))
        assert again == first, (first, again)

        # Usage: the charts count the requests.
        goto("Usage")
        charts = wait.until(EC.presence_of_element_located((By.ID, "usage-charts")))
        bars = charts.find_elements(By.CSS_SELECTOR, "rect.bar-rect")
        assert bars, "no bars"
        titles = d.execute_script(
            "return [...document.querySelectorAll('#usage-charts svg')[1].querySelectorAll('rect title')]"
            ".map(t => t.textContent)"
        )
        assert any(not t.endswith(": 0") for t in titles), titles
        # Every day of the two weeks is labelled under the bars.
        labels = d.execute_script(
            "return [...document.querySelectorAll('#usage-charts svg')[1].querySelectorAll('text.tick')]"
            ".map(t => t.textContent).filter(t => /^\\d\\d-\\d\\d$/.test(t))"
        )
        assert len(labels) == 14, labels
        # The last 30 days' spend (LiteLLM's /global/spend) holds the range's:
        # all of this test's traffic is today's.
        cards = usage_cards()
        assert cards["Requests in range"] != before["Requests in range"], (before, cards)
        assert cards["Spend in range"] == cards["Spend, last 30 days"], cards
        assert cards["Spend in range"] != "$0.00", cards

        # By user: the user's request, named by its email (the daily rows
        # are written in batches: show the range again until it is there).
        def by_user_shows(text):
            if text in d.find_element(By.ID, "usage-by-user").text:
                return True
            d.find_element(By.CSS_SELECTOR, "#usage-range button[type='submit']").click()
            return False

        WebDriverWait(d, 30, poll_frequency=1, ignored_exceptions=(StaleElementReferenceException,
                                                                    NoSuchElementException)).until(
            lambda _: by_user_shows("usage@example.com (usage-user)"))
        row = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
               for tr in d.find_elements(By.CSS_SELECTOR, "#usage-by-user tbody tr") if "usage-user" in tr.text][0]
        assert row[1].startswith("$0.0") and row[2] == "1", row
        # Each row's spend is drawn as its share.
        assert d.find_elements(By.CSS_SELECTOR, "#usage-by-user svg.share rect.bar-rect"), "no share bars"
        d.execute_script("document.getElementById('usage-by-user').scrollIntoView()")
        shot("06-usage-by-user")
        # Per day by user: a stacked chart whose segments name the user.
        Select(d.find_element(By.CSS_SELECTOR, "#usage-split select[name='by']")).select_by_visible_text("user")
        split_title = "return document.querySelector('#usage-split-chart .chart-title').textContent"
        wait.until(lambda _: d.execute_script(split_title) == "Spend per day by user")
        segments = d.execute_script(
            "return [...document.querySelectorAll('#usage-split-chart rect.seg title')].map(t => t.textContent)")
        assert any("usage@example.com (usage-user)" in t for t in segments), segments
        legend = d.find_element(By.CSS_SELECTOR, "#usage-split-chart .legend").text
        assert "usage@example.com (usage-user)" in legend, legend
        # And by model group, in requests: today's bar counts the requests.
        Select(d.find_element(By.CSS_SELECTOR, "#usage-split select[name='by']")).select_by_visible_text("model group")
        Select(d.find_element(By.CSS_SELECTOR, "#usage-split select[name='metric']")).select_by_visible_text("requests")
        wait.until(lambda _: d.execute_script(split_title) == "Requests per day by model group")
        segments = d.execute_script(
            "return [...document.querySelectorAll('#usage-split-chart rect.seg title')].map(t => t.textContent)")
        assert any(f" {MODEL}: " in t for t in segments), segments
        d.execute_script("document.getElementById('usage-split-panel').scrollIntoView()")
        shot("06-usage-per-day-by-model")

        # Block the key: its next request is refused.
        goto("Keys")
        wait.until(lambda _: key_row().find_element(By.CSS_SELECTOR, "button[data-action='block']").click() or True)
        wait.until(lambda _: "blocked" in key_row().text)
        shot("01-keys")
        assert chat(new_key, MODEL) == 401

        # Unblock, edit, regenerate (the old key stops working), delete.
        click_in_row("unblock")
        wait.until(lambda _: "active" in key_row().text)
        assert chat(new_key, MODEL) == 200
        click_in_row("edit")
        edit = wait.until(EC.visibility_of_element_located((By.ID, "edit-key-form")))
        budget = edit.find_element(By.NAME, "max_budget")
        budget.clear()
        budget.send_keys("7")
        edit.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "edit-key-form")))
        wait.until(lambda _: "$7.00" in key_row().text)
        click_in_row("regenerate")
        wait.until(EC.alert_is_present()).accept()
        regenerated = wait.until(EC.visibility_of_element_located((By.ID, "new-key"))).text.strip()
        assert regenerated.startswith("sk-") and regenerated != new_key
        d.find_element(By.CSS_SELECTOR, "dialog.modal form button").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "new-key")))
        assert chat(new_key, MODEL) == 401
        assert chat(regenerated, MODEL) == 200
        click_in_row("delete")
        wait.until(EC.alert_is_present()).accept()
        wait.until(lambda _: not d.find_elements(By.CSS_SELECTOR, "tr[data-alias='browser-key']"))
        assert chat(regenerated, MODEL) == 401

        # Models: add one through the form, edit it (/model/update), test it
        # and a live one (/health/test_connection), then delete it.
        goto("Models")
        add = d.find_element(By.ID, "add-model-form")
        for name, value in [("model_name", "ui-added"), ("model", "openai/gpt-ui"),
                            ("api_base", "http://127.0.0.1:9/v1"), ("api_key", "sk-upstream")]:
            add.find_element(By.NAME, name).send_keys(value)
        add.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        text_appears("ui-added", (By.CSS_SELECTOR, "#page table"))
        assert "sk-upstream" not in d.find_element(By.ID, "page").text, "an upstream key shown"

        def model_action(model, action):
            wait.until(lambda _: d.find_element(By.CSS_SELECTOR, f"#page tr[data-model='{model}']")
                       .find_element(By.CSS_SELECTOR, f"button[data-action='{action}']").click() or True)

        model_action("ui-added", "edit")
        edit = wait.until(EC.visibility_of_element_located((By.ID, "edit-model-form")))
        rpm = edit.find_element(By.NAME, "rpm")
        rpm.clear()
        rpm.send_keys("42")
        edit.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "edit-model-form")))
        wait.until(lambda _: "42 / -" in d.find_element(By.CSS_SELECTOR, "#page tr[data-model='ui-added']").text)
        req = urllib.request.Request(f"{BASE}/model/info", headers={"Authorization": f"Bearer {MASTER}"})
        with urllib.request.urlopen(req, timeout=30) as res:
            served = [m for m in json.load(res)["data"] if m["model_name"] == "ui-added"]
        assert [m["litellm_params"].get("rpm") for m in served] == [42], served
        assert served[0]["litellm_params"]["api_base"] == "http://127.0.0.1:9/v1", served
        # Test: the unreachable one fails with its error; the mock answers.
        model_action("ui-added", "test")
        text_appears("failed", (By.ID, "model-test"))
        assert "cannot connect" in d.find_element(By.ID, "model-test").text, d.find_element(By.ID, "model-test").text
        shot("05-models-test-error")
        model_action(MODEL, "test")
        text_appears("success", (By.ID, "model-test"))
        model_search = d.find_element(By.ID, "model-search")
        model_search.find_element(By.NAME, "search").send_keys("UI-ADD")
        model_search.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(lambda _: [tr.get_attribute("data-model")
                              for tr in d.find_elements(By.CSS_SELECTOR, "#page tbody tr")] == ["ui-added"])
        model_action("ui-added", "delete")
        wait.until(EC.alert_is_present()).accept()
        wait.until(lambda _: "ui-added" not in d.find_element(By.CSS_SELECTOR, "#page table").text)

        # Teams: create one; an alias with markup stays text.
        goto("Teams")
        team = d.find_element(By.ID, "create-team-form")
        team.find_element(By.NAME, "team_alias").send_keys("<b>ui-team</b>")
        team.find_element(By.NAME, "max_budget").send_keys("20")
        team.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        text_appears("<b>ui-team</b>", (By.CSS_SELECTOR, "#page table"))
        assert not d.find_elements(By.CSS_SELECTOR, "#page table b"), "markup rendered"
        # Its members: add one as admin, make it a user, see the roster.
        wait.until(lambda _: [tr for tr in d.find_elements(By.CSS_SELECTOR, "#page table tbody tr")
                              if "<b>ui-team</b>" in tr.text][0]
                   .find_element(By.CSS_SELECTOR, "button[data-action='members']").click() or True)
        add = wait.until(EC.visibility_of_element_located((By.ID, "add-member-form")))
        add.find_element(By.NAME, "user_id").send_keys("ui-member")
        Select(add.find_element(By.TAG_NAME, "select")).select_by_value("admin")
        add.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        text_appears("ui-member added as admin", (By.CSS_SELECTOR, "dialog.modal"))
        # The roster is drawn again after the add: wait for its role select.
        role = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "#team-members select")))
        Select(role).select_by_value("user")
        text_appears("ui-member is now user", (By.CSS_SELECTOR, "dialog.modal"))
        shot("02-team-members")
        d.find_element(By.CSS_SELECTOR, "dialog.modal form.actions button").click()
        text_appears("ui-member (user)", (By.CSS_SELECTOR, "#page table"))
        # Edit the team: its budget and models (/team/update).
        def team_row():
            return [tr for tr in d.find_elements(By.CSS_SELECTOR, "#page table tbody tr")
                    if "<b>ui-team</b>" in tr.text][0]

        wait.until(lambda _: team_row().find_element(By.CSS_SELECTOR, "button[data-action='edit']").click() or True)
        edit_team = wait.until(EC.visibility_of_element_located((By.ID, "edit-team-form")))
        for name, value in [("max_budget", "25"), ("models", MODEL)]:
            el = edit_team.find_element(By.NAME, name)
            el.clear()
            el.send_keys(value)
        edit_team.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "edit-team-form")))
        wait.until(lambda _: all(t in team_row().text for t in ("$25.00", MODEL, "ui-member (user)")))
        # Found by the server's search (part of the alias), paged there.
        team_search = d.find_element(By.ID, "team-search")
        team_search.find_element(By.NAME, "search").send_keys("UI-TEAM")
        team_search.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(lambda _: [tr.text for tr in d.find_elements(By.CSS_SELECTOR, "#page tbody tr")
                              if "<b>ui-team</b>" in tr.text]
                   and "1 team" in d.find_element(By.CSS_SELECTOR, "#page .pager").text)
        team_search.find_element(By.NAME, "search").send_keys("-none")
        team_search.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        text_appears("No team matches.", (By.CSS_SELECTOR, "#page table"))

        # Users: create one, edit its role, budget and models, find it by id.
        goto("Users")
        create_user = d.find_element(By.ID, "create-user-form")
        create_user.find_element(By.NAME, "user_id").send_keys("ui-user")
        create_user.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "dialog.modal .secret")))
        d.find_element(By.CSS_SELECTOR, "dialog.modal form.actions button").click()

        def user_row():
            return d.find_element(By.CSS_SELECTOR, "#page tr[data-user='ui-user']")

        wait.until(lambda _: user_row().find_element(By.CSS_SELECTOR, "button[data-action='edit']").click() or True)
        edit_user = wait.until(EC.visibility_of_element_located((By.ID, "edit-user-form")))
        Select(edit_user.find_element(By.NAME, "user_role")).select_by_value("internal_user_viewer")
        for name, value in [("max_budget", "9"), ("models", MODEL)]:
            el = edit_user.find_element(By.NAME, name)
            el.clear()
            el.send_keys(value)
        edit_user.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "edit-user-form")))
        wait.until(lambda _: all(t in user_row().text for t in ("internal_user_viewer", "$9.00", MODEL)))
        req = urllib.request.Request(f"{BASE}/user/info?user_id=ui-user",
                                     headers={"Authorization": f"Bearer {MASTER}"})
        with urllib.request.urlopen(req, timeout=30) as res:
            stored = json.load(res)["user_info"]
        assert (stored["user_role"], stored["max_budget"], stored["models"]) == \
            ("internal_user_viewer", 9, [MODEL]), stored
        user_search = d.find_element(By.ID, "user-search")
        user_search.find_element(By.NAME, "user_ids").send_keys("ui-user")
        user_search.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(lambda _: [tr.get_attribute("data-user")
                              for tr in d.find_elements(By.CSS_SELECTOR, "#page tbody tr")] == ["ui-user"])
        shot("03-users-edit")

        # Organizations: create one, edit its budget and models.
        goto("Organizations")
        create_org = d.find_element(By.ID, "create-org-form")
        create_org.find_element(By.NAME, "organization_alias").send_keys("ui-org")
        create_org.find_element(By.NAME, "max_budget").send_keys("30")
        create_org.find_element(By.CSS_SELECTOR, "button[type='submit']").click()

        def org_row():
            return d.find_element(By.CSS_SELECTOR, "#page tr[data-org='ui-org']")

        wait.until(lambda _: "$30.00" in org_row().text)
        wait.until(lambda _: org_row().find_element(By.CSS_SELECTOR, "button[data-action='edit']").click() or True)
        edit_org = wait.until(EC.visibility_of_element_located((By.ID, "edit-org-form")))
        for name, value in [("max_budget", "40"), ("models", MODEL)]:
            el = edit_org.find_element(By.NAME, name)
            el.clear()
            el.send_keys(value)
        edit_org.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(EC.invisibility_of_element_located((By.ID, "edit-org-form")))
        wait.until(lambda _: all(t in org_row().text for t in ("$40.00", MODEL)))
        org_search = d.find_element(By.ID, "org-search")
        org_search.find_element(By.NAME, "org_alias").send_keys("UI-O")
        org_search.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait.until(lambda _: [tr.get_attribute("data-org")
                              for tr in d.find_elements(By.CSS_SELECTOR, "#page tbody tr")] == ["ui-org"]
                   and "Page 1 of 1 · 1 organization" in d.find_element(By.CSS_SELECTOR, "#page .pager").text)

        # Every page renders without an error notice.
        for i, page in enumerate(PAGES):
            goto(page)
            if page == "Usage":
                # Screenshot the page read, not its "Reading..." line.
                wait.until(EC.presence_of_element_located((By.ID, "usage-by-user")))
            if page == "Health":
                text_appears("healthy,")
                # The replicas sharing this gateway's Redis (itself alone
                # without): their heartbeats are read every few seconds.
                def replicas_listed():
                    if f"Replicas ({REPLICAS} alive)" in d.find_element(By.ID, "replicas").text:
                        return True
                    goto("Limits")
                    goto("Health")
                    return False

                WebDriverWait(d, 30, poll_frequency=1, ignored_exceptions=(StaleElementReferenceException,
                                                                            NoSuchElementException)).until(
                    lambda _: replicas_listed())
                rows = [r.text for r in d.find_elements(By.CSS_SELECTOR, "#replicas tbody tr")]
                assert len(rows) == REPLICAS, rows
                assert sum("this replica" in r for r in rows) == 1, rows
                port = BASE.rsplit(":", 1)[1]
                assert any("this replica" in r and f"127.0.0.1:{port}" in r for r in rows), rows
            if page == "Limits":
                # A key's live use beside its limits.
                req = urllib.request.Request(
                    f"{BASE}/key/generate",
                    data=json.dumps({"key_alias": "limited-key", "rpm_limit": 7, "tpm_limit": 7000,
                                     "model_rpm_limit": {MODEL: 5}}).encode(),
                    headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
                )
                with urllib.request.urlopen(req, timeout=30) as res:
                    limited_key = json.load(res)["key"]
                assert chat(limited_key, MODEL) == 200
                live = d.find_element(By.ID, "live-limits-form")
                live.find_element(By.NAME, "api_key").send_keys(limited_key)
                live.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
                wait.until(lambda _: "rpm" in d.find_element(By.ID, "live-limits").text)
                # Each row's cells, one space apart (the use bar breaks the line).
                rows = [" ".join(r.text.split()) for r in d.find_elements(By.CSS_SELECTOR, "#live-limits tbody tr")]
                assert any(r.startswith("Key ") and " rpm 7 " in f" {r} " for r in rows), rows
                # Where the use shown is counted is said.
                where = d.find_element(By.CSS_SELECTOR, "#live-limits .notice").text
                if REPLICAS == 1:
                    assert "counted by this replica" in where, where
                else:
                    # The fleet's counters, read from Redis: the one request.
                    assert "as the fleet counts it in Redis" in where, where
                assert any(r.startswith("Key ") and " rpm 7 1 of 7 6" in f" {r} " for r in rows), rows
                # The key's per-model limit, named with its model, beside its use.
                assert any(r.startswith("Key, per model") and f" {MODEL} rpm 5 1 of 5 4" in f" {r} "
                           for r in rows), rows
                assert d.find_elements(By.CSS_SELECTOR, "#live-limits svg.share rect.bar-rect"), "no use bars"
                shot("08-limits-live-use")
            if page == "Limits":
                # Every key with limits is listed, paged on the server.
                def limited_listed():
                    if "limited-key" in d.find_element(By.ID, "limited-keys").text:
                        return True
                    goto("Health")
                    goto("Limits")
                    return False

                WebDriverWait(d, 30, poll_frequency=1, ignored_exceptions=(StaleElementReferenceException,
                                                                            NoSuchElementException)).until(
                    lambda _: limited_listed())
                assert "with limits" in d.find_element(By.ID, "limited-keys").text
            notices = d.find_elements(By.CSS_SELECTOR, "#page .notice.error")
            assert not notices, f"{page}: {[n.text for n in notices]}"
            shot(f"{i + 1:02d}-{page.lower()}")

        # Log out: back to the login form, and the old session is gone.
        d.find_element(By.ID, "logout").click()
        wait.until(EC.presence_of_element_located((By.ID, "login-form")))
        d.get(f"{BASE}/ui")
        wait.until(EC.presence_of_element_located((By.ID, "login-form")))

        # An internal user logs in with its key: its own keys, teams, usage
        # and logs. It is a member of one of two teams.
        req = urllib.request.Request(
            f"{BASE}/user/new",
            data=json.dumps({"user_id": "browser-user", "user_role": "internal_user",
                             "key_alias": "browser-user-key"}).encode(),
            headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as res:
            user_key = json.load(res)["key"]
        for team, members in [("browser-user-team", [{"user_id": "browser-user", "role": "user"}]),
                              ("someone-elses-team", [])]:
            req = urllib.request.Request(
                f"{BASE}/team/new",
                data=json.dumps({"team_id": team, "team_alias": team, "members_with_roles": members}).encode(),
                headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
            )
            urllib.request.urlopen(req, timeout=30).close()
        pw = d.find_element(By.NAME, "password")
        pw.clear()
        pw.send_keys(user_key)
        d.find_element(By.ID, "login-submit").click()
        wait.until(lambda _: d.find_element(By.TAG_NAME, "h1").text == "Keys")
        nav = [a.text for a in d.find_elements(By.CSS_SELECTOR, "nav a[data-page]")]
        assert nav == ["Keys", "Teams", "Usage", "Logs"], nav
        wait.until(lambda _: "browser-user-key" in d.find_element(By.CSS_SELECTOR, "#page table").text)
        assert not d.find_elements(By.ID, "create-key-form")
        assert not d.find_elements(By.CSS_SELECTOR, "button[data-action]")
        assert "browser-user" in d.find_element(By.ID, "who").text
        shot("10-internal-user-keys")
        # Its teams only (the gateway pins /v2/team/list to its user), read-only.
        goto("Teams")
        wait.until(lambda _: "browser-user-team" in d.find_element(By.CSS_SELECTOR, "#page table").text)
        assert "someone-elses-team" not in d.find_element(By.CSS_SELECTOR, "#page table").text
        assert "Page 1 of 1 · 1 team" in d.find_element(By.CSS_SELECTOR, "#page .pager").text
        assert not d.find_elements(By.ID, "create-team-form")
        assert not d.find_elements(By.CSS_SELECTOR, "#page table button")
        assert not d.find_elements(By.CSS_SELECTOR, "#page .notice.error")
        shot("11-internal-user-teams")
        d.find_element(By.ID, "logout").click()
        wait.until(EC.presence_of_element_located((By.ID, "login-form")))
        console_errors()
        assert not errors, f"browser console errors: {errors}"
        print("console test passed")
    finally:
        d.quit()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        raise
