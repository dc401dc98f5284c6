#!/usr/bin/env bash
# Installs what broker needs to build, run and test: system libraries, tools, and the Python packages the
# interop tests use. Safe to run again: it installs only what is missing.
#   scripts/setup.sh             everything (the tests)
#   scripts/setup.sh quickstart  only what scripts/quickstart.sh needs: the build's libraries, openssl and Python
#                                with the two JWT libraries that check the quick start's tokens
set -euo pipefail

APT_PACKAGES=(
  pkg-config libcurl4-openssl-dev libssl-dev libsqlite3-dev libqrencode-dev openssl ca-certificates python3 python3-pip
  postgresql wrk hyperfine tmux nginx prometheus
  gdb procps                  # scripts/bounded.sh: the stacks of a test run that stalls, before it is ended
  libc6-dev libstdc++-12-dev  # static glibc and libstdc++: the `broker` launcher is a fully static executable
  chromium chromium-driver    # the real-browser tests: the loopback sign-in, the reset page (Selenium)
  apache2 libapache2-mod-auth-openidc  # an app nobody here wrote behind broker's OpenID Provider
  oidc-agent-cli              # a native OpenID Connect client nobody here wrote
  dbus-daemon gnome-keyring   # the keyring tests: a private session bus with the desktop's Secret Service
)
PIP_PACKAGES=(joserfc pyjwt cryptography oauthlib aiosmtpd "selenium<4.52" authlib requests idpyoidc fido2 secretstorage mcp trustme pyotp)
PIP_MODULES='joserfc, jwt, cryptography, oauthlib, aiosmtpd, selenium, authlib, requests, idpyoidc, fido2, secretstorage, mcp, trustme, pyotp'
if [ "${1:-}" = quickstart ]; then
  APT_PACKAGES=(pkg-config libcurl4-openssl-dev libssl-dev libsqlite3-dev libqrencode-dev openssl ca-certificates
    python3 python3-pip libc6-dev libstdc++-12-dev)
  PIP_PACKAGES=(joserfc pyjwt cryptography)
  PIP_MODULES='joserfc, jwt, cryptography'
fi

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${BROKER_PYTHON:-python3}
if ! "$PYTHON" -c "import $PIP_MODULES" 2>/dev/null; then
  echo "setup: installing Python packages ${PIP_PACKAGES[*]}" >&2
  "$PYTHON" -m pip install -q "${PIP_PACKAGES[@]}" 2>/dev/null \
    || "$PYTHON" -m pip install -q --break-system-packages "${PIP_PACKAGES[@]}"
fi

command -v swift >/dev/null || { echo "setup: the Swift toolchain (6.0+) must be on PATH" >&2; exit 1; }
