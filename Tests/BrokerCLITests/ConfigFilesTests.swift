import BrokerCore
import BrokerProviderSchemas
import BrokerProviders
import BrokerTesting
import Foundation
import ProviderSupport
import Testing

@Suite("Config/ files")
struct ConfigFilesTests {
    static let configDirectory = TestPaths.repositoryRoot.appendingPathComponent("Config")

    /// Every string value under a key that names an endpoint or issuer.
    static func endpoints(in value: JSONValue, key: String = "") -> [String] {
        switch value {
        case .object(let members): return members.flatMap { endpoints(in: $0.value, key: $0.key) }
        case .string(let text)
        where key.hasSuffix("endpoint") || key == "issuer" || key == "jwks_uri" || key == "issuer_template"
            || key == "discovery":
            return [text]
        default: return []
        }
    }

    /// Each provider folder's production endpoints (`Providers/Google/production.json`, …).
    static func productionFiles() throws -> [URL] {
        let providers = TestPaths.repositoryRoot.appendingPathComponent("Providers")
        return try FileManager.default.contentsOfDirectory(atPath: providers.path).map {
            providers.appendingPathComponent($0).appendingPathComponent("production.json")
        }.filter { FileManager.default.fileExists(atPath: $0.path) }
    }

    @Test func productionEndpointsAreValidJSONAndHTTPS() throws {
        let files = try ConfigFilesTests.productionFiles()
        #expect(
            Set(files.map { $0.deletingLastPathComponent().lastPathComponent.lowercased() })
                == Set(BrokerProviders.all.map(\.id.rawValue)))
        #expect(files.count == 4, "\(files)")
        for file in files {
            let value = try #require(JSONValue.parse(Array(try Data(contentsOf: file))), "\(file.lastPathComponent)")
            let urls = ConfigFilesTests.endpoints(in: value)
            #expect(!urls.isEmpty, "\(file.lastPathComponent) names endpoints")
            for url in urls { #expect(url.hasPrefix("https://"), "\(file.lastPathComponent): \(url)") }
        }
    }

    @Test func exampleConfigHasTheContractsKeys() throws {
        let data = try Data(contentsOf: ConfigFilesTests.configDirectory.appendingPathComponent("broker.example.json"))
        let value = try #require(JSONValue.parse(Array(data)))
        for key in [
            "host", "port", "issuer", "data_dir", "audience", "access_token_ttl", "refresh_token_ttl", "mint_max_ttl",
        ] {
            #expect(value["server"]?[key] != nil, "server.\(key)")
        }
        let listed = Set(value["providers"]?.objectValue?.keys.map { $0 } ?? [])
        let known: Set<String> = Set(BrokerProviders.all.map { $0.id.rawValue }).union([ProviderID.custom.rawValue])
        #expect(listed == known)
    }

    /// The configuration is checked against the schema list, the modules are built from the descriptor list: the
    /// two name the same providers in the same order, each descriptor carrying its provider's schema (the same
    /// name, flow and keys with their defaults and kinds).
    @Test func theSchemaListIsTheModulesSchemas() {
        #expect(BrokerProviderSchemas.all.map(\.id) == BrokerProviders.all.map(\.id))
        for (schema, descriptor) in zip(BrokerProviderSchemas.all, BrokerProviders.all) {
            #expect(schema.displayName == descriptor.schema.displayName)
            #expect(schema.flow == descriptor.schema.flow)
            #expect(schema.keys == descriptor.schema.keys, "\(schema.id)")
        }
    }
}
