"""Drives the dashboard of a running `lacuna serve` in headless Chromium
(Selenium), and checks it against the REST API with the token.

usage: dashboard_browser.py BASE_URL TOKEN SCREENSHOT_DIR NBD_URI CHAP_SECRET

The daemon holds (set up by crates/lacuna/tests/dashboard.rs): volume v1
connected to host alpha (one-way CHAP, secret CHAP_SECRET) with snapshot
s1; container cold whose quota is full; an open container_quota_reached
event and a critical scrub_finished event (a flipped bit). NBD_URI is v1,
open to anonymous clients.

Every check raises AssertionError with what differed; the script prints
CHECKED <n> and exits 0 only when all held.
"""

import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import nbd
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE, TOKEN, SHOTS, NBD_URI, CHAP_SECRET = sys.argv[1:6]
WIDTHS = {"desktop": (1280, 900), "narrow": (390, 844)}
PAGES = ["/", "/volumes", "/volumes/v1", "/vvols", "/containers", "/hosts", "/events"]
checked = 0


def check(condition, what):
    global checked
    if not condition:
        raise AssertionError(what)
    checked += 1


def api(path, method="GET", body=None):
    request = urllib.request.Request(
        BASE + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def raw(method, path, headers=None, body=None):
    """One request without following redirects: (status, headers, body)."""
    parsed = urllib.parse.urlparse(BASE)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    connection.request(method, path, body=body, headers=headers or {})
    answer = connection.getresponse()
    text = answer.read().decode(errors="replace")
    connection.close()
    return answer.status, dict(answer.getheaders()), text


def browser():
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def load(driver, path):
    driver.get(BASE + path)
    errors = console_errors(driver)
    check(not errors, f"{path}: console errors {errors}")
    check(TOKEN not in driver.page_source, f"{path}: the API token is in the page")
    check(CHAP_SECRET not in driver.page_source, f"{path}: a CHAP secret is in the page")


def figure(driver, name, attribute="data-bytes"):
    element = driver.find_element(By.CSS_SELECTOR, f'[data-figure="{name}"]')
    return element.get_attribute(attribute)


def refused_without_a_session():
    for path in PAGES + ["/volumes/v1/resize", "/events/1/acknowledge"]:
        method = "POST" if path.endswith(("resize", "acknowledge")) else "GET"
        status, headers, body = raw(method, path)
        check(status == 303 and headers.get("location") == "/login",
              f"{method} {path} without a session answered {status} {headers}")
        check("v1" not in body, f"{path}: shown without a session")
    status, _, _ = raw("GET", "/", headers={"Cookie": "lacuna_session=" + "0" * 64})
    check(status == 303, f"a made-up session cookie answered {status}")
    status, _, page = raw("GET", "/login")
    check(status == 200 and 'name="token"' in page, "the sign-in page is open")


def sign_in(driver):
    driver.get(BASE + "/login")
    driver.find_element(By.ID, "token").send_keys("not-the-token")
    button = driver.find_element(By.CSS_SELECTOR, "button[type=submit]")
    button.click()
    WebDriverWait(driver, 30).until(gone_from_the_page(button))
    deadline = time.time() + 5
    refusals = console_errors(driver)
    while not refusals and time.time() < deadline:
        time.sleep(0.1)
        refusals = console_errors(driver)
    check("/login" in driver.current_url and driver.find_element(By.ID, "message"),
          "a wrong token is refused on the sign-in page")
    check(len(refusals) == 1 and "/login" in refusals[0]["message"] and "401" in refusals[0]["message"],
          f"the wrong token's only console entry is its 401: {refusals}")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    button = driver.find_element(By.CSS_SELECTOR, "button[type=submit]")
    button.click()
    WebDriverWait(driver, 30).until(gone_from_the_page(button))
    check(driver.current_url.rstrip("/") == BASE, f"signed in, at {driver.current_url}")
    cookie = driver.get_cookie("lacuna_session")
    check(cookie is not None, "a session cookie")
    check(cookie["httpOnly"] is True, f"the cookie is HttpOnly: {cookie}")
    check(cookie.get("sameSite") == "Strict", f"the cookie is SameSite=Strict: {cookie}")
    return cookie["value"]


def every_page_at_two_widths(driver):
    os.makedirs(SHOTS, exist_ok=True)
    for width_name, (width, height) in WIDTHS.items():
        driver.set_window_size(width, height)
        for path in PAGES:
            load(driver, path)
            check(driver.find_element(By.TAG_NAME, "h1").text, f"{path}: a title")
            overflow = driver.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth")
            check(overflow <= 1, f"{path} at {width}px: the page is {overflow}px wider than the window")
            name = "overview" if path == "/" else path.strip("/").replace("/", "-")
            driver.save_screenshot(os.path.join(SHOTS, f"{name}-{width_name}.png"))
    driver.set_window_size(*WIDTHS["desktop"])


def figures_equal_the_apis(driver):
    load(driver, "/")
    space = api("/v1/array/space")
    for name, key in [("capacity", "capacity_bytes"), ("free", "free_bytes"),
                      ("volume-unique", "volume_unique_bytes"), ("snapshot-only", "snapshot_bytes"),
                      ("shared", "shared_bytes"), ("reserved", "reserved_bytes")]:
        check(int(figure(driver, name)) == space[key],
              f"overview {name}: page {figure(driver, name)}, API {space[key]}")
    ratio = float(figure(driver, "data_reduction_ratio", "data-value"))
    check(abs(ratio - space["data_reduction_ratio"]) < 1e-9,
          f"reduction: page {ratio}, API {space['data_reduction_ratio']}")

    load(driver, "/volumes")
    for volume in api("/v1/volumes"):
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-volume="{volume["name"]}"]')
        cells = [int(c.get_attribute("data-bytes")) for c in row.find_elements(By.CSS_SELECTOR, "td[data-bytes]")]
        expected = [volume["size_bytes"], volume["written_bytes"], volume["unique_physical_bytes"]]
        check(cells == expected, f"volume {volume['name']}: page {cells}, API {expected}")
        hosts = row.find_element(By.CSS_SELECTOR, "td[data-hosts]").get_attribute("data-hosts")
        granted = sorted(h["name"] for h in api("/v1/hosts") if any(l["volume"] == volume["name"] for l in h["luns"]))
        check(hosts == ",".join(granted), f"volume {volume['name']} hosts: page {hosts!r}, API {granted}")

    load(driver, "/volumes/v1")
    v1 = api("/v1/volumes/v1")
    check(int(figure(driver, "size")) == v1["size_bytes"], "v1 size")
    check(int(figure(driver, "written")) == v1["written_bytes"], "v1 written")
    snapshots = driver.find_elements(By.CSS_SELECTOR, "tr[data-snapshot]")
    check([s.get_attribute("data-snapshot") for s in snapshots] ==
          [s["full_name"] for s in api("/v1/snapshots?volume=v1")], "v1's snapshots")
    check(driver.find_element(By.CSS_SELECTOR, 'tr[data-host="alpha"]'), "v1 is connected to alpha")

    load(driver, "/vvols")
    ids = []
    for container in api("/v1/vvol-containers"):
        ids += api("/v1/vvols/query", "POST", {"container": container["container"]})["ids"]
    expected = {}
    check(ids, f"vVols listed by the API: {api('/v1/vvol-containers')}")
    for item in api("/v1/vvols/info", "POST", {"ids": ids}):
        vvol = item["result"]
        expected.setdefault(vvol["metadata"].get("VMW_VmID", ""), set()).add(vvol["id"])
    shown = {}
    for section in driver.find_elements(By.CSS_SELECTOR, "section[data-vm]"):
        shown[section.get_attribute("data-vm")] = {
            row.get_attribute("data-vvol") for row in section.find_elements(By.CSS_SELECTOR, "tr[data-vvol]")}
    check(shown == expected and len(expected) == 3, f"vVols by VM: page {shown}, API {expected}")

    load(driver, "/containers")
    for container in api("/v1/containers"):
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-container="{container["name"]}"]')
        used = int(row.find_element(By.CSS_SELECTOR, "td[data-bytes]").get_attribute("data-bytes"))
        check(used == container["used_bytes"], f"container {container['name']} used: page {used}, API {container['used_bytes']}")
        backlog = int(row.find_element(By.CSS_SELECTOR, '[data-figure="backlog"]').get_attribute("data-bytes"))
        check(backlog == container["reclaim"]["backlog_bytes"], f"container {container['name']} backlog")

    load(driver, "/hosts")
    sessions = api("/v1/sessions")["sessions"]
    for host in api("/v1/hosts"):
        section = driver.find_element(By.CSS_SELECTOR, f'section[data-host="{host["name"]}"]')
        chap = section.find_element(By.CSS_SELECTOR, '[data-figure="chap"]').text
        check((host["chap_user"] or "none") in chap, f"host {host['name']} CHAP: page {chap!r}, API {host['chap_user']}")
        luns = [int(r.get_attribute("data-lun")) for r in section.find_elements(By.CSS_SELECTOR, "tr[data-lun]")]
        check(luns == [l["lun"] for l in host["luns"]], f"host {host['name']} LUNs {luns}")
    strangers = [s for s in sessions if s["host"] is None]
    shown = driver.find_elements(By.CSS_SELECTOR, "#strangers [data-sessions]")
    count = int(shown[0].get_attribute("data-sessions")) if shown else 0
    check(count == len(strangers), f"sessions of no host: page {count}, API {len(strangers)}")
    check(len(strangers) >= 1, "the open NBD connection is listed")


