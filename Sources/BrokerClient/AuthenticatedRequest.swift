package import BrokerCore
package import BrokerCredentials
import BrokerCrypto
package import BrokerHTTP
import BrokerSystem

/// Where one attempt of an ``AuthenticatedRequest`` shows what came back (`broker request` writes the body to
/// stdout as it arrives and, with `--include`, the head to stderr). One per attempt; the request sets
/// ``carriesToken`` before each exchange so that a 401 to the token, answered by a retry, is held back.
package protocol ResponseOutput: HTTPBodySink {
    /// The exchange about to be sent carries the token.
    var carriesToken: Bool { get set }
    /// The head of a response whose body was not streamed (no body, a followed redirect, a held-back 401).
    func showHead(of response: HTTPClientResponse)
    /// The body of a response that was not streamed; `false` when it could not be written.
    func writeBody(_ bytes: [UInt8]) -> Bool
}

/// One request with the session's token and the cycle classic API clients are built around: attach the token;
/// on a 401 renew the session once for every process refused at the same moment (or, where a person can be
/// asked, sign in again) and send the same bytes once more. The token and the caller's headers go only to the
/// target's origin, also across redirects.
package struct AuthenticatedRequest: Sendable {
    package var settings: ClientSettings
    package var target: APIURL
    /// The URL as given (sent as it is; ``target`` is its parsed form).
    package var url: String
    package var method: String
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]?
    /// Follow redirects (`--location`), at most ``maxRedirects``.
    package var followRedirects = false
    package var maxRedirects = 10
    package var timeout: Duration = .seconds(300)
    package var maxResponseBytes = 16 * 1024 * 1024
    package var transport: any HTTPTransport = HTTPClient.shared
    package var sessions: SessionService
    package var clock: any WallClock = SystemClock()
    /// A new sign-in when the session is gone or the broker refused its refresh: `nil` where no person can be
    /// asked (the failure is then the session's, "authentication required"). Given the provider of the session
    /// that ended (`nil` when there was none).
    package var signIn: (@Sendable (ProviderID?) async throws -> Void)?
    /// A sign-in at the level an API asked for in an RFC 9470 challenge, given the session's provider: `nil`
    /// where no person can be asked (the request then ends with ``Failure/stepUpRequired(origin:need:provider:)``).
    package var stepUp: (@Sendable (StepUpChallenge, ProviderID?) async throws -> Void)?
    /// Told when a session ended and a sign-in follows.
    package var notice: @Sendable (String) -> Void = { _ in }
    /// Makes the output of one attempt; `final` is the last attempt (its 401 is shown, not held back).
    package var output: @Sendable (_ final: Bool) -> any ResponseOutput
    /// The API's resource indicator (RFC 8707): the token sent is one the broker issued for it (its `aud`), not the
    /// session's own. From the `api_urls` entry covering the target (`"resource"`), or learnt from the API's
    /// protected-resource metadata (RFC 9728) when a 401 points at it.
    package var resource: String?
    /// How a protected-resource metadata document is fetched (no token goes with it).
    package var metadataTimeout: Duration = .seconds(10)

    package init(
        settings: ClientSettings, target: APIURL, url: String, method: String,
        headers: [(name: String, value: String)] = [],
        body: [UInt8]? = nil, sessions: SessionService? = nil,
        output: @escaping @Sendable (_ final: Bool) -> any ResponseOutput
    ) {
        self.settings = settings
        self.target = target
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.sessions = sessions ?? SessionService(cache: settings.credentials(), api: settings.api, key: settings.key)
        self.output = output
        resource = settings.apiURLs?.first { $0.covers(target) }?.resource
    }

    /// What the request ended with.
    package struct Outcome: Sendable {
        package var response: HTTPClientResponse
        package var finalURL: APIURL
        /// The final response is a 401 from a URL the token was sent to.
        package var refusedToken: Bool
        /// The token went with a DPoP proof.
        package var sentProof = false

        /// A refusal that a proof (or a proof with the nonce the API just gave) may answer (RFC 9449 §7.1, §9):
        /// a 401 whose `WWW-Authenticate` offers the DPoP scheme, to a request that carried no proof, or whose
        /// proof lacked the nonce the API now asks for.
        var asksForProof: Bool {
            guard refusedToken, let challenge = response.header("WWW-Authenticate") else { return false }
            let challenges = AuthenticatedRequest.schemes(of: challenge)
            guard challenges.contains("dpop") else { return false }
            if !sentProof { return true }
            return challenge.contains("use_dpop_nonce") && response.header("DPoP-Nonce") != nil
        }
    }

    /// The auth-schemes a `WWW-Authenticate` value names, lowercased (RFC 9110 §11.6.1): each challenge starts
    /// with a token that is not followed by `=`.
    static func schemes(of header: String) -> Set<String> {
        var found: Set<String> = []
        for part in header.split(separator: ",") {
            let trimmed = part.drop { $0 == " " || $0 == "\t" }
            let word = trimmed.prefix { $0 != " " && $0 != "\t" && $0 != "=" }
            guard !word.isEmpty else { continue }
            let after = trimmed.dropFirst(word.count).drop { $0 == " " || $0 == "\t" }
            if after.first != "=" { found.insert(word.lowercased()) }
        }
        return found
    }

    /// Why the request could not be answered.
    package enum Failure: Error, CustomStringConvertible, Sendable {
        /// No usable session and none could be made: the session's own error.
        case session(SessionError)
        /// The API refused a token the broker had just issued (after a refresh or a new sign-in).
        case refusedAfterRenewal(origin: String, signedIn: Bool, challenge: String?)
        /// The API asked for a stronger or more recent sign-in (RFC 9470) and no person could be asked.
        case stepUpRequired(origin: String, need: StepUpChallenge, provider: ProviderID?)
        case transport(method: String, origin: String, reason: String)
        case tooManyRedirects(limit: Int, last: String)
        case unfollowableRedirect(String)
        /// The session is DPoP-bound and its key cannot be used.
        case proofKey(String)
        case signInLock(String)
        /// The sign-in itself failed; its own error, reported as it is.
        case signInFailed(any Error)
        case output

        package var description: String {
            switch self {
            case .session(let error): error.description
            case .refusedAfterRenewal(let origin, let signedIn, let challenge):
                "\(origin) refused a token the broker just issued" + (signedIn ? " after a new sign-in" : "")
                    + (challenge.map { " (\($0))" } ?? "")
            case .stepUpRequired(let origin, let need, let provider):
                "\(origin) asks for \(need.wanted): \(need.command(provider: provider)), then run this again"
                    + (need.description.map { " (it said: \($0))" } ?? "")
            case .transport(let method, let origin, let reason): "\(method) \(origin): \(reason)"
            case .tooManyRedirects(let limit, let last): "more than \(limit) redirects, the last to \(last)"
            case .unfollowableRedirect(let location): "refusing to follow a redirect to \(location)"
            case .proofKey(let reason): reason
            case .signInLock(let reason): reason
            case .signInFailed(let error): "\(error)"
            case .output: "cannot write the response to stdout"
            }
        }

        /// The contract's exit code: a session that could not be restored is "authentication required".
        package var status: ExitStatus {
            switch self {
            case .session(let error): ExitStatus.of(error)
            case .refusedAfterRenewal, .stepUpRequired: .authenticationRequired
            default: .failure
            }
        }
    }

    /// Sends the request: with the cached (or refreshed) session, and once more after a 401 with a renewed one.
    /// A bound token goes with a DPoP proof to the session's own broker and to APIs marked `"dpop": true`; an
    /// API that answers 401 with a `WWW-Authenticate: DPoP` challenge is asked once more with a proof (and the
    /// `DPoP-Nonce` it gave) before the session is renewed (RFC 9449 §7.1).
    package func send(minValid: Int64) async throws(Failure) -> Outcome {
        // The last `DPoP-Nonce` the API gave (RFC 9449 §9): the retry after a 401 uses it.
        var nonce: String?
        var challenged = false
        var session = try await firstSession(minValid: minValid)
        var outcome = try await attemptAnsweringProof(
            token: session.accessToken, nonce: &nonce, challenged: &challenged)
        guard outcome.refusedToken else { return outcome }
        if let need = StepUpChallenge(outcome.response) {
            return try await stepUpAndRetry(need, after: session, nonce: &nonce, challenged: challenged)
        }
        var request = self
        // RFC 9728 §5.1: a 401 may name the API's metadata, which names its authorization servers and its resource
        // indicator. When this profile's broker is one of them and the resource is not the one the token was for,
        // a token for that resource is asked for and the request sent once more with it.
        if let learnt = try await learntResource(from: outcome), learnt != resource {
            request.resource = learnt
            session = try await request.firstSession(minValid: minValid)
            outcome = try await request.attemptAnsweringProof(
                token: session.accessToken, nonce: &nonce, challenged: &challenged)
            guard outcome.refusedToken else { return outcome }
            if let need = StepUpChallenge(outcome.response) {
                return try await request.stepUpAndRetry(need, after: session, nonce: &nonce, challenged: challenged)
            }
        }
        return try await request.renewAndRetry(after: session, nonce: &nonce, challenged: challenged)
    }

    /// One attempt and, when the API answers with a DPoP challenge a bound token can meet and none was met yet, one
    /// more with a proof (RFC 9449 §7.1); `challenged` says from then on that the API wants proofs.
    private func attemptAnsweringProof(token: Secret, nonce: inout String?, challenged: inout Bool)
        async throws(Failure) -> Outcome
    {
        let outcome = try await attempt(token: token, final: false, nonce: &nonce, challenged: challenged)
        guard outcome.asksForProof, isDPoPBound(token), !challenged else { return outcome }
        challenged = true
        return try await attempt(token: token, final: false, nonce: &nonce, challenged: challenged)
    }

    /// After a refused attempt: the session (or the resource's token) renewed, and the last attempt.
    private func renewAndRetry(after session: Session, nonce: inout String?, challenged: Bool) async throws(Failure)
        -> Outcome
    {
        let renewed = try await recover(after: session)
        let outcome = try await attempt(
            token: renewed.session.accessToken, final: true, nonce: &nonce, challenged: challenged)
        if outcome.refusedToken {
            throw .refusedAfterRenewal(
                origin: target.origin, signedIn: renewed.signedIn,
                challenge: outcome.response.header("WWW-Authenticate"))
        }
        return outcome
    }

    /// After an RFC 9470 challenge: a sign-in at the level asked for (where a person can be asked), and the last
    /// attempt with its token. A refresh would not do: it keeps the sign-in the session was started with.
    private func stepUpAndRetry(_ need: StepUpChallenge, after session: Session, nonce: inout String?, challenged: Bool)
        async throws(Failure) -> Outcome
    {
        guard let stepUp else {
            throw .stepUpRequired(origin: target.origin, need: need, provider: session.provider)
        }
        notice("\(target.origin) asks for \(need.wanted)" + (need.description.map { ": \($0)" } ?? ""))
        let provider = session.provider
        let signedIn = try await underSignInLock(takingCached: false, rejected: nil) {
            try await stepUp(need, provider)
        }
        let renewed = try await forResource(signedIn, minValid: 0)
        let outcome = try await attempt(token: renewed.accessToken, final: true, nonce: &nonce, challenged: challenged)
        if outcome.refusedToken {
            throw .refusedAfterRenewal(
                origin: target.origin, signedIn: true, challenge: outcome.response.header("WWW-Authenticate"))
        }
        return outcome
    }

    /// The session to start with: cached or refreshed; without one, a sign-in where a person can be asked.
    func firstSession(minValid: Int64) async throws(Failure) -> Session {
        do {
            return try await currentSession(minValid: minValid)
        } catch {
            switch error {
            case .signedOut, .rejected:
                guard signIn != nil else { throw .session(error) }
                notice(error.description)
                return try await forResource(try await signInAgain(provider: nil, rejected: nil), minValid: minValid)
            default:
                throw .session(error)
            }
        }
    }

    /// After a 401: a renewed session, else (the broker refused the refresh) a new sign-in where possible.
    func recover(after session: Session) async throws(Failure) -> (session: Session, signedIn: Bool) {
        do {
            if let resource {
                return (try await sessions.renewResource(resource, rejecting: session.accessToken), false)
            }
            return (try await sessions.renew(rejecting: session.accessToken), false)
        } catch {
            switch error {
            case .signedOut, .rejected:
                guard signIn != nil else { throw .session(error) }
                notice("the session ended: \(error)")
                let signedIn = try await signInAgain(provider: session.provider, rejected: session.accessToken)
                return (try await forResource(signedIn, minValid: 0), true)
            default:
                throw .session(error)
            }
        }
    }

    /// A new sign-in, once for everyone: under `sign-in.lock` in the client's folder a session that appeared
    /// while this process waited (another one signed in) is taken instead.
    func signInAgain(provider: ProviderID?, rejected: Secret?) async throws(Failure) -> Session {
        guard let signIn else { throw .session(.signedOut(settings.key)) }
        return try await underSignInLock(takingCached: true, rejected: rejected) { try await signIn(provider) }
    }

    /// `signIn` under `sign-in.lock`, and the session it cached. `takingCached`: a session another process cached
    /// meanwhile (any but the `rejected` one) is taken instead of signing in.
    func underSignInLock(takingCached: Bool, rejected: Secret?, _ signIn: () async throws -> Void)
        async throws(Failure) -> Session
    {
        let lock: FileLock
        do {
            try PosixFile.ensurePrivateDirectory(settings.home)
            lock = try FileLock(path: settings.home + "/sign-in.lock")
        } catch {
            throw .signInLock("cannot lock \(settings.home)/sign-in.lock: \(error.reason)")
        }
        defer { lock.unlock() }
        if takingCached, let fresh = try? sessions.cachedSession(minValid: 0), fresh.accessToken != rejected {
            return fresh
        }
        do {
            try await signIn()
        } catch let failure as Failure {
            throw failure
        } catch let error as SessionError {
            throw .session(error)
        } catch {
            // The sign-in reported its own failure (a CLI value); carried through as it is.
            throw .signInFailed(error)
        }
        let signedIn: Session?
        do {
            signedIn = try sessions.cachedSession(minValid: 0)
        } catch {
            throw .session(error)
        }
        guard let signedIn else { throw .session(.signedOut(settings.key)) }
        return signedIn
    }

    /// One attempt: the request and, when following redirects, its redirects. The token goes to the target's
    /// origin only, as do the caller's headers (a cookie or an API key in `-H` does not follow a redirect to
    /// another server: attack review RT2-12).
    func attempt(token: Secret, final: Bool, nonce: inout String?, challenged: Bool = false) async throws(Failure)
        -> Outcome
    {
        let sink = output(final)
        var current = url
        var currentURL = target
        var currentMethod = method
        var currentBody = body
        var hops = 0
        while true {
            let sameOrigin = currentURL.origin == target.origin
            var request = HTTPClientRequest(
                method: currentMethod, url: current, headers: sameOrigin ? headers : [],
                body: currentBody)
            let carriesToken = sameOrigin && settings.refusal(toSendTokenTo: currentURL) == nil
            var sentProof = false
            if carriesToken {
                // The broker itself, an API marked `"dpop": true` in api_urls, or one that challenged for a proof
                // gets a bound token as DPoP with a proof by the profile's key; anything else gets it as Bearer.
                if let key = try proofKey(for: currentURL, token: token, challenged: challenged) {
                    sentProof = true
                    let proof: String
                    do {
                        proof = try DPoPProof.make(
                            key: key, method: currentMethod, url: current,
                            accessToken: token.exposed, nonce: nonce, now: clock.seconds())
                    } catch {
                        throw .proofKey("cannot sign a DPoP proof: \(error)")
                    }
                    request.headers.append((name: "Authorization", value: "DPoP " + token.exposed))
                    request.headers.append((name: "DPoP", value: proof))
                } else {
                    request.headers.append((name: "Authorization", value: "Bearer " + token.exposed))
                }
            }
            request.timeout = timeout
            request.maxResponseBytes = maxResponseBytes
            request.sink = sink
            sink.carriesToken = carriesToken
            let response: HTTPClientResponse
            do {
                response = try await transport.send(request)
            } catch {
                throw .transport(method: currentMethod, origin: currentURL.origin, reason: "\(error)")
            }
            if !response.streamed {
                sink.showHead(of: response)
            }
            if followRedirects, [301, 302, 303, 307, 308].contains(response.status),
                let next = response.redirectURL
            {
                hops += 1
                guard hops <= maxRedirects else { throw .tooManyRedirects(limit: maxRedirects, last: next) }
                guard let nextURL = APIURL(next) else { throw .unfollowableRedirect(next) }
                if response.status == 303
                    || ((response.status == 301 || response.status == 302) && currentMethod == "POST")
                {
                    if currentMethod != "HEAD" { currentMethod = "GET" }
                    currentBody = nil
                }
                current = next
                currentURL = nextURL
                continue
            }
            if let given = response.header("DPoP-Nonce") {
                nonce = given
            }
            let refused = response.status == 401 && carriesToken
            if !response.streamed && !(refused && !final) {
                guard sink.writeBody(response.body) else { throw .output }
            }
            return Outcome(response: response, finalURL: currentURL, refusedToken: refused, sentProof: sentProof)
        }
    }

    /// The profile's DPoP key when `token` is bound and `url` is the session's own broker (whose endpoints check
    /// the proof of a bound token), an API marked DPoP-capable, or one that `challenged` for a proof; `nil` for
    /// Bearer.
    func proofKey(for url: APIURL, token: Secret, challenged: Bool = false) throws(Failure) -> AsymmetricKey? {
        let marked = settings.apiURLs?.first(where: { $0.covers(url) })?.dpop == true
        guard marked || challenged || isOwnBroker(url), isDPoPBound(token) else { return nil }
        let key: AsymmetricKey?
        do {
            key = try settings.dpopKeys.load(settings.key)
        } catch {
            throw .proofKey("\(error)")
        }
        guard let key else {
            throw .proofKey(
                "the session is bound to a DPoP key that is gone (\(settings.dpopKeys.location(for: settings.key))): "
                    + "broker login again")
        }
        return key
    }
}

