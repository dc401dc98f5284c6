import BrokerConfiguration
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
        #expect(files.count == 7, "\(files)")
        let typed = Set(BrokerProviderSchemas.all.filter(\.typed).map(\.id.rawValue))
        for file in files {
            let value = try #require(JSONValue.parse(Array(try Data(contentsOf: file))), "\(file.lastPathComponent)")
            let urls = ConfigFilesTests.endpoints(in: value)
            // A type of provider (oidc) has no endpoints of its own: each one's issuer names them.
            let folder = file.deletingLastPathComponent().lastPathComponent.lowercased()
            #expect(urls.isEmpty == typed.contains(folder), "\(folder)'s production.json names endpoints")
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
        let sections = value["providers"]?.objectValue ?? [:]
        let listed = Set(sections.filter { $0.value["type"] == nil }.keys)
        let own = BrokerProviders.all.filter { !$0.schema.typed }.map { $0.id.rawValue }
        let known: Set<String> = Set(own).union([ProviderID.custom.rawValue])
        #expect(listed == known)
        // Each type of provider has an example under an id of its own.
        for type in BrokerProviders.all.filter(\.schema.typed).map(\.id.rawValue) {
            #expect(sections.values.contains { $0["type"]?.stringValue == type }, "an example of type \(type)")
        }
        // The example loads: every key it names is one the schemas accept.
        let loaded = try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all, file: (Array(data), "broker.example.json"), environment: [:])
        #expect(loaded.displayName("gitlab") == "GitLab")
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
