import BrokerCore
import BrokerEmulators
import BrokerProviderSchemas
import BrokerProviders
import BrokerTesting
import Foundation
import ProviderEmulators
import ProviderSchemaSupport
import ProviderSupport
import Testing

/// Adding a provider is one folder under Providers/ (its module, `Schema/`, `Emulator/`, `production.json`), one
/// line in the manifest's `providers` list, from which the ProviderCatalog plugin writes the three catalogs, and
/// the link Config/providers/<id>.json: this lists the provider folders and fails when one is missing from a
/// catalog or lacks a part.
@Suite("every provider folder is registered")
struct ProviderRegistryTests {
    /// The provider folders: those under Providers/ with a Schema/ of their own.
    static func folders() throws -> [String] {
        let root = TestPaths.repositoryRoot.appendingPathComponent("Providers")
        return try FileManager.default.contentsOfDirectory(atPath: root.path).filter { name in
            FileManager.default.fileExists(
                atPath: root.appendingPathComponent(name).appendingPathComponent("Schema").path)
        }.sorted()
    }

    @Test func eachFolderIsInEveryCatalogWithAllItsParts() throws {
        let folders = try Self.folders()
        #expect(folders.count >= 4, "\(folders)")
        let fromFolders = folders.map { $0.lowercased() }.sorted()
        let descriptors = BrokerProviders.all.map(\.id.rawValue).sorted()
        let schemas = BrokerProviderSchemas.all.map(\.id.rawValue).sorted()
        #expect(descriptors == fromFolders, "BrokerProviders.all has every provider folder (Package.swift providers)")
        #expect(schemas == fromFolders, "BrokerProviderSchemas.all has every one")
        #expect(BrokerEmulators.all.count == folders.count, "BrokerEmulators.all has one emulator per provider")
        let root = TestPaths.repositoryRoot.appendingPathComponent("Providers")
        for folder in folders {
            for part in ["production.json", "Emulator"] {
                let path = root.appendingPathComponent(folder).appendingPathComponent(part).path
                #expect(FileManager.default.fileExists(atPath: path), "Providers/\(folder)/\(part)")
            }
            // Where the contract says production defaults are kept: a link to the folder's file.
            let id = folder.lowercased()
            let link = TestPaths.repositoryRoot.appendingPathComponent("Config/providers/\(id).json").path
            #expect(
                (try? FileManager.default.destinationOfSymbolicLink(atPath: link))
                    == "../../Providers/\(folder)/production.json", "Config/providers/\(id).json")
        }
        // A descriptor's schema is the very schema the configuration loader is given (one definition of its keys).
        for descriptor in BrokerProviders.all {
            let schema = BrokerProviderSchemas.all.first { $0.id == descriptor.id }
            #expect(schema?.displayName == descriptor.schema.displayName, "\(descriptor.id)")
        }
        // The catalogs keep the manifest's order, which is the order people see: all three the same.
        #expect(BrokerProviders.all.map(\.id) == BrokerProviderSchemas.all.map(\.id))
        let emulatorOrder = BrokerEmulators.all.map(\.path)
        #expect(
            emulatorOrder == ["google", "facebook", "microsoft", "twitter", "github", "apple", "oidc"],
            "Package.swift's order")
    }
}