def write_series(driver):
    polyline = driver.find_element(By.CSS_SELECTOR, 'figure[data-title="IOPS"] polyline[data-series="write"]')
    return polyline.get_attribute("points")


def plots_move_after_io(driver, handle):
    load(driver, "/")
    before = write_series(driver)
    last = api("/v1/array/history")["samples"]
    last_at = last[-1]["unix_s"] if last else 0
    for i in range(64):
        handle.pwrite(os.urandom(65536), (8 << 20) + i * 65536)
    handle.flush()
    deadline = time.time() + 30
    while time.time() < deadline:
        samples = api(f"/v1/array/history?since_unix_s={last_at}")["samples"]
        writes = [f["ops"] for s in samples for f in s["io"] if f["direction"] == "write"]
        if sum(writes) >= 64:
            break
        time.sleep(1)
    else:
        raise AssertionError("the history never counted the writes")
    load(driver, "/")
    after = write_series(driver)
    check(after != before, "the IOPS plot changed after the writes")
    heights = [float(p.split(",")[1]) for p in after.split()]
    check(min(heights) < 160.0, f"a write point is above the axis: {heights[-5:]}")
    load(driver, "/volumes/v1")
    volume_writes = driver.find_element(
        By.CSS_SELECTOR, 'figure[data-title="Volume IOPS"] polyline[data-series="write"]').get_attribute("points")
    check(min(float(p.split(",")[1]) for p in volume_writes.split()) < 160.0,
          "v1's own plot shows its writes")


