#!/usr/bin/env python3
"""A person with a passkey, in headless Chromium (Selenium's virtual authenticator: CTAP2, internal, resident
keys, user verification), serving as $BROWSER for the broker CLI.

Usage: passkey_chromium.py SCREENSHOT_DIR
Prints "ready PORT", then answers, one at a time on 127.0.0.1:PORT:
  GET /forget       the authenticator forgets its passkeys (a lost device)
  GET /open?url=U   opens U in the same browser (its authenticator keeps its passkeys) and does what the page
                    asks: "Add a passkey" -> names it and adds it; "Sign in with a passkey" (the CLI's page) or an
                    app's "Sign in to …" page -> signs in with the passkey. Answers JSON {title, url, text}
                    of the page it ended on.
  GET /credentials  the authenticator's credentials: [{id, rp_id, resident, sign_count, user_handle}]
  GET /quit         ends (as does closing stdin).
open_url.py PORT URL is the $BROWSER command that sends a URL here.
"""
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.virtual_authenticator import (  # noqa: E402
    Protocol, Transport, VirtualAuthenticatorOptions)
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

shots = sys.argv[1]
os.makedirs(shots, exist_ok=True)
driver = chromium.start()
options = VirtualAuthenticatorOptions()
options.protocol = Protocol.CTAP2
options.transport = Transport.INTERNAL
options.has_resident_key = True
options.has_user_verification = True
options.is_user_verified = True
options.is_user_consenting = True
driver.add_virtual_authenticator(options)
count = 0


def wait_until(condition, seconds=60):
    """Selenium's own wait for a condition of the page; False when it does not come within `seconds`."""
    try:
        WebDriverWait(driver, seconds).until(lambda _: condition())
        return True
    except TimeoutException:
        return False


def page():
    body = driver.find_elements(By.TAG_NAME, "body")
    return {"title": driver.title, "url": driver.current_url, "text": body[0].text if body else ""}


def shoot(name):
    global count
    count += 1
    chromium.shoot(driver, shots, f"{count:02d}-{name}")


def passkey_button():
    for button in driver.find_elements(By.TAG_NAME, "button"):
        if button.text.strip() in ("Sign in with a passkey", "Add a passkey"):
            return button
    return None


def open_url(url):
    driver.get(url)
    title = driver.title
    shoot(title.lower().replace(" ", "-")[:40] or "page")
    before = driver.current_url
    if title in ("Add a passkey", "Recover your account"):
        driver.find_element(By.ID, "name").send_keys("Chromium")
        passkey_button().click()
        wait_until(lambda: driver.title != title or driver.find_elements(
            By.CSS_SELECTOR, "[data-passkey-problem]:not([hidden])"))
    elif title == "Confirm your email address":
        for button in driver.find_elements(By.TAG_NAME, "button"):
            if button.text.strip() == "Confirm my address":
                button.click()
                wait_until(lambda: driver.title != title)
                break
    elif passkey_button() is not None:
        passkey_button().click()
        # Signed in: the page moves on (the CLI's loopback page, or the app's redirect URI); refused: the page
        # comes back with the reason, or the script shows one.
        wait_until(lambda: driver.current_url != before or driver.find_elements(
            By.CSS_SELECTOR, "[data-passkey-problem]:not([hidden])"))
        wait_until(lambda: driver.execute_script("return document.readyState") == "complete", 10)
    shoot("after-" + (title.lower().replace(" ", "-")[:30] or "page"))
    return page()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        parsed = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        if parsed.path == "/open":
            try:
                self.answer(open_url(query["url"][0]))
            except Exception as error:  # the test sees the reason
                self.answer({"error": repr(error), **page()})
        elif parsed.path == "/credentials":
            self.answer([{"id": c.id, "rp_id": c.rp_id, "resident": c.is_resident_credential,
                          "sign_count": c.sign_count,
                          "user_handle": c.user_handle} for c in driver.get_credentials()])
        elif parsed.path == "/forget":
            # The device is lost: the authenticator forgets every passkey it held.
            driver.remove_all_credentials()
            self.answer({})
        elif parsed.path == "/quit":
            self.answer({})
            threading.Thread(target=server.shutdown).start()
        else:
            self.send_error(404)


server = HTTPServer(("127.0.0.1", 0), Handler)


def until_stdin_closes():
    # The test closes stdin to end this browser, whatever state its test ended in.
    sys.stdin.read()
    server.shutdown()


threading.Thread(target=until_stdin_closes, daemon=True).start()
print(f"ready {server.server_address[1]}", flush=True)
try:
    server.serve_forever()
finally:
    driver.quit()
