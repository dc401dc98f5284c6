#!/usr/bin/env python3
"""Debian's Apache with mod_auth_openidc (code we did not write) as an app behind broker, a private instance
on a loopback port in front of a small page that shows the claims it got; headless Chromium signs in through
broker's pages — with email + password, or with Google through `broker emulate` (its consent page, first
account) — and allows the app, as a person would.

Usage: apache_relying_party.py BROKER_URL PORT CLIENT_SECRET WAY EMAIL PASSWORD [SCREENSHOT_DIR]
  WAY: password or google (EMAIL and PASSWORD are then ignored); form_post: a password sign-in with
    `OIDCResponseMode form_post` (broker posts the code to the module; the result's "redirect_methods" are the
    methods the module's redirect URI was called with, from Apache's access log); or logout: a password sign-in, then
    - /api (AuthType oauth20, OIDCOAuthIntrospectionEndpoint = broker's /auth/introspect) with the access token
      in $ACCESS_TOKEN;
    - the module's own logout (?logout=), through broker's end-session, back to /loggedout.html; after it
      /protected shows broker's sign-in page again;
    - a second sign-in, then the command in $BROKER_REVOKE (a JSON argv: broker revokes the user's sessions at
      its store); broker's back-channel logout reaches the module (?logout=backchannel) and /protected asks for
      a sign-in again; /api refuses $ACCESS_TOKEN_2, revoked with the rest.
  The app "apache" must be registered with redirect URI http://127.0.0.1:PORT/protected/redirect_uri (for
  logout also --post-logout-redirect-uri http://127.0.0.1:PORT/loggedout.html and --backchannel-logout-uri
  http://127.0.0.1:PORT/protected/redirect_uri?logout=backchannel).
Prints {"sub", "email", "pages": [titles seen], …}; exits 1 with Apache's error log on a surprise.
"""
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

import chromium

MODULES = "/usr/lib/apache2/modules"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_certificates(directory):
    """A CA and a certificate for 127.0.0.1 signed by it (openssl, the machine's)."""
    os.makedirs(directory)

    def openssl(*arguments):
        subprocess.run(["openssl", *arguments], check=True, capture_output=True, cwd=directory)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=broker test CA", "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(directory, "san.ext"), "w") as extension:
        extension.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days",
            "1", "-extfile", "san.ext", "-out", "server.pem")


def configure(directory, broker, port, secret, form_post=False):
    www = os.path.join(directory, "www", "protected")
    os.makedirs(www)
    os.makedirs(os.path.join(directory, "www", "api"))
    with open(os.path.join(directory, "www", "api", "index.shtml"), "w") as page:
        page.write('{"sub": "<!--#echo var="OIDC_CLAIM_sub" -->"}\n')
    with open(os.path.join(directory, "www", "loggedout.html"), "w") as page:
        page.write('<!doctype html><title>Signed out of the app</title><h1 id="out">Signed out</h1>\n')
    with open(os.path.join(www, "index.shtml"), "w") as page:
        page.write('<!doctype html><title>The app</title><h1>Signed in</h1>'
                   '<p id="sub"><!--#echo var="OIDC_CLAIM_sub" --></p>'
                   '<p id="email"><!--#echo var="OIDC_CLAIM_email" --></p>\n')
    # Apache's children run as www-data when started as root: they must read the page.
    for root, dirs, files in os.walk(directory):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    modules = ["mpm_event", "authn_core", "authz_core", "authz_user", "include", "mime", "dir", "auth_openidc",
               "socache_shmcb", "ssl", "proxy", "proxy_http"]
    # Debian builds mod_log_config into the server; load it only where it is a module of its own.
    if os.path.exists(f"{MODULES}/mod_log_config.so"):
        modules.append("log_config")
    tls_port = free_port()
    make_certificates(os.path.join(directory, "tls"))
    lines = [f"LoadModule {name}_module {MODULES}/mod_{name}.so" for name in modules]
    lines += [
        "ServerName 127.0.0.1",
        f"Listen 127.0.0.1:{port}",
        f"PidFile {directory}/apache.pid",
        f"ErrorLog {directory}/error.log",
        "LogLevel warn auth_openidc:info",
        f'CustomLog {directory}/access.log "%m %U"',
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
        # The same module as an OAuth 2.0 resource server that asks broker about each token (RFC 7662). The
        # module takes only an https introspection endpoint: this Apache also proxies broker over TLS on a port
        # of its own, with a certificate from a CA made for the test, which the module is told to trust.
        f"Listen 127.0.0.1:{tls_port}",
        f"<VirtualHost 127.0.0.1:{tls_port}>",
        "  SSLEngine on",
        f"  SSLCertificateFile {directory}/tls/server.pem",
        f"  SSLCertificateKeyFile {directory}/tls/server.key",
        f"  ProxyPass / {broker}/",
        "</VirtualHost>",
        f"OIDCCABundlePath {directory}/tls/ca.pem",
        f"OIDCOAuthIntrospectionEndpoint https://127.0.0.1:{tls_port}/auth/introspect",
        "OIDCOAuthIntrospectionEndpointAuth client_secret_basic",
        # As a resource server for the APIs' audience it introspects with a client entitled to that audience: a
        # CI client of the operator's (an app may introspect only tokens issued to itself).
        f"OIDCOAuthClientID {os.environ.get('RS_CLIENT_ID', 'apache')}",
        f"OIDCOAuthClientSecret {os.environ.get('RS_CLIENT_SECRET', secret)}",
        "OIDCOAuthTokenIntrospectionInterval 0",
        "<Location /api>",
        "  AuthType oauth20",
        "  Require valid-user",
        "</Location>",
    ]
    if form_post:
        lines.append("OIDCResponseMode form_post")
    path = os.path.join(directory, "apache.conf")
    with open(path, "w") as conf:
        conf.write("\n".join(lines) + "\n")
    return path


