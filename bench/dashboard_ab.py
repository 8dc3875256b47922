#!/usr/bin/python3
"""What the dashboard costs the data path: one fio job over NBD, run alone and
while the dashboard is polled, the conditions alternated run by run on one
array (the machine's minute-to-minute drift falls on all of them alike).

Conditions:
  alone    nothing polls;
  http     a client signed in to the dashboard fetches every page once a
           second (what the server does for a browser: there is no script
           and no asset, so a page load is one request);
  browser-5s  headless Chromium (Selenium) signed in, loading the next page
           every 5 s (a dashboard left open, refreshed by hand or by a
           reload extension);
  browser  the same browser loading every page in turn as fast as it renders
           them (on a 2-core machine its own rendering competes with fio and
           the daemon for the cores: an upper bound, mostly the browser's).

usage: bench/dashboard_ab.py [--rw randwrite] [--bs 4k] [--depth 32]
                             [--seconds 15] [--rounds 3] [--size-gib 1]
Needs: fio (nbd engine), chromium, chromium-driver, python3-selenium, and a
release build (cargo build --release). Listens on 127.0.0.1 only.
"""
import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_compare as nc  # noqa: E402

PAGES = ["/", "/volumes", "/volumes/bench", "/vvols", "/containers", "/hosts", "/events"]


def sign_in(api_port, token):
    connection = http.client.HTTPConnection("127.0.0.1", api_port, timeout=30)
    body = urllib.parse.urlencode({"token": token})
    connection.request("POST", "/login", body=body,
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    answer = connection.getresponse()
    answer.read()
    cookie = answer.getheader("Set-Cookie").split(";")[0]
    connection.close()
    return cookie


def http_poller(api_port, token, stop, loads):
    cookie = sign_in(api_port, token)
    connection = http.client.HTTPConnection("127.0.0.1", api_port, timeout=30)
    while not stop.wait(1.0):
        for page in PAGES:
            connection.request("GET", page, headers={"Cookie": cookie})
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200, (page, answer.status)
            loads[0] += 1


def browser_poller(api_port, token, stop, loads, interval_s=0.0):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        base = f"http://127.0.0.1:{api_port}"
        driver.get(base + "/login")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        while not stop.is_set():
            for page in PAGES:
                driver.get(base + page)
                loads[0] += 1
                if interval_s and stop.wait(interval_s):
                    return
    finally:
        driver.quit()


def run(condition, lacuna, token, args):
    stop, loads = threading.Event(), [0]
    poller = None
    if condition != "alone":
        target, extra = {
            "http": (http_poller, ()),
            "browser-5s": (browser_poller, (5.0,)),
            "browser": (browser_poller, ()),
        }[condition]
        poller = threading.Thread(target=target, args=(lacuna.api, token, stop, loads, *extra))
        poller.start()
    try:
        iops, mib_s = nc.fio(lacuna.uri, args.rw, args.bs, args.depth, args.seconds, args.size_gib)
    finally:
        stop.set()
        if poller:
            poller.join()
    return iops, mib_s, loads[0] / args.seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rw", default="randwrite")
    parser.add_argument("--bs", default="4k")
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-gib", type=int, default=1)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=nc.ROOT).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="lacuna-dashboard-ab-")
    lacuna = nc.Lacuna(tmp, args.size_gib)
    results = {"alone": [], "http": [], "browser-5s": [], "browser": []}
    try:
        token = open(os.path.join(lacuna.data, "api-token")).read().strip()
        nc.prefill(lacuna.uri, args.size_gib)
        for round_number in range(args.rounds):
            order = list(results) if round_number % 2 == 0 else list(reversed(results))
            for condition in order:
                iops, mib_s, loads_per_s = run(condition, lacuna, token, args)
                results[condition].append((iops, loads_per_s))
                print(f"round {round_number + 1} {condition:10} {iops:9.0f} IOPS {mib_s:7.1f} MiB/s "
                      f"{loads_per_s:5.1f} pages/s", flush=True)
    finally:
        lacuna.stop()
    alone = statistics.median(r[0] for r in results["alone"])
    print(f"\n{args.bs} {args.rw} QD{args.depth}, {args.seconds} s x {args.rounds} rounds, commit {commit}")
    print("| condition | IOPS (median) | ÷ alone | pages/s |")
    print("|---|---|---|---|")
    for condition, runs in results.items():
        iops = statistics.median(r[0] for r in runs)
        pages = statistics.median(r[1] for r in runs)
        print(f"| {condition} | {iops:,.0f} | {iops / alone:.3f} | {pages:.1f} |")


if __name__ == "__main__":
    main()
