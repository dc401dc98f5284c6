package import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// Passkeys (issue "Passkeys"): the WebAuthn relying party's options and checks (``WebAuthnRelyingParty``),
/// the store's credentials, and the ways a person meets them — adding one through a ticket from
/// `broker passkey add`, signing in with one on an app's sign-in page, the CLI's loopback page and the `/device`
/// page, and listing and removing them with an account token.
///
/// Sign-in is discoverable: the page asks for any passkey of this relying party, with no email first, so
/// nothing on it says whether an address has an account. User verification is required for both ceremonies
/// (a passkey replaces a password, not a second factor).
extension TokenIssuer {
    /// On or off, for which relying-party id and origin: from the issuer as it is now (a `--port 0` broker knows
    /// its own only once bound) — the one derivation every service asks.
    var passkeySettings: PasskeySettings {
        PasskeySettings.resolve(issuer: issuer, configured: configuration.webAuthnRPID)
    }
}

package final class PasskeyService: ContextualService {
    package let context: ServiceContext
    let flowKey: [UInt8]

    init(
        context: ServiceContext, flowKey: [UInt8]
    ) {
        self.context = context
        self.flowKey = flowKey
    }

    package var settings: PasskeySettings { tokens.passkeySettings }

    var relyingParty: WebAuthnRelyingParty? {
        guard case .on(let id, let origin) = settings else { return nil }
        return WebAuthnRelyingParty(id: id, origins: [origin])
    }

    var enabled: Bool { relyingParty != nil }

    /// Why a ceremony did not end in a sign-in or a new passkey: the sentence the page shows, and the metric's
    /// outcome.
    struct Failure: Error, Sendable {
        var message: String
        var outcome: String
    }

    static let unavailable = APIError(
        status: 404, code: .notFound,
        detail:
            "passkeys are off on this broker (its relying-party id would be an IP address; see server.webauthn_rp_id)")

    // MARK: Options

    /// Options for `navigator.credentials.get()`: any passkey of this relying party, user verification required.
    func signInOptions() throws -> APIResponse {
        guard let rp = relyingParty else { throw Self.unavailable }
        let ceremony = try PasskeyCeremony.start(.signIn, now: now)
        let options: JSONValue = [
            "challenge": .string(Base64URL.encode(ceremony.challenge)), "rpId": .string(rp.id),
            "timeout": .int(PasskeyCeremony.lifetime * 1000), "userVerification": "required", "allowCredentials": [],
        ]
        return APIResponse(
            status: 200, body: ["publicKey": options, "ceremony": .string(try ceremony.seal(key: flowKey))],
            headers: [("Cache-Control", "no-store")])
    }

    /// Options for `navigator.credentials.create()` for `user`: a discoverable credential with user
    /// verification, the user's random handle, and the passkeys they have excluded (no second one on the same
    /// authenticator).
    func registrationOptions(user: UserRecord, for purpose: PasskeyCeremony.Purpose) async throws
        -> (options: JSONValue, ceremony: String)
    {
        guard let rp = relyingParty else { throw Self.unavailable }
        let handle = try await store.passkeyHandle(
            user: user.id, orInsert: Base64URL.encode(try SecureRandom.bytes(32)))
        let ceremony = try PasskeyCeremony.start(purpose, now: now)
        let existing = try await store.passkeys(user: user.id)
        let label = user.email ?? user.name ?? user.id.description
        let options: JSONValue = [
            "challenge": .string(Base64URL.encode(ceremony.challenge)),
            "rp": ["id": .string(rp.id), "name": "broker"],
            "user": ["id": .string(handle), "name": .string(label), "displayName": .string(user.name ?? label)],
            "pubKeyCredParams": .array(
                COSEKey.Algorithm.allCases.map { ["type": "public-key", "alg": .int(Int64($0.rawValue))] }),
            "timeout": .int(PasskeyCeremony.lifetime * 1000),
            "attestation": "none",
            "authenticatorSelection": [
                "residentKey": "required", "requireResidentKey": true, "userVerification": "required",
            ],
            "excludeCredentials": .array(
                existing.map { passkey -> JSONValue in
                    var entry: [String: JSONValue] = ["type": "public-key", "id": .string(passkey.id)]
                    if !passkey.transports.isEmpty {
                        entry["transports"] = .array(passkey.transports.map(JSONValue.string))
                    }
                    return .object(entry)
                }),
        ]
        return (options, try ceremony.seal(key: flowKey))
    }

    // MARK: Ceremonies

    /// The credential a page posts (the browser's `PublicKeyCredential`, base64url fields, as JSON).
    struct PostedCredential {
        var id: String
        var rawID: [UInt8]
        var clientDataJSON: [UInt8]
        var attestationObject: [UInt8]?
        var authenticatorData: [UInt8]?
        var signature: [UInt8]?
        var userHandle: String?
        var transports: [String]

        init(_ text: String) throws(Failure) {
            let bad = Failure(message: "The browser's answer could not be read. Try again.", outcome: "malformed")
            guard text.utf8.count <= 64 * 1024, let json = JSONValue.parse(Array(text.utf8))?.objectValue,
                json["type"]?.stringValue == "public-key", let id = json["id"]?.stringValue,
                let rawID = Base64URL.decode(id), (1...AuthenticatorData.maxCredentialIDLength).contains(rawID.count),
                json["rawId"]?.stringValue.map({ $0 == id }) ?? true,
                let response = json["response"]?.objectValue,
                let clientData = response["clientDataJSON"]?.stringValue.flatMap(Base64URL.decode)
            else { throw bad }
            func bytes(_ name: String) throws(Failure) -> [UInt8]? {
                guard let value = response[name], value != .null else { return nil }
                guard let decoded = value.stringValue.flatMap(Base64URL.decode) else { throw bad }
                return decoded
            }
            self.id = id
            self.rawID = rawID
            clientDataJSON = clientData
            attestationObject = try bytes("attestationObject")
            authenticatorData = try bytes("authenticatorData")
            signature = try bytes("signature")
            userHandle = try bytes("userHandle").map(Base64URL.encode)
            transports = (response["transports"]?.arrayValue ?? []).compactMap(\.stringValue)
                .filter { $0.utf8.count <= 16 && $0.utf8.allSatisfy { $0.isASCIILowercase || $0 == UInt8(ascii: "-") } }
                .prefix(8).map { $0 }
        }
    }

    /// Spends the ceremony's challenge (once, across brokers) after checking what it is for.
    private func open(_ sealed: String, expecting signIn: Bool) async throws -> PasskeyCeremony {
        guard let ceremony = PasskeyCeremony.open(sealed, key: flowKey, now: now),
            signIn == (ceremony.purpose == .signIn)
        else {
            throw Failure(message: "This passkey prompt has expired. Try again.", outcome: "stale_ceremony")
        }
        guard try await store.spendStateMarker(ceremony.marker, expiresAt: ceremony.expiresAt + 60) else {
            throw Failure(message: "This passkey prompt was already used. Try again.", outcome: "replayed_challenge")
        }
        return ceremony
    }

    /// A discoverable sign-in: the passkey the browser returned, its user (by the user handle, which must be
    /// the one the passkey was made for), the signature, the counter; the user must not be disabled.
    func signIn(ceremony sealed: String, credential text: String) async throws -> (UserRecord, PasskeyRecord) {
        do {
            guard let rp = relyingParty else { throw Failure(message: "Passkeys are off here.", outcome: "off") }
            let posted = try PostedCredential(text)
            let ceremony = try await open(sealed, expecting: true)
            let unknown = Failure(
                message: "This passkey is not registered with this broker (it may have been removed).",
                outcome: "unknown_passkey")
            guard let passkey = try await store.passkey(id: posted.id) else { throw unknown }
            guard let handle = posted.userHandle, try await store.passkeyUser(handle: handle) == passkey.userID else {
                throw Failure(message: "This passkey belongs to another account.", outcome: "user_handle")
            }
            guard let data = posted.authenticatorData, let signature = posted.signature else {
                throw Failure(message: "The browser's answer could not be read. Try again.", outcome: "malformed")
            }
            let assertion: WebAuthnRelyingParty.Assertion
            do {
                let key = try COSEKey(encoded: passkey.publicKey)
                assertion = try rp.authenticate(
                    clientDataJSON: posted.clientDataJSON, authenticatorData: data, signature: signature,
                    challenge: ceremony.challenge, publicKey: key,
                    storedSignCount: UInt32(clamping: passkey.signCount), requireUserVerification: true)
            } catch {
                throw Failure(message: "The passkey could not be checked: \(error).", outcome: "refused")
            }
            switch try await store.recordPasskeyUse(
                id: passkey.id, signCount: Int64(assertion.signCount),
                backedUp: assertion.flags.contains(.backedUp), now: now)
            {
            case .recorded: break
            case .unknown: throw unknown
            case .counterNotIncreased:
                throw Failure(
                    message: "The passkey's signature counter did not increase: this may be a copy of it.",
                    outcome: "counter")
            }
            guard let status = try await store.userStatus(id: passkey.userID), status.disabledAt == nil else {
                throw Failure(message: "This account is disabled.", outcome: "disabled")
            }
            metrics.passkey(event: "sign_in", outcome: "success")
            audit.record(
                "sign_in", user: passkey.userID,
                fields: ["provider": "passkey", "passkey": String(passkey.id.prefix(16))])
            return (status.user, passkey)
        } catch let failure as Failure {
            metrics.passkey(event: "sign_in", outcome: failure.outcome)
            audit.record("sign_in", outcome: "failure", fields: ["provider": "passkey", "reason": failure.outcome])
            throw failure
        }
    }

    /// The prefix of a ticket's session that names a browser session (the account page's) rather than a CLI one.
    static let browserSessionPrefix = "browser:"

    /// Whether the session that asked for a passkey still stands: a CLI session (`broker passkey add`), or the
    /// browser session of the account page.
    func isLive(session id: String, of user: UserID) async throws -> Bool {
        guard id.hasPrefix(Self.browserSessionPrefix) else { return try await tokens.isLive(session: id, of: user) }
        let browser = id.dropFirst(Self.browserSessionPrefix.count)
        return try await store.browserSessions(user: user).contains {
            $0.id == browser && $0.revokedAt == nil && $0.expiresAt > now
        }
    }

    /// A registration for the user the ceremony was started for, while the session that asked is live.
    func register(ceremony sealed: String, credential text: String, name: String) async throws -> PasskeyRecord {
        do {
            guard let rp = relyingParty else { throw Failure(message: "Passkeys are off here.", outcome: "off") }
            let posted = try PostedCredential(text)
            let ceremony = try await open(sealed, expecting: false)
            let user: UserID
            switch ceremony.purpose {
            case .register(let owner, let session):
                guard try await isLive(session: session, of: owner) else {
                    throw Failure(
                        message: "The session that asked for this passkey has ended.", outcome: "session_ended")
                }
                user = owner
            case .recover(let owner, _):
                user = owner
            case .signIn:
                throw Failure(message: "This passkey prompt has expired. Try again.", outcome: "stale_ceremony")
            }
            guard let attestation = posted.attestationObject else {
                throw Failure(message: "The browser's answer could not be read. Try again.", outcome: "malformed")
            }
            let registration: WebAuthnRelyingParty.Registration
            do {
                registration = try rp.register(
                    clientDataJSON: posted.clientDataJSON, attestationObject: attestation,
                    challenge: ceremony.challenge, requireUserVerification: true)
            } catch {
                throw Failure(message: "The passkey could not be checked: \(error).", outcome: "refused")
            }
            guard registration.credentialID == posted.rawID else {
                throw Failure(message: "The browser's answer does not fit together. Try again.", outcome: "malformed")
            }
            if case .recover(_, let link) = ceremony.purpose {
                // The mailed link is spent (and every session ends) only now that a checked passkey replaces
                // the lost one: a mail scanner opening the link spends nothing.
                guard try await store.recoverWithPasskey(linkHash: link, user: user, now: now) else {
                    throw Failure(message: "This recovery link was already used or has expired.", outcome: "link_gone")
                }
                audit.record("account_recovered", user: user, fields: ["provider": "passkey"])
                logger.info("account recovered with a new passkey", metadata: ["broker.user": "\(user)"])
            }
            let chosen = Self.cleanName(name)
            let passkey = PasskeyRecord(
                id: posted.id, userID: user, publicKey: registration.publicKey.encoded,
                algorithm: registration.publicKey.algorithm.rawValue, signCount: Int64(registration.signCount),
                transports: posted.transports, backupEligible: registration.flags.contains(.backupEligible),
                backedUp: registration.flags.contains(.backedUp), aaguid: Self.uuid(registration.aaguid),
                name: chosen.isEmpty ? "Passkey added \(AuditTrail.timestamp(now).prefix(10))" : chosen,
                createdAt: now)
            do {
                try await store.addPasskey(passkey)
            } catch let error as StoreError where error.code == .conflict {
                throw Failure(message: "This passkey is already registered.", outcome: "duplicate")
            }
            metrics.passkey(event: "registration", outcome: "success")
            audit.record(
                "passkey_added", user: user,
                fields: ["passkey": String(passkey.id.prefix(16)), "algorithm": registration.publicKey.algorithm.name])
            return passkey
        } catch let failure as Failure {
            metrics.passkey(event: "registration", outcome: failure.outcome)
            audit.record("passkey_added", outcome: "failure", fields: ["reason": failure.outcome])
            throw failure
        }
    }

    /// The person's name for a passkey, as shown in the CLI and on pages: printable, spaces collapsed, at most
    /// 64 characters.
    static func cleanName(_ name: String) -> String {
        var kept = ""
        for scalar in name.unicodeScalars {
            let category = scalar.properties.generalCategory
            if category == .control || category == .format || category == .lineSeparator
                || category == .paragraphSeparator
            {
                kept.unicodeScalars.append(" ")
            } else {
                kept.unicodeScalars.append(scalar)
            }
        }
        return String(kept.split(separator: " ").joined(separator: " ").prefix(64))
    }

    /// An AAGUID as a UUID string.
    static func uuid(_ bytes: [UInt8]) -> String {
        let hex = bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
        guard hex.count == 32 else { return hex }
        let characters = Array(hex)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