def gone_from_the_page(element):
    """A wait condition: `element` is no longer in the document. Chromium (from
    156) may answer a look at a node of a replaced document with "Node with
    given id does not belong to the document" rather than a stale reference;
    both mean the page was replaced."""
    def predicate(_driver):
        try:
            element.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return True
            raise
    return predicate


def submit(driver, action, fields=None, refused_with=None):
    """Fills and submits the form posting to `action`; `refused_with` is the
    status the action is expected to be refused with (its only console
    entry)."""
    form = driver.find_element(By.CSS_SELECTOR, f'form[action="{action}"]')
    for name, value in (fields or {}).items():
        element = form.find_element(By.NAME, name)
        if element.tag_name == "select":
            element.find_element(By.CSS_SELECTOR, f'option[value="{value}"]').click()
        elif element.get_attribute("type") == "checkbox":
            element.click()
        else:
            element.clear()
            element.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The answer replaces the page: wait for that, then for its console.
    WebDriverWait(driver, 30).until(gone_from_the_page(form))
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    errors = console_errors(driver)
    if refused_with is None:
        check(not errors, f"{action}: console errors {errors}")
    else:
        deadline = time.time() + 5
        while not errors and time.time() < deadline:
            time.sleep(0.1)
            errors = console_errors(driver)
        check(len(errors) == 1 and f"status of {refused_with}" in errors[0]["message"],
              f"{action}: refused with {refused_with}, console {errors}")


