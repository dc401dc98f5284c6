import ArgumentParser
import BrokerClient
import BrokerConfiguration
import BrokerCore
import BrokerServer
import BrokerStore
import BrokerStores

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker {
    /// `broker client add|list|remove`: CI clients in the broker's store. Safe while `broker serve` runs:
    /// SQLite in WAL mode with a busy timeout, and the server reads clients from the store on each request.
    struct Client: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Manage the CI clients that may mint tokens.",
            subcommands: [Add.self, List.self, Remove.self, RegistrationToken.self]
        )

        /// Opens the store the configuration names.
        static func open(_ options: ServerStoreOptions) async throws -> (
            store: any Store, configuration: ServerConfiguration
        ) {
            let configuration: ServerConfiguration
            do {
                configuration = try options.loadConfiguration()
                try configuration.validate(source: options.config ?? "command line")
            } catch {
                throw CommandFailure("config: \(error)")
            }
            do {
                return (try await StoreOpener.open(configuration, logger: StoreOpener.quietLogger), configuration)
            } catch {
                throw CommandFailure("cannot open the broker's store: \(error)")
            }
        }

        /// The audit trail of an administrative command: the configured file (`server.audit_log`) and, with
        /// `server.audit_store`, the store; with the default (`stderr`), the command's own output says what
        /// happened and nothing more is written there. Callers ``AuditTrail/flush()`` before they exit.
        static func auditTrail(_ configuration: ServerConfiguration, store: (any Store)? = nil) -> AuditTrail? {
            var destination = AuditTrail.destination(configuration.auditLog)
            if case .standardError = destination { destination = .discard }
            let keeper = configuration.auditStore ? store : nil
            guard destination != .discard || keeper != nil else { return nil }
            do {
                return try AuditTrail(destination: destination, clock: SystemClock(), store: keeper)
            } catch {
                Console.warning("cannot write the audit log: \(error)")
                return nil
            }
        }

        /// Records one administrative event (``auditTrail(_:store:)``) and waits until it is stored.
        static func audit(
            _ configuration: ServerConfiguration, store: any Store, _ event: String, user: UserID? = nil,
            fields: [String: String]
        ) async {
            guard let trail = auditTrail(configuration, store: store) else { return }
            trail.record(event, user: user, fields: fields)
            await trail.flush()
        }

        /// The client-secret key, sealed in the store under the master key.
        static func secretHasher(_ configuration: ServerConfiguration, store: any Store) async throws
            -> ClientSecretHasher
        {
            do {
                let master = try await MasterKey.load(
                    configuration: configuration, environment: ProcessInfo.processInfo.environment, store: store)
                let vault = KeyVault(
                    store: store, master: master,
                    legacyDataDirectory: store.isShared ? nil : configuration.expandedDataDirectory)
                return ClientSecretHasher(
                    key: try await vault.secretKey("client-secrets", now: SystemClock().seconds()))
            } catch {
                throw CommandFailure("cannot open the client-secret key: \(error)")
            }
        }

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Register a CI client; prints its id and, once, its secret.",
                discussion: """
                    The store keeps only a keyed hash of the secret: copy it into your CI's secret store now.
                    With --trust-issuer the client may instead exchange OIDC tokens from that issuer whose
                    sub matches --trust-subject (the whole sub; * matches any run of characters, ? one
                    character) and whose aud contains --trust-audience (default broker):
                      broker client add deploy --scope deploy \\
                        --trust-issuer https://token.actions.githubusercontent.com \\
                        --trust-subject 'repo:acme/api:ref:refs/heads/main'
                    """
            )

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The client id: 1–64 of A–Z a–z 0–9 . _ -, starting with a letter or digit.")
            var name: String

            @Option(name: .long, help: ArgumentHelp("A scope the client may request; repeatable.", valueName: "S"))
            var scope: [String] = []

            @Option(
                name: .customLong("trust-issuer"),
                help: ArgumentHelp("Accept OIDC tokens from this issuer (https).", valueName: "URL"))
            var trustIssuer: String?

            @Option(
                name: .customLong("trust-subject"),
                help: ArgumentHelp("The glob the token's whole sub must match.", valueName: "GLOB"))
            var trustSubject: String?

            @Option(
                name: .customLong("trust-audience"),
                help: ArgumentHelp("The audience the token must carry (default broker).", valueName: "AUD"))
            var trustAudience: String?

            @Option(
                name: .customLong("trust-max-age"),
                help: ArgumentHelp(
                    "The oldest token accepted, in seconds since its iat (default 600).", valueName: "SECONDS"))
            var trustMaxAge: Int?

            @Flag(
                name: .customLong("with-secret"),
                help: "With --trust-issuer: also give the client a secret for client_credentials (off by default).")
            var withSecret = false

            @Option(
                name: .customLong("redirect-uri"),
                help: ArgumentHelp(
                    "Register an app (an OpenID Connect relying party) returning here; repeatable.", valueName: "URI"))
            var redirectURI: [String] = []

            @Flag(
                name: .customLong("public"), help: "An app without a secret (a native or browser app; PKCE required).")
            var isPublic = false

            @Flag(name: .customLong("first-party"), help: "An app of your own: its users are not asked to allow it.")
            var firstParty = false

            @Option(
                name: .customLong("post-logout-redirect-uri"),
                help: ArgumentHelp("Where the app may be sent after logout; repeatable.", valueName: "URI"))
            var postLogoutRedirectURI: [String] = []

            @Option(
                name: .customLong("backchannel-logout-uri"),
                help: ArgumentHelp("Where the broker posts logout tokens for the app.", valueName: "URI"))
            var backchannelLogoutURI: String?

            @Flag(
                name: .customLong("require-par"),
                help: "The app must push its authorization requests to /auth/par first (RFC 9126).")
            var requirePAR = false

            @Option(
                name: .customLong("id-token-alg"),
                help: ArgumentHelp("The app's id token signature: RS256 (default), ES256 or EdDSA.", valueName: "ALG"))
            var idTokenAlg: String?

            @Option(
                name: .customLong("jwks-uri"),
                help: ArgumentHelp(
                    "The app authenticates with private_key_jwt, its public keys published here (https).",
                    valueName: "URL"))
            var jwksURI: String?

            @Option(
                name: .customLong("jwks-file"),
                help: ArgumentHelp(
                    "The app authenticates with private_key_jwt, with the public keys of this JWK Set file.",
                    valueName: "FILE"))
            var jwksFile: String?

            @Flag(
                name: .long,
                help: "Give the app pairwise subjects: its users' sub is made for its redirect URIs' host alone.")
            var pairwise = false

            @Option(
                name: .customLong("userinfo-alg"),
                help: ArgumentHelp("Sign the app's userinfo answers: RS256, ES256 or EdDSA.", valueName: "ALG"))
            var userinfoAlg: String?

            @Flag(
                name: .customLong("require-mfa"),
                help: "Let users in only with two factors (a passkey, or a password and a code): acr 2.")
            var requireMFA = false

            @Flag(name: .long, help: "Print {\"client_id\", \"client_secret\"} (no client_secret without one).")
            var json = false

            /// An app rather than a CI client.
            var isApp: Bool { !redirectURI.isEmpty }

            func validate() throws {
                guard ClientRules.validName(name) else {
                    throw ValidationError(
                        "client name '\(name)' must be 1–64 of A–Z a–z 0–9 . _ -, starting with a letter or digit")
                }
                // RT3-10: the CLI's own client id marks the CLI's sessions (account tokens, the APIs' audience).
                guard name.lowercased() != AppRules.cliClientID else {
                    throw ValidationError("'\(name)' is the broker CLI's own client id and cannot be registered")
                }
                guard name.lowercased() != AppRules.accountClientID else {
                    throw ValidationError("'\(name)' is the account page's own client id and cannot be registered")
                }
                for item in scope where !ClientRules.validScope(item) {
                    throw ValidationError("--scope '\(item)' is not a scope token (no spaces, quotes or backslashes)")
                }
                let appOnly = [
                    isPublic ? "--public" : nil, firstParty ? "--first-party" : nil,
                    postLogoutRedirectURI.isEmpty ? nil : "--post-logout-redirect-uri",
                    backchannelLogoutURI.map { _ in "--backchannel-logout-uri" },
                    idTokenAlg.map { _ in "--id-token-alg" }, requirePAR ? "--require-par" : nil,
                    jwksURI.map { _ in "--jwks-uri" }, jwksFile.map { _ in "--jwks-file" },
                    pairwise ? "--pairwise" : nil, userinfoAlg.map { _ in "--userinfo-alg" },
                    requireMFA ? "--require-mfa" : nil,
                ].compactMap { $0 }
                if !isApp {
                    guard appOnly.isEmpty else {
                        throw ValidationError(
                            "\(appOnly.joined(separator: ", ")) describe an app: add --redirect-uri URI")
                    }
                } else {
                    if trustIssuer != nil || withSecret {
                        throw ValidationError(
                            "an app (--redirect-uri) does not exchange tokens: drop the --trust options")
                    }
                    for uri in redirectURI + postLogoutRedirectURI {
                        if let problem = AppRules.registrationProblem(uri, isPublic: isPublic) {
                            throw ValidationError(problem)
                        }
                    }
                    if let backchannelLogoutURI,
                        AppRules.registrationProblem(backchannelLogoutURI, isPublic: false) != nil
                            || !backchannelLogoutURI.lowercased().hasPrefix("http")
                    {
                        throw ValidationError("--backchannel-logout-uri must be an https URL (http on loopback)")
                    }
                    if let idTokenAlg, !AppRules.idTokenAlgorithms.contains(idTokenAlg) {
                        throw ValidationError("--id-token-alg must be RS256, ES256 or EdDSA")
                    }
                    if let userinfoAlg, !AppRules.idTokenAlgorithms.contains(userinfoAlg) {
                        throw ValidationError("--userinfo-alg must be RS256, ES256 or EdDSA")
                    }
                    if jwksURI != nil || jwksFile != nil {
                        guard !isPublic else {
                            throw ValidationError(
                                "--jwks-uri and --jwks-file are for a confidential app: drop --public")
                        }
                        guard jwksURI == nil || jwksFile == nil else {
                            throw ValidationError("give --jwks-uri or --jwks-file, not both")
                        }
                    }
                    if let jwksURI, let problem = AppRules.jwksURIProblem(jwksURI) {
                        throw ValidationError("--jwks-uri \(problem)")
                    }
                    if pairwise, case .failure(let problem) = AppRules.sector(of: redirectURI) {
                        throw ValidationError("--pairwise: \(problem)")
                    }
                    return
                }
                if withSecret && trustIssuer == nil {
                    throw ValidationError("--with-secret is for --trust-issuer clients; other clients always get one")
                }
                if trustIssuer == nil {
                    let orphans = [
                        trustSubject.map { _ in "--trust-subject" }, trustAudience.map { _ in "--trust-audience" },
                        trustMaxAge.map { _ in "--trust-max-age" },
                    ].compactMap { $0 }
                    guard orphans.isEmpty else {
                        throw ValidationError("\(orphans.joined(separator: ", ")) need --trust-issuer")
                    }
                    return
                }
                if let trustIssuer, let problem = ClientRules.issuerProblem(trustIssuer) {
                    throw ValidationError("--trust-issuer \(trustIssuer) \(problem)")
                }
                guard let trustSubject, !trustSubject.isEmpty else {
                    throw ValidationError(
                        "--trust-issuer needs --trust-subject GLOB: which subjects of that issuer may mint "
                            + "(e.g. 'repo:acme/api:ref:refs/heads/main')")
                }
                guard trustSubject != "*" else {
                    throw ValidationError(
                        "--trust-subject '*' would let every job of every project on that issuer mint tokens; "
                            + "name the project")
                }
                if let trustAudience, trustAudience.isEmpty || trustAudience.utf8.count > 256 {
                    throw ValidationError("--trust-audience must be 1–256 characters")
                }
                if let trustMaxAge, !(5...86_400).contains(trustMaxAge) {
                    throw ValidationError("--trust-max-age must be between 5 and 86400 seconds")
                }
            }

            func run() async throws {
                let (store, configuration) = try await Client.open(self.store)
                let hasher = try await Client.secretHasher(configuration, store: store)
                if isApp { return try await addApp(store: store, configuration: configuration, hasher: hasher) }
                // A client that trusts an issuer exchanges that issuer's tokens: it gets a secret only when
                // asked, so that "token exchange only" really is (a printed secret would mint on its own).
                let secret = trustIssuer == nil || withSecret ? try ClientSecretHasher.newSecret() : nil
                var trust: TrustPolicy?
                if let trustIssuer, let trustSubject {
                    trust = TrustPolicy(
                        issuer: trustIssuer,
                        subjectPattern: trustSubject,
                        audience: trustAudience ?? "broker",
                        maxAge: Int64(trustMaxAge ?? 600)
                    )
                }
                var unique: [String] = []
                for item in scope where !unique.contains(item) { unique.append(item) }
                let record = ClientRecord(
                    name: name,
                    secretHash: secret.map(hasher.hash),
                    scopes: unique,
                    trust: trust,
                    createdAt: SystemClock().seconds()
                )
                do {
                    try await store.createClient(record)
                } catch let error as StoreError where error.code == .conflict {
                    throw CommandFailure("a client named \(name) already exists (broker client remove \(name) first)")
                } catch {
                    throw CommandFailure("cannot add the client: \(error)")
                }
                await Client.audit(
                    configuration, store: store, "client_added",
                    fields: ["client": name, "via": "cli", "kind": trustIssuer == nil ? "secret" : "token_exchange"])
                printIssued(
                    secret: secret,
                    withoutSecret: "no secret: this client mints only by exchanging tokens from \(trustIssuer ?? "")")
            }

            /// `--redirect-uri`: an app (relying party) in the store; a secret unless `--public`, shown once.
            func addApp(store: any Store, configuration: ServerConfiguration, hasher: ClientSecretHasher) async throws {
                // An app's tokens carry its client id as `aud` (RT3-4): one named after the APIs' audience would
                // be given tokens every API takes.
                if AppRules.isReserved(name, apiAudience: configuration.audience) {
                    throw CommandFailure(
                        "'\(name)' is the audience of this broker's API tokens (server.audience); an app cannot "
                            + "be registered under it: choose another client id")
                }
                if (try? await store.client(name: name)) != nil {
                    throw CommandFailure("a client named \(name) already exists (broker client remove \(name) first)")
                }
                // RS256 has a key of its own; another algorithm is the key ring's, so it must be the ring's current
                // one, or the app's token requests would fail.
                for (flag, alg) in [("--id-token-alg", idTokenAlg), ("--userinfo-alg", userinfoAlg)] {
                    guard let alg, alg != "RS256" else { continue }
                    let current = try? await store.signingKeys().first { $0.retiredAt == nil }?.algorithm
                    if let current, current != alg {
                        throw CommandFailure(
                            "\(flag) \(alg): this broker signs with \(current) (and RS256 for id tokens); "
                                + "choose RS256 or \(current)")
                    }
                }
                var jwks: String?
                if let jwksFile {
                    let text: String
                    do {
                        text = try String(contentsOfFile: jwksFile, encoding: .utf8)
                    } catch {
                        throw CommandFailure("cannot read --jwks-file \(jwksFile): \(error)")
                    }
                    if let problem = AppRules.jwksProblem(text) {
                        throw CommandFailure("--jwks-file \(jwksFile): \(problem)")
                    }
                    jwks = JSONValue.parse(text.utf8)?.serialized()
                }
                let withKeys = jwks != nil || jwksURI != nil
                // Derived, so that the app may also authenticate with client_secret_jwt (the store keeps a salt and
                // a hash, never the secret).
                let issued = isPublic || withKeys ? nil : try hasher.newAppSecret(clientID: name)
                let secret = issued?.secret
                var unique: [String] = []
                for item in scope where !unique.contains(item) && !AppRules.standardScopes.contains(item) {
                    unique.append(item)
                }
                let app = AppRecord(
                    clientID: name, secretHash: issued?.stored, redirectURIs: redirectURI,
                    postLogoutRedirectURIs: postLogoutRedirectURI, backchannelLogoutURI: backchannelLogoutURI,
                    firstParty: firstParty, idTokenAlgorithm: idTokenAlg ?? "RS256", scopes: unique,
                    createdAt: SystemClock().seconds(), requirePAR: requirePAR, jwks: jwks, jwksURI: jwksURI,
                    pairwiseSector: pairwise ? try? AppRules.sector(of: redirectURI).get() : nil,
                    userinfoAlgorithm: userinfoAlg, requireMFA: requireMFA)
                do {
                    try await store.createApp(app)
                } catch let error as StoreError where error.code == .conflict {
                    throw CommandFailure("a client named \(name) already exists (broker client remove \(name) first)")
                } catch {
                    throw CommandFailure("cannot add the app: \(error)")
                }
                await Client.audit(
                    configuration, store: store, "client_added",
                    fields: [
                        "client": name, "via": "cli", "kind": isPublic ? "public_app" : withKeys ? "key_app" : "app",
                    ])
                printIssued(
                    secret: secret,
                    withoutSecret: withKeys
                        ? "no secret: the app authenticates with private_key_jwt, signed by its own keys"
                        : "a public app: no secret, PKCE required")
            }

            /// The client id and, once, its secret (`--json`: `{"client_id", "client_secret"}`), and a note on it.
            func printIssued(secret: Secret?, withoutSecret note: String) {
                if json {
                    var document: [String: JSONValue] = ["client_id": .string(name)]
                    if let secret { document["client_secret"] = .string(secret.exposed) }
                    Console.out(JSONValue.object(document).serialized())
                } else {
                    Console.out("client_id: \(name)")
                    if let secret { Console.out("client_secret: \(secret.exposed)") }
                }
                Console.note(
                    secret == nil ? note : "the secret is shown only this once; the broker keeps only a hash of it")
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List the CI clients (never their secrets).")

            @OptionGroup var store: ServerStoreOptions

            @Flag(name: .long, help: "Print {\"clients\": [...]}.")
            var json = false

            func run() async throws {
                let (store, _) = try await Client.open(self.store)
                let clients: [ClientRecord]
                let apps: [AppRecord]
                do {
                    clients = try await store.clients()
                    apps = try await store.apps()
                } catch {
                    throw CommandFailure("cannot read the clients: \(error)")
                }
                if json {
                    let list: [JSONValue] = clients.map { client in
                        var entry: [String: JSONValue] = [
                            "client_id": .string(client.name), "kind": "ci",
                            "grants": .array(
                                (client.secretHash.map { $0.isEmpty } ?? true ? [] : ["client_credentials"])
                                    + (client.trust == nil ? [] : ["urn:ietf:params:oauth:grant-type:token-exchange"])),
                            "scopes": .array(client.scopes.map(JSONValue.string)),
                            "created_at": .int(client.createdAt),
                        ]
                        if let trust = client.trust {
                            entry["trust"] = .object([
                                "issuer": .string(trust.issuer),
                                "subject": .string(trust.subjectPattern),
                                "audience": .string(trust.audience),
                                "max_age": .int(trust.maxAge),
                            ])
                        }
                        return .object(entry)
                    }
                    let appList: [JSONValue] = apps.map { app in
                        var entry: [String: JSONValue] = [
                            "client_id": .string(app.clientID), "kind": app.isPublic ? "public_app" : "app",
                            "grants": ["authorization_code", "refresh_token"],
                            "redirect_uris": .array(app.redirectURIs.map(JSONValue.string)),
                            "post_logout_redirect_uris": .array(app.postLogoutRedirectURIs.map(JSONValue.string)),
                            "first_party": .bool(app.firstParty), "id_token_alg": .string(app.idTokenAlgorithm),
                            "scopes": .array((AppRules.standardScopes + app.scopes).map(JSONValue.string)),
                            "created_at": .int(app.createdAt), "require_par": .bool(app.requirePAR),
                        ]
                        if let uri = app.backchannelLogoutURI { entry["backchannel_logout_uri"] = .string(uri) }
                        entry["token_endpoint_auth_method"] =
                            app.isPublic
                            ? "none" : app.authenticatesWithKeys ? "private_key_jwt" : "client_secret_basic"
                        if let uri = app.jwksURI { entry["jwks_uri"] = .string(uri) }
                        entry["subject_type"] = app.pairwiseSector == nil ? "public" : "pairwise"
                        entry["require_mfa"] = .bool(app.requireMFA)
                        if let registration = app.registration {
                            var registered: [String: JSONValue] = ["mode": .string(registration.mode)]
                            if let name = registration.clientName { registered["client_name"] = .string(name) }
                            entry["registered"] = .object(registered)
                        }
                        return .object(entry)
                    }
                    Console.out(JSONValue.object(["clients": .array(list + appList)]).serialized())
                    return
                }
                for app in apps {
                    Console.out(
                        app.clientID + "\t" + (app.isPublic ? "public app" : "app") + "\tredirect_uris="
                            + app.redirectURIs.joined(separator: ",") + (app.firstParty ? "\tfirst-party" : "")
                            + (app.authenticatesWithKeys ? "\tprivate_key_jwt" : "")
                            + (app.registration.map { "\tregistered itself (\($0.mode))" } ?? ""))
                }
                if clients.isEmpty && apps.isEmpty {
                    Console.note("no clients yet: broker client add NAME [--redirect-uri URI]")
                    return
                }
                for client in clients {
                    var line = client.name
                    line += "\tscopes=" + (client.scopes.isEmpty ? "-" : client.scopes.joined(separator: ","))
                    if let trust = client.trust {
                        line += "\ttrust=\(trust.issuer) sub=\(trust.subjectPattern) aud=\(trust.audience)"
                    }
                    Console.out(line)
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Remove a CI client: it can mint no more, and /auth/me refuses its tokens at once."
            )

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The client id.")
            var name: String

            func run() async throws {
                let (store, configuration) = try await Client.open(self.store)
                let removed: Bool
                var endedSessions: [String]?
                do {
                    removed = try await store.deleteClient(name: name)
                    if !removed {
                        endedSessions = try await store.deleteApp(clientID: name, now: SystemClock().seconds())
                    }
                } catch {
                    throw CommandFailure("cannot remove the client: \(error)")
                }
                guard removed || endedSessions != nil else { throw CommandFailure("no client named \(name)") }
                if let endedSessions {
                    // An app: the sessions it started end with it.
                    await Client.audit(
                        configuration, store: store, "client_removed",
                        fields: [
                            "client": name, "via": "cli", "kind": "app", "sessions_ended": "\(endedSessions.count)",
                        ])
                    Console.note(
                        "removed app \(name); ended \(endedSessions.count) session\(endedSessions.count == 1 ? "" : "s") it started"
                    )
                    return
                }
                await Client.audit(
                    configuration, store: store, "client_removed", fields: ["client": name, "via": "cli"])
                Console.note("removed client \(name)")
            }
        }
    }
}
