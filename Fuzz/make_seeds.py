#!/usr/bin/env python3
"""Writes the seed corpora under Fuzz/corpus/<harness>/ and, once, the fixture keys Fuzz/data/keys.jwks.

Seeds are the shapes each reader meets in real use plus the edge cases its tests name; libFuzzer mutates from
them. Run again after changing a reader's format: `python3 Fuzz/make_seeds.py` (deterministic but for the
signatures and salts, which need no stability).
"""
import base64
import hashlib
import json
import os
import pathlib

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

ROOT = pathlib.Path(__file__).resolve().parent
NOW = 1_800_000_000


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(value: int, length: int | None = None) -> str:
    length = length or (value.bit_length() + 7) // 8
    return b64u(value.to_bytes(length, "big"))


def make_keys() -> list[dict]:
    path = ROOT / "data" / "keys.jwks"
    if path.exists():
        return json.loads(path.read_text())["keys"]
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    n = rsa_key.private_numbers()
    ec_key = ec.generate_private_key(ec.SECP256R1())
    e = ec_key.private_numbers()
    ed_key = ed25519.Ed25519PrivateKey.generate()
    from cryptography.hazmat.primitives import serialization as s
    raw = ed_key.private_bytes(s.Encoding.Raw, s.PrivateFormat.Raw, s.NoEncryption())
    pub = ed_key.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)
    keys = [
        {"kty": "RSA", "kid": "rsa", "alg": "RS256", "use": "sig", "n": uint(n.public_numbers.n),
         "e": uint(n.public_numbers.e), "d": uint(n.d), "p": uint(n.p), "q": uint(n.q), "dp": uint(n.dmp1),
         "dq": uint(n.dmq1), "qi": uint(n.iqmp)},
        {"kty": "EC", "kid": "ec", "alg": "ES256", "crv": "P-256", "x": uint(e.public_numbers.x, 32),
         "y": uint(e.public_numbers.y, 32), "d": uint(e.private_value, 32)},
        {"kty": "OKP", "kid": "ed", "alg": "EdDSA", "crv": "Ed25519", "x": b64u(pub), "d": b64u(raw)},
    ]
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"keys": keys}, indent=1) + "\n")
    return keys


def private_key(jwk: dict):
    d = lambda name: int.from_bytes(base64.urlsafe_b64decode(jwk[name] + "=="), "big")
    if jwk["kty"] == "RSA":
        public = rsa.RSAPublicNumbers(d("e"), d("n"))
        return rsa.RSAPrivateNumbers(d("p"), d("q"), d("d"), d("dp"), d("dq"), d("qi"), public).private_key()
    if jwk["kty"] == "EC":
        return ec.EllipticCurvePrivateNumbers(d("d"), ec.EllipticCurvePublicNumbers(d("x"), d("y"), ec.SECP256R1())).private_key()
    return ed25519.Ed25519PrivateKey.from_private_bytes(base64.urlsafe_b64decode(jwk["d"] + "=="))


def sign(jwk: dict, header: bytes, payload: bytes) -> str:
    key = private_key(jwk)
    signing_input = (b64u(header) + "." + b64u(payload)).encode()
    if jwk["kty"] == "RSA":
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    elif jwk["kty"] == "EC":
        r, s = utils.decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        signature = key.sign(signing_input)
    return signing_input.decode() + "." + b64u(signature)


def write(harness: str, seeds: list[bytes | str]) -> None:
    folder = ROOT / "corpus" / harness
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for seed in seeds:
        data = seed.encode() if isinstance(seed, str) else seed
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def public(jwk: dict) -> dict:
    return {k: v for k, v in jwk.items() if k not in ("d", "p", "q", "dp", "dq", "qi")}


