import BrokerCore
import BrokerTesting
import Foundation

/// Test fixtures: this target's own files and the shared vector files beside the repository.
enum Fixtures {
    static let testsDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let repositoryRoot = testsDirectory.deletingLastPathComponent().deletingLastPathComponent()

    /// `../shared/vectors` beside the checkout (as CI lays it out), or `BROKER_VECTORS` when set.
    static var vectorsDirectory: URL {
        if let override = ProcessInfo.processInfo.environment["BROKER_VECTORS"] {
            return URL(fileURLWithPath: override)
        }
        return repositoryRoot.deletingLastPathComponent().appendingPathComponent("shared/vectors")
    }

    static func local(_ name: String) throws -> Data {
        try Data(contentsOf: testsDirectory.appendingPathComponent("Fixtures").appendingPathComponent(name))
    }

    static func wycheproof(_ name: String) throws -> JSONValue {
        let url = vectorsDirectory.appendingPathComponent("wycheproof/testvectors_v1").appendingPathComponent(name)
        let data = try Data(contentsOf: url)
        guard let value = JSONValue.parse(Array(data)) else { throw FixtureError("\(name) is not JSON") }
        return value
    }

    static func rfcVectors() throws -> JSONValue {
        guard let value = JSONValue.parse(Array(try local("rfc-vectors.json"))) else {
            throw FixtureError("rfc-vectors.json is not JSON")
        }
        return value
    }
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension JSONValue {
    /// Decodes this value as `T` through JSON.
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONDecoder().decode(T.self, from: Data(serialized().utf8))
    }
}

func hexBytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        guard let byte = UInt8(hex[index..<next], radix: 16) else { preconditionFailure("not hex: \(hex)") }
        out.append(byte)
        index = next
    }
    return out
}

enum JSONEncoderShim {
    static func encode<T: Encodable>(_ value: T) throws -> Data { try JSONEncoder().encode(value) }
}
