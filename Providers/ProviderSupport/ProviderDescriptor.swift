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

/// What a module may use besides its section: the outbound HTTP transport, the clock, the shared
/// discovery + JWKS cache, and the reading of a secret from the file a key names (`client_secret_file`,
/// `private_key_file`: modules touch no file themselves).
package struct ProviderContext: Sendable {
    package var http: @Sendable () -> any HTTPTransport
    package var clock: any WallClock
    package var directory: IssuerDirectory
    /// The text of the secret file at a path (`~` expanded), without its trailing line break; throws a message
    /// naming what is wrong with it.
    package var readSecretFile: @Sendable (String) throws(ProviderError) -> String

    package init(
        http: @escaping @Sendable () -> any HTTPTransport, clock: any WallClock, directory: IssuerDirectory,
        readSecretFile: @escaping @Sendable (String) throws(ProviderError) -> String = { path throws(ProviderError) in
            throw .invalidResponse("cannot read \(path): no files here")
        }
    ) {
        self.http = http
        self.clock = clock
        self.directory = directory
        self.readSecretFile = readSecretFile
    }

    /// A secret given either in the section (`key`, from the environment or the file) or in the file
    /// `fileKey` names; `nil` when neither is set, an error when both are.
    package func secret(_ section: ProviderSection, _ key: String, file fileKey: String) throws(ProviderError)
        -> Secret?
    {
        switch (section.text(key), section.text(fileKey)) {
        case (let value?, nil): return Secret(value)
        case (nil, let path?):
            do throws(ProviderError) {
                return Secret(try readSecretFile(path))
            } catch {
                throw .invalidResponse("providers.\(section.id).\(fileKey): \(error.reasonText)")
            }
        case (nil, nil): return nil
        case (.some, .some):
            throw .invalidResponse("providers.\(section.id) sets both \(key) and \(fileKey); keep one")
        }
    }
}

extension ProviderError {
    /// The text of a configuration problem, without the "not acceptable" framing.
    package var reasonText: String {
        switch self {
        case .invalidResponse(let why), .unavailable(let why): why
        case .denied(let code, let description): description.isEmpty ? code : description
        }
    }
}