def main() -> None:
    keys = make_keys()
    claims = {"iss": "http://127.0.0.1:8080", "sub": "u_0123456789abcdef", "aud": "broker", "iat": NOW - 10,
              "nbf": NOW - 10, "exp": NOW + 600, "jti": "j1", "scope": "openid email"}

    write("json", [
        '{}', '[]', 'null', 'true', '0', '-0', '1e308', '-1.5E-7', '123456789012345678901234567890',
        '"\\u00e9\\ud83d\\ude00\\n\\"\\\\\\/"', '{"a":[1,2,{"b":null}],"c":"d"}', '{"a":1,"a":2}',
        '0e308', '[' * 63 + ']' * 63, '[' * 65 + ']' * 65, ' \t\n{ "k" : [ true , false ] } ', '"\\ud800"', '01', '1.',
        json.dumps(claims), json.dumps({"keys": [public(k) for k in keys]}),
    ])
    write("form", [
        "", "a=b", "a=b&c=d", "a=", "=b", "a", "&&", "a=%20%2B+x", "a=%zz", "a=%e2%82%ac", "a=%ff",
        "grant_type=refresh_token&refresh_token=rt_abc&client_id=cli",
        "code=4%2F0AX4&state=s.t.a.t.e&scope=openid+email", "redirect_uri=http%3A%2F%2F127.0.0.1%3A5000%2Fcallback",
    ])
    jwt_seeds = []
    for jwk in keys:
        header = {"alg": jwk["alg"], "kid": jwk["kid"], "typ": "at+jwt"}
        h, p = json.dumps(header).encode(), json.dumps(claims).encode()
        jwt_seeds.append(b"\x00" + sign(jwk, h, p).encode())
        jwt_seeds.append(b"\x01" + h + b"\x00" + p)
        expired = dict(claims, exp=NOW - 3600)
        jwt_seeds.append(b"\x00" + sign(jwk, h, json.dumps(expired).encode()).encode())
    for header in ({"alg": "none"}, {"alg": "HS256", "kid": "rsa"}, {"alg": "RS256", "kid": "ec"},
                   {"alg": "ES256", "kid": "ec", "crit": ["exp"]}, {"alg": "EdDSA", "kid": "ed", "b64": False}):
        h = json.dumps(header).encode()
        jwt_seeds.append(b"\x00" + (b64u(h) + "." + b64u(json.dumps(claims).encode()) + ".c2ln").encode())
        jwt_seeds.append(b"\x01" + h + b"\x00" + json.dumps(claims).encode())
    jwt_seeds += [b"\x00", b"\x00a.b.c", b"\x00..", b"\x01{}\x00{}", b'\x01{"kid":"ed","alg":"EdDSA"}\x00[]']
    write("jwt", jwt_seeds)
    write("jwk", [
        json.dumps({"keys": [public(k) for k in keys]}), json.dumps({"keys": keys}),
        json.dumps({"keys": [dict(public(keys[1]), use="enc")]}), json.dumps({"keys": [{"kty": "oct", "k": "AAAA"}]}),
        json.dumps({"keys": [dict(public(keys[0]), key_ops=["verify"])]}), '{"keys":[]}', '{"keys":{}}', "[]",
        json.dumps({"keys": [dict(public(keys[1]), crv="P-384")]}),
        json.dumps({"keys": [dict(keys[1], d=keys[1]["x"])]}),
    ])
    salt = b"0123456789abcdef"
    phc = []
    for ln, r, p in ((4, 8, 1), (5, 1, 2), (10, 8, 1), (17, 8, 1)):
        derived = hashlib.scrypt(b"correct horse battery staple", salt=salt, n=2 ** ln, r=r, p=p, dklen=32,
                                 maxmem=2 ** 28) if ln < 17 else b"\0" * 32
        phc.append(f"$scrypt$ln={ln},r={r},p={p}$" + base64.b64encode(salt).decode().rstrip("=") + "$"
                   + base64.b64encode(derived).decode().rstrip("="))
    phc += ["$scrypt$ln=999,r=999,p=999$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA",
            "$scrypt$ln=4,ln=5,r=8,p=1$MDEyMzQ1Njc4OWFiY2RlZg$AAAAAAAAAAAAAAAAAAAAAA", "", "$", "$scrypt$$$"]
    write("phc", phc)
    write("oauth1", [
        b"\x00oauth_token=NPcudxy0yU5T3tBzho7iCotZ3cnetKwcTIRlX0iwRl0&oauth_token_secret=veNRnAWe6inFuo8o2u8SLLZLjolYDmDP7SzL0YfYI&oauth_callback_confirmed=true",
        b"\x00oauth_token=7588892-kagSNqWge8gB1WwE3plnFsJHAZVfxWD7Vb57p0b4&oauth_token_secret=PbKfYqSryyeKDWz4ebtY3o5ogNLG11WJuZBc9fQrQo&user_id=7588892&screen_name=x",
        b"\x00oauth_token=&oauth_callback_confirmed=true", b"\x00%zz",
        b'\x01OAuth oauth_consumer_key="xvz1evFS4wEEPTGEFPHBog", oauth_nonce="kYjzVBB8Y0ZFabxSWbWovY3uYSQ2pTgmZeNu2VS4cg", oauth_signature="tnnArxj06cWHq44gCs1OSKk%2FjY%3D", oauth_signature_method="HMAC-SHA1", oauth_timestamp="1318622958", oauth_token="370773112-GmHxMAgYyLbNEtIKZeRNFsMKPR9EyMZeS9weJAEb", oauth_version="1.0"',
        b'\x01OAuth a="', b'\x01OAuth =""', b"\x01Bearer x",
        b'\x02{"id_str":"7588892","name":"X User","id":7588892}', b'\x02{"id_str":"12345"}', b'\x02{"id_str":""}',
        b'\x02{"id_str":"1e5"}', b"\x02[]",
        b"\x03https://api.x.com/1.1/account/verify_credentials.json?include_email=true&skip_status=1",
        b"\x03HTTP://API.X.COM:443/oauth/request_token?a=%20#frag", b"\x03https://u@host/",
    ])
    write("loopback", [
        "GET /callback?code=abc&state=xyz HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n",
        "GET /callback?error=access_denied&error_description=no+way&state=s HTTP/1.1\r\n\r\n",
        "GET /callback HTTP/1.1\r\n\r\n", "GET /favicon.ico HTTP/1.1\r\n\r\n", "POST /callback HTTP/1.1\r\n\r\n",
        "GET /callback?code=%zz HTTP/1.1\r\n\r\n", "GET /callback?a=1&a=2 HTTP/1.1\r\nX: y\r\n\r\n",
        "GET /callback?code=abc", "\r\n\r\n", "GET  /callback HTTP/1.1\r\n\r\n",
    ])
    server = {"server": {"host": "127.0.0.1", "port": 8080, "issuer": "https://id.example.com",
                         "access_token_ttl": 600, "refresh_token_ttl": 2592000, "database": "postgres://broker@db/broker",
                         "max_connections": 512, "request_timeout": 30},
              "providers": {"google": {"client_id": "id.apps.googleusercontent.com", "client_secret_file": "/etc/broker/google"},
                            "custom": {"enabled": True}}}
    write("config", [
        b"\x01" + json.dumps(server).encode(), b"\x01{}", b'\x01{"server":{"port":0}}', b'\x01{"providers":{"nope":{}}}',
        b'\x01{"server":{"database":"postgresql://u:p@h:5432/d?sslmode=verify-full"}}',
        b'\x01{"providers":{"twitter":{"mode":"oauth1","consumer_key":"k"}}}',
        b'\x00{"broker_url":"https://id.example.com"}', b'\x00{"broker_url":"http://10.0.0.1","insecure_http":true}',
        b'\x00{"other":1}', b"\x00[]",
        b'\x00{"api_urls":["https://api.example.com/v1","http://127.0.0.1:8080"],'
        b'"profiles":{"staging":{"broker_url":"https://b.example.com","api_urls":["https://[::1]:8443/x"]}}}',
        b'\x00{"api_urls":["http://api.example.com"]}', b'\x00{"profiles":{"bad name":{}}}',
        b'\x00{"http_timeout":30,"profiles":{"slow":{"http_timeout":3600}}}', b'\x00{"http_timeout":1e3}',
        b'\x00{"credential_store":"keyring","profiles":{"p":{"credential_store":"file"}}}',
        b'\x00{"credential_store":"vault"}',
        b"\x02https://api.example.com/v1", b"\x02http://127.0.0.1:8080/a/b/", b"\x02https://user@[::1]:443/%2e%2E/x",
        b"\x02HTTPS://API.Example.COM:0443/v1?q#f", b"\x02https://h/v1/./x", b"\x02http://localhost",
        # Delimiters beside characters that join them into one grapheme, and canonically equivalent paths: the
        # URL is read as bytes (the first is what the fuzzer found: U+070F, a prepended mark, before "/below").
        b"\x02HTTPS://.COM:0443/v1:p\xf4b04P43/\x8a\xce\xc0\x8e\xc0\x8e\xdc\x8f",
        "\x02https://api.example.com/v1?\u0301x", "\x02https://api.example.com/caf\u00e9",
        "\x02https://api.example.com/cafe\u0301/x",
    ])
    session = {"broker": "http://127.0.0.1:8080", "profile": "default", "user_id": "u_0123456789abcdef0123456789abcdef",
               "provider": "google", "access_token": "eyJ.x.y", "expires_at": NOW, "refresh_token": "rt_x",
               "obtained_at": NOW - 60}
    write("cache", [
        json.dumps({"format": 1, "sessions": [session]}), json.dumps({"format": 1, "sessions": []}),
        json.dumps({"format": 1, "sessions": [dict(session, refresh_token=None), dict(session, profile="ci")]}),
        json.dumps({"format": 1, "sessions": [dict(session, refresh_token=None, secrets="keyring")]}),
        json.dumps({"format": 2, "sessions": []}), json.dumps({"format": 1, "sessions": [{"broker": 1}]}), "{", "",
    ])

    write("webauthn", webauthn_seeds())
    write("dbus", dbus_seeds())


