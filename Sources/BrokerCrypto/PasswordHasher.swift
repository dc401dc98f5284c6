package import BrokerCore
internal import COpenSSL

/// scrypt password hashes (RFC 7914) through OpenSSL, stored as PHC-style strings:
/// `$scrypt$ln=17,r=8,p=1$<salt>$<hash>` (salt and hash in unpadded standard base64).
///
/// The default cost is OWASP's recommended minimum for scrypt (N = 2^17, r = 8, p = 1: 128 MiB, about a
/// quarter of a second on one core of this class of machine). Parameters read back from a stored hash are
/// bounded by ``Limits`` before use, so a hostile or corrupt row cannot make one verification take gigabytes.
package struct PasswordHasher: Sendable {
    package struct Parameters: Sendable, Hashable, CustomStringConvertible {
        /// log2 of the CPU/memory cost N.
        package var logN: Int
        /// Block size r.
        package var r: Int
        /// Parallelism p.
        package var p: Int

        package init(logN: Int, r: Int, p: Int) {
            self.logN = logN
            self.r = r
            self.p = p
        }

        /// OWASP Password Storage Cheat Sheet's scrypt minimum.
        package static let owasp = Parameters(logN: 17, r: 8, p: 1)

        /// Bytes of memory one hash needs: 128 · r · N (plus 128 · r · p, negligible at p = 1).
        package var memoryBytes: Int { 128 * r * (1 << logN) + 128 * r * p }

        package var description: String { "ln=\(logN),r=\(r),p=\(p)" }
    }

    /// Bounds applied to parameters parsed from a stored hash.
    package struct Limits: Sendable {
        package var maxLogN = 20
        package var maxR = 32
        package var maxP = 16
        /// Largest memory one verification may use.
        package var maxMemoryBytes = 256 * 1024 * 1024

        package init() {}
    }

    package enum VerifyError: Error, Sendable, Equatable, CustomStringConvertible {
        /// Not a `$scrypt$` PHC string we can read.
        case malformedHash
        /// Parameters outside ``Limits``: refused without hashing.
        case parametersOutOfBounds(String)

        package var description: String {
            switch self {
            case .malformedHash: "stored password hash is malformed"
            case .parametersOutOfBounds(let params): "stored password hash parameters out of bounds (\(params))"
            }
        }
    }

    package let parameters: Parameters
    package let limits: Limits
    static let saltLength = 16
    static let hashLength = 32

    package init(parameters: Parameters = .owasp, limits: Limits = Limits()) {
        self.parameters = parameters
        self.limits = limits
    }

    /// Hashes `password` with a fresh 128-bit salt.
    package func hash(_ password: Secret) throws -> String {
        let salt = try SecureRandom.bytes(PasswordHasher.saltLength)
        let derived = try PasswordHasher.scrypt(
            password: Array(password.exposed.utf8), salt: salt, parameters: parameters,
            length: PasswordHasher.hashLength)
        return "$scrypt$\(parameters)$\(PasswordHasher.b64(salt))$\(PasswordHasher.b64(derived))"
    }

    /// Checks `password` against a stored hash in constant time.
    ///
    /// - Throws: ``VerifyError`` when the stored string is unreadable or its parameters are out of bounds.
    package func verify(_ password: Secret, against stored: String) throws -> Bool {
        let parsed = try PasswordHasher.parse(stored)
        try check(parsed.parameters)
        let derived = try PasswordHasher.scrypt(
            password: Array(password.exposed.utf8), salt: parsed.salt, parameters: parsed.parameters,
            length: parsed.hash.count)
        return ConstantTime.equals(derived, parsed.hash)
    }

    /// Whether a stored hash was made with weaker parameters than the current ones (rehash on next login).
    package func needsRehash(_ stored: String) -> Bool {
        guard let parsed = try? PasswordHasher.parse(stored) else { return true }
        let old = parsed.parameters
        return old.logN < parameters.logN || old.r < parameters.r || old.p < parameters.p
            || parsed.hash.count < PasswordHasher.hashLength
    }

    private func check(_ params: Parameters) throws {
        guard (1...limits.maxLogN).contains(params.logN), (1...limits.maxR).contains(params.r),
            (1...limits.maxP).contains(params.p), params.memoryBytes <= limits.maxMemoryBytes
        else { throw VerifyError.parametersOutOfBounds(params.description) }
    }

    static func parse(_ stored: String) throws -> (parameters: Parameters, salt: [UInt8], hash: [UInt8]) {
        let fields = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard fields.count == 5, fields[0].isEmpty, fields[1] == "scrypt" else { throw VerifyError.malformedHash }
        var values: [String: Int] = [:]
        for item in fields[2].split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[1].count <= 3, let value = Int(pair[1]), value >= 0 else {
                throw VerifyError.malformedHash
            }
            values[String(pair[0])] = value
        }
        guard values.count == 3, let logN = values["ln"], let r = values["r"], let p = values["p"],
            let salt = unb64(fields[3]), salt.count >= 8, let hash = unb64(fields[4]), (16...64).contains(hash.count)
        else { throw VerifyError.malformedHash }
        return (Parameters(logN: logN, r: r, p: p), salt, hash)
    }

    package static func scrypt(password: [UInt8], salt: [UInt8], parameters: Parameters, length: Int) throws -> [UInt8]
    {
        var out = [UInt8](repeating: 0, count: length)
        let maxMemory = UInt64(parameters.memoryBytes + 1024 * 1024)
        // An empty password still needs a valid pointer.
        let passChars = password.map { CChar(bitPattern: $0) } + [0]
        let ok = passChars.withUnsafeBufferPointer { pass in
            salt.withUnsafeBufferPointer { saltBuffer in
                EVP_PBE_scrypt(
                    pass.baseAddress, password.count, saltBuffer.baseAddress, saltBuffer.count,
                    UInt64(1) << UInt64(parameters.logN), UInt64(parameters.r), UInt64(parameters.p),
                    maxMemory, &out, out.count)
            }
        }
        guard ok == 1 else { throw CryptoError.openSSL("scrypt") }
        return out
    }

    private static func b64(_ bytes: [UInt8]) -> String {
        var text = Base64URL.encodeStandard(bytes)
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    private static func unb64(_ text: Substring) -> [UInt8]? {
        guard !text.contains("-"), !text.contains("_") else { return nil }
        let url = text.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "+"): UInt8(ascii: "-")
            case UInt8(ascii: "/"): UInt8(ascii: "_")
            default: byte
            }
        }
        return Base64URL.decode(url)
    }
}
