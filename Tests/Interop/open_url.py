#!/usr/bin/env python3
"""$BROWSER for the broker CLI in the passkey tests: hands URL to passkey_chromium.py on 127.0.0.1:PORT and
returns at once (the CLI waits for the page's outcome on its own).

Usage: open_url.py PORT URL
"""
import sys
import threading
import urllib.parse
import urllib.request

port, url = sys.argv[1], sys.argv[2]
address = f"http://127.0.0.1:{port}/open?" + urllib.parse.urlencode({"url": url})
# The browser works on the page after this returns: the request is left running in a thread that outlives
# nothing (the process exits when the answer comes, which the CLI does not wait for).
threading.Thread(target=lambda: urllib.request.urlopen(address, timeout=300).read()).start()