def dbus_seeds() -> list[bytes]:
    """D-Bus messages jeepney writes (both byte orders; a call, a reply, an error, a signal), mode byte 0; and
    signatures, mode byte 1."""
    from jeepney import DBusAddress, new_method_call, new_method_return, new_error, new_signal
    from jeepney.low_level import Endianness

    service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                          interface="org.freedesktop.Secret.Service")
    call = new_method_call(service, "SearchItems", "a{ss}", ({"service": "broker", "profile": "default"},))
    call.header.serial = 4
    create = new_method_call(service, "CreateItem", "a{sv}(oayays)b", (
        {"org.freedesktop.Secret.Item.Label": ("s", "label")},
        ("/org/freedesktop/secrets/session/s1", b"", b"secret", "text/plain"), True))
    reply = new_method_return(call, "aoao", (["/org/freedesktop/secrets/collection/login/1"], []))
    error = new_error(call, "org.freedesktop.Secret.Error.IsLocked", "s", ("locked",))
    signal = new_signal(DBusAddress("/org/freedesktop/secrets/prompt/p1",
                                    interface="org.freedesktop.Secret.Prompt"), "Completed", "bv", (False, ("ao", [])))
    seeds = []
    for message in (call, create, reply, error, signal):
        for order in (Endianness.little, Endianness.big):
            message.header.endianness = order
            seeds.append(b"\x00" + message.serialise(serial=5))
    seeds += [b"\x01" + text for text in (b"a{sv}", b"(oayays)", b"aoao", b"a(yv)", b"a{s(ii)}", b"", b"a{")]
    return seeds