extension AuthenticatedRequest {
    /// The session's token, or the resource's (``resource``), valid for `minValid` seconds.
    func currentSession(minValid: Int64) async throws(SessionError) -> Session {
        guard let resource else { return try await sessions.validSession(minValid: minValid) }
        return try await sessions.resourceSession(resource, minValid: minValid)
    }

    /// After a new sign-in: the resource's token from the new session (the session itself without a resource).
    func forResource(_ signedIn: Session, minValid: Int64) async throws(Failure) -> Session {
        guard resource != nil else { return signedIn }
        do {
            return try await currentSession(minValid: minValid)
        } catch {
            throw .session(error)
        }
    }

    /// The resource indicator a refusal's protected-resource metadata names (RFC 9728 §5.1), when the API may be
    /// given a token for it: the `resource_metadata` URL in `WWW-Authenticate` is https (or http on this machine),
    /// the document is JSON within 64 KiB, its `resource` lies over the target (same origin, a path at or above
    /// it: an API cannot ask for another's token), and its `authorization_servers` name this profile's broker.
    /// Anything else is `nil`, with a notice saying why: the refusal then stands as it is.
    func learntResource(from outcome: Outcome) async throws(Failure) -> String? {
        guard let challenge = outcome.response.header("WWW-Authenticate"),
            let location = Self.parameter("resource_metadata", in: challenge)
        else { return nil }
        guard let metadataURL = APIURL(location), metadataURL.carriesTokensSafely, !location.contains("#") else {
            notice("ignoring resource_metadata \(location.prefix(200)): not an https URL")
            return nil
        }
        var fetch = HTTPClientRequest(method: "GET", url: location, headers: [("Accept", "application/json")])
        fetch.timeout = metadataTimeout
        fetch.maxResponseBytes = 64 * 1024
        let response: HTTPClientResponse
        do {
            response = try await transport.send(fetch)
        } catch {
            notice("cannot read the API's metadata at \(metadataURL): \(error)")
            return nil
        }
        guard response.status == 200, case .object(let document)? = JSONValue.parse(response.body) else {
            notice("the API's metadata at \(metadataURL) is not a JSON document (HTTP \(response.status))")
            return nil
        }
        guard let named = document["resource"]?.stringValue, ClientSettings.isResourceIndicator(named),
            let resourceURL = APIURL(named), resourceURL.covers(outcome.finalURL),
            outcome.finalURL.origin == target.origin
        else {
            notice("the API's metadata at \(metadataURL) names a resource that is not this API; not following it")
            return nil
        }
        let servers = document["authorization_servers"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let broker = ClientSettings.normalize(settings.key.brokerURL)
        guard servers.contains(where: { ClientSettings.normalize($0) == broker }) else {
            notice(
                "the API at \(target.origin) takes tokens from \(servers.prefix(3).joined(separator: ", ")), "
                    + "not from \(settings.key.brokerURL)")
            return nil
        }
        return named
    }

    /// The value of `name` in a `WWW-Authenticate` value (RFC 9110 §11.2: `name="quoted"` or `name=token`).
    package static func parameter(_ name: String, in header: String) -> String? {
        let text = Array(header.utf8)
        let wanted = Array((name + "=").utf8)
        var index = 0
        while index + wanted.count <= text.count {
            let before: UInt8? = index == 0 ? nil : text[index - 1]
            guard text[index..<(index + wanted.count)].elementsEqual(wanted),
                before == nil || before == UInt8(ascii: " ") || before == UInt8(ascii: ",")
                    || before == UInt8(ascii: "\t")
            else {
                index += 1
                continue
            }
            var position = index + wanted.count
            var value: [UInt8] = []
            if position < text.count, text[position] == UInt8(ascii: "\"") {
                position += 1
                while position < text.count {
                    let byte = text[position]
                    if byte == UInt8(ascii: "\\"), position + 1 < text.count {
                        value.append(text[position + 1])
                        position += 2
                    } else if byte == UInt8(ascii: "\"") {
                        return String(decoding: value, as: UTF8.self)
                    } else {
                        value.append(byte)
                        position += 1
                    }
                }
                return nil
            }
            while position < text.count,
                ![UInt8(ascii: ","), UInt8(ascii: " "), UInt8(ascii: "\t")].contains(text[position])
            {
                value.append(text[position])
                position += 1
            }
            return value.isEmpty ? nil : String(decoding: value, as: UTF8.self)
        }
        return nil
    }

    /// Whether `url` is on the session's own broker (the origin of its `broker_url`).
    func isOwnBroker(_ url: APIURL) -> Bool {
        APIURL(settings.key.brokerURL).map { $0.origin == url.origin } ?? false
    }
}
