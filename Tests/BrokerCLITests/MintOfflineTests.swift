import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Testing

@Suite("broker mint (offline)")
struct MintOfflineTests {
    static let keyKinds: [(String, [String], JWSAlgorithm)] = [
        ("ec.pem", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], .ES256),
        ("sec1.pem", ["ecparam", "-name", "prime256v1", "-genkey", "-noout"], .ES256),
        ("rsa.pem", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], .RS256),
        ("ed.pem", ["genpkey", "-algorithm", "ed25519"], .EdDSA),
    ]

    @Test("OpenSSL-made keys give ES256, RS256 and EdDSA tokens with every claim", arguments: 0..<4)
    func mintsEachAlgorithm(index: Int) async throws {
        let (name, args, algorithm) = MintOfflineTests.keyKinds[index]
        let dir = try CLIRunner.temporaryDirectory()
        let keyPath = dir.appendingPathComponent(name).path
        try await CLIRunner.openssl(args + ["-out", keyPath])
        // iat is read off the wall clock by the process, somewhere between these two readings of it: bounds taken
        // around the run, not a window, so a machine slow enough to take minutes over it still passes.
        let before = Int64(Date().timeIntervalSince1970)
        let result = try await CLIRunner.run([
            "mint", "--signing-key", keyPath, "--subject", "ci:job-42", "--issuer", "https://ci.example", "--audience",
            "api", "--ttl", "120", "--claim", "team=infra", "--claim", "level=3", "--claim", "tags=[\"a\"]",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty)
        let token = result.stdout.trimmingCharacters(in: .newlines)
        #expect(result.stdout == token + "\n", "raw: the JWT and one newline")

        let pem = try String(contentsOfFile: keyPath, encoding: .utf8)
        let key = try AsymmetricKey(pem: pem)
        var keys = JWTKeySet()
        try keys.add(key)
        let now = Int64(Date().timeIntervalSince1970)
        let verified = try JWTVerifier(keys: keys, options: .init(issuer: "https://ci.example", audience: "api"))
            .verify(token, now: now)
        #expect(verified.algorithm == algorithm)
        let thumbprint = try key.thumbprint()
        #expect(verified.header["typ"] == "JWT" && verified.kid == thumbprint)
        #expect(verified.subject == "ci:job-42")
        #expect(verified["team"] == "infra" && verified["level"] == .int(3) && verified["tags"] == .array(["a"]))
        let iat = try #require(verified.issuedAt)
        #expect((before...now).contains(iat), "iat \(iat) not between \(before) and \(now)")
        #expect(verified["nbf"] == .int(iat) && verified.expiresAt == iat + 120)
        #expect((verified.jwtID?.count ?? 0) >= 16)
    }

    @Test func formats() async throws {
        let dir = try CLIRunner.temporaryDirectory()
        let keyPath = dir.appendingPathComponent("k.pem").path
        try await CLIRunner.openssl(["genpkey", "-algorithm", "ed25519", "-out", keyPath])
        let header = try await CLIRunner.run(["mint", "--signing-key", keyPath, "--subject", "s", "--format", "header"])
        #expect(header.status == 0 && header.stdout.hasPrefix("Authorization: Bearer ey"))
        let json = try await CLIRunner.run(["mint", "--signing-key", keyPath, "--subject", "s", "--format", "json"])
        let document = try #require(JSONValue.parse(Array(json.stdout.utf8)))
        #expect(document["token_type"] == "Bearer" && document["expires_in"] == .int(600))
        #expect(document["claims"]?["sub"] == "s" && document["header"]?["alg"] == "EdDSA")
        #expect(document["access_token"]?.stringValue?.split(separator: ".").count == 3)
    }

    @Test func unusableKeysExitOneNamingTheFile() async throws {
        let dir = try CLIRunner.temporaryDirectory()
        let weak = dir.appendingPathComponent("weak.pem").path
        try await CLIRunner.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", weak])
        let garbage = dir.appendingPathComponent("garbage.pem")
        try Data("this is not a key\n".utf8).write(to: garbage)
        let binary = dir.appendingPathComponent("binary.pem")
        try Data([0xff, 0xfe, 0x00, 0x80]).write(to: binary)
        let publicOnly = dir.appendingPathComponent("public.pem").path
        let ec = dir.appendingPathComponent("ec.pem").path
        try await CLIRunner.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", ec])
        try await CLIRunner.openssl(["pkey", "-in", ec, "-pubout", "-out", publicOnly])
        let p384 = dir.appendingPathComponent("p384.pem").path
        try await CLIRunner.openssl([
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", p384,
        ])
        let encrypted = dir.appendingPathComponent("enc.pem").path
        try await CLIRunner.openssl([
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-aes256", "-pass", "pass:x", "-out",
            encrypted,
        ])

        let fifo = dir.appendingPathComponent("fifo.pem").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let cases: [(String, String)] = [
            (fifo, "not a regular file"),
            (weak, "too small"), (garbage.path, "not a PEM"), (binary.path, "not a PEM"),
            (publicOnly, "public key"), (p384, "P-256"), (encrypted, "encrypted"),
            (dir.appendingPathComponent("missing.pem").path, "No such file"), (dir.path, "not a regular file"),
        ]
        for (path, words) in cases {
            let result = try await CLIRunner.run(["mint", "--signing-key", path, "--subject", "s"])
            #expect(result.status == 1, "\(path): \(result.status) \(result.stderr)")
            #expect(result.stdout.isEmpty)
            #expect(result.stderr.contains(path), "names the file: \(result.stderr)")
            #expect(result.stderr.contains(words), "says why: \(result.stderr)")
            #expect(!result.stderr.contains("Fatal error"))
        }
    }

    @Test(
        "usage errors exit 64",
        arguments: [
            ["mint", "--signing-key", "k.pem"],
            ["mint", "--signing-key", "k.pem", "--subject", "s", "--ttl", "0"],
            ["mint", "--signing-key", "k.pem", "--subject", "s", "--claim", "sub=x"],
            ["mint", "--signing-key", "k.pem", "--subject", "s", "--claim", "novalue"],
            ["mint", "--signing-key", "k.pem", "--subject", "s", "--format", "yaml"],
            ["no-such-command"],
        ])
    func usageErrors(arguments: [String]) async throws {
        let result = try await CLIRunner.run(arguments)
        #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
        #expect(result.stdout.isEmpty)
    }
}