def actions_show_in_the_api(driver):
    load(driver, "/volumes")
    submit(driver, "/volumes", {"name": "made-in-browser", "size": "64M", "container": "default"})
    made = api("/v1/volumes/made-in-browser")
    check(made["size_bytes"] == 64 << 20, f"created in the page: {made}")
    check(driver.current_url.endswith("/volumes/made-in-browser"), driver.current_url)
    submit(driver, "/volumes/made-in-browser/resize", {"size": "128M"})
    check(api("/v1/volumes/made-in-browser")["size_bytes"] == 128 << 20, "resized in the page")
    submit(driver, "/volumes/made-in-browser/snapshot", {"snapshot": "from-page"})
    check(api("/v1/snapshots/made-in-browser@from-page")["name"] == "from-page", "snapshot taken in the page")
    submit(driver, "/volumes/made-in-browser/connect", {"host": "alpha", "lun": "7"})
    luns = {l["volume"]: l["lun"] for l in api("/v1/hosts/alpha")["luns"]}
    check(luns.get("made-in-browser") == 7, f"connected in the page: {luns}")
    submit(driver, "/volumes/made-in-browser/resize", {"size": "12X"}, refused_with=400)
    check("invalid size '12X'" in driver.find_element(By.ID, "refused").text, "a bad size is explained")
    check(api("/v1/volumes/made-in-browser")["size_bytes"] == 128 << 20, "and changes nothing")
    load(driver, "/volumes/made-in-browser")
    submit(driver, "/volumes/made-in-browser/delete", {"confirm": "yes"})
    destroyed = api("/v1/volumes?destroyed=true")
    check(any(v["name"] == "made-in-browser" for v in destroyed), "destroyed in the page")
    check(all(v["name"] != "made-in-browser" for v in api("/v1/volumes")), "no longer live")
    submit(driver, "/volumes/made-in-browser/recover")
    check(any(v["name"] == "made-in-browser" for v in api("/v1/volumes")), "recovered in the page")


def forms_refuse_cross_site_requests(session):
    before = len(api("/v1/volumes"))
    for csrf in ["", "0" * 64, "forged"]:
        status, _, _ = raw(
            "POST", "/volumes",
            headers={"Cookie": "lacuna_session=" + session,
                     "Content-Type": "application/x-www-form-urlencoded"},
            body=urllib.parse.urlencode({"csrf": csrf, "name": "forged", "size": "1M"}))
        check(status == 403, f"a form with anti-forgery token {csrf!r} answered {status}")
    check(len(api("/v1/volumes")) == before, "a forged form created nothing")
    status, headers, _ = raw("GET", "/", headers={"Cookie": "lacuna_session=" + session})
    policy = headers.get("content-security-policy", "")
    check(status == 200 and "default-src 'none'" in policy and "frame-ancestors 'none'" in policy,
          f"the pages carry a strict Content-Security-Policy: {policy!r}")


def fault_events_can_be_acknowledged(driver):
    events = api("/v1/events")["events"]
    quota = [e for e in events if e["kind"] == "container_quota_reached" and e["acknowledged_unix_s"] is None]
    scrub = [e for e in events if e["kind"] == "scrub_finished" and e["severity"] == "critical"]
    check(quota and scrub, f"the fault events are in the API: {events}")
    load(driver, "/")
    alerts = [r.get_attribute("data-event") for r in driver.find_elements(By.CSS_SELECTOR, "#alerts tr[data-event]")]
    check(str(quota[0]["id"]) in alerts and str(scrub[0]["id"]) in alerts, f"open alerts on the overview: {alerts}")
    load(driver, "/events")
    row = driver.find_element(By.CSS_SELECTOR, f'tr[data-event="{quota[0]["id"]}"]')
    check("cold" in row.text, f"the quota event names its container: {row.text}")
    submit(driver, f'/events/{quota[0]["id"]}/acknowledge')
    acknowledged = [e for e in api("/v1/events")["events"] if e["id"] == quota[0]["id"]][0]
    check(acknowledged["acknowledged_unix_s"] is not None, f"acknowledged in the page: {acknowledged}")
    row = driver.find_element(By.CSS_SELECTOR, f'tr[data-event="{quota[0]["id"]}"]')
    check("acknowledged" in row.text, "the page shows it acknowledged")
    load(driver, "/")
    alerts = [r.get_attribute("data-event") for r in driver.find_elements(By.CSS_SELECTOR, "#alerts tr[data-event]")]
    check(str(quota[0]["id"]) not in alerts, "no longer an open alert")


def main():
    refused_without_a_session()
    handle = nbd.NBD()
    handle.connect_uri(NBD_URI)
    driver = browser()
    try:
        session = sign_in(driver)
        every_page_at_two_widths(driver)
        figures_equal_the_apis(driver)
        plots_move_after_io(driver, handle)
        actions_show_in_the_api(driver)
        forms_refuse_cross_site_requests(session)
        fault_events_can_be_acknowledged(driver)
        sign_out = driver.find_element(By.CSS_SELECTOR, 'form[action="/logout"] button')
        sign_out.click()
        WebDriverWait(driver, 30).until(gone_from_the_page(sign_out))
        check("/login" in driver.current_url, f"signed out, at {driver.current_url}")
        status, _, _ = raw("GET", "/", headers={"Cookie": "lacuna_session=" + session})
        check(status == 303, "a signed-out session opens nothing")
    finally:
        driver.quit()
        handle.shutdown()
    print("CHECKED", checked)


main()