def api_status(port, token):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/", headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def sign_in_again(driver, wait, port, email, password):
    driver.get(f"http://127.0.0.1:{port}/protected/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "email")))
    driver.find_element(By.ID, "email").send_keys(email)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form[action='/auth/authorize/password'] button").click()
    wait.until(expected_conditions.presence_of_element_located((By.ID, "sub")))


def logouts(driver, wait, port, email, password, shots):
    seen = {"api_live_token": api_status(port, os.environ["ACCESS_TOKEN"])}
    # The module's logout: to broker's end_session_endpoint with the id token as hint, and back.
    back = urllib.parse.quote(f"http://127.0.0.1:{port}/loggedout.html", safe="")
    driver.get(f"http://127.0.0.1:{port}/protected/redirect_uri?logout={back}")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "out")))
    seen["after_logout"] = {"title": driver.title, "url": driver.current_url}
    if shots:
        chromium.shoot(driver, shots, "app-logged-out")
    driver.get(f"http://127.0.0.1:{port}/protected/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "email")))
    seen["after_logout_protected"] = driver.title

    # Back-channel: signed in again (consent remembered), then broker revokes the user's sessions at its store.
    sign_in_again(driver, wait, port, email, password)
    seen["signed_in_again"] = driver.title
    subprocess.run(json.loads(os.environ["BROKER_REVOKE"]), check=True, capture_output=True)
    deadline = time.monotonic() + 60
    seen["after_backchannel"] = None
    while time.monotonic() < deadline:
        driver.get(f"http://127.0.0.1:{port}/protected/")
        if driver.find_elements(By.ID, "email") and not driver.find_elements(By.ID, "sub"):
            seen["after_backchannel"] = driver.title
            break
        time.sleep(0.5)
    seen["api_revoked_token"] = api_status(port, os.environ["ACCESS_TOKEN_2"])
    return seen


def main():
    broker, port, secret, way, email, password = sys.argv[1:7]
    shots = sys.argv[7] if len(sys.argv) > 7 else None
    directory = tempfile.mkdtemp(prefix="broker-apache-")
    conf = configure(directory, broker, port, secret, form_post=way == "form_post")
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
        if way == "logout":
            result.update(logouts(driver, wait, port, email, password, shots))
        with open(os.path.join(directory, "access.log")) as log:
            result["redirect_methods"] = [line.split()[0] for line in log
                                          if line.split()[1:2] == ["/protected/redirect_uri"]]
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
