#!/usr/bin/env python3
"""Debian's oidc-agent (code we did not write) as a native public client of broker: oidc-gen registers an
account for the pre-registered public app with a loopback redirect (PKCE, no nonce, prompt=consent), a
"browser" (requests, keeping cookies) signs in on broker's pages and allows it, the agent's own web server on
the loopback port takes the code, and oidc-token then hands out an access token the broker accepts.

Usage: oidc_agent_native.py BROKER_URL CLIENT_ID REDIRECT_URI EMAIL PASSWORD
Prints {"authorization_url", "access_token"}; exits 1 with oidc-gen's output on a surprise.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

import requests

import broker_pages


def main():
    broker, client_id, redirect_uri, email, password = sys.argv[1:6]
    home = tempfile.mkdtemp(prefix="broker-oidc-agent-")
    os.chmod(home, 0o700)
    env = dict(os.environ, OIDC_CONFIG_DIR=os.path.join(home, "config"), OIDC_SOCK=os.path.join(home, "agent.sock"))
    os.makedirs(env["OIDC_CONFIG_DIR"], mode=0o700)
    # In the foreground (-d), so that this script owns it and ends it.
    agent = subprocess.Popen(["oidc-agent", "-d", "-a", env["OIDC_SOCK"]], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    for _ in range(300):
        if os.path.exists(env["OIDC_SOCK"]):
            break
        time.sleep(0.05)
    gen = subprocess.Popen(
        ["oidc-gen", "-m", "broker", "--issuer=" + broker, "--client-id=" + client_id, "--client-secret=",
         "--redirect-uri=" + redirect_uri, "--flow=code", "--scope=openid offline_access", "--no-url-call",
         "--pw-cmd=echo broker-test", "--prompt=none", "--confirm-default"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = {}
    output = []
    try:
        url = None
        for line in gen.stdout:
            output.append(line)
            if line.startswith(broker + "/auth/authorize?"):
                url = line.strip()
                break
        if url is None:
            raise RuntimeError("oidc-gen printed no authorization URL")
        seen["authorization_url"] = url
        browser = requests.Session()
        page = browser.get(url, allow_redirects=False)
        consent = broker_pages.sign_in(browser, broker, page, email, password)
        answered = broker_pages.allow(browser, broker, consent)
        back = broker_pages.parse(answered.text).refresh
        if back is None or not back.startswith(redirect_uri):
            raise RuntimeError("the consent did not lead back to the agent: " + answered.text[:300])
        # The agent's web server on the loopback port takes the code and redeems it.
        requests.get(back, timeout=60)
        rest, _ = gen.communicate(timeout=120)
        output.append(rest)
        if gen.returncode != 0:
            raise RuntimeError("oidc-gen failed")
        token = subprocess.run(["oidc-token", "broker"], env=env, capture_output=True, text=True, timeout=60)
        if token.returncode != 0:
            raise RuntimeError("oidc-token failed: " + token.stderr)
        seen["access_token"] = token.stdout.strip()
        print(json.dumps(seen))
    except Exception as error:
        print(f"{error}\n--- oidc-gen\n{''.join(output)}", file=sys.stderr)
        sys.exit(1)
    finally:
        if gen.poll() is None:
            gen.kill()
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