def webauthn_seeds() -> list[bytes]:
    """CBOR items, authenticator data with each algorithm's credential, and attestation objects (mode byte first)."""
    from fido2 import cbor

    rp_hash = hashlib.sha256(b"localhost").digest()
    ec_key = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    ed_key = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key().public_numbers()
    keys = [
        {1: 2, 3: -7, -1: 1, -2: ec_key.x.to_bytes(32, "big"), -3: ec_key.y.to_bytes(32, "big")},
        {1: 1, 3: -8, -1: 6, -2: ed_key},
        {1: 3, 3: -257, -1: rsa_key.n.to_bytes(256, "big"), -2: rsa_key.e.to_bytes(3, "big")},
    ]
    seeds = [b"\x00" + cbor.encode(item) for item in [
        {"fmt": "none", "attStmt": {}, "authData": b"\x00" * 37}, [1, -1, b"", "", True, False], 2**64 - 1, -(2**64),
    ]]
    for key in keys:
        credential = os.urandom(16)
        data = rp_hash + bytes([0x45]) + (7).to_bytes(4, "big") + bytes(16) + len(credential).to_bytes(2, "big") \
            + credential + cbor.encode(key)
        seeds.append(b"\x01" + data)
        seeds.append(b"\x01" + rp_hash[:31] + bytes([0xC5]) + data[33:] + cbor.encode({"credProtect": 2}))
        seeds.append(b"\x02" + cbor.encode({"fmt": "none", "attStmt": {}, "authData": data}))
        seeds.append(b"\x02" + cbor.encode({"fmt": "packed", "attStmt": {"alg": key[3], "sig": bytes(70)},
                                            "authData": data}))
    seeds.append(b"\x01" + rp_hash + bytes([0x01]) + bytes(4))
    return seeds


if __name__ == "__main__":
    main()
