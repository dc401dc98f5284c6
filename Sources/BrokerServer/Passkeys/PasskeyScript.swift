/// The one script of the broker's pages (`GET /auth/passkey.js`): it runs the browser's WebAuthn ceremonies for
/// the forms that ask for one, and nothing else. Pages that load it allow exactly `script-src 'self'` and
/// `connect-src 'self'` (``Page/withPasskeys(_:)``); every other page stays script-free.
///
/// - `form[data-passkey="register"]`: `navigator.credentials.create()` with the options in `data-options`.
/// - `form[data-passkey="signin"]`: fetches fresh options from `POST /auth/passkey/options`, then
///   `navigator.credentials.get()`; an `input[autocomplete~="webauthn"]` on the page gets the browser's
///   conditional UI (passkeys offered in the email field's autofill) where the browser supports it.
/// Either way the credential goes into the form's `credential` field as JSON and the form is submitted; without
/// WebAuthn the buttons say so instead.
enum PasskeyScript {
    static let source = #"""
        "use strict";
        (function () {
          const b64u = {
            encode(buffer) {
              const bytes = new Uint8Array(buffer);
              let text = "";
              for (const byte of bytes) text += String.fromCharCode(byte);
              return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
            },
            decode(text) {
              const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
              const raw = atob(base64 + "===".slice((base64.length + 3) % 4));
              return Uint8Array.from(raw, (c) => c.charCodeAt(0)).buffer;
            },
          };
          const supported = typeof window.PublicKeyCredential === "function" && !!navigator.credentials;

          function problem(form, text) {
            const line = form.querySelector("[data-passkey-problem]") || document.querySelector("[data-passkey-problem]");
            if (line) { line.textContent = text; line.hidden = false; }
          }

          function creationOptions(options) {
            const publicKey = Object.assign({}, options);
            publicKey.challenge = b64u.decode(options.challenge);
            publicKey.user = Object.assign({}, options.user, { id: b64u.decode(options.user.id) });
            publicKey.excludeCredentials = (options.excludeCredentials || []).map(
              (c) => Object.assign({}, c, { id: b64u.decode(c.id) }));
            return publicKey;
          }

          function requestOptions(options) {
            const publicKey = Object.assign({}, options);
            publicKey.challenge = b64u.decode(options.challenge);
            publicKey.allowCredentials = (options.allowCredentials || []).map(
              (c) => Object.assign({}, c, { id: b64u.decode(c.id) }));
            return publicKey;
          }

          function toJSON(credential) {
            const r = credential.response;
            const response = { clientDataJSON: b64u.encode(r.clientDataJSON) };
            if (r.attestationObject) response.attestationObject = b64u.encode(r.attestationObject);
            if (r.authenticatorData) response.authenticatorData = b64u.encode(r.authenticatorData);
            if (r.signature) response.signature = b64u.encode(r.signature);
            if (r.userHandle) response.userHandle = b64u.encode(r.userHandle);
            if (typeof r.getTransports === "function") response.transports = r.getTransports();
            return JSON.stringify({
              id: credential.id, rawId: b64u.encode(credential.rawId), type: credential.type, response: response,
              authenticatorAttachment: credential.authenticatorAttachment || null, clientExtensionResults: {},
            });
          }

          function finish(form, ceremony, credential) {
            form.elements.ceremony.value = ceremony;
            form.elements.credential.value = toJSON(credential);
            form.dataset.passkeyDone = "1";
            form.submit();
          }

          function explain(form, error) {
            if (error && error.name === "NotAllowedError") problem(form, "The passkey prompt was closed or timed out. Try again.");
            else if (error && error.name === "InvalidStateError") problem(form, "This authenticator already holds a passkey for this account.");
            else problem(form, "The passkey did not work: " + (error && error.message ? error.message : error));
          }

          async function freshOptions() {
            const reply = await fetch("/auth/passkey/options", {
              method: "POST", headers: { "Content-Type": "application/json" }, body: "{}", credentials: "same-origin",
            });
            if (!reply.ok) throw new Error("the broker did not start a passkey sign-in (" + reply.status + ")");
            return reply.json();
          }

          let conditional = null;

          for (const form of document.querySelectorAll("form[data-passkey]")) {
            if (!supported) {
              problem(form, "This browser cannot use passkeys.");
              for (const button of form.querySelectorAll("button")) button.disabled = true;
              continue;
            }
            form.addEventListener("submit", async (event) => {
              if (form.dataset.passkeyDone) return;
              event.preventDefault();
              try {
                if (form.dataset.passkey === "register") {
                  const options = JSON.parse(form.dataset.options);
                  const credential = await navigator.credentials.create({ publicKey: creationOptions(options) });
                  finish(form, form.elements.ceremony.value, credential);
                } else {
                  if (conditional) conditional.abort();
                  const started = await freshOptions();
                  const credential = await navigator.credentials.get({ publicKey: requestOptions(started.publicKey) });
                  finish(form, started.ceremony, credential);
                }
              } catch (error) {
                explain(form, error);
              }
            });
          }

          // Conditional UI: passkeys offered in the email field's autofill, where the browser can.
          const signIn = document.querySelector('form[data-passkey="signin"]');
          const field = document.querySelector('input[autocomplete~="webauthn"]');
          if (supported && signIn && field && PublicKeyCredential.isConditionalMediationAvailable) {
            PublicKeyCredential.isConditionalMediationAvailable().then(async (available) => {
              if (!available) return;
              conditional = new AbortController();
              try {
                const started = await freshOptions();
                const credential = await navigator.credentials.get({
                  publicKey: requestOptions(started.publicKey), mediation: "conditional", signal: conditional.signal,
                });
                finish(signIn, started.ceremony, credential);
              } catch (error) {
                if (error && error.name !== "AbortError") explain(signIn, error);
              }
            });
          }
        })();
        """#
}
