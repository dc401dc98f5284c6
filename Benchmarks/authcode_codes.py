#!/usr/bin/env python3
"""Makes N authorization codes for the app "bench" the way a browser gets them after its first sign-in: one
password sign-in (and consent) through broker's pages, then single sign-on (prompt=none), one code a request.
Usage: authcode_codes.py BROKER_URL REDIRECT EMAIL PASSWORD N OUT_FILE"""
import concurrent.futures
import html.parser
import sys
import urllib.parse

import requests


class Forms(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms, self.refresh = [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"action": attrs.get("action"), "fields": {}})
        elif tag == "input" and self.forms and attrs.get("type") == "hidden":
            self.forms[-1]["fields"][attrs["name"]] = attrs.get("value", "")
        elif tag == "meta" and attrs.get("http-equiv") == "refresh":
            self.refresh = attrs["content"].split("url=", 1)[1]


def forms(text):
    parser = Forms()
    parser.feed(text)
    return parser


def main():
    broker, redirect, email, password, count, out = sys.argv[1:7]
    query = urllib.parse.urlencode({"response_type": "code", "client_id": "bench", "redirect_uri": redirect,
                                    "scope": "openid email profile", "state": "s", "nonce": "n"})
    url = broker + "/auth/authorize?" + query
    browser = requests.Session()
    page = browser.get(url, allow_redirects=False)
    form = next(f for f in forms(page.text).forms if f["action"] == "/auth/authorize/password")
    browser.post(broker + form["action"], data=dict(form["fields"], email=email, password=password),
                 allow_redirects=False)
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
