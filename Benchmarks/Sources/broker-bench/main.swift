import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import Glibc
import Logging

/// Measures JWS signature operations per second on one core, for comparison with `openssl speed`, and the
/// per-request work around them that issue 35 made cheaper (a token's claims written as JSON, a mint's form
/// body decoded), so that a change to either is measured on its own, on one core, without HTTP's noise.
///
/// It also measures the SQLite store's own CPU for a refresh grant (one rotation at a time, nothing else running
/// in the process): what `Benchmarks/floor.sh` adds to a refresh grant's floor.
///
/// Usage: broker-bench [seconds-per-measurement]   (prints one TSV line per measurement)
///
///        broker-bench sessions DATABASE EMAIL COUNT OUT
///            starts COUNT sessions of the password account EMAIL in the SQLite file DATABASE, through the store
///            call a sign-in makes (`createSession`: a session and its first refresh token, stored as its hash),
///            and writes their refresh tokens to OUT (0600), one per line: `Benchmarks/memory.sh` measures a
///            broker with 100,000 live sessions, which sign-ins at scrypt's cost would take hours to make.
if CommandLine.arguments.count == 6, CommandLine.arguments[1] == "sessions" {
    try await startSessions(
        database: CommandLine.arguments[2], email: CommandLine.arguments[3],
        count: Int(CommandLine.arguments[4]) ?? 0, out: CommandLine.arguments[5])
    exit(0)
}
let seconds = Double(CommandLine.arguments.dropFirst().first ?? "") ?? 3

func startSessions(database: String, email: String, count: Int, out: String) async throws {
    guard count > 0 else { fatalError("broker-bench sessions: COUNT must be a whole number above 0") }
    let store = try SQLiteStore(path: database)
    guard let account = try await store.passwordAccount(email: email) else {
        fatalError("broker-bench sessions: no password account \(email) in \(database)")
    }
    let descriptor = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600)
    guard descriptor >= 0, let file = fdopen(descriptor, "w") else {
        fatalError("broker-bench sessions: cannot create \(out)")
    }
    let now = Int64(time(nil))
    // Sixteen at a time, as sign-ins arriving together would be.
    try await withThrowingTaskGroup(of: [String].self) { group in
        for part in 0..<16 {
            group.addTask {
                var tokens: [String] = []
                for _ in stride(from: part, to: count, by: 16) {
                    let id = try SecureRandom.argumentSafeToken(byteCount: 16)
                    let token = try SecureRandom.token(byteCount: 32)
                    try await store.createSession(
                        SessionRecord(
                            id: id, userID: account.user.id, clientID: "broker-cli", scope: nil, createdAt: now,
                            revokedAt: nil, signedInWith: "custom"),
                        firstToken: RefreshTokenRecord(
                            hash: Digest.sha256(token), sessionID: id, createdAt: now, expiresAt: now + 30 * 86_400))
                    tokens.append(token)
                }
                return tokens
            }
        }
        for try await tokens in group {
            for token in tokens { fputs(token + "\n", file) }
        }
    }
    fclose(file)
    await store.close()
}

func measure(_ body: () throws -> Void) rethrows -> Double {
    // Warm up, then count whole iterations until the time is up.
    for _ in 0..<50 { try body() }
    let clock = ContinuousClock()
    let start = clock.now
    let limit = Duration.milliseconds(Int(seconds * 1000))
    var count = 0
    var elapsed = Duration.zero
    while elapsed < limit {
        for _ in 0..<20 { try body() }
        count += 20
        elapsed = clock.now - start
    }
    let (whole, atto) = elapsed.components
    return Double(count) / (Double(whole) + Double(atto) / 1e18)
}

let now: Int64 = 1_800_000_000
let claims: [String: JSONValue] = [
    "iss": "http://127.0.0.1:8787", "sub": "custom:7d1c3f4e-9f53-4d55-8f43-0c6c1a3b7e21", "aud": "broker",
    "iat": .int(now), "nbf": .int(now), "exp": .int(now + 3600), "jti": "6nJ3dF1xq0v5Yt2kP9sLhA", "idp": "custom",
    "client_id": "broker-cli",
]

