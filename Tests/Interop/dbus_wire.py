#!/usr/bin/env python3
"""D-Bus messages through jeepney (a D-Bus implementation we did not write), for the wire-format tests.

  dbus_wire.py parse HEX   prints JSON of the message jeepney reads from HEX: {type, serial, path, interface,
                           member, destination, signature, body} (bytes as lists of numbers)
  dbus_wire.py make        prints the hex of a method call jeepney writes, big-endian, with a body of the
                           Secret Service's shapes
"""
import json
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.low_level import Parser, Endianness, HeaderFields


def plain(value):
    if isinstance(value, bytes):
        return list(value)
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    return value


if sys.argv[1] == "parse":
    parser = Parser()
    parser.add_data(bytes.fromhex(sys.argv[2]))
    message = parser.get_next_message()
    fields = message.header.fields
    print(json.dumps({
        "type": message.header.message_type.value, "serial": message.header.serial,
        "path": fields.get(HeaderFields.path), "interface": fields.get(HeaderFields.interface),
        "member": fields.get(HeaderFields.member), "destination": fields.get(HeaderFields.destination),
        "signature": fields.get(HeaderFields.signature, ""), "body": plain(message.body)}))
else:
    address = DBusAddress("/org/freedesktop/secrets/collection/login", bus_name="org.freedesktop.secrets",
                          interface="org.freedesktop.Secret.Collection")
    message = new_method_call(address, "CreateItem", "a{sv}(oayays)b", (
        {"org.freedesktop.Secret.Item.Label": ("s", "broker refresh token"),
         "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"service": "broker", "profile": "default"})},
        ("/org/freedesktop/secrets/session/s1", b"", b"s3cr\x00t", "text/plain"), True))
    message.header.endianness = Endianness.big
    print(message.serialise(serial=7).hex())
