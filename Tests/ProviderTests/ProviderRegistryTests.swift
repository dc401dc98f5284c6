import BrokerCore
import BrokerProviderSchemas
import BrokerProviders
import BrokerTesting
import Foundation
import ProviderSchemaSupport
import ProviderSupport
import Testing

/// Adding a provider touches several places today (a folder, the manifest's `providers` list, two catalogs, its
/// production defaults): this lists the provider folders and fails on any place one was forgotten.
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

    @Test func eachFolderIsInBothCatalogsWithItsProductionDefaults() throws {
        let folders = try Self.folders()
        #expect(folders.count >= 4, "\(folders)")
        let fromFolders = folders.map { $0.lowercased() }.sorted()
        let descriptors = BrokerProviders.all.map(\.id.rawValue).sorted()
        let schemas = BrokerProviderSchemas.all.map(\.id.rawValue).sorted()
        #expect(descriptors == fromFolders, "Providers/Catalog/BrokerProviders.swift lists every provider folder")
        #expect(schemas == fromFolders, "Providers/Catalog/Schemas/BrokerProviderSchemas.swift lists every one")
        for id in fromFolders {
            let defaults = TestPaths.repositoryRoot.appendingPathComponent("Config/providers/\(id).json")
            #expect(FileManager.default.fileExists(atPath: defaults.path), "Config/providers/\(id).json")
        }
        // A descriptor's schema is the very schema the configuration loader is given (one definition of its keys).
        for descriptor in BrokerProviders.all {
            let schema = BrokerProviderSchemas.all.first { $0.id == descriptor.id }
            #expect(schema?.displayName == descriptor.schema.displayName, "\(descriptor.id)")
        }
    }
}
