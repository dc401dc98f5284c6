import BrokerConfiguration
import BrokerCore
import BrokerStore
import Logging
import ProviderSupport

/// What every service of the broker works with, made once by ``BrokerService``: the token issuer (and through
/// it the configuration, the clock and the signing keys), the store, the log, the metrics and the audit trail.
package struct ServiceContext: Sendable {
    let tokens: TokenIssuer
    let store: any Store
    let logger: Logger
    let metrics: BrokerMetrics
    package let audit: AuditTrail
    /// Apps that describe themselves at their `client_id` URL (set once the service exists; `nil` in a context
    /// made before it).
    var documents: (@Sendable (String) async throws -> AppRecord)?
}

/// A service on the shared ``ServiceContext``: its five companions, and what is derived from them, written
/// once here instead of as the same stored properties in every service.
package protocol ContextualService: Sendable {
    var context: ServiceContext { get }
}

extension ContextualService {
    package var tokens: TokenIssuer { context.tokens }
    var store: any Store { context.store }
    var logger: Logger { context.logger }
    package var metrics: BrokerMetrics { context.metrics }
    var audit: AuditTrail { context.audit }
    /// The injected clock's time, in whole seconds.
    var now: Int64 { context.tokens.now }
    var configuration: ServerConfiguration { context.tokens.configuration }
    var issuer: String { context.tokens.issuer }
    /// Whether the broker is reached over HTTPS (cookies are `Secure` then).
    var secure: Bool { context.tokens.issuer.lowercased().hasPrefix("https://") }

    /// The name people know a provider by (its schema's), for messages and pages.
    func displayName(_ provider: ProviderID) -> String {
        configuration.displayName(provider) ?? provider.rawValue
    }

    /// The registered app `clientID` names, or `nil` for an id no app can have: malformed, or reserved (the
    /// CLI's id or the APIs' audience, RT3-10) even if a store from before the rule holds an app by that name.
    func app(clientID: String) async throws -> AppRecord? {
        guard !tokens.isReservedClientID(clientID) else { return nil }
        if ClientMetadataDocuments.isDocumentURL(clientID), let documents = context.documents {
            return try await documents(clientID)
        }
        guard AppRules.isClientID(clientID) else { return nil }
        return try await store.app(clientID: clientID)
    }
}
