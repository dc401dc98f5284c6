package import BrokerCore
package import BrokerHTTPTypes
package import ProviderSchemaSupport

/// A provider module as the broker uses it: its schema (what its configuration section accepts, checked by
/// the configuration loader) and a factory building the module from its checked section.
///
/// The executable hands the broker one list of descriptors (`BrokerProviders.all`) and the configuration the
/// matching list of schemas (`BrokerProviderSchemas.all`); the broker iterates them and never names a
/// provider. Adding a provider is a folder under `Providers/` (its module; its schema in `Schema/`, its emulator in
/// `Emulator/`, its `production.json`, linked from `Config/providers/<id>.json`) and one line in Package.swift's
/// `providers`: the lists are generated.
package struct ProviderDescriptor: Sendable {
    package var schema: ProviderSchema
    /// Builds the module from its (checked) section.
    package var make: @Sendable (ProviderSection, ProviderContext) throws(ProviderError) -> any IdentityProvider

    package init(
        schema: ProviderSchema,
        make: @escaping @Sendable (ProviderSection, ProviderContext) throws(ProviderError) -> any IdentityProvider
    ) {
        self.schema = schema
        self.make = make
    }

    package var id: ProviderID { schema.id }
}

/// What a module may use besides its section: the outbound HTTP transport, the clock, and the shared
/// discovery + JWKS cache.
package struct ProviderContext: Sendable {
    package var http: @Sendable () -> any HTTPTransport
    package var clock: any WallClock
    package var directory: IssuerDirectory

    package init(http: @escaping @Sendable () -> any HTTPTransport, clock: any WallClock, directory: IssuerDirectory) {
        self.http = http
        self.clock = clock
        self.directory = directory
    }
}