print("measurement\tops_per_second")
let claimsObject = JSONValue.object(claims)
let serialize = measure { precondition(!claimsObject.serializedBytes.isEmpty) }
print("claims_json_serialize\t\(Int(serialize))")
let form = Array("grant_type=client_credentials&scope=deploy+read&audience=https%3A%2F%2Fapi.example.com".utf8)
let decode = measure { precondition(FormEncoding.decode(String(decoding: form, as: UTF8.self))?.count == 3) }
print("form_decode\t\(Int(decode))")
// What every request does to its logger and mostly nothing more at the broker's usual level: Hummingbird sets
// the request id as metadata, and a debug line is not written.
struct DiscardingHandler: LogHandler {
    var logLevel: Logger.Level = .error
    var metadata: Logger.Metadata = [:]
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {}
}
let requestLogger = Logger(label: "bench") { _ in VisibleLogHandler(DiscardingHandler()) }
let requestID = "4f2a9c1e0b7d4e8a9c1e0b7d4e8a9c1e"
let metadata = measure {
    var logger = requestLogger
    logger[metadataKey: "hb.request.id"] = .stringConvertible(requestID)
    logger.debug("not written")
    precondition(logger.logLevel == .error)
}
print("logger_request_id_metadata\t\(Int(metadata))")
fflush(nil)
for kind in [KeyKind.ecP256, .rsa(bits: 2048), .ed25519] {
    let key = try AsymmetricKey.generate(kind)
    let signer = try JWTSigner(key: key)
    let token = try signer.sign(claims: claims, type: "at+jwt")
    guard let dot = token.lastIndex(of: "."), let signature = Base64URL.decode(token[token.index(after: dot)...])
    else { fatalError("a signed token has a signature") }
    let message = Array(token[..<dot].utf8)
    let publicKey = try key.publicKey()
    var keys = JWTKeySet()
    try keys.add(key)
    let verifier = JWTVerifier(keys: keys, options: .init(issuer: "http://127.0.0.1:8787", audience: "broker"))
    let alg = kind.algorithm.rawValue

    let sign = try measure { _ = try key.sign(message) }
    print("\(alg)_sign\t\(Int(sign))")
    let verify = measure { precondition(publicKey.verify(signature: signature, message: message)) }
    print("\(alg)_verify\t\(Int(verify))")
    let jwtSign = try measure { _ = try signer.sign(claims: claims, type: "at+jwt") }
    print("\(alg)_jwt_sign\t\(Int(jwtSign))")
    let jwtVerify = try measure { _ = try verifier.verify(token, now: now) }
    print("\(alg)_jwt_verify\t\(Int(jwtVerify))")
    fflush(nil)
}

/// The process's CPU time so far (user + system, every thread: GRDB's queues included).
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

// A refresh grant's store call on SQLite (a file in a temporary folder, WAL, as `broker serve` opens it): spend a
// token and store its successor — sixteen chains at once, as the floor's sixteen connections present them (one at
// a time, every call would pay for waking GRDB's writer thread, which a loaded broker does not); rotations per
// second of the process's CPU.
var template = Array("/tmp/broker-bench.XXXXXX".utf8CString)
guard let folder = mkdtemp(&template).map({ String(cString: $0) }) else { fatalError("mkdtemp failed") }
defer { _ = system("rm -rf '\(folder)'") }
let store = try SQLiteStore(path: folder + "/broker.sqlite3")
guard
    case .user(let user) = try await store.signIn(
        IdentityRecord(provider: "google", subject: "bench", email: nil, name: nil), now: now)
else { fatalError("no user") }
let chains = 16
for chain in 0..<chains {
    let session = SessionRecord(
        id: "bench-\(chain)", userID: user.id, clientID: "broker-cli", scope: "openid", createdAt: now,
        revokedAt: nil, signedInWith: nil)
    try await store.createSession(
        session,
        firstToken: RefreshTokenRecord(
            hash: Digest.sha256(Array("\(chain).0".utf8)), sessionID: session.id, createdAt: now,
            expiresAt: now + 3600))
}
/// Rotates chain `chain` from its `step`th token until `deadline`; returns the rotations done.
@Sendable func rotating(_ chain: Int, from step: Int, until deadline: ContinuousClock.Instant) async throws -> Int {
    var step = step
    repeat {
        let next = Digest.sha256(Array("\(chain).\(step + 1)".utf8))
        guard
            case .rotated = try await store.rotateRefreshToken(
                hash: Digest.sha256(Array("\(chain).\(step)".utf8)), nextHash: next, nextExpiresAt: now + 3600,
                now: now)
        else { fatalError("the rotation was refused") }
        step += 1
    } while ContinuousClock.now < deadline
    return step
}
/// Rotates every chain from its step until `duration` has passed; the steps reached.
func rotateAll(from steps: [Int], for duration: Duration) async throws -> [Int] {
    let deadline = ContinuousClock.now + duration
    return try await withThrowingTaskGroup(of: (Int, Int).self) { group in
        for chain in 0..<chains {
            let start = steps[chain]
            group.addTask { (chain, try await rotating(chain, from: start, until: deadline)) }
        }
        var reached = steps
        for try await (chain, last) in group { reached[chain] = last }
        return reached
    }
}
let warm = try await rotateAll(from: [Int](repeating: 0, count: chains), for: .milliseconds(200))
let cpuBefore = processCPUSeconds()
let done = try await rotateAll(from: warm, for: .milliseconds(Int(seconds * 1000)))
let cpuSpent = processCPUSeconds() - cpuBefore
let rotations = zip(done, warm).reduce(0) { $0 + $1.0 - $1.1 }
print("sqlite_rotate_refresh_token_per_cpu_second\t\(Int(Double(rotations) / cpuSpent))")
await store.close()
