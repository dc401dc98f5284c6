#!/usr/bin/env python3
"""Debian's Apache with mod_auth_openidc (code we did not write) as an app behind broker, a private instance
on a loopback port in front of a small page that shows the claims it got; headless Chromium signs in through
broker's pages — with email + password, or with Google through `broker emulate` (its consent page, first
account) — and allows the app, as a person would.

Usage: apache_relying_party.py BROKER_URL PORT CLIENT_SECRET WAY EMAIL PASSWORD [SCREENSHOT_DIR]
  WAY: password or google (EMAIL and PASSWORD are then ignored)
  The app "apache" must be registered with redirect URI http://127.0.0.1:PORT/protected/redirect_uri.
Prints {"sub", "email", "pages": [titles seen]}; exits 1 with Apache's error log on a surprise.
"""
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

import chromium

MODULES = "/usr/lib/apache2/modules"


def configure(directory, broker, port, secret):
    www = os.path.join(directory, "www", "protected")
    os.makedirs(www)
    with open(os.path.join(www, "index.shtml"), "w") as page:
        page.write('<!doctype html><title>The app</title><h1>Signed in</h1>'
                   '<p id="sub"><!--#echo var="OIDC_CLAIM_sub" --></p>'
                   '<p id="email"><!--#echo var="OIDC_CLAIM_email" --></p>\n')
    # Apache's children run as www-data when started as root: they must read the page.
    for root, dirs, files in os.walk(directory):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    modules = ["mpm_event", "authn_core", "authz_core", "authz_user", "include", "mime", "dir", "auth_openidc"]
    lines = [f"LoadModule {name}_module {MODULES}/mod_{name}.so" for name in modules]
    lines += [
        "ServerName 127.0.0.1",
        f"Listen 127.0.0.1:{port}",
        f"PidFile {directory}/apache.pid",
        f"ErrorLog {directory}/error.log",
        "LogLevel warn auth_openidc:info",
        "TypesConfig /etc/mime.types",
        f"DocumentRoot {directory}/www",
        f"<Directory {directory}/www>",
        "  Options +Includes",
        "  AddOutputFilter INCLUDES .shtml",
        "  DirectoryIndex index.shtml",
        "  Require all granted",
        "</Directory>",
        f"OIDCProviderMetadataURL {broker}/.well-known/openid-configuration",
        "OIDCClientID apache",
        f"OIDCClientSecret {secret}",
        f"OIDCRedirectURI http://127.0.0.1:{port}/protected/redirect_uri",
        f"OIDCCryptoPassphrase {secrets.token_urlsafe(24)}",
        'OIDCScope "openid email profile"',
        "OIDCPKCEMethod S256",
        "OIDCPassClaimsAs environment",
        "<Location /protected>",
        "  AuthType openid-connect",
        "  Require valid-user",
        "</Location>",
    ]
    path = os.path.join(directory, "apache.conf")
    with open(path, "w") as conf:
        conf.write("\n".join(lines) + "\n")
    return path


def main():
    broker, port, secret, way, email, password = sys.argv[1:7]
    shots = sys.argv[7] if len(sys.argv) > 7 else None
    directory = tempfile.mkdtemp(prefix="broker-apache-")
    conf = configure(directory, broker, port, secret)
    apache = subprocess.Popen(["/usr/sbin/apache2", "-f", conf, "-DFOREGROUND"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    driver = None
    try:
        driver = chromium.start()
        wait = WebDriverWait(driver, 60)
        # Apache is up once it answers; its first answer to /protected is the redirect to broker.
        for _ in range(600):
            try:
                driver.get(f"http://127.0.0.1:{port}/protected/")
                break
            except Exception:
                if apache.poll() is not None:
                    raise RuntimeError("apache exited: " + apache.stderr.read().decode())
                time.sleep(0.1)
        pages = []
        wait.until(expected_conditions.presence_of_element_located((By.ID, "email")))
        pages.append(driver.title)
        if shots:
            chromium.shoot(driver, shots, "app-sign-in")
        if way == "google":
            driver.find_element(By.XPATH, "//button[contains(., 'Google')]").click()
            wait.until(expected_conditions.presence_of_element_located((By.ID, "allow"))).click()
        else:
            driver.find_element(By.ID, "email").send_keys(email)
            driver.find_element(By.ID, "password").send_keys(password)
            driver.find_element(By.CSS_SELECTOR, "form[action='/auth/authorize/password'] button").click()
        allow = wait.until(expected_conditions.presence_of_element_located(
            (By.CSS_SELECTOR, "button[value='allow']")))
        pages.append(driver.title)
        if shots:
            chromium.shoot(driver, shots, "app-consent")
        allow.click()
        wait.until(expected_conditions.presence_of_element_located((By.ID, "sub")))
        pages.append(driver.title)
        result = {
            "sub": driver.find_element(By.ID, "sub").text,
            "email": driver.find_element(By.ID, "email").text,
            "pages": pages,
            "url": driver.current_url,
        }
        print(json.dumps(result))
    except Exception as error:
        log = ""
        try:
            with open(os.path.join(directory, "error.log")) as handle:
                log = handle.read()[-4000:]
        except OSError:
            pass
        page = driver.page_source[:2000] if driver else ""
        print(f"{error}\n--- apache error.log\n{log}\n--- page\n{page}", file=sys.stderr)
        sys.exit(1)
    finally:
        if driver:
            driver.quit()
        apache.terminate()
        try:
            apache.wait(timeout=30)
        except subprocess.TimeoutExpired:
            apache.kill()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
