#!/usr/bin/env python3
"""Makes N authorization codes for the app "bench" the way a browser gets them after its first sign-in: one
password sign-in (and consent) through broker's pages, then single sign-on (prompt=none), one code a request.
Usage: authcode_codes.py BROKER_URL REDIRECT EMAIL PASSWORD N OUT_FILE"""
import concurrent.futures
import os
import sys
import urllib.parse

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Interop"))
import broker_pages  # noqa: E402


def main():
    broker, redirect, email, password, count, out = sys.argv[1:7]
    query = urllib.parse.urlencode({"response_type": "code", "client_id": "bench", "redirect_uri": redirect,
                                    "scope": "openid email profile", "state": "s", "nonce": "n"})
    url = broker + "/auth/authorize?" + query
    browser = requests.Session()
    page = browser.get(url, allow_redirects=False)
    broker_pages.sign_in(browser, broker, page, email, password)
    cookie = browser.cookies.get("broker_session")
    if cookie is None:
        sys.exit("no broker session after the sign-in")

    def one(_):
        response = requests.get(url + "&prompt=none", cookies={"broker_session": cookie}, allow_redirects=False)
        return dict(urllib.parse.parse_qsl(urllib.parse.urlparse(response.headers["Location"]).query))["code"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(one, range(int(count))))
    with open(out, "w") as handle:
        handle.write("\n".join(codes) + "\n")


if __name__ == "__main__":
    main()
