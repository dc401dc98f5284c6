#!/usr/bin/env python3
"""OAuth 1.0a HMAC-SHA1 signatures by oauthlib (code we did not write), to cross-check ours.

Reads JSON (argv[1], else stdin): {"method", "url", "body": [[k, v], ...], "consumer_key", "consumer_secret", "token",
"token_secret", "nonce", "timestamp", "callback", "verifier"} and prints {"base_string", "signature"}.
"""
import json
import sys

from oauthlib.oauth1 import Client
from oauthlib.oauth1.rfc5849 import signature
from urllib.parse import urlencode


def main():
    case = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin)
    client = Client(
        case["consumer_key"], client_secret=case["consumer_secret"],
        resource_owner_key=case.get("token"), resource_owner_secret=case.get("token_secret"),
        callback_uri=case.get("callback"), verifier=case.get("verifier"),
        nonce=case["nonce"], timestamp=str(case["timestamp"]))
    body = urlencode([tuple(pair) for pair in case.get("body") or []]) or None
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    _, signed_headers, _ = client.sign(case["url"], http_method=case["method"], body=body, headers=headers)
    parameters = dict(
        (k, v) for k, v in signature.collect_parameters(headers=signed_headers, exclude_oauth_signature=False))
    print(json.dumps({"signature": parameters["oauth_signature"], "header": signed_headers["Authorization"]}))


if __name__ == "__main__":
    main()
